/* Writers that compress (docs/replay.md, "Compressed leaves"; docs/protocol.md,
 * InsertRequest stored_leaves/stored) against the real chimed: a writer
 * compresses the leaves its table compresses before sending, and its samples
 * come back byte for byte in shm and stream mode, straight and after waiting
 * for room (staged), with the insert traffic cut by the frames' ratio
 * (bytes the writer sent, against a writer that sends raw, whose samples
 * chimed compresses itself). Raw Insert messages carrying stored leaves the
 * writer would never send: a frame that is not zstd, one of another size, a
 * bomb, a stored size past the leaf, a leaf the table keeps raw: each
 * INVALID_ARGUMENT naming the leaf, nothing of the request stored, and the
 * server serves on. A sequence table's steps and a compressed ragged
 * leaf's rows (at each sample's length) are compressed by the writer too,
 * and checked alike (a ragged leaf's frame must make exactly its rows).
 * Over two shards: a sharded client's writers compress
 * as one server's do, and a table the shards compress unlike is refused by
 * name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "streams.h"
#include "rawcall.h"

#define SIDE 84
#define FRAME (SIDE * SIDE)
#define N 96

static const char *config =
    "{\"tables\": [{\"name\": \"z\", \"spec\": \"obs:u8[84,84], id:u32[]\", "
    "\"capacity\": 4096, \"min_size\": 1, \"sampler\": \"fifo\", "
    "\"compress\": {\"obs\": 3}},\n"
    "  {\"name\": \"small\", \"spec\": \"obs:u8[84,84], id:u32[]\", "
    "\"capacity\": 8, \"min_size\": 1, \"sampler\": \"fifo\", "
    "\"compress\": {\"obs\": 1}},\n"
    "  {\"name\": \"rag\", \"spec\": \"tok:i32[<=16], obs:u8[84,84], "
    "id:u32[]\", \"capacity\": 64, \"min_size\": 1, \"sampler\": \"fifo\", "
    "\"compress\": {\"obs\": 3}},\n"
    "  {\"name\": \"zseq\", \"spec\": \"obs:u8[84,84], id:u32[]\", "
    "\"capacity_steps\": 256, \"sequence_length\": 4, \"stride\": 1, "
    "\"min_size\": 1, \"sampler\": \"fifo\", \"compress\": {\"obs\": 3}},\n"
    "  {\"name\": \"zr\", \"spec\": \"obs:u8[<=4,84,84], id:u32[]\", "
    "\"capacity\": 64, \"min_size\": 1, \"sampler\": \"fifo\", "
    "\"compress\": {\"obs\": 3}}]}\n";

CHIME__CHIMED_GROUP(config)

/* Frame i: a flat background and two boxes that move with i, as a simple
 * game's screen (compresses some 40x at level 3); every 16th is noise,
 * which does not compress and goes raw. */
static void frame(uint32_t i, uint8_t *f) {
  if (i % 16 == 15) {
    uint32_t x = i * 2654435761u + 1;
    for (int k = 0; k < FRAME; k++) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      f[k] = (uint8_t)x;
    }
    return;
  }
  memset(f, 40, FRAME);
  for (int y = 10 + (int)(i % 60); y < 18 + (int)(i % 60); y++)
    memset(f + y * SIDE + 5, 200, 8);
  for (int y = 70; y < 74; y++)
    memset(f + y * SIDE + (3 * i) % 76, 120, 8);
}

static chime_writer_t *open_writer_on(chime_client_t *c, const char *table,
                                      int compress) {
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 16;
  o.compress = compress;
  chime_writer_t *w = NULL;
  if (chime_writer_open(&w, c, table, &o) != 0)
    fail_msg("writer %s: %s", table, chime_last_error());
  return w;
}

static chime_writer_t *open_writer(const char *table, int compress) {
  return open_writer_on(client, table, compress);
}

