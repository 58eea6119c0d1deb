/* Internal: the embedded server's objects shared by its files. Threads, a
 * fixed number whatever the number of streams: the completion-queue
 * threads (all gRPC completions), one insert worker per table, the sampler
 * pool (sampler_threads workers and a watcher) that fills every ring, the
 * handoff thread (libuv: Unix socket, pidfds) and, for chimed, the
 * acceptor. Locks are never held while calling into gRPC except a call's
 * own mutex around start_batch; a stream's mutexes are never held while
 * taking a call's. */
#ifndef CHIME_SERVER_SERVER_H
#define CHIME_SERVER_SERVER_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chime/chime.h"
#include "server/checkpointer.h"
#include "server/config.h"
#include "server/staging.h"
#include "replay/table.h"
#include "wire/method.h"
#include "wire/status.h"

#define CHIME__MAX_MESSAGE_BYTES (64 << 20)
/* Stream mode's chunk payload, so that every message stays under 1 MiB
 * (the size gRPC's HTTP/2 writer aims a write at, chttp2's
 * target_write_size): a batch sent as one message of just over 1 MiB cost
 * chimed's sender 10-25% more per byte than the same batch as two smaller
 * messages; why is not established (docs/benchmarks.md, "Chunks under
 * 1 MiB"). The last chunk may carry a tail of CHIME__CHUNK_TAIL_BYTES
 * more (sender.c), plus its header and the HTTP/2 frame headers. */
#define CHIME__CHUNK_BYTES (896u << 10)
/* A batch's last bytes up to this many ride in its last chunk. */
#define CHIME__CHUNK_TAIL_BYTES (CHIME__CHUNK_BYTES / 16)
_Static_assert(CHIME__CHUNK_BYTES + CHIME__CHUNK_TAIL_BYTES + (64u << 10) <=
                   (1u << 20),
               "a chunk message must stay under gRPC's 1 MiB write target");
#define CHIME__MAX_STREAMS 1024
/* Room for an error meant for a client: the longest is a pinning error
 * (CHIME_PIN_ERRLEN, it lists the whole ladder) behind a short prefix. */
#define CHIME__CLIENT_ERRLEN (CHIME_PIN_ERRLEN + 256)
/* Most threads polling the completion queue (default one per two CPUs,
 * service.c; CHIME_CQ_THREADS overrides). Handlers are thread-safe; more
 * pollers let calls' work (an insert's copy) run in parallel. */
#ifndef CHIME__CQ_THREADS
#define CHIME__CQ_THREADS 4
#endif

/* --- calls (call.c) --- */

typedef struct chime__tag_s {
  void (*fn)(struct chime__tag_s *tag, int ok);
} chime__tag_t;

typedef struct chime__call_s chime__call_t;

typedef struct {
  /* The call arrived (unary: c->payload holds the request). */
  void (*on_start)(chime__call_t *c);
  /* A message (owned by the handler), or NULL when the client closed its
   * side or the call failed. */
  void (*on_message)(chime__call_t *c, grpc_byte_buffer *bb);
  /* The call is over (status sent, or cancelled / client gone). */
  void (*on_close)(chime__call_t *c);
  /* The server is stopping: finish the call soon with UNAVAILABLE. */
  void (*on_stop)(chime__call_t *c);
  /* Last reference gone: free c->state. */
  void (*on_free)(chime__call_t *c);
  /* A send completed and nothing is queued: the handler may queue more
   * (from the completion-queue thread, no lock held; may be NULL). */
  void (*on_sent)(chime__call_t *c);
} chime__call_vt_t;

typedef struct chime__send_s chime__send_t;

struct chime__call_s {
  chime_server_t *srv;
  int method;
  const chime__call_vt_t *vt;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details; /* unregistered methods only */
  grpc_byte_buffer *payload;
  chime__tag_t req_tag, recv_tag, send_tag, close_tag;
  pthread_mutex_t mu;
  int refs;
  grpc_byte_buffer *recv_bb;
  int cancelled;
  int closed;
  int recving;
  int sending;
  int meta_sent;
  int finishing;
  chime__send_t *q_head, *q_tail, *inflight;
  chime__call_t *prev, *next; /* server's live calls */
  void *state;
};

