/* The fill pool. Workers take jobs off one ready queue and run a few
 * fill steps each (then the job goes to the back, so one busy stream does
 * not starve the others). A job that cannot go on waits where its step
 * said: on the table's waiter list (the table kicks it), on the watch list
 * for its ring's futex word or a deadline (the watcher thread), or for a
 * kick. The watcher sleeps in futex_waitv on up to 127 rings' words plus
 * its own; with more rings waiting than that it also wakes every
 * millisecond and checks every word (a load each).
 *
 * Job states (under mu): IDLE waiting, QUEUED, RUNNING, DONE. A kick on a
 * running job marks it so the worker runs it again instead of parking it:
 * no wake-up is lost between a step's "nothing to do" and its parking. */
#include "server/fill_pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/clock.h"

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

#define MAX_WORKERS 64
#define STEPS_PER_TURN 4
#define STEPS_INLINE 16
#define OVERFLOW_POLL_NS 1000000u

enum { NEW, IDLE, QUEUED, RUNNING, DONE }; /* NEW: not added yet */

struct chime__pool_s {
  pthread_mutex_t mu;
  pthread_cond_t ready_cond;
  chime__fill_job_t *qhead, *qtail;
  chime__list_t watch;        /* jobs waiting on a futex word or a time */
  _Atomic uint32_t watch_seq; /* the watcher's own futex word */
  int quit;
  unsigned nworkers;
  pthread_t workers[MAX_WORKERS];
  pthread_t watcher;
  int watcher_started;
};

/* Caller holds mu. */
static void enqueue(chime__pool_t *p, chime__fill_job_t *j) {
  j->state = QUEUED;
  j->qnext = NULL;
  if (p->qtail != NULL)
    p->qtail->qnext = j;
  else
    p->qhead = j;
  p->qtail = j;
  pthread_cond_signal(&p->ready_cond);
}

/* Caller holds mu. */
static void unwatch(chime__pool_t *p, chime__fill_job_t *j) {
  chime__list_remove(&p->watch, &j->watch); /* when it is on it */
}

