/* The ring within one process: a producer thread and a consumer thread, lease
 * rules, timeouts, shutdown, disconnect, reclaim and stats. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/ring.h"
#include "ring/producer.h"
#include "ring_pattern.h"

#define SPEC "a:u8[37], b:f32[5], c:u64"

static chime_ring_t *make_ring(uint32_t batch, uint32_t slots) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime__ring_create(&ring, &spec, batch, slots), 0);
  assert_non_null(ring);
  return ring;
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

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- producer/consumer threads over thousands of batches ---- */

typedef struct {
  chime_ring_t *ring;
  uint64_t n;
  int rc;
  uint64_t bad_seq;     /* publish returned an unexpected seq */
  int use_try;          /* try_acquire + a futex wait on its bell, as chimed */
  uint64_t waits, lost; /* lost: a bell wait that ran into its timeout */
} producer_arg_t;

/* acquire() the way chimed's sampler pool does it: try, and on EBUSY sleep
 * on the bell it armed (a wake-up lost between the two would sleep 5 s). */
static int acquire_by_bell(producer_arg_t *a, chime__ring_wslot_t *w) {
  for (;;) {
    uint32_t *bell, val;
    int rc = chime__ring_try_acquire(a->ring, w, &bell, &val);
    if (rc != CHIME_EBUSY)
      return rc;
    a->waits++;
    struct timespec ts = {5, 0};
    if (syscall(SYS_futex, bell, FUTEX_WAIT, val, &ts, NULL, 0) != 0 &&
        errno == ETIMEDOUT)
      a->lost++;
  }
}

static void *producer_main(void *p) {
  producer_arg_t *a = p;
  const chime_ring_layout_t *l = chime_ring_layout(a->ring);
  uint32_t nleaves = chime_ring_spec(a->ring)->nleaves;
  a->bad_seq = UINT64_MAX;
  for (uint64_t i = 0; i < a->n; i++) {
    chime__ring_wslot_t w;
    uint64_t seq;
    a->rc = a->use_try ? acquire_by_bell(a, &w)
                       : chime__ring_acquire(a->ring, &w, -1);
    if (a->rc != 0)
      return NULL;
    ring_pattern_fill(l, nleaves, &w, i);
    a->rc = chime__ring_publish(a->ring, w.slot, &seq);
    if (a->rc != 0)
      return NULL;
    if (seq != i && a->bad_seq == UINT64_MAX)
      a->bad_seq = i;
  }
  return NULL;
}

typedef struct {
  uint32_t slot;
  uint64_t seq;
  chime_ring_view_t view;
} lease_t;

/* Consumer on the calling thread: random numbers of leases held, released in
 * random order after random hold times; each batch checked when taken and
 * again when released (so an overwrite of a leased slot is caught). */
static void consume_and_check(chime_ring_t *ring, uint64_t n, uint64_t seed) {
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  uint32_t nleaves = chime_ring_spec(ring)->nleaves;
  lease_t held[CHIME_RING_MAX_SLOTS];
  uint32_t nheld = 0, cap = l->slots - 1;
  uint64_t rnd = seed, expect = 0;

  while (expect < n || nheld > 0) {
    uint32_t target = (uint32_t)(ring_rand(&rnd) % cap);
    if (expect == n)
      target = 0;
    while (nheld > target) {
      uint32_t k = (uint32_t)(ring_rand(&rnd) % nheld);
      if (ring_pattern_check(l, nleaves, &held[k].view, held[k].seq) != -1)
        fail_msg("batch %llu changed while leased",
                 (unsigned long long)held[k].seq);
      assert_int_equal(chime_ring_release(ring, held[k].slot), 0);
      held[k] = held[--nheld];
    }
    if (expect < n) {
      lease_t *le = &held[nheld];
      int rc = chime_ring_next(ring, &le->view, 10000);
      if (rc != 0)
        fail_msg("next at batch %llu: %s", (unsigned long long)expect,
                 chime_err_name(rc));
      assert_int_equal(le->view.seq, expect);
      if (ring_pattern_check(l, nleaves, &le->view, expect) != -1)
        fail_msg("batch %llu corrupt when taken", (unsigned long long)expect);
      le->slot = le->view.slot;
      le->seq = expect++;
      nheld++;
      if (ring_rand(&rnd) % 4 == 0)
        sched_yield();
      if (ring_rand(&rnd) % 64 == 0)
        sleep_ms(1); /* let the producer block on a full ring */
    }
  }
}

