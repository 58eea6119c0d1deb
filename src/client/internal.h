/* Internal to the client library: the client object, gRPC helpers shared by
 * unary calls, the writer and the stream, and the pieces of a stream (handoff,
 * remote chunk assembly) that are tested on their own. The call object is in
 * call.h, the stream and its transports in stream.h (docs/architecture.md,
 * Client). */
#ifndef CHIME_CLIENT_INTERNAL_H
#define CHIME_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <protobuf-c/protobuf-c.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "ring/extents.h"
#include "ring/producer.h"
#include "client/call.h"
#include "common/clock.h"
#include "common/detail.h"
#include "common/errfmt.h" /* CHIME__PRINTF, chime__verrf */
#include "wire/hostid.h"
#include "wire/leaf.h"
#include "wire/method.h"
#include "wire/status.h"

/* Metadata a client accepts: a status whose details are CHIME__ERRLEN
 * (common/errfmt.h) long, even percent-encoded, with room to spare. */
#define CHIME__MAX_METADATA_BYTES (4 * CHIME__ERRLEN)

struct chime__shards_s;

struct chime_client_s {
  /* A sharded target's shards (shards.h): then channel is NULL and every
   * call goes to the shards' own clients (client_api.c hands it to
   * fanout.c; writer_shard.c, union.c). */
  struct chime__shards_s *set;
  char *address; /* the target as given */
  grpc_channel *channel;
  uint32_t fork_gen;  /* chime__fork_gen() at create (fork.h) */
  int pid;            /* the process that made it, for messages */
  grpc_metadata auth; /* authorization: Bearer <token> */
  size_t nmd;         /* 1 with a token, else 0 */
  int timeout_ms;
  /* A call got an answer from the server: a later CHIME_EUNAVAILABLE with
   * the connection down means the server went away (CHIME_EDISCONNECTED),
   * not that it was never there. */
  atomic_int reached;
  /* The server's shard and instance as its last GetInfo answer said
   * (seen: one did): a sharded client's member is identified from these
   * without asking again (shards.c), so a server that stopped answering
   * since costs no further wait. */
  atomic_int seen;
  _Atomic uint32_t seen_shard;
  _Atomic uint64_t seen_instance;
  /* And its tables as that answer listed them, under seen_mu: what a
   * sharded writer's open compares its shard's table with
   * (chime__conn_seen_table), without a call a hung server would hold. */
  pthread_mutex_t seen_mu;
  chime_table_info_t *seen_tables;
  uint32_t seen_ntables;
  size_t max_message_bytes;
  /* What its channels are made with (channel.c): the client's own, and
   * the fresh ones a stream that resumes tries. */
  grpc_channel_credentials *creds;
  char *tls_server_name;
  int keepalive_time_ms; /* 0: pings off */
  int keepalive_timeout_ms;
  /* The options it was made with, strings copied (NULL-safe frees at
   * destroy): a stream's lanes (lanes.c) each make a client like it, so
   * a connection of their own (chime__conn_again). */
  chime_client_opts_t kept;
};

/* --- channels (channel.c) --- */

/* The backoff cap of every TCP socket a client's channel makes. */
#define CHIME__CLIENT_RTO_MAX_MS 1000
/* A channel to c's address with c's arguments and credentials (NULL when
 * gRPC makes none). Caller holds the gate. */
grpc_channel *chime__channel_new(const chime_client_t *c);
/* A fresh channel to c's address, connected (READY) within wait_ms: a
 * new one every step_ms, each a new connection (its own TCP handshake,
 * no reconnect backoff of another channel's), the last TRIES of them
 * kept trying (a link whose handshake takes longer than a step still
 * connects), the first READY taken and the others dropped.
 * CHIME_ETIMEDOUT when none connected in time, CHIME_ENOMEM. */
int chime__channel_connect(const chime_client_t *c, int step_ms, int wait_ms,
                           grpc_channel **out);

/* Destroys *ch (made in this process: fork_gen is the fork generation it
 * was made in; one inherited from a parent is only forgotten), NULL-safe;
 * *ch is NULL after. */
