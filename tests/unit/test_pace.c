/* Pacing and per-token versions in the replay engine (docs/replay.md,
 * "Pacing producers", "Per-token versions"): an insert that would put
 * more than (max_staleness - 1) x pace_batch samples ahead of the
 * learner's progress waits (nowait: CHIME_EBUSY), server-side, until a
 * version step lets it in, and is counted (paced_inserts, pace_wait_ns,
 * inserts_waiting_pace); a stop or its call's end (abort) ends the wait
 * with nothing inserted; a sampler waiting for items lets it in; a request
 * larger than the bound goes in alone; the count survives a checkpoint;
 * under pacing a fifo learner drawing a batch per version never sees a
 * sample removed as stale where the discard-only table removes many; and a
 * ragged version leaf makes each sample's version its minimum, its
 * config checked. */
#include <pthread.h>
#include <sched.h>
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
#include "table_ckpt.h"
#include "table_slot.h"

#define SB 4 /* spec "x:u32[]" */

static chime__table_t *ptable(uint64_t cap, uint64_t stale, uint64_t batch) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "p");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u32[]"), 0);
  tc.capacity = cap;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.max_times_sampled = 1;
  tc.max_staleness = stale;
  tc.pace_batch = batch;
  tc.seed = 5;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* n samples of version v; nowait: CHIME_EBUSY instead of a wait. */
static int put(chime__table_t *t, uint32_t n, uint64_t v, int nowait,
               const atomic_int *abort) {
  uint8_t buf[256 * SB];
  uint64_t k;
  assert_true(n <= 256);
  memset(buf, 0, sizeof(buf));
  chime__span_t sp = {buf, (size_t)n * SB};
  chime__table_versions_t ver = {&v, 1};
  return chime__table_insert_versioned(t, &sp, 1, n, NULL, NULL, &ver, &k,
                                       abort, NULL, nowait);
}

static chime__table_stats_t stats(chime__table_t *t) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  return st;
}

typedef struct {
  chime__table_t *t;
  uint32_t n;
  uint64_t v;
  atomic_int abort;
  int rc;
} waiter_t;

static void *put_main(void *arg) {
  waiter_t *w = arg;
  w->rc = put(w->t, w->n, w->v, 0, &w->abort);
  return NULL;
}

/* Until the table says an insert waits on pacing (the test's timeout
 * bounds it). */
static void until_waiting(chime__table_t *t, uint32_t n) {
  while (stats(t).inserts_waiting_pace != n)
    sched_yield();
}

static void test_wait_and_wake(void **state) {
  (void)state;
  chime__table_t *t = ptable(1000, 3, 4); /* bound (3 - 1) x 4 = 8 */
  assert_int_equal(put(t, 8, 0, 1, NULL), 0);
  assert_int_equal(stats(t).pace_ahead, 8);
  assert_int_equal(put(t, 1, 0, 1, NULL), CHIME_EBUSY); /* not even one */
  assert_int_equal(stats(t).inserts, 8);
  waiter_t w = {.t = t, .n = 3, .v = 0, .rc = -1};
  atomic_init(&w.abort, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, put_main, &w), 0);
  until_waiting(t, 1);
  assert_int_equal(stats(t).inserts, 8); /* held, nothing of it in */
  /* The learner's version step: a batch's worth drawn, the wait ends. */
  assert_int_equal(chime__table_set_version(t, 1, NULL), 0);
  pthread_join(th, NULL);
  assert_int_equal(w.rc, 0);
  chime__table_stats_t st = stats(t);
  assert_int_equal(st.inserts, 11);
  assert_int_equal(st.pace_ahead, 4 + 3);
  assert_int_equal(st.paced_inserts, 1);
  assert_int_equal(st.inserts_waiting_pace, 0);
  assert_true(st.pace_wait_ns > 0);
  assert_int_equal(st.removed_stale, 0);
  /* A step of many versions clears the count, never below 0. */
  assert_int_equal(chime__table_set_version(t, 9, NULL), 0);
  assert_int_equal(stats(t).pace_ahead, 0);
  /* A version lower than the newest changes nothing. */
  assert_int_equal(put(t, 8, 9, 1, NULL), 0);
  assert_int_equal(chime__table_set_version(t, 5, NULL), 0);
  assert_int_equal(stats(t).pace_ahead, 8);
  chime__table_destroy(t);
}

/* A stop or the call's end (abort, then a wake) ends the wait: nothing of
 * the request goes in. */