void chime__call_ref(chime__call_t *c);
void chime__call_unref(chime__call_t *c);
/* Asks for the next message (no-op once finishing or closed). */
void chime__call_recv(chime__call_t *c);
/* Queues a message (takes bb). CHIME_ECLOSED once finishing or closed. */
int chime__call_send(chime__call_t *c, grpc_byte_buffer *bb);
/* Whether a send is in flight (on_sent follows its completion). */
int chime__call_sending(chime__call_t *c);
/* Packs a protobuf-c message and queues it. */
int chime__call_send_msg(chime__call_t *c, const void *protobuf_c_msg);
/* Queues the final status after what is queued; later sends fail. err is
 * the CHIME_E* code (CHIME_OK: success): the status is the one it maps to
 * (src/wire/status.c), and a failure carries err itself in the trailing
 * metadata, which is what clients read. The details are for people and are
 * never cut (clients raise gRPC's metadata limit to match). */
void chime__call_finish(chime__call_t *c, chime_errno_t err, const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));
/* The same with a status other than err's own, for a refusal the protocol
 * gave its own status (docs/protocol.md: a resend outside the window is
 * FAILED_PRECONDITION; clients hear err). */
void chime__call_finish_as(chime__call_t *c, chime_errno_t err,
                           grpc_status_code status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Drops queued messages not yet handed to gRPC (nothing once the final
 * status is queued). */
void chime__call_drop_queued(chime__call_t *c);
/* Reads a whole message into one slice (a copy when it came in pieces). */
int chime__bb_read(grpc_byte_buffer *bb, grpc_slice *out);
/* Requests the next call of `method` (CHIME__M_COUNT: any unregistered
 * method, answered UNIMPLEMENTED). */
int chime__request_call(chime_server_t *srv, int method);

/* --- streams (stream.c) --- */

typedef struct chime__stream_s chime__stream_t;

/* --- the server (server.c) --- */

typedef struct chime__inserter_s chime__inserter_t;
typedef struct chime__pool_s chime__pool_t;
typedef struct chime__handoff_s chime__handoff_t;

struct chime_server_s {
  chime__config_t cfg;
  uint32_t ntables;
  chime__table_t *tables[CHIME__MAX_TABLES];
  chime__inserter_t *inserters[CHIME__MAX_TABLES];
  chime__handoff_t *handoff;
  chime__pool_t *sampler;             /* fills every stream's ring */
  struct chime__acceptor_s *acceptor; /* chime_server_listen only */
  struct chime__metrics_s *metrics;   /* the Prometheus endpoint, or NULL */
  struct chime__ckpter_s *ckpter;     /* checkpoints: calls and interval */
  chime__ckpter_stats_t ckpt_stats;   /* under mu */
  char metrics_addr[CHIME__MAX_ADDR]; /* where it was bound, "" */
  /* With TLS: gRPC's handler for connections the acceptor hands over
   * (server/tls.h); written by gRPC through a channel arg, so it lives as
   * long as the grpc_server. */
  void *tls_handler;

  grpc_server *gs;
  grpc_completion_queue *cq;
  /* Insert calls' queue and its thread (service.c), chime's own in either
   * mode; insert_calls (under mu) counts the Insert calls open now. */
  grpc_completion_queue *insert_cq;
  pthread_t insert_thread;
  int insert_thread_started, insert_quit;
  uint32_t insert_calls;
  int owns_grpc;
  void *methods[CHIME__M_COUNT];
  pthread_t cq_thread[CHIME__CQ_THREADS];
  int cq_threads; /* started */
  int started;

  pthread_mutex_t mu;
  pthread_cond_t cond;
  chime__call_t *calls; /* live calls */
  uint32_t ncalls;
  chime__stream_t *streams;
  uint32_t nstreams;
  uint64_t ring_bytes;
  uint64_t next_stream_id;
  atomic_int stopping;
  chime__staging_t staging; /* staged insert bytes, parked Insert calls */

  char boot_id[64];
  char hostname[256];
};

chime__table_t *chime__server_table(chime_server_t *srv, const char *name,
                                    uint32_t *index);

/* --- per-method handlers --- */
extern const chime__call_vt_t chime__info_vt;
extern const chime__call_vt_t chime__stats_vt;
extern const chime__call_vt_t chime__mutate_vt;
extern const chime__call_vt_t chime__checkpoint_vt;
extern const chime__call_vt_t chime__insert_vt;
extern const chime__call_vt_t chime__subscribe_vt;

/* insert.c: one worker thread per table applies inserts in arrival order. */
int chime__inserter_create(chime__inserter_t **out, chime_server_t *srv,
                           chime__table_t *t);
void chime__inserter_destroy(chime__inserter_t *w);

/* service.c */
int chime__service_start(chime_server_t *srv);
/* Returns once the completion queue was shut down and drained; ends the
 * insert queue and its thread too (safe when never started). */
void chime__service_join(chime_server_t *srv);
/* Where a call of `method` completes: an Insert on the insert queue. */
grpc_completion_queue *chime__service_call_cq(chime_server_t *srv, int method);
#endif
