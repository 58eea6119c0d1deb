/* max_connection_age against the real chimed: connections are aged out
 * (an idle channel is sent GOAWAY and goes IDLE, so its next call connects
 * and resolves anew), and a writer and a learner (stream and shm mode)
 * that run across many ages lose nothing. With the default grace (none:
 * calls run their course) the learner's stream is never cut and every
 * item arrives exactly once; with a short grace the stream is cut at each
 * age, the learner opens a new one, and every acked item still arrives
 * (at least once: items of batches the cut stream had not finished go
 * back to the table; a stream-mode stream resumes by itself instead, and
 * exactly once), while the writer's resends keep its items exactly once
 * in the table. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <grpc/support/time.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"

#define AGE_MS 400
#define MAX_ITEMS (1u << 20)

typedef struct {
  const char *addr;
  chime_mode_t mode;
  atomic_int stop;
  atomic_uint_fast64_t distinct;
  uint8_t *seen; /* by key, saturating */
  uint64_t delivered, dups, bad, ends, resumes, last_error;
  char why[256];
} learner_t;

/* The stream's resumes (a stream-mode stream cut with its connection
 * opens its call again by itself: docs/remote.md), then closes it. */
static void close_counting(learner_t *l, chime_stream_t *s) {
  chime_stream_local_stats_t st;
  if (s != NULL && chime_stream_stats(s, &st) == 0)
    l->resumes += st.resumes;
  chime_stream_close(s);
}

/* Reads batches, and when its stream ends (cut with its connection)
 * opens another, until told to stop. */
static void *reopening_learner_main(void *arg) {
  learner_t *l = arg;
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 16;
  so.mode = l->mode;
  if (chime_client_create(&c, l->addr, NULL) != 0)
    return NULL;
  while (!atomic_load(&l->stop)) {
    if (s == NULL) {
      int rc = chime_stream_open(&s, c, "q", &so);
      if (rc != 0) { /* the connection may be going: try again */
        s = NULL;
        snprintf(l->why, sizeof l->why, "open: %s", chime_last_error());
        chime__sleep_ms(10);
        continue;
      }
    }
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 100);
    if (rc == CHIME_ETIMEDOUT)
      continue;
    if (rc != 0) {
      l->ends++;
      l->last_error = (uint64_t)-rc;
      snprintf(l->why, sizeof l->why, "%s: %s", chime_err_name(rc),
               chime_last_error());
      close_counting(l, s);
      s = NULL;
      continue;
    }
    const uint64_t *x = b.leaf[0].data;
    for (uint32_t j = 0; j < b.count; j++) {
      uint64_t k = b.info[j].key;
      l->delivered++;
      if (k == 0 || k >= MAX_ITEMS || x[j] != k) {
        l->bad++;
        continue;
      }
      if (l->seen[k] == 0)
        atomic_fetch_add(&l->distinct, 1);
      else
        l->dups++;
      if (l->seen[k] < 255)
        l->seen[k]++;
    }
    if (chime_stream_release(s, &b) != 0)
      l->bad++;
  }
  close_counting(l, s);
  chime_client_destroy(c);
  return NULL;
}

/* Waits until a channel that made one call is no longer READY: the
 * server aged its connection out (GOAWAY) and it went IDLE. */
static void expect_aged(const char *addr) {
  grpc_channel *ch = chime__raw_channel(addr);
  Chime__V1__GetInfoRequest req = CHIME__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_unary(ch, "/chime.v1.Chime/GetInfo", &req.base,
                                    &chime__v1__get_info_response__descriptor,
                                    &resp, &st, details, sizeof details),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  protobuf_c_message_free_unpacked(resp, NULL);
  /* Watched (a queue waited on polls the connection, so the GOAWAY is
   * read when it comes rather than by gRPC's backup poller). */
  assert_int_equal(grpc_channel_check_connectivity_state(ch, 0),
                   GRPC_CHANNEL_READY);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  gpr_timespec dl =
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(10 * AGE_MS + 5000, GPR_TIMESPAN));
  grpc_channel_watch_connectivity_state(ch, GRPC_CHANNEL_READY, dl, cq, ch);
  grpc_event ev = grpc_completion_queue_pluck(
      cq, ch, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  if (ev.type != GRPC_OP_COMPLETE || !ev.success)
    fail_msg("the connection was not aged out within %d ms",
             10 * AGE_MS + 5000);
  assert_true(grpc_channel_check_connectivity_state(ch, 0) !=
              GRPC_CHANNEL_READY);
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL,
                                     gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
}

/* A writer and a learner across at least 5 ages. grace_ms 0: the
 * default (no limit). */
