/* Internal to the client: the stream object and its transports.
 *
 * A stream is a Subscribe call plus a ring the learner reads. How the ring
 * is filled is the transport's business, one table of functions per mode
 * (nng's habit): shm maps the server's ring (mode_shm.c), stream fills a local
 * ring from chunks and pays for them with credits (mode_stream.c). stream.c
 * drives the call and the learner's calls through the table and never asks
 * which mode it is in; stream_open.c chooses the mode, falls back, checks the
 * layout and sets the table. A NULL member is optional: nothing to do.
 * The other end of a stream of batches: src/server/stream.h (one basename, two
 * ends). */
#ifndef CHIME_CLIENT_STREAM_H
#define CHIME_CLIENT_STREAM_H

#include "client/device.h"
#include "client/internal.h"

typedef struct chime__transport_s chime__transport_t;

struct chime_stream_s {
  chime_client_t *client;
  /* A sharded client's stream (union.h): sub-streams on the shards, and
   * nothing of the rest below but what chime__stream_new fills in
   * (client, table, opts); every public stream call (stream_api.c) hands
   * it to the union. NULL otherwise. */
  struct chime__union_s *uni;
  uint32_t fork_gen; /* the client's: the stream is the parent's in a child */
  int pid;           /* the client's process */
  chime_mode_t mode; /* the transport's, once open */
  const chime__transport_t *tp;
  chime_stream_opts_t opts; /* with defaults filled in */
  uint32_t prefetch;
  char table[CHIME_MAX_NAME];
  char fallback[CHIME__ERRLEN];
  int has_fallback;
  chime_spec_t spec; /* the learner's (its ring's) */
  chime_ring_layout_t layout;
  /* Compressed leaves (frames.c): the ones the learner keeps as stored
   * (opts.keep_compressed, copied: "obs,frames"); in stream mode the spec
   * of the server's ring, which the wire follows, when nframed of its
   * leaves travel as stored bytes to decompress here (unframe[i]). */
  char keep_text[CHIME_MAX_LEAVES * CHIME_MAX_NAME];
  chime_spec_t wire_spec;
  uint8_t unframe[CHIME_MAX_LEAVES];
  uint32_t nframed;
  uint32_t framed_steps; /* Layout.framed_steps: windows of T steps, or 0 */
  uint64_t send_bytes;   /* bytes of a slot each batch carries (stream mode) */
  /* Stream mode's window (window.c): the slots the learner asked for
   * (opts.slots may grow past them) and the round trip measured before
   * Open, 0 when none was. */
  uint32_t asked_slots;
  uint64_t rtt_ns;
  uint64_t stream_id;
  chime_ring_t *ring;
  chime__remote_t remote; /* stream mode */
  chime__device_t *dev;   /* a device stream's device end, else NULL */

  chime__rpc_t rpc; /* the Subscribe call */
  pthread_t thread; /* pumps the call once open */
  int thread_started;
  /* Who polls the call (tp->learner_drives, stream.c): whoever holds
   * drive_mu. The learner's thread in next() while its ring is empty; the
   * stream's thread once the learner stayed out of next() for a while. */
  pthread_mutex_t drive_mu;
  pthread_cond_t idle_cv; /* the stream's thread waits here (lock) */
  int in_next;            /* the learner is in next() (lock) */
  int64_t left_ms;        /* when it last left (lock) */
  int closing;            /* close began: the stream's thread drives (lock) */
  /* Close without waiting for the server's OK (a union's sub-stream on a
   * shard set aside for not answering: the wait could only time out). */
  int close_now;
  uint64_t drive_wait_ns; /* next()'s time polling (learner's thread) */
  int notice_shutdown;    /* the server's notice came (receive side) */

