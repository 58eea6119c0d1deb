/* Ragged leaves in a table: each item stores only the rows it uses (its
 * bytes measured against the allocator's), lengths past a bound or unlike
 * the length they share are refused with nothing inserted, a batch packs
 * each ragged leaf's rows back to back with count + 1 offsets, items given
 * back keep their rows, sequence tables and checkpoints refuse ragged
 * specs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/ckpt_format.h"
#include "replay/table.h"
#include "table_slot.h"

#define SPEC "tokens:i32[<=64], lp:f32[<=64 ~tokens], r:f32[]"

static chime__table_t *new_table(const char *spec, uint64_t cap,
                                 chime__sampler_t s) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "rag");
  assert_int_equal(chime_spec_parse(&tc.spec, spec, NULL, 0), 0);
  tc.capacity = cap;
  tc.sampler = s;
  tc.min_size = 1;
  tc.seed = 7;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* SPEC's samples for keys, sample-major at their lengths: tokens[i] =
 * key * 1000 + i, lp[i] = i / 2, r = key. Returns the bytes written. */
static size_t pack(uint8_t *buf, const uint64_t *keys, const uint32_t *len,
                   uint32_t n) {
  size_t at = 0;
  for (uint32_t j = 0; j < n; j++) {
    for (uint32_t i = 0; i < len[j]; i++) {
      int32_t v = (int32_t)(keys[j] * 1000 + i);
      memcpy(buf + at + 4 * i, &v, 4);
    }
    at += 4 * (size_t)len[j];
    for (uint32_t i = 0; i < len[j]; i++) {
      float v = (float)i / 2;
      memcpy(buf + at + 4 * i, &v, 4);
    }
    at += 4 * (size_t)len[j];
    float r = (float)keys[j];
    memcpy(buf + at, &r, 4);
    at += 4;
  }
  return at;
}

/* Inserts n samples of SPEC (keys 1.. in order) with these lengths, in two
 * pieces cut mid-sample; returns the insert's result. */
static int insert(chime__table_t *t, const uint32_t *len, uint32_t n,
                  uint64_t key0) {
  uint64_t keys[64];
  uint32_t lengths[2 * 64];
  static uint8_t buf[64 * (64 * 8 + 4)];
  uint64_t first;
  assert_true(n <= 64);
  for (uint32_t j = 0; j < n; j++) {
    keys[j] = key0 + j;
    lengths[2 * j] = lengths[2 * j + 1] = len[j];
  }
  size_t bytes = pack(buf, keys, len, n);
  chime__span_t sp[2] = {{buf, bytes / 3},
                         {buf + bytes / 3, bytes - bytes / 3}};
  return chime__table_insert_spans(t, sp, 2, n, lengths, NULL, &first, NULL,
                                   NULL);
}

/* Batch j of slot s holds the item with key and length len, packed. */
static void check_packed(const slot_t *s, uint32_t j, uint64_t key,
                         uint32_t len) {
  const int64_t *ot = s->ws.offsets[0], *ol = s->ws.offsets[1];
  const int32_t *tok = s->ws.leaf[0];
  const float *lp = s->ws.leaf[1], *r = s->ws.leaf[2];
  assert_int_equal(s->ws.info[j].key, key);
  assert_int_equal(ot[j + 1] - ot[j], len);
  assert_int_equal(ol[j], ot[j]);
  for (uint32_t i = 0; i < len; i++) {
    assert_int_equal(tok[ot[j] + i], (int32_t)(key * 1000 + i));
    assert_true(lp[ol[j] + i] == (float)i / 2);
  }
  assert_true(r[j] == (float)key);
}

static void test_store_and_sample(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SAMPLER_FIFO);
  chime__table_stats_t st;
  slot_t s;
  uint32_t len[5] = {0, 3, 64, 1, 10};
  assert_int_equal(insert(t, len, 5, 1), 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 5);
  /* Only the rows used: 78 rows of 4 + 4 bytes, nothing for the bound. */
  assert_int_equal(st.ragged_bytes, 78 * 8);
  assert_true(st.ragged_alloc_bytes >= st.ragged_bytes);
  slot_init(&s, t, 5);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  const int64_t want[6] = {0, 0, 3, 67, 68, 78};
  for (int j = 0; j < 6; j++) {
    assert_int_equal(s.ws.offsets[0][j], want[j]);
    assert_int_equal(s.ws.offsets[1][j], want[j]);
  }
  for (uint32_t j = 0; j < 5; j++)
    check_packed(&s, j, chime__key_make(0, 1 + j), len[j]);
  /* A fifo batch takes its items out: their rows are freed with them. */
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.ragged_bytes, 0);
  assert_int_equal(st.ragged_alloc_bytes, 0);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* Too long, unlike the shared length, too few bytes: refused whole. */
