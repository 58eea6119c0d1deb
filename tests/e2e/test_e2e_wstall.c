/* A writer's Insert call that stalls, against the real chimed
 * (docs/remote.md, "A link that drops"; docs/protocol.md, "Heartbeats"):
 * - on the wire: an Insert call that asks for heartbeats hears the
 *   interval in its acks and heartbeats once idle; one that does not ask
 *   hears neither;
 * - a writer whose server stops answering while its requests wait for
 *   acks (chimed stopped with SIGSTOP: its connection stays open, nothing
 *   crosses it) leaves the call (chime_writer_stalls) and resumes on a
 *   fresh connection once chimed runs again, resending what was not
 *   acked: every item is in the table exactly once;
 * - a writer whose inserts the table's rate limiter holds for seconds
 *   hears chimed's heartbeats and keeps its call: its flush times out,
 *   it never leaves the call, and its items go in on that same call once
 *   a learner samples. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "chime.pb-c.h"
#include "chime/export.h"
#include "harness.h"
#include "rawcall.h"
#include "streams.h"
#include "writes.h"

enum { N = 4096, HALF = N / 2 };

/* Whatever a failed test left running. */
static int teardown(void **state);

/* The next message of a raw Insert call is an InsertAck with these
 * fields: a heartbeat (id, count 0) or the ack of request id (count 1). */
