/* A stream-mode call that stalls, against the real chimed (docs/remote.md,
 * "A link that drops"; docs/protocol.md, "Heartbeats"):
 * - an idle stream (its table below the rate limiter's min_size, so the
 *   server has credits and nothing to send) hears chimed's heartbeats and
 *   keeps its call: next() times out, the stream never resumes, and the
 *   batches come on the same call once the table fills;
 * - a stream whose server stops answering while batches are owed (chimed
 *   stopped with SIGSTOP: its connection stays open, nothing crosses it)
 *   takes its call for stalled and resumes on a fresh connection once
 *   chimed runs again. chimed still has the old call open then: the
 *   resuming Open takes the old stream over (Opened.resumed, so no
 *   resumes_late) and every item reaches the learner exactly once;
 * - the takeover itself, by raw calls: a second call presents the first
 *   one's token while the first is open and idle; the first ends, the
 *   batches the second names count as released, the one it does not name
 *   comes again, and every item is delivered exactly once over both. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"
#include "streams.h"
#include "writes.h"

#define BATCH 16

static void start(chime__chimed_t *d, chime_client_t **c, int min_size) {
  char config[512];
  snprintf(config, sizeof config,
           "{\"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
           "\"capacity\": 100000, \"sampler\": \"fifo\", \"min_size\": %d}]}",
           min_size);
  assert_int_equal(chime__chimed_start_client(d, config, c), 0);
}

/* Takes a batch (within timeout_ms), marks its items in seen, releases
 * it: 0, or next()'s code. */
static int take(chime_stream_t *s, uint8_t *seen, uint64_t n, int timeout_ms,
                uint64_t *dups) {
  chime_batch_t b;
  int rc = chime_stream_next(s, &b, timeout_ms);
  if (rc != 0)
    return rc;
  const uint64_t *x = b.leaf[0].data;
  for (uint32_t j = 0; j < b.count; j++) {
    assert_true(x[j] < n);
    *dups += seen[x[j]]++ != 0;
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
  return 0;
}

static void test_idle_stream_keeps_its_call(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  enum { N = 64 * BATCH };
  /* Sampling waits for 2 batches of items (the rate limiter's min_size):
   * with one batch in, the server has credits and nothing to send. */
  start(&d, &c, 2 * BATCH);
  chime_stream_t *s =
      chime__open_stream(c, "q", CHIME_MODE_STREAM, BATCH, 8, NULL);
  assert_int_equal(chime__write_counter(c, "q", 0, BATCH, NULL), 0);
  /* Idle for 4 s, well past the stall rule's 1.5 s: heartbeats keep it. */
  for (int i = 0; i < 8; i++) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 500), CHIME_ETIMEDOUT);
  }
  chime_stream_local_stats_t st;
  assert_int_equal(chime_stream_stats(s, &st), 0);
  assert_int_equal(st.resumes, 0);
  assert_int_equal(chime__write_counter(c, "q", BATCH, N - BATCH, NULL), 0);
  static uint8_t seen[N];
  memset(seen, 0, sizeof seen);
  uint64_t dups = 0;
  /* All but the last batch's worth, which stays below min_size. */
  for (int got = 0; got < N / BATCH - 1; got++)
    if (take(s, seen, N, 10000, &dups) != 0)
      fail_msg("batch %d: %s", got, chime_last_error());
  assert_int_equal(dups, 0);
  assert_int_equal(chime_stream_stats(s, &st), 0);
  assert_int_equal(st.resumes, 0); /* the same call all along */
  assert_int_equal(st.stalls, 0);
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

static void test_stalled_server_is_left_and_taken_over(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  enum { N = 256 * BATCH };
  start(&d, &c, 1);
  assert_int_equal(chime__write_counter(c, "q", 0, N, NULL), 0);
  chime_stream_t *s =
      chime__open_stream(c, "q", CHIME_MODE_STREAM, BATCH, 4, NULL);
  static uint8_t seen[N];
  memset(seen, 0, sizeof seen);
  uint64_t dups = 0;
  int got = 0;
  for (; got < 8; got++)
    if (take(s, seen, N, 10000, &dups) != 0)
      fail_msg("batch %d: %s", got, chime_last_error());
  /* The server stops answering with batches owed: the learner drains
   * what it has, then hears nothing. Kept stopped until the stream has
   * given up on the call (stats.stalls): it then tries fresh connections,
   * which connect only once chimed runs again. */
  assert_int_equal(kill(d.proc.pid, SIGSTOP), 0);
  chime_stream_local_stats_t st;
  do {
    int rc = take(s, seen, N, 100, &dups);
    if (rc == 0)
      got++;
    else if (rc != CHIME_ETIMEDOUT)
      fail_msg("while chimed is stopped: %s", chime_last_error());
    assert_int_equal(chime_stream_stats(s, &st), 0);
  } while (st.stalls == 0);
  assert_int_equal(kill(d.proc.pid, SIGCONT), 0);
  while (got < N / BATCH) {
    int rc = take(s, seen, N, 10000, &dups);
    if (rc != 0)
      fail_msg("batch %d of %d: %s", got, N / BATCH, chime_last_error());
    got++;
  }
  for (uint64_t k = 0; k < N; k++)
    if (seen[k] != 1)
      fail_msg("item %llu seen %u times", (unsigned long long)k, seen[k]);
  assert_int_equal(dups, 0);
  assert_int_equal(chime_stream_stats(s, &st), 0);
  printf("stalls %llu, resumes %llu, late %llu\n",
         (unsigned long long)st.stalls, (unsigned long long)st.resumes,
         (unsigned long long)st.resumes_late);
  assert_true(st.resumes >= 1);
  /* The old call was still open: taken over, not found parked or gone. */
  assert_int_equal(st.resumes_late, 0);
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

/* An Open of table q in stream mode, 3 credits. */
static void raw_open(chime__raw_t *r, grpc_channel *ch, Chime__V1__Open *open) {
  open->table = "q";
  open->batch_size = BATCH;
  open->slots = 4;
  open->prefetch = 3;
  open->mode = CHIME__V1__MODE__MODE_STREAM;
  open->resumable = 1;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = open;
  assert_int_equal(chime__raw_start(r, ch, "/chime.v1.Chime/Subscribe", 60000),
                   0);
  assert_int_equal(chime__raw_send(r, &req.base), 0);
}

static Chime__V1__SubscribeResponse *raw_next(chime__raw_t *r) {
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(r, &chime__v1__subscribe_response__descriptor, &m,
                          20000),
      0);
  assert_non_null(m);
  return (Chime__V1__SubscribeResponse *)m;
}

