/* The producer's ready limit (chime__ring_set_ready_max): never more than N
 * batches published and not yet taken, batches the consumer holds do not
 * count, a take wakes a producer held back by the limit, and no wake-up is
 * lost with a producer and a consumer on their own threads. */
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

static chime_ring_t *make_ring(uint32_t slots, uint32_t wake_at,
                               uint32_t ready_max) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;
  assert_int_equal(chime_spec_parse(&spec, SPEC, NULL, 0), 0);
  assert_int_equal(chime__ring_create(&ring, &spec, 2, slots), 0);
  assert_int_equal(chime__ring_set_wake_at(ring, wake_at), 0);
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

static uint32_t bell_now(uint32_t *bell) {
  return atomic_load((_Atomic uint32_t *)bell);
}

static void join_within(pthread_t t, int seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += seconds;
  if (pthread_timedjoin_np(t, NULL, &ts) != 0)
    fail_msg("thread still blocked after %d s", seconds);
}

static void test_set_ready_max(void **state) {
  chime_ring_t *ring = make_ring(8, 1, 0);
  (void)state;
  assert_int_equal(chime__ring_set_ready_max(NULL, 1), CHIME_EINVAL);
  assert_int_equal(fill(ring), 8); /* 0: every free slot, as ever */
  chime_ring_destroy(ring);
  ring = make_ring(8, 1, 8); /* slots or more: no limit either */
  assert_int_equal(fill(ring), 8);
  chime_ring_destroy(ring);
}

/* N = 2 of 8 slots: two ready, then nothing until the consumer takes one;
 * the batches it holds leave room for two more ready. */
static void test_limit_honoured(void **state) {
  chime_ring_t *ring = make_ring(8, 1, 2);
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
  chime_ring_t *ring = make_ring(4, 1, 1);
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

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* A consumer holding a random 0..slots - 2 batches as it waits for the
 * next: every batch arrives (a lost wake-up shows as a next() that times
 * out, or a producer's lost), and the producer's count of published
 * batches never runs more than N ahead of the consumer's takes. */
static void run_ready(uint32_t slots, uint32_t wake_at, uint32_t ready_max,
                      int use_try) {
  chime_ring_t *ring = make_ring(slots, wake_at, ready_max);
  producer_arg_t a = {ring, 20000, use_try, 0, 0};
  chime_ring_view_t held[64];
  chime_ring_stats_t st;
  uint32_t nheld = 0;
  uint64_t rnd = 0x9e3779b97f4a7c15ull ^ (slots * 131u + ready_max);
  pthread_t t;
  assert_true(slots <= 64);
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
    chime_ring_get_stats(ring, &st);
    if (st.published - (i + 1) > ready_max)
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

static void test_threads_acquire(void **state) {
  (void)state;
  run_ready(8, 1, 1, 0);
  run_ready(8, 2, 2, 0);
  run_ready(3, 1, 1, 0);
}

static void test_threads_try_acquire(void **state) {
  (void)state;
  run_ready(8, 2, 1, 1);
  run_ready(16, 4, 3, 1);
  run_ready(4, 1, 2, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_set_ready_max),
      cmocka_unit_test(test_limit_honoured),
      cmocka_unit_test(test_one_ready_while_holding),
      cmocka_unit_test(test_threads_acquire),
      cmocka_unit_test(test_threads_try_acquire),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