static void test_refused_whole(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SAMPLER_UNIFORM);
  chime__table_stats_t st;
  uint32_t ok[2] = {2, 2};
  assert_int_equal(insert(t, ok, 2, 1), 0);
  uint32_t long_[3] = {1, 65, 1};
  assert_int_equal(insert(t, long_, 3, 10), CHIME_EINVAL);
  uint8_t buf[64];
  uint64_t keys[1] = {5}, first;
  uint32_t l1[1] = {2}, unlike[2] = {2, 3}, lengths[2] = {2, 2};
  size_t n = pack(buf, keys, l1, 1);
  chime__span_t sp = {buf, n};
  assert_int_equal(
      chime__table_insert_spans(t, &sp, 1, 1, unlike, NULL, &first, NULL, NULL),
      CHIME_EINVAL);
  sp.len = n - 1; /* the bytes of other lengths */
  assert_int_equal(chime__table_insert_spans(t, &sp, 1, 1, lengths, NULL,
                                             &first, NULL, NULL),
                   CHIME_EINVAL);
  assert_int_equal(
      chime__table_insert_spans(t, &sp, 1, 1, NULL, NULL, &first, NULL, NULL),
      CHIME_EINVAL);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2);
  assert_int_equal(st.inserts, 2);
  assert_int_equal(st.ragged_bytes, 2 * 2 * 8);
  chime__table_destroy(t);
}

/* Lengths from a long tail (mean near 1,000 tokens, up to 8,192): the
 * table holds the bytes used and the allocator within 5% of them, where
 * rows padded to the bound would hold over 8 times as much; a uniform
 * batch packs exactly its items' rows. */
static void test_bytes_stored_vs_used(void **state) {
  (void)state;
  chime__table_t *t =
      new_table("tokens:i32[<=8192], lp:f32[<=8192 ~tokens], r:f32[]", 2048,
                CHIME__SAMPLER_UNIFORM);
  uint64_t x = 88172645463325252ull, used = 0, total_len = 0;
  uint32_t *lens = calloc(2000, sizeof(*lens));
  uint8_t *buf = malloc(8192 * 8 + 4);
  assert_non_null(lens);
  assert_non_null(buf);
  for (uint32_t j = 0; j < 2000; j++) {
    /* A Pareto tail: 500 / u^(1/2), cut at the bound (mean about 1,000). */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u = ((double)(x >> 11) + 1) * 0x1p-53;
    double v = 500.0 / sqrt(u);
    lens[j] = v > 8192 ? 8192 : (uint32_t)v;
    uint64_t key = j + 1, first;
    uint32_t lengths[2] = {lens[j], lens[j]};
    size_t n = pack(buf, &key, &lens[j], 1);
    chime__span_t sp = {buf, n};
    assert_int_equal(chime__table_insert_spans(t, &sp, 1, 1, lengths, NULL,
                                               &first, NULL, NULL),
                     0);
    used += (uint64_t)lens[j] * 8;
    total_len += lens[j];
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  double mean = (double)total_len / 2000;
  print_message("mean length %.0f, used %llu B, held %llu B (%.4fx), "
                "padded to the bound %.2fx\n",
                mean, (unsigned long long)st.ragged_bytes,
                (unsigned long long)st.ragged_alloc_bytes,
                (double)st.ragged_alloc_bytes / (double)st.ragged_bytes,
                2000.0 * 8192 * 8 / (double)used);
  assert_true(mean > 800 && mean < 1200);
  assert_int_equal(st.ragged_bytes, used);
  assert_true((double)st.ragged_alloc_bytes <= 1.05 * (double)used);
  /* A batch: offsets[B] rows, each item's length by its key. */
  slot_t s;
  slot_init(&s, t, 64);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  uint64_t rows = 0;
  for (uint32_t j = 0; j < 64; j++) {
    uint64_t k = chime__key_count(s.ws.info[j].key);
    check_packed(&s, j, k, lens[k - 1]);
    rows += lens[k - 1];
  }
  assert_int_equal(s.ws.offsets[0][64], rows);
  slot_fini(&s);
  free(buf);
  free(lens);
  chime__table_destroy(t);
}

/* A batch never finished (its learner gone) gives its items back with
 * their rows, read from the slot's packed leaves. */
static void test_give_back(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SAMPLER_FIFO);
  chime__table_stats_t st;
  slot_t s, s2;
  uint32_t len[3] = {5, 0, 64};
  assert_int_equal(insert(t, len, 3, 1), 0);
  slot_init(&s, t, 3);
  slot_init(&s2, t, 3);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.ragged_bytes, 0);
  assert_int_equal(chime__table_give_back(t, &s.lay, s.mem), 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.ragged_bytes, 69 * 8);
  assert_int_equal(chime__table_sample(t, &s2.lay, &s2.ws, NULL), 0);
  for (uint32_t j = 0; j < 3; j++)
    check_packed(&s2, j, chime__key_make(0, 1 + j), len[j]);
  slot_fini(&s);
  slot_fini(&s2);
  chime__table_destroy(t);
}