static void run_threads_with(uint32_t batch, uint32_t slots, uint64_t n,
                             uint64_t seed, int use_try) {
  chime_ring_t *ring = make_ring(batch, slots);
  producer_arg_t pa = {.ring = ring, .n = n, .use_try = use_try};
  chime_ring_stats_t st;
  pthread_t t;

  assert_int_equal(pthread_create(&t, NULL, producer_main, &pa), 0);
  consume_and_check(ring, n, seed);
  join_within(t, 30);
  assert_int_equal(pa.rc, 0);
  assert_int_equal(pa.bad_seq, UINT64_MAX);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.published, n);
  assert_int_equal(st.released, n);
  assert_int_equal(st.leases, 0);
  assert_true(st.max_leases <= slots - 1);
  assert_true(st.max_leases >= 1);
  assert_int_equal(st.shutdown, 0);
  assert_int_equal(pa.lost, 0);
  if (use_try)
    assert_true(pa.waits > 0); /* the bell path ran */
  chime_ring_destroy(ring);
}

static void run_threads(uint32_t batch, uint32_t slots, uint64_t n,
                        uint64_t seed) {
  run_threads_with(batch, slots, n, seed, 0);
}

/* try_acquire + a futex wait on the armed bell loses no wake-up. */
static void test_threads_try_acquire(void **state) {
  (void)state;
  run_threads_with(4, 3, 5000, 0x5eed, 1);
}

static void test_threads_pattern(void **state) {
  (void)state;
  run_threads(16, 6, 5000, 0x1234567);
}

static void test_threads_two_slots(void **state) {
  (void)state;
  run_threads(3, 2, 3000, 0xfeed);
}

static void test_threads_many_slots(void **state) {
  (void)state;
  run_threads(1, 64, 5000, 0xabcdef);
}

/* The consumer side through an attached handle in the same process. */
static void test_threads_attached_consumer(void **state) {
  chime_ring_t *ring = make_ring(8, 5), *cons = NULL;
  uint8_t nonce[16];
  producer_arg_t pa = {.ring = ring, .n = 3000};
  pthread_t t;
  (void)state;
  chime_ring_nonce(ring, nonce);
  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(ring), nonce), 0);
  assert_int_equal(pthread_create(&t, NULL, producer_main, &pa), 0);
  consume_and_check(cons, 3000, 99);
  join_within(t, 30);
  assert_int_equal(pa.rc, 0);
  chime_ring_destroy(cons);
  chime_ring_destroy(ring);
}

/* ---- lease rules ---- */

static uint32_t publish_one(chime_ring_t *ring, uint64_t expect_seq) {
  chime__ring_wslot_t w;
  uint64_t seq = UINT64_MAX;
  assert_int_equal(chime__ring_acquire(ring, &w, 0), 0);
  ring_pattern_fill(chime_ring_layout(ring), chime_ring_spec(ring)->nleaves, &w,
                    expect_seq);
  assert_int_equal(chime__ring_publish(ring, w.slot, &seq), 0);
  assert_int_equal(seq, expect_seq);
  return w.slot;
}

static void test_leased_slot_never_reused(void **state) {
  chime_ring_t *ring = make_ring(4, 4);
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  chime_ring_view_t v[3];
  chime__ring_wslot_t w;
  (void)state;
  for (uint64_t i = 0; i < 4; i++)
    publish_one(ring, i);
  for (int i = 0; i < 3; i++)
    assert_int_equal(chime_ring_next(ring, &v[i], 0), 0);
  /* Three leased, one published and not taken: nothing is free. */
  assert_int_equal(chime__ring_acquire(ring, &w, 0), CHIME_ETIMEDOUT);
  assert_int_equal(chime__ring_acquire(ring, &w, 30), CHIME_ETIMEDOUT);
  assert_int_equal(chime_ring_release(ring, v[1].slot), 0);
  assert_int_equal(chime__ring_acquire(ring, &w, 0), 0);
  assert_int_equal(w.slot, v[1].slot);
  assert_int_equal(chime__ring_acquire(ring, &w, 0), CHIME_ETIMEDOUT);
  memset(w.base, 0xEE, l->slot_bytes);
  chime__ring_abandon(ring, v[1].slot);
  /* The other leases are untouched by the write to the freed slot. */
  assert_int_equal(ring_pattern_check(l, 3, &v[0], 0), -1);
  assert_int_equal(ring_pattern_check(l, 3, &v[2], 2), -1);
  /* The abandoned slot is free again. */
  assert_int_equal(chime__ring_acquire(ring, &w, 0), 0);
  assert_int_equal(w.slot, v[1].slot);
  chime_ring_destroy(ring);
}