void chime__channel_drop(grpc_channel **ch, uint32_t fork_gen);

/* --- the stall rule's clock, a stream's and a writer's (stall.c) --- */

/* The recent-gap estimate after a message heard gap ms after the last
 * one (0: the first): the longer of the two, the old one decayed an
 * eighth, capped. */
int64_t chime__stall_gap(int64_t estimate_ms, int64_t gap_ms);
/* The silence that counts as a stall: CHIME__STALL_MS, or 4 times the
 * recent gaps if that is longer (a slow link is not a dead one). */
int64_t chime__stall_limit(int64_t estimate_ms);

/* --- the one-server client (client.c) ---
 *
 * The layer under the public calls (client_api.c) and the sharded ones
 * (shards.c, fanout.c): each call here talks to client's own channel and
 * never to shards. Their contracts are the public calls' (chime.h), with
 * the arguments already checked; a failure sets the calling thread's
 * detail. */

/* A client for address, with opts already checked as chime_client_create
 * checks them: its limits, its process, gRPC started. channel: with a
 * channel of its own (a one-server client), else none (the object of a
 * sharded client, whose shards have theirs). */
int chime__conn_create(chime_client_t **out, const char *address,
                       const chime_client_opts_t *opts, int channel);
/* A one-server client like `like` (its address and options): a channel,
 * so a TCP connection, of its own. As chime__conn_create. */
int chime__conn_again(chime_client_t **out, const chime_client_t *like);
/* Frees what chime__conn_create made (a sharded client's shards are the
 * caller's to destroy first). NULL-safe. */
void chime__conn_destroy(chime_client_t *client);
int chime__conn_info(chime_client_t *client, chime_server_info_t **out);
/* The table as the server's last GetInfo answer on this client listed
 * it (any caller's): 0, CHIME_ENOTFOUND when that answer had no such
 * table, CHIME_EUNAVAILABLE when no GetInfo was answered yet. No call. */
int chime__conn_seen_table(chime_client_t *client, const char *table,
                           chime_table_info_t *out);
int chime__conn_stats(chime_client_t *client, chime_stats_t **out);
/* The same in two halves, so that calls to many servers wait together (a
 * sharded client's, fanout.c): begin starts the call (a failure to start
 * is end's to report), end waits for it (its own deadline bounds that)
 * and answers as the whole call would. Every begin has its end. */
typedef struct chime__unary_s chime__unary_t;
int chime__conn_info_begin(chime_client_t *client, chime__unary_t *u);
int chime__conn_info_end(chime_client_t *client, chime__unary_t *u,
                         chime_server_info_t **out);
int chime__conn_set_version_begin(chime_client_t *client, const char *table,
                                  uint64_t version, chime__unary_t *u);
int chime__conn_set_version_end(chime_client_t *client, chime__unary_t *u,
                                uint64_t *newest);
int chime__conn_stats_begin(chime_client_t *client, chime__unary_t *u);
int chime__conn_stats_end(chime_client_t *client, chime__unary_t *u,
                          chime_stats_t **out);
int chime__conn_mutate(chime_client_t *client, const char *table,
                       const uint64_t *keys, const double *priorities, size_t n,
                       const uint64_t *deletes, size_t ndeletes,
                       chime_mutate_result_t *out);
int chime__conn_checkpoint(chime_client_t *client,
                           chime_checkpoint_result_t *out);
/* One server's SetVersion: newest (may be NULL) gets its table's newest
 * version after it. */
int chime__conn_set_version(chime_client_t *client, const char *table,
                            uint64_t version, uint64_t *newest);

/* 0, or CHIME_ENOTSUP (with the calling thread's detail set) when the
 * client was made before a fork() in another process (fork.h). */
int chime__client_inherited(chime_client_t *client);

/* --- gRPC helpers (grpcutil.c) --- */

