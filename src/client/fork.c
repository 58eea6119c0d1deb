/* fork() and the client library: gRPC's fork support, the gate every gRPC
 * call passes, and the fork generation that marks inherited objects
 * (fork.h says why). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "client/fork.h"
#include "common/clock.h"
#include "common/errfmt.h"
#include "wire/grpcref.h"
#include "chime/errors.h"

/* gRPC 1.51's grpc/fork.h declares these without extern "C", so the
 * library exports them under their C++ names; CMake found which. */
#if CHIME_GRPC_FORK_API == 1
#include <grpc/fork.h>
#define prefork grpc_prefork
#define postfork_parent grpc_postfork_parent
#define postfork_child grpc_postfork_child
#elif CHIME_GRPC_FORK_API == 2
void prefork(void) __asm__("_Z12grpc_preforkv");
void postfork_parent(void) __asm__("_Z20grpc_postfork_parentv");
void postfork_child(void) __asm__("_Z19grpc_postfork_childv");
#endif
#if CHIME_GRPC_FORK_API
/* grpc_core::Fork::Enabled() (libgpr): whether fork support is on. gRPC
 * decides once per process, at its first call of any kind. */
_Bool fork_enabled(void) __asm__("_ZN9grpc_core4Fork7EnabledEv");
/* The poller gRPC chose when it started (each time it starts). */
const char *poll_strategy(void) __asm__("_Z27grpc_get_poll_strategy_namev");
#endif

#ifndef CHIME_GRPC_EXECUTOR
#define CHIME_GRPC_EXECUTOR 0
#endif
#if CHIME_GRPC_EXECUTOR
/* grpc_core::Executor::SetThreadingAll(bool) (libgrpc): starts or stops
 * the executor's threads; stopped, its closures run inline. */
void executor_threading(_Bool on) __asm__(
    "_ZN9grpc_core8Executor15SetThreadingAllEb");
#endif

#define FORK_ENV "GRPC_ENABLE_FORK_SUPPORT"
#define POLL_ENV "GRPC_POLL_STRATEGY"
/* How long the prepare handler waits for chime's threads to leave gRPC. A
 * thread inside only runs a gRPC call or waits on a queue in slices of
 * CHIME__GATE_SLICE_MS, so this bounds the unforeseen, not a wait anyone
 * should see. */
#define QUIESCE_MS 5000

_Atomic uint32_t chime__fork_generation;

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_idle = PTHREAD_COND_INITIALIZER;   /* active 0 */
static pthread_cond_t gate_resume = PTHREAD_COND_INITIALIZER; /* !forking */
static int forking;     /* the prepare handler closed the gate */
static unsigned active; /* threads inside the gate (outermost entries) */
static _Thread_local unsigned depth;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int support;         /* gRPC's fork support is on in this process */
static int grpc_touched;    /* gRPC has read its fork setting */
static int grpc_was_init;   /* at the last fork's prepare */
static int quiet;           /* the last fork found chime out of gRPC */
static int child_ok = 1;    /* gRPC works in this process (see child()) */
static char child_why[256]; /* why not */

static void prepare(void) {
  pthread_mutex_lock(&gate_mu);
  forking = 1;
  struct timespec until = chime__clock_after_ms(CLOCK_REALTIME, QUIESCE_MS);
  int rc = 0;
  while (active > 0 && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&gate_idle, &gate_mu, &until);
  quiet = active == 0;
  pthread_mutex_unlock(&gate_mu);
  grpc_was_init = grpc_is_initialized();
#if CHIME_GRPC_FORK_API
  if (support && grpc_was_init) {
#if CHIME_GRPC_EXECUTOR
    /* gRPC 1.51's grpc_prefork blocks new ExecCtxs first and then joins
     * the executor's threads; a thread that had just picked up closures
     * (a call's teardown, a transport's write) then waits for an ExecCtx
     * forever and the fork hangs (test_e2e_fork: the main thread in
     * Executor::SetThreadingAll, the executor in
     * Fork::DoIncExecCtxCount). Stopped here first, while ExecCtxs are
     * still allowed, the executor runs what it holds and its threads
     * end; grpc_prefork then finds them stopped. */
    executor_threading(0);
#endif
    prefork();
  }
#endif
}

static void parent(void) {
#if CHIME_GRPC_FORK_API
  if (support && grpc_was_init) {
    postfork_parent();
#if CHIME_GRPC_EXECUTOR
    executor_threading(1); /* as postfork_parent does, if it skipped */
#endif
  }
#endif
  pthread_mutex_lock(&gate_mu);
  forking = 0;
  pthread_cond_broadcast(&gate_resume);
  pthread_mutex_unlock(&gate_mu);
}

