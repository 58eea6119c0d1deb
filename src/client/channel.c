/* The client's channels: the client's own (client.c) and the fresh ones a
 * stalled or lost stream tries (resume.c), all made with the same
 * arguments, and every TCP socket of theirs with its retransmission
 * backoff capped at CHIME__CLIENT_RTO_MAX_MS (TCP_RTO_MAX_MS, Linux
 * 6.15+): what a learner sends while a link is down (credits, pings) goes
 * again within a second of the link coming back instead of up to 120 s
 * later (docs/remote.md, "A link that drops"). chimed caps its accepted
 * sockets the same way (src/server/acceptor.c, tcp_rto_max_ms). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client/fork.h"
#include "client/internal.h"
#include "common/clock.h"
#include "common/keepalive.h"

#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif

/* gRPC C core's socket mutator, as libgrpc 29 (gRPC 1.51) lays it out
 * (src/core/lib/iomgr/socket_mutator.h, which is not installed): a vtable
 * whose mutate_fd_2, when set, is called with every socket gRPC makes and
 * its use. The layout is gRPC's ABI since 1.27 (mutate_fd_2 at the fourth
 * pointer). */
typedef enum {
  FD_CLIENT_CONNECTION,
  FD_SERVER_LISTENER,
  FD_SERVER_CONNECTION
} fd_usage_t;
typedef struct {
  int fd;
  fd_usage_t usage;
} mutate_info_t;
typedef struct {
  bool (*mutate_fd)(int fd, grpc_socket_mutator *m);
  int (*compare)(grpc_socket_mutator *a, grpc_socket_mutator *b);
  void (*destroy)(grpc_socket_mutator *m);
  bool (*mutate_fd_2)(const mutate_info_t *info, grpc_socket_mutator *m);
} mutator_vtable_t;
struct grpc_socket_mutator {
  const mutator_vtable_t *vtable;
  gpr_refcount refcount;
};

/* Caps a TCP socket's backoff; any other socket (Unix), or a kernel
 * without the option, is left as it is: the connection is made anyway. */
static bool cap_rto(int fd, grpc_socket_mutator *m) {
  (void)m;
  int v = CHIME__CLIENT_RTO_MAX_MS;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &v, sizeof(v));
  return true;
}

static bool cap_rto_2(const mutate_info_t *info, grpc_socket_mutator *m) {
  return info->usage == FD_CLIENT_CONNECTION ? cap_rto(info->fd, m) : true;
}

static int same_mutator(grpc_socket_mutator *a, grpc_socket_mutator *b) {
  return a == b ? 0 : (a < b ? -1 : 1);
}

static void keep_mutator(grpc_socket_mutator *m) {
  (void)m; /* static: never freed */
}

static const mutator_vtable_t rto_vtable = {cap_rto, same_mutator, keep_mutator,
                                            cap_rto_2};
/* One for the process, its count never reaching 0 (destroy is a no-op
 * anyway): gRPC's copies of the channel argument refer to it. */
static grpc_socket_mutator rto_mutator = {&rto_vtable, {1}};

static void *arg_copy(void *p) {
  return p;
}
static void arg_destroy(void *p) {
  (void)p;
}
static int arg_cmp(void *a, void *b) {
  return same_mutator(a, b);
}
static const grpc_arg_pointer_vtable rto_arg_vtable = {arg_copy, arg_destroy,
                                                       arg_cmp};

grpc_channel *chime__channel_new(const chime_client_t *c) {
  grpc_arg args[6 + CHIME__KEEPALIVE_ARGS];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = (int)c->max_message_bytes;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = (int)c->max_message_bytes;
  /* A status carrying a pinning error can pass gRPC's default 8 KiB of
   * metadata: the call would fail with RESOURCE_EXHAUSTED instead. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = GRPC_ARG_MAX_METADATA_SIZE;
  args[2].value.integer = CHIME__MAX_METADATA_BYTES;
  size_t nargs = 3 + chime__keepalive_args(args + 3, c->keepalive_time_ms,
                                           c->keepalive_timeout_ms);
  /* A channel of its own connection: with gRPC's global subchannel pool a
   * client made after fork() in a child would share the parent's socket
   * (and its HTTP/2 stream state) with the parent's client; and a fresh
   * channel of a stream that resumes is a fresh connection. */
  args[nargs].type = GRPC_ARG_INTEGER;
  args[nargs].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
  args[nargs++].value.integer = 1;
  args[nargs].type = GRPC_ARG_POINTER;
  args[nargs].key = GRPC_ARG_SOCKET_MUTATOR;
  args[nargs].value.pointer.p = &rto_mutator;
  args[nargs++].value.pointer.vtable = &rto_arg_vtable;
  if (c->tls_server_name != NULL) {
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[nargs++].value.string = c->tls_server_name;
  }
  grpc_channel_args cargs = {nargs, args};
  return grpc_channel_create(c->address, c->creds, &cargs);
}