/* timeout_ms < 0: forever. */
gpr_timespec chime__deadline_ms(int timeout_ms);
/* Serialises a message into a new byte buffer; NULL when out of memory. */
grpc_byte_buffer *chime__pack(const ProtobufCMessage *msg);
/* grpc_byte_buffer_destroy (NULL-safe) and grpc_byte_buffer_copy through
 * the fork gate (fork.h). */
void chime__bb_free(grpc_byte_buffer *bb);
grpc_byte_buffer *chime__bb_copy(grpc_byte_buffer *bb);
/* Unpacks a whole byte buffer; NULL when malformed. Free with
 * protobuf_c_message_free_unpacked(). */
ProtobufCMessage *chime__unpack(const ProtobufCMessageDescriptor *desc,
                                grpc_byte_buffer *bb);
/* NUL-terminated copy of a slice, truncated to fit. */
void chime__slice_str(grpc_slice slice, char *buf, size_t len);
/* Shuts a completion queue (created for next), drains what is left and
 * destroys it. NULL-safe. */
void chime__cq_destroy(grpc_completion_queue *cq);

/* A unary call started and not yet waited for: chime__unary_begin starts
 * it (0, or the failure end reports: rc and err), chime__unary_end waits
 * for the answer, unpacks it as resp_desc and frees the call. */
struct chime__unary_s {
  chime__rpc_t r;
  int method;
  int made; /* r holds a queue (and maybe a call) to free */
  int rc;   /* the start's failure */
  char err[CHIME__ERRLEN];
};
int chime__unary_begin(chime_client_t *client, int method,
                       const ProtobufCMessage *req, chime__unary_t *u);
int chime__unary_end(chime_client_t *client, chime__unary_t *u,
                     const ProtobufCMessageDescriptor *resp_desc,
                     ProtobufCMessage **resp, char *err, size_t errlen);
/* One unary call of method (CHIME__M_*): sends req, unpacks the answer as
 * resp_desc. On failure the status details (or a local reason) are in
 * err. */
int chime__unary(chime_client_t *client, int method,
                 const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc,
                 ProtobufCMessage **resp, char *err, size_t errlen);

/* The table's info from a one-server client's GetInfo (client.c);
 * CHIME_ENOTFOUND with a sentence. */
int chime__table_lookup(chime_client_t *client, const char *table,
                        chime_table_info_t *out, chime_server_info_t **info,
                        char *err, size_t errlen);

/* CHIME_EINVAL with err when a priority of a MutatePriorities is NaN,
 * infinite or negative (client.c). */
int chime__check_priorities(const char *table, const double *priorities,
                            size_t n, char *err, size_t errlen);

/* --- same-host handoff (handoff.c) --- */

/* Connects to the handoff socket ('@' prefix: abstract), presents the token
 * and receives the ring's fd. CHIME_EPERM when the server refuses,
 * CHIME_ETIMEDOUT, CHIME_EPROTO for an answer that breaks the protocol. */
int chime__handoff_fetch(const char *socket_path, const uint8_t *token,
                         size_t token_len, int timeout_ms, int *fd_out,
                         char *err, size_t errlen);

/* --- stream mode: chunks into a local ring, credits (mode_stream.c) --- */