static void child(void) {
  /* Only this thread exists: the gate starts afresh. */
  pthread_mutex_init(&gate_mu, NULL);
  pthread_cond_init(&gate_idle, NULL);
  pthread_cond_init(&gate_resume, NULL);
  pthread_mutex_init(&init_mu, NULL);
  forking = 0;
  active = 0;
  atomic_fetch_add(&chime__fork_generation, 1);
  chime__grpc_ref_child();
  if (!grpc_was_init)
    return; /* nothing of gRPC was inherited */
#if CHIME_GRPC_FORK_API
  if (support)
    postfork_child();
#endif
  if (!support || !CHIME_GRPC_FORK_API) {
    child_ok = 0;
    snprintf(child_why, sizeof(child_why),
             "gRPC's fork support was off in the parent (it needs %s "
             "unset or 1, and %s unset or poll)",
             FORK_ENV, POLL_ENV);
  } else if (!quiet) {
    child_ok = 0;
    snprintf(child_why, sizeof(child_why),
             "the parent forked while a chime call stayed inside gRPC for "
             "%d ms",
             QUIESCE_MS);
  }
  /* A child of a good fork of a bad child stays bad: gRPC's state came
   * from it. */
}

static void setup(void) {
  pthread_atfork(prepare, parent, child);
}

int chime__fork_grpc_init(char *err, size_t errlen) {
  pthread_once(&once, setup);
  pthread_mutex_lock(&init_mu);
  if (!child_ok) {
    pthread_mutex_unlock(&init_mu);
    return chime__fail(err, errlen, CHIME_ENOTSUP,
                       "this process is a child of fork() that inherited "
                       "gRPC from a parent using chime, and %s: create "
                       "clients in a child started with spawn or "
                       "forkserver (multiprocessing) (docs/python.md, "
                       "fork)",
                       child_why);
  }
  chime__gate_enter();
  /* gRPC reads GRPC_ENABLE_FORK_SUPPORT at its first call in the process,
   * GRPC_POLL_STRATEGY each time it starts. Each is set for a start that
   * is this one unless the application set it, and taken back at once so
   * that child processes and other gRPC users (grpcio) see the environment
   * the application made. Fork support works with the poll poller only in
   * gRPC 1.51: with epoll1 the child keeps the parent's epoll set (the
   * default event engine's poller overwrites epoll1's fork reset, the one
   * gRPC keeps). doc/fork_support.md asks for both settings. */
  int starts = !grpc_touched || !grpc_is_initialized();
  int set_fork = starts && CHIME_GRPC_FORK_API && getenv(FORK_ENV) == NULL;
  int set_poll = starts && CHIME_GRPC_FORK_API && getenv(POLL_ENV) == NULL;
  if (set_fork)
    setenv(FORK_ENV, "1", 0);
  if (set_poll)
    setenv(POLL_ENV, "poll", 0);
  chime__grpc_hold();
  if (set_fork)
    unsetenv(FORK_ENV);
  if (set_poll)
    unsetenv(POLL_ENV);
  grpc_touched = 1;
#if CHIME_GRPC_FORK_API
  const char *poller = poll_strategy();
  support = fork_enabled() && poller != NULL && strcmp(poller, "poll") == 0;
#endif
  chime__gate_leave();
  pthread_mutex_unlock(&init_mu);
  return 0;
}

int chime__fork_check(uint32_t gen, int pid, const char *what, char *err,
                      size_t errlen) {
  if (gen == chime__fork_gen())
    return 0;
  return chime__fail(err, errlen, CHIME_ENOTSUP,
                     "this %s was made by process %d before a fork(): a "
                     "child process cannot use it (its connection and "
                     "threads are the parent's); create a new client in "
                     "the child (docs/python.md, fork)",
                     what, pid);
}

void chime__gate_enter(void) {
  if (depth++ > 0)
    return;
  pthread_mutex_lock(&gate_mu);
  while (forking)
    pthread_cond_wait(&gate_resume, &gate_mu);
  active++;
  pthread_mutex_unlock(&gate_mu);
}

void chime__gate_leave(void) {
  if (--depth > 0)
    return;
  pthread_mutex_lock(&gate_mu);
  if (--active == 0 && forking)
    pthread_cond_broadcast(&gate_idle);
  pthread_mutex_unlock(&gate_mu);
}

/* Inside a gated call (depth > 0) the thread already counts as active; it
 * steps out between slices either way while a fork is prepared. */
grpc_event chime__gate_next(grpc_completion_queue *cq, gpr_timespec deadline) {
  int outer = depth == 0;
  if (outer)
    chime__gate_enter();
  deadline = gpr_convert_clock_type(deadline, GPR_CLOCK_MONOTONIC);
  grpc_event ev;
  for (;;) {
    gpr_timespec slice =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(CHIME__GATE_SLICE_MS, GPR_TIMESPAN));
    int last = gpr_time_cmp(deadline, slice) <= 0;
    ev = grpc_completion_queue_next(cq, last ? deadline : slice, NULL);
    if (ev.type != GRPC_QUEUE_TIMEOUT || last)
      break;
    pthread_mutex_lock(&gate_mu);
    if (forking) {
      if (--active == 0)
        pthread_cond_broadcast(&gate_idle);
      while (forking)
        pthread_cond_wait(&gate_resume, &gate_mu);
      active++;
    }
    pthread_mutex_unlock(&gate_mu);
  }
  if (outer)
    chime__gate_leave();
  return ev;
}
