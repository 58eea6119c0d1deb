/* chime.v1.Chime on a grpc_server: method registration before start, and the
 * thread that polls the completion queue and runs each tag's callback. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "server/server.h"

int chime_service_register(chime_server_t *srv, struct grpc_server *server,
                           struct grpc_completion_queue *cq) {
  if (srv == NULL || server == NULL || cq == NULL || srv->gs != NULL)
    return CHIME_EINVAL;
  for (int m = 0; m < CHIME__M_COUNT; m++) {
    int unary = chime__method_unary(m);
    srv->methods[m] = grpc_server_register_method(
        server, chime__method_path[m], NULL,
        unary ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
              : GRPC_SRM_PAYLOAD_NONE,
        0);
    if (srv->methods[m] == NULL)
      return CHIME_EEXIST;
  }
  srv->gs = server;
  srv->cq = cq;
  return 0;
}

static void *cq_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-cq");
  chime_server_t *srv = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
    if (ev.type != GRPC_OP_COMPLETE)
      continue;
    chime__tag_t *tag = ev.tag;
    tag->fn(tag, ev.success);
  }
  return NULL;
}

int chime__service_start(chime_server_t *srv) {
  /* Two calls per method waiting, so a burst of connects is not serialised
   * behind the re-request. */
  /* Unregistered methods are the application's business when embedded. */
  int last = srv->owns_grpc ? CHIME__M_COUNT : CHIME__M_COUNT - 1;
  for (int m = 0; m <= last; m++) {
    for (int k = 0; k < 2; k++) {
      int rc = chime__request_call(srv, m);
      if (rc != 0)
        return rc;
    }
  }
  /* One poller per two CPUs: gRPC (1.51, epoll1) lets one poller at a time
   * wait for sockets and hands that role to another waiting poller on each
   * event, a wake-up each; pollers share the CPUs with the sampler pool and
   * the inserters. CHIME_CQ_THREADS overrides (a tuning knob). */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int nthreads = cpus >= 2 ? (int)(cpus / 2) : 1;
  if (nthreads > CHIME__CQ_THREADS)
    nthreads = CHIME__CQ_THREADS;
  const char *env = getenv("CHIME_CQ_THREADS");
  if (env != NULL && atoi(env) >= 1 && atoi(env) <= CHIME__CQ_THREADS)
    nthreads = atoi(env);
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
}
