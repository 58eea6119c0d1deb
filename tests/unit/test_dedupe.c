/* Which writers a table remembers (src/replay/dedupe.h), on a clock the
 * test moves: a writer bound to an open call is never forgotten, however
 * many new writers come; a closed writer makes room first, an idle one only
 * once idle for idle_ms; when every place is protected the new writer is
 * refused (CHIME_ERESOURCE) and nobody is forgotten; a forgotten writer's
 * next request is CHIME_EFORGOTTEN; a writer per episode, each closing, goes
 * on for ever in a small memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/dedupe.h"

static uint64_t clock_ms;

static uint64_t test_now(void *arg) {
  (void)arg;
  return clock_ms;
}

static chime__dedupe_t *make(uint32_t max, uint64_t idle_ms) {
  chime__dedupe_t *d = NULL;
  assert_int_equal(chime__dedupe_create(&d, max, idle_ms), 0);
  clock_ms = 1000000;
  chime__dedupe_set_clock(d, test_now, NULL);
  return d;
}

/* Request seq of writer w as the table checks and records it: 0 when it
 * went in, 1 when acked again from memory, else the refusal. */
static int request(chime__dedupe_t *d, uint64_t w, uint64_t seq) {
  chime__dedupe_req_t q = {.writer = w, .seq = seq};
  uint64_t k = 0;
  int rc = chime__dedupe_check(d, &q, 1, &k);
  if (rc == CHIME__DEDUPE_NEW) {
    chime__dedupe_record(d, &q, 1, seq * 10);
    return 0;
  }
  if (rc == CHIME__DEDUPE_RESENT) {
    assert_true(q.resent);
    assert_int_equal(k, seq * 10);
    return 1;
  }
  assert_true(q.refused || rc == CHIME_ENOMEM);
  return rc;
}

/* A call that carries writer w for requests from..to. */
static int call(chime__dedupe_t *d, uint64_t w, uint64_t from, uint64_t to) {
  int rc = chime__dedupe_bind(d, w, from);
  for (uint64_t s = from; rc == 0 && s <= to; s++)
    rc = request(d, w, s) < 0 ? -1 : 0;
  return rc;
}

/* The attack in small: with every writer bound, thousands of new
 * ids are refused and the bound writers all stay, their windows intact. */
static void test_bound_never_forgotten(void **state) {
  (void)state;
  chime__dedupe_t *d = make(4, 60000);
  for (uint64_t w = 1; w <= 4; w++)
    assert_int_equal(call(d, w, 1, 3), 0);
  for (uint64_t w = 100; w < 20100; w++)
    assert_int_equal(chime__dedupe_bind(d, w, 1), CHIME_ERESOURCE);
  /* Unbound use (check alone) is refused the same way. */
  assert_int_equal(request(d, 99, 1), CHIME_ERESOURCE);
  clock_ms += 86400000; /* a day: bound writers do not age */
  assert_int_equal(chime__dedupe_bind(d, 5, 1), CHIME_ERESOURCE);
  for (uint64_t w = 1; w <= 4; w++) {
    assert_int_equal(request(d, w, 3), 1); /* a resend: acked again */
    assert_int_equal(request(d, w, 4), 0); /* the next: goes in */
  }
  chime__dedupe_stats_t st;
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.writers, 4);
  assert_int_equal(st.bound, 4);
  assert_int_equal(st.forgotten, 0);
  assert_int_equal(st.refused, 20000 + 2);
  chime__dedupe_destroy(d); /* bound writers freed too (ASan) */
}

/* A closed writer's place goes first, before an idle writer's even when
 * the idle one is older; an idle writer's only after idle_ms. */
static void test_closed_first_then_idle_after_window(void **state) {
  (void)state;
  chime__dedupe_t *d = make(3, 1000);
  assert_int_equal(call(d, 1, 1, 2), 0);
  assert_int_equal(call(d, 2, 1, 2), 0);
  assert_int_equal(call(d, 3, 1, 2), 0);
  chime__dedupe_unbind(d, 1, 0); /* lost its call: idle */
  clock_ms += 5000;
  chime__dedupe_unbind(d, 2, 1); /* half-closed after its last ack */
  /* 2's place, though 1 has been idle longer than the window. */
  assert_int_equal(call(d, 4, 1, 1), 0);
  assert_int_equal(chime__dedupe_bind(d, 2, 3), CHIME_EFORGOTTEN);
  /* 1 is idle past the window: its place goes next. */
  assert_int_equal(call(d, 5, 1, 1), 0);
  assert_int_equal(request(d, 1, 3), CHIME_EFORGOTTEN);
  /* A writer's first request is never refused as forgotten. */
  chime__dedupe_unbind(d, 5, 0);
  assert_int_equal(chime__dedupe_bind(d, 6, 1), CHIME_ERESOURCE); /* 5 new */
  clock_ms += 999;
  assert_int_equal(chime__dedupe_bind(d, 6, 1), CHIME_ERESOURCE);
  clock_ms += 1;
  assert_int_equal(chime__dedupe_bind(d, 6, 1), 0);
  chime__dedupe_stats_t st;
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.forgotten, 3);
  assert_int_equal(st.writers, 3);
  chime__dedupe_destroy(d);
}