static void test_busy_after_slots_minus_one(void **state) {
  chime_ring_t *ring = make_ring(2, 3);
  chime_ring_view_t v[3];
  chime_ring_stats_t st;
  (void)state;
  for (uint64_t i = 0; i < 3; i++)
    publish_one(ring, i);
  assert_int_equal(chime_ring_next(ring, &v[0], 0), 0);
  assert_int_equal(chime_ring_next(ring, &v[1], 0), 0);
  assert_int_equal(chime_ring_next(ring, &v[2], 0), CHIME_EBUSY);
  assert_int_equal(chime_ring_next(ring, &v[2], -1), CHIME_EBUSY);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.leases, 2);
  assert_int_equal(st.max_leases, 2);
  /* Out of order release, then the third batch in publish order. */
  assert_int_equal(chime_ring_release(ring, v[1].slot), 0);
  assert_int_equal(chime_ring_next(ring, &v[2], 0), 0);
  assert_int_equal(v[2].seq, 2);
  chime_ring_destroy(ring);
}

/* try_acquire without a bell only tries: busy on a full ring, a slot once
 * one is released; one of bell and bell_val alone is a bad call. */
static void test_try_acquire_without_bell(void **state) {
  chime_ring_t *ring = make_ring(2, 3);
  chime__ring_wslot_t w;
  chime_ring_view_t v;
  uint32_t *bell = NULL, val = 0;
  uint64_t seq;
  (void)state;
  for (uint64_t i = 0; i < 3; i++)
    publish_one(ring, i);
  assert_int_equal(chime__ring_try_acquire(ring, &w, NULL, NULL), CHIME_EBUSY);
  assert_int_equal(chime__ring_try_acquire(ring, &w, &bell, NULL),
                   CHIME_EINVAL);
  assert_int_equal(chime__ring_try_acquire(ring, &w, NULL, &val), CHIME_EINVAL);
  assert_int_equal(chime_ring_next(ring, &v, 0), 0);
  assert_int_equal(chime_ring_release(ring, v.slot), 0);
  assert_int_equal(chime__ring_try_acquire(ring, &w, NULL, NULL), 0);
  assert_int_equal(w.slot, v.slot);
  assert_int_equal(chime__ring_publish(ring, w.slot, &seq), 0);
  assert_int_equal(seq, 3);
  chime_ring_destroy(ring);
}

static void test_bad_calls(void **state) {
  chime_ring_t *ring = make_ring(2, 3);
  chime_ring_view_t v;
  chime__ring_wslot_t w;
  uint32_t slot;
  (void)state;
  assert_int_equal(chime_ring_release(ring, 0), CHIME_EINVAL);
  assert_int_equal(chime_ring_release(ring, 3), CHIME_EINVAL);
  assert_int_equal(chime_ring_release(ring, UINT32_MAX), CHIME_EINVAL);
  assert_int_equal(chime__ring_publish(ring, 0, NULL), CHIME_EINVAL);
  assert_int_equal(chime__ring_publish(ring, 7, NULL), CHIME_EINVAL);
  slot = publish_one(ring, 0);
  assert_int_equal(chime__ring_publish(ring, slot, NULL), CHIME_EINVAL);
  assert_int_equal(chime_ring_next(ring, &v, 0), 0);
  assert_int_equal(chime_ring_release(ring, v.slot), 0);
  assert_int_equal(chime_ring_release(ring, v.slot), CHIME_EINVAL);
  assert_int_equal(chime_ring_next(ring, NULL, 0), CHIME_EINVAL);
  assert_int_equal(chime__ring_acquire(ring, NULL, 0), CHIME_EINVAL);
  assert_int_equal(chime__ring_acquire(NULL, &w, 0), CHIME_EINVAL);
  assert_int_equal(chime_ring_next(NULL, &v, 0), CHIME_EINVAL);
  assert_null(chime_ring_slot_base(ring, 3));
  assert_non_null(chime_ring_slot_base(ring, 2));
  chime__ring_abandon(ring, 99);
  chime_ring_destroy(NULL);
  chime_ring_destroy(ring);
}

static void test_create_rejects(void **state) {
  chime_spec_t spec, empty;
  chime_ring_t *ring = (chime_ring_t *)&spec;
  (void)state;
  memset(&empty, 0, sizeof(empty));
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime__ring_create(&ring, &spec, 0, 4), CHIME_EINVAL);
  assert_null(ring);
  /* The reason is the calling thread's chime_last_error(). */
  assert_non_null(strstr(chime_last_error(), "batch"));
  assert_int_equal(chime__ring_create(&ring, &spec, 4, 1), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "slot count 1"));
  assert_int_equal(chime__ring_create(&ring, &empty, 4, 4), CHIME_EINVAL);
  assert_int_equal(chime__ring_create(NULL, &spec, 4, 4), CHIME_EINVAL);
  assert_int_equal(chime__ring_create(&ring, NULL, 4, 4), CHIME_EINVAL);
  assert_int_equal(chime__ring_create(&ring, &spec, 4, 4), 0);
  /* A success leaves it as it was (errno's rule, chime/errors.h). */
  assert_non_null(strstr(chime_last_error(), "ring create"));
  chime_ring_destroy(ring);
}

