/* Batches sampled with their rows kept pinned (stream mode sends them from
 * the table): the spans give a batch's bytes exactly as a copy would, pinned
 * rows survive inserts that evict their items (spare rows stand in), and
 * items a batch took out come back from its pinned rows when the batch is
 * given back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/table.h"
#include "table_slot.h"

/* spec "big:u8[5000], small:u32[]": big is sent from the table (a run of
 * 5000 bytes >= the 4096 copy threshold), small copied; both encode the key */
#define BIG 5000u
#define COPY_MIN 4096u
#define SB (BIG + 4u)

static chime__table_t *new_table(uint64_t cap, chime__selector_kind_t sampler,
                                 uint64_t mts) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "big:u8[5000], small:u32[]"), 0);
  tc.capacity = cap;
  tc.sampler = sampler;
  tc.max_times_sampled = mts;
  tc.seed = 7;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* Every slot here keeps its batch's rows pinned (stream mode's path). */
static void pinned_slot(slot_t *s, const chime__table_t *t, uint32_t batch) {
  slot_init(s, t, batch);
  slot_pin(s);
}

static void insert_keys(chime__table_t *t, uint64_t first, uint32_t n) {
  uint8_t *buf = malloc((size_t)n * SB);
  uint64_t k;
  assert_non_null(buf);
  for (uint32_t i = 0; i < n; i++) {
    memset(buf + (size_t)i * SB, (int)((first + i) & 0xff), BIG);
    uint32_t v = (uint32_t)(first + i) * 3u;
    memcpy(buf + (size_t)i * SB + BIG, &v, 4);
  }
  assert_int_equal(chime__table_insert(t, buf, n, NULL, &k, NULL, NULL), 0);
  assert_int_equal(k, first);
  free(buf);
}

static size_t send_bytes(const slot_t *s) {
  return s->lay.info_offset +
         (size_t)s->lay.batch_size * sizeof(chime_sample_info_t);
}

/* The batch as the sender would send it: spans of pieces of `piece`
 * bytes (chunk boundaries anywhere), concatenated. */
static uint8_t *gather(const chime__table_t *t, const slot_t *s, size_t piece) {
  size_t total = send_bytes(s);
  uint8_t *out = malloc(total);
  chime__span_t sp[64];
  assert_non_null(out);
  for (size_t off = 0; off < total; off += piece) {
    size_t len = total - off < piece ? total - off : piece;
    size_t max = 2 * len / COPY_MIN + 2 * 2 + 4;
    assert_true(max <= 64);
    size_t n = chime__table_spans(t, &s->lay, &s->pins, s->mem, COPY_MIN, off,
                                  len, sp, max);
    assert_true(n > 0);
    size_t at = off;
    for (size_t i = 0; i < n; i++) {
      memcpy(out + at, sp[i].p, sp[i].len);
      at += sp[i].len;
    }
    assert_int_equal(at, off + len);
  }
  return out;
}

/* The bytes a copy of the batch would have: each sample's leaves from its
 * key, zeros between the leaves, then the info. */
static void check_copied_batch(const slot_t *s, const uint8_t *got) {
  const chime_ring_layout_t *lay = &s->lay;
  for (uint32_t j = 0; j < lay->batch_size; j++) {
    uint64_t key = s->ws.info[j].key;
    const uint8_t *big = got + lay->leaf_offset[0] + (size_t)j * BIG;
    for (uint32_t b = 0; b < BIG; b++)
      assert_int_equal(big[b], key & 0xff);
    uint32_t v;
    memcpy(&v, got + lay->leaf_offset[1] + (size_t)j * 4, 4);
    assert_int_equal(v, (uint32_t)key * 3u);
  }
  uint64_t end0 = lay->leaf_offset[0] + lay->leaf_bytes[0];
  for (uint64_t b = end0; b < lay->leaf_offset[1]; b++)
    assert_int_equal(got[b], 0);
  uint64_t end1 = lay->leaf_offset[1] + lay->leaf_bytes[1];
  for (uint64_t b = end1; b < lay->info_offset; b++)
    assert_int_equal(got[b], 0);
  assert_memory_equal(got + lay->info_offset, s->ws.info,
                      lay->batch_size * sizeof(chime_sample_info_t));
}