/* Appends frames first..first+n-1, id = frame number. */
static void append_frames(chime_writer_t *w, uint32_t first, uint32_t n) {
  uint8_t s[FRAME + 4];
  for (uint32_t i = first; i < first + n; i++) {
    frame(i, s);
    memcpy(s + FRAME, &i, 4);
    if (chime_writer_append(w, s, sizeof(s), 1.0) != 0)
      fail_msg("append %u: %s", i, chime_last_error());
  }
}

/* A stream of c's table in mode, batches of batch, and its first batch
 * in *b. */
static chime_stream_t *open_and_take(chime_client_t *c, const char *table,
                                     chime_mode_t mode, uint32_t batch,
                                     chime_batch_t *b) {
  chime_stream_t *s = chime__open_stream(c, table, mode, batch, 4, NULL);
  if (chime_stream_next(s, b, 20000) != 0)
    fail_msg("next (%s): %s", chime_mode_name(mode), chime_last_error());
  return s;
}

/* Reads n samples of table from c (fifo: ids first.. in order; first
 * UINT32_MAX: any) in mode, each frame byte for byte as its id's. */
static void consume_from(chime_client_t *c, const char *table,
                         chime_mode_t mode, uint32_t first, uint32_t n) {
  chime_stream_t *s = chime__open_stream(c, table, mode, 8, 4, NULL);
  uint8_t want[FRAME];
  for (uint32_t got = 0; got < n; got += 8) {
    chime_batch_t b;
    if (chime_stream_next(s, &b, 20000) != 0)
      fail_msg("next (%s): %s", chime_mode_name(mode), chime_last_error());
    const uint8_t *obs = chime_batch_leaf(&b, "obs")->data;
    const uint32_t *id = chime_batch_leaf(&b, "id")->data;
    for (uint32_t j = 0; j < b.count; j++) {
      if (first != UINT32_MAX)
        assert_int_equal(id[j], first + got + j);
      frame(id[j], want);
      if (memcmp(obs + (size_t)j * FRAME, want, FRAME) != 0)
        fail_msg("%s: frame %u differs", chime_mode_name(mode), id[j]);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

static void consume(const char *table, chime_mode_t mode, uint32_t first,
                    uint32_t n) {
  consume_from(client, table, mode, first, n);
}

/* The writer compresses what the table does, the samples come back as
 * written in both modes, and it sent a fraction of what a raw writer of the
 * same frames sent; the table holds them alike either way. */
/* Frames 0..N-1 into "z" by a writer (compress on or off) that says it
 * compresses `says`: the bytes it sent. */
static uint64_t write_frames(int compress, const char *says) {
  char zs[64];
  chime_writer_t *w = open_writer("z", compress);
  assert_int_equal(chime_writer_compress(w, zs, sizeof(zs)), 0);
  assert_string_equal(zs, says);
  append_frames(w, 0, N);
  assert_int_equal(chime_writer_flush(w), 0);
  uint64_t sent = chime_writer_bytes_sent(w);
  assert_int_equal(chime_writer_close(w), 0);
  return sent;
}

static void test_compressing_writer_round_trip(void **state) {
  (void)state;
  uint64_t zbytes = write_frames(1, "obs:3");
  chime_table_stats_t a = chime__table_stats(client, "z");
  assert_int_equal(a.size, N);
  consume("z", CHIME_MODE_SHM, 0, N);
  uint64_t rbytes = write_frames(0, "");
  chime_table_stats_t b = chime__table_stats(client, "z");
  consume("z", CHIME_MODE_STREAM, 0, N);

  /* Raw: every frame whole. Compressed: the 90 frames that shrink at a
   * fraction, the 6 of noise whole. */
  assert_true(rbytes >= (uint64_t)N * (FRAME + 4));
  if (zbytes * 5 > rbytes)
    fail_msg("compressing writer sent %llu bytes, raw %llu",
             (unsigned long long)zbytes, (unsigned long long)rbytes);
  /* chimed keeps the writer's frames as they came and makes the same of
   * raw ones: the same bytes held either way, the noise kept raw. */
  assert_int_equal(a.stored_bytes, b.stored_bytes);
  assert_int_equal(a.leaves_stored_raw, N / 16);
  assert_int_equal(b.leaves_stored_raw, 2 * (N / 16));
}

/* A full fifo table: the writer's requests wait (staged, stored leaves and
 * all) and go in as they came once a learner makes room. */
static void test_staged_stored_leaves(void **state) {
  (void)state;
  chime_writer_t *w = open_writer("small", 1);
  append_frames(w, 1000, 8);
  assert_int_equal(chime_writer_flush(w), 0);
  append_frames(w, 1008, 24); /* sent, and waiting for room */
  if (chime__wait_staged(client, 10000) != 0)
    fail_msg("no insert staged 10 s after the table filled");
  consume("small", CHIME_MODE_SHM, 1000, 32);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), 32);
  assert_int_equal(chime_writer_close(w), 0);
}

/* n samples into "rag" by a writer (compress on or off): sample i's tok
 * row of length i % 17 (0 and the bound), its frame, its id. */
static void write_rag(int compress, uint32_t n) {
  chime_writer_t *w = open_writer("rag", compress);
  static uint8_t f[FRAME];
  int32_t tok[16];
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len = i % 17;
    for (uint32_t k = 0; k < len; k++)
      tok[k] = (int32_t)(i * 100 + k);
    frame(i, f);
    const void *leaves[3] = {tok, f, &i};
    const uint32_t lengths[3] = {len, 0, 0};
    assert_int_equal(chime_writer_append_leaves(w, leaves, lengths, 1.0), 0);
  }
  assert_int_equal(chime_writer_flush(w), 0);
  if (compress)
    assert_true(chime_writer_bytes_sent(w) * 5 < (uint64_t)n * FRAME);
  assert_int_equal(chime_writer_close(w), 0);
}

