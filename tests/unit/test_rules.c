/* What a table asks of the streams and requests that reach it
 * (src/replay/rules.c): each rule refuses what breaks it with a sentence
 * naming the table's setting, and lets through what sits just inside it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/rules.h"
#include "seq_steps.h"

static void plain_cfg(chime__table_config_t *tc, chime__selector_kind_t s,
                      uint64_t cap) {
  memset(tc, 0, sizeof(*tc));
  snprintf(tc->name, sizeof(tc->name), "plain");
  assert_int_equal(chime_spec_parse(&tc->spec, "x:u32[]"), 0);
  tc->capacity = cap;
  tc->sampler = s;
  tc->min_size = 1;
  tc->priority_exponent = 1.0;
  tc->initial_priority = 1.0;
}

static void expect_refusal(int rc, const char *err, const char *part) {
  assert_int_equal(rc, CHIME_EINVAL);
  if (strstr(err, part) == NULL)
    fail_msg("'%s' does not say '%s'", err, part);
}

/* A batch that may draw items again waits for min_size only: any size. */
static void test_stream_draws_again(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512] = "";
  plain_cfg(&tc, CHIME__SELECTOR_UNIFORM, 10);
  assert_int_equal(chime__rules_stream(&tc, 1000, err, sizeof(err)), 0);
  assert_string_equal(err, "");
}

/* max_times_sampled: a batch takes batch_size items out at once, so it
 * may not be larger than the table. */
static void test_stream_capacity(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512];
  plain_cfg(&tc, CHIME__SELECTOR_UNIFORM, 10);
  tc.max_times_sampled = 1;
  assert_int_equal(chime__rules_stream(&tc, 10, err, sizeof(err)), 0);
  expect_refusal(chime__rules_stream(&tc, 11, err, sizeof(err)), err,
                 "batch_size 11 exceeds the capacity 10 of table 'plain'");
}

/* A sequence table holds far fewer windows at once than capacity_steps:
 * the rule counts windows (chime__table_max_items). */
static void test_stream_windows(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512];
  seq_table_cfg(&tc, "seq", 64, 16, 16, 0, CHIME__SELECTOR_UNIFORM);
  tc.max_times_sampled = 1;
  uint64_t most = chime__table_max_items(&tc);
  assert_true(most >= 1 && most < 64);
  assert_int_equal(chime__rules_stream(&tc, (uint32_t)most, err, sizeof(err)),
                   0);
  expect_refusal(chime__rules_stream(&tc, (uint32_t)most + 1, err, sizeof(err)),
                 err, "windows sequence table 'seq' can hold at once");
}

/* max_times_sampled with a rate limiter: inserts stop at min_size, so a
 * batch larger than that could wait for good. */
static void test_stream_rate_limiter(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512];
  plain_cfg(&tc, CHIME__SELECTOR_FIFO, 100);
  tc.max_times_sampled = 1;
  tc.samples_per_insert = 1.0;
  tc.min_size = 8;
  assert_int_equal(chime__rules_stream(&tc, 8, err, sizeof(err)), 0);
  expect_refusal(chime__rules_stream(&tc, 9, err, sizeof(err)), err,
                 "give the table min_size >= batch_size");
  tc.samples_per_insert = 0; /* no limiter: the capacity rule alone */
  assert_int_equal(chime__rules_stream(&tc, 9, err, sizeof(err)), 0);
}

static chime__table_t *make(const chime__table_config_t *tc) {
  chime__table_t *t;
  assert_int_equal(chime__table_create(&t, tc), 0);
  return t;
}

static void test_insert_plain(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512] = "";
  plain_cfg(&tc, CHIME__SELECTOR_UNIFORM, 10);
  chime__table_t *t = make(&tc);
  double prio[3] = {0, 1, 2.5};
  chime__insert_shape_t q = {.count = 3, .priorities = prio, .n_priorities = 3};
  assert_int_equal(chime__rules_insert(t, &q, err, sizeof(err)), 0);
  q.n_versions = 1;
  assert_int_equal(chime__rules_insert(t, &q, err, sizeof(err)), 0);
  q.n_versions = 2;
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "2 versions for 3 samples");
  q.n_versions = 3;
  q.n_priorities = 2;
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "2 priorities for 3 samples");
  q.n_priorities = 3;
  q.end_episode = 1;
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "end_episode is for sequence tables");
  q.end_episode = 0;
  q.writer_id = 5;
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "request id 0 of writer 0000000000000005");
  q.id = 1;
  assert_int_equal(chime__rules_insert(t, &q, err, sizeof(err)), 0);
  chime__table_destroy(t);
}

/* Every priority finite and at least 0, whatever the selector. */
static void test_insert_priorities(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512];
  plain_cfg(&tc, CHIME__SELECTOR_UNIFORM, 10);
  chime__table_t *t = make(&tc);
  double bad[][2] = {{1, NAN}, {1, -1}, {INFINITY, 1}};
  const char *says[] = {"priority of sample 1 is nan", "priority of sample 1",
                        "priority of sample 0 is inf"};
  for (size_t i = 0; i < 3; i++) {
    chime__insert_shape_t q = {
        .count = 2, .priorities = bad[i], .n_priorities = 2};
    expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err, says[i]);
    expect_refusal(CHIME_EINVAL, err, "insert into 'plain': ");
  }
  chime__table_destroy(t);
}

/* A fifo table takes a request whole: never more than it holds. */
static void test_insert_fifo_capacity(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512];
  plain_cfg(&tc, CHIME__SELECTOR_FIFO, 4);
  chime__table_t *t = make(&tc);
  chime__insert_shape_t q = {.count = 4};
  assert_int_equal(chime__rules_insert(t, &q, err, sizeof(err)), 0);
  q.count = 5;
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "fifo table 'plain' holds at most 4");
  chime__table_destroy(t);
}

/* A sequence table: one episode per writer, priorities per window. */
static void test_insert_sequence(void **state) {
  (void)state;
  chime__table_config_t tc;
  char err[512];
  seq_table_cfg(&tc, "seq", 64, 4, 4, 0, CHIME__SELECTOR_UNIFORM);
  chime__table_t *t = make(&tc);
  chime__insert_shape_t q = {.count = 2};
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "send writer_id");
  q.writer_id = 9;
  q.id = 1;
  q.end_episode = 1;
  assert_int_equal(chime__rules_insert(t, &q, err, sizeof(err)), 0);
  double prio[2] = {1, 1};
  q.priorities = prio;
  q.n_priorities = 2;
  expect_refusal(chime__rules_insert(t, &q, err, sizeof(err)), err,
                 "not per-step priorities");
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_draws_again),
      cmocka_unit_test(test_stream_capacity),
      cmocka_unit_test(test_stream_windows),
      cmocka_unit_test(test_stream_rate_limiter),
      cmocka_unit_test(test_insert_plain),
      cmocka_unit_test(test_insert_priorities),
      cmocka_unit_test(test_insert_fifo_capacity),
      cmocka_unit_test(test_insert_sequence),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