/* Stream mode sends a pinned batch's bytes from spans over the slot and
 * the table: the ragged leaves and their offsets come from the slot, cut
 * at any chunk size, the same bytes as the slot holds. */
static void test_spans_send_offsets(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SAMPLER_FIFO);
  uint32_t len[4] = {7, 0, 64, 2};
  assert_int_equal(insert(t, len, 4, 1), 0);
  slot_t s;
  slot_init(&s, t, 4);
  slot_pin(&s);
  chime__table_waiter_t w;
  memset(&w, 0, sizeof(w));
  assert_int_equal(
      chime__table_try_sample_pinned(t, &s.lay, &s.ws, &s.pins, 4, &w), 0);
  size_t total = s.lay.info_offset + 4 * sizeof(chime_sample_info_t);
  uint8_t *got = malloc(total);
  assert_non_null(got);
  const size_t pieces[3] = {total, 100, 7};
  for (int p = 0; p < 3; p++) {
    memset(got, 0xab, total);
    for (size_t off = 0; off < total; off += pieces[p]) {
      size_t n = total - off < pieces[p] ? total - off : pieces[p];
      chime__span_t sp[64];
      size_t ns =
          chime__table_spans(t, &s.lay, &s.pins, s.mem, 4, off, n, sp, 64);
      assert_true(ns > 0);
      size_t at = off;
      for (size_t i = 0; i < ns; i++) {
        memcpy(got + at, sp[i].p, sp[i].len);
        at += sp[i].len;
      }
      assert_int_equal(at, off + n);
    }
    for (uint32_t l = 0; l < 2; l++)
      assert_memory_equal(got + s.lay.offsets_offset[l],
                          s.mem + s.lay.offsets_offset[l], 5 * 8);
    assert_memory_equal(got + s.lay.leaf_offset[0],
                        s.mem + s.lay.leaf_offset[0], 73 * 4);
    assert_memory_equal(got + s.lay.leaf_offset[1],
                        s.mem + s.lay.leaf_offset[1], 73 * 4);
    assert_memory_equal(got + s.lay.info_offset, s.mem + s.lay.info_offset,
                        4 * sizeof(chime_sample_info_t));
  }
  chime__table_unpin(t, &s.pins);
  free(got);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* Sequences keep fixed-shape steps; checkpoints of ragged items wait for
 * the next format. */
static void test_refusals(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "seq");
  assert_int_equal(chime_spec_parse(&tc.spec, "tokens:i32[<=8]", NULL, 0), 0);
  tc.capacity_steps = 64;
  tc.sequence_length = 4;
  tc.stride = 4;
  tc.sampler = CHIME__SAMPLER_UNIFORM;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);

  t = new_table(SPEC, 16, CHIME__SAMPLER_UNIFORM);
  uint32_t len[1] = {3};
  assert_int_equal(insert(t, len, 1, 1), 0);
  FILE *f = tmpfile();
  assert_non_null(f);
  uint8_t *buf = malloc(CHIME__CKPT_WBUF);
  assert_non_null(buf);
  chime__ckpt_file_t out;
  char err[256] = "";
  assert_int_equal(chime__checkpoint_write_table(t, fileno(f), buf, "tmp", &out,
                                                 err, sizeof(err)),
                   CHIME_ENOTSUP);
  assert_non_null(strstr(err, "ragged leaves"));
  free(buf);
  fclose(f);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_and_sample),
      cmocka_unit_test(test_refused_whole),
      cmocka_unit_test(test_bytes_stored_vs_used),
      cmocka_unit_test(test_give_back),
      cmocka_unit_test(test_spans_send_offsets),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