  pthread_mutex_t lock; /* the send side (credits), end_code and end_why */
  int ended;            /* the call's status arrived: no more sends */
  int half_closed;      /* close sent the client's half-close */
  /* The learner's policy version (lock), whether it still has to go to
   * the server (a send was in flight), and the table's max_staleness
   * (Opened): next() drops a batch holding an item too far behind it. */
  uint64_t version;
  int version_unsent;
  uint64_t max_staleness;
  uint64_t dropped_stale; /* batches dropped so (the learner's thread) */
  /* A lost connection being resumed (resume.c): set by whoever saw the
   * status, cleared by the stream's thread once a new call is open or it
   * gave up (then the stream ends). Until when, why it was lost, and how
   * many times a new call opened (lock). */
  atomic_int resuming;
  /* The stream's own channel once it resumed (resume.c: a fresh
   * connection), else NULL: the client's. Changed under drive_mu. */
  grpc_channel *chan;
  /* The call stalled (stall.c): cancelled by this side, it is resumed
   * as a lost one. Stall watch: the server's heartbeat interval (0: it
   * sends none, the call is never judged), when the last message came,
   * the recent gaps between messages (whoever polls the call: drive_mu),
   * and when the learner began to expect batches (credits sent when the
   * server owed none: any thread), and when a lane other than the call's
   * own last received (lanes.c's threads). */
  atomic_int stalled;
  uint32_t heartbeat_ms;
  int64_t stall_heard_ms, stall_gap_ms;
  _Atomic int64_t stall_expect_ms, stall_lane_ms;
  int64_t resume_deadline;
  char lost_why[CHIME__ERRLEN];
  uint64_t resumes, resumes_late;
  _Atomic uint64_t stalls; /* calls left as stalled (stall.c) */

  atomic_int end_code;         /* why next fails once the ring is cut off */
  uint64_t batches, bytes;     /* taken by next (learner's thread) */
  char end_why[CHIME__ERRLEN]; /* end_code's sentence (lock) */
  /* Per ring slot: seq + 1 of the batch next() lent from it, 0 when none
   * is lent (learner's thread). Release finds a batch's slot from where
   * its sample info lies and checks it here, so a batch given back twice
   * never gives back the batch lent from that slot since. */
  uint64_t *lent;
  /* A group table's batches (group.h); NULL for any other table. */
  struct chime__group_view_s *grp;
};

struct chime__transport_s {
  chime_mode_t mode;
  /* The learner's next() polls the call itself while nothing is ready (the
   * ring is this process's to fill); else only the stream's thread does. */
  int learner_drives;
  /* Its part of the Open request: mode, prefetch. */
  void (*fill_open)(const chime_stream_t *s, Chime__V1__Open *open);
  /* After Opened passed the layout check: makes s->ring the ring the learner
   * reads. On failure err says why and the state MUST be one fini can free
   * (the ring is destroyed by the caller). *attach_failed: the failure is the
   * same-host attach itself, so auto may fall back to stream mode. */
  int (*setup)(chime_stream_t *s, const Chime__V1__Opened *op,
               int *attach_failed, char *err, size_t errlen);
  /* A message after Opened, on the thread polling the call. 0: taken;
   * CHIME_ENOTFOUND: not the transport's (stream.c reads it as a notice);
   * another code: the stream breaks, err says why. NULL: none are. */
  int (*on_message)(chime_stream_t *s, grpc_byte_buffer *bb, char *err,
                    size_t errlen);
  /* A send completed (on the thread polling the call): the next may go. */
  void (*on_sent)(chime_stream_t *s);
  /* The server said it is shutting down (notice or status). NULL: the
   * server shuts its own ring, which the learner sees. */
  void (*on_shutdown)(chime_stream_t *s);
  /* chime_stream_next found nothing and is about to wait for timeout_ms.
   * Present: next first looks without waiting, calls this, then waits. */
  void (*before_wait)(chime_stream_t *s);
  /* Gives the slot back (the learner's release). MUST NOT block. */
  int (*release)(chime_stream_t *s, uint32_t slot);
  /* Adds the transport's counters to chime_stream_stats(). */
  void (*stats)(const chime_stream_t *s, chime_stream_local_stats_t *out);
  /* chime_stream_close, under s->lock, until it returns 1: sends what the
   * learner still owes the server (the last releases) before the client
   * half-closes. NULL: nothing ever is. */
  int (*flush_locked)(chime_stream_t *s);
  /* chime_stream_close, once the call ended gracefully or the wait for
   * that ran out, before it is cancelled: unblock the stream's thread. */
  void (*close)(chime_stream_t *s);
  /* Frees what setup made, the ring excepted; after the call is torn down.
   * MUST accept any state setup left, and run twice. */
  void (*fini)(chime_stream_t *s);
  /* Resuming after a lost connection (resume.c); NULL: the transport
   * never resumes (shm: the ring is the server's). resume_prepare: the
   * call is over and the caller holds drive_mu; fill_open then adds the
   * resume to the Open. resumed: the new call's Opened, its layout
   * checked, before anything of it is received. */
  void (*resume_prepare)(chime_stream_t *s);
  void (*resumed)(chime_stream_t *s, const Chime__V1__Opened *op);
};

