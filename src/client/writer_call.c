/* A writer's Insert call (writer_call.h): requests in flight, their acks,
 * and the new call that resumes them after a lost connection. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/writer_call.h"
#include "wire/credit.h"

/* After a stall: a fresh connection every CONNECT_STEP_MS, for at most
 * CONNECT_MS a try (resume.c's steps, a stream's). */
#define CONNECT_STEP_MS 250
#define CONNECT_MS 2000

/* The call ended: the status says why. A lost connection (not a graceful
 * CHIME_ESHUTDOWN) leaves the writer to resume on a new call. Any other end
 * is final; CHIME_EFORGOTTEN (the server no longer remembers this writer,
 * so a resend could not be told from a new request) included: the caller
 * goes on with a new writer, or a sharded writer moves to another shard
 * (forgotten). */
static void on_status(chime_writer_t *w) {
  char text[CHIME__ERRLEN];
  int code = chime__rpc_result(&w->rpc, text, sizeof(text));
  if (w->dropping)
    return;
  if (code == 0 && w->inflight)
    code = CHIME_EPROTO;
  if (code == 0)
    code = CHIME_ECLOSED;
  if (!w->failed && w->resend &&
      (code == CHIME_EUNAVAILABLE || code == CHIME_EDISCONNECTED)) {
    w->broken = 1;
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': connection lost: %.400s", w->table,
             text[0] ? text : chime_strerror(code));
    return;
  }
  if (!w->failed) {
    /* The server's details already name the table ("insert into 't': ..."). */
    char prefix[CHIME_MAX_NAME + 32];
    snprintf(prefix, sizeof(prefix), "insert into '%s': ", w->table);
    int named = strncmp(text, prefix, strlen(prefix)) == 0;
    int n = snprintf(w->err, sizeof(w->err), "%s%.700s", named ? "" : prefix,
                     text[0] ? text : chime_strerror(code));
    /* What this side knows: acks come in order, so the acked samples are
     * the first ones, and each unacked request went in whole or not. */
    if (code == CHIME_EFORGOTTEN && n > 0 && (size_t)n < sizeof(w->err))
      snprintf(w->err + n, sizeof(w->err) - (size_t)n,
               " (this writer: %" PRIu64 " samples acked, %" PRIu64
               " sent in %" PRIu32 " requests not acked)",
               w->acked, w->sent - w->acked, w->inflight);
    /* A sharded writer's shard restarted and forgot it: it moves to
     * another shard as when its shard stays away (wait_until, writer.c),
     * and fails with this only when there is none to move to. */
    if (code == CHIME_EFORGOTTEN && w->set && w->resend)
      w->forgotten = 1;
    else
      fail(w, code);
  }
}

/* The server's ack is untrusted: it must answer the oldest request in flight,
 * one sent on this call, with that request's count and keys after any it
 * gave before. A re-ack after a reconnect is no different: the server acks a
 * request it already had with the keys it gave it then, which follow the
 * keys of every request acked before it. Returns 0 or writes why not into
 * why. */
static int check_ack(const chime_writer_t *w, const Chime__V1__InsertAck *ack,
                     char *why, size_t len) {
  if (w->sent_on_call == 0 || ack->id != w->acked_id) {
    snprintf(why, len,
             "ack for request %" PRIu64 ", expected %s%" PRIu64
             " (unknown, out of order, not sent or already acked)",
             ack->id, w->sent_on_call ? "" : "none; next would be ",
             w->acked_id);
    return -1;
  }
  uint32_t sent = fl_at(w, 0)->count;
  if (ack->count != sent) {
    snprintf(why, len,
             "ack for request %" PRIu64 " says %" PRIu32 " samples, %" PRIu32
             " were sent",
             ack->id, ack->count, sent);
    return -1;
  }
  if (ack->first_key < w->min_key || ack->first_key > UINT64_MAX - ack->count) {
    snprintf(why, len,
             "ack for request %" PRIu64 " gives keys from %" PRIu64
             " (expected %" PRIu64 " or later, and %" PRIu32
             " keys that fit 64 bits)",
             ack->id, ack->first_key, w->min_key, ack->count);
    return -1;
  }
  return 0;
}

/* A message came on the call: the silence ends, and the server says
 * whether it heartbeats (a server before them says 0: never judged). */
static void heard(chime_writer_t *w, uint32_t beat_ms) {
  int64_t now = chime__now_ms();
  int64_t since = w->expect_ms > w->heard_ms ? w->expect_ms : w->heard_ms;
  w->gap_ms = chime__stall_gap(w->gap_ms, now - since);
  w->heard_ms = now;
  w->beat_ms = beat_ms;
}

