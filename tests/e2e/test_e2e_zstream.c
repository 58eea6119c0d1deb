/* Compressed leaves over the wire, against the real chimed: a stream-mode
 * learner of a table that compresses obs receives batches byte for byte
 * the same as an shm learner of the same table and of a raw one, while
 * the bytes it received are exactly the frames as stored plus the raw
 * leaves and each batch's offsets and info, packed (replay/ztail.h;
 * docs/replay.md, "Compressed leaves"); a learner that keeps obs
 * compressed gets each sample's stored bytes, which libzstd decompresses to the
 * sample (or, for a frame of noise kept raw, the sample itself), in shm and
 * stream mode; a keep list naming a leaf the table does not compress is
 * refused. Stats and GetInfo count obs' bytes raw, as stored and kept raw (the
 * noise), adding up to the table's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "chime/chime.h"
#include "chime/ring.h"
#include "harness.h"
#include "streams.h"
#include "replay/ztail.h"

#define SIDE 84
#define FRAME (SIDE * SIDE)
#define N 64
#define BATCH 16

#define TABLE(name, extra)                                                     \
  "{\"name\": \"" name "\", \"spec\": \"obs:u8[84,84], action:i32[], "         \
  "reward:f32[]\", \"capacity\": 256, \"min_size\": 1, \"sampler\": "          \
  "\"fifo\"" extra "}"

/* Frames stored once: single frames as steps, windows of T = 4 over them,
 * padded at an episode's end. */
#define T 4
#define SEQ(name, extra)                                                       \
  "{\"name\": \"" name "\", \"spec\": \"obs:u8[84,84], id:u32[]\", "           \
  "\"capacity_steps\": 256, \"sequence_length\": 4, \"stride\": 1, "           \
  "\"episode_end\": \"pad\", \"min_size\": 1, \"sampler\": \"fifo\"" extra "}"

#define Z3 ", \"compress\": {\"obs\": 3}"

static const char *config =
    "{\"tables\": [" TABLE("z", Z3) ",\n" TABLE("z2", Z3) ",\n" TABLE(
        "raw", "") ",\n" SEQ("zs", Z3) ",\n" SEQ("zs2",
                                                 Z3) ",\n" SEQ("rs", "") "]}\n";

CHIME__CHIMED_GROUP(config)

/* Sample i's frame: a paddle and a ball on a dark field (compresses well),
 * or every eighth one noise (kept raw: no frame is smaller). */
static void frame_of(uint64_t i, uint8_t *f) {
  memset(f, 17, FRAME);
  if (i % 8 == 7) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
    for (size_t k = 0; k < FRAME; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f[k] = (uint8_t)x;
    }
    return;
  }
  for (int y = 0; y < 12; y++)
    memset(f + (size_t)(10 + (i * 3 + (size_t)y) % 60) * SIDE + 4, 200, 3);
  size_t by = 5 + (i * 7) % 70, bx = 5 + (i * 11) % 70;
  for (int y = 0; y < 2; y++)
    memset(f + (by + (size_t)y) * SIDE + bx, 236, 2);
}

static void write_obs_frames(const char *table) {
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, table, NULL), 0);
  static uint8_t f[FRAME];
  for (uint64_t i = 0; i < N; i++) {
    int32_t a = (int32_t)i;
    float r = (float)i / 2;
    frame_of(i, f);
    const void *leaves[3] = {f, &a, &r};
    assert_int_equal(chime_writer_append_leaves(w, leaves, NULL, 1.0), 0);
  }
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), N);
  assert_int_equal(chime_writer_close(w), 0);
}

/* A stream of 4 slots on table in mode (no fallback), batches of batch,
 * keeping keep compressed. */
static chime_stream_t *open_keeping(const char *table, chime_mode_t mode,
                                    const char *keep, uint32_t batch) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.keep_compressed = keep;
  chime_stream_t *s = chime__open_stream(client, table, mode, batch, 4, &so);
  assert_int_equal(chime_stream_mode(s), mode);
  return s;
}

/* A table of N samples' obs as Stats and GetInfo count it: raw, every
 * eighth (noise) kept raw, and the table's stored bytes its obs' and the
 * raw leaves'. */
static void check_leaf_bytes(const chime_leaf_bytes_t *b, uint64_t stored) {
  assert_string_equal(b->leaf, "obs");
  assert_int_equal(b->level, 3);
  assert_int_equal(b->raw_bytes, (uint64_t)N * FRAME);
  assert_int_equal(b->stored_raw, N / 8);
  assert_int_equal(b->stored_bytes + (uint64_t)N * 8, stored);
}

/* The table's stored bytes (frames, their u32 sizes and the raw leaves),
 * its obs' figures checked in Stats and GetInfo. */
