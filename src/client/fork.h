/* Internal to the client: fork() and the client library (fork.c).
 *
 * gRPC keeps process-wide state (its poller's epoll set, wakeup fds, timer
 * and executor threads, every channel's sockets) that a child of fork()
 * inherits. Left alone, a child that makes its own client shares the
 * parent's epoll set (each steals the other's edge-triggered events: the
 * parent's next call times out, a child's stream hangs) and, through
 * gRPC's global subchannel pool, even the parent's connection (the child's
 * frames corrupt the parent's HTTP/2 stream; client.c gives every channel
 * its own pool). So, as gRPC's doc/fork_support.md asks:
 *
 * - fork support is switched on (GRPC_ENABLE_FORK_SUPPORT, for the
 *   grpc_init that starts gRPC in this process, unless the application set
 *   it), and pthread_atfork handlers call grpc_prefork(),
 *   grpc_postfork_parent() and grpc_postfork_child(). In the child gRPC
 *   then closes its inherited fds and starts a fresh poller and threads.
 * - grpc_prefork() does nothing ("skipping fork() handlers") while any
 *   thread is inside gRPC, and chime's threads wait in gRPC for long (a
 *   shm stream's thread always). So every gRPC call the client library
 *   makes passes a gate: the prepare handler closes it and waits until no
 *   thread is inside, and only then calls grpc_prefork(). Waits on a
 *   completion queue run in slices of GATE_SLICE_MS and step out between
 *   them while the gate is closed. (Waking them at once with an event
 *   posted on their queue, a connectivity watch with a deadline in the
 *   past, left the watch's timer pending across the fork and crashed the
 *   parent.) Threads stopped at the gate go on after the fork, in the
 *   parent; in the child they do not exist.
 * - Objects made before a fork belong to the parent: each records the fork
 *   generation it was made in, and in a child every call on it fails at
 *   once with CHIME_ENOTSUP (destroy and close free the child's copy and
 *   touch nothing the parent shares: no gRPC, no ring words, no thread
 *   join).
 *
 * Lock order: any chime lock (a stream's lock, drive_mu) before the gate; a
 * thread inside the gate never waits for another chime thread except on a
 * completion queue. */
#ifndef CHIME_CLIENT_FORK_H
#define CHIME_CLIENT_FORK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

/* Incremented in every child of fork() (once chime_client_create ran in
 * the process). */
extern _Atomic uint32_t chime__fork_generation;

static inline uint32_t chime__fork_gen(void) {
  return atomic_load_explicit(&chime__fork_generation, memory_order_relaxed);
}

/* Once per process: the atfork handlers, and the grpc_init of the first
 * client with fork support on. Then grpc_init(). 0, or CHIME_ENOTSUP with
 * err (may be NULL) when this process is a child forked in a way that left
 * gRPC unusable (fork support off, or gRPC busy at the fork). */
int chime__fork_grpc_init(char *err, size_t errlen);

/* CHIME_ENOTSUP with a sentence in err when an object made in fork
 * generation `gen` (by process `pid`) is used in another one; else 0. */
int chime__fork_check(uint32_t gen, int pid, const char *what, char *err,
                      size_t errlen);

/* Around every gRPC call: enter waits while a fork is being prepared.
 * Nestable (per thread). */
void chime__gate_enter(void);
void chime__gate_leave(void);

/* grpc_completion_queue_next() through the gate, in slices: a fork waits
 * at most one slice for it. */
#define CHIME__GATE_SLICE_MS 50
grpc_event chime__gate_next(grpc_completion_queue *cq, gpr_timespec deadline);

#endif