static void run(chime_mode_t mode, int grace_ms) {
  char config[512], grace[64] = "";
  if (grace_ms > 0)
    snprintf(grace, sizeof grace, "\"max_connection_age_grace_ms\": %d, ",
             grace_ms);
  snprintf(config, sizeof config,
           "{\"max_connection_age_ms\": %d, %s\n"
           " \"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
           "\"capacity\": 100000, \"sampler\": \"fifo\"}]}",
           AGE_MS, grace);
  chime__chimed_t d;
  int rc = chime__chimed_start(&d, config, NULL, 30000);
  if (rc == CHIME_ENOTFOUND)
    skip();
  assert_int_equal(rc, 0);
  grpc_init();
  expect_aged(d.addr);

  learner_t l;
  memset(&l, 0, sizeof l);
  l.addr = d.addr;
  l.mode = mode;
  l.seen = calloc(MAX_ITEMS, 1);
  assert_non_null(l.seen);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, reopening_learner_main, &l), 0);

  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = 32;
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  assert_int_equal(chime_writer_open(&w, c, "q", &wo), 0);
  uint64_t n = 0;
  int64_t t0 = chime__now_ms();
  /* Keys count from 1 in insert order: item k holds x = k. The writer
   * stops at a multiple of 64 items: the queue hands out whole batches
   * of 16 only, so a remainder would never be delivered. */
  while (n < 2000 || chime__now_ms() - t0 < 5 * AGE_MS || n % 64 != 0) {
    assert_true(n + 1 < MAX_ITEMS);
    uint64_t x = n + 1;
    rc = chime_writer_append(w, &x, sizeof x, 1.0);
    if (rc != 0)
      fail_msg("append %llu: %s", (unsigned long long)x, chime_last_error());
    n++;
    /* Requests of 64 at most a millisecond apart: a steady load across
     * the ages, not a race for throughput. */
    if (n % 64 == 0) {
      if ((rc = chime_writer_flush(w)) != 0)
        fail_msg("flush: %s", chime_last_error());
      chime__sleep_ms(1);
    }
  }
  rc = chime_writer_close(w);
  assert_int_equal(rc, 0);
  int64_t t1 = chime__now_ms();
  while (atomic_load(&l.distinct) < n && chime__now_ms() - t1 < 30000)
    chime__sleep_ms(10);
  atomic_store(&l.stop, 1);
  pthread_join(th, NULL);

  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(c, &st), 0);
  uint64_t inserts = st->tables[0].inserts;
  chime_stats_free(st);
  chime_client_destroy(c);
  printf("%s, grace %s: %llu items over %lld ms, %llu delivered (%llu "
         "again), %llu stream ends, %llu resumed%s%s\n",
         chime_mode_name(mode), grace_ms ? "short" : "none",
         (unsigned long long)n, (long long)(t1 - t0),
         (unsigned long long)l.delivered, (unsigned long long)l.dups,
         (unsigned long long)l.ends, (unsigned long long)l.resumes,
         l.ends ? ", last: " : "", l.ends ? l.why : "");
  /* The writer's items went in once each, and every one came out. */
  assert_int_equal(inserts, n);
  assert_int_equal(l.bad, 0);
  if (atomic_load(&l.distinct) != n)
    fail_msg("%llu of %llu items delivered (%s)",
             (unsigned long long)atomic_load(&l.distinct),
             (unsigned long long)n, l.why);
  if (grace_ms == 0) {
    /* Calls outlive their connection's age: nothing was cut. */
    assert_int_equal(l.ends, 0);
    assert_int_equal(l.dups, 0);
  } else {
    /* Cut at each age past the grace, and opened again: by the learner,
     * or (stream mode) by the stream itself, whose resuming Open takes
     * what it received out of what the cut stream gives back (chimed
     * parks it meanwhile): none comes twice (docs/remote.md). */
    assert_true(l.ends + l.resumes >= 1);
    if (mode == CHIME_MODE_STREAM)
      assert_int_equal(l.dups, 0);
  }
  free(l.seen);
  int status = 0;
  assert_int_equal(chime__chimed_stop(&d, 20000, &status), 0);
  grpc_shutdown_blocking();
}

static void test_stream_mode_no_grace(void **state) {
  (void)state;
  run(CHIME_MODE_STREAM, 0);
}

static void test_shm_mode_no_grace(void **state) {
  (void)state;
  run(CHIME_MODE_SHM, 0);
}

static void test_stream_mode_short_grace(void **state) {
  (void)state;
  run(CHIME_MODE_STREAM, 200);
}

static void test_shm_mode_short_grace(void **state) {
  (void)state;
  run(CHIME_MODE_SHM, 200);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_stream_mode_no_grace,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_shm_mode_no_grace,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_stream_mode_short_grace,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_shm_mode_short_grace,
                                chime__harness_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