static void test_timeouts(void **state) {
  chime_ring_t *ring = make_ring(2, 3);
  chime_ring_view_t v;
  chime__ring_wslot_t w[3];
  chime_ring_stats_t st;
  (void)state;
  assert_int_equal(chime_ring_next(ring, &v, 0), CHIME_ETIMEDOUT);
  assert_int_equal(chime_ring_next(ring, &v, 25), CHIME_ETIMEDOUT);
  for (int i = 0; i < 3; i++)
    assert_int_equal(chime__ring_acquire(ring, &w[i], 0), 0);
  assert_int_equal(chime__ring_acquire(ring, &w[0], 0), CHIME_ETIMEDOUT);
  assert_int_equal(chime__ring_acquire(ring, &w[0], 25), CHIME_ETIMEDOUT);
  chime_ring_stats(ring, &st);
  assert_true(st.producer_wait_ns > 0);
  assert_true(st.consumer_wait_ns > 0);
  assert_int_equal(st.published, 0);
  chime_ring_destroy(ring);
}

/* ---- shutdown and disconnect wake blocked waiters ---- */

typedef struct {
  chime_ring_t *ring;
  int rc;
} waiter_arg_t;

static void *next_forever(void *p) {
  waiter_arg_t *a = p;
  chime_ring_view_t v;
  a->rc = chime_ring_next(a->ring, &v, -1);
  return NULL;
}

static void *acquire_forever(void *p) {
  waiter_arg_t *a = p;
  chime__ring_wslot_t w;
  a->rc = chime__ring_acquire(a->ring, &w, -1);
  return NULL;
}

static void test_shutdown_wakes_consumer(void **state) {
  chime_ring_t *ring = make_ring(2, 3);
  waiter_arg_t a = {ring, 1};
  pthread_t t;
  chime_ring_stats_t st;
  (void)state;
  assert_int_equal(pthread_create(&t, NULL, next_forever, &a), 0);
  sleep_ms(50); /* usually blocked in the futex by now; either way must work */
  chime__ring_shutdown(ring);
  join_within(t, 10);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.shutdown, 1);
  chime_ring_destroy(ring);
}

static void test_shutdown_wakes_producer(void **state) {
  chime_ring_t *ring = make_ring(2, 3);
  waiter_arg_t a = {ring, 1};
  pthread_t t;
  (void)state;
  for (uint64_t i = 0; i < 3; i++)
    publish_one(ring, i);
  assert_int_equal(pthread_create(&t, NULL, acquire_forever, &a), 0);
  sleep_ms(50);
  chime__ring_shutdown(ring);
  join_within(t, 10);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);
  chime_ring_destroy(ring);
}

static void test_shutdown_wins_but_leases_stay(void **state) {
  chime_ring_t *ring = make_ring(2, 4);
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  chime_ring_view_t v, rest;
  chime__ring_wslot_t w;
  (void)state;
  for (uint64_t i = 0; i < 3; i++)
    publish_one(ring, i);
  assert_int_equal(chime_ring_next(ring, &v, 0), 0);
  chime__ring_shutdown(ring);
  chime__ring_shutdown(ring); /* idempotent */
  assert_int_equal(chime_ring_next(ring, &rest, 0), CHIME_ESHUTDOWN);
  assert_int_equal(chime_ring_next(ring, &rest, -1), CHIME_ESHUTDOWN);
  assert_int_equal(chime__ring_acquire(ring, &w, -1), CHIME_ESHUTDOWN);
  assert_int_equal(ring_pattern_check(l, 3, &v, 0), -1);
  assert_int_equal(chime_ring_release(ring, v.slot), 0);
  chime_ring_destroy(ring);
}

static void test_disconnect_wakes_consumer(void **state) {
  chime_ring_t *ring = make_ring(2, 3), *cons = NULL;
  waiter_arg_t a = {NULL, 1};
  chime_ring_view_t v;
  pthread_t t;
  (void)state;
  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(ring), NULL), 0);
  a.ring = cons;
  assert_int_equal(pthread_create(&t, NULL, next_forever, &a), 0);
  sleep_ms(50);
  chime_ring_set_disconnected(cons);
  join_within(t, 10);
  assert_int_equal(a.rc, CHIME_EDISCONNECTED);
  publish_one(ring, 0);
  assert_int_equal(chime_ring_next(cons, &v, 0), CHIME_EDISCONNECTED);
  chime_ring_destroy(cons);
  chime_ring_destroy(ring);
}

