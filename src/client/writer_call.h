/* Internal to the client: a writer's state and its Insert call (writer_call.c):
 * the requests in flight and their acks, and the new call that resumes them
 * after a lost connection. writer.c drives it from the public calls,
 * writer_shard.c moves it to another shard (see writer.c's opening comment
 * for the protocol). Every function runs on the writer's caller's thread. */
#ifndef CHIME_CLIENT_WRITER_CALL_H
#define CHIME_CLIENT_WRITER_CALL_H

#include <stdint.h>

#include "client/internal.h"
#include "client/shards.h"

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
  int warm_start;  /* every request passes the rate limiter */

  chime__rpc_t rpc; /* the Insert call; a new one after a reconnect */

  uint8_t *data; /* batch_cap * sample_bytes */
  /* Compressed leaves (docs/protocol.md, "Compressed leaves"): the nz
   * leaves the table keeps compressed, zleaves[k] at level zlevel[k],
   * which each request carries stored, compressed as each sample is
   * appended with the writer's one context zc (writer_zip.c): the
   * request's data built in zdata (zused bytes; as large as data, which
   * such a writer does not use), each sample's stored sizes in zsizes
   * (batch_cap * nz). nz 0: samples go raw (chimed compresses them). */
  uint32_t nz;
  uint32_t zleaves[CHIME_MAX_LEAVES];
  uint8_t zlevel[CHIME_MAX_LEAVES];
  struct ZSTD_CCtx_s *zc;
  uint8_t *zdata;
  size_t zused;
  uint32_t *zsizes;
  uint64_t bytes_sent; /* of the requests packed, each counted once */
  double *priorities;  /* batch_cap */
  /* A table with ragged leaves: each queued sample's lengths (nrag each,
   * the InsertRequest's), and the bytes of data they fill (a sample at its
   * lengths, never more than sample_bytes). */
  uint32_t nrag;
  uint32_t *lengths; /* batch_cap * nrag */
  size_t used;
  size_t data_cap;    /* a message goes once its samples pass these bytes */
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
  /* The call ended CHIME_EFORGOTTEN (the shard restarted within
   * writer_idle_ms without this writer): a sharded writer moves on. */
  int forgotten;
  /* move_shard is cancelling the call to the dead shard: the CANCELLED
   * status that follows is ours, not the server's, and fails nothing. */
  int dropping;
  int64_t reconnect_deadline; /* CLOCK_MONOTONIC ms; 0: not reconnecting */
  /* A call that stalls (docs/remote.md, "A link that drops"): the server's
   * heartbeat interval (its acks' heartbeat_ms; 0: none heard, so never
   * judged), when the call last heard anything (or began), when requests
   * went on it after none were, and the recent gaps (stall.c's rule). */
  uint32_t beat_ms;
  int64_t heard_ms, expect_ms, gap_ms;
  /* The call was left as stalled: the next calls go on fresh connections
   * (channel.c) until an ack comes; chan is the writer's own, once it has
   * one (NULL: the client's channel). */
  int fresh;
  grpc_channel *chan;
  _Atomic uint64_t stalls; /* calls left as stalled (chime_writer_stalls) */
  uint64_t reconnects;
  uint64_t min_key; /* keys of one call only grow: the next ack's lowest */
  uint64_t acked;   /* samples */
  uint64_t sent;    /* samples */
  /* A group table's groups its filters dropped (writer_group.c): those
   * not taken yet (ndrops of drops_cap), and how many in all. */
  chime_writer_drop_t *drops;
  size_t ndrops, drops_cap;
  uint64_t dropped;
  int failed;  /* sticky error code */
  int stalled; /* a wait timed out and no ack came since */
  /* The sentence for the current call's failure, or the sticky one's: the
   * public calls clear it as they begin (unless failed) and hand it to the
   * calling thread's detail as they fail (report). */
  char err[CHIME__ERRLEN];
};

static inline int fail(chime_writer_t *w, int code) {
  if (!w->failed)
    w->failed = code;
  return w->failed;
}

static inline struct inflight_s *fl_at(const chime_writer_t *w, uint32_t i) {
  return &w->fl[(w->fl_head + i) % w->fl_cap];
}

static inline int sending(const chime_writer_t *w) {
  return chime__rpc_pending(&w->rpc, CHIME__RPC_SEND);
}

/* The status has not arrived: the call is live. */
static inline int live(const chime_writer_t *w) {
  return chime__rpc_pending(&w->rpc, CHIME__RPC_STATUS);
}

/* Makes room to remember one more request in flight: 0 or CHIME_ENOMEM. */
int chime__writer_fl_reserve(chime_writer_t *w);
/* Sends the oldest request in flight not yet sent on this call, when no
 * send is outstanding (gRPC takes one at a time). */
int chime__writer_kick(chime_writer_t *w);
/* Handles one completion; CHIME_ETIMEDOUT when none came by the deadline. */
int chime__writer_pump(chime_writer_t *w, gpr_timespec deadline);
/* Starts an Insert call: initial metadata, the status and the first
 * receive; wait_for_ready: wait for the channel (a resumed call). */
int chime__writer_call_start(chime_writer_t *w, int wait_for_ready);
/* Cancels the current call and collects every completion left (an ack
 * that arrived before the end still counts). */
void chime__writer_drop_call(chime_writer_t *w);
/* The call died with the connection (or was left as stalled): a new call
 * that sends every unacked request again, oldest first. After a stall the
 * new call goes on a fresh connection, made by until_ms (CLOCK_MONOTONIC;
 * a step of at most 2 s): none by then leaves the writer broken, to try
 * again. 0 or the sticky error. */
int chime__writer_reconnect(chime_writer_t *w, int64_t until_ms);
/* How long the call may stay silent before it counts as stalled: requests
 * went on it, the server heartbeats, and nothing came for CHIME__STALL_MS
 * (or 4 times the recent gaps). INT64_MAX when it is not judged. */
int64_t chime__writer_stall_left_ms(const chime_writer_t *w);
/* Leaves a stalled call (the stall rule says so, at no time left): 1, the
 * writer then broken and to resume on a fresh connection; 0 if not. */
int chime__writer_stall_check(chime_writer_t *w);
/* Destroys the writer's own channel, if any (at close, or when a sharded
 * writer moves to another shard). */
void chime__writer_chan_drop(chime_writer_t *w);
/* Records the groups an ack (count samples from first_key, the first of
 * them the writer's first_index-th append) says were dropped: n indices
 * idx and reasons why. 0, or -1 with why it is not believed in err (an
 * index out of the request or out of order, an unknown reason). */
int chime__writer_take_drops(chime_writer_t *w, uint64_t first_index,
                             uint64_t first_key, uint32_t count,
                             const uint32_t *idx, const uint32_t *why, size_t n,
                             char *err, size_t errlen);
/* A random nonzero writer id. */
uint64_t chime__writer_new_id(void);

#endif
