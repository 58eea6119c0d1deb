/* The gRPC methods of chime.v1.Chime, and the standard health check
 * chimed serves beside them (grpc.health.v1.Health/Check, proto/health.proto).
 * protoc-c generates message code only, so the paths and which methods
 * stream are written by hand, here, once for both ends. */
#ifndef CHIME_WIRE_METHOD_H
#define CHIME_WIRE_METHOD_H

enum {
  CHIME__M_GETINFO,
  CHIME__M_STATS,
  CHIME__M_INSERT,
  CHIME__M_SUBSCRIBE,
  CHIME__M_MUTATE, /* MutatePriorities */
  CHIME__M_CHECKPOINT,
  CHIME__M_SET_VERSION, /* SetVersion */
  CHIME__M_EXPORT,      /* Export: one request, a stream of chunks */
  /* grpc.health.v1.Health/Check: chimed's own grpc_server only (an
   * application's server has its own health service, docs/protocol.md). */
  CHIME__M_HEALTH,
  CHIME__M_COUNT
};

/* "/chime.v1.Chime/GetInfo", ..., "/grpc.health.v1.Health/Check", indexed
 * by CHIME__M_*. */
extern const char *const chime__method_path[CHIME__M_COUNT];

/* The largest request message a method takes (docs/protocol.md), by
 * CHIME__M_*: the server refuses a larger one with INVALID_ARGUMENT before
 * it parses anything. GetInfo, Stats and Checkpoint carry nothing, a
 * health check a service name, and
 * Subscribe's messages are small (an Open, or credits naming at most a
 * ring's slots), while protobuf-c, which reads them, keeps every unknown
 * field it meets: 64 MiB of 2-byte fields cost it seconds and gigabytes.
 * Insert and MutatePriorities are read by hand (linear, nothing kept per
 * unknown field): 0, the whole message limit (64 MiB). */
extern const unsigned chime__method_max_request[CHIME__M_COUNT];

/* GetInfo, Stats, MutatePriorities, Checkpoint, SetVersion and the health
 * Check are
 * unary; Insert and Subscribe are bidi streams; Export takes one request
 * and streams its answer. */
static inline int chime__method_unary(int method) {
  return method == CHIME__M_GETINFO || method == CHIME__M_STATS ||
         method == CHIME__M_MUTATE || method == CHIME__M_CHECKPOINT ||
         method == CHIME__M_SET_VERSION || method == CHIME__M_HEALTH;
}

/* The methods whose one request arrives with the call (the server reads
 * it before the handler starts): the unary ones and Export. */
static inline int chime__method_one_request(int method) {
  return chime__method_unary(method) || method == CHIME__M_EXPORT;
}

#endif