/* ---- attach and reclaim within one process ---- */

static void test_attach_checks_nonce_and_roles(void **state) {
  chime_ring_t *ring = make_ring(2, 3), *cons = NULL;
  uint8_t nonce[16], other[16];
  chime__ring_wslot_t w;
  chime_ring_stats_t st;
  size_t len = 0;
  (void)state;
  chime_ring_nonce(ring, nonce);
  memcpy(other, nonce, 16);
  other[7] ^= 1;
  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(ring), other),
                   CHIME_EPERM);
  assert_null(cons);
  assert_int_equal(chime_ring_attach(&cons, -1, NULL), CHIME_EINVAL);
  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(ring), nonce), 0);
  assert_true(chime_ring_fd(cons) >= 0);
  assert_int_not_equal(chime_ring_fd(cons), chime_ring_fd(ring));
  assert_memory_equal(chime_ring_layout(cons), chime_ring_layout(ring),
                      sizeof(chime_ring_layout_t));
  assert_memory_equal(chime_ring_spec(cons), chime_ring_spec(ring),
                      sizeof(chime_spec_t));
  assert_non_null(chime_ring_map_base(cons, &len));
  assert_true(len > chime_ring_layout(cons)->data_bytes);
  assert_int_equal(chime__ring_acquire(cons, &w, 0), CHIME_EPERM);
  assert_int_equal(chime__ring_publish(cons, 0, NULL), CHIME_EPERM);
  assert_int_equal(chime__ring_reclaim(cons), 0);
  chime__ring_shutdown(cons); /* no effect from the consumer side */
  chime_ring_stats(cons, &st);
  assert_int_equal(st.shutdown, 0);
  chime_ring_destroy(cons);
  chime_ring_destroy(ring);
}

static void test_reclaim(void **state) {
  chime_ring_t *ring = make_ring(2, 4), *cons = NULL;
  chime_ring_view_t v;
  chime__ring_wslot_t w[4];
  chime_ring_stats_t st;
  (void)state;
  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(ring), NULL), 0);
  for (uint64_t i = 0; i < 4; i++)
    publish_one(ring, i);
  assert_int_equal(chime_ring_next(cons, &v, 0), 0);
  assert_int_equal(chime_ring_next(cons, &v, 0), 0);
  assert_int_equal(chime_ring_release(cons, v.slot), 0);
  /* The consumer "dies": one lease held, two batches never taken. */
  chime_ring_destroy(cons);
  assert_int_equal(chime__ring_acquire(ring, &w[0], 0), 0);
  chime__ring_abandon(ring, w[0].slot);
  assert_int_equal(chime__ring_acquire(ring, &w[0], 0), 0);
  assert_int_equal(chime__ring_acquire(ring, &w[1], 0), CHIME_ETIMEDOUT);
  chime__ring_abandon(ring, w[0].slot);
  assert_int_equal(chime__ring_reclaim(ring), 3);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.generation, 1);
  assert_int_equal(st.leases, 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(chime__ring_acquire(ring, &w[i], 0), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(chime__ring_publish(ring, w[i].slot, NULL), 0);
  /* A new consumer starts after what the dead one left. */
  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(ring), NULL), 0);
  assert_int_equal(chime_ring_next(cons, &v, 0), 0);
  assert_int_equal(v.seq, 4);
  assert_int_equal(chime__ring_reclaim(ring), 4);
  chime_ring_destroy(cons);
  chime_ring_destroy(ring);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_pattern),
      cmocka_unit_test(test_threads_two_slots),
      cmocka_unit_test(test_threads_many_slots),
      cmocka_unit_test(test_threads_try_acquire),
      cmocka_unit_test(test_try_acquire_without_bell),
      cmocka_unit_test(test_threads_attached_consumer),
      cmocka_unit_test(test_leased_slot_never_reused),
      cmocka_unit_test(test_busy_after_slots_minus_one),
      cmocka_unit_test(test_bad_calls),
      cmocka_unit_test(test_create_rejects),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_shutdown_wakes_consumer),
      cmocka_unit_test(test_shutdown_wakes_producer),
      cmocka_unit_test(test_shutdown_wins_but_leases_stay),
      cmocka_unit_test(test_disconnect_wakes_consumer),
      cmocka_unit_test(test_attach_checks_nonce_and_roles),
      cmocka_unit_test(test_reclaim),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