/* The next batch on r (one chunk: 16 u64 fit), its items marked in seen
 * when count is set; its seq. */
static uint64_t raw_batch(chime__raw_t *r, uint8_t *seen, uint64_t n,
                          int count) {
  Chime__V1__SubscribeResponse *m;
  while ((m = raw_next(r))->kind_case !=
         CHIME__V1__SUBSCRIBE_RESPONSE__KIND_CHUNK)
    protobuf_c_message_free_unpacked(&m->base, NULL); /* heartbeats */
  const Chime__V1__Chunk *ck = m->chunk;
  assert_int_equal(ck->offset, 0);
  assert_int_equal(ck->data.len, ck->total);
  assert_true(ck->data.len >= BATCH * sizeof(uint64_t));
  uint64_t x[BATCH];
  memcpy(x, ck->data.data, sizeof x);
  for (int j = 0; j < BATCH && count; j++) {
    assert_true(x[j] < n);
    seen[x[j]]++;
  }
  uint64_t seq = ck->seq;
  protobuf_c_message_free_unpacked(&m->base, NULL);
  return seq;
}

static void test_resume_takes_an_open_call_over(void **state) {
  (void)state;
  chime__chimed_t d;
  grpc_channel *ch = NULL;
  chime_client_t *c = NULL;
  enum { N = 40 * BATCH };
  assert_int_equal(
      chime__raw_client_fixture_start(
          &d, &ch, &c,
          "{\"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 100000, \"sampler\": \"fifo\", \"min_size\": 1}]}"),
      0);
  assert_int_equal(chime__write_counter(c, "q", 0, N, NULL), 0);
  static uint8_t seen[N];
  memset(seen, 0, sizeof seen);

  chime__raw_t a;
  Chime__V1__Open oa = CHIME__V1__OPEN__INIT;
  raw_open(&a, ch, &oa);
  Chime__V1__SubscribeResponse *m = raw_next(&a);
  assert_int_equal(m->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  uint64_t id = m->opened->stream_id;
  uint8_t token[16];
  assert_int_equal(m->opened->resume_token.len, sizeof token);
  memcpy(token, m->opened->resume_token.data, sizeof token);
  assert_false(m->opened->resumed);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* Three batches on the first call; the learner "received" the first
   * two only (the third was lost with the connection). */
  uint64_t seqs[2];
  seqs[0] = raw_batch(&a, seen, N, 1);
  seqs[1] = raw_batch(&a, seen, N, 1);
  (void)raw_batch(&a, seen, N, 0);

  /* The resuming Open on another connection, the first call still open
   * (no credit owed to it, nothing it could notice). */
  grpc_channel *ch2 = chime__raw_channel(d.addr);
  chime__raw_t b;
  Chime__V1__Open ob = CHIME__V1__OPEN__INIT;
  ob.resume_stream = id;
  ob.resume_token.data = token;
  ob.resume_token.len = sizeof token;
  ob.resume_received = seqs;
  ob.n_resume_received = 2;
  raw_open(&b, ch2, &ob);
  m = raw_next(&b);
  assert_int_equal(m->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  assert_true(m->opened->resumed);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* The old call ends (the server ended it), by itself. */
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_status(&a, &st, details, sizeof details, 20000),
                   0);
  assert_int_not_equal(st, GRPC_STATUS_OK);
  chime__raw_destroy(&a);

  /* Everything else comes on the new call, the third batch's items
   * again among it: each item once over both calls. */
  for (int got = 2; got < N / BATCH; got++) {
    uint64_t seq = raw_batch(&b, seen, N, 1);
    Chime__V1__Credit cr = CHIME__V1__CREDIT__INIT;
    cr.batches = 1;
    cr.released = &seq;
    cr.n_released = 1;
    Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
    req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT;
    req.credit = &cr;
    assert_int_equal(chime__raw_send(&b, &req.base), 0);
  }
  for (uint64_t k = 0; k < N; k++)
    if (seen[k] != 1)
      fail_msg("item %llu seen %u times", (unsigned long long)k, seen[k]);
  chime__raw_destroy(&b);
  grpc_channel_destroy(ch2);
  assert_int_equal(chime__raw_client_fixture_stop(&d, ch, c), 0);
}

static int teardown(void **state) {
  (void)state;
  chime__harness_kill_all();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_idle_stream_keeps_its_call, teardown),
      cmocka_unit_test_teardown(test_stalled_server_is_left_and_taken_over,
                                teardown),
      cmocka_unit_test_teardown(test_resume_takes_an_open_call_over, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