extern const chime__transport_t chime__shm_transport;    /* mode_shm.c */
extern const chime__transport_t chime__remote_transport; /* mode_stream.c */

/* Opens the stream s (opts, prefetch, table set): chooses the mode (auto:
 * shm when the server is on this host and the attach works, else stream,
 * with the reason in s->fallback), runs Subscribe up to Opened, checks the
 * layout and sets up the transport. On success s->tp, s->ring and the call
 * are ready for the stream's thread; on failure nothing is left but s's
 * memory. stream_open.c. */
int chime__stream_attach(chime_stream_t *s, char *err, size_t errlen);

/* --- stream mode's window (window.c) --- */

/* The slots a ring needs so that its lent batches of batch_bytes cover the
 * round trip rtt_ns (docs/remote.md), and over lanes > 1 connections two
 * batches in flight on each, at most max_inflight bytes, never fewer than
 * asked. */
uint32_t chime__window_slots(uint32_t asked, uint64_t batch_bytes,
                             uint64_t rtt_ns, uint64_t max_inflight,
                             uint32_t lanes);
/* The table's info with the GetInfo timed: its round trip in *rtt_ns (the
 * quicker of two when the first took long enough to have connected the
 * channel too). As chime__table_lookup otherwise. */
int chime__window_lookup(chime_stream_t *s, chime_table_info_t *ti,
                         chime_server_info_t **info, uint64_t *rtt_ns,
                         char *err, size_t errlen);
/* Before a stream-mode Open: the slots (opts.slots, prefetch) grown to
 * the window that ti's batches need at rtt_ns, unless the learner set
 * prefetch. */
void chime__window_size(chime_stream_t *s, const chime_table_info_t *ti,
                        uint64_t rtt_ns);
/* The server refused the ring (its budget): 1 with the window halved
 * towards the asked slots, 0 when it already is those. */
int chime__window_shrink(chime_stream_t *s);

/* --- resuming after a lost connection (resume.c) --- */

/* Cuts the learner off the ring: next then reports code, with why as the
 * learner's detail; the first end wins (stream.c). */
void chime__stream_cut(chime_stream_t *s, int code, const char *why);

/* On the call's status (code, text: chime__rpc_result's): 1 when it is a
 * lost connection that the stream resumes (the stream's thread then
 * does: chime__stream_resume), 0 when the stream ends. */
int chime__resume_begin(chime_stream_t *s, int code, const char *text);
/* The stream's thread, once the call is over: 0 when a new call is open
 * (pump it); 1 when there is nothing to resume or the stream is closing;
 * else the CHIME_E* code it gave up with (no server in time, or refused),
 * why then the learner's detail: the caller cuts the stream with both. */