/* Uniform (scattered rows) and fifo (one run): the spans, cut at any chunk
 * size, give the bytes a copy gives. */
static void test_spans_match_copy(void **state) {
  (void)state;
  chime__selector_kind_t kinds[2] = {CHIME__SELECTOR_UNIFORM,
                                     CHIME__SELECTOR_FIFO};
  for (int k = 0; k < 2; k++) {
    chime__table_t *t = new_table(64, kinds[k], 0);
    slot_t s;
    pinned_slot(&s, t, 16);
    insert_keys(t, 1, 40);
    assert_int_equal(slot_sample_pinned(t, &s, COPY_MIN), 0);
    assert_int_equal(s.pins.n, 16);
    size_t pieces[] = {1, 777, 4096, 5000, 1u << 20};
    for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
      uint8_t *got = gather(t, &s, pieces[p]);
      check_copied_batch(&s, got);
      free(got);
    }
    chime__table_unpin(t, &s.pins);
    assert_int_equal(s.pins.n, 0);
    chime__table_unpin(t, &s.pins); /* idempotent */
    slot_fini(&s);
    chime__table_destroy(t);
  }
}

/* A uniform table overwritten twice while a batch is pinned: inserts go on
 * (spare rows) and the batch's bytes stay those of its items. */
static void test_pinned_rows_survive_eviction(void **state) {
  (void)state;
  chime__table_t *t = new_table(8, CHIME__SELECTOR_UNIFORM, 0);
  slot_t s;
  pinned_slot(&s, t, 8);
  insert_keys(t, 1, 8);
  assert_int_equal(slot_sample_pinned(t, &s, COPY_MIN), 0);
  /* Every item evicted twice over; a wait for a pinned row would hang
   * here (the test's timeout). */
  insert_keys(t, 9, 8);
  insert_keys(t, 17, 8);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 8);
  uint8_t *got = gather(t, &s, 3000);
  check_copied_batch(&s, got);
  for (uint32_t j = 0; j < 8; j++)
    assert_true(s.ws.info[j].key >= 1 && s.ws.info[j].key <= 8);
  free(got);
  chime__table_unpin(t, &s.pins);
  /* The rows are free again: the table keeps taking inserts. */
  for (uint64_t k = 25; k < 25 + 64; k += 8)
    insert_keys(t, k, 8);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* fifo: a batch given back from its pinned rows comes first again, in
 * order, once; a second give-back or one after the unpin does nothing. */
static void test_give_back_pinned_fifo(void **state) {
  (void)state;
  chime__table_t *t = new_table(16, CHIME__SELECTOR_FIFO, 0);
  slot_t a, b;
  pinned_slot(&a, t, 4);
  pinned_slot(&b, t, 4);
  insert_keys(t, 1, 10);
  assert_int_equal(slot_sample_pinned(t, &a, COPY_MIN), 0); /* keys 1..4 */
  assert_int_equal(slot_sample_pinned(t, &b, COPY_MIN), 0); /* keys 5..8 */
  for (uint32_t j = 0; j < 4; j++) {
    assert_int_equal(a.ws.info[j].key, 1 + j);
    assert_int_equal(b.ws.info[j].key, 5 + j);
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2);
  /* A learner's batches go back newest first (as the stream does). */
  chime__table_give_back_pinned(t, &b.lay, &b.pins);
  chime__table_give_back_pinned(t, &a.lay, &a.pins);
  chime__table_give_back_pinned(t, &a.lay, &a.pins); /* again */
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 10);
  assert_int_equal(st.returned, 8);
  chime__table_unpin(t, &a.pins);
  chime__table_unpin(t, &b.pins);
  /* Live again, not freed by the unpin: 1..10 come out in order. */
  slot_t c;
  pinned_slot(&c, t, 10);
  assert_int_equal(chime__table_sample(t, &c.lay, &c.ws, NULL), 0);
  for (uint32_t j = 0; j < 10; j++) {
    assert_int_equal(c.ws.info[j].key, 1 + j);
    assert_int_equal(c.ws.info[j].times_sampled, 1);
    uint32_t v;
    memcpy(&v, (uint8_t *)c.ws.leaf[1] + 4 * j, 4);
    assert_int_equal(v, (uint32_t)(1 + j) * 3u);
  }
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  slot_fini(&a);
  slot_fini(&b);
  slot_fini(&c);
  chime__table_destroy(t);
}

