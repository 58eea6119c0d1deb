/* MutatePriorities against the real chimed: new priorities reorder a
 * max_heap table and silence items of a prioritized one, deletes take items
 * out, unknown keys are counted, bad priorities and unknown tables are
 * refused with nothing changed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "writes.h"
#include "rawcall.h"

static chime__chimed_t chimed;
static grpc_channel *ch;
static chime_client_t *client;

static int setup(void **state) {
  (void)state;
  return chime__raw_client_fixture_start(
      &chimed, &ch, &client,
      "{\"tables\": [{\"name\": \"h\", \"spec\": \"x:u64[]\", "
      "\"capacity\": 100, \"sampler\": \"max_heap\", "
      "\"max_times_sampled\": 1},\n"
      " {\"name\": \"p\", \"spec\": \"x:u64[]\", \"capacity\": 100, "
      "\"sampler\": \"prioritized\", \"remover\": \"fifo\"},\n"
      " {\"name\": \"m\", \"spec\": \"x:u64[]\", \"capacity\": 5000, "
      "\"sampler\": \"max_heap\", \"max_times_sampled\": 1}]}\n");
}

static int teardown(void **state) {
  (void)state;
  return chime__raw_client_fixture_stop(&chimed, ch, client);
}

static double prio_x(uint64_t x) {
  return (double)x;
}

/* x = 1..n with priority x into table; keys are 1..n too. */
static void write_prio_x(const char *table, uint64_t n) {
  assert_int_equal(chime__write_counter(client, table, 1, n, prio_x), 0);
}

static void test_max_heap_order_after_mutate(void **state) {
  (void)state;
  write_prio_x("h", 10);
  uint64_t keys[] = {3, 10, 999};
  double prios[] = {100.0, 0.5, 7.0};
  uint64_t dels[] = {5, 6, 1000};
  chime_mutate_result_t r;
  assert_int_equal(
      chime_client_mutate_priorities(client, "h", keys, prios, 3, dels, 3, &r),
      0);
  assert_int_equal(r.updated, 2);
  assert_int_equal(r.deleted, 2);
  assert_int_equal(r.unknown, 2);

  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 8;
  so.slots = 2;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, client, "h", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 20000), 0);
  const uint64_t want[] = {3, 9, 8, 7, 4, 2, 1, 10};
  for (uint32_t i = 0; i < 8; i++) {
    uint64_t x;
    memcpy(&x, (const uint8_t *)b.leaf[0].data + i * 8, 8);
    if (b.info[i].key != want[i] || x != want[i])
      fail_msg("sample %u: key %llu (x %llu), expected %llu", i,
               (unsigned long long)b.info[i].key, (unsigned long long)x,
               (unsigned long long)want[i]);
    /* The info says the priority it was drawn at, and how many items the
     * table held then (each draw takes one: max_times_sampled 1). */
    double prio = want[i] == 3 ? 100.0 : want[i] == 10 ? 0.5 : (double)want[i];
    assert_true(b.info[i].priority == prio);
    assert_int_equal(b.info[i].table_size, 8 - i);
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
}

