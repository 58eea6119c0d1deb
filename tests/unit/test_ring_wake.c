/* The producer's wake threshold (chime__ring_set_wake_at): a release rings
 * the producer's bell only once that many slots are free, a consumer that
 * finds no batch ready rings it anyway, shutdown still wakes it, and no
 * wake-up is lost with a producer and a consumer on their own threads.
 * And its ready limit (chime__ring_set_ready_max): never more than R
 * batches published and not yet taken, held batches do not count, a take
 * wakes a producer held back by it, no wake-up lost either. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/ring.h"
#include "ring/producer.h"

#define SPEC "a:u8[37], b:f32[5], c:u64"

static chime_ring_t *make_ring(uint32_t slots, uint32_t wake_at) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime__ring_create(&ring, &spec, 2, slots), 0);
  assert_int_equal(chime__ring_set_wake_at(ring, wake_at), 0);
  return ring;
}

static void publish_n(chime_ring_t *ring, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    chime__ring_wslot_t w;
    assert_int_equal(chime__ring_acquire(ring, &w, 0), 0);
    assert_int_equal(chime__ring_publish(ring, w.slot, NULL), 0);
  }
}

static uint32_t bell_now(uint32_t *bell) {
  return atomic_load((_Atomic uint32_t *)bell);
}

/* Joins a thread that must finish soon; a hang fails the test instead of
 * running into the CTest timeout. */
static void join_within(pthread_t t, int seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += seconds;
  if (pthread_timedjoin_np(t, NULL, &ts) != 0)
    fail_msg("thread still blocked after %d s", seconds);
}

static void test_set_wake_at_rejects(void **state) {
  chime_ring_t *ring = make_ring(4, 1);
  (void)state;
  assert_int_equal(chime__ring_set_wake_at(NULL, 1), CHIME_EINVAL);
  assert_int_equal(chime__ring_set_wake_at(ring, 0), CHIME_EINVAL);
  assert_int_equal(chime__ring_set_wake_at(ring, 1000), 0); /* clamped */
  chime_ring_destroy(ring);
}

/* Fills a ring of `slots`, takes `take` batches, and arms the producer's
 * bell with try_acquire the way chimed's sampler does. */
static chime_ring_t *full_ring(uint32_t slots, uint32_t wake_at, uint32_t take,
                               chime_ring_view_t *views, uint32_t **bell,
                               uint32_t *val) {
  chime_ring_t *ring = make_ring(slots, wake_at);
  chime__ring_wslot_t w;
  publish_n(ring, slots);
  for (uint32_t i = 0; i < take; i++)
    assert_int_equal(chime_ring_next(ring, &views[i], 0), 0);
  assert_int_equal(chime__ring_try_acquire(ring, &w, bell, val), CHIME_EBUSY);
  return ring;
}

/* Default 1: the first release into a full ring rings, as before. */
static void test_default_rings_each_release(void **state) {
  chime_ring_view_t v[8];
  uint32_t *bell, val;
  chime_ring_t *ring = full_ring(8, 1, 6, v, &bell, &val);
  (void)state;
  assert_int_equal(chime_ring_release(ring, v[0].slot), 0);
  assert_int_not_equal(bell_now(bell), val);
  chime_ring_destroy(ring);
}

/* N = 4: releases 1..3 leave the bell alone, the 4th rings it. */
static void test_threshold_honoured(void **state) {
  chime_ring_view_t v[8];
  uint32_t *bell, val;
  chime__ring_wslot_t w;
  chime_ring_t *ring = full_ring(8, 4, 6, v, &bell, &val);
  (void)state;
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_equal(chime_ring_release(ring, v[i].slot), 0);
    assert_int_equal(bell_now(bell), val);
  }
  assert_int_equal(chime_ring_release(ring, v[3].slot), 0);
  assert_int_not_equal(bell_now(bell), val);
  /* Woken, the producer takes every free slot it finds, not only N. */
  for (uint32_t i = 0; i < 4; i++)
    assert_int_equal(chime__ring_try_acquire(ring, &w, NULL, NULL), 0);
  chime_ring_destroy(ring);
}

/* A consumer holding batches, with none ready, must wake a producer that
 * waits for more free slots than the consumer will ever release. */
static void test_starving_consumer_rings(void **state) {
  chime_ring_view_t v[8];
  uint32_t *bell, val;
  chime_ring_t *ring = full_ring(8, 4, 6, v, &bell, &val);
  (void)state;
  assert_int_equal(chime_ring_release(ring, v[0].slot), 0);
  assert_int_equal(chime_ring_release(ring, v[1].slot), 0);
  assert_int_equal(bell_now(bell), val); /* 2 free < 4 */
  assert_int_equal(chime_ring_next(ring, &v[0], 0), 0);
  assert_int_equal(chime_ring_next(ring, &v[1], 0), 0);
  assert_int_equal(bell_now(bell), val); /* batches were ready */
  assert_int_equal(chime_ring_next(ring, &v[6], 0), CHIME_ETIMEDOUT);
  assert_int_not_equal(bell_now(bell), val);
  chime_ring_destroy(ring);
}

