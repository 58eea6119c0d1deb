/* Checkpoints on request and on a timer (checkpointer.h). Calls that
 * arrive while a checkpoint is being written wait for the next one, so
 * each caller's answer describes a checkpoint begun after it asked. */
#include "common/log.h"
#include "server/checkpointer.h"

#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chime.pb-c.h"
#include "common/clock.h"
#include "server/checkpoint.h"
#include "server/state.h"

#define MAX_WAITING 64

struct chime__ckpter_s {
  chime_server_t *srv;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  int joined;
  chime__call_t *waiting[MAX_WAITING]; /* each holds a reference */
  uint32_t nwaiting;
};

static void answer(chime__call_t *c, int rc, const chime__ckpt_result_t *res,
                   const char *err) {
  if (rc != 0) {
    chime__call_finish(c, rc, "Checkpoint: %s", err);
    return;
  }
  Chime__V1__CheckpointResponse r = CHIME__V1__CHECKPOINT_RESPONSE__INIT;
  r.path = (char *)res->path;
  r.tables = res->tables;
  r.items = res->items;
  r.bytes = res->bytes;
  r.pause_ns = res->pause_ns;
  r.duration_ns = res->duration_ns;
  chime__call_send_msg(c, &r);
  chime__call_finish(c, CHIME_OK, "%s", "");
}

/* How often the tables' spare rows are trimmed: rows a checkpoint's pins
 * made inserts take (chime__table_trim_spares) hold items until those
 * leave, which takes about one turnover of the table, so their pages are
 * given back some time after the checkpoint, not at its end. */
#define TRIM_EVERY_NS (UINT64_C(10) * 1000000000u)

static void wait_until(chime__ckpter_t *k, uint64_t due) {
  /* The condition variable's clock is CLOCK_REALTIME: wait for the
   * remaining time measured from now on that clock. */
  uint64_t now = chime__clock_ns(CLOCK_MONOTONIC);
  uint64_t dl = chime__clock_ns(CLOCK_REALTIME) + (due > now ? due - now : 0);
  struct timespec ts = chime__ts_from_ns(dl);
  pthread_cond_timedwait(&k->cv, &k->mu, &ts);
}

static void *ckpt_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-ckpt");
  chime__ckpter_t *k = arg;
  chime_server_t *srv = k->srv;
  const chime__checkpoint_config_t *cc = &srv->cfg.checkpoint;
  uint64_t period = (uint64_t)cc->interval_s * 1000000000u;
  uint64_t due = period ? chime__clock_ns(CLOCK_MONOTONIC) + period : 0;
  uint64_t trim_due = chime__clock_ns(CLOCK_MONOTONIC) + TRIM_EVERY_NS;
  pthread_mutex_lock(&k->mu);
  while (!k->stop) {
    uint64_t now = chime__clock_ns(CLOCK_MONOTONIC);
    if (now >= trim_due) {
      pthread_mutex_unlock(&k->mu);
      for (uint32_t i = 0; i < srv->ntables; i++)
        chime__table_trim_spares(srv->tables[i]);
      pthread_mutex_lock(&k->mu);
      trim_due = chime__clock_ns(CLOCK_MONOTONIC) + TRIM_EVERY_NS;
      continue;
    }
    if (k->nwaiting == 0 && (period == 0 || now < due)) {
      wait_until(k, period != 0 && due < trim_due ? due : trim_due);
      continue;
    }
    chime__call_t *calls[MAX_WAITING];
    uint32_t n = k->nwaiting;
    memcpy(calls, k->waiting, n * sizeof(calls[0]));
    k->nwaiting = 0;
    pthread_mutex_unlock(&k->mu);
    chime__ckpt_result_t res;
    char err[1024] = "";
    int rc = chime__checkpoint_write(srv->tables, srv->ntables, cc->dir,
                                     cc->keep, &res, err, sizeof(err));
    if (rc != 0)
      chime__log(CHIME_LOG_ERROR, "checkpoint failed: %s", err);
    /* Stats first: a caller that asks for them after its answer sees
     * this checkpoint. */
    pthread_mutex_lock(&srv->mu);
    if (rc == 0) {
      srv->ckpt_stats.written++;
      srv->ckpt_stats.last_unix_ns = chime__clock_ns(CLOCK_REALTIME);
      srv->ckpt_stats.last_duration_ns = res.duration_ns;
      srv->ckpt_stats.last_pause_ns = res.pause_ns;
    } else {
      srv->ckpt_stats.failed++;
    }
    pthread_mutex_unlock(&srv->mu);
    for (uint32_t i = 0; i < n; i++) {
      answer(calls[i], rc, &res, err);
      chime__call_unref(calls[i]);
    }
    pthread_mutex_lock(&k->mu);
    if (period != 0) {
      /* The next one a whole period after this one began or ended,
       * whichever is later: a slow disk never queues them up. */
      uint64_t end = chime__clock_ns(CLOCK_MONOTONIC);
      due = due + period > end ? due + period : end + period;
    }
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

int chime__ckpter_start(chime__ckpter_t **out, chime_server_t *srv) {
  *out = NULL;
  if (srv->cfg.checkpoint.dir[0] == '\0')
    return 0;
  chime__ckpter_t *k = calloc(1, sizeof(*k));
  if (k == NULL)
    return CHIME_ENOMEM;
  k->srv = srv;
  pthread_mutex_init(&k->mu, NULL);
  pthread_cond_init(&k->cv, NULL);
  if (pthread_create(&k->th, NULL, ckpt_main, k) != 0) {
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k);
    return CHIME_ESYS;
  }
  *out = k;
  return 0;
}

