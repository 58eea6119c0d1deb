/* Group tables in the replay engine alone (docs/replay.md, "Groups",
 * "Admission filters"): a group is one item (one key; evicted whole by the
 * remover; sampled whole, its samples' rows at the group's offsets), a
 * group whose lengths do not add up is refused naming it with nothing
 * inserted, and the filters drop what they name (the reasons given back
 * per group, counted per reason, a dropped group counted as inserted and
 * left and never sampled). */
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

#define GMAX 4

static chime__table_t *new_table_paced(uint64_t cap, int filters,
                                       uint64_t pace_batch) {
  chime__table_config_t tc;
  chime__table_t *t;
  chime_spec_t in;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "grp");
  assert_int_equal(chime_spec_parse(&in, "tokens:i32[<=16], r:f32"), 0);
  assert_int_equal(chime_spec_group(&tc.spec, &in, GMAX, NULL, 0), 0);
  tc.group_max = GMAX;
  if (filters) {
    tc.nfilters = 2;
    tc.filters[0] =
        (chime__group_filter_t){.kind = CHIME__FILTER_ZERO_VARIANCE, .leaf = 2};
    tc.filters[1] = (chime__group_filter_t){
        .kind = CHIME__FILTER_MEAN_OUTSIDE, .leaf = 2, .min = 0, .max = 10};
  }
  tc.capacity = cap;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.seed = 7;
  if (pace_batch != 0) {
    tc.max_staleness = 2;
    tc.pace_batch = pace_batch;
  }
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

static chime__table_t *new_table(uint64_t cap, int filters) {
  return new_table_paced(cap, filters, 0);
}

/* Group g (g % GMAX + 1 samples, sample j of (g + j) % 17 tokens g * 100 +
 * j * 10 + i, reward r[j] or g + j) into buf at *at; its lengths into len
 * (group, tokens, r). */
static void pack(uint8_t *buf, size_t *at, uint32_t g, const float *r,
                 uint32_t *len) {
  uint32_t n = g % GMAX + 1, rows = 0;
  for (uint32_t j = 0; j < n; j++) {
    uint32_t l = (g + j) % 17;
    memcpy(buf + *at + 4 * j, &l, 4);
    rows += l;
  }
  *at += 4 * n;
  for (uint32_t j = 0; j < n; j++)
    for (uint32_t i = 0; i < (g + j) % 17; i++, *at += 4) {
      int32_t v = (int32_t)(g * 100 + j * 10 + i);
      memcpy(buf + *at, &v, 4);
    }
  for (uint32_t j = 0; j < n; j++, *at += 4) {
    float v = r != NULL ? r[j] : (float)(g + j);
    memcpy(buf + *at, &v, 4);
  }
  len[0] = n;
  len[1] = rows;
  len[2] = n;
}

/* Inserts groups first..first+n-1, one request. */
static int insert_groups(chime__table_t *t, uint32_t first, uint32_t n,
                         const float *r, uint8_t *drop, char *why) {
  static uint8_t buf[1 << 16];
  uint32_t len[3 * 16];
  size_t at = 0;
  uint64_t key;
  for (uint32_t k = 0; k < n; k++)
    pack(buf, &at, first + k, r, len + 3 * k);
  chime__span_t sp = {buf, at};
  chime__table_stored_t st = {.why = why, .whylen = 256, .drop = drop};
  return chime__table_insert_stored(t, &sp, 1, n, len, NULL, NULL, &key, NULL,
                                    NULL, 0, &st);
}

/* The batch in s holds whole groups, each the one its key says. */
static void check_groups(const slot_t *s, uint32_t first) {
  uint32_t B = s->lay.batch_size;
  const int64_t *go = s->ws.offsets[0], *to = s->ws.offsets[1];
  const uint32_t *cols = (const uint32_t *)s->ws.leaf[0];
  const int32_t *tok = (const int32_t *)s->ws.leaf[1];
  const float *r = (const float *)s->ws.leaf[2];
  for (uint32_t b = 0; b < B; b++) {
    uint32_t g = (uint32_t)(s->ws.info[b].key & 0xffffffffffffull) - 1;
    assert_true(g >= first);
    assert_int_equal(go[b + 1] - go[b], g % GMAX + 1);
    assert_int_equal(s->ws.offsets[2][b], go[b]); /* a row per sample */
    int64_t at = to[b];
    for (int64_t k = go[b]; k < go[b + 1]; k++) {
      uint32_t j = (uint32_t)(k - go[b]);
      assert_int_equal(cols[k], (g + j) % 17);
      for (uint32_t i = 0; i < cols[k]; i++)
        assert_int_equal(tok[at + i], (int32_t)(g * 100 + j * 10 + i));
      at += cols[k];
      assert_true(r[k] == (float)(g + j));
    }
    assert_int_equal(at, to[b + 1]);
  }
}

