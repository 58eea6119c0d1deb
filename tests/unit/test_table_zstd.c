/* Compressed leaves in a table (replay/zleaf.h, docs/replay.md
 * "Compressed leaves"): samples inserted raw are kept compressed and
 * sampled back exactly (leaves cut across a message's pieces too, and
 * pinned as a stream samples), noise is kept raw at 4 bytes a leaf over
 * (and counted), items that leave free their bytes, checkpoints keep the
 * stored bytes as they are and refuse a frame that is not its leaf, a
 * frame that declares more than its leaf is refused before a byte is
 * written, configs that cannot be are refused, and ragged leaves are
 * compressed at their length (a frame past it refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zstd.h>

#include "chime/errors.h"
#include "replay/ckpt_format.h"
#include "replay/crc32c.h"
#include "replay/table.h"
#include "replay/zleaf.h"
#include "table_ckpt.h"
#include "table_slot.h"
#include "zframe.h"

#define SPEC "obs:u8[84,84], a:i32[]"
#define SAMPLE (FRAME + 4)

static chime__table_t *new_table(uint64_t cap, chime__selector_kind_t s,
                                 int level) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "z");
  assert_int_equal(chime_spec_parse(&tc.spec, SPEC), 0);
  tc.capacity = cap;
  tc.sampler = s;
  tc.min_size = 1;
  tc.seed = 7;
  tc.compress[0] = (uint8_t)level;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* Inserts n samples, keys' frames k0.., a = k, in three pieces cut in the
 * middle of leaves. */
static void insert_frames(chime__table_t *t, uint32_t k0, uint32_t n,
                          int noise) {
  uint8_t *buf = malloc((size_t)n * SAMPLE);
  assert_non_null(buf);
  for (uint32_t j = 0; j < n; j++) {
    frame(buf + (size_t)j * SAMPLE, k0 + j, noise);
    int32_t a = (int32_t)(k0 + j);
    memcpy(buf + (size_t)j * SAMPLE + FRAME, &a, 4);
  }
  size_t total = (size_t)n * SAMPLE, c1 = total / 3 + 5, c2 = total / 2 + 7;
  chime__span_t sp[3] = {
      {buf, c1}, {buf + c1, c2 - c1}, {buf + c2, total - c2}};
  uint64_t first;
  assert_int_equal(
      chime__table_insert_spans(t, sp, 3, n, NULL, NULL, &first, NULL, NULL),
      0);
  free(buf);
}

/* Sample j of s holds frame a (its a leaf) exactly. */
static void check_sample(const slot_t *s, uint32_t j, int noise) {
  uint8_t want[FRAME];
  int32_t a;
  memcpy(&a, (const uint8_t *)s->ws.leaf[1] + 4 * (size_t)j, 4);
  frame(want, (uint32_t)a, noise);
  assert_memory_equal((const uint8_t *)s->ws.leaf[0] + (size_t)j * FRAME, want,
                      FRAME);
}

static void test_sample_exact(void **state) {
  (void)state;
  chime__table_t *t = new_table(64, CHIME__SELECTOR_FIFO, 3);
  chime__table_stats_t st;
  slot_t s;
  insert_frames(t, 0, 32, 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 32);
  assert_int_equal(st.raw_bytes, 32 * SAMPLE);
  assert_true(st.stored_bytes < st.raw_bytes / 5); /* frames compress */
  assert_int_equal(st.leaves_stored_raw, 0);
  slot_init(&s, t, 16);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 16; j++) {
    int32_t a;
    memcpy(&a, (const uint8_t *)s.ws.leaf[1] + 4 * j, 4);
    assert_int_equal(a, (int32_t)j); /* fifo: in order */
    check_sample(&s, j, 0);
  }
  /* Pinned, as a stream samples (copy_min 1: runs sent from the table):
   * the compressed leaf is decompressed into the slot all the same. */
  slot_pin(&s);
  assert_int_equal(slot_sample_pinned(t, &s, 1), 0);
  for (uint32_t j = 0; j < 16; j++) {
    /* a was left in the table (sent from it): the key says which frame. */
    uint8_t want[FRAME];
    assert_int_equal(s.ws.info[j].key, 17 + j);
    frame(want, 16 + j, 0);
    assert_memory_equal((const uint8_t *)s.ws.leaf[0] + (size_t)j * FRAME, want,
                        FRAME);
  }
  chime__table_unpin(t, &s.pins);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0); /* fifo: sampled out, their bytes freed */
  assert_int_equal(st.raw_bytes, 0);
  assert_int_equal(st.stored_bytes, 0);
  slot_fini(&s);
  chime__table_destroy(t);
}

