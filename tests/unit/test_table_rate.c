/* The rate limiter on a table (samples_per_insert, min_size,
 * error_buffer), with the rules of Reverb's RateLimiter and the cases of
 * its rate_limiter_test.cc: samples wait for min_size; operations inside
 * the window go, those beyond it wait until the other side moves it;
 * deletes (MutatePriorities, max_times_sampled, any item that leaves)
 * count, so a table that removals brought below min_size takes inserts
 * again, and samples wait for min_size again. chime's window is
 * symmetric: [spi * min_size - error_buffer, spi * min_size +
 * error_buffer] for inserts * spi - samples (Reverb's min_diff and
 * max_diff), so the numbers differ from Reverb's where its window is not.
 * Whether a call would wait is read with the non-waiting calls
 * (try_insert, try_sample), deterministically; that a waiting call goes on
 * is checked with a thread and a generous bound. And the stall of issue
 * 20: spi 2, min_size 2, error_buffer 2, max_times_sampled 1, every
 * insert goes in while a sampler takes batches, for plain and sequence
 * tables. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/table.h"
#include "seq_steps.h"
#include "table_slot.h"
#include "common/clock.h"

/* spec "x:u32[]": a sample is its key. */
#define SB 4

static chime__table_t *rate_table(chime__selector_kind_t s, uint64_t cap,
                                  uint64_t min_size, double spi, double eb,
                                  uint64_t mts) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "rate");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u32[]"), 0);
  tc.capacity = cap;
  tc.sampler = s;
  tc.min_size = min_size;
  tc.samples_per_insert = spi;
  tc.error_buffer = eb;
  tc.max_times_sampled = mts;
  tc.seed = 777;
  chime__table_t *t;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* One item, without waiting: 0, or CHIME_EBUSY when the limiter (or a
 * full fifo table) would make it wait. */
static int try_insert(chime__table_t *t) {
  uint32_t x = 7;
  uint64_t k;
  chime__span_t sp = {(const uint8_t *)&x, SB};
  return chime__table_try_insert_spans(t, &sp, 1, 1, NULL, NULL, &k, NULL);
}

static void insert1(chime__table_t *t) {
  assert_int_equal(try_insert(t), 0);
}

/* One batch into s without waiting: 0, or CHIME_EBUSY with *rate set
 * when the limiter holds it back, clear when items do (min_size, a whole
 * batch). */
static int try_sample(chime__table_t *t, slot_t *s, int *rate) {
  chime__table_waiter_t w;
  memset(&w, 0, sizeof(w));
  int rc = chime__table_try_sample(t, &s->lay, &s->ws, &w);
  *rate = w.rate;
  chime__table_unwait(t, &w);
  return rc;
}

static void sample_ok(chime__table_t *t, slot_t *s) {
  int rate;
  assert_int_equal(try_sample(t, s, &rate), 0);
}

static void sample_waits(chime__table_t *t, slot_t *s, int for_rate) {
  int rate;
  assert_int_equal(try_sample(t, s, &rate), CHIME_EBUSY);
  assert_int_equal(rate, for_rate);
}

static void delete_key(chime__table_t *t, uint64_t key) {
  chime__table_mutated_t m;
  assert_int_equal(chime__table_mutate(t, NULL, NULL, 0, &key, 1, &m), 0);
  assert_int_equal(m.deleted, 1);
}

/* An insert on a thread of its own, which waits. */
typedef struct {
  chime__table_t *t;
  atomic_int abort, done;
  int rc;
} ins_t;

static void *insert_main(void *arg) {
  ins_t *a = arg;
  uint32_t x = 9;
  uint64_t k;
  a->rc = chime__table_insert(a->t, (const uint8_t *)&x, 1, NULL, &k, &a->abort,
                              NULL);
  atomic_store(&a->done, 1);
  return NULL;
}

static void nap(void) {
  struct timespec ts = {0, 200000};
  nanosleep(&ts, NULL);
}

/* Starts a.insert and returns once it waits on the rate limiter (Stats
 * say so: the count is changed only under the table's lock). */
static void start_blocked_insert(ins_t *a, pthread_t *th, chime__table_t *t) {
  memset(a, 0, sizeof(*a));
  a->t = t;
  assert_int_equal(pthread_create(th, NULL, insert_main, a), 0);
  double t0 = chime__now_s();
  for (;;) {
    chime__table_stats_t st;
    chime__table_get_stats(t, &st);
    if (st.inserts_waiting_rate == 1)
      return;
    assert_false(atomic_load(&a->done)); /* it should have waited */
    assert_true(chime__now_s() - t0 < 10);
    nap();
  }
}