static void on_ack(chime_writer_t *w) {
  Chime__V1__InsertAck *ack = (Chime__V1__InsertAck *)chime__unpack(
      &chime__v1__insert_ack__descriptor, w->rpc.recv_bb);
  chime__bb_free(w->rpc.recv_bb);
  w->rpc.recv_bb = NULL;
  char why[256] = "malformed ack";
  if (ack != NULL)
    heard(w, ack->heartbeat_ms);
  if (ack != NULL && ack->heartbeat && ack->id == 0 && ack->count == 0) {
    /* Alive, the requests still waiting: nothing acked. */
    if (live(w) && chime__rpc_recv(&w->rpc))
      fail(w, CHIME_EPROTO);
  } else if (!ack || ack->heartbeat || check_ack(w, ack, why, sizeof(why)) ||
             ack->n_dropped != ack->n_dropped_reasons ||
             chime__writer_take_drops(w, w->acked, ack->first_key, ack->count,
                                      ack->dropped, ack->dropped_reasons,
                                      ack->n_dropped, why, sizeof(why))) {
    if (!w->failed)
      snprintf(w->err, sizeof(w->err), "insert into '%s': %s", w->table, why);
    fail(w, CHIME_EPROTO);
    chime__rpc_cancel(&w->rpc);
  } else {
    struct inflight_s *f = fl_at(w, 0);
    chime__bb_free(f->bb);
    f->bb = NULL;
    w->fl_head = (w->fl_head + 1) % w->fl_cap;
    w->acked_id++;
    w->inflight--;
    w->sent_on_call--;
    w->acked += ack->count;
    w->stalled = 0;
    w->min_key = ack->first_key + ack->count;
    w->reconnect_deadline = 0; /* the server is back */
    w->fresh = 0;
    /* After the status nothing more comes on this call. */
    if (live(w) && chime__rpc_recv(&w->rpc))
      fail(w, CHIME_EPROTO);
  }
  if (ack)
    protobuf_c_message_free_unpacked(&ack->base, NULL);
}

/* Makes room to remember one more request in flight (max_inflight may be
 * large, so the list grows with use rather than up front). */
int chime__writer_fl_reserve(chime_writer_t *w) {
  if (w->inflight < w->fl_cap)
    return 0;
  uint32_t cap = w->fl_cap == 0               ? 8
                 : w->fl_cap > UINT32_MAX / 2 ? UINT32_MAX
                                              : w->fl_cap * 2;
  struct inflight_s *grown = calloc(cap, sizeof(*grown));
  if (!grown)
    return CHIME_ENOMEM;
  for (uint32_t i = 0; i < w->inflight; i++)
    grown[i] = *fl_at(w, i);
  free(w->fl);
  w->fl = grown;
  w->fl_cap = cap;
  w->fl_head = 0;
  return 0;
}

/* Sends the oldest request in flight not yet sent on this call, when no
 * send is outstanding (gRPC takes one at a time). */
int chime__writer_kick(chime_writer_t *w) {
  if (sending(w) || w->broken || !live(w) || w->failed ||
      w->sent_on_call >= w->inflight)
    return 0;
  /* A copy shares the slices: the request's own buffer stays for a resend. */
  grpc_byte_buffer *bb = chime__bb_copy(fl_at(w, w->sent_on_call)->bb);
  if (!bb)
    return fail(w, CHIME_ENOMEM);
  if (chime__rpc_send(&w->rpc, bb)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': cannot send", w->table);
    return fail(w, CHIME_EPROTO);
  }
  if (w->sent_on_call++ == 0)
    w->expect_ms = chime__now_ms();
  return 0;
}

/* Handles one completion; CHIME_ETIMEDOUT when none came by the deadline. */
int chime__writer_pump(chime_writer_t *w, gpr_timespec deadline) {
  chime__rpc_op_t op;
  int ok;
  int rc = chime__rpc_next(&w->rpc, deadline, &op, &ok);
  if (rc)
    return rc;
  switch (op) {
  case CHIME__RPC_SEND:
    chime__writer_kick(w);
    break;
  case CHIME__RPC_RECV:
    if (w->rpc.recv_bb)
      on_ack(w);
    break;
  case CHIME__RPC_STATUS:
    on_status(w);
    break;
  default:
    break;
  }
  return 0;
}

static int pending(const chime_writer_t *w) {
  return chime__rpc_busy(&w->rpc);
}

/* Starts an Insert call: initial metadata, the status and the first
 * receive. A resumed call waits for the channel to be ready (the server
 * may still be coming back) instead of failing at once. */
int chime__writer_call_start(chime_writer_t *w, int wait_for_ready) {
  w->heard_ms = chime__now_ms();
  w->expect_ms = 0;
  w->gap_ms = 0;
  if (chime__rpc_start_on(
          &w->rpc, w->client, w->chan != NULL ? w->chan : w->client->channel,
          CHIME__M_INSERT, gpr_inf_future(GPR_CLOCK_REALTIME),
          wait_for_ready ? CHIME__RPC_WAIT_FOR_READY : 0, NULL) ||
      chime__rpc_recv(&w->rpc))
    return CHIME_EPROTO;
  return 0;
}

