/* Ragged leaves in a table: each item stores only the rows it uses (its
 * bytes measured against the allocator's), lengths past a bound or unlike
 * the length they share are refused with nothing inserted, a batch packs
 * each ragged leaf's rows back to back with count + 1 offsets, items given
 * back keep their rows, sequence tables refuse ragged specs, checkpoints
 * (format version 5) keep each item's lengths and only its rows used and
 * refuse a corrupt length, a stale sample (max_staleness) is skipped at
 * its own lengths. */
#include <math.h>
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
#include "common/key.h"
#include "replay/ckpt_format.h"
#include "replay/crc32c.h"
#include "replay/table.h"
#include "table_ckpt.h"
#include "table_slot.h"

#define SPEC "tokens:i32[<=64], lp:f32[<=64 ~tokens], r:f32[]"

static chime__table_t *new_table(const char *spec, uint64_t cap,
                                 chime__selector_kind_t s) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "rag");
  assert_int_equal(chime_spec_parse(&tc.spec, spec), 0);
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
static int insert_lengths(chime__table_t *t, const uint32_t *len, uint32_t n,
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
  chime__table_t *t = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
  chime__table_stats_t st;
  slot_t s;
  uint32_t len[5] = {0, 3, 64, 1, 10};
  assert_int_equal(insert_lengths(t, len, 5, 1), 0);
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

/* A sample too far behind the newest version (max_staleness) never goes
 * in, and is skipped by its own bytes at its lengths: the samples after it
 * read their own rows, not the stale one's. */
static void test_stale_sample_skipped(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "rag");
  assert_int_equal(chime_spec_parse(&tc.spec, SPEC), 0);
  tc.capacity = 16;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.seed = 7;
  tc.max_staleness = 1;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  const uint64_t keys[4] = {1, 2, 3, 4};
  const uint32_t len[4] = {3, 40, 5, 7};
  const uint64_t vers[4] = {5, 1, 5, 5}; /* the second is 4 behind */
  uint32_t lengths[8];
  static uint8_t buf[4 * (64 * 8 + 4)];
  for (uint32_t j = 0; j < 4; j++)
    lengths[2 * j] = lengths[2 * j + 1] = len[j];
  size_t bytes = pack(buf, keys, len, 4);
  chime__span_t sp = {buf, bytes};
  chime__table_versions_t v = {vers, 4};
  uint64_t first;
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, 4, lengths, NULL,
                                                 &v, &first, NULL, NULL, 0),
                   0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.removed_stale, 1);
  assert_int_equal(st.ragged_bytes, (3 + 5 + 7) * 8);
  slot_t s;
  slot_init(&s, t, 3);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  check_packed(&s, 0, chime__key_make(0, 1), 3);
  check_packed(&s, 1, chime__key_make(0, 3), 5);
  check_packed(&s, 2, chime__key_make(0, 4), 7);
  assert_int_equal(s.ws.info[1].version, 5);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* Too long, unlike the shared length, too few bytes: refused whole. */
static void test_refused_whole(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SELECTOR_UNIFORM);
  chime__table_stats_t st;
  uint32_t ok[2] = {2, 2};
  assert_int_equal(insert_lengths(t, ok, 2, 1), 0);
  uint32_t long_[3] = {1, 65, 1};
  assert_int_equal(insert_lengths(t, long_, 3, 10), CHIME_EINVAL);
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
                CHIME__SELECTOR_UNIFORM);
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
 * their ragged rows: its pinned table rows keep them while it is out, the
 * give-back makes them live again from those rows whatever the slot holds
 * (the unpin frees nothing), and a batch that takes them out unpinned
 * frees them. */
