/* chime.v1.Chime on a grpc_server: method registration before start, and the
 * threads that take completions off the queues and run each tag's callback.
 *
 * New calls are announced on `cq`, and every call but Insert completes
 * there; a stream's fill runs on the cq thread that completed its send
 * (stream.c). An Insert call's operations complete on `insert_cq`, drained
 * by a thread of its own, so an insert's copy into its table runs beside
 * the streams' sends and fills instead of queued behind them. That thread
 * waits in gRPC (and so polls sockets, as every thread in a queue's next()
 * does) only while an Insert call is open: a second poller costs a stream
 * a wake-up per event, gRPC 1.51 (epoll1) handing the polling role between
 * pollers on every event. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/detail.h"
#include "server/service.h"

int chime_server_register(chime_server_t *srv, struct grpc_server *server,
                          struct grpc_completion_queue *cq) {
  if (srv == NULL || server == NULL || cq == NULL || srv->host.gs != NULL)
    return chime__detail(CHIME_EINVAL,
                         "chime_server_register: needs a server not yet "
                         "registered, a grpc_server and a completion queue");
  for (int m = 0; m < CHIME__M_COUNT; m++) {
    /* grpc.health.v1.Health is one per grpc_server: an application's
     * server has its own (gRPC core refuses a second registration of the
     * path, and ours would answer for the whole application), so only
     * chimed's serves it (docs/protocol.md, Health). */
    if (m == CHIME__M_HEALTH && !srv->serve_health)
      continue;
    int unary = chime__method_one_request(m);
    srv->host.methods[m] = grpc_server_register_method(
        server, chime__method_path[m], NULL,
        unary ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
              : GRPC_SRM_PAYLOAD_NONE,
        0);
    if (srv->host.methods[m] == NULL)
      return chime__detailf(CHIME_EEXIST,
                            "chime_server_register: %s is registered on "
                            "this grpc_server already",
                            chime__method_path[m]);
  }
  /* Only bound to calls, never announcing one: not the server's. */
  srv->host.insert_cq = grpc_completion_queue_create_for_next(NULL);
  if (srv->host.insert_cq == NULL)
    return chime__detail(CHIME_ENOMEM,
                         "chime_server_register: cannot create a queue");
  srv->host.gs = server;
  srv->host.cq = cq;
  return 0;
}

/* One completion (or none by the deadline): its tag's callback. 0 once the
 * queue is shut down and empty. */
static int run_next(grpc_completion_queue *cq, gpr_timespec deadline) {
  grpc_event ev = grpc_completion_queue_next(cq, deadline, NULL);
  if (ev.type == GRPC_QUEUE_SHUTDOWN)
    return 0;
  if (ev.type == GRPC_OP_COMPLETE) {
    chime__tag_t *tag = ev.tag;
    tag->fn(tag, ev.success);
  }
  return 1;
}

static void *cq_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-cq");
  chime_server_t *srv = arg;
  while (run_next(srv->host.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC)))
    ;
  return NULL;
}

/* How long the insert thread stays in gRPC after the last Insert call
 * ended, in case another comes. */
#define INSERT_LINGER_MS 100

static void *insert_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-cq-ins");
  chime_server_t *srv = arg;
  for (;;) {
    pthread_mutex_lock(&srv->mu);
    while (srv->host.insert_calls == 0 && !srv->insert_quit)
      pthread_cond_wait(&srv->cond, &srv->mu);
    int quit = srv->insert_quit;
    pthread_mutex_unlock(&srv->mu);
    gpr_timespec deadline =
        quit ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
             : gpr_time_add(
                   gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis(INSERT_LINGER_MS, GPR_TIMESPAN));
    if (!run_next(srv->host.insert_cq, deadline))
      break;
  }
  return NULL;
}

int chime__service_start(chime_server_t *srv) {
  /* Two calls per method waiting, so a burst of connects is not serialised
   * behind the re-request. */
  /* Unregistered methods are the application's business when embedded. */
  int last = srv->owns_grpc ? CHIME__M_COUNT : CHIME__M_COUNT - 1;
  for (int m = 0; m <= last; m++) {
    if (m < CHIME__M_COUNT && srv->host.methods[m] == NULL)
      continue; /* not registered (health, embedded) */
    for (int k = 0; k < 2; k++) {
      int rc = chime__request_call(&srv->host, m);
      if (rc != 0)
        return rc;
    }
  }
  /* One poller per two CPUs: gRPC (1.51, epoll1) lets one poller at a time
   * wait for sockets and hands that role to another waiting poller on each
   * event, a wake-up each; pollers share the CPUs with the fill pool and
   * the inserters. CHIME_CQ_THREADS overrides (a tuning knob). */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int nthreads = cpus >= 2 ? (int)(cpus / 2) : 1;
  if (nthreads > CHIME__CQ_THREADS)
    nthreads = CHIME__CQ_THREADS;
  const char *env = getenv("CHIME_CQ_THREADS");
  if (env != NULL && atoi(env) >= 1 && atoi(env) <= CHIME__CQ_THREADS)
    nthreads = atoi(env);
  if (srv->host.insert_cq != NULL) {
    if (pthread_create(&srv->insert_thread, NULL, insert_main, srv) != 0)
      return CHIME_ESYS;
    srv->insert_thread_started = 1;
  }
  for (int i = 0; i < nthreads; i++) {
    if (pthread_create(&srv->cq_thread[i], NULL, cq_main, srv) != 0)
      return srv->cq_threads > 0 ? 0 : CHIME_ESYS;
    srv->cq_threads++;
  }
  return 0;
}

void chime__service_join(chime_server_t *srv) {
  for (int i = 0; i < srv->cq_threads; i++)
    pthread_join(srv->cq_thread[i], NULL);
  srv->cq_threads = 0;
  if (srv->host.insert_cq == NULL)
    return;
  /* The grpc_server is shut down and its calls are gone: nothing is left
   * to complete here. */
  pthread_mutex_lock(&srv->mu);
  srv->insert_quit = 1;
  pthread_cond_broadcast(&srv->cond);
  pthread_mutex_unlock(&srv->mu);
  grpc_completion_queue_shutdown(srv->host.insert_cq);
  if (srv->insert_thread_started)
    pthread_join(srv->insert_thread, NULL);
  else
    while (run_next(srv->host.insert_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC)))
      ;
  srv->insert_thread_started = 0;
  grpc_completion_queue_destroy(srv->host.insert_cq);
  srv->host.insert_cq = NULL;
}