void chime__ckpter_stop(chime__ckpter_t *k) {
  if (k == NULL)
    return;
  pthread_mutex_lock(&k->mu);
  k->stop = 1;
  chime__call_t *calls[MAX_WAITING];
  uint32_t n = k->nwaiting;
  memcpy(calls, k->waiting, n * sizeof(calls[0]));
  k->nwaiting = 0;
  pthread_cond_broadcast(&k->cv);
  pthread_mutex_unlock(&k->mu);
  for (uint32_t i = 0; i < n; i++) {
    chime__call_finish(calls[i], CHIME_ESHUTDOWN,
                       "Checkpoint: the server is shutting down");
    chime__call_unref(calls[i]);
  }
  if (!k->joined) {
    pthread_join(k->th, NULL);
    k->joined = 1;
  }
}

void chime__ckpter_destroy(chime__ckpter_t *k) {
  if (k == NULL)
    return;
  chime__ckpter_stop(k);
  pthread_mutex_destroy(&k->mu);
  pthread_cond_destroy(&k->cv);
  free(k);
}

/* --- the Checkpoint call --- */

static void ckpt_on_start(chime__call_t *c) {
  chime__ckpter_t *k = chime__call_server(c)->ckpter;
  if (k == NULL) {
    chime__call_finish_as(c, CHIME_EINVAL, GRPC_STATUS_FAILED_PRECONDITION,
                          "Checkpoint: this server has no checkpoint dir "
                          "(config \"checkpoint\": {\"dir\": ...})");
    return;
  }
  pthread_mutex_lock(&k->mu);
  int queued = !k->stop && k->nwaiting < MAX_WAITING;
  if (queued) {
    chime__call_ref(c);
    k->waiting[k->nwaiting++] = c;
    pthread_cond_signal(&k->cv);
  }
  int stopping = k->stop;
  pthread_mutex_unlock(&k->mu);
  if (!queued)
    chime__call_finish(c, stopping ? CHIME_ESHUTDOWN : CHIME_EBUSY,
                       "Checkpoint: %s",
                       stopping ? "the server is shutting down"
                                : "too many Checkpoint calls waiting");
}

static void ckpt_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

const chime__call_vt_t chime__checkpoint_vt = {
    .on_start = ckpt_on_start,
    .on_message = ckpt_on_message,
};