static void test_wait_aborted(void **state) {
  (void)state;
  chime__table_t *t = ptable(1000, 2, 4); /* bound 4 */
  assert_int_equal(put(t, 4, 0, 1, NULL), 0);
  waiter_t w = {.t = t, .n = 2, .v = 0, .rc = -1};
  atomic_init(&w.abort, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, put_main, &w), 0);
  until_waiting(t, 1);
  atomic_store(&w.abort, 1);
  chime__table_wake(t);
  pthread_join(th, NULL);
  assert_int_equal(w.rc, CHIME_ESHUTDOWN);
  assert_int_equal(stats(t).inserts, 4);
  assert_int_equal(stats(t).pace_ahead, 4);
  assert_int_equal(stats(t).inserts_waiting_pace, 0);
  chime__table_destroy(t);
}

/* A learner waiting for items is never kept waiting by pacing (it draws
 * more than pace_batch per version, or items left early): the insert
 * goes in. A request larger than the bound goes in alone. */
static void wake_nothing(chime__table_waiter_t *w) {
  (void)w;
}

static void test_starving_and_large(void **state) {
  (void)state;
  chime__table_t *t = ptable(1000, 2, 4); /* bound 4 */
  assert_int_equal(put(t, 4, 0, 1, NULL), 0);
  assert_int_equal(put(t, 2, 0, 1, NULL), CHIME_EBUSY);
  slot_t s;
  slot_init(&s, t, 6); /* a fifo batch of 6 needs 6 items: 4 held */
  chime__table_waiter_t wt;
  memset(&wt, 0, sizeof(wt));
  wt.fn = wake_nothing; /* called once items arrive */
  assert_int_equal(chime__table_try_sample(t, &s.lay, &s.ws, &wt), CHIME_EBUSY);
  assert_int_equal(stats(t).samplers_waiting_items, 1);
  assert_int_equal(put(t, 2, 0, 1, NULL), 0); /* let in */
  assert_int_equal(chime__table_try_sample(t, &s.lay, &s.ws, &wt), 0);
  chime__table_unwait(t, &wt);
  slot_fini(&s);
  /* Learner took 6; its version step takes the count down to 0. */
  assert_int_equal(chime__table_set_version(t, 2, NULL), 0);
  assert_int_equal(stats(t).pace_ahead, 0);
  assert_int_equal(put(t, 9, 2, 1, NULL), 0); /* alone, past the bound */
  assert_int_equal(put(t, 1, 2, 1, NULL), CHIME_EBUSY);
  chime__table_destroy(t);
}

/* The count of samples ahead survives a checkpoint: the restored table
 * holds producers back as the old one did. */
static void test_restore(void **state) {
  (void)state;
  chime__table_t *t = ptable(1000, 3, 4); /* bound 8 */
  assert_int_equal(chime__table_set_version(t, 7, NULL), 0);
  assert_int_equal(put(t, 6, 7, 1, NULL), 0);
  uint8_t *p;
  size_t n = ckpt_write(t, &p);
  chime__table_destroy(t);
  t = ptable(1000, 3, 4);
  char err[256] = "";
  if (ckpt_load(t, p, n, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  free(p);
  chime__table_stats_t st = stats(t);
  assert_int_equal(st.newest_version, 7);
  assert_int_equal(st.pace_ahead, 6);
  assert_int_equal(st.size, 6);
  assert_int_equal(put(t, 3, 7, 1, NULL), CHIME_EBUSY);
  assert_int_equal(put(t, 2, 7, 1, NULL), 0);
  chime__table_destroy(t);
}

/* Producers faster than the learner, which draws pace_batch samples per
 * version from a fifo table: with pacing, no sample is ever removed as
 * stale and the producers wait; discard-only (pace_batch 0), the table
 * fills and many go stale. Producers take the newest version before each
 * request, as a generator loads the latest weights. */
static uint64_t producers_race(uint64_t pace, uint64_t *waited) {
  enum { B = 8, S = 2, STEPS = 200 };
  chime__table_t *t = ptable(4 * B * (S + 2) * 4, S, pace);
  slot_t s;
  slot_init(&s, t, B);
  uint64_t v = 0;
  for (int step = 0; step < STEPS; step++) {
    /* Four producers, each a request of B / 2, as often as room allows
     * (never waiting: a wait would be for the next step). */
    for (int round = 0; round < 8; round++)
      for (int p = 0; p < 4; p++)
        (void)put(t, B / 2, v, 1, NULL);
    chime__table_waiter_t wt;
    memset(&wt, 0, sizeof(wt));
    int rc = chime__table_try_sample(t, &s.lay, &s.ws, &wt);
    if (rc == CHIME_EBUSY)
      chime__table_unwait(t, &wt);
    assert_int_equal(rc, 0);
    for (uint32_t j = 0; j < B; j++)
      assert_true(v - s.ws.info[j].version <= S);
    v++;
    assert_int_equal(chime__table_set_version(t, v, NULL), 0);
  }
  chime__table_stats_t st = stats(t);
  slot_fini(&s);
  chime__table_destroy(t);
  *waited = st.inserts;
  return st.removed_stale;
}

static void test_producers_race(void **state) {
  (void)state;
  uint64_t ins_paced, ins_free;
  uint64_t paced = producers_race(8, &ins_paced);
  uint64_t free_run = producers_race(0, &ins_free);
  print_message("removed as stale: paced %llu (%llu inserted), discard-only "
                "%llu (%llu inserted)\n",
                (unsigned long long)paced, (unsigned long long)ins_paced,
                (unsigned long long)free_run, (unsigned long long)ins_free);
  assert_int_equal(paced, 0);
  assert_true(free_run > 0);
}

/* --- per-token versions --- */

static int vtable_make(chime__table_t **t, const char *spec, uint32_t vleaf,
                       uint64_t stale) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "v");
  assert_int_equal(chime_spec_parse(&tc.spec, spec), 0);
  tc.capacity = 100;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.max_staleness = stale;
  tc.version_leaf = vleaf;
  tc.seed = 3;
  return chime__table_create(t, &tc);
}