int chime__stream_resume(chime_stream_t *s, char *why, size_t whylen);
/* One resuming Subscribe (stream_open.c): the new call open within wait_ms
 * (waiting for the channel to connect), its layout the old one's; the old
 * call's rpc is destroyed first. On failure err says why and s->rpc is
 * destroyed. */
int chime__stream_reopen(chime_stream_t *s, int wait_ms, char *err,
                         size_t errlen);
/* Destroys the stream's own channel (s->chan), if any: at close, after
 * the call is torn down, and when a resume makes another. */
void chime__resume_fini(chime_stream_t *s);

/* --- a stalled call (stall.c) --- */

/* A message came (whoever polls the call). */
void chime__stall_heard(chime_stream_t *s);
/* A message came on one of the stream's other lanes (any thread): the
 * stream is not stalled while its batches come that way. */
void chime__stall_heard_lane(chime_stream_t *s);
/* Credits were sent; was_owed: the server owed batches before. */
void chime__stall_expect(chime_stream_t *s, int was_owed);
/* Ms until the call counts as stalled (0: it does), INT64_MAX while it
 * is not watched (no heartbeats, nothing expected, resuming). */
int64_t chime__stall_left_ms(const chime_stream_t *s);
/* Whoever polls the call (drive_mu): cancels a stalled call, to be
 * resumed on a fresh connection; 1 when it did. */
int chime__stall_check(chime_stream_t *s);
/* A call opened (or resumed) with the server's heartbeat interval. */
void chime__stall_reset(chime_stream_t *s, uint32_t heartbeat_ms);

/* --- several connections (lanes.c; docs/protocol.md, "Lanes") --- */

typedef struct chime__lanes_s chime__lanes_t;
/* How a lane lands a chunk it received into its batch's slot: the
 * transport's chime__remote_chunk, handed in by the transport (lanes.c
 * knows the ring's producer side, not the chunks' format). */
typedef int (*chime__land_fn)(chime__remote_t *r, grpc_byte_buffer *bb,
                              char *err, size_t errlen);
/* After setup, for connections n > 1: s->remote.lanes with a client (a
 * connection) for each lane 1..n-1, nothing started, each landing its
 * chunks with land. CHIME_ENOMEM, or the client's code, with err; what was
 * made goes in chime__lanes_free. */
int chime__lanes_create(chime_stream_t *s, uint32_t n, chime__land_fn land,
                        char *err, size_t errlen);
/* Each lane Joins stream id (the remote's token) on a call of its own,
 * read by a thread of its own; batches then publish in seq order from
 * 0. 0, or the first failure's code (the lanes started stay; the stream
 * goes on over them). */
int chime__lanes_start(chime_stream_t *s, uint64_t id);
/* Cancels the lanes' calls and joins their threads; their half-filled
 * slots and the whole batches not yet published are given back. No-op
 * without lanes. */
void chime__lanes_stop(chime_stream_t *s);
/* Stops and frees s->remote.lanes (NULL-safe). */
void chime__lanes_free(chime_stream_t *s);
/* The ring's producer side for chime__remote_chunk on any lane's
 * thread: a slot (credits keep one free; CHIME_ESHUTDOWN once the ring
 * is or the lanes stop), a half-filled one given back, and a whole batch
 * published once every batch before it is (slot_seq set then).
 * CHIME_EPROTO with err for a seq outside the ring's window or twice. */
int chime__lanes_acquire(chime__lanes_t *ls, chime__ring_wslot_t *w);
void chime__lanes_abandon(chime__lanes_t *ls, uint32_t slot);
int chime__lanes_publish(chime__lanes_t *ls, uint32_t slot, uint64_t seq,
                         char *err, size_t errlen);
/* For tests: cancels lane's call (1..connections-1) as a lost
 * connection would end it. CHIME_EINVAL when there is no such lane. */
