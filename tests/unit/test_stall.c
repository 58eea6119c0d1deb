/* Stream mode's stall rule (client/stall.c) on a stream object of the
 * test's own: when a call counts as stalled, and when it is not judged at
 * all. Times are set far from the rule's edges (seconds, not
 * milliseconds), so a slow machine never tips a case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "client/stream.h"
#include "wire/credit.h"

static chime_stream_t *owing(int64_t heard_ago_ms) {
  chime_stream_t *s = calloc(1, sizeof(*s));
  assert_non_null(s);
  chime__stall_reset(s, CHIME__HEARTBEAT_MS);
  s->stall_heard_ms = chime__now_ms() - heard_ago_ms;
  atomic_store(&s->remote.granted, 3); /* the server owes 3 batches */
  s->opts.reconnect_timeout_ms = 10000;
  return s;
}

static void test_silence_while_owed_is_a_stall(void **state) {
  (void)state;
  chime_stream_t *s = owing(10 * CHIME__STALL_MS);
  assert_int_equal(chime__stall_left_ms(s), 0);
  s->stall_heard_ms = chime__now_ms() + 100000; /* just heard */
  assert_true(chime__stall_left_ms(s) > 0);
  assert_true(chime__stall_left_ms(s) != INT64_MAX);
  free(s);
}

static void test_not_judged(void **state) {
  (void)state;
  chime_stream_t *s = owing(10 * CHIME__STALL_MS);
  /* Nothing owed, nothing half received: an idle learner holding all. */
  atomic_store(&s->remote.started, 3);
  assert_int_equal(chime__stall_left_ms(s), INT64_MAX);
  /* A batch half received is expected. */
  s->remote.active = 1;
  assert_int_equal(chime__stall_left_ms(s), 0);
  /* A server that sends no heartbeats (before 1.0) is never judged. */
  chime__stall_reset(s, 0);
  s->stall_heard_ms -= 10 * CHIME__STALL_MS;
  assert_int_equal(chime__stall_left_ms(s), INT64_MAX);
  /* Nor a call already being resumed. */
  chime__stall_reset(s, CHIME__HEARTBEAT_MS);
  s->stall_heard_ms -= 10 * CHIME__STALL_MS;
  atomic_store(&s->resuming, 1);
  assert_int_equal(chime__stall_left_ms(s), INT64_MAX);
  free(s);
}

/* Silence counts from when the learner began to expect: credits sent
 * when the server owed none, after a long quiet time. */
static void test_counted_from_the_expectation(void **state) {
  (void)state;
  chime_stream_t *s = owing(10 * CHIME__STALL_MS);
  chime__stall_expect(s, 0);
  assert_true(chime__stall_left_ms(s) > 0);
  /* Credits sent while batches were owed already change nothing. */
  chime_stream_t *t = owing(10 * CHIME__STALL_MS);
  chime__stall_expect(t, 1);
  assert_int_equal(chime__stall_left_ms(t), 0);
  free(s);
  free(t);
}

/* A slow link: messages 3 s apart stretch the rule to 4 times that, so
 * 5 s of silence is not yet a stall (1.5 s alone would be). */
static void test_slow_link_stretches_the_rule(void **state) {
  (void)state;
  chime_stream_t *s = owing(3000);
  chime__stall_heard(s); /* a gap of 3 s */
  assert_true(s->stall_gap_ms >= 3000);
  s->stall_heard_ms = chime__now_ms() - 5000;
  assert_true(chime__stall_left_ms(s) > 0);
  s->stall_heard_ms = chime__now_ms() - 20000;
  assert_int_equal(chime__stall_left_ms(s), 0);
  /* The estimate decays as messages come quickly again. */
  s->stall_heard_ms = chime__now_ms();
  int64_t before = s->stall_gap_ms;
  for (int i = 0; i < 40; i++)
    chime__stall_heard(s);
  assert_true(s->stall_gap_ms < before / 8);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_silence_while_owed_is_a_stall),
      cmocka_unit_test(test_not_judged),
      cmocka_unit_test(test_counted_from_the_expectation),
      cmocka_unit_test(test_slow_link_stretches_the_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
