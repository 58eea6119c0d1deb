/* A stream-mode stream read over 4 connections (docs/protocol.md,
 * "Lanes"), with raw gRPC calls against the real chimed: one call Opens
 * with connections 4, three more (each on a channel, so a TCP connection,
 * of its own) Join it by its id and resume token. Every batch arrives
 * whole on one lane, every byte of every sample is the pattern's, every
 * seq once, the lanes all carry batches, and the fifo table's items come
 * exactly once. A Join with a wrong token, a lane out of range or taken is
 * refused with its status and chimed goes on; a lane cancelled mid-stream
 * ends the stream's first call as a lost connection (UNAVAILABLE), and a
 * resuming Open that names what was received gets the rest: nothing lost,
 * nothing twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "pattern.h"
#include "rawcall.h"
#include "writes.h"

#define M_SUBSCRIBE "/chime.v1.Chime/Subscribe"
#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define ITEMS 2048u
#define BATCH 16u
#define SLOTS 8u
#define LANES 4u
#define NBATCH (ITEMS / BATCH)

static chime__chimed_t chimed;
static grpc_channel *ch;
static chime_client_t *client;
static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  const char *config = "{\"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC
                       "\", \"capacity\": 8192, \"min_size\": 1, "
                       "\"sampler\": \"fifo\"}]}\n";
  if (chime__raw_client_fixture_start(&chimed, &ch, &client, config) != 0)
    return -1;
  return chime_spec_parse(&spec, SPEC);
}

static int teardown(void **state) {
  (void)state;
  return chime__raw_client_fixture_stop(&chimed, ch, client);
}

/* One reader of the stream: the calls, and what it has received. */
typedef struct {
  chime__raw_t call[LANES];
  grpc_channel *chan[LANES]; /* lanes 1.. own their channels */
  int live[LANES];
  uint64_t stream_id;
  uint8_t token[16];
  uint64_t send_bytes, leaf_offset[CHIME_MAX_LEAVES];
  uint8_t *batch[LANES]; /* the batch each lane is receiving */
  uint64_t got[LANES];   /* its bytes so far */
  uint64_t seq[LANES];
  uint32_t per_lane[LANES];
  uint32_t batches;        /* whole ones, this stream */
  uint64_t pending[SLOTS]; /* received, not yet credited */
  uint32_t npending;
  uint32_t seen[ITEMS]; /* times each item came */
} reader_t;

static void send_req(chime__raw_t *r, Chime__V1__SubscribeRequest *req) {
  assert_int_equal(chime__raw_send(r, &req->base), 0);
}

/* Opens on ch with connections LANES (naming old's stream to resume it
 * when old is not NULL); keeps the id, token and layout. */
static void raw_open_lanes(reader_t *rd, const reader_t *old) {
  assert_int_equal(chime__raw_start(&rd->call[0], ch, M_SUBSCRIBE, 60000), 0);
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)"demo";
  open.batch_size = BATCH;
  open.slots = SLOTS;
  open.mode = CHIME__V1__MODE__MODE_STREAM;
  open.prefetch = 1; /* the rest once the lanes joined */
  open.connections = LANES;
  open.resumable = 1;
  if (old != NULL) {
    open.resume_stream = old->stream_id;
    open.resume_token.data = (uint8_t *)old->token;
    open.resume_token.len = sizeof(old->token);
    open.resume_received = (uint64_t *)old->pending;
    open.n_resume_received = old->npending;
  }
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  send_req(&rd->call[0], &req);
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(
          &rd->call[0], &chime__v1__subscribe_response__descriptor, &m, 10000),
      0);
  assert_non_null(m);
  Chime__V1__SubscribeResponse *resp = (Chime__V1__SubscribeResponse *)m;
  assert_int_equal(resp->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  Chime__V1__Opened *op = resp->opened;
  rd->stream_id = op->stream_id;
  assert_int_equal(op->resume_token.len, sizeof(rd->token));
  memcpy(rd->token, op->resume_token.data, sizeof(rd->token));
  rd->send_bytes = op->layout->send_bytes;
  for (size_t l = 0; l < op->layout->n_leaf_offset; l++)
    rd->leaf_offset[l] = op->layout->leaf_offset[l];
  if (old != NULL)
    assert_true(op->resumed);
  protobuf_c_message_free_unpacked(m, NULL);
  rd->live[0] = 1;
  for (uint32_t i = 0; i < LANES; i++)
    rd->batch[i] = malloc(rd->send_bytes);
}

