/* HTTP/2 keepalive as both ends of chime set it: a peer that stops
 * answering (hung, stopped, partitioned) is dropped with its calls after
 * time_ms + timeout_ms, even on a call that carries no data (a shm learner's
 * Subscribe). gRPC stops pinging after two pings without data unless told
 * otherwise, and a server answers too-frequent pings with GOAWAY ("too many
 * pings") unless it allows them: both are lifted here, on both ends. */
#ifndef CHIME_COMMON_KEEPALIVE_H
#define CHIME_COMMON_KEEPALIVE_H

#include <stddef.h>

#include <grpc/grpc.h>

#define CHIME__KEEPALIVE_ARGS 6

/* Fills CHIME__KEEPALIVE_ARGS args; time_ms 0 turns pings off. Returns how
 * many it filled. */
static inline size_t chime__keepalive_args(grpc_arg *a, int time_ms,
                                           int timeout_ms) {
  static const char *const keys[CHIME__KEEPALIVE_ARGS] = {
      GRPC_ARG_KEEPALIVE_TIME_MS,
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
      GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      GRPC_ARG_HTTP2_MAX_PING_STRIKES,
  };
  const int values[CHIME__KEEPALIVE_ARGS] = {
      time_ms > 0 ? time_ms : 0x7fffffff, /* INT_MAX: gRPC's "never" */
      timeout_ms,
      1,
      0,
      0,
      0};
  for (size_t i = 0; i < CHIME__KEEPALIVE_ARGS; i++) {
    a[i].type = GRPC_ARG_INTEGER;
    a[i].key = (char *)keys[i];
    a[i].value.integer = values[i];
  }
  return CHIME__KEEPALIVE_ARGS;
}

#endif
