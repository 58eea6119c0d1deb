/* Removers as Reverb's: a sample that finds the table full goes in, then
 * the remover picks the item that leaves among all of them, the sample
 * itself included (Reverb's Table inserts, then deletes what its remover
 * selects while the table is over its max_size). Exact cases for fifo,
 * lifo and the heaps (Reverb's InsertDeletesWhenOverflowing among them),
 * and the distributions of uniform and prioritized removers by chi-square
 * over many draws (fixed seeds: the same draws every run; thresholds a
 * correct remover passes with p > 1e-6). A picked sample is still acked:
 * it took a key and counts as inserted and as left. */
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
#include "replay/table.h"

static chime__table_t *rm_table(uint64_t cap, chime__selector_kind_t remover,
                                double exponent, uint64_t seed) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "rm");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u32[]"), 0);
  tc.capacity = cap;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.remover = remover;
  tc.priority_exponent = exponent;
  tc.min_size = 1;
  tc.seed = seed;
  chime__table_t *t;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* Inserts n samples in one request (priorities may be NULL) and returns
 * the first key: the insert is acked whatever the remover picks. */
static uint64_t ins(chime__table_t *t, uint32_t n, const double *prio) {
  uint32_t x[16] = {0};
  uint64_t k;
  assert_true(n <= 16);
  assert_int_equal(
      chime__table_insert(t, (const uint8_t *)x, n, prio, &k, NULL, NULL), 0);
  return k;
}

/* Whether key is in the table: an update of it (priority 1) counts it.
 * Changes its priority: for tables whose priorities are reset after. */
static int is_live(chime__table_t *t, uint64_t key) {
  chime__table_mutated_t m;
  double one = 1.0;
  assert_int_equal(chime__table_mutate(t, &key, &one, 1, NULL, 0, &m), 0);
  return m.updated == 1;
}

/* The table holds exactly keys want[0, n) of 1 .. upto (each probed with
 * a delete: the end of a case), and its counts agree. */
static void check_live(chime__table_t *t, uint64_t upto, const uint64_t *want,
                       uint32_t n) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, n);
  assert_int_equal(st.inserts, upto);
  assert_int_equal(st.left, upto - n);
  for (uint64_t k = 1; k <= upto; k++) {
    chime__table_mutated_t m;
    int wanted = 0;
    for (uint32_t i = 0; i < n; i++)
      wanted |= want[i] == k;
    assert_int_equal(chime__table_mutate(t, NULL, NULL, 0, &k, 1, &m), 0);
    if (m.deleted != (uint32_t)wanted)
      fail_msg("key %llu: %s", (unsigned long long)k,
               wanted ? "gone, should be live" : "live, should be gone");
  }
}

/* Reverb's InsertDeletesWhenOverflowing: a uniform table (fifo remover)
 * of 10 after 15 inserts holds the last 10, inserted one by one or in
 * one request. */
static void test_insert_deletes_when_overflowing(void **state) {
  (void)state;
  uint64_t want[10];
  for (int i = 0; i < 10; i++)
    want[i] = 6 + (uint64_t)i;
  chime__table_t *t = rm_table(10, CHIME__SELECTOR_FIFO, 1, 1);
  for (int i = 0; i < 15; i++)
    assert_int_equal(ins(t, 1, NULL), (uint64_t)i + 1);
  check_live(t, 15, want, 10);
  chime__table_destroy(t);
  t = rm_table(10, CHIME__SELECTOR_FIFO, 1, 1);
  assert_int_equal(ins(t, 15, NULL), 1);
  check_live(t, 15, want, 10);
  chime__table_destroy(t);
}

/* Issue 20's table: capacity 3 holding priorities 5, 1, 3 (keys 1-3),
 * then a fourth sample of priority p. */
static chime__table_t *five_one_three(chime__selector_kind_t remover,
                                      double p) {
  chime__table_t *t = rm_table(3, remover, 1, 2);
  ins(t, 3, (double[]){5, 1, 3});
  assert_int_equal(ins(t, 1, &p), 4);
  return t;
}