typedef struct {
  chime_ring_t *ring;       /* local ring, this side produces */
  _Atomic uint64_t granted; /* credits given to the server, prefetch included */
  _Atomic uint64_t started; /* batches the server has begun to send */
  uint64_t send_bytes;      /* bytes of a slot each batch carries at most */
  /* With ragged leaves (ring/extents.h): a batch sends its used extents,
   * its tail (offsets, info) first, total bytes in all; 0 for a fixed
   * spec, whose batches are send_bytes of the slot's prefix. */
  uint64_t tail;
  const chime_spec_t *spec; /* as the server's slot holds it (the wire's) */
  /* Compressed leaves travelling as their stored bytes (frames.c): a
   * batch lands in wire, laid out as the server's slot (wlay), and is
   * unpacked into the local slot, unframe[i] leaves decompressed. wire
   * is NULL when none do: bytes land in the local slot itself. */
  uint8_t *wire;
  chime_ring_layout_t wlay;
  const uint8_t *unframe;
  uint32_t steps; /* a sequence table's: each framed sample is T steps */
  /* With wire, each batch's tail travels packed (replay/ztail.h): ztail
   * its bytes unpacked, zhead and zbuf (ztail stored bytes, then ztail of
   * scratch; in wire's allocation) where it lands, head its bytes on the
   * wire once its head is in (0 before). */
  uint64_t ztail;
  uint8_t zhead[4];
  uint8_t *zbuf;
  uint64_t head;
  uint64_t total;   /* the batch being filled: bytes it says it sends */
  int have_extents; /* its tail is in: ext says where the rest goes */
  chime__extents_t ext;
  int active; /* a slot is being filled */
  chime__ring_wslot_t w;
  uint64_t seq;           /* server seq of the batch being filled */
  uint64_t *slot_seq;     /* server seq of the batch in each local slot */
  uint64_t received;      /* bytes of it so far */
  uint64_t batches;       /* completed and published */
  _Atomic uint64_t bytes; /* read by chime_stream_stats() */
  /* Credits, under the stream's lock: releases not yet sent, gathered into
   * one Credit of credit_batch. */
  uint32_t credit_pending;
  uint32_t credit_batch;
  uint64_t *released; /* server seqs of the credit_pending releases */
  int closing;        /* chime_stream_close(): send releases at once */
  int bye_sent;       /* a Credit with closing went (resumable streams) */
  /* Resuming after a lost connection (resume.c, mode_stream.c): the old
   * stream's token (Opened's); the seqs of the last 2 x slots releases, a
   * circle (their Credits may have been lost with the connection); the
   * seqs a resuming Open names (at most 3 x slots); releases that earn
   * no credit (the new call lent one slot too many). Under the lock. */
  uint8_t token[16];
  size_t token_len;
  uint64_t *recent;
  uint32_t nrecent, recent_at;
  uint64_t *resume_seqs;
  uint32_t nresume, resume_prefetch;
  uint32_t debt;
  /* connections > 1 (lanes.c): batches arrive on several calls at once,
   * and slots are taken and published through lanes, in seq order;
   * NULL: this call alone, as ever. */
  struct chime__lanes_s *lanes;
} chime__remote_t;

/* slot_seq for a local slot that holds no batch, or the batch of a call
 * that was lost (whose seq means nothing to the new call's server). */
#define CHIME__SEQ_FREE UINT64_MAX
#define CHIME__SEQ_OLD (UINT64_MAX - 1)

/* Copies one received message into the local ring. Returns 0 (publishing the
 * slot when the batch is complete), CHIME_ENOTFOUND when the message is not a
 * chunk, CHIME_EPROTO with err for a chunk that breaks the protocol (wrong
 * total, gap, more batches than credits, ragged offsets that do not hold:
 * ring/extents.h). Never writes outside the slot being filled. */
int chime__remote_chunk(chime__remote_t *r, grpc_byte_buffer *bb, char *err,
                        size_t errlen);
/* Sets what batches look like on the wire: r->ring and r->send_bytes set,
 * spec the stream's (kept). */
void chime__remote_set_spec(chime__remote_t *r, const chime_spec_t *spec);
/* Batches land as the server's slot holds them, laid out as r->wlay
 * (set): r->wire allocated (zeroed, with room for the packed tail) and
 * the spec set to wspec (kept). CHIME_ENOMEM. */
int chime__remote_wire_alloc(chime__remote_t *r, const chime_spec_t *wspec);
/* The batch in r->wire unpacked into the local slot at dst (frames.c):
 * leaves copied, frames decompressed. CHIME_EPROTO with err for a frame
 * that is no frame of its leaf (nothing written past the leaf). */
int chime__frames_unpack(const chime__remote_t *r, uint8_t *dst, char *err,
                         size_t errlen);
/* Gives back a half-filled slot (stream ended mid-batch). */
void chime__remote_abandon(chime__remote_t *r);

#endif