/* uniform with max_times_sampled 1 (shm: the batch copied whole, its rows
 * kept pinned): the items leave, inserts meanwhile go to other rows, and
 * given back from the pinned rows the items are live again with their
 * keys, so MutatePriorities finds them, and their bytes. */
static void test_give_back_pinned_mts(void **state) {
  (void)state;
  chime__table_t *t = new_table(32, CHIME__SELECTOR_UNIFORM, 1);
  slot_t s;
  pinned_slot(&s, t, 8);
  insert_keys(t, 1, 8);
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.left, 8);
  insert_keys(t, 9, 8);
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 16);
  assert_int_equal(st.left, 0);
  uint64_t keys[8];
  double prio[8];
  for (int i = 0; i < 8; i++) {
    keys[i] = 1 + (uint64_t)i;
    prio[i] = 2.0;
  }
  chime__table_mutated_t m;
  assert_int_equal(chime__table_mutate(t, keys, prio, 8, NULL, 0, &m), 0);
  assert_int_equal(m.updated, 8);
  assert_int_equal(m.unknown, 0);
  /* Every item once more, bytes intact. */
  slot_t all;
  pinned_slot(&all, t, 16);
  assert_int_equal(chime__table_sample(t, &all.lay, &all.ws, NULL), 0);
  int seen[17] = {0};
  for (uint32_t j = 0; j < 16; j++) {
    uint64_t key = all.ws.info[j].key;
    assert_true(key >= 1 && key <= 16);
    seen[key]++;
    assert_int_equal(((uint8_t *)all.ws.leaf[0])[(size_t)j * BIG], key & 0xff);
  }
  for (int k = 1; k <= 16; k++)
    assert_int_equal(seen[k], 1);
  slot_fini(&s);
  slot_fini(&all);
  chime__table_destroy(t);
}

/* max_times_sampled 2, fifo: one batch draws the oldest item twice (its
 * first draw leaves it live, the second takes it out). Given back from its
 * pinned rows, it has the count it had before the batch (0), not before
 * the batch's last draw of it (1): one more draw leaves it live. */
static void test_give_back_times_before_batch(void **state) {
  (void)state;
  chime__table_t *t = new_table(8, CHIME__SELECTOR_FIFO, 2);
  slot_t s, one;
  pinned_slot(&s, t, 2);
  pinned_slot(&one, t, 1);
  insert_keys(t, 1, 2);
  assert_int_equal(slot_sample_pinned(t, &s, COPY_MIN), 0);
  assert_int_equal(s.ws.info[0].key, 1);
  assert_int_equal(s.ws.info[1].key, 1);
  assert_int_equal(s.ws.info[0].times_sampled, 1);
  assert_int_equal(s.ws.info[1].times_sampled, 2);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 1);
  assert_int_equal(st.left_times_sampled, 2);
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2);
  assert_int_equal(st.left, 0);
  assert_int_equal(st.left_times_sampled, 0);
  assert_int_equal(chime__table_sample(t, &one.lay, &one.ws, NULL), 0);
  assert_int_equal(one.ws.info[0].key, 1);
  assert_int_equal(one.ws.info[0].times_sampled, 1);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2); /* still there: one of its two draws */
  slot_fini(&s);
  slot_fini(&one);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spans_match_copy),
      cmocka_unit_test(test_pinned_rows_survive_eviction),
      cmocka_unit_test(test_give_back_pinned_fifo),
      cmocka_unit_test(test_give_back_pinned_mts),
      cmocka_unit_test(test_give_back_times_before_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
