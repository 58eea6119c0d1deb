/* chime's references on gRPC, counted in one place for the client and the
 * embedded server (grpcref.c).
 *
 * gRPC is reference counted: each grpc_init() is paired with one
 * grpc_shutdown(), and the last one stops gRPC's threads. But a channel
 * takes a reference of its own and drops it only when it is really
 * destroyed, which can be well after grpc_channel_destroy() returned (a
 * subchannel waiting out its reconnect backoff: gRPC stayed initialized,
 * all its threads running, about 1 s after chime_client_destroy of a
 * client with a shard that refused connections). Its last grpc_shutdown()
 * then runs on one of gRPC's own threads, which hands the teardown to yet
 * another detached thread, while a program that returned from main() runs
 * exit()'s C++ destructors (the likely way chimectl was killed by SIGSEGV
 * at exit, 2 runs in 300: issue 33). So when chime gives back its last
 * reference on a gRPC that chime started, it waits until
 * gRPC has wound down entirely, bounded by CHIME__GRPC_DRAIN_MS. */
#ifndef CHIME_WIRE_GRPCREF_H
#define CHIME_WIRE_GRPCREF_H

/* How long the last release waits for gRPC's own references (channels
 * being destroyed) to go. Past it the release returns anyway: something
 * else (the application, which then owns gRPC's end) holds gRPC. */
#define CHIME__GRPC_DRAIN_MS 2000

/* grpc_init(), counted. The first reference of a run of chime users
 * notes whether gRPC was already running (the application's own use):
 * then gRPC's end is the application's, and no release waits. */
void chime__grpc_hold(void);
/* grpc_shutdown(), counted: a gRPC call (the client makes it inside its
 * fork gate). 1 when it was the last of a run that chime started: then
 * call chime__grpc_drain() (outside the gate: it may wait). */
int chime__grpc_release(void);
/* Returns once gRPC is not initialized any more (its teardown over, its
 * threads joined), after CHIME__GRPC_DRAIN_MS, or at once when a chime
 * user holds gRPC again. Call it on an application thread, not one of
 * gRPC's (whose teardown would wait for it). */
void chime__grpc_drain(void);
/* In a child of fork(): the lock starts afresh (the parent's references
 * stay counted; gRPC inherited them too). */
void chime__grpc_ref_child(void);

#endif
