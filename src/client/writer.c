/* Writer: an Insert call driven from the caller's thread. Samples collect in a
 * batch; a full batch becomes one InsertRequest; up to max_inflight requests
 * wait for their acks while the caller keeps appending.
 *
 * Exactly once across reconnects: the writer has a random id and numbers its
 * requests from 1 (docs/protocol.md, Insert). It keeps each request's bytes
 * until the ack; when the call dies without a graceful CHIME_ESHUTDOWN it
 * opens a new call (waiting for the channel to reconnect, for at most
 * reconnect_timeout_ms) and sends every unacked request again, in order. The
 * server acks one it already inserted with its original keys instead of
 * inserting it twice, so nothing is lost and nothing doubled.
 *
 * A sharded client's writer is bound to one shard, the one with the fewest
 * of the client's writers; when that shard stays unreachable past
 * reconnect_timeout_ms it moves to another the same way (move_shard) and
 * resends there as a new writer (a fresh writer_id): at least once, since
 * the dead shard may have inserted what it never acked. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/fork.h"
#include "client/internal.h"
#include "client/shards.h"
#include "common/spec.h"
#include "wire/insert.h"

struct chime_writer_s {
  chime_client_t *client; /* the server it writes to: a shard's, when sharded */
  /* A sharded client's shards (shards.h): the writer is bound to member
   * and moves to another only when its shard stays unreachable past
   * reconnect_timeout_ms. NULL: one server. */
  chime__shards_t *set;
  uint32_t member;
  uint64_t moves;
  uint32_t fork_gen; /* the client's: the writer is the parent's in a child */
  int pid;           /* the client's process */
  char table[CHIME_MAX_NAME];
  chime_spec_t spec;
  uint64_t sample_bytes;
  uint32_t batch_cap; /* samples per message */
  uint32_t max_inflight;
  int timeout_ms;
  int resend;               /* resend unacked requests after a reconnect */
  int reconnect_timeout_ms; /* from the disconnect to the next ack */
  uint64_t writer_id;       /* 0 when resend is off: no dedupe */
  /* A sequence table's writer appends steps; its episode is the server's
   * per writer_id, which it then always has. */
  int sequence;
  int end_pending; /* the next request ends the episode */

  chime__rpc_t rpc; /* the Insert call; a new one after a reconnect */

  uint8_t *data;      /* batch_cap * sample_bytes */
  double *priorities; /* batch_cap */
  uint32_t queued;    /* samples in the batch */
  int all_default;    /* every queued priority is 1.0 */
  uint64_t version;   /* the policy version of the next sample */
  uint64_t *versions; /* batch_cap: each queued sample's */
  int mixed;          /* queued samples' versions differ */
  uint64_t next_id;   /* seq of the next request, from 1 */
  uint64_t acked_id;  /* seq of the oldest unacked: [1, acked_id) acked */
  uint32_t inflight;  /* packed, not acked */
  /* Each request in flight, oldest (seq acked_id) at fl_head: its bytes for
   * a resend, and its count, which its ack must name exactly. */
  struct inflight_s {
    grpc_byte_buffer *bb;
    uint32_t count;
  } * fl;
  uint32_t fl_cap, fl_head;
  uint32_t sent_on_call; /* of those, sent on the current call (oldest first) */
  int broken;            /* the call died and may be resumed on a new one */
  /* move_shard is cancelling the call to the dead shard: the CANCELLED
   * status that follows is ours, not the server's, and fails nothing. */
  int dropping;
  int64_t reconnect_deadline; /* CLOCK_MONOTONIC ms; 0: not reconnecting */
  uint64_t reconnects;
  uint64_t min_key; /* keys of one call only grow: the next ack's lowest */
  uint64_t acked;   /* samples */
  uint64_t sent;    /* samples */
  int failed;       /* sticky error code */
  int stalled;      /* a wait timed out and no ack came since */
  /* The sentence for the current call's failure, or the sticky one's: the
   * public calls clear it as they begin (unless failed) and hand it to the
   * calling thread's detail as they fail (report). */
  char err[CHIME__ERRLEN];
};

