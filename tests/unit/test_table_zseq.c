/* Compressed leaves in sequence tables (docs/sequences.md, "Frames stored
 * once"): each step's compressed leaves are kept compressed once, a
 * window's steps are decompressed each at its place in the slot's
 * [T, *shape] leaf, byte for byte what a raw table delivers; noise is
 * kept raw at 4 bytes a step over (and counted); steps that leave free
 * their bytes; checkpoints keep the steps' stored bytes as they are,
 * restore them, and refuse a frame that is not its leaf. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/crc32c.h"
#include "replay/table.h"
#include "table_ckpt.h"
#include "table_slot.h"
#include "zframe.h"

#define SPEC "a:i32[], obs:u8[84,84]"
#define STEP (4 + FRAME)
#define T 4

/* A sequence table of `steps` steps of SPEC, windows of T every step,
 * episode tails padded, sampled uniformly (seed 7); obs compressed at
 * level (0: raw). */
static chime__table_t *new_table(uint64_t steps, int level) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "zs");
  assert_int_equal(chime_spec_parse(&tc.spec, SPEC), 0);
  tc.capacity_steps = steps;
  tc.sequence_length = T;
  tc.stride = 1;
  tc.episode_pad = 1;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.min_size = 1;
  tc.initial_priority = 1.0;
  tc.seed = 7;
  tc.compress[1] = (uint8_t)level;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* Appends steps k0 .. k0 + n - 1 (a = k, obs = frame k) as writer w's
 * request seq, in three pieces cut in the middle of leaves. */
static void append(chime__table_t *t, uint64_t w, uint64_t seq, uint32_t k0,
                   uint32_t n, int noise, int end) {
  uint8_t *buf = malloc((size_t)n * STEP);
  assert_non_null(buf);
  for (uint32_t j = 0; j < n; j++) {
    int32_t a = (int32_t)(k0 + j);
    memcpy(buf + (size_t)j * STEP, &a, 4);
    frame(buf + (size_t)j * STEP + 4, k0 + j, noise);
  }
  size_t total = (size_t)n * STEP, c1 = total / 3 + 5, c2 = total / 2 + 7;
  chime__span_t sp[3] = {
      {buf, c1}, {buf + c1, c2 - c1}, {buf + c2, total - c2}};
  chime__dedupe_req_t dq = {.writer = w, .seq = seq};
  dq.end_episode = end;
  uint64_t first;
  assert_int_equal(
      chime__table_insert_spans(t, sp, 3, n, NULL, NULL, &first, NULL, &dq), 0);
  free(buf);
}

/* Two episodes of 30 and 17 steps from two writers, interleaved; steps
 * from 1000 (writer 2) noise when noise2. */
static void fill(chime__table_t *t, int noise2) {
  append(t, 1, 1, 0, 10, 0, 0);
  append(t, 2, 1, 1000, 9, noise2, 0);
  append(t, 1, 2, 10, 20, 0, 1);
  append(t, 2, 2, 1009, 8, noise2, 1);
}

/* Window j of s: its valid steps consecutive, each obs its frame, padded
 * steps zeros. Steps from 1000 are noise when noise2. */
static void check_window(const slot_t *s, uint32_t j, int noise2) {
  const int32_t *a = (const int32_t *)s->ws.leaf[0] + (size_t)j * T;
  const uint8_t *obs = (const uint8_t *)s->ws.leaf[1] + (size_t)j * T * FRAME;
  const uint8_t *mask = (const uint8_t *)s->ws.leaf[2] + (size_t)j * T;
  uint8_t want[FRAME];
  for (uint32_t i = 0; i < T; i++) {
    if (!mask[i]) {
      memset(want, 0, FRAME);
    } else {
      if (i > 0)
        assert_int_equal(a[i], a[i - 1] + 1);
      frame(want, (uint32_t)a[i], noise2 && a[i] >= 1000);
    }
    assert_memory_equal(obs + (size_t)i * FRAME, want, FRAME);
  }
}

/* Windows of t sampled into a batch of n, each exact. */
static void sample_exact(chime__table_t *t, uint32_t n, int noise2) {
  slot_t s;
  slot_init(&s, t, n);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < n; j++)
    check_window(&s, j, noise2);
  slot_fini(&s);
}

/* The same requests into a compressed and a raw table, sampled with the
 * same seed: the same windows, byte for byte, slot for slot. */