/* A Join on a call of its own channel: the call (the caller finishes it). */
static void join(chime__raw_t *r, grpc_channel **chan, uint64_t id,
                 const uint8_t *token, uint32_t lane) {
  *chan = chime__raw_channel(chimed.addr);
  assert_non_null(*chan);
  assert_int_equal(chime__raw_start(r, *chan, M_SUBSCRIBE, 60000), 0);
  Chime__V1__Join j = CHIME__V1__JOIN__INIT;
  j.stream_id = id;
  j.resume_token.data = (uint8_t *)token;
  j.resume_token.len = 16;
  j.lane = lane;
  j.table = (char *)"demo";
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_JOIN;
  req.join = &j;
  send_req(r, &req);
}

static void join_lanes(reader_t *rd) {
  for (uint32_t i = 1; i < LANES; i++) {
    join(&rd->call[i], &rd->chan[i], rd->stream_id, rd->token, i);
    rd->live[i] = 1;
  }
}

static void credit(reader_t *rd, uint32_t n) {
  Chime__V1__Credit c = CHIME__V1__CREDIT__INIT;
  c.batches = n;
  c.released = rd->pending;
  c.n_released = rd->npending;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT;
  req.credit = &c;
  send_req(&rd->call[0], &req);
  rd->npending = 0;
}

/* Every byte of every sample of a whole batch is the pattern's; counts
 * its items. */
static void check_raw_batch(reader_t *rd, const uint8_t *slot) {
  uint64_t sb = chime_spec_sample_bytes(&spec);
  uint8_t *want = malloc(sb);
  for (uint32_t j = 0; j < BATCH; j++) {
    uint64_t l0 = chime_leaf_bytes(&spec.leaves[0]);
    uint64_t id;
    memcpy(&id, slot + rd->leaf_offset[0] + j * l0, sizeof(id));
    uint64_t index = id & CHIME__PATTERN_MAX_INDEX;
    assert_true(index < ITEMS);
    rd->seen[index]++;
    chime__pattern_fill(&spec, id, want);
    uint64_t at = 0;
    for (uint32_t l = 0; l < spec.nleaves; l++) {
      uint64_t lb = chime_leaf_bytes(&spec.leaves[l]);
      assert_memory_equal(slot + rd->leaf_offset[l] + j * lb, want + at, lb);
      at += lb;
    }
  }
  free(want);
}

/* One message of lane i: a chunk (its batch whole: checked); 0, or -1
 * when the call ended. */