static void test_give_back(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
  chime__table_stats_t st;
  slot_t s, s2;
  uint32_t len[3] = {5, 0, 64};
  assert_int_equal(insert_lengths(t, len, 3, 1), 0);
  slot_init(&s, t, 3);
  slot_pin(&s);
  slot_init(&s2, t, 3);
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.ragged_bytes, 69 * 8); /* held by the pinned rows */
  /* A learner may write its slot wild (offsets -1, info all ones): the
   * give-back reads none of it. */
  memset(s.mem, 0xff, s.lay.slot_bytes);
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.ragged_bytes, 69 * 8);
  assert_int_equal(chime__table_sample(t, &s2.lay, &s2.ws, NULL), 0);
  for (uint32_t j = 0; j < 3; j++)
    check_packed(&s2, j, chime__key_make(0, 1 + j), len[j]);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.ragged_bytes, 0);
  slot_fini(&s);
  slot_fini(&s2);
  chime__table_destroy(t);
}

/* Stream mode sends a pinned batch's bytes from spans over the slot and
 * the table: the ragged leaves and their offsets come from the slot, cut
 * at any chunk size, the same bytes as the slot holds. */
static void test_spans_send_offsets(void **state) {
  (void)state;
  chime__table_t *t = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
  uint32_t len[4] = {7, 0, 64, 2};
  assert_int_equal(insert_lengths(t, len, 4, 1), 0);
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

/* Sequences keep fixed-shape steps. */
static void test_refusals(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "seq");
  assert_int_equal(chime_spec_parse(&tc.spec, "tokens:i32[<=8]"), 0);
  tc.capacity_steps = 64;
  tc.sequence_length = 4;
  tc.stride = 4;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
}

static const uint32_t CK_LEN[5] = {0, 3, 64, 1, 10};
static const uint64_t CK_VER[5] = {4, 5, 5, 6, 9};

/* A fifo table of SPEC holding CK_LEN's items with CK_VER's versions. */
static chime__table_t *ckpt_table(void) {
  chime__table_t *t = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
  uint64_t keys[5] = {1, 2, 3, 4, 5}, first;
  uint32_t lengths[10];
  static uint8_t buf[5 * (64 * 8 + 4)];
  for (uint32_t j = 0; j < 5; j++)
    lengths[2 * j] = lengths[2 * j + 1] = CK_LEN[j];
  chime__span_t sp = {buf, pack(buf, keys, CK_LEN, 5)};
  chime__table_versions_t v = {CK_VER, 5};
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, 5, lengths, NULL,
                                                 &v, &first, NULL, NULL, 0),
                   0);
  return t;
}

/* Where item i's lengths are in a file of ckpt_table's: after the header
 * and the records before it (key, time, priority, times, version, two
 * lengths, then the rows used and r). */