int64_t chime__writer_stall_left_ms(const chime_writer_t *w) {
  if (w->beat_ms == 0 || w->sent_on_call == 0 || w->broken || w->failed ||
      !live(w) || w->resend == 0)
    return INT64_MAX;
  int64_t since = w->expect_ms > w->heard_ms ? w->expect_ms : w->heard_ms;
  int64_t left = since + chime__stall_limit(w->gap_ms) - chime__now_ms();
  return left > 0 ? left : 0;
}

int chime__writer_stall_check(chime_writer_t *w) {
  if (chime__writer_stall_left_ms(w) > 0)
    return 0;
  atomic_fetch_add(&w->stalls, 1);
  snprintf(w->err, sizeof(w->err),
           "insert into '%s': stalled: nothing heard for %" PRId64
           " ms with %" PRIu32 " requests unacked",
           w->table, chime__now_ms() - w->heard_ms, w->inflight);
  /* Our cancel: its status fails nothing, an ack that came first counts. */
  w->dropping = 1;
  chime__writer_drop_call(w);
  w->dropping = 0;
  w->broken = 1;
  w->fresh = 1;
  return 1;
}

void chime__writer_chan_drop(chime_writer_t *w) {
  chime__channel_drop(&w->chan, w->fork_gen);
}

/* One step of fresh connections for a call left as stalled (channel.c),
 * by until_ms: the writer's own channel then, or still none. */
static void connect_fresh(chime_writer_t *w, int64_t until_ms) {
  if (until_ms > w->reconnect_deadline)
    until_ms = w->reconnect_deadline;
  int64_t left = until_ms - chime__now_ms();
  if (left <= 0)
    return;
  grpc_channel *ch = NULL;
  if (chime__channel_connect(w->client, CONNECT_STEP_MS,
                             left < CONNECT_MS ? (int)left : CONNECT_MS,
                             &ch) != 0)
    return;
  chime__writer_chan_drop(w);
  w->chan = ch;
  w->fresh = 2; /* connected: the call goes on it */
}

/* Ends the current call: cancels it and collects every completion left
 * (an ack that arrived before the end still counts). */
void chime__writer_drop_call(chime_writer_t *w) {
  chime__rpc_cancel(&w->rpc);
  while (pending(w))
    chime__writer_pump(w, gpr_inf_future(GPR_CLOCK_MONOTONIC));
}

/* The call died with the connection: collect what is left of it (an ack
 * that arrived before the end still counts), then open a new call and send
 * every unacked request again, oldest first. */
int chime__writer_reconnect(chime_writer_t *w, int64_t until_ms) {
  chime__writer_drop_call(w);
  chime__rpc_reset(&w->rpc);
  if (w->failed)
    return w->failed;
  if (w->reconnect_deadline == 0)
    w->reconnect_deadline = chime__now_ms() + w->reconnect_timeout_ms;
  if (w->fresh) {
    connect_fresh(w, until_ms);
    if (w->fresh != 2)
      return 0; /* no connection yet: still broken */
    w->fresh = 1;
  }
  w->broken = 0;
  w->sent_on_call = 0;
  w->reconnects++;
  if (chime__writer_call_start(w, 1)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': cannot start a call",
             w->table);
    return fail(w, CHIME_EPROTO);
  }
  return chime__writer_kick(w);
}

/* A random nonzero id, so writers of one table never share one. */
uint64_t chime__writer_new_id(void) {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
      /* No entropy source: time and pid still tell writers apart. */
      id = chime__clock_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 40);
      id *= UINT64_C(0x9E3779B97F4A7C15);
    }
  }
  return id;
}

int chime__writer_take_drops(chime_writer_t *w, uint64_t first_index,
                             uint64_t first_key, uint32_t count,
                             const uint32_t *idx, const uint32_t *why, size_t n,
                             char *err, size_t errlen) {
  for (size_t k = 0; k < n; k++)
    if (idx[k] >= count || (k > 0 && idx[k] <= idx[k - 1]) ||
        (why[k] != CHIME_DROP_ZERO_VARIANCE &&
         why[k] != CHIME_DROP_MEAN_OUTSIDE)) {
      snprintf(err, errlen,
               "ack names dropped group %" PRIu32 " (reason %" PRIu32
               ") of %" PRIu32 ": not one of its groups in order",
               idx[k], why[k], count);
      return -1;
    }
  if (n == 0)
    return 0;
  if (w->ndrops + n > w->drops_cap) {
    size_t cap = (w->ndrops + n) * 2;
    chime_writer_drop_t *d = realloc(w->drops, cap * sizeof(*d));
    if (d == NULL) {
      snprintf(err, errlen, "out of memory for dropped groups");
      return -1;
    }
    w->drops = d;
    w->drops_cap = cap;
  }
  for (size_t k = 0; k < n; k++)
    w->drops[w->ndrops++] = (chime_writer_drop_t){
        .index = first_index + idx[k],
        .key = first_key + idx[k],
        .reason = (chime_drop_reason_t)why[k],
    };
  w->dropped += n;
  return 0;
}