static uint64_t new_writer_id(void);

static int fail(chime_writer_t *w, int code) {
  if (!w->failed)
    w->failed = code;
  return w->failed;
}

/* A public call begins: what an earlier call's failure said is not this
 * one's (a sticky failure's text stays: every later call returns it). */
static void begin(chime_writer_t *w) {
  if (!w->failed && w->err[0] != '\0') /* an append costs no store */
    w->err[0] = '\0';
}

/* A public call ends: a failure's sentence becomes the calling thread's
 * detail (the code's own sentence when no step wrote one). */
static int report(const chime_writer_t *w, int rc) {
  return rc ? chime__detail(rc, w->err) : 0;
}

/* CHIME_ENOTSUP in a child of fork(): the call and its acks are the
 * parent's (fork.h). */
static int inherited(chime_writer_t *w) {
  return w->fork_gen == chime__fork_gen()
             ? 0
             : chime__fork_check(w->fork_gen, w->pid, "writer", w->err,
                                 sizeof(w->err));
}

static struct inflight_s *fl_at(const chime_writer_t *w, uint32_t i) {
  return &w->fl[(w->fl_head + i) % w->fl_cap];
}

static int sending(const chime_writer_t *w) {
  return chime__rpc_pending(&w->rpc, CHIME__RPC_SEND);
}

/* The status has not arrived: the call is live. */
static int live(const chime_writer_t *w) {
  return chime__rpc_pending(&w->rpc, CHIME__RPC_STATUS);
}

/* The call ended: the status says why. A lost connection (not a graceful
 * CHIME_ESHUTDOWN) leaves the writer to resume on a new call. Any other end
 * is final; CHIME_EFORGOTTEN (the server no longer remembers this writer,
 * so a resend could not be told from a new request) included: the caller
 * goes on with a new writer. */
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

static void on_ack(chime_writer_t *w) {
  Chime__V1__InsertAck *ack = (Chime__V1__InsertAck *)chime__unpack(
      &chime__v1__insert_ack__descriptor, w->rpc.recv_bb);
  chime__bb_free(w->rpc.recv_bb);
  w->rpc.recv_bb = NULL;
  char why[256] = "malformed ack";
  if (!ack || check_ack(w, ack, why, sizeof(why))) {
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
    /* After the status nothing more comes on this call. */
    if (live(w) && chime__rpc_recv(&w->rpc))
      fail(w, CHIME_EPROTO);
  }
  if (ack)
    protobuf_c_message_free_unpacked(&ack->base, NULL);
}

/* Makes room to remember one more request in flight (max_inflight may be
 * large, so the list grows with use rather than up front). */