static uint64_t stored_bytes(const char *table) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  uint64_t b = UINT64_MAX;
  chime_leaf_bytes_t lb;
  for (uint32_t i = 0; i < st->ntables; i++)
    if (strcmp(st->tables[i].name, table) == 0) {
      b = st->tables[i].stored_bytes;
      assert_int_equal(st->tables[i].nleaf_bytes, 1);
      lb = st->tables[i].leaf_bytes[0];
    }
  chime_stats_free(st);
  assert_true(b != UINT64_MAX);
  check_leaf_bytes(&lb, b);
  chime_server_info_t *in = NULL;
  assert_int_equal(chime_client_info(client, &in), 0);
  for (uint32_t i = 0; i < in->ntables; i++)
    if (strcmp(in->tables[i].name, table) == 0) {
      assert_int_equal(in->tables[i].nleaf_bytes, 1);
      check_leaf_bytes(&in->tables[i].leaf_bytes[0], b);
    } else if (strcmp(in->tables[i].name, "raw") == 0) {
      assert_int_equal(in->tables[i].nleaf_bytes, 0);
    }
  chime_server_info_free(in);
  return b;
}

/* A batch's leaves copied out: obs, action, reward of its BATCH samples. */
typedef struct {
  uint8_t obs[BATCH * FRAME];
  int32_t action[BATCH];
  float reward[BATCH];
} batch_copy_t;

/* Sample i's obs as the table stores it: its frame at level 3 (as the
 * writer makes it), or the frame itself when no frame is smaller. */
static uint64_t stored_of(uint64_t i) {
  static uint8_t f[FRAME], z[FRAME];
  frame_of(i, f);
  size_t k = ZSTD_compress(z, FRAME - 1, f, FRAME, 3);
  return ZSTD_isError(k) ? FRAME : k;
}

/* The bytes a framed batch's tail takes on the wire (replay/ztail.h):
 * the server's slot (its spec wspec, batch samples) tail, its first
 * leaf's offsets as its samples' stored sizes (sizes[j]) say, then the
 * batch's info, packed as chimed packs it. */
static uint64_t packed_tail(const char *wspec, uint32_t batch,
                            const uint64_t *sizes, const chime_batch_t *bt) {
  chime_spec_t ws;
  chime_ring_layout_t wl;
  assert_int_equal(chime_spec_parse(&ws, wspec), 0);
  assert_int_equal(chime_ring_layout_compute(&wl, &ws, batch, 4), 0);
  size_t ninfo = batch * sizeof(chime_sample_info_t);
  size_t n = (size_t)(wl.info_offset + ninfo - wl.offsets_offset[0]);
  uint8_t *tail = calloc(1, n), *scratch = malloc(n);
  uint8_t *packed = malloc(chime__ztail_bound(n));
  assert_true(tail && scratch && packed);
  int64_t at = 0;
  for (uint32_t j = 0; j <= batch; j++) {
    memcpy(tail + 8 * j, &at, 8);
    at += j < batch ? (int64_t)sizes[j] : 0;
  }
  memcpy(tail + (wl.info_offset - wl.offsets_offset[0]), bt->info, ninfo);
  size_t out = 0;
  assert_int_equal(chime__ztail_pack(packed, tail, n, ninfo, scratch, &out), 0);
  free(tail);
  free(scratch);
  free(packed);
  return out;
}

/* Every batch (fifo: in insert order) copied out; *tails, when asked,
 * what their tails took on the wire packed. */