static void test_noise_kept_raw(void **state) {
  (void)state;
  chime__table_t *t = new_table(64, CHIME__SELECTOR_UNIFORM, 19);
  chime__table_stats_t st;
  slot_t s;
  insert_frames(t, 0, 20, 1);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.raw_bytes, 20 * SAMPLE);
  assert_int_equal(st.stored_bytes, 20 * (SAMPLE + 4)); /* 4 bytes a leaf */
  assert_int_equal(st.leaves_stored_raw, 20);
  slot_init(&s, t, 32);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 32; j++)
    check_sample(&s, j, 1);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* A full table's evictions free what the evicted items held. */
static void test_eviction_frees(void **state) {
  (void)state;
  chime__table_t *t = new_table(4, CHIME__SELECTOR_UNIFORM, 3);
  chime__table_stats_t st;
  insert_frames(t, 0, 10, 1);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 4);
  assert_int_equal(st.raw_bytes, 4 * SAMPLE);
  assert_int_equal(st.stored_bytes, 4 * (SAMPLE + 4));
  chime__table_destroy(t);
}

static void test_checkpoint(void **state) {
  (void)state;
  chime__table_t *t = new_table(64, CHIME__SELECTOR_FIFO, 3);
  chime__table_stats_t a, b;
  char err[512] = "";
  insert_frames(t, 0, 10, 0);
  insert_frames(t, 10, 3, 1); /* kept raw */
  chime__table_get_stats(t, &a);
  uint8_t *p;
  size_t n = ckpt_write(t, &p);
  /* The stored bytes as they are: the file is about as small. */
  assert_true(n < a.stored_bytes + 13 * 64 + 1024);
  /* Back into a table compressing the same leaf at another level. */
  chime__table_t *u = new_table(64, CHIME__SELECTOR_FIFO, 9);
  if (ckpt_load(u, p, n, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  chime__table_get_stats(u, &b);
  assert_int_equal(b.size, 13);
  assert_int_equal(b.raw_bytes, a.raw_bytes);
  assert_int_equal(b.stored_bytes, a.stored_bytes); /* never recompressed */
  slot_t s;
  slot_init(&s, u, 13);
  assert_int_equal(chime__table_sample(u, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 13; j++)
    check_sample(&s, j, j >= 10);
  slot_fini(&s);
  chime__table_destroy(u);
  /* A table that keeps the leaf raw: refused, naming the leaf. */
  u = new_table(64, CHIME__SELECTOR_FIFO, 0);
  assert_int_equal(ckpt_load(u, p, n, err, sizeof(err)), CHIME_EINVAL);
  assert_non_null(strstr(err, "'obs'"));
  chime__table_destroy(u);
  /* A stored frame's magic changed (the CRC made good): no frame of its
   * leaf, and nothing goes in. */
  uint8_t *q = malloc(n);
  assert_non_null(q);
  memcpy(q, p, n);
  const uint8_t magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  uint8_t *fr = memmem(q, n, magic, 4);
  assert_non_null(fr);
  uint32_t st;
  memcpy(&st, fr - 4, 4);
  fr[0] ^= 0xff;
  uint32_t crc = chime__crc32c(0, q, n - 4);
  memcpy(q + n - 4, &crc, 4);
  u = new_table(64, CHIME__SELECTOR_FIFO, 3);
  assert_int_equal(ckpt_load(u, q, n, err, sizeof(err)), CHIME_ECORRUPT);
  chime__table_get_stats(u, &b);
  assert_int_equal(b.size, 0);
  /* A stored size past its leaf's: refused when the file is verified. */
  memcpy(q, p, n);
  st = FRAME + 1;
  memcpy(fr - 4, &st, 4);
  crc = chime__crc32c(0, q, n - 4);
  memcpy(q + n - 4, &crc, 4);
  assert_int_equal(ckpt_load(u, q, n, err, sizeof(err)), CHIME_ECORRUPT);
  chime__table_destroy(u);
  free(q);
  free(p);
  chime__table_destroy(t);
}

/* A frame that declares more than its leaf (a bomb) is refused before
 * anything is written past the leaf: the destination is the leaf alone. */
static void test_bomb(void **state) {
  (void)state;
  size_t big = 1u << 24;
  uint8_t *zeros = calloc(1, big);
  size_t cap = ZSTD_compressBound(big);
  uint8_t *z = malloc(cap);
  assert_non_null(zeros);
  assert_non_null(z);
  size_t k = ZSTD_compress(z, cap, zeros, big, 3);
  assert_false(ZSTD_isError(k));
  assert_true(k < FRAME);
  uint8_t *dst = malloc(FRAME);
  assert_non_null(dst);
  assert_int_equal(chime__zleaf_decompress(dst, FRAME, z, k), CHIME_ECORRUPT);
  assert_int_equal(chime__zleaf_check(z, k, FRAME, dst), CHIME_ECORRUPT);
  /* A frame of exactly the leaf passes; with bytes after it, it does not. */
  k = ZSTD_compress(z, cap, zeros, FRAME, 3);
  assert_int_equal(chime__zleaf_check(z, k, FRAME, dst), 0);
  assert_int_equal(chime__zleaf_check(z, k + 1, FRAME, dst), CHIME_ECORRUPT);
  free(dst);
  free(z);
  free(zeros);
}

/* What cannot be is refused: a level zstd lacks, a leaf past the spec
 * (ragged leaves compress: test_ragged; sequence tables: test_table_zseq). */
static void test_refused(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t = NULL;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "z");
  tc.capacity = 8;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  assert_int_equal(chime_spec_parse(&tc.spec, "t:i32[<=8], o:u8[4]"), 0);
  tc.compress[1] = 23;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
  tc.compress[1] = 0;
  tc.compress[2] = 3;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
  assert_null(t);
}

/* A compressed ragged leaf (frames of an episode, up to 16): n items of
 * lengths len(k) = k % 17 (0 included) with frames k * 100 + i (noise when
 * noise) and a = k, inserted in one request; the table fifo. */
#define RSPEC "a:i32[], obs:u8[<=16,84,84]"
static uint32_t rlen(uint32_t k) {
  return k % 17;
}

static chime__table_t *rag_table(int level) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "zr");
  assert_int_equal(chime_spec_parse(&tc.spec, RSPEC), 0);
  tc.capacity = 64;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.compress[1] = (uint8_t)level;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

static uint64_t rag_insert(chime__table_t *t, uint32_t k0, uint32_t n,
                           int noise) {
  uint32_t lens[64];
  uint64_t total = 0, first;
  for (uint32_t j = 0; j < n; j++)
    total += 4 + (uint64_t)(lens[j] = rlen(k0 + j)) * FRAME;
  uint8_t *buf = malloc((size_t)total), *p = buf;
  assert_non_null(buf);
  for (uint32_t j = 0; j < n; j++) {
    int32_t a = (int32_t)(k0 + j);
    memcpy(p, &a, 4);
    p += 4;
    for (uint32_t i = 0; i < lens[j]; i++, p += FRAME)
      frame(p, (k0 + j) * 100 + i, noise);
  }
  chime__span_t sp = {buf, (size_t)total};
  assert_int_equal(
      chime__table_insert_spans(t, &sp, 1, n, lens, NULL, &first, NULL, NULL),
      0);
  free(buf);
  return total - 4 * (uint64_t)n;
}

/* A batch of n items of a rag_table: each item's frames at its offsets. */
static void rag_check(chime__table_t *t, uint32_t n, int noise) {
  slot_t s;
  uint8_t want[FRAME];
  slot_init(&s, t, n);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  const int64_t *off = s.ws.offsets[1];
  for (uint32_t j = 0; j < n; j++) {
    int32_t a;
    memcpy(&a, (const uint8_t *)s.ws.leaf[0] + 4 * (size_t)j, 4);
    assert_int_equal(off[j + 1] - off[j], rlen((uint32_t)a));
    for (int64_t i = 0; i < off[j + 1] - off[j]; i++) {
      frame(want, (uint32_t)a * 100 + (uint32_t)i, noise);
      assert_memory_equal((const uint8_t *)s.ws.leaf[1] +
                              (size_t)(off[j] + i) * FRAME,
                          want, FRAME);
    }
  }
  slot_fini(&s);
}

/* Ragged leaves compress at their length: sampled back exactly (0 rows
 * too), noise kept raw, a checkpoint keeps them as stored, and a frame
 * that would decompress past its row's length is refused at restore. */
static void test_ragged(void **state) {
  (void)state;
  chime__table_t *t = rag_table(3);
  chime__table_stats_t st;
  uint64_t raw = rag_insert(t, 0, 34, 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.raw_bytes, 34 * 4 + raw);
  assert_true(st.stored_bytes < st.raw_bytes / 5);
  assert_int_equal(st.leaves_stored_raw, 0);
  assert_int_equal(st.ragged_bytes, 0); /* all in the compressed leaf */
  uint8_t *p;
  size_t n = ckpt_write(t, &p);
  rag_check(t, 34, 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.raw_bytes, 0); /* fifo: sampled out, freed */
  assert_int_equal(st.stored_bytes, 0);
  /* Noise: kept raw at its length, 4 bytes an item over. */
  raw = rag_insert(t, 100, 17, 1);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.stored_bytes, 17 * 8 + raw);
  assert_int_equal(st.leaves_stored_raw, 16); /* the 0-row one is not */
  rag_check(t, 17, 1);
  chime__table_destroy(t);
  /* The checkpoint back, at another level. */
  char err[512] = "";
  t = rag_table(9);
  if (ckpt_load(t, p, n, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  rag_check(t, 34, 0);
  chime__table_destroy(t);
  /* An item's length one row short of its frame (the frame says more):
   * refused naming the item (--restore stops chimed). Record: ..., its
   * length, a, stored size. */
  const uint8_t magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  uint8_t *fr = memmem(p, n, magic, 4); /* item 1's: 1 row */
  assert_non_null(fr);
  fr = memmem(fr + 1, n - (size_t)(fr + 1 - p), magic, 4); /* item 2's */
  assert_non_null(fr);
  uint32_t len;
  memcpy(&len, fr - 12, 4);
  assert_int_equal(len, 2);
  len--;
  memcpy(fr - 12, &len, 4);
  uint32_t crc = chime__crc32c(0, p, n - 4);
  memcpy(p + n - 4, &crc, 4);
  t = rag_table(3);
  assert_int_equal(ckpt_load(t, p, n, err, sizeof(err)), CHIME_ECORRUPT);
  assert_non_null(strstr(err, "item 2 "));
  chime__table_destroy(t);
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sample_exact),
      cmocka_unit_test(test_noise_kept_raw),
      cmocka_unit_test(test_eviction_frees),
      cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_bomb),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_ragged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