/* Shutdown wakes a producer whatever its threshold. */
static void test_shutdown_rings(void **state) {
  chime_ring_view_t v[8];
  uint32_t *bell, val;
  chime__ring_wslot_t w;
  chime_ring_t *ring = full_ring(8, 8, 0, v, &bell, &val);
  (void)state;
  chime__ring_shutdown(ring);
  assert_int_not_equal(bell_now(bell), val);
  assert_int_equal(chime__ring_try_acquire(ring, &w, &bell, &val),
                   CHIME_ESHUTDOWN);
  chime_ring_destroy(ring);
}

typedef struct {
  chime_ring_t *ring;
  uint64_t n;
  int use_try, rc;
  uint64_t lost; /* a bell wait that ran into its 5 s timeout */
} producer_arg_t;

static void *producer_main(void *p) {
  producer_arg_t *a = p;
  for (uint64_t i = 0; i < a->n; i++) {
    chime__ring_wslot_t w;
    for (;;) {
      uint32_t *bell, val;
      if (!a->use_try) {
        a->rc = chime__ring_acquire(a->ring, &w, 10000);
        break;
      }
      a->rc = chime__ring_try_acquire(a->ring, &w, &bell, &val);
      if (a->rc != CHIME_EBUSY)
        break;
      struct timespec ts = {5, 0};
      if (syscall(SYS_futex, bell, FUTEX_WAIT, val, &ts, NULL, 0) != 0 &&
          errno == ETIMEDOUT)
        a->lost++;
    }
    if (a->rc != 0)
      return NULL;
    a->rc = chime__ring_publish(a->ring, w.slot, NULL);
    if (a->rc != 0)
      return NULL;
  }
  return NULL;
}

static void *acquire_forever(void *p) {
  producer_arg_t *a = p;
  chime__ring_wslot_t w;
  a->rc = chime__ring_acquire(a->ring, &w, -1);
  return NULL;
}

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* A consumer that holds a random number of batches (up to slots - 2) and
 * waits for the next: with N = slots - 1 few releases ring, so most batches
 * come only because a consumer with none ready rings the bell. A lost
 * wake-up shows as a next() that times out (5 s) or a producer's lost.
 * With a ready limit R, the producer's count of published batches never
 * runs more than R ahead of the consumer's takes. */
static void run_ready(uint32_t slots, uint32_t wake_at, uint32_t ready_max,
                      int use_try) {
  chime_ring_t *ring = make_ring(slots, wake_at);
  producer_arg_t a = {ring, 20000, use_try, 0, 0};
  chime_ring_view_t held[64];
  chime_ring_stats_t st;
  uint32_t nheld = 0;
  uint64_t rnd = 0x9e3779b97f4a7c15ull ^ slots ^ ((uint64_t)ready_max << 32);
  pthread_t t;
  assert_true(slots <= 64);
  assert_int_equal(chime__ring_set_ready_max(ring, ready_max), 0);
  assert_int_equal(pthread_create(&t, NULL, producer_main, &a), 0);
  for (uint64_t i = 0; i < a.n; i++) {
    uint32_t target = (uint32_t)(next_rand(&rnd) % (slots - 1));
    while (nheld > target)
      assert_int_equal(chime_ring_release(ring, held[--nheld].slot), 0);
    int rc = chime_ring_next(ring, &held[nheld], 5000);
    if (rc != 0)
      fail_msg("batch %llu: next() gave %d holding %u (lost wake-up)",
               (unsigned long long)i, rc, nheld);
    nheld++;
    chime_ring_stats(ring, &st);
    if (ready_max != 0 && st.published - (i + 1) > ready_max)
      fail_msg("batch %llu: %llu published, %llu taken: more than %u ready",
               (unsigned long long)i, (unsigned long long)st.published,
               (unsigned long long)(i + 1), ready_max);
  }
  while (nheld > 0)
    assert_int_equal(chime_ring_release(ring, held[--nheld].slot), 0);
  join_within(t, 10);
  assert_int_equal(a.rc, 0);
  assert_int_equal(a.lost, 0);
  chime_ring_destroy(ring);
}

static void run_holding(uint32_t slots, uint32_t wake_at, int use_try) {
  run_ready(slots, wake_at, 0, use_try);
}

static void test_threads_holding_acquire(void **state) {
  (void)state;
  run_holding(8, 7, 0);
  run_holding(3, 2, 0);
}

static void test_threads_holding_try_acquire(void **state) {
  (void)state;
  run_holding(8, 7, 1);
  run_holding(16, 4, 1);
  run_holding(3, 3, 1);
}

/* A producer blocked in acquire() for N free slots still hears shutdown. */
static void test_shutdown_wakes_blocked_producer(void **state) {
  chime_ring_t *ring = make_ring(4, 4);
  producer_arg_t a = {ring, 1, 0, 0, 0};
  pthread_t t;
  (void)state;
  publish_n(ring, 4);
  assert_int_equal(pthread_create(&t, NULL, acquire_forever, &a), 0);
  /* Blocked or not yet: either way shutdown must end the wait. */
  chime__ring_shutdown(ring);
  join_within(t, 10);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);
  chime_ring_destroy(ring);
}