static void test_token_versions(void **state) {
  (void)state;
  chime__table_t *t;
  assert_int_equal(
      vtable_make(&t, "tokens:i32[<=8], tok_ver:u64[<=8], r:f32[]", 2, 3), 0);
  /* Three samples: versions 5,4,9 (min 4), none (the request's, 6), and
   * 7,8 (min 7); the request says 6. */
  uint32_t len[3 * 2] = {3, 3, 0, 0, 2, 2};
  uint64_t tv0[3] = {5, 4, 9}, tv2[2] = {7, 8};
  uint8_t buf[256], *at = buf;
  int32_t tok[3] = {1, 2, 3};
  float r = 0.5f;
  memcpy(at, tok, 12), at += 12, memcpy(at, tv0, 24), at += 24;
  memcpy(at, &r, 4), at += 4;
  memcpy(at, &r, 4), at += 4; /* sample 1: no rows */
  memcpy(at, tok, 8), at += 8, memcpy(at, tv2, 16), at += 16;
  memcpy(at, &r, 4), at += 4;
  chime__span_t sp = {buf, (size_t)(at - buf)};
  uint64_t req = 6, k;
  chime__table_versions_t ver = {&req, 1};
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, 3, len, NULL, &ver,
                                                 &k, NULL, NULL, 1),
                   0);
  assert_int_equal(stats(t).newest_version, 7); /* the largest minimum */
  chime__table_view_t v;
  assert_int_equal(chime__table_view(t, &v), 0);
  assert_int_equal(v.count, 3);
  uint64_t want[3] = {4, 6, 7};
  for (uint64_t i = 0; i < 3; i++) {
    chime__table_view_item_t it;
    chime__table_view_item(t, &v, i, &it);
    assert_int_equal(it.version, want[i]);
  }
  chime__table_view_release(t, &v);
  /* Staleness is the oldest token's: at newest 8, version 4 is 4 behind
   * (> 3) and leaves; 6 and 7 stay. */
  assert_int_equal(chime__table_set_version(t, 8, NULL), 0);
  assert_int_equal(stats(t).removed_stale, 1);
  assert_int_equal(stats(t).size, 2);
  chime__table_destroy(t);
}

/* A version leaf must be a ragged one-dimensional integer leaf, kept raw;
 * pacing needs max_staleness. */
static void test_bad_configs(void **state) {
  (void)state;
  chime__table_t *t = NULL;
  assert_int_equal(vtable_make(&t, "tokens:i32[<=8], tv:f32[<=8]", 2, 0),
                   CHIME_EINVAL); /* not an integer */
  assert_int_equal(vtable_make(&t, "tokens:i32[<=8], tv:u64[8]", 2, 0),
                   CHIME_EINVAL); /* not ragged */
  assert_int_equal(vtable_make(&t, "tokens:i32[<=8], tv:u64[<=8,2]", 2, 0),
                   CHIME_EINVAL); /* two dimensions */
  assert_int_equal(vtable_make(&t, "tokens:i32[<=8]", 2, 0),
                   CHIME_EINVAL); /* no such leaf */
  assert_int_equal(vtable_make(&t, "tokens:i32[<=8], tv:i32[<=8]", 2, 0), 0);
  chime__table_destroy(t);
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "q");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u32[]"), 0);
  tc.capacity = 10;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.max_times_sampled = 1;
  tc.pace_batch = 4; /* no max_staleness */
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wait_and_wake),
      cmocka_unit_test(test_wait_aborted),
      cmocka_unit_test(test_starving_and_large),
      cmocka_unit_test(test_restore),
      cmocka_unit_test(test_producers_race),
      cmocka_unit_test(test_token_versions),
      cmocka_unit_test(test_bad_configs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
