/* The fill pool: a fixed number of worker threads (sampler_threads,
 * default the number of CPUs) and one watcher thread fill every stream's
 * ring, so an idle or full stream costs no thread. A job (one stream) says
 * what one fill step needs when it cannot go on: a free slot (a futex word
 * of its ring, watched with futex_waitv), items (the table calls it back),
 * or a moment in time; the watcher and kicks put it back on the ready
 * queue. Jobs know nothing of the pool's threads, the pool nothing of
 * streams. */
#ifndef CHIME_SERVER_SAMPLER_H
#define CHIME_SERVER_SAMPLER_H

#include <stdint.h>

#include "common/list.h"

typedef enum {
  CHIME__FILL_AGAIN,      /* filled a slot: more may be possible */
  CHIME__FILL_WAIT_SLOT,  /* the ring is full: watch wait.bell */
  CHIME__FILL_WAIT_ITEMS, /* the table lacks items: a kick will come */
  CHIME__FILL_WAIT_UNTIL, /* wait.until_ns (0: only a kick), or a kick */
  CHIME__FILL_DONE        /* the job is over; done() follows */
} chime__fill_t;

typedef struct {
  uint32_t *bell;    /* WAIT_SLOT: futex word, shared with the consumer */
  uint32_t bell_val; /* what it read when the step gave up */
  uint64_t until_ns; /* WAIT_UNTIL: CLOCK_MONOTONIC deadline, 0 for none */
} chime__fill_wait_t;

typedef struct chime__fill_job_s chime__fill_job_t;
struct chime__fill_job_s {
  /* One step of filling: never blocks. Called by one worker at a time. */
  chime__fill_t (*fill)(chime__fill_job_t *j, chime__fill_wait_t *w);
  /* After DONE, from a worker: the pool lets go of the job. */
  void (*done)(chime__fill_job_t *j);
  /* The pool's, under its lock. */
  int state, kicked;
  chime__fill_wait_t wait;
  chime__fill_job_t *qnext; /* ready queue */
  chime__link_t watch;      /* on the watch list */
};

typedef struct chime__pool_s chime__pool_t;

int chime__pool_create(chime__pool_t **out, unsigned workers);
/* Joins the threads; every job must be done (NULL-safe). */
void chime__pool_destroy(chime__pool_t *p);
/* Starts filling a job (its fields are the pool's from now on). */
void chime__pool_add(chime__pool_t *p, chime__fill_job_t *j);
/* What a job waits for may have changed (items, attach, stop): runs a
 * step soon. Harmless when the job is queued or running. */
void chime__pool_kick(chime__pool_t *p, chime__fill_job_t *j);
/* Runs a waiting or queued job's steps on the calling thread, as a worker
 * would, sparing a worker's wake-up when the caller is already awake where
 * the job can go on (stream mode's sends: a completion frees slots). The
 * caller holds no lock a step takes. Returns 0 without running when a
 * worker has the job (then it is kicked), or it is done. */
int chime__pool_run(chime__pool_t *p, chime__fill_job_t *j);
unsigned chime__pool_workers(const chime__pool_t *p);

#endif