static size_t ckpt_len_at(const chime__table_t *t, uint32_t i) {
  char spec[256];
  assert_int_equal(
      chime_spec_format(&chime__table_config(t)->spec, spec, sizeof(spec)), 0);
  /* ... the newest version, no compressed leaves, no writers (version 6),
   * the samples ahead (pacing, version 7) */
  size_t at =
      8 + 4 + 4 + 4 + (4 + 3) + (4 + strlen(spec)) + 8 * 8 + 8 + 4 + 8 + 8;
  for (uint32_t j = 0; j < i; j++)
    at += 28 + 8 + 8 + 8 * (size_t)CK_LEN[j] + 4;
  return at + 28 + 8;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crc(uint8_t *p, size_t n) {
  put_u32(p + n - 4, chime__crc32c(0, p, n - 4));
}

/* A ragged table's checkpoint (format version 5): each item's lengths and
 * only its rows used go into the file, and load back into a fresh table
 * as they were (rows, offsets, versions, the bytes stored), which writes
 * the very same file again. */
static void test_checkpoint_roundtrip(void **state) {
  (void)state;
  chime__table_t *a = ckpt_table(),
                 *b = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
  uint8_t *pa, *pb;
  char err[512] = "";
  size_t na = ckpt_write(a, &pa);
  assert_int_equal(pa[8], 7);
  /* No padding: 78 rows of 8 bytes used, where the bound is 5 x 64. */
  assert_int_equal(na, ckpt_len_at(a, 5) - 28 - 8 + 4);
  if (ckpt_load(b, pa, na, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  chime__table_stats_t sa, sb;
  chime__table_get_stats(a, &sa);
  chime__table_get_stats(b, &sb);
  assert_int_equal(sb.size, 5);
  assert_int_equal(sb.ragged_bytes, sa.ragged_bytes);
  assert_int_equal(sb.newest_version, 9);
  size_t nb = ckpt_write(b, &pb);
  assert_int_equal(nb, na);
  assert_memory_equal(pb, pa, na);
  slot_t s;
  slot_init(&s, b, 5);
  assert_int_equal(chime__table_sample(b, &s.lay, &s.ws, NULL), 0);
  const int64_t want[6] = {0, 0, 3, 67, 68, 78};
  for (uint32_t j = 0; j < 5; j++) {
    assert_int_equal(s.ws.offsets[0][j + 1], want[j + 1]);
    check_packed(&s, j, chime__key_make(0, 1 + j), CK_LEN[j]);
    assert_int_equal(s.ws.info[j].version, CK_VER[j]);
  }
  slot_fini(&s);
  free(pa);
  free(pb);
  chime__table_destroy(a);
  chime__table_destroy(b);
}

/* A corrupt length is refused naming the file and the item, before any
 * item goes in, and nothing is read or written past a buffer (ASan): past
 * its bound, unlike the length it shares, more bytes than the file holds;
 * a ragged spec in a file older than version 5; a length past its bound
 * handed to the table directly. */
static void test_checkpoint_corrupt(void **state) {
  (void)state;
  chime__table_t *a = ckpt_table();
  uint8_t *p;
  char err[512] = "";
  size_t n = ckpt_write(a, &p);
  uint8_t *q = malloc(n);
  assert_non_null(q);
  static const struct {
    uint32_t item, tok, lp;
    const char *why;
  } bad[] = {
      {1, 65, 65, "more than its bound 64"},
      {2, 64, 63, "they share a length"},
      {4, 64, 64, "left in the file"},
      {4, 9, 9, "do not fill"},
  };
  for (size_t c = 0; c < sizeof(bad) / sizeof(bad[0]); c++) {
    chime__table_t *b = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
    memcpy(q, p, n);
    size_t at = ckpt_len_at(a, bad[c].item);
    put_u32(q + at, bad[c].tok);
    put_u32(q + at + 4, bad[c].lp);
    fix_crc(q, n);
    assert_int_equal(ckpt_load(b, q, n, err, sizeof(err)), CHIME_ECORRUPT);
    if (strstr(err, "table-000.ckpt") == NULL ||
        strstr(err, bad[c].why) == NULL)
      fail_msg("case %zu: %s", c, err);
    chime__table_stats_t st;
    chime__table_get_stats(b, &st);
    assert_int_equal(st.size, 0);
    chime__table_destroy(b);
  }
  /* Version 4 knew no ragged leaves. */
  chime__table_t *b = new_table(SPEC, 16, CHIME__SELECTOR_FIFO);
  memcpy(q, p, n);
  put_u32(q + 8, 4);
  fix_crc(q, n);
  assert_int_equal(ckpt_load(b, q, n, err, sizeof(err)), CHIME_ECORRUPT);
  assert_non_null(strstr(err, "version 4"));
  uint32_t len[2] = {65, 65};
  uint8_t sample[65 * 8 + 4] = {0};
  assert_int_equal(
      chime__table_restore_item_ragged(b, 1, 0, 1.0, 0, 0, len, sample),
      CHIME_EINVAL);
  len[0] = 2;
  assert_int_equal(
      chime__table_restore_item_ragged(b, 1, 0, 1.0, 0, 0, len, sample),
      CHIME_EINVAL);
  chime__table_destroy(b);
  free(q);
  free(p);
  chime__table_destroy(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_and_sample),
      cmocka_unit_test(test_refused_whole),
      cmocka_unit_test(test_bytes_stored_vs_used),
      cmocka_unit_test(test_give_back),
      cmocka_unit_test(test_spans_send_offsets),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_checkpoint_roundtrip),
      cmocka_unit_test(test_checkpoint_corrupt),
      cmocka_unit_test(test_stale_sample_skipped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