static int fl_reserve(chime_writer_t *w) {
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
static int kick(chime_writer_t *w) {
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
  w->sent_on_call++;
  return 0;
}

/* Handles one completion; CHIME_ETIMEDOUT when none came by the deadline. */
static int pump(chime_writer_t *w, gpr_timespec deadline) {
  chime__rpc_op_t op;
  int ok;
  int rc = chime__rpc_next(&w->rpc, deadline, &op, &ok);
  if (rc)
    return rc;
  switch (op) {
  case CHIME__RPC_SEND:
    kick(w);
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
static int call_start(chime_writer_t *w, int wait_for_ready) {
  if (chime__rpc_start(&w->rpc, w->client, CHIME__M_INSERT,
                       gpr_inf_future(GPR_CLOCK_REALTIME),
                       wait_for_ready ? CHIME__RPC_WAIT_FOR_READY : 0, NULL) ||
      chime__rpc_recv(&w->rpc))
    return CHIME_EPROTO;
  return 0;
}

/* Ends the current call: cancels it and collects every completion left
 * (an ack that arrived before the end still counts). */
static void drop_call(chime_writer_t *w) {
  chime__rpc_cancel(&w->rpc);
  while (pending(w))
    pump(w, gpr_inf_future(GPR_CLOCK_MONOTONIC));
}

/* The call died with the connection: collect what is left of it (an ack
 * that arrived before the end still counts), then open a new call and send
 * every unacked request again, oldest first. */
static int reconnect(chime_writer_t *w) {
  drop_call(w);
  chime__rpc_reset(&w->rpc);
  if (w->failed)
    return w->failed;
  if (w->reconnect_deadline == 0)
    w->reconnect_deadline = chime__now_ms() + w->reconnect_timeout_ms;
  w->broken = 0;
  w->sent_on_call = 0;
  w->reconnects++;
  if (call_start(w, 1)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': cannot start a call",
             w->table);
    return fail(w, CHIME_EPROTO);
  }
  return kick(w);
}

/* Binds to a shard of set (chime__shards_pick: the live one with the
 * fewest of this client's writers, whose count it keeps; never a second
 * address of one server) that answers and has the table (in ti), never
 * `skip` (UINT32_MAX: none). A shard that
 * answers without the table fails it (the shards must be configured
 * alike); one that cannot be reached is passed over for the next. */
static int bind_shard(chime__shards_t *set, const char *table, uint32_t skip,
                      uint32_t *member, chime_table_info_t *ti, char *err,
                      size_t errlen) {
  uint8_t tried[CHIME__MAX_SHARDS] = {0};
  uint32_t i;
  int rc, last = CHIME_EUNAVAILABLE, any = 0;
  if (skip != UINT32_MAX)
    tried[skip] = 1;
  while ((rc = chime__shards_pick(set, tried, &i, any ? NULL : err,
                                  any ? 0 : errlen)) == 0) {
    chime__member_t *m = chime__shards_at(set, i);
    char why[CHIME__ERRLEN];
    tried[i] = 1;
    if (chime__shards_duplicate(set, i)) {
      /* A server named twice counts once, under its first address. */
      chime__shards_unpick(set, i);
      continue;
    }
    any = 1;
    rc = chime__table_lookup(m->client, table, ti, NULL, why, sizeof(why));
    if (rc == 0) {
      *member = i;
      return 0;
    }
    chime__shards_unpick(set, i);
    last = chime__fail(err, errlen, rc, "shard %s: %s", m->addr, why);
    if (rc != CHIME_EUNAVAILABLE && rc != CHIME_EDISCONNECTED &&
        rc != CHIME_ETIMEDOUT)
      return rc;
  }
  /* The last shard's failure when some were tried, else the pick's. */
  return any ? last : rc;
}

/* To a shard that never saw it the writer is a new writer: a fresh
 * writer_id, and its unacked requests numbered again from 1 in their
 * order. Resent under the old id and numbers, a request past the first
 * would be refused (CHIME_EFORGOTTEN) by a table that has ever forgotten
 * a writer (docs/protocol.md, Exactly once across reconnects). */
static int renumber(chime_writer_t *w) {
  uint64_t id = new_writer_id();
  for (uint32_t i = 0; i < w->inflight; i++) {
    struct inflight_s *f = fl_at(w, i);
    Chime__V1__InsertRequest *req = (Chime__V1__InsertRequest *)chime__unpack(
        &chime__v1__insert_request__descriptor, f->bb);
    if (!req)
      return CHIME_ENOMEM; /* our own bytes: only memory can fail */
    req->writer_id = id;
    req->id = i + 1;
    grpc_byte_buffer *bb = chime__pack(&req->base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (!bb)
      return CHIME_ENOMEM;
    chime__bb_free(f->bb);
    f->bb = bb;
  }
  w->writer_id = id;
  w->acked_id = 1;
  w->next_id = (uint64_t)w->inflight + 1;
  return 0;
}

/* Failover: the writer's shard stayed unreachable past the reconnect
 * timeout. The target is resolved again and the writer moves to the live
 * shard with the fewest of this client's writers that has the same table,
 * where every unacked request is sent again (on a new call, by reconnect),
 * as a new writer's: at least once, since the dead shard may have inserted
 * some of them before it went (docs/scaling.md, Writers and shards). */
static int move_shard(chime_writer_t *w) {
  chime__shards_refresh(w->set, 1);
  uint32_t to, at;
  chime_table_info_t ti;
  char why[CHIME__ERRLEN];
  if (bind_shard(w->set, w->table, w->member, &to, &ti, why, sizeof(why)))
    return CHIME_EUNAVAILABLE;
  if (chime__spec_diff(ti.sequence_length ? &ti.step_spec : &ti.spec, &w->spec,
                       &at) != CHIME__SPEC_SAME) {
    chime__shards_unpick(w->set, to);
    return CHIME_EUNAVAILABLE;
  }
  /* The call on the dead shard is still waiting for its channel (a
   * resumed call waits for ready): cancelling it is no failure. */
  w->dropping = 1;
  drop_call(w);
  w->dropping = 0;
  chime__rpc_reset(&w->rpc);
  if (!w->failed && w->writer_id && renumber(w)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': out of memory",
             w->table);
    fail(w, CHIME_ENOMEM);
  }
  if (w->failed) {
    chime__shards_unpick(w->set, to);
    return w->failed;
  }
  chime__shards_unpick(w->set, w->member);
  w->member = to;
  w->client = chime__shards_at(w->set, to)->client;
  w->moves++;
  /* The new shard issues keys of its own numbering. */
  w->min_key = 1;
  w->reconnect_deadline = chime__now_ms() + w->reconnect_timeout_ms;
  w->broken = 1;
  return 0;
}

/* Waits until cond() holds, the writer fails or the deadline passes; a call
 * lost on the way is resumed on a new one, up to the reconnect deadline. */
static int wait_until(chime_writer_t *w, int (*cond)(const chime_writer_t *),
                      int timeout_ms) {
  int64_t end = chime__now_ms() + timeout_ms;
  while (!cond(w)) {
    if (w->failed)
      return w->failed;
    if (w->broken) {
      int rc = reconnect(w);
      if (rc)
        return rc;
      continue;
    }
    int64_t until = end;
    if (w->reconnect_deadline && w->reconnect_deadline < until)
      until = w->reconnect_deadline;
    int64_t left = until - chime__now_ms();
    int rc = pump(w, chime__deadline_ms(left > 0 ? (int)left : 0));
    if (rc != CHIME_ETIMEDOUT)
      continue;
    if (w->reconnect_deadline && chime__now_ms() >= w->reconnect_deadline) {
      if (w->set && move_shard(w) == 0)
        continue;
      snprintf(w->err, sizeof(w->err),
               "insert into '%s': connection lost and not back within %d ms "
               "(%" PRIu32 " requests unacked)",
               w->table, w->reconnect_timeout_ms, w->inflight);
      chime__rpc_cancel(&w->rpc);
      return fail(w, CHIME_EDISCONNECTED);
    }
    if (chime__now_ms() >= end) {
      snprintf(w->err, sizeof(w->err),
               "insert into '%s': no ack within %d ms (%" PRIu32
               " messages in flight)",
               w->table, timeout_ms, w->inflight);
      w->stalled = 1;
      return CHIME_ETIMEDOUT;
    }
  }
  return w->failed;
}

static int can_send(const chime_writer_t *w) {
  return w->inflight < w->max_inflight;
}

static int all_acked(const chime_writer_t *w) {
  return !sending(w) && w->inflight == 0;
}

static int send_batch(chime_writer_t *w) {
  int rc = wait_until(w, can_send, w->timeout_ms);
  if (rc)
    return rc;
  if (fl_reserve(w)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': out of memory",
             w->table);
    return CHIME_ENOMEM;
  }
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = w->table;
  req.count = w->queued;
  req.data.data = w->data;
  req.data.len = (size_t)(w->queued * w->sample_bytes);
  if (!w->all_default) {
    req.n_priorities = w->queued;
    req.priorities = w->priorities;
  }
  /* One version for the lot when they share it (0: none sent). */
  if (w->mixed || w->versions[0] != 0) {
    req.n_versions = w->mixed ? w->queued : 1;
    req.versions = w->versions;
  }
  req.id = w->next_id;
  req.writer_id = w->writer_id;
  req.end_episode = w->end_pending != 0;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (!bb)
    return fail(w, CHIME_ENOMEM);
  /* Nothing was at stake while idle: a reconnect clock starts now. */
  if (w->reconnect_deadline && w->inflight == 0)
    w->reconnect_deadline = chime__now_ms() + w->reconnect_timeout_ms;
  struct inflight_s *f = fl_at(w, w->inflight);
  f->bb = bb;
  f->count = w->queued;
  w->inflight++;
  w->next_id++;
  w->sent += w->queued;
  w->queued = 0;
  w->all_default = 1;
  w->mixed = 0;
  w->end_pending = 0;
  return kick(w);
}

/* A random nonzero id, so writers of one table never share one. */
static uint64_t new_writer_id(void) {
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

/* Names the leaf a sample of `len` bytes breaks, like the server does. */
static void describe_size(const chime_writer_t *w, size_t len, char *buf,
                          size_t buflen) {
  uint64_t off = 0;
  for (uint32_t i = 0; i < w->spec.nleaves; i++) {
    const chime_leaf_t *l = &w->spec.leaves[i];
    uint64_t b = chime_leaf_bytes(l);
    if (len < off + b) {
      char shape[128];
      chime_spec_t one = {1, {*l}};
      const char *dims = chime_spec_format(&one, shape, sizeof(shape)) == 0
                             ? strchr(shape, ':') + 1
                             : "?";
      snprintf(buf, buflen,
               "insert into '%s': leaf '%s' (%s, %" PRIu64
               " bytes at offset %" PRIu64 ") does not fit: expected %" PRIu64
               " bytes per sample, got %zu",
               w->table, l->name, dims, b, off, w->sample_bytes, len);
      return;
    }
    off += b;
  }
  snprintf(buf, buflen,
           "insert into '%s': %zu bytes after the last leaf '%s': expected "
           "%" PRIu64 " bytes per sample, got %zu",
           w->table, len - (size_t)w->sample_bytes,
           w->spec.leaves[w->spec.nleaves - 1].name, w->sample_bytes, len);
}

int chime_writer_open(chime_writer_t **out, chime_client_t *client,
                      const char *table, const chime_writer_opts_t *opts) {
  chime_writer_opts_t def = CHIME_WRITER_OPTS_INIT;
  chime_table_info_t ti;
  char err[CHIME__ERRLEN] = "";
  int rc = 0;
  chime_writer_t *w = NULL;
  chime__shards_t *set = NULL;
  uint32_t member = 0;
  int bound = 0; /* member's count is ours to give back on failure */
  if (!client || !table || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_open: needs out, a client and a table");
  *out = NULL;
  rc = chime__client_inherited(client);
  if (rc)
    return rc;
  if (!opts)
    opts = &def;
  if (strlen(table) >= CHIME_MAX_NAME || opts->max_inflight == 0 ||
      opts->max_batch_samples == 0 || opts->max_batch_bytes == 0 ||
      opts->reconnect_timeout_ms < 0) {
    rc = chime__fail(err, sizeof(err), CHIME_EINVAL,
                     "writer: bad table name or options");
    goto cleanup;
  }
  set = client->set;
  if (set) {
    if ((rc = bind_shard(set, table, UINT32_MAX, &member, &ti, err,
                         sizeof(err))) != 0)
      goto cleanup;
    bound = 1;
    client = chime__shards_at(set, member)->client;
  } else if ((rc = chime__table_lookup(client, table, &ti, NULL, err,
                                       sizeof(err))) != 0) {
    goto cleanup;
  }
  if (ti.sequence_length > 0) {
    /* Steps go in; items (windows) come out. */
    ti.spec = ti.step_spec;
    ti.sample_bytes = ti.step_bytes;
  }
  if (ti.sample_bytes == 0 ||
      ti.sample_bytes != chime_spec_sample_bytes(&ti.spec) ||
      ti.sample_bytes > client->max_message_bytes / 2) {
    rc = chime__fail(err, sizeof(err), CHIME_EPROTO,
                     "writer: table '%s' reports %" PRIu64 " bytes per sample",
                     table, ti.sample_bytes);
    goto cleanup;
  }
  w = calloc(1, sizeof(*w));
  if (!w) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  w->client = client;
  w->set = set; /* the writer's now: close gives its member back */
  w->member = member;
  bound = 0;
  w->fork_gen = client->fork_gen;
  w->pid = client->pid;
  snprintf(w->table, sizeof(w->table), "%s", table);
  w->spec = ti.spec;
  w->sample_bytes = ti.sample_bytes;
  w->sequence = ti.sequence_length > 0;
  uint64_t cap = opts->max_batch_bytes / ti.sample_bytes;
  if (cap > opts->max_batch_samples)
    cap = opts->max_batch_samples;
  if (cap > (client->max_message_bytes / 2) / ti.sample_bytes)
    cap = (client->max_message_bytes / 2) / ti.sample_bytes;
  /* The server takes a request whole or not at all, so a request larger than
   * the table could never go in. */
  if (ti.capacity && cap > ti.capacity)
    cap = ti.capacity;
  w->batch_cap = cap ? (uint32_t)cap : 1;
  w->max_inflight = opts->max_inflight;
  w->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : def.timeout_ms;
  w->resend = opts->resend != 0;
  w->reconnect_timeout_ms = opts->reconnect_timeout_ms > 0
                                ? opts->reconnect_timeout_ms
                                : def.reconnect_timeout_ms;
  if (w->resend) {
    /* A resend must still be in the server's window to be recognised. */
    if (w->max_inflight > CHIME__INSERT_WINDOW)
      w->max_inflight = CHIME__INSERT_WINDOW;
  }
  if (w->resend || w->sequence)
    w->writer_id = new_writer_id();
  w->next_id = w->acked_id = 1;
  w->all_default = 1;
  w->min_key = 1; /* keys start at 1 */
  w->data = malloc(w->batch_cap * ti.sample_bytes);
  w->priorities = malloc(w->batch_cap * sizeof(double));
  w->versions = malloc(w->batch_cap * sizeof(uint64_t));
  w->version = opts->version;
  if (!w->data || !w->priorities || !w->versions || chime__rpc_init(&w->rpc)) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  if (call_start(w, 0)) {
    rc = chime__fail(err, sizeof(err), CHIME_EPROTO, "writer: start failed");
    goto cleanup;
  }
  *out = w;
  w = NULL;

cleanup:
  if (w) {
    w->failed = rc;
    int closed = chime_writer_close(w); /* rc, as w->failed says */
    (void)closed;
  }
  if (bound)
    chime__shards_unpick(set, member);
  return rc ? chime__detail(rc, err) : 0;
}

static int bad_priority(chime_writer_t *w, double priority) {
  if (w->sequence && priority != 1.0) {
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': a sequence table's items are windows: they "
             "take the table's initial_priority, not a step's (pass 1.0)",
             w->table);
    return CHIME_EINVAL;
  }
  if (isfinite(priority) && priority >= 0)
    return 0;
  snprintf(w->err, sizeof(w->err),
           "insert into '%s': priority %g: must be finite and at least 0",
           w->table, priority);
  return CHIME_EINVAL;
}

/* Before a batch starts: acks that already arrived are collected (no wait),
 * a broken call is resumed, the sticky error returned. Once per message, not
 * per sample: a poll of the completion queue (an epoll_wait and its locks)
 * costs more than appending a small sample. */
static int ready(chime_writer_t *w) {
  while ((w->inflight || sending(w)) && !w->broken &&
         pump(w, gpr_inf_past(GPR_CLOCK_MONOTONIC)) == 0) {
  }
  if (w->broken && !w->failed)
    reconnect(w);
  return w->failed;
}

/* Room for a sample: a full batch that could not go yet goes first (this
 * may wait), so an error here means nothing more was queued. */
static int room(chime_writer_t *w) {
  return w->queued == w->batch_cap ? send_batch(w) : 0;
}

/* k samples were queued: a batch they filled goes if it may. */
static int queued(chime_writer_t *w, uint32_t k, const double *prio) {
  for (uint32_t i = 0; prio != NULL && i < k; i++) {
    w->priorities[w->queued + i] = prio[i];
    if (prio[i] != 1.0)
      w->all_default = 0;
  }
  for (uint32_t i = 0; prio == NULL && i < k; i++)
    w->priorities[w->queued + i] = 1.0;
  for (uint32_t i = 0; i < k; i++)
    w->versions[w->queued + i] = w->version;
  if (w->queued > 0 && w->versions[0] != w->version)
    w->mixed = 1;
  w->queued += k;
  if (w->queued == w->batch_cap && can_send(w))
    return send_batch(w);
  return 0;
}

static int append(chime_writer_t *w, const void *sample, size_t len,
                  double priority) {
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  if (len != w->sample_bytes) {
    describe_size(w, len, w->err, sizeof(w->err));
    return CHIME_EINVAL;
  }
  rc = bad_priority(w, priority);
  if (rc == 0 && w->queued == 0)
    rc = ready(w);
  if (rc == 0)
    rc = room(w);
  if (rc != 0)
    return rc;
  memcpy(w->data + (size_t)w->queued * w->sample_bytes, sample, len);
  return queued(w, 1, &priority);
}

int chime_writer_append(chime_writer_t *writer, const void *sample, size_t len,
                        double priority) {
  chime_writer_t *w = writer;
  if (!w || (!sample && len))
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_append: needs a writer and a sample");
  begin(w);
  return report(w, append(w, sample, len, priority));
}

static int extend(chime_writer_t *w, uint32_t n, const void *const leaves[],
                  const double *priorities, uint32_t *taken) {
  uint32_t done = 0;
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  uint32_t nl = w->spec.nleaves;
  size_t lb[CHIME_MAX_LEAVES], off[CHIME_MAX_LEAVES], at = 0;
  for (uint32_t l = 0; l < nl; l++) {
    if (n > 0 && leaves[l] == NULL) {
      snprintf(w->err, sizeof(w->err), "insert into '%s': leaf '%s': no data",
               w->table, w->spec.leaves[l].name);
      return CHIME_EINVAL;
    }
    lb[l] = (size_t)chime_leaf_bytes(&w->spec.leaves[l]);
    off[l] = at;
    at += lb[l];
  }
  for (uint32_t i = 0; priorities != NULL && i < n && rc == 0; i++)
    rc = bad_priority(w, priorities[i]);
  if (rc == 0)
    rc = ready(w);
  /* Leaf-major in, sample-major out: each leaf's values go straight into
   * the batch, one copy, a batch at a time. */
  while (rc == 0 && done < n && (rc = room(w)) == 0) {
    uint32_t k = w->batch_cap - w->queued;
    if (k > n - done)
      k = n - done;
    uint8_t *dst = w->data + (size_t)w->queued * w->sample_bytes;
    for (uint32_t l = 0; l < nl; l++) {
      const uint8_t *src = (const uint8_t *)leaves[l] + (size_t)done * lb[l];
      uint8_t *d = dst + off[l];
      if (lb[l] == 4)
        for (uint32_t i = 0; i < k; i++)
          memcpy(d + (size_t)i * w->sample_bytes, src + 4 * (size_t)i, 4);
      else
        for (uint32_t i = 0; i < k; i++)
          memcpy(d + (size_t)i * w->sample_bytes, src + (size_t)i * lb[l],
                 lb[l]);
    }
    rc = queued(w, k, priorities != NULL ? priorities + done : NULL);
    done += k; /* queued even when sending the full batch failed */
    if (taken != NULL)
      *taken = done;
  }
  return rc;
}

int chime_writer_extend(chime_writer_t *writer, uint32_t n,
                        const void *const leaves[], const double *priorities,
                        uint32_t *taken) {
  chime_writer_t *w = writer;
  if (taken != NULL)
    *taken = 0;
  if (!w || (!leaves && n))
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_extend: needs a writer and leaves");
  begin(w);
  return report(w, extend(w, n, leaves, priorities, taken));
}

static int end_episode(chime_writer_t *w) {
  if (!w->sequence) {
    snprintf(w->err, sizeof(w->err),
             "end_episode: table '%s' is not a sequence table", w->table);
    return CHIME_EINVAL;
  }
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  w->end_pending = 1;
  return send_batch(w); /* the queued steps, possibly none, and the end */
}

int chime_writer_set_version(chime_writer_t *writer, uint64_t version) {
  if (!writer)
    return chime__detail(CHIME_EINVAL, "chime_writer_set_version: no writer");
  writer->version = version;
  return 0;
}

int chime_writer_end_episode(chime_writer_t *writer) {
  chime_writer_t *w = writer;
  if (!w)
    return chime__detail(CHIME_EINVAL, "chime_writer_end_episode: no writer");
  begin(w);
  return report(w, end_episode(w));
}

static int flush(chime_writer_t *w) {
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  if (w->queued) {
    rc = send_batch(w);
    if (rc)
      return rc;
  }
  return wait_until(w, all_acked, w->timeout_ms);
}

int chime_writer_flush(chime_writer_t *writer) {
  chime_writer_t *w = writer;
  if (!w)
    return chime__detail(CHIME_EINVAL, "chime_writer_flush: no writer");
  begin(w);
  return report(w, flush(w));
}

uint64_t chime_writer_acked(const chime_writer_t *writer) {
  return writer ? writer->acked : 0;
}

int chime_writer_close(chime_writer_t *writer) {
  chime_writer_t *w = writer;
  if (!w)
    return 0;
  begin(w);
  if (w->fork_gen != chime__fork_gen()) {
    /* In a child of fork(): only this process's copy goes; the call and
     * its byte buffers are the parent's gRPC state. */
    int rc = report(w, inherited(w));
    free(w->data);
    free(w->priorities);
    free(w->versions);
    free(w->fl);
    free(w);
    return rc;
  }
  /* One timeout bounds a writer's end: after a flush that timed out with
   * no ack since, close does not wait a second time. */
  int rc = w->stalled && !w->failed ? CHIME_ETIMEDOUT
           : w->rpc.call            ? flush(w)
                                    : w->failed;
  if (rc == CHIME_ETIMEDOUT && w->stalled && w->err[0] == '\0')
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': close after a wait that timed out with no ack "
             "since (%" PRIu32 " messages in flight): not waiting again",
             w->table, w->inflight);
  report(w, rc);
  if (w->rpc.call) {
    if (rc == 0 && !sending(w) && live(w)) {
      chime__rpc_half_close(&w->rpc);
      /* Everything is acked: the server's status after our half-close is a
       * courtesy, so don't wait long for it. */
      gpr_timespec deadline =
          chime__deadline_ms(w->timeout_ms < 5000 ? w->timeout_ms : 5000);
      while (live(w) && pump(w, deadline) != CHIME_ETIMEDOUT) {
      }
    }
    drop_call(w);
  }
  chime__rpc_destroy(&w->rpc);
  if (w->set)
    chime__shards_unpick(w->set, w->member);
  free(w->data);
  free(w->priorities);
  free(w->versions);
  for (uint32_t i = 0; i < w->inflight; i++)
    chime__bb_free(fl_at(w, i)->bb);
  free(w->fl);
  free(w);
  return rc;
}