int chime__stream_lane_cancel(chime_stream_t *s, uint32_t lane);
/* For tests: the chunks lane (1..) received, 0 for no such lane. */
uint64_t chime__stream_lane_chunks(chime_stream_t *s, uint32_t lane);
/* The stream's own remote: its credits and counters, every lane's. */
chime__remote_t *chime__lanes_remote(chime__lanes_t *ls);

/* --- compressed leaves (frames.c) --- */

/* The keep list as Open carries it. */
typedef struct {
  uint32_t n;
  char names[CHIME_MAX_LEAVES][CHIME_MAX_NAME];
  char *ptrs[CHIME_MAX_LEAVES];
} chime__keep_t;

/* Copies the learner's keep_compressed text into s (opts then points at
 * the copy). CHIME_EINVAL with err when it does not fit. */
int chime__frames_keep_copy(chime_stream_t *s, const char *text, char *err,
                            size_t errlen);
/* s's keep list split at commas. CHIME_EINVAL with err for an empty or
 * too long name, or too many. */
int chime__frames_keep_names(const chime_stream_t *s, chime__keep_t *k,
                             char *err, size_t errlen);
/* After the layout check (s->spec the server's ring's): the framed leaves
 * Opened names checked and taken (s->spec becomes the learner's, the
 * server's kept in wire_spec, s->layout the local ring's), and every leaf
 * the learner keeps compressed checked to come as stored (CHIME_ENOTSUP
 * from a server that ignored the ask). CHIME_EPROTO for framed leaves
 * unlike the spec. */
int chime__frames_opened(chime_stream_t *s, const Chime__V1__Layout *l,
                         char *err, size_t errlen);

/* --- the one-server stream (stream.c) ---
 *
 * The layer under the public calls (stream_api.c) and a sharded client's
 * union (union*.c), whose sub-streams are these. Contracts are the public
 * calls' (chime.h) with the arguments checked; each checks the fork
 * generation itself (chime__stream_inherited) and sets the calling
 * thread's detail on failure. */

/* A stream object on client for table, opts (defaults filled in, checked)
 * copied, nothing opened: what chime__single_open fills in, or a sharded
 * stream's own object. Freed by chime__single_close. CHIME_ENOMEM with
 * err. */
int chime__stream_new(chime_stream_t **out, chime_client_t *client,
                      const char *table, const chime_stream_opts_t *opts,
                      char *err, size_t errlen);
/* Opens a one-server stream (client has no shards; opts filled in and
 * checked as chime_stream_open does). */
int chime__single_open(chime_stream_t **out, chime_client_t *client,
                       const char *table, const chime_stream_opts_t *opts);
int chime__single_next(chime_stream_t *s, chime_batch_t *out, int timeout_ms);
int chime__single_set_version(chime_stream_t *s, uint64_t version);
int chime__single_release(chime_stream_t *s, const chime_batch_t *batch);
int chime__single_wait(chime_stream_t *s, const chime_batch_t *batch,
                       void *cuda_stream);
int chime__single_stats(const chime_stream_t *s,
                        chime_stream_local_stats_t *out);
chime_mode_t chime__single_mode(const chime_stream_t *s);
const char *chime__single_fallback_reason(const chime_stream_t *s);
/* Closes what is open of s and frees it (any state chime__stream_new or
 * chime__single_open left). NULL-safe. */
void chime__single_close(chime_stream_t *s);
/* 0, or CHIME_ENOTSUP with the detail set in a child of fork(): the
 * stream is the parent's (fork.h). */
int chime__stream_inherited(const chime_stream_t *s);

/* chime_stream_next without polling the call: a batch from the ring if one
 * comes within timeout_ms, the stream's thread receiving meanwhile (stream
 * mode), batches stale for the learner's version dropped as next() drops
 * them (each drop waits timeout_ms again). The sharded stream looks at many
 * sub-streams this way while it waits for any of them, and leaves each one's
 * receiving to its thread. stream.c. */
int chime__stream_take(chime_stream_t *s, chime_batch_t *out, int timeout_ms);

#endif