static void expect_ack(chime__raw_t *r, int heartbeat, uint64_t id,
                       uint32_t beat_ms) {
  ProtobufCMessage *m = NULL;
  int rc =
      chime__raw_recv_msg(r, &chime__v1__insert_ack__descriptor, &m, 20000);
  if (rc != 0 || m == NULL)
    fail_msg("no InsertAck within 20 s (%d)", rc);
  const Chime__V1__InsertAck *a = (const Chime__V1__InsertAck *)m;
  int same = a->heartbeat == heartbeat && a->id == id &&
             a->count == (heartbeat ? 0u : 1u) && a->heartbeat_ms == beat_ms;
  if (!same)
    fail_msg("InsertAck heartbeat %d id %llu count %u heartbeat_ms %u; "
             "expected heartbeat %d id %llu heartbeat_ms %u",
             a->heartbeat, (unsigned long long)a->id, a->count, a->heartbeat_ms,
             heartbeat, (unsigned long long)id, beat_ms);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* One request of one item on a raw Insert call, asking for heartbeats at
 * beat_ms (0: none), then its ack, which says the server's interval
 * (want_ms: 0 for a call that did not ask). */
static void raw_insert(chime__raw_t *r, uint64_t id, uint32_t beat_ms,
                       uint32_t want_ms) {
  uint64_t x = id;
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = "q";
  req.count = 1;
  req.data.data = (uint8_t *)&x;
  req.data.len = sizeof x;
  req.id = id;
  req.heartbeat_ms = beat_ms;
  assert_int_equal(chime__raw_send(r, &req.base), 0);
  expect_ack(r, 0, id, want_ms);
}

/* The wire: a call that asks hears heartbeat_ms in its acks and, once
 * idle, heartbeats (an InsertAck with heartbeat set, nothing acked); a
 * call that does not ask (a writer before 1.0) hears neither. */
static void test_insert_call_heartbeats(void **state) {
  (void)state;
  chime__chimed_t d;
  grpc_channel *ch = NULL;
  chime_client_t *c = NULL;
  assert_int_equal(chime__raw_client_fixture_start(
                       &d, &ch, &c,
                       "{\"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
                       "\"capacity\": 1000, \"sampler\": \"uniform\"}]}"),
                   0);
  chime__raw_t old;
  assert_int_equal(chime__raw_start(&old, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  raw_insert(&old, 1, 0, 0);
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  raw_insert(&r, 1, 250, 250);
  for (int k = 0; k < 3; k++)
    expect_ack(&r, 1, 0, 250);
  /* Acks go on among them. */
  raw_insert(&r, 2, 250, 250);
  /* The call that did not ask got nothing since its ack: its next
   * message is the ack of its next request. */
  raw_insert(&old, 2, 0, 0);
  chime__raw_destroy(&r);
  chime__raw_destroy(&old);
  assert_int_equal(chime__raw_client_fixture_stop(&d, ch, c), 0);
}

static int teardown(void **state) {
  (void)state;
  chime__harness_kill_all();
  return 0;
}

/* Each item's count in the table, by its value. */
typedef struct {
  uint8_t seen[N];
  uint64_t items, bad;
} count_t;

static int count_items(void *ctx, const chime_export_chunk_t *c) {
  count_t *k = ctx;
  const uint8_t *p = c->data;
  for (uint64_t i = 0; i < c->count; i++) {
    uint64_t x;
    memcpy(&x, p + i * 8, 8);
    if (x >= N)
      k->bad++;
    else
      k->seen[x]++;
    k->items++;
  }
  return 0;
}

typedef struct {
  chime_writer_t *w;
  uint64_t first, n;
  int rc;
  atomic_int done;
} job_t;

/* Appends first .. first + n - 1 and flushes: the writer's caller. */
static void *append_run(void *arg) {
  job_t *j = arg;
  j->rc = 0;
  for (uint64_t x = j->first; x < j->first + j->n && j->rc == 0; x++)
    j->rc = chime_writer_append(j->w, &x, 8, 1.0);
  if (j->rc == 0)
    j->rc = chime_writer_flush(j->w);
  atomic_store(&j->done, 1);
  return NULL;
}

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_stalled_server_is_left_by_writer(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(chime__chimed_start_client(
                       &d,
                       "{\"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
                       "\"capacity\": 100000, \"sampler\": \"uniform\"}]}",
                       &c),
                   0);
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 16; /* many requests, several in flight */
  o.timeout_ms = 60000;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "q", &o), 0);
  /* The first half acked: the writer has heard that chimed heartbeats. */
  static job_t j;
  j = (job_t){w, 0, HALF, -1, 0};
  append_run(&j);
  assert_int_equal(j.rc, 0);
  assert_int_equal(chime_writer_stalls(w), 0);
  /* chimed stops answering; the second half goes from another thread,
   * chimed kept stopped until the writer has left its call. */
  assert_int_equal(kill(d.proc.pid, SIGSTOP), 0);
  j = (job_t){w, HALF, N - HALF, -1, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, append_run, &j), 0);
  while (chime_writer_stalls(w) == 0)
    pause_ms(20); /* a poll of the counter, not a wait for a race */
  assert_int_equal(kill(d.proc.pid, SIGCONT), 0);
  pthread_join(th, NULL);
  if (j.rc != 0)
    fail_msg("second half: %s", chime_last_error());
  printf("stalls %llu\n", (unsigned long long)chime_writer_stalls(w));
  assert_int_equal(chime_writer_acked(w), N);
  assert_int_equal(chime_writer_close(w), 0);
  static count_t k;
  memset(&k, 0, sizeof k);
  assert_int_equal(chime_client_export(c, "q", count_items, &k), 0);
  assert_int_equal(k.bad, 0);
  for (uint64_t x = 0; x < N; x++)
    if (k.seen[x] != 1)
      fail_msg("item %llu in the table %u times", (unsigned long long)x,
               k.seen[x]);
  assert_int_equal(k.items, N);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

/* samples_per_insert 1, error_buffer 2, min_size 2, nobody sampling: the
 * limiter holds the writer's inserts after a few. */
static void test_blocked_writer_keeps_its_call(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(
      chime__chimed_start_client(
          &d,
          "{\"tables\": [{\"name\": \"lim\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 100000, \"sampler\": \"uniform\", \"min_size\": 2, "
          "\"samples_per_insert\": 1.0, \"error_buffer\": 2}]}",
          &c),
      0);
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 1;
  o.timeout_ms = 4000; /* well past the stall rule's 1.5 s */
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "lim", &o), 0);
  enum { M = 8 };
  for (uint64_t x = 0; x < M; x++)
    assert_int_equal(chime_writer_append(w, &x, 8, 1.0), 0);
  /* Held by the limiter for the whole wait: heartbeats keep the call. */
  assert_int_equal(chime_writer_flush(w), CHIME_ETIMEDOUT);
  assert_true(chime_writer_acked(w) < M);
  assert_int_equal(chime_writer_stalls(w), 0);
  /* A learner samples: the limiter lets the rest in, on the same call. */
  chime_stream_t *s =
      chime__open_stream(c, "lim", CHIME_MODE_STREAM, 1, 2, NULL);
  static job_t j;
  j = (job_t){w, 0, 0, -1, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, append_run, &j), 0);
  while (!atomic_load(&j.done)) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 200);
    if (rc == 0)
      assert_int_equal(chime_stream_release(s, &b), 0);
    else if (rc != CHIME_ETIMEDOUT)
      fail_msg("learner: %s", chime_last_error());
  }
  pthread_join(th, NULL);
  assert_int_equal(chime_writer_stalls(w), 0);
  assert_int_equal(j.rc, 0);
  assert_int_equal(chime_writer_acked(w), M);
  assert_int_equal(chime_writer_close(w), 0);
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_insert_call_heartbeats, teardown),
      cmocka_unit_test_teardown(test_stalled_server_is_left_by_writer,
                                teardown),
      cmocka_unit_test_teardown(test_blocked_writer_keeps_its_call, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