/* Liveness: the insert must end within 10 s (it waits for ever when the
 * limiter is wrong: then it is aborted and the test fails). */
static void expect_insert_ends(ins_t *a, pthread_t th) {
  double t0 = chime__now_s();
  while (!atomic_load(&a->done) && chime__now_s() - t0 < 10)
    nap();
  int done = atomic_load(&a->done);
  if (!done) {
    atomic_store(&a->abort, 1);
    chime__table_wake(a->t);
  }
  pthread_join(th, NULL);
  if (!done)
    fail_msg("the insert still waits on the rate limiter");
  assert_int_equal(a->rc, 0);
}

/* Reverb's BlocksSamplesUntilMinInsertsReached: spi 1, min_size 2. */
static void test_samples_wait_for_min_size(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 1.0, 1.0, 0);
  slot_t s;
  slot_init(&s, t, 1);
  sample_waits(t, &s, 0); /* no item */
  insert1(t);
  sample_waits(t, &s, 0); /* one is not min_size */
  insert1(t);
  sample_ok(t, &s);
  free(s.mem);
  chime__table_destroy(t);
}

/* Reverb's OperationsWithinTheBufferAreNotBlocked: spi 1.5, min_size 1,
 * error_buffer 4.5: the window is [-3, 6]. */
static void test_within_buffer_not_blocked(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 1, 1.5, 4.5, 0);
  slot_t s;
  slot_init(&s, t, 1);
  insert1(t); /* below min_size: free; diff 1.5 */
  insert1(t); /* 3 */
  insert1(t); /* 4.5 */
  insert1(t); /* 6: the top, still inside */
  assert_int_equal(try_insert(t), CHIME_EBUSY); /* 7.5 */
  for (int i = 0; i < 9; i++)
    sample_ok(t, &s);     /* 5, 4, ..., -3: the bottom, still inside */
  sample_waits(t, &s, 1); /* -4 */
  assert_int_equal(try_insert(t), 0);
  free(s.mem);
  chime__table_destroy(t);
}

/* Reverb's BlocksCallsThatExceedsTheMinMaxLimits: spi 1.5, min_size 2,
 * error_buffer 1.5: the window is [1.5, 4.5]. A waiting insert goes on
 * once a sample moves the window. */
static void test_blocks_beyond_buffer(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 1.5, 1.5, 0);
  slot_t s;
  slot_init(&s, t, 1);
  sample_waits(t, &s, 0);
  insert1(t); /* 1.5 */
  sample_waits(t, &s, 0);
  insert1(t);                                   /* 3 */
  sample_ok(t, &s);                             /* 2 */
  insert1(t);                                   /* 3.5 */
  assert_int_equal(try_insert(t), CHIME_EBUSY); /* would be 5 */
  ins_t a;
  pthread_t th;
  start_blocked_insert(&a, &th, t);
  sample_ok(t, &s); /* 2.5: one more item makes 4 */
  expect_insert_ends(&a, th);
  free(s.mem);
  chime__table_destroy(t);
}

/* Reverb's CanSample: spi 1, min_size 1, error_buffer 1: the window is
 * [0, 2]. A batch passes the window by itself, less one sample. */
static void test_can_sample(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 1, 1.0, 1.0, 0);
  slot_t s, s2;
  slot_init(&s, t, 1);
  slot_init(&s2, t, 2);
  sample_waits(t, &s, 0);
  insert1(t);
  sample_ok(t, &s);       /* 0 */
  sample_waits(t, &s, 1); /* -1 */
  chime__table_destroy(t);
  t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 1, 1.0, 1.0, 0);
  insert1(t);
  sample_ok(t, &s2); /* its first sample keeps 0: the batch goes, to -1 */
  sample_waits(t, &s, 1);
  free(s.mem);
  free(s2.mem);
  chime__table_destroy(t);
}

/* Reverb's CanInsert: spi 1.5, min_size 2, error_buffer 2: the window is
 * [1, 5]. */
static void test_can_insert(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 1.5, 2.0, 0);
  slot_t s;
  slot_init(&s, t, 1);
  insert1(t);                                   /* 1.5, below min_size */
  insert1(t);                                   /* 3, min_size */
  insert1(t);                                   /* 4.5 */
  assert_int_equal(try_insert(t), CHIME_EBUSY); /* 6 */
  sample_ok(t, &s);                             /* 3.5 */
  sample_ok(t, &s);                             /* 2.5 */
  insert1(t);                                   /* 4 */
  assert_int_equal(try_insert(t), CHIME_EBUSY); /* 5.5 */
  free(s.mem);
  chime__table_destroy(t);
}