static void test_windows_as_raw(void **state) {
  (void)state;
  chime__table_t *z = new_table(256, 3), *r = new_table(256, 0);
  fill(z, 0);
  fill(r, 0);
  slot_t a, b;
  slot_init(&a, z, 32);
  slot_init(&b, r, 32);
  for (int round = 0; round < 3; round++) {
    assert_int_equal(chime__table_sample(z, &a.lay, &a.ws, NULL), 0);
    assert_int_equal(chime__table_sample(r, &b.lay, &b.ws, NULL), 0);
    assert_int_equal(a.lay.slot_bytes, b.lay.slot_bytes);
    assert_memory_equal(a.mem, b.mem, a.lay.info_offset);
    for (uint32_t j = 0; j < 32; j++) {
      assert_int_equal(a.ws.info[j].key, b.ws.info[j].key);
      check_window(&a, j, 0);
    }
  }
  chime__table_stats_t st;
  chime__table_get_stats(z, &st);
  assert_int_equal(st.steps, 47);
  assert_int_equal(st.raw_bytes, 47 * STEP);
  assert_true(st.stored_bytes < st.raw_bytes / 5); /* frames compress */
  assert_int_equal(st.leaves_stored_raw, 0);
  chime__table_get_stats(r, &st);
  assert_int_equal(st.raw_bytes, st.stored_bytes); /* raw: the same */
  slot_fini(&a);
  slot_fini(&b);
  chime__table_destroy(z);
  chime__table_destroy(r);
}

/* Noise does not shrink: kept raw, 4 bytes a step over, counted, and its
 * windows as exact. */
static void test_noise_kept_raw(void **state) {
  (void)state;
  chime__table_t *t = new_table(256, 19);
  fill(t, 1);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.leaves_stored_raw, 17);
  assert_int_equal(st.raw_bytes, 47 * STEP);
  assert_true(st.stored_bytes > 17 * (STEP + 4));
  sample_exact(t, 64, 1);
  chime__table_destroy(t);
  /* All noise: exactly 4 bytes a step over raw. */
  t = new_table(256, 3);
  append(t, 1, 1, 1000, 12, 1, 1);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.raw_bytes, 12 * STEP);
  assert_int_equal(st.stored_bytes, 12 * (STEP + 4));
  chime__table_destroy(t);
}

/* A full store's oldest steps leave with their compressed bytes: what is
 * counted is what the steps held now hold. */