static void take_all(chime_stream_t *s, batch_copy_t *out, uint64_t *tails) {
  for (int b = 0; b < N / BATCH; b++) {
    chime_batch_t bt;
    assert_int_equal(chime_stream_next(s, &bt, 20000), 0);
    uint64_t sizes[BATCH];
    for (uint32_t j = 0; j < BATCH; j++)
      sizes[j] = stored_of((uint64_t)b * BATCH + j);
    if (tails != NULL)
      *tails += packed_tail("obs:u8[<=7056], action:i32[], reward:f32[]", BATCH,
                            sizes, &bt);
    const chime_batch_leaf_t *o = chime_batch_leaf(&bt, "obs");
    assert_non_null(o);
    assert_null(o->offsets);
    assert_int_equal(o->shape[0], BATCH);
    memcpy(out[b].obs, o->data, sizeof(out[b].obs));
    memcpy(out[b].action, chime_batch_leaf(&bt, "action")->data,
           sizeof(out[b].action));
    memcpy(out[b].reward, chime_batch_leaf(&bt, "reward")->data,
           sizeof(out[b].reward));
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
}

static void test_stream_same_as_shm(void **state) {
  (void)state;
  static batch_copy_t zs[N / BATCH], z2[N / BATCH], raw[N / BATCH];
  write_obs_frames("z");
  write_obs_frames("z2");
  write_obs_frames("raw");
  uint64_t stored = stored_bytes("z");
  chime_stream_t *s = open_keeping("z", CHIME_MODE_STREAM, NULL, BATCH);
  uint64_t tails = 0;
  take_all(s, zs, &tails);
  chime_stream_local_stats_t ls;
  assert_int_equal(chime_stream_stats(s, &ls), 0);
  chime_stream_close(s);
  s = open_keeping("z2", CHIME_MODE_SHM, NULL, BATCH);
  take_all(s, z2, NULL);
  chime_stream_close(s);
  s = open_keeping("raw", CHIME_MODE_STREAM, NULL, BATCH);
  take_all(s, raw, NULL);
  chime_stream_close(s);
  assert_memory_equal(zs, z2, sizeof(zs));
  assert_memory_equal(zs, raw, sizeof(zs));
  static uint8_t f[FRAME];
  for (uint64_t i = 0; i < N; i++) { /* fifo: in insert order */
    frame_of(i, f);
    assert_memory_equal(zs[i / BATCH].obs + (i % BATCH) * FRAME, f, FRAME);
    assert_int_equal(zs[i / BATCH].action[i % BATCH], (int32_t)i);
  }
  /* On the wire: each frame as stored (its u32 size is the offsets'
   * business), the raw leaves, and per batch its tail (the offsets and
   * info) packed. */
  uint64_t frames = 0;
  for (uint64_t i = 0; i < N; i++)
    frames += stored_of(i);
  assert_int_equal(stored, frames + (uint64_t)N * (4 + 8));
  assert_int_equal(ls.received_bytes, stored - 4 * N + tails);
  /* The packed tails: far below the info they carry. */
  assert_true(tails * 2 < (uint64_t)N * sizeof(chime_sample_info_t));
  /* The frames shrink the batch: far below the raw leaves'. */
  assert_true(ls.received_bytes * 4 < (uint64_t)N * (FRAME + 8));
  printf("# wire %llu bytes for %d samples (stored %llu, raw %d; tails "
         "%llu)\n",
         (unsigned long long)ls.received_bytes, N, (unsigned long long)stored,
         N * (FRAME + 8), (unsigned long long)tails);
}

/* Sample i's stored bytes as kept: a frame of sample i, or the sample. */
static void check_kept(const chime_batch_t *bt, uint64_t first) {
  const chime_batch_leaf_t *o = chime_batch_leaf(bt, "obs");
  assert_non_null(o);
  assert_non_null(o->offsets);
  assert_int_equal(o->dtype, CHIME_DTYPE_U8);
  static uint8_t f[FRAME], got[FRAME];
  for (uint32_t j = 0; j < BATCH; j++) {
    uint64_t i = first + j;
    const uint8_t *p = (const uint8_t *)o->data + o->offsets[j];
    size_t n = (size_t)(o->offsets[j + 1] - o->offsets[j]);
    frame_of(i, f);
    if (i % 8 == 7) { /* noise: kept raw */
      assert_int_equal(n, FRAME);
      assert_memory_equal(p, f, FRAME);
      continue;
    }
    assert_true(n < FRAME / 8);
    assert_int_equal(ZSTD_getFrameContentSize(p, n), FRAME);
    assert_int_equal(ZSTD_decompress(got, FRAME, p, n), FRAME);
    assert_memory_equal(got, f, FRAME);
  }
  assert_int_equal(((const int32_t *)chime_batch_leaf(bt, "action")->data)[0],
                   (int32_t)first);
}

static void keep_in(chime_mode_t mode) {
  write_obs_frames("z");
  chime_stream_t *s = open_keeping("z", mode, "obs", BATCH);
  for (int b = 0; b < N / BATCH; b++) {
    chime_batch_t bt;
    assert_int_equal(chime_stream_next(s, &bt, 20000), 0);
    check_kept(&bt, (uint64_t)b * BATCH);
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
  chime_stream_close(s);
}

static void test_keep_compressed_shm(void **state) {
  (void)state;
  keep_in(CHIME_MODE_SHM);
}

static void test_keep_compressed_stream(void **state) {
  (void)state;
  keep_in(CHIME_MODE_STREAM);
}

static void test_keep_refused(void **state) {
  (void)state;
  const char *bad[] = {"action", "nope", "obs,,action", "raw"};
  const char *table[] = {"z", "z", "z", "raw"};
  for (int k = 0; k < 4; k++) {
    chime_stream_t *s = NULL;
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = BATCH;
    so.mode = CHIME_MODE_STREAM;
    so.keep_compressed = strcmp(bad[k], "raw") == 0 ? "obs" : bad[k];
    assert_int_equal(chime_stream_open(&s, client, table[k], &so),
                     CHIME_EINVAL);
    assert_null(s);
    assert_non_null(strstr(chime_last_error(), "keep_compressed"));
  }
}

/* Episodes of 2, 1, 3 and 6 steps (frames 0..11): one padded window
 * each for the first three, three whole ones for the last. */
#define WINDOWS 6
static const uint32_t episode_steps[] = {2, 1, 3, 6};

static void insert_steps(const char *table) {
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, table, NULL), 0);
  static uint8_t f[FRAME];
  uint32_t id = 0;
  for (size_t e = 0; e < sizeof(episode_steps) / sizeof(*episode_steps); e++) {
    for (uint32_t i = 0; i < episode_steps[e]; i++, id++) {
      frame_of(id, f);
      const void *leaves[2] = {f, &id};
      assert_int_equal(chime_writer_append_leaves(w, leaves, NULL, 1.0), 0);
    }
    assert_int_equal(chime_writer_end_episode(w), 0);
  }
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_close(w), 0);
}