/* Caller holds mu. The watcher rebuilds what it waits on. */
static void watch(chime__pool_t *p, chime__fill_job_t *j) {
  chime__list_push(&p->watch, &j->watch);
  atomic_fetch_add(&p->watch_seq, 1);
  syscall(SYS_futex, &p->watch_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Caller holds mu and has taken j off the queue and the watch list. */
static void claim(chime__fill_job_t *j) {
  j->state = RUNNING;
  j->kicked = 0;
}

/* Runs up to `steps` fill steps of a claimed job (mu not held), then puts
 * the job where its last step said: back on the queue (more to do, or
 * kicked meanwhile), waiting, or done. Returns with mu held. */
static void run_claimed(chime__pool_t *p, chime__fill_job_t *j, int steps) {
  chime__fill_wait_t w;
  chime__fill_t r = CHIME__FILL_AGAIN;
  for (int i = 0; i < steps && r == CHIME__FILL_AGAIN; i++) {
    memset(&w, 0, sizeof(w));
    r = j->fill(j, &w);
  }
  if (r == CHIME__FILL_DONE) {
    pthread_mutex_lock(&p->mu);
    j->state = DONE;
    pthread_mutex_unlock(&p->mu);
    j->done(j);
    pthread_mutex_lock(&p->mu);
    return;
  }
  pthread_mutex_lock(&p->mu);
  if (r == CHIME__FILL_AGAIN || j->kicked) {
    enqueue(p, j);
  } else {
    j->state = IDLE;
    j->wait = w;
    if ((r == CHIME__FILL_WAIT_SLOT && w.bell != NULL) ||
        (r == CHIME__FILL_WAIT_UNTIL && w.until_ns != 0))
      watch(p, j);
  }
}

static void *worker_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-fill");
  chime__pool_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->qhead == NULL && !p->quit)
      pthread_cond_wait(&p->ready_cond, &p->mu);
    if (p->qhead == NULL)
      break;
    chime__fill_job_t *j = p->qhead;
    p->qhead = j->qnext;
    if (p->qhead == NULL)
      p->qtail = NULL;
    claim(j);
    pthread_mutex_unlock(&p->mu);
    run_claimed(p, j, STEPS_PER_TURN);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Caller holds mu: whether a watched job's wait is over. */
static int wait_over(const chime__fill_job_t *j, uint64_t now) {
  if (j->wait.bell != NULL &&
      atomic_load((_Atomic uint32_t *)j->wait.bell) != j->wait.bell_val)
    return 1;
  return j->wait.until_ns != 0 && now >= j->wait.until_ns;
}

static void *watcher_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-watch");
  chime__pool_t *p = arg;
  struct futex_waitv wv[FUTEX_WAITV_MAX];
  pthread_mutex_lock(&p->mu);
  while (!p->quit) {
    uint64_t now = chime__now_ns();
    CHIME__LIST_EACH(l, &p->watch) {
      chime__fill_job_t *j = CHIME__CONTAINER(l, chime__fill_job_t, watch);
      if (wait_over(j, now)) {
        unwatch(p, j);
        enqueue(p, j);
      }
    }
    /* What to sleep on: our own word first, then rings' words. */
    unsigned n = 0;
    uint64_t until = 0;
    int overflow = 0;
    memset(wv, 0, sizeof(wv));
    wv[n].uaddr = (uintptr_t)&p->watch_seq;
    wv[n].val = atomic_load(&p->watch_seq);
    wv[n++].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
    CHIME__LIST_EACH(l, &p->watch) {
      const chime__fill_job_t *j =
          CHIME__CONTAINER(l, chime__fill_job_t, watch);
      if (j->wait.until_ns != 0 && (until == 0 || j->wait.until_ns < until))
        until = j->wait.until_ns;
      if (j->wait.bell == NULL)
        continue;
      if (n == FUTEX_WAITV_MAX) {
        overflow = 1;
        continue;
      }
      wv[n].uaddr = (uintptr_t)j->wait.bell;
      wv[n].val = j->wait.bell_val;
      wv[n++].flags = FUTEX_32; /* shared with another process */
    }
    if (overflow && (until == 0 || until > now + OVERFLOW_POLL_NS))
      until = now + OVERFLOW_POLL_NS;
    pthread_mutex_unlock(&p->mu);
    struct timespec ts = chime__ts_from_ns(until);
    /* EAGAIN: a word already moved; the loop above sorts it out. */
    (void)syscall(SYS_futex_waitv, wv, n, 0, until ? &ts : NULL,
                  CLOCK_MONOTONIC);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void chime__pool_add(chime__pool_t *p, chime__fill_job_t *j) {
  pthread_mutex_lock(&p->mu);
  j->kicked = 0;
  j->watch.prev = j->watch.next = NULL;
  enqueue(p, j);
  pthread_mutex_unlock(&p->mu);
}

void chime__pool_kick(chime__pool_t *p, chime__fill_job_t *j) {
  if (p == NULL) /* the server never started: no job was added */
    return;
  pthread_mutex_lock(&p->mu);
  if (j->state == RUNNING) {
    j->kicked = 1;
  } else if (j->state == IDLE) { /* NEW: add() queues it anyway */
    unwatch(p, j);
    enqueue(p, j);
  }
  pthread_mutex_unlock(&p->mu);
}

/* Caller holds mu; j is queued. */
static void unqueue(chime__pool_t *p, chime__fill_job_t *j) {
  chime__fill_job_t *prev = NULL;
  for (chime__fill_job_t *q = p->qhead; q != j; q = q->qnext)
    prev = q;
  if (prev != NULL)
    prev->qnext = j->qnext;
  else
    p->qhead = j->qnext;
  if (p->qtail == j)
    p->qtail = prev;
  j->qnext = NULL;
}

int chime__pool_run(chime__pool_t *p, chime__fill_job_t *j) {
  if (p == NULL)
    return 0;
  pthread_mutex_lock(&p->mu);
  if (j->state == IDLE) {
    unwatch(p, j);
  } else if (j->state == QUEUED) {
    unqueue(p, j);
  } else { /* running elsewhere: kicked, it runs again; not added; done */
    if (j->state == RUNNING)
      j->kicked = 1;
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  claim(j);
  pthread_mutex_unlock(&p->mu);
  run_claimed(p, j, STEPS_INLINE);
  pthread_mutex_unlock(&p->mu);
  return 1;
}

unsigned chime__pool_workers(const chime__pool_t *p) {
  return p->nworkers;
}

int chime__pool_create(chime__pool_t **out, unsigned workers) {
  chime__pool_t *p = calloc(1, sizeof(*p));
  *out = NULL;
  if (p == NULL)
    return CHIME_ENOMEM;
  if (workers == 0)
    workers = 1;
  if (workers > MAX_WORKERS)
    workers = MAX_WORKERS;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->ready_cond, NULL);
  atomic_init(&p->watch_seq, 0);
  int rc = 0;
  if (pthread_create(&p->watcher, NULL, watcher_main, p) != 0)
    rc = CHIME_ESYS;
  else
    p->watcher_started = 1;
  for (unsigned i = 0; rc == 0 && i < workers; i++) {
    if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0)
      rc = CHIME_ESYS;
    else
      p->nworkers++;
  }
  if (rc != 0) {
    chime__pool_destroy(p);
    return rc;
  }
  *out = p;
  return 0;
}

void chime__pool_destroy(chime__pool_t *p) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->ready_cond);
  atomic_fetch_add(&p->watch_seq, 1);
  syscall(SYS_futex, &p->watch_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  pthread_mutex_unlock(&p->mu);
  for (unsigned i = 0; i < p->nworkers; i++)
    pthread_join(p->workers[i], NULL);
  if (p->watcher_started)
    pthread_join(p->watcher, NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->ready_cond);
  free(p);
}