/* An idle writer that comes back within the window (a reconnect) is bound
 * again: protected for as long as its new call is open, and its resends
 * are acked from memory. Two calls carrying one writer: it stays bound
 * until both ended. */
static void test_reconnect_within_window(void **state) {
  (void)state;
  chime__dedupe_t *d = make(2, 1000);
  assert_int_equal(call(d, 1, 1, 5), 0);
  chime__dedupe_unbind(d, 1, 0);
  clock_ms += 900;
  assert_int_equal(chime__dedupe_bind(d, 1, 4), 0);
  assert_int_equal(request(d, 1, 4), 1);
  assert_int_equal(request(d, 1, 5), 1);
  assert_int_equal(request(d, 1, 6), 0);
  assert_int_equal(chime__dedupe_bind(d, 1, 7), 0); /* a second call */
  chime__dedupe_unbind(d, 1, 0);
  clock_ms += 100000;
  assert_int_equal(call(d, 2, 1, 1), 0);
  assert_int_equal(chime__dedupe_bind(d, 3, 1), CHIME_ERESOURCE);
  assert_int_equal(request(d, 1, 6), 1);
  chime__dedupe_unbind(d, 1, 1);
  assert_int_equal(chime__dedupe_bind(d, 3, 1), 0);
  /* Unbinding what was never bound changes nothing. */
  chime__dedupe_unbind(d, 42, 0);
  chime__dedupe_unbind(d, 2, 0);
  chime__dedupe_unbind(d, 2, 0);
  chime__dedupe_stats_t st;
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.bound, 1);
  assert_int_equal(st.writers, 2);
  chime__dedupe_destroy(d);
}

/* A writer per episode, each closing: 100000 of them through a memory of
 * 8 at one clock instant, beside a long-lived bound writer and a writer
 * idle within its window, both kept throughout. */
static void test_writer_per_episode_forever(void **state) {
  (void)state;
  chime__dedupe_t *d = make(8, 60000);
  assert_int_equal(call(d, 1, 1, 1), 0);
  assert_int_equal(call(d, 2, 1, 1), 0);
  chime__dedupe_unbind(d, 2, 0);
  for (uint64_t w = 1000; w < 101000; w++) {
    if (call(d, w, 1, 3) != 0)
      fail_msg("episode writer %llu refused", (unsigned long long)w);
    chime__dedupe_unbind(d, w, 1);
  }
  assert_int_equal(request(d, 1, 1), 1);
  assert_int_equal(request(d, 1, 2), 0);
  assert_int_equal(chime__dedupe_bind(d, 2, 2), 0);
  assert_int_equal(request(d, 2, 1), 1);
  chime__dedupe_stats_t st;
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.writers, 8);
  assert_int_equal(st.refused, 0);
  assert_int_equal(st.forgotten, 100000 - 6);
  chime__dedupe_destroy(d);
}

/* idle_ms 0: a writer no call carries may go as soon as room is needed,
 * the least recently used first (the old rule, kept for in-process use). */
static void test_no_window_is_lru(void **state) {
  (void)state;
  chime__dedupe_t *d = make(2, 0);
  assert_int_equal(request(d, 1, 1), 0);
  assert_int_equal(request(d, 2, 1), 0);
  assert_int_equal(request(d, 1, 2), 0); /* 1 used last */
  assert_int_equal(request(d, 3, 1), 0); /* takes 2's place */
  assert_int_equal(request(d, 2, 2), CHIME_EFORGOTTEN);
  assert_int_equal(request(d, 1, 2), 1);
  chime__dedupe_destroy(d);
}

/* After a restore nobody is remembered and anybody may have had requests
 * go in before the checkpoint: an unknown writer past its first request is
 * refused (bind and check), a new writer's first request goes in, and
 * writers seen since resend exactly once. */