static void test_groups_are_items(void **state) {
  (void)state;
  chime__table_t *t = new_table(3, 0);
  char why[256] = "";
  for (uint32_t g = 0; g < 5; g++) /* the first two evicted, whole */
    assert_int_equal(insert_groups(t, g, 1, NULL, NULL, why), 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.inserts, 5);
  assert_int_equal(st.left, 2);
  slot_t s;
  slot_init(&s, t, 3);
  atomic_int stop = 0;
  for (int i = 0; i < 20; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, &stop), 0);
    check_groups(&s, 2);
  }
  /* A group whose lengths do not add up: refused, named, none in. */
  static uint8_t buf[256];
  uint32_t len[3] = {2, 5, 2}, cols[2] = {2, 2};
  memcpy(buf, cols, sizeof(cols));
  chime__span_t sp = {buf, 8 + 5 * 4 + 2 * 4};
  chime__table_stored_t bad = {.why = why, .whylen = sizeof(why)};
  uint64_t key;
  assert_int_equal(chime__table_insert_stored(t, &sp, 1, 1, len, NULL, NULL,
                                              &key, NULL, NULL, 0, &bad),
                   CHIME_EINVAL);
  assert_non_null(strstr(why, "group 0: leaf 'tokens' holds 5 rows"));
  chime__table_get_stats(t, &st);
  assert_int_equal(st.inserts, 5);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_filters(void **state) {
  (void)state;
  chime__table_t *t = new_table(100, 1);
  char why[256] = "";
  uint8_t drop[8];
  /* Groups 1..4 (2, 3, 4, 1 samples): as given, then all alike, then out
   * of [0, 10]. */
  memset(drop, 0xff, sizeof(drop));
  assert_int_equal(insert_groups(t, 1, 3, NULL, drop, why), 0);
  assert_memory_equal(drop, ((uint8_t[]){0, 0, 0}), 3);
  const float same[GMAX] = {2, 2, 2, 2}, big[GMAX] = {9, 11, 12, 13};
  memset(drop, 0xff, sizeof(drop));
  assert_int_equal(insert_groups(t, 5, 2, same, drop, why), 0);
  assert_memory_equal(drop, ((uint8_t[]){1, 1}), 2);
  memset(drop, 0xff, sizeof(drop));
  assert_int_equal(insert_groups(t, 9, 3, big, drop, why), 0);
  /* groups 9 (2 samples: mean 10), 10 (3: 10.67), 11 (4: 11.25) */
  assert_memory_equal(drop, ((uint8_t[]){0, 2, 2}), 3);
  /* A single sample has no variance. */
  memset(drop, 0xff, sizeof(drop));
  assert_int_equal(insert_groups(t, 4, 1, NULL, drop, why), 0);
  assert_int_equal(drop[0], 1);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.inserts, 9);
  assert_int_equal(st.size, 4);
  assert_int_equal(st.left, 5);
  assert_int_equal(st.dropped_zero_variance, 3);
  assert_int_equal(st.dropped_mean_outside, 2);
  chime__table_destroy(t);
}

/* Pacing counts what a learner will draw (docs/replay.md, "Pacing
 * producers"): a group a filter dropped never goes in, so it is not
 * written ahead of the learner (were it, producers whose groups are all
 * dropped would close the gate on a table that stays empty). */
static void test_dropped_not_ahead(void **state) {
  (void)state;
  chime__table_t *t = new_table_paced(100, 1, 50);
  char why[256] = "";
  uint8_t drop[8];
  const float same[GMAX] = {2, 2, 2, 2};
  assert_int_equal(insert_groups(t, 5, 2, same, drop, why),
                   0); /* both dropped */
  assert_int_equal(insert_groups(t, 1, 3, NULL, drop, why), 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.dropped_zero_variance, 2);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.pace_ahead, 3);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_groups_are_items),
      cmocka_unit_test(test_filters),
      cmocka_unit_test(test_dropped_not_ahead),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