static void test_eviction_frees(void **state) {
  (void)state;
  chime__table_t *t = new_table(32, 3);
  for (uint32_t i = 0; i < 10; i++)
    append(t, 1, i + 1, 1000 + i * 20, 20, 1, 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_true(st.steps > 0 && st.steps <= 32);
  assert_int_equal(st.raw_bytes, st.steps * STEP);
  assert_int_equal(st.stored_bytes, st.steps * (STEP + 4));
  sample_exact(t, 16, 1);
  chime__table_destroy(t);
}

/* A checkpoint keeps the steps' stored bytes as they are and restores
 * them into a table compressing obs at another level. */
static void test_checkpoint(void **state) {
  (void)state;
  chime__table_t *t = new_table(256, 3);
  chime__table_stats_t a, b;
  char err[512] = "";
  fill(t, 1);
  chime__table_get_stats(t, &a);
  uint8_t *p;
  size_t n = ckpt_write(t, &p);
  /* The stored bytes as they are: the file is about as small. */
  assert_true(n < a.stored_bytes + 47 * 24 + a.size * 48 + 4096);
  chime__table_t *u = new_table(256, 9);
  if (ckpt_load(u, p, n, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  chime__table_get_stats(u, &b);
  assert_int_equal(b.size, a.size);
  assert_int_equal(b.steps, a.steps);
  assert_int_equal(b.raw_bytes, a.raw_bytes);
  assert_int_equal(b.stored_bytes, a.stored_bytes); /* never recompressed */
  assert_int_equal(b.leaves_stored_raw, 17);
  sample_exact(u, 64, 1);
  chime__table_destroy(u);
  /* A table that keeps obs raw: refused, naming the leaf. */
  u = new_table(256, 0);
  assert_int_equal(ckpt_load(u, p, n, err, sizeof(err)), CHIME_EINVAL);
  assert_non_null(strstr(err, "'obs'"));
  chime__table_destroy(u);
  free(p);
  chime__table_destroy(t);
}

/* q: p with stored frame nth (0: the first in the file) damaged, the CRC
 * made good. */
static void damage(uint8_t *q, const uint8_t *p, size_t n, int size, int nth) {
  const uint8_t magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  memcpy(q, p, n);
  uint8_t *fr = memmem(q, n, magic, 4);
  for (int i = 0; i < nth && fr != NULL; i++)
    fr = memmem(fr + 1, n - (size_t)(fr + 1 - q), magic, 4);
  assert_non_null(fr);
  if (size) { /* a stored size past its leaf's */
    uint32_t st = FRAME + 1;
    memcpy(fr - 4, &st, 4);
  } else { /* no frame: its magic changed */
    fr[0] ^= 0xff;
  }
  uint32_t crc = chime__crc32c(0, q, n - 4);
  memcpy(q + n - 4, &crc, 4);
}

/* Corrupt stored bytes are refused at restore (CHIME_ECORRUPT), naming
 * the leaf; the table is left empty. */
static void test_checkpoint_corrupt(void **state) {
  (void)state;
  chime__table_t *t = new_table(256, 3);
  char err[512] = "";
  fill(t, 0);
  uint8_t *p;
  size_t n = ckpt_write(t, &p);
  uint8_t *q = malloc(n);
  assert_non_null(q);
  chime__table_t *u = new_table(256, 3);
  damage(q, p, n, 0, 0);
  assert_int_equal(ckpt_load(u, q, n, err, sizeof(err)), CHIME_ECORRUPT);
  assert_non_null(strstr(err, "'obs'"));
  chime__table_stats_t st;
  chime__table_get_stats(u, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.stored_bytes, 0);
  chime__table_destroy(u);
  /* The first step of the second block (blocks of 16 steps here: the
   * first holds writer 1's first 16): the block before it went in, no
   * window did, and the table frees what it holds once (fuzz_checkpoint
   * found the first block's steps freed again here). */
  u = new_table(256, 3);
  damage(q, p, n, 0, 16);
  assert_int_equal(ckpt_load(u, q, n, err, sizeof(err)), CHIME_ECORRUPT);
  assert_non_null(strstr(err, "block"));
  chime__table_get_stats(u, &st);
  assert_int_equal(st.size, 0);
  chime__table_destroy(u);
  /* A stored size past its leaf's: refused when the file is verified. */
  u = new_table(256, 3);
  damage(q, p, n, 1, 0);
  assert_int_equal(ckpt_load(u, q, n, err, sizeof(err)), CHIME_ECORRUPT);
  chime__table_destroy(u);
  free(q);
  free(p);
  chime__table_destroy(t);
}

/* A writer thread's steps: episodes of 50 in requests of 10, frames
 * compressed, into a store of 64 steps (its oldest blocks evicted all the
 * while); failed: inserts refused (asserted on the test's thread). */
typedef struct {
  chime__table_t *t;
  uint32_t steps;
  int failed;
  atomic_int done;
} writer_t;

static void *episode_writer_main(void *arg) {
  writer_t *w = arg;
  uint8_t *buf = malloc(10 * STEP);
  for (uint32_t k = 0; buf != NULL && k < w->steps; k += 10) {
    for (uint32_t j = 0; j < 10; j++) {
      int32_t a = (int32_t)(k + j);
      memcpy(buf + j * STEP, &a, 4);
      frame(buf + j * STEP + 4, k + j, 0);
    }
    chime__span_t sp = {buf, 10 * STEP};
    chime__dedupe_req_t dq = {.writer = 1, .seq = k / 10 + 1};
    dq.end_episode = (k + 10) % 50 == 0;
    uint64_t first;
    w->failed |= chime__table_insert_spans(w->t, &sp, 1, 10, NULL, NULL, &first,
                                           NULL, &dq) != 0;
  }
  w->failed |= buf == NULL;
  free(buf);
  atomic_store(&w->done, 1);
  return NULL;
}

/* Samplers decompress windows without the lock while a writer appends and
 * evicts: a window's steps stay (its first block is pinned, so no append
 * frees them) and every window sampled is exact. ASan's build catches a
 * step's bytes freed under a copy. */
static void test_concurrent(void **state) {
  (void)state;
  writer_t w = {.t = new_table(64, 3), .steps = 3000};
  atomic_init(&w.done, 0);
  slot_t s;
  slot_init(&s, w.t, 8);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, episode_writer_main, &w), 0);
  uint32_t batches = 0;
  while (!atomic_load(&w.done) || batches < 10) {
    assert_int_equal(chime__table_sample(w.t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 8; j++)
      check_window(&s, j, 0);
    batches++;
  }
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_false(w.failed);
  chime__table_stats_t st;
  chime__table_get_stats(w.t, &st);
  assert_true(st.steps <= 64);
  assert_int_equal(st.raw_bytes, st.steps * STEP);
  slot_fini(&s);
  chime__table_destroy(w.t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_windows_as_raw),
      cmocka_unit_test(test_noise_kept_raw),
      cmocka_unit_test(test_eviction_frees),
      cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_checkpoint_corrupt),
      cmocka_unit_test(test_concurrent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