static void test_restored_forgets_all(void **state) {
  (void)state;
  chime__dedupe_t *d = make(8, 60000);
  assert_int_equal(chime__dedupe_was_restored(d), 0);
  assert_int_equal(request(d, 9, 2), 0); /* never forgot: taken */
  chime__dedupe_destroy(d);
  d = make(8, 60000);
  chime__dedupe_restored(d);
  assert_int_equal(chime__dedupe_was_restored(d), 1);
  assert_int_equal(request(d, 9, 2), CHIME_EFORGOTTEN);
  assert_int_equal(chime__dedupe_bind(d, 9, 5), CHIME_EFORGOTTEN);
  assert_int_equal(request(d, 10, 1), 0);
  assert_int_equal(request(d, 10, 2), 0);
  assert_int_equal(request(d, 10, 2), 1);
  assert_int_equal(call(d, 11, 1, 3), 0);
  chime__dedupe_unbind(d, 11, 0);
  assert_int_equal(request(d, 11, 3), 1);
  chime__dedupe_destroy(d);
}

/* Owners' shares (chime__dedupe_set_owners): of 8 places, 2 owners owed
 * 50% between them (2 each). Owner 1 fills all it may (6) and its next is
 * refused over its share, nobody forgotten; owner 2's writers find places
 * at once; owner 0 (no actor token) is never held back; a closed writer's
 * place counts as takeable again. One owner: it fills every place. */
static void test_owner_shares(void **state) {
  (void)state;
  chime__dedupe_t *d = make(8, 600000);
  assert_int_equal(chime__dedupe_set_owners(d, 2, 50), 0);
  uint64_t w = 1;
  int rc = 0, taken = 0;
  while ((rc = chime__dedupe_bind_as(d, w++, 1, 1)) == 0)
    taken++;
  assert_int_equal(rc, CHIME_ERESOURCE);
  assert_int_equal(taken, 6);
  chime__dedupe_stats_t st;
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.share_refused, 1);
  assert_int_equal(st.forgotten, 0);
  assert_int_equal(chime__dedupe_owner_held(d, 1), 6);
  assert_int_equal(chime__dedupe_bind_as(d, 100, 1, 2), 0);
  assert_int_equal(chime__dedupe_bind_as(d, 101, 1, 2), 0);
  assert_int_equal(chime__dedupe_owner_held(d, 2), 2);
  /* Full now: anyone is refused, for want of a place. */
  assert_int_equal(chime__dedupe_bind_as(d, 102, 1, 2), CHIME_ERESOURCE);
  assert_int_equal(chime__dedupe_bind_as(d, 103, 1, 0), CHIME_ERESOURCE);
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.share_refused, 1);
  /* Owner 2 closes one: owed a place again, which owner 1 may not take
   * but owner 2 may (it takes the closed writer's place). */
  chime__dedupe_unbind(d, 100, 1);
  assert_int_equal(chime__dedupe_owner_held(d, 2), 1);
  assert_int_equal(chime__dedupe_bind_as(d, 104, 1, 1), CHIME_ERESOURCE);
  assert_int_equal(chime__dedupe_bind_as(d, 105, 1, 2), 0);
  /* Owner 1 closes two: one of their places is owed to nobody. */
  chime__dedupe_unbind(d, 1, 1);
  chime__dedupe_unbind(d, 2, 1);
  assert_int_equal(chime__dedupe_bind_as(d, 106, 1, 0), 0); /* owner 0 */
  assert_int_equal(chime__dedupe_bind_as(d, 107, 1, 1), 0);
  chime__dedupe_destroy(d);

  d = make(8, 600000);
  assert_int_equal(chime__dedupe_set_owners(d, 1, 50), 0); /* one token */
  for (w = 1; w <= 8; w++)
    assert_int_equal(chime__dedupe_bind_as(d, w, 1, 1), 0);
  assert_int_equal(chime__dedupe_bind_as(d, w, 1, 1), CHIME_ERESOURCE);
  chime__dedupe_stats(d, &st);
  assert_int_equal(st.share_refused, 0);
  chime__dedupe_destroy(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bound_never_forgotten),
      cmocka_unit_test(test_closed_first_then_idle_after_window),
      cmocka_unit_test(test_reconnect_within_window),
      cmocka_unit_test(test_writer_per_episode_forever),
      cmocka_unit_test(test_no_window_is_lru),
      cmocka_unit_test(test_restored_forgets_all),
      cmocka_unit_test(test_owner_shares),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