static int take(reader_t *rd, uint32_t i, int timeout_ms) {
  ProtobufCMessage *m = NULL;
  int rc = chime__raw_recv_msg(
      &rd->call[i], &chime__v1__subscribe_response__descriptor, &m, timeout_ms);
  if (rc == CHIME_ETIMEDOUT)
    return 0;
  if (rc != 0 || m == NULL)
    return -1;
  Chime__V1__SubscribeResponse *resp = (Chime__V1__SubscribeResponse *)m;
  assert_int_equal(resp->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_CHUNK);
  Chime__V1__Chunk *c = resp->chunk;
  assert_int_equal(c->total, rd->send_bytes);
  if (c->offset == 0)
    rd->seq[i] = c->seq;
  /* A batch's chunks all on one lane, in order. */
  assert_int_equal(c->seq, rd->seq[i]);
  assert_int_equal(c->offset, rd->got[i]);
  assert_true(c->offset + c->data.len <= c->total);
  memcpy(rd->batch[i] + c->offset, c->data.data, c->data.len);
  rd->got[i] += c->data.len;
  if (rd->got[i] == c->total) {
    check_raw_batch(rd, rd->batch[i]);
    rd->got[i] = 0;
    rd->per_lane[i]++;
    rd->batches++;
    rd->pending[rd->npending++] = c->seq;
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}

/* Reads until `until` whole batches came in all, crediting each batch
 * back (a fifo learner's release) once half the ring's worth came. */
static void read_batches(reader_t *rd, uint32_t until) {
  credit(rd, SLOTS - 2); /* with the Open's 1: SLOTS - 1 lent */
  int64_t deadline = chime__now_ms() + 60000;
  while (rd->batches < until) {
    assert_true(chime__now_ms() < deadline);
    for (uint32_t i = 0; i < LANES; i++)
      if (rd->live[i] && take(rd, i, 5) != 0)
        fail_msg("lane %u ended mid-stream", i);
    if (rd->npending >= SLOTS / 2)
      credit(rd, rd->npending);
  }
}

static void close_reader(reader_t *rd) {
  for (uint32_t i = 0; i < LANES; i++) {
    chime__raw_destroy(&rd->call[i]);
    if (rd->chan[i] != NULL)
      grpc_channel_destroy(rd->chan[i]);
    free(rd->batch[i]);
  }
}

static grpc_status_code join_refused(uint64_t id, const uint8_t *token,
                                     uint32_t lane) {
  chime__raw_t r;
  grpc_channel *chan = NULL;
  join(&r, &chan, id, token, lane);
  grpc_status_code st = GRPC_STATUS_OK;
  char details[512];
  assert_int_equal(chime__raw_status(&r, &st, details, sizeof(details), 10000),
                   0);
  print_message("join lane %u: %d %s\n", lane, (int)st, details);
  assert_true(strstr(details, "Join") != NULL);
  chime__raw_destroy(&r);
  grpc_channel_destroy(chan);
  return st;
}

static void test_lanes(void **state) {
  (void)state;
  assert_int_equal(chime__write_pattern(client, "demo", &spec, 1, ITEMS, NULL),
                   0);
  reader_t *rd = calloc(1, sizeof(*rd));
  raw_open_lanes(rd, NULL);
  join_lanes(rd);

  /* Strangers and mistakes are refused; the stream goes on. */
  uint8_t bad[16];
  memcpy(bad, rd->token, sizeof(bad));
  bad[5] ^= 1;
  assert_int_equal(join_refused(rd->stream_id, bad, 2), GRPC_STATUS_NOT_FOUND);
  assert_int_equal(join_refused(rd->stream_id + 1, rd->token, 2),
                   GRPC_STATUS_NOT_FOUND);
  assert_int_equal(join_refused(rd->stream_id, rd->token, LANES),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(join_refused(rd->stream_id, rd->token, 0),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(join_refused(rd->stream_id, rd->token, 1),
                   GRPC_STATUS_ALREADY_EXISTS);

  /* Half the table over the 4 lanes. */
  read_batches(rd, NBATCH / 2);
  uint32_t used = 0;
  for (uint32_t i = 0; i < LANES; i++) {
    print_message("lane %u: %u batches\n", i, rd->per_lane[i]);
    used += rd->per_lane[i] > 0;
  }
  assert_true(used >= 2);

  /* Lane 2's connection goes: the stream's first call ends as a lost
   * connection would. */
  chime__raw_destroy(&rd->call[2]);
  rd->live[2] = 0;
  grpc_status_code st = GRPC_STATUS_OK;
  char details[512];
  int64_t deadline = chime__now_ms() + 30000;
  for (;;) { /* what was in flight may still come first */
    assert_true(chime__now_ms() < deadline);
    if (take(rd, 0, 100) != 0)
      break;
  }
  assert_int_equal(
      chime__raw_status(&rd->call[0], &st, details, sizeof(details), 10000), 0);
  assert_int_equal(st, GRPC_STATUS_UNAVAILABLE);
  /* What the other lanes still had in flight is received. */
  for (uint32_t i = 1; i < LANES; i++)
    while (rd->live[i] && take(rd, i, 200) == 0 && rd->got[i] != 0)
      ;

  /* A resuming Open names the batches received and not credited: the
   * rest of the table comes once, over 4 new lanes. */
  reader_t *next = calloc(1, sizeof(*next));
  raw_open_lanes(next, rd);
  memcpy(next->seen, rd->seen, sizeof(rd->seen));
  join_lanes(next);
  uint32_t left = 0;
  for (uint32_t k = 0; k < ITEMS; k++)
    left += rd->seen[k] == 0;
  read_batches(next, left / BATCH);
  for (uint32_t k = 0; k < ITEMS; k++)
    if (next->seen[k] != 1)
      fail_msg("item %u came %u times", k, next->seen[k]);
  close_reader(next);
  close_reader(rd);
  free(next);
  free(rd);
}

/* The library's stream with connections 4 (internal: the hook that
 * cancels a lane, lanes.c). */
int chime__stream_lane_cancel(chime_stream_t *s, uint32_t lane);
uint64_t chime__stream_lane_chunks(chime_stream_t *s, uint32_t lane);

/* Reads n items of seed from a 4-connection stream: every byte checked,
 * each item once; in order (a fifo table hands its items out in order,
 * and the stream its batches) until lane 2 is cancelled at cancel_at
 * items (0: never); after that the stream resumes and the items of the
 * batches lost with it come again later, still each once. */
static void read_stream(uint64_t seed, uint64_t cancel_at) {
  assert_int_equal(
      chime__write_pattern(client, "demo", &spec, seed, ITEMS, NULL), 0);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_STREAM;
  so.connections = LANES;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
  uint8_t *seen = calloc(ITEMS, 1);
  uint64_t got = 0, last = 0, ids[BATCH];
  int in_order = 1, cancelled = 0;
  int64_t deadline = chime__now_ms() + 120000;
  while (got < ITEMS) {
    assert_true(chime__now_ms() < deadline);
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 100);
    if (rc == CHIME_ETIMEDOUT)
      continue;
    if (rc != 0)
      fail_msg("next: %s: %s", chime_err_name(rc), chime_last_error());
    char err[256];
    if (chime__pattern_verify(&b, ids, err, sizeof(err)) != 0)
      fail_msg("%s", err);
    for (uint32_t j = 0; j < b.count; j++) {
      assert_int_equal(ids[j] >> 40, seed);
      uint64_t k = ids[j] & CHIME__PATTERN_MAX_INDEX;
      assert_true(k < ITEMS);
      if (seen[k]++ != 0)
        fail_msg("item %" PRIu64 " came twice", k);
      if (!cancelled && got > 0 && k != last + 1)
        in_order = 0;
      last = k;
      got++;
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
    if (cancel_at != 0 && !cancelled && got >= cancel_at) {
      assert_int_equal(chime__stream_lane_cancel(s, 2), 0);
      cancelled = 1;
    }
  }
  assert_true(in_order);
  /* The other connections carried batches too. */
  uint64_t lanes_chunks = 0;
  for (uint32_t i = 1; i < LANES; i++)
    lanes_chunks += chime__stream_lane_chunks(s, i);
  print_message("chunks on lanes 1-3: %" PRIu64 "\n", lanes_chunks);
  assert_true(lanes_chunks > 0);
  chime_stream_local_stats_t st;
  assert_int_equal(chime_stream_stats(s, &st), 0);
  print_message("resumes %" PRIu64 "\n", st.resumes);
  if (cancel_at != 0)
    assert_true(st.resumes >= 1);
  chime_stream_close(s);
  free(seen);
}

static void test_stream(void **state) {
  (void)state;
  read_stream(2, 0);
}

static void test_stream_lane_lost(void **state) {
  (void)state;
  read_stream(3, ITEMS / 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lanes),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_stream_lane_lost),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