static void test_exact_removers(void **state) {
  (void)state;
  chime__table_t *t;
  /* lifo: the newest of all is the sample coming in, always. */
  t = five_one_three(CHIME__SELECTOR_LIFO, 1);
  check_live(t, 4, (uint64_t[]){1, 2, 3}, 3);
  chime__table_destroy(t);
  /* fifo: the oldest. */
  t = five_one_three(CHIME__SELECTOR_FIFO, 1);
  check_live(t, 4, (uint64_t[]){2, 3, 4}, 3);
  chime__table_destroy(t);
  /* min_heap: the sample when it is the lowest; of equal priorities the
   * older item leaves (Reverb's heap: inserted or updated earliest). */
  t = five_one_three(CHIME__SELECTOR_MIN_HEAP, 0.5);
  check_live(t, 4, (uint64_t[]){1, 2, 3}, 3);
  chime__table_destroy(t);
  t = five_one_three(CHIME__SELECTOR_MIN_HEAP, 2);
  check_live(t, 4, (uint64_t[]){1, 3, 4}, 3);
  chime__table_destroy(t);
  t = five_one_three(CHIME__SELECTOR_MIN_HEAP, 1);
  check_live(t, 4, (uint64_t[]){1, 3, 4}, 3);
  chime__table_destroy(t);
  /* max_heap: the same from the top. */
  t = five_one_three(CHIME__SELECTOR_MAX_HEAP, 9);
  check_live(t, 4, (uint64_t[]){1, 2, 3}, 3);
  chime__table_destroy(t);
  t = five_one_three(CHIME__SELECTOR_MAX_HEAP, 4);
  check_live(t, 4, (uint64_t[]){2, 3, 4}, 3);
  chime__table_destroy(t);
  t = five_one_three(CHIME__SELECTOR_MAX_HEAP, 5);
  check_live(t, 4, (uint64_t[]){2, 3, 4}, 3);
  chime__table_destroy(t);
  /* prioritized: a sample of weight 0 in a table with weights leaves
   * never... */
  t = five_one_three(CHIME__SELECTOR_PRIORITIZED, 0);
  assert_true(is_live(t, 4));
  chime__table_destroy(t);
  /* ...and is the only one that can when the others weigh 0. */
  t = rm_table(3, CHIME__SELECTOR_PRIORITIZED, 1, 3);
  ins(t, 3, (double[]){0, 0, 0});
  ins(t, 1, (double[]){7});
  check_live(t, 4, (uint64_t[]){1, 2, 3}, 3);
  chime__table_destroy(t);
}

/* A request is its samples one after another: each that finds the table
 * full is a candidate with the rest, the request's earlier ones
 * included. */
static void test_requests_one_sample_at_a_time(void **state) {
  (void)state;
  /* lifo, 5 into 3: the last two leave as they come. */
  chime__table_t *t = rm_table(3, CHIME__SELECTOR_LIFO, 1, 4);
  assert_int_equal(ins(t, 5, NULL), 1);
  check_live(t, 5, (uint64_t[]){1, 2, 3}, 3);
  chime__table_destroy(t);
  /* min_heap, priorities 3 1 2 into 2: the third finds 3 and 1, and 1
   * leaves; then 0.5 is the lowest of all. */
  t = rm_table(2, CHIME__SELECTOR_MIN_HEAP, 1, 5);
  assert_int_equal(ins(t, 4, (double[]){3, 1, 2, 0.5}), 1);
  check_live(t, 4, (uint64_t[]){1, 3}, 2);
  chime__table_destroy(t);
  /* max_heap into 1: the lower of the one held and the one coming in
   * stays, so 4 6 5 keeps the first, 6 4 5 the second. */
  t = rm_table(1, CHIME__SELECTOR_MAX_HEAP, 1, 6);
  assert_int_equal(ins(t, 3, (double[]){4, 6, 5}), 1);
  check_live(t, 3, (uint64_t[]){1}, 1);
  chime__table_destroy(t);
  t = rm_table(1, CHIME__SELECTOR_MAX_HEAP, 1, 6);
  assert_int_equal(ins(t, 3, (double[]){6, 4, 5}), 1);
  check_live(t, 3, (uint64_t[]){2}, 1);
  chime__table_destroy(t);
}

/* Pearson's chi-square of counts against probabilities p (k cells). */
static double chi_square(const uint64_t *count, const double *p, int k,
                         uint64_t n) {
  double chi = 0;
  for (int i = 0; i < k; i++) {
    double e = (double)n * p[i];
    chi += ((double)count[i] - e) * ((double)count[i] - e) / e;
  }
  return chi;
}

/* A chi-square bound for 3 degrees of freedom with p < 1e-6 for a correct
 * remover (30.7 is p = 1e-6): fixed seeds make the draws the same every
 * run, so the test cannot flake. */
#define CHI3 32.0

/* A full table of capacity 3 whose items (oldest first) have priorities
 * prio[0..2] (NULL: no priorities), and a fourth sample of priority
 * prio[3], n times: how often each of the four leaves. The items left
 * after a trial are the next trial's, their priorities set again. */