/* Reverb's UnblocksInsertsIfDeletedItemsBringsSizeBelowMinSize: spi 5,
 * min_size 2, error_buffer 5: the window is [5, 15]. */
static void test_deletes_unblock_inserts(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 5.0, 5.0, 0);
  slot_t s;
  slot_init(&s, t, 1);
  insert1(t); /* key 1: 5 */
  insert1(t); /* key 2: 10 */
  insert1(t); /* key 3: 15 */
  ins_t a;
  pthread_t th;
  start_blocked_insert(&a, &th, t);             /* would be 20 */
  sample_ok(t, &s);                             /* 14 */
  assert_int_equal(try_insert(t), CHIME_EBUSY); /* still 19 */
  delete_key(t, 1);
  assert_int_equal(try_insert(t), CHIME_EBUSY); /* 2 items: min_size */
  /* One item left: the table is below min_size, inserts are free again
   * (the deletes wake the waiting one). */
  delete_key(t, 3);
  expect_insert_ends(&a, th);
  sample_ok(t, &s); /* 2 items again: diff 20 - 2 */
  free(s.mem);
  chime__table_destroy(t);
}

/* Reverb's BlocksSamplesIfDeleteBringsSizeBelowMinSize: the same
 * limiter; a delete below min_size makes samples wait for items, an
 * insert lets them go. */
static void test_deletes_block_samples(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 5.0, 5.0, 0);
  slot_t s;
  slot_init(&s, t, 1);
  insert1(t);
  insert1(t);
  sample_ok(t, &s);
  delete_key(t, 2);
  sample_waits(t, &s, 0);
  insert1(t);
  sample_ok(t, &s);
  free(s.mem);
  chime__table_destroy(t);
}

/* Items a sampler takes out (max_times_sampled) are deletes too: spi 5,
 * min_size 2, error_buffer 5, max_times_sampled 1, batches of 2. Each
 * batch empties the table and the inserts that follow go in free; without
 * the deletes counted the third insert would wait for samples that wait
 * for items. */
static void test_sampled_out_unblocks_inserts(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 5.0, 5.0, 1);
  slot_t s;
  slot_init(&s, t, 2);
  for (int round = 0; round < 10; round++) {
    insert1(t);
    insert1(t);
    sample_ok(t, &s);
    chime__table_stats_t st;
    chime__table_get_stats(t, &st);
    assert_int_equal(st.size, 0);
    assert_int_equal(st.left, st.inserts);
  }
  free(s.mem);
  chime__table_destroy(t);
}

/* Issue 20's stall: a writer inserting one item at a time and a sampler
 * taking batches of two with spi 2, min_size 2, error_buffer 2 and
 * max_times_sampled 1 (no delete at all): it stopped after 4 or 5 of 10
 * inserts. */
typedef struct {
  chime__table_t *t;
  int seq; /* a sequence table: steps of writer 1 */
  atomic_int abort, done;
  int inserted, rc;
} writer_t;

static void *limited_writer_main(void *arg) {
  writer_t *w = arg;
  for (int i = 0; i < 10; i++) {
    uint8_t step[SEQ_STEP];
    uint32_t x = (uint32_t)i;
    uint64_t k;
    chime__dedupe_req_t dq = {.writer = 1, .seq = (uint64_t)i + 1};
    if (w->seq)
      seq_step_bytes(step, 1, (uint32_t)i);
    w->rc = chime__table_insert(w->t, w->seq ? step : (const uint8_t *)&x, 1,
                                NULL, &k, &w->abort, w->seq ? &dq : NULL);
    if (w->rc != 0)
      break;
    w->inserted++;
  }
  atomic_store(&w->done, 1);
  return NULL;
}

static void check_no_stall(chime__table_t *t, int seq) {
  slot_t s;
  slot_init(&s, t, 2);
  slot_sampler_t sm;
  writer_t w = {.t = t, .seq = seq};
  pthread_t ts, tw;
  slot_sampler_start(&sm, &ts, t, &s, 0);
  assert_int_equal(pthread_create(&tw, NULL, limited_writer_main, &w), 0);
  double t0 = chime__now_s();
  while (!atomic_load(&w.done) && chime__now_s() - t0 < 10)
    nap();
  int done = atomic_load(&w.done);
  atomic_store(&w.abort, 1);
  atomic_store(&sm.stop, 1);
  chime__table_wake(t);
  pthread_join(tw, NULL);
  pthread_join(ts, NULL);
  if (!done)
    fail_msg("stalled after %d of 10 inserts (%llu batches)", w.inserted,
             (unsigned long long)sm.batches);
  assert_int_equal(w.rc, 0);
  assert_int_equal(w.inserted, 10);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.inserts, 10);
  assert_int_equal(st.samples, 2 * sm.batches);
  assert_int_equal(st.size + st.left, st.inserts);
  free(s.mem);
}