/* A table with a ragged leaf beside the compressed one: samples at their
 * lengths, the frames in their places between the rows (compressed by the
 * writer, or by chimed from a raw writer), come back as written: the
 * frames and ids (consume), then each row. */
static void test_ragged_table_compressed_leaf(void **state) {
  (void)state;
  for (int compress = 1; compress >= 0; compress--) {
    write_rag(compress, 34);
    consume("rag", CHIME_MODE_SHM, 0, 32);
    write_rag(compress, 8);
    chime_batch_t b;
    chime_stream_t *s = open_and_take(client, "rag", CHIME_MODE_AUTO, 10, &b);
    const int64_t *off = chime_batch_offsets(&b, "tok");
    const int32_t *t = chime_batch_leaf(&b, "tok")->data;
    const uint32_t *id = chime_batch_leaf(&b, "id")->data;
    for (uint32_t j = 0; j < 10; j++) {
      assert_int_equal(off[j + 1] - off[j], id[j] % 17);
      for (int64_t k = off[j]; k < off[j + 1]; k++)
        assert_int_equal(t[k], (int32_t)(id[j] * 100 + (k - off[j])));
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
    chime_stream_close(s);
  }
}

/* Where raw_insert sends: the table, a writer id (a sequence table's
 * episodes need one) and each sample's length of a ragged first leaf
 * (NULL: none). */
typedef struct {
  const char *table;
  uint64_t writer_id;
  uint32_t *lengths;
} raw_to_t;

static raw_to_t raw_to = {"z", 0, NULL};

/* One raw InsertRequest into raw_to's table of count samples, sample j's
 * first leaf the stored bytes frames[j] (sizes[j] of them) with
 * stored_leaves {leaf}, then its u32 id: the status, its details. */
static grpc_status_code raw_insert(uint32_t count, const uint8_t *const *frames,
                                   const uint32_t *sizes, uint32_t leaf,
                                   char *details, size_t dlen) {
  size_t len = 0;
  for (uint32_t j = 0; j < count; j++)
    len += sizes[j] + 4;
  uint8_t *data = malloc(len + 1), *p = data;
  assert_non_null(data);
  for (uint32_t j = 0; j < count; j++) {
    memcpy(p, frames[j], sizes[j]);
    memcpy(p + sizes[j], &j, 4);
    p += sizes[j] + 4;
  }
  Chime__V1__InsertRequest q = CHIME__V1__INSERT_REQUEST__INIT;
  q.table = (char *)raw_to.table;
  q.count = count;
  q.writer_id = raw_to.writer_id;
  q.id = raw_to.writer_id != 0 ? 1 : 0;
  if (raw_to.lengths != NULL) {
    q.n_lengths = count;
    q.lengths = raw_to.lengths;
  }
  q.data.data = data;
  q.data.len = len;
  q.n_stored_leaves = 1;
  q.stored_leaves = &leaf;
  q.n_stored = count;
  q.stored = (uint32_t *)sizes;
  grpc_status_code st;
  assert_int_equal(chime__raw_send_one(chimed.addr, "/chime.v1.Chime/Insert",
                                       &q.base, &st, details, dlen),
                   0);
  free(data);
  return st;
}

/* A refused request: INVALID_ARGUMENT whose details hold want, and the
 * table as it was. */
static void refused(uint32_t count, const uint8_t *const *frames,
                    const uint32_t *sizes, uint32_t leaf, const char *want) {
  char details[512];
  uint64_t before = chime__table_stats(client, raw_to.table).inserts;
  assert_int_equal(
      raw_insert(count, frames, sizes, leaf, details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  if (strstr(details, want) == NULL)
    fail_msg("expected '%s' in '%s'", want, details);
  assert_int_equal(chime__table_stats(client, raw_to.table).inserts, before);
  assert_int_equal(chime__table_stats(client, raw_to.table).size, 0);
}

static void test_bad_stored_leaves_refused(void **state) {
  (void)state;
  static uint8_t raw[FRAME], good[FRAME], small[FRAME], bomb[FRAME];
  static uint8_t zeros[1 << 20], junk[FRAME + 1];
  frame(3, raw);
  size_t ng = ZSTD_compress(good, sizeof(good), raw, FRAME, 3);
  assert_false(ZSTD_isError(ng));
  /* A frame of the first 1000 bytes: decompresses to other than the leaf. */
  size_t ns = ZSTD_compress(small, sizeof(small), raw, 1000, 3);
  assert_false(ZSTD_isError(ns));
  /* A bomb: a few dozen bytes that declare a megabyte. */
  size_t nb = ZSTD_compress(bomb, sizeof(bomb), zeros, sizeof(zeros), 19);
  assert_false(ZSTD_isError(nb));
  assert_true(nb < 1000);
  /* A good frame, one byte cut off; and bytes that are no frame. */
  memset(junk, 0x5a, sizeof(junk));
  const uint8_t *f1[1] = {good};
  uint32_t s_cut[1] = {(uint32_t)ng - 1};
  refused(1, f1, s_cut, 0, "leaf 'obs' of sample 0");
  const uint8_t *fj[1] = {junk};
  uint32_t s_junk[1] = {200};
  refused(1, fj, s_junk, 0, "are not one zstd frame of the leaf's 7056 bytes");
  const uint8_t *fs[1] = {small};
  uint32_t s_small[1] = {(uint32_t)ns};
  refused(1, fs, s_small, 0, "leaf 'obs' of sample 0");
  const uint8_t *fb[1] = {bomb};
  uint32_t s_bomb[1] = {(uint32_t)nb};
  refused(1, fb, s_bomb, 0, "leaf 'obs' of sample 0");
  /* A stored size past the leaf: refused by the size, unread. */
  uint32_t s_past[1] = {FRAME + 1};
  refused(1, fj, s_past, 0,
          "leaf 'obs' of sample 0: 7057 stored bytes, "
          "more than the leaf's 7056");
  /* The table keeps 'id' raw: it may not come stored. */
  uint32_t s_good[1] = {(uint32_t)ng};
  refused(1, f1, s_good, 1, "stored_leaves names leaf 1 ('id')");
  /* Good, good, bad: nothing of the request stored. */
  const uint8_t *f3[3] = {good, good, junk};
  uint32_t s3[3] = {(uint32_t)ng, (uint32_t)ng, 300};
  refused(3, f3, s3, 0, "leaf 'obs' of sample 2");

  /* A good one, a frame and a leaf sent raw at its own size: in, and read
   * back as the frames they are. */
  char details[512];
  const uint8_t *f2[2] = {good, raw};
  uint32_t s2[2] = {(uint32_t)ng, FRAME};
  assert_int_equal(raw_insert(2, f2, s2, 0, details, sizeof(details)),
                   GRPC_STATUS_OK);
  chime_table_stats_t t = chime__table_stats(client, "z");
  assert_int_equal(t.size, 2);
  chime_batch_t b;
  chime_stream_t *s = open_and_take(client, "z", CHIME_MODE_AUTO, 2, &b);
  const uint8_t *obs = chime_batch_leaf(&b, "obs")->data;
  assert_memory_equal(obs, raw, FRAME);
  assert_memory_equal(obs + FRAME, raw, FRAME);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  /* The server serves on: a writer's frames go in and come back. */
  chime_writer_t *w = open_writer("z", 1);
  append_frames(w, 0, 16);
  assert_int_equal(chime_writer_close(w), 0);
  consume("z", CHIME_MODE_SHM, 0, 16);
}

/* A sequence table's steps from a writer that compresses: a fraction of a
 * raw writer's bytes sent, and every window's steps (shm) the frames
 * written; with compress off, chimed compresses them alike. */
static void test_sequence_writer_compresses(void **state) {
  (void)state;
  for (int compress = 1; compress >= 0; compress--) {
    chime_writer_t *w = open_writer("zseq", compress);
    append_frames(w, 0, 32);
    assert_int_equal(chime_writer_end_episode(w), 0);
    assert_int_equal(chime_writer_flush(w), 0);
    uint64_t sent = chime_writer_bytes_sent(w);
    assert_int_equal(chime_writer_close(w), 0);
    if (compress)
      assert_true(sent * 10 < 32 * (uint64_t)(FRAME + 4));
    else
      assert_true(sent >= 32 * (uint64_t)FRAME);
    chime_batch_t b;
    chime_stream_t *s = open_and_take(client, "zseq", CHIME_MODE_SHM, 29, &b);
    const uint8_t *obs = chime_batch_leaf(&b, "obs")->data;
    const uint32_t *id = chime_batch_leaf(&b, "id")->data;
    static uint8_t want[FRAME];
    for (uint32_t k = 0; k < 29 * 4; k++) {
      assert_int_equal(id[k], k / 4 + k % 4); /* fifo: window k / 4 */
      frame(id[k], want);
      assert_memory_equal(obs + (size_t)k * FRAME, want, FRAME);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
    chime_stream_close(s);
  }
}

/* A compressed ragged leaf from a writer that compresses (each sample's
 * rows at its length, 0 to 4 frames): a fraction of the raw bytes sent,
 * the rows read back as written. */
static void test_ragged_writer_compresses(void **state) {
  (void)state;
  static uint8_t rows[4 * FRAME];
  for (int compress = 1; compress >= 0; compress--) {
    chime_writer_t *w = open_writer("zr", compress);
    uint64_t raw = 0;
    for (uint32_t i = 0; i < 10; i++) {
      uint32_t lengths[2] = {i % 5, 0};
      for (uint32_t r = 0; r < i % 5; r++)
        frame(i * 8 + r, rows + (size_t)r * FRAME);
      const void *leaves[2] = {rows, &i};
      assert_int_equal(chime_writer_append_leaves(w, leaves, lengths, 1.0), 0);
      raw += (uint64_t)(i % 5) * FRAME + 4;
    }
    assert_int_equal(chime_writer_flush(w), 0);
    uint64_t sent = chime_writer_bytes_sent(w);
    assert_int_equal(chime_writer_close(w), 0);
    assert_true(compress ? sent * 10 < raw : sent >= raw);
    chime_batch_t b;
    chime_stream_t *s = open_and_take(client, "zr", CHIME_MODE_SHM, 10, &b);
    const uint8_t *obs = chime_batch_leaf(&b, "obs")->data;
    const int64_t *off = chime_batch_offsets(&b, "obs");
    const uint32_t *id = chime_batch_leaf(&b, "id")->data;
    static uint8_t want[FRAME];
    for (uint32_t j = 0; j < 10; j++) {
      assert_int_equal(id[j], j);
      assert_int_equal(off[j + 1] - off[j], j % 5);
      for (int64_t r = off[j]; r < off[j + 1]; r++) {
        frame(j * 8 + (uint32_t)(r - off[j]), want);
        assert_memory_equal(obs + (size_t)r * FRAME, want, FRAME);
      }
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
    chime_stream_close(s);
  }
}

/* Raw Insert messages with a sequence table's steps and a ragged leaf's
 * rows stored: a frame that is not zstd or a bomb is refused naming the
 * leaf and the sample; a ragged leaf's frame must make exactly its rows
 * at the sample's length (one row more or less is refused), its stored
 * size at most those rows; nothing stored, then good ones go in. */
static void test_bad_stored_steps_and_rows(void **state) {
  (void)state;
  static uint8_t raw[2 * FRAME], good[2 * FRAME], bomb[FRAME];
  static uint8_t zeros[1 << 20], junk[FRAME + 1];
  frame(5, raw);
  frame(6, raw + FRAME);
  size_t ng = ZSTD_compress(good, sizeof(good), raw, FRAME, 3);
  size_t nb = ZSTD_compress(bomb, sizeof(bomb), zeros, sizeof(zeros), 19);
  assert_false(ZSTD_isError(ng) || ZSTD_isError(nb));
  memset(junk, 0x5a, sizeof(junk));
  const uint8_t *fj[1] = {junk}, *fb[1] = {bomb}, *fg[1] = {good};
  uint32_t s_junk[1] = {200}, s_bomb[1] = {(uint32_t)nb};
  uint32_t s_good[1] = {(uint32_t)ng};
  char details[512];

  raw_to = (raw_to_t){"zseq", 77, NULL};
  uint64_t steps = chime__table_stats(client, "zseq").steps;
  refused(1, fj, s_junk, 0, "are not one zstd frame of the leaf's 7056 bytes");
  refused(1, fb, s_bomb, 0, "leaf 'obs' of sample 0");
  const uint8_t *f2[2] = {good, raw};
  uint32_t s2[2] = {(uint32_t)ng, FRAME};
  assert_int_equal(raw_insert(2, f2, s2, 0, details, sizeof(details)),
                   GRPC_STATUS_OK);
  assert_int_equal(chime__table_stats(client, "zseq").steps, steps + 2);

  uint32_t len1[1] = {1}, len2[1] = {2};
  raw_to = (raw_to_t){"zr", 0, len2};
  /* One row's frame for two rows; two rows' for one. */
  refused(1, fg, s_good, 0, "not one zstd frame of the leaf's 14112 bytes");
  size_t n2 = ZSTD_compress(good, sizeof(good), raw, 2 * FRAME, 3);
  assert_false(ZSTD_isError(n2));
  uint32_t s_two[1] = {(uint32_t)n2};
  raw_to.lengths = len1;
  refused(1, fg, s_two, 0, "leaf 'obs' of sample 0");
  uint32_t s_past[1] = {FRAME + 1};
  refused(1, fj, s_past, 0, "more than the leaf's 7056 at its length");
  refused(1, fb, s_bomb, 0, "leaf 'obs' of sample 0");
  raw_to.lengths = len2;
  assert_int_equal(raw_insert(1, fg, s_two, 0, details, sizeof(details)),
                   GRPC_STATUS_OK);
  chime_batch_t b;
  chime_stream_t *s = open_and_take(client, "zr", CHIME_MODE_SHM, 1, &b);
  assert_int_equal(chime_batch_offsets(&b, "obs")[1], 2);
  assert_memory_equal(chime_batch_leaf(&b, "obs")->data, raw, 2 * FRAME);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  raw_to = (raw_to_t){"z", 0, NULL};
}

/* Two shards alike ('z'), and a table one shard compresses and the other
 * does not ('mixed'). */
#define NSHARDS 2
#define PER_WRITER 48
static chime__chimed_t shard[NSHARDS];
static chime_client_t *direct[NSHARDS], *sharded;

static void shard_config(int k, char *buf, size_t len) {
  snprintf(buf, len,
           "{\"tables\": [{\"name\": \"z\", \"spec\": \"obs:u8[84,84], "
           "id:u32[]\", \"capacity\": 1024, \"min_size\": 1, \"sampler\": "
           "\"fifo\", \"compress\": {\"obs\": 3}},\n"
           "  {\"name\": \"mixed\", \"spec\": \"obs:u8[84,84], id:u32[]\", "
           "\"capacity\": 1024, \"sampler\": \"fifo\"%s}]}\n",
           k == 0 ? ", \"compress\": {\"obs\": 3}" : "");
}

static int shards_setup(void **state) {
  (void)state;
  char target[1024];
  return chime__shards_start(shard, NSHARDS, shard_config, direct, target,
                             sizeof(target), &sharded);
}

static int shards_teardown(void **state) {
  (void)state;
  return chime__shards_stop(shard, NSHARDS, direct, NULL, &sharded);
}

/* A sharded client's writers, one bound to each shard, compress as one
 * server's do: each shard holds its writer's frames as written, and each
 * writer sent a fraction of them. */
static void test_sharded_writers_compress(void **state) {
  (void)state;
  chime_writer_t *w[NSHARDS];
  char zs[64];
  for (int k = 0; k < NSHARDS; k++) {
    w[k] = open_writer_on(sharded, "z", 1);
    assert_int_equal(chime_writer_compress(w[k], zs, sizeof(zs)), 0);
    assert_string_equal(zs, "obs:3");
  }
  for (int k = 0; k < NSHARDS; k++) {
    append_frames(w[k], (uint32_t)k * 1000, PER_WRITER);
    assert_int_equal(chime_writer_flush(w[k]), 0);
    assert_true(chime_writer_bytes_sent(w[k]) * 5 <
                (uint64_t)PER_WRITER * FRAME);
    assert_int_equal(chime_writer_close(w[k]), 0);
  }
  for (int k = 0; k < NSHARDS; k++)
    consume_from(direct[k], "z", CHIME_MODE_SHM, UINT32_MAX, PER_WRITER);
}

/* A table the shards compress unlike: a writer of the sharded client is
 * refused by name (its stored leaves would be refused by one of them). */
static void test_sharded_compress_must_be_alike(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, sharded, "mixed", NULL), CHIME_EINVAL);
  if (strstr(chime_last_error(), "compressed leaves") == NULL)
    fail_msg("'%s'", chime_last_error());
  assert_null(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compressing_writer_round_trip),
      cmocka_unit_test(test_staged_stored_leaves),
      cmocka_unit_test(test_ragged_table_compressed_leaf),
      cmocka_unit_test(test_bad_stored_leaves_refused),
      cmocka_unit_test(test_sequence_writer_compresses),
      cmocka_unit_test(test_ragged_writer_compresses),
      cmocka_unit_test(test_bad_stored_steps_and_rows),
  };
  const struct CMUnitTest shard_tests[] = {
      cmocka_unit_test(test_sharded_writers_compress),
      cmocka_unit_test(test_sharded_compress_must_be_alike),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  return rc |
         cmocka_run_group_tests(shard_tests, shards_setup, shards_teardown);
}