static void test_prioritized_zero_is_never_drawn(void **state) {
  (void)state;
  write_prio_x("p", 4);
  uint64_t keys[] = {1, 2, 3};
  double zero[] = {0, 0, 0};
  chime_mutate_result_t r;
  assert_int_equal(
      chime_client_mutate_priorities(client, "p", keys, zero, 3, NULL, 0, &r),
      0);
  assert_int_equal(r.updated, 3);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 16;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, client, "p", &so), 0);
  for (int k = 0; k < 4; k++) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    for (uint32_t i = 0; i < b.count; i++) {
      assert_int_equal(b.info[i].key, 4);
      assert_true(fabs(b.info[i].probability - 1.0) < 1e-12);
      assert_true(b.info[i].priority == 4.0);
      assert_int_equal(b.info[i].table_size, 4);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

static void test_refused_with_nothing_changed(void **state) {
  (void)state;
  uint64_t key = 1;
  double bad[] = {NAN, INFINITY, -1.0};
  for (int i = 0; i < 3; i++)
    assert_int_equal(chime_client_mutate_priorities(client, "p", &key, &bad[i],
                                                    1, NULL, 0, NULL),
                     CHIME_EINVAL);
  assert_int_equal(chime_client_mutate_priorities(client, "nope", NULL, NULL, 0,
                                                  &key, 1, NULL),
                   CHIME_ENOTFOUND);
  /* The server checks too, and changes nothing: a good update beside a bad
   * one is not applied. */
  Chime__V1__PriorityUpdate good = CHIME__V1__PRIORITY_UPDATE__INIT;
  Chime__V1__PriorityUpdate nan = CHIME__V1__PRIORITY_UPDATE__INIT;
  good.key = 4;
  good.priority = 0;
  nan.key = 4;
  nan.priority = NAN;
  Chime__V1__PriorityUpdate *ups[] = {&good, &nan};
  Chime__V1__MutatePrioritiesRequest req =
      CHIME__V1__MUTATE_PRIORITIES_REQUEST__INIT;
  req.table = (char *)"p";
  req.n_updates = 2;
  req.updates = ups;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st;
  char details[512];
  assert_int_equal(
      chime__raw_unary(ch, "/chime.v1.Chime/MutatePriorities", &req.base,
                       &chime__v1__mutate_priorities_response__descriptor,
                       &resp, &st, details, sizeof details),
      0);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(details, "nothing was changed"));
  assert_null(resp);
  /* Key 4 still has its priority: the only item drawn from 'p'. */
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 4;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, client, "p", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 20000), 0);
  assert_int_equal(b.info[0].key, 4);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
}

/* Three streams on one max_heap table (max_times_sampled 1): every item
 * goes to exactly one of them, and each batch is taken whole under the
 * table's lock (its priorities never rise within it). */
static void test_streams_share_one_selector(void **state) {
  (void)state;
  enum { N = 3000, STREAMS = 3, B = 10 };
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "m", NULL), 0);
  for (uint64_t x = 1; x <= N; x++)
    assert_int_equal(
        chime_writer_append(w, &x, sizeof x, (double)((x * 7919) % 1000)), 0);
  assert_int_equal(chime_writer_close(w), 0);
  static uint8_t seen[N + 1];
  memset(seen, 0, sizeof seen);
  chime_stream_t *s[STREAMS];
  for (int i = 0; i < STREAMS; i++) {
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = B;
    so.slots = 4;
    so.mode = i == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
    assert_int_equal(chime_stream_open(&s[i], client, "m", &so), 0);
  }
  uint64_t got = 0;
  int idle = 0;
  while (got < N && idle < STREAMS) {
    idle = 0;
    for (int i = 0; i < STREAMS; i++) {
      chime_batch_t b;
      int rc = chime_stream_next(s[i], &b, got < N ? 200 : 0);
      if (rc == CHIME_ETIMEDOUT) {
        idle++;
        continue;
      }
      assert_int_equal(rc, 0);
      for (uint32_t j = 0; j < b.count; j++) {
        uint64_t k = b.info[j].key;
        if (k < 1 || k > N || seen[k]++)
          fail_msg("key %llu delivered twice or unknown",
                   (unsigned long long)k);
        if (j > 0 && b.info[j].priority > b.info[j - 1].priority)
          fail_msg("stream %d: priority rose within a batch (%g after %g)", i,
                   b.info[j].priority, b.info[j - 1].priority);
      }
      got += b.count;
      assert_int_equal(chime_stream_release(s[i], &b), 0);
    }
  }
  assert_int_equal(got, N);
  for (int i = 0; i < STREAMS; i++)
    chime_stream_close(s[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_max_heap_order_after_mutate),
      cmocka_unit_test(test_prioritized_zero_is_never_drawn),
      cmocka_unit_test(test_refused_with_nothing_changed),
      cmocka_unit_test(test_streams_share_one_selector),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