/* Fresh channels at once, each a connection of its own (its own TCP
 * handshake: a SYN lost to a link still down is not retried for a second
 * by the kernel, a new channel's SYN goes at once). */
#define TRIES 8

/* ms from now, never a negative (chime__deadline_ms's "no deadline"). */
static gpr_timespec after_ms(int64_t ms) {
  return chime__deadline_ms(ms > 0 ? (int)ms : 0);
}

typedef struct {
  grpc_channel *ch;
  uint64_t gen; /* the watch tag of this channel (made + 1), 0: none */
} try_t;

/* Watches t's channel for a change from st, at most until the next step
 * (so that a channel given up is never waited for long). */
static void watch(try_t *t, grpc_connectivity_state st, int64_t until_ms,
                  grpc_completion_queue *cq, unsigned *pending) {
  grpc_channel_watch_connectivity_state(t->ch, st,
                                        after_ms(until_ms - chime__now_ms()),
                                        cq, (void *)(uintptr_t)t->gen);
  (*pending)++;
}

static void drop(try_t *t) {
  if (t->ch != NULL) {
    chime__gate_enter();
    grpc_channel_destroy(t->ch);
    chime__gate_leave();
  }
  t->ch = NULL;
  t->gen = 0;
}

/* t's channel if it is READY now (taken out of t), else NULL, watched
 * (again) unless it shut down. */
static grpc_channel *look(try_t *t, int64_t until_ms, grpc_completion_queue *cq,
                          unsigned *pending) {
  grpc_connectivity_state st = grpc_channel_check_connectivity_state(t->ch, 1);
  if (st != GRPC_CHANNEL_READY) {
    if (st != GRPC_CHANNEL_SHUTDOWN)
      watch(t, st, until_ms, cq, pending);
    return NULL;
  }
  grpc_channel *ch = t->ch;
  t->ch = NULL;
  t->gen = 0;
  return ch;
}

/* Starts try number made in its place (dropping the one there). */
static grpc_channel *start_try(const chime_client_t *c, try_t *tries,
                               uint64_t made, int64_t until_ms,
                               grpc_completion_queue *cq, unsigned *pending) {
  try_t *t = &tries[made % TRIES];
  drop(t);
  chime__gate_enter();
  t->ch = chime__channel_new(c);
  chime__gate_leave();
  if (t->ch == NULL)
    return NULL;
  t->gen = made + 1;
  return look(t, until_ms, cq, pending);
}

/* A watch of try gen ended: as look, unless that try was dropped since. */
static grpc_channel *watched(try_t *tries, uint64_t gen, int64_t until_ms,
                             grpc_completion_queue *cq, unsigned *pending) {
  if (gen == 0)
    return NULL;
  try_t *t = &tries[(gen - 1) % TRIES];
  if (t->gen != gen || t->ch == NULL)
    return NULL;
  return look(t, until_ms, cq, pending);
}

int chime__channel_connect(const chime_client_t *c, int step_ms, int wait_ms,
                           grpc_channel **out) {
  *out = NULL;
  chime__gate_enter();
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  chime__gate_leave();
  if (cq == NULL)
    return CHIME_ENOMEM;
  try_t tries[TRIES];
  memset(tries, 0, sizeof(tries));
  unsigned pending = 0;
  uint64_t made = 0;
  int64_t now = chime__now_ms(), end = now + wait_ms, next = now;
  grpc_channel *ready = NULL;
  while (ready == NULL && (now = chime__now_ms()) < end) {
    if (now >= next) {
      next = now + step_ms < end ? now + step_ms : end;
      ready = start_try(c, tries, made++, next, cq, &pending);
      continue;
    }
    grpc_event ev = grpc_completion_queue_next(cq, after_ms(next - now), NULL);
    if (ev.type != GRPC_OP_COMPLETE)
      continue; /* the step is over */
    pending--;
    ready = watched(tries, (uint64_t)(uintptr_t)ev.tag, next, cq, &pending);
  }
  for (unsigned i = 0; i < TRIES; i++)
    drop(&tries[i]);
  /* Every watch ends by its step's deadline at the latest. */
  for (; pending > 0; pending--)
    (void)grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                     NULL);
  grpc_completion_queue_shutdown(cq);
  while (
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
          .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  *out = ready;
  return ready != NULL ? 0 : CHIME_ETIMEDOUT;
}

void chime__channel_drop(grpc_channel **ch, uint32_t fork_gen) {
  if (*ch != NULL && fork_gen == chime__fork_gen()) {
    chime__gate_enter();
    grpc_channel_destroy(*ch);
    chime__gate_leave();
  }
  *ch = NULL;
}