typedef struct {
  uint8_t obs[WINDOWS * T * FRAME];
  uint32_t id[WINDOWS * T];
  uint8_t mask[WINDOWS * T];
} windows_t;

/* The table's WINDOWS windows in one batch; *wire, when asked, the bytes
 * it should take in stream mode: per window T u32 stored sizes and its
 * real steps' stored bytes, the ids and mask, and the packed tail. */
static uint64_t take_windows(const char *table, chime_mode_t mode,
                             windows_t *out, uint64_t *wire) {
  chime_stream_t *s = open_keeping(table, mode, NULL, WINDOWS);
  chime_batch_t bt;
  assert_int_equal(chime_stream_next(s, &bt, 20000), 0);
  memcpy(out->obs, chime_batch_leaf(&bt, "obs")->data, sizeof(out->obs));
  memcpy(out->id, chime_batch_leaf(&bt, "id")->data, sizeof(out->id));
  memcpy(out->mask, chime_batch_leaf(&bt, "mask")->data, sizeof(out->mask));
  uint64_t sizes[WINDOWS];
  for (uint32_t w = 0; w < WINDOWS; w++) {
    sizes[w] = 4 * T;
    for (uint32_t i = 0; i < T; i++)
      sizes[w] += out->mask[w * T + i] ? stored_of(out->id[w * T + i]) : 0;
  }
  if (wire != NULL) {
    *wire = packed_tail("obs:u8[<=28240], id:u32[4], mask:u8[4]", WINDOWS,
                        sizes, &bt) +
            (uint64_t)WINDOWS * T * (4 + 1);
    for (uint32_t w = 0; w < WINDOWS; w++)
      *wire += sizes[w];
  }
  assert_int_equal(chime_stream_release(s, &bt), 0);
  chime_stream_local_stats_t ls;
  assert_int_equal(chime_stream_stats(s, &ls), 0);
  chime_stream_close(s);
  return ls.received_bytes;
}

/* A sequence table's windows in stream mode travel as their steps are
 * stored (docs/protocol.md, stream mode, "A window's frames"): the
 * learner gets the windows an shm learner of the same table and a
 * stream learner of a raw one get, byte for byte, padded steps zero
 * under a mask of 0, for exactly the stored bytes. */
static void test_sequence_windows(void **state) {
  (void)state;
  static windows_t zs, zs2, rs;
  insert_steps("zs");
  insert_steps("zs2");
  insert_steps("rs");
  uint64_t want = 0;
  uint64_t got = take_windows("zs", CHIME_MODE_STREAM, &zs, &want);
  take_windows("zs2", CHIME_MODE_SHM, &zs2, NULL);
  uint64_t raw = take_windows("rs", CHIME_MODE_STREAM, &rs, NULL);
  assert_memory_equal(&zs, &zs2, sizeof(zs));
  assert_memory_equal(&zs, &rs, sizeof(zs));
  static const uint8_t mask[WINDOWS * T] = {1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0,
                                            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_memory_equal(zs.mask, mask, sizeof(mask));
  static uint8_t f[FRAME], zero[FRAME];
  for (uint32_t i = 0; i < WINDOWS * T; i++) {
    frame_of(zs.id[i], f);
    assert_memory_equal(zs.obs + (size_t)i * FRAME, zs.mask[i] ? f : zero,
                        FRAME);
  }
  assert_int_equal(got, want);
  assert_true(got * 10 < raw);
  printf("# windows: wire %llu bytes, raw stream %llu\n",
         (unsigned long long)got, (unsigned long long)raw);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_same_as_shm),
      cmocka_unit_test(test_keep_compressed_shm),
      cmocka_unit_test(test_keep_compressed_stream),
      cmocka_unit_test(test_keep_refused),
      cmocka_unit_test(test_sequence_windows),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