/* ---------------------------------------------------------------- ready limit
 */

static chime_ring_t *ready_ring(uint32_t slots, uint32_t wake_at,
                                uint32_t ready_max) {
  chime_ring_t *ring = make_ring(slots, wake_at);
  assert_int_equal(chime__ring_set_ready_max(ring, ready_max), 0);
  return ring;
}

/* Publishes until try_acquire finds no slot; returns how many. */
static uint32_t fill(chime_ring_t *ring) {
  uint32_t n = 0;
  chime__ring_wslot_t w;
  while (chime__ring_try_acquire(ring, &w, NULL, NULL) == 0) {
    assert_int_equal(chime__ring_publish(ring, w.slot, NULL), 0);
    n++;
  }
  return n;
}

static void test_set_ready_max(void **state) {
  chime_ring_t *ring = ready_ring(8, 1, 0);
  (void)state;
  assert_int_equal(chime__ring_set_ready_max(NULL, 1), CHIME_EINVAL);
  assert_int_equal(fill(ring), 8); /* 0: every free slot, as ever */
  chime_ring_destroy(ring);
  ring = ready_ring(8, 1, 8); /* slots or more: no limit either */
  assert_int_equal(fill(ring), 8);
  chime_ring_destroy(ring);
}

/* N = 2 of 8 slots: two ready, then nothing until the consumer takes one;
 * the batches it holds leave room for two more ready. */
static void test_limit_honoured(void **state) {
  chime_ring_t *ring = ready_ring(8, 1, 2);
  chime_ring_view_t v[8];
  chime__ring_wslot_t w;
  uint32_t *bell, val;
  (void)state;
  assert_int_equal(fill(ring), 2);
  assert_int_equal(chime__ring_try_acquire(ring, &w, &bell, &val), CHIME_EBUSY);
  assert_int_equal(chime_ring_next(ring, &v[0], 0), 0);
  assert_int_not_equal(bell_now(bell), val); /* the take rang */
  assert_int_equal(fill(ring), 1);
  assert_int_equal(chime_ring_next(ring, &v[1], 0), 0);
  assert_int_equal(chime_ring_next(ring, &v[2], 0), 0);
  assert_int_equal(fill(ring), 2); /* 3 held, 2 ready */
  for (uint32_t i = 3; i < 5; i++)
    assert_int_equal(chime_ring_next(ring, &v[i], 0), 0);
  assert_int_equal(fill(ring), 2); /* 5 held, 2 ready */
  assert_int_equal(chime_ring_next(ring, &v[5], 0), 0);
  assert_int_equal(fill(ring), 1); /* the last free slot: 6 held, 2 ready */
  for (uint32_t i = 0; i < 6; i++)
    assert_int_equal(chime_ring_release(ring, v[i].slot), 0);
  assert_int_equal(fill(ring), 0); /* free slots, but 2 ready */
  chime_ring_destroy(ring);
}

/* N = 1 while the consumer holds its batch and asks for the next one: the
 * producer it woke by the take must fill it (no deadlock). */
static void test_one_ready_while_holding(void **state) {
  chime_ring_t *ring = ready_ring(4, 1, 1);
  chime_ring_view_t a, b;
  chime__ring_wslot_t w;
  uint32_t *bell, val;
  (void)state;
  assert_int_equal(fill(ring), 1);
  assert_int_equal(chime__ring_try_acquire(ring, &w, &bell, &val), CHIME_EBUSY);
  assert_int_equal(chime_ring_next(ring, &a, 0), 0);
  assert_int_not_equal(bell_now(bell), val);
  assert_int_equal(fill(ring), 1);
  assert_int_equal(chime_ring_next(ring, &b, 0), 0);
  assert_int_equal(chime_ring_release(ring, a.slot), 0);
  assert_int_equal(chime_ring_release(ring, b.slot), 0);
  chime_ring_destroy(ring);
}

static void test_threads_ready_acquire(void **state) {
  (void)state;
  run_ready(8, 1, 1, 0);
  run_ready(8, 2, 2, 0);
  run_ready(3, 1, 1, 0);
}

static void test_threads_ready_try_acquire(void **state) {
  (void)state;
  run_ready(8, 2, 1, 1);
  run_ready(16, 4, 3, 1);
  run_ready(4, 1, 2, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_set_wake_at_rejects),
      cmocka_unit_test(test_default_rings_each_release),
      cmocka_unit_test(test_threshold_honoured),
      cmocka_unit_test(test_starving_consumer_rings),
      cmocka_unit_test(test_shutdown_rings),
      cmocka_unit_test(test_threads_holding_acquire),
      cmocka_unit_test(test_threads_holding_try_acquire),
      cmocka_unit_test(test_shutdown_wakes_blocked_producer),
      cmocka_unit_test(test_set_ready_max),
      cmocka_unit_test(test_limit_honoured),
      cmocka_unit_test(test_one_ready_while_holding),
      cmocka_unit_test(test_threads_ready_acquire),
      cmocka_unit_test(test_threads_ready_try_acquire),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
