/* Internal: the server's shared state, read by its handlers; its life
 * (create, stop, destroy) is server.c. Threads, a
 * fixed number whatever the number of streams: the completion-queue
 * threads (all gRPC completions), one insert worker per table, the sampler
 * pool (sampler_threads workers and a watcher) that fills every ring, the
 * handoff thread (libuv: Unix socket, pidfds) and, for chimed, the
 * acceptor. Locks are never held while calling into gRPC except a call's
 * own mutex around start_batch; a stream's mutexes are never held while
 * taking a call's. */
#ifndef CHIME_SERVER_STATE_H
#define CHIME_SERVER_STATE_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "chime/chime.h"
#include "server/call.h"
#include "server/checkpointer.h"
#include "server/config.h"
#include "server/registry.h"
#include "server/staging.h"
#include "replay/table.h"
#include "wire/method.h"
#include "wire/status.h"

/* Most threads polling the completion queue (default one per two CPUs,
 * service.c; CHIME_CQ_THREADS overrides). Handlers are thread-safe; more
 * pollers let calls' work (an insert's copy) run in parallel. */
#ifndef CHIME__CQ_THREADS
#define CHIME__CQ_THREADS 4
#endif

typedef struct chime__stream_s chime__stream_t;

/* --- the server (server.c) --- */

typedef struct chime__inserter_s chime__inserter_t;
typedef struct chime__pool_s chime__pool_t;

struct chime_server_s {
  chime__config_t cfg;
  uint32_t ntables;
  chime__table_t *tables[CHIME__MAX_TABLES];
  chime__inserter_t *inserters[CHIME__MAX_TABLES];
  struct chime__handoff_s *handoff;
  chime__pool_t *sampler;             /* fills every stream's ring */
  struct chime__acceptor_s *acceptor; /* chime_server_listen only */
  struct chime__metrics_s *metrics;   /* the Prometheus endpoint, or NULL */
  struct chime__ckpter_s *ckpter;     /* checkpoints: calls and interval */
  struct chime__beat_s *beat;         /* stream mode's heartbeats */
  chime__ckpter_stats_t ckpt_stats;   /* under mu */
  char metrics_addr[CHIME__MAX_ADDR]; /* where it was bound, "" */
  /* Where tables' key reservations go (server/keyres.h): the checkpoint
   * dir, else the dir of the checkpoint restored; "": none. */
  char keys_dir[CHIME__MAX_PATH + 64];
  /* With TLS: gRPC's handler for connections the acceptor hands over
   * (server/tls.h); written by gRPC through a channel arg, so it lives as
   * long as the grpc_server. */
  void *tls_handler;

  /* The call machinery's part (call.h): the grpc_server, its queues, the
   * registered methods, each method's handler (methods.c, set by
   * server.c), the admission check (auth.h) and the live calls, under mu.
   * Insert calls' queue, host.insert_cq, is chime's own in either mode,
   * drained by its own thread (service.c); host.insert_calls counts the
   * Insert calls open now. */
  chime__callhost_t host;
  pthread_t insert_thread;
  int insert_thread_started, insert_quit; /* insert_quit: under mu */
  int owns_grpc;
  /* Health/Check is registered (chimed's own grpc_server, service.c). */
  int serve_health;
  pthread_t cq_thread[CHIME__CQ_THREADS];
  int cq_threads; /* started */
  int started;

  pthread_mutex_t mu;
  pthread_cond_t cond;
  chime__registry_t streams; /* open streams, their count and ring bytes */
  atomic_int stopping;
  chime__staging_t staging; /* staged insert bytes, parked Insert calls */

  char boot_id[64];
  char hostname[256];
  uint64_t instance; /* GetInfo's: random, nonzero, one per server object */
};

/* The table called name (and its index), or NULL. */
static inline chime__table_t *
chime__server_table(chime_server_t *srv, const char *name, uint32_t *index) {
  for (uint32_t i = 0; i < srv->ntables; i++) {
    if (strcmp(chime__table_config(srv->tables[i])->name, name) == 0) {
      if (index != NULL)
        *index = i;
      return srv->tables[i];
    }
  }
  return NULL;
}

#endif