static void test_issue_stall_plain(void **state) {
  (void)state;
  chime__table_t *t = rate_table(CHIME__SELECTOR_UNIFORM, 100, 2, 2.0, 2.0, 1);
  check_no_stall(t, 0);
  chime__table_destroy(t);
  /* fifo is the same (max_times_sampled 1 is its own). */
  t = rate_table(CHIME__SELECTOR_FIFO, 100, 2, 2.0, 2.0, 1);
  check_no_stall(t, 0);
  chime__table_destroy(t);
}

/* A fifo table's items leave only once sampled max_times_sampled times
 * and its full table makes inserts wait: samples_per_insert below that
 * stalls once the table fills (0.5 with max_times_sampled 1 stopped after
 * 8 of 100 inserts), so create refuses it; at or above it the table runs.
 * Checked by a schedule that fills the table whenever it can (inserts
 * first, a batch only when no insert may go in): every step one of the
 * two must be able to go on. */
static void test_fifo_ratio_below_times_sampled(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "q");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u32[]"), 0);
  tc.capacity = 4;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.samples_per_insert = 0.5;
  tc.error_buffer = 1;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL); /* mts 1 */
  tc.max_times_sampled = 3;
  tc.samples_per_insert = 2.5;
  tc.error_buffer = 100;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
  /* A remover makes room itself: nothing waits for room. */
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  t = NULL;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  chime__table_destroy(t);
  static const struct {
    uint64_t cap, min_size, mts, batch;
    double spi, eb;
  } ok[] = {
      {4, 1, 1, 1, 1.0, 1.0}, {4, 4, 1, 1, 1.0, 1.0}, {4, 2, 2, 1, 2.0, 2.0},
      {4, 4, 3, 2, 3.0, 3.0}, {5, 3, 2, 2, 2.5, 2.5}, {3, 1, 1, 1, 7.0, 7.0},
  };
  for (size_t c = 0; c < sizeof(ok) / sizeof(ok[0]); c++) {
    tc.sampler = CHIME__SELECTOR_FIFO;
    tc.capacity = ok[c].cap;
    tc.min_size = ok[c].min_size;
    tc.max_times_sampled = ok[c].mts;
    tc.samples_per_insert = ok[c].spi;
    tc.error_buffer = ok[c].eb;
    assert_int_equal(chime__table_create(&t, &tc), 0);
    slot_t s;
    slot_init(&s, t, (uint32_t)ok[c].batch);
    int inserted = 0, rate;
    for (int step = 0; inserted < 200; step++) {
      if (step > 10000)
        fail_msg("case %zu: no end after %d inserts", c, inserted);
      if (try_insert(t) == 0) {
        inserted++;
        continue;
      }
      if (try_sample(t, &s, &rate) != 0)
        fail_msg("case %zu: stalled after %d inserts (the sampler waits "
                 "for the %s)",
                 c, inserted, rate ? "ratio" : "items");
    }
    free(s.mem);
    chime__table_destroy(t);
  }
}

/* A sequence table whose every step starts a window of one step. */
static void test_issue_stall_sequence(void **state) {
  (void)state;
  chime__table_config_t tc;
  seq_table_cfg(&tc, "seq", 64, 1, 1, 0, CHIME__SELECTOR_UNIFORM);
  tc.min_size = 2;
  tc.samples_per_insert = 2;
  tc.error_buffer = 2;
  tc.max_times_sampled = 1;
  tc.seed = 5;
  chime__table_t *t;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  check_no_stall(t, 1);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_samples_wait_for_min_size),
      cmocka_unit_test(test_within_buffer_not_blocked),
      cmocka_unit_test(test_blocks_beyond_buffer),
      cmocka_unit_test(test_can_sample),
      cmocka_unit_test(test_can_insert),
      cmocka_unit_test(test_deletes_unblock_inserts),
      cmocka_unit_test(test_deletes_block_samples),
      cmocka_unit_test(test_sampled_out_unblocks_inserts),
      cmocka_unit_test(test_issue_stall_plain),
      cmocka_unit_test(test_issue_stall_sequence),
      cmocka_unit_test(test_fifo_ratio_below_times_sampled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