static void victims(chime__selector_kind_t remover, double exponent,
                    const double *prio, uint64_t n, uint64_t *count) {
  chime__table_t *t = rm_table(3, remover, exponent, 20240611);
  uint64_t live[3];
  live[0] = ins(t, 3, prio);
  live[1] = live[0] + 1;
  live[2] = live[0] + 2;
  memset(count, 0, 4 * sizeof(*count));
  for (uint64_t i = 0; i < n; i++) {
    if (prio != NULL) {
      chime__table_mutated_t m;
      assert_int_equal(chime__table_mutate(t, live, prio, 3, NULL, 0, &m), 0);
      assert_int_equal(m.updated, 3);
    }
    uint64_t k = ins(t, 1, prio != NULL ? &prio[3] : NULL);
    uint64_t was[4] = {live[0], live[1], live[2], k};
    int gone = -1, j = 0;
    for (int c = 0; c < 4; c++) {
      if (is_live(t, was[c])) {
        assert_true(j < 3);
        live[j++] = was[c]; /* still oldest first */
      } else {
        assert_int_equal(gone, -1); /* exactly one left */
        gone = c;
      }
    }
    assert_true(gone >= 0);
    count[gone]++;
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.inserts, n + 3);
  assert_int_equal(st.left, n);
  chime__table_destroy(t);
}

/* uniform: each of the four, the new sample included, with 1/4. */
static void test_uniform_remover_distribution(void **state) {
  (void)state;
  uint64_t count[4], n = 20000;
  const double p[4] = {0.25, 0.25, 0.25, 0.25};
  victims(CHIME__SELECTOR_UNIFORM, 1, NULL, n, count);
  double chi = chi_square(count, p, 4, n);
  print_message("uniform remover: %llu %llu %llu %llu (new), chi-square %.1f\n",
                (unsigned long long)count[0], (unsigned long long)count[1],
                (unsigned long long)count[2], (unsigned long long)count[3],
                chi);
  if (chi > CHI3)
    fail_msg("uniform remover: chi-square %.1f", chi);
}

/* prioritized: issue 20's table (5, 1, 3, and 2 coming in): 5/11, 1/11,
 * 3/11 and 2/11 for the new sample; with an exponent, by the weights. */
static void test_prioritized_remover_distribution(void **state) {
  (void)state;
  const double prio[4] = {5, 1, 3, 2};
  const double exps[] = {1.0, 0.5, 0.0};
  uint64_t n = 22000;
  for (size_t e = 0; e < sizeof(exps) / sizeof(exps[0]); e++) {
    uint64_t count[4];
    double w[4], sum = 0;
    for (int i = 0; i < 4; i++)
      sum += w[i] = pow(prio[i], exps[e]);
    for (int i = 0; i < 4; i++)
      w[i] /= sum;
    victims(CHIME__SELECTOR_PRIORITIZED, exps[e], prio, n, count);
    double chi = chi_square(count, w, 4, n);
    print_message("prioritized remover, exponent %g: %llu %llu %llu %llu "
                  "(new; %.4f expected), chi-square %.1f\n",
                  exps[e], (unsigned long long)count[0],
                  (unsigned long long)count[1], (unsigned long long)count[2],
                  (unsigned long long)count[3], w[3], chi);
    if (chi > CHI3)
      fail_msg("prioritized remover, exponent %g: chi-square %.1f", exps[e],
               chi);
  }
}

/* A request of two into a full uniform table of 3 is two inserts: the
 * first sample may leave at the second's turn. Both stay 6/16, only the
 * first 3/16, only the second 6/16 (the first left at once, or at the
 * second's turn), neither 1/16. */
static void test_uniform_request_of_two(void **state) {
  (void)state;
  chime__table_t *t = rm_table(3, CHIME__SELECTOR_UNIFORM, 1, 99);
  const double p[4] = {6.0 / 16, 3.0 / 16, 6.0 / 16, 1.0 / 16};
  uint64_t count[4] = {0}, n = 16000;
  ins(t, 3, NULL);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t k = ins(t, 2, NULL);
    int a = is_live(t, k), b = is_live(t, k + 1);
    count[a && b ? 0 : a ? 1 : b ? 2 : 3]++;
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.inserts, 2 * n + 3);
  assert_int_equal(st.left, 2 * n);
  chime__table_destroy(t);
  double chi = chi_square(count, p, 4, n);
  if (chi > CHI3)
    fail_msg("uniform request of two: %llu %llu %llu %llu, chi-square %.1f",
             (unsigned long long)count[0], (unsigned long long)count[1],
             (unsigned long long)count[2], (unsigned long long)count[3], chi);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_insert_deletes_when_overflowing),
      cmocka_unit_test(test_exact_removers),
      cmocka_unit_test(test_requests_one_sample_at_a_time),
      cmocka_unit_test(test_uniform_remover_distribution),
      cmocka_unit_test(test_prioritized_remover_distribution),
      cmocka_unit_test(test_uniform_request_of_two),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
