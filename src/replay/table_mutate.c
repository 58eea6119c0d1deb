/* Priorities: the checks every new priority passes, and MutatePriorities'
 * updates and deletes by key, held in slices of the lock. */
#include "replay/table_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"

#include <float.h>

int chime__table_check_priorities(const chime__table_t *t, const double *prio,
                                  size_t n, char *err, size_t errlen) {
  return chime__tbl_priorities_why(t, prio, n, 0, err, errlen);
}

/* Between two slices of a mutation (the lock held, and held again on
 * return): the lock goes to whoever queued for it meanwhile, one of them
 * at least before the mutation goes on, and woken waiters (inserts a
 * delete made room for) get a chance at it. */
static void mutate_break(chime__table_t *t) {
  uint64_t seen = t->handoffs;
  if (t->mutate_hook != NULL)
    t->mutate_hook(t->mutate_hook_arg);
  pthread_mutex_unlock(&t->mu);
  pthread_mutex_lock(&t->mu);
  t->yielding++;
  while (atomic_load(&t->lock_waiters) > 0 && t->handoffs == seen)
    pthread_cond_wait(&t->handoff, &t->mu);
  t->yielding--;
}

/* One update of a mutation, under the lock. */
static void mutate_update(chime__table_t *t, uint64_t key, double prio,
                          chime__table_mutated_t *out) {
  uint32_t r;
  if (chime__keyindex_lookup(t->keys, key, &r) != 0) {
    out->unknown++;
    return;
  }
  int e = 0;
  t->meta[r].prio = prio;
  if (prio > t->max_prio)
    t->max_prio = prio;
  if (t->sum != NULL) {
    double old = chime__sumtree_get(t->sum, r), w = chime__tbl_weight(t, prio);
    e |= chime__sumtree_set(t->sum, r, w);
    if (t->vidx != NULL) /* the version's weight, for staleness weighting */
      chime__verindex_reweigh(t->vidx, t->meta[r].version, old, w);
  }
  if (t->hmin != NULL)
    e |= chime__heap_update(t->hmin, r, prio);
  if (t->hmax != NULL)
    e |= chime__heap_update(t->hmax, r, prio);
  (void)e; /* live, valid: cannot fail */
  out->updated++;
}

int chime__table_check_keys(const chime__table_t *t, const uint64_t *keys,
                            size_t n, uint64_t *bad) {
  uint32_t shard = t->cfg.shard;
  for (size_t i = 0; i < n; i++) {
    if (chime__key_shard(keys[i]) != shard) {
      if (bad != NULL)
        *bad = keys[i];
      return CHIME_EINVAL;
    }
  }
  return 0;
}

int chime__table_mutate(chime__table_t *t, const uint64_t *keys,
                        const double *priorities, size_t nupdates,
                        const uint64_t *deletes, size_t ndeletes,
                        chime__table_mutated_t *out) {
  memset(out, 0, sizeof(*out));
  /* Checked whole first, without the lock (the bound and the shard are
   * the config's): a refused request changes nothing. */
  if (chime__table_check_keys(t, keys, nupdates, NULL) != 0 ||
      chime__table_check_keys(t, deletes, ndeletes, NULL) != 0)
    return CHIME_EINVAL;
  if (!chime__tbl_priorities_fine(t, priorities, nupdates, 1) &&
      chime__tbl_priorities_why(t, priorities, nupdates, 1, NULL, 0) != 0)
    return CHIME_EINVAL;
  pthread_mutex_lock(&t->mu);
  /* Entries [at, end) of updates then deletes, one slice a hold. */
  size_t total = nupdates + ndeletes;
  for (size_t at = 0; at < total; at += CHIME__TABLE_MUTATE_SLICE) {
    size_t end = total - at > CHIME__TABLE_MUTATE_SLICE
                     ? at + CHIME__TABLE_MUTATE_SLICE
                     : total;
    if (at > 0)
      mutate_break(t);
    for (size_t i = at; i < end && i < nupdates; i++)
      mutate_update(t, keys[i], priorities[i], out);
    uint32_t gone = out->deleted;
    for (size_t i = at > nupdates ? at : nupdates; i < end; i++) {
      uint32_t r;
      if (chime__keyindex_lookup(t->keys, deletes[i - nupdates], &r) != 0) {
        out->unknown++;
        continue;
      }
      chime__tbl_live_remove(t, r);
      out->deleted++;
    }
    if (out->deleted != gone) /* inserts may wait for the room */
      pthread_cond_broadcast(&t->space);
  }
  pthread_mutex_unlock(&t->mu);
  return 0;
}

void chime__table_set_mutate_hook(chime__table_t *t, void (*fn)(void *),
                                  void *arg) {
  pthread_mutex_lock(&t->mu);
  t->mutate_hook = fn;
  t->mutate_hook_arg = arg;
  pthread_mutex_unlock(&t->mu);
}

unsigned chime__table_lock_waiters(const chime__table_t *t) {
  return atomic_load(&t->lock_waiters);
}
