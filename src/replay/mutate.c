/* Priorities: the checks every new priority passes, and MutatePriorities'
 * updates and deletes by key, held in slices of the lock. */
#include "replay/table_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"

#include <float.h>

/* Why priority p does not suit this table, or NULL. A heap orders any
 * but NaN; a sum tree weighs priority^exponent, which must be finite, at
 * least 0 and at most CHIME__SUMTREE_MAX_VALUE, so that the sum over every
 * row stays finite: an infinite total would draw one item every time and
 * make every probability wrong. all: the same rules for any table
 * (MutatePriorities: a priority is a number >= 0 everywhere). */
static const char *priority_why(const chime__table_t *t, double p, int all) {
  if (isnan(p) && (all || t->sum != NULL || t->hmin != NULL || t->hmax != NULL))
    return "a priority must be a number";
  if (!(all || t->sum != NULL))
    return NULL;
  if (p < 0 || isinf(p))
    return "priorities must be finite and at least 0";
  if (t->sum != NULL && !(chime__tbl_weight(t, p) <= CHIME__SUMTREE_MAX_VALUE))
    return "priority^priority_exponent exceeds the most an item may weigh "
           "in a prioritized table";
  return NULL;
}

/* Whether every one of prio[0, n) is surely fine for the table (all: as
 * for priority_why), in a loop cheap enough for every insert and update
 * (no pow); when not, priority_why says. */
static int priorities_fine(const chime__table_t *t, const double *prio,
                           size_t n, int all) {
  int bad = 0;
  if (t->sum == NULL && !all) {
    for (size_t i = 0; i < n; i++)
      bad |= isnan(prio[i]);
    return !bad;
  }
  double top = t->sum != NULL ? t->prio_sure : DBL_MAX;
  for (size_t i = 0; i < n; i++)
    bad |= !(prio[i] >= 0 && prio[i] <= top);
  return !bad;
}

/* A bad priority for this table's selectors among prio[0, count), or 0. */
int chime__tbl_check_priorities(const chime__table_t *t, const double *prio,
                                uint64_t count) {
  if (prio == NULL || (t->sum == NULL && t->hmin == NULL && t->hmax == NULL) ||
      priorities_fine(t, prio, (size_t)count, 0))
    return 0;
  for (uint64_t i = 0; i < count; i++)
    if (priority_why(t, prio[i], 0) != NULL)
      return CHIME_EINVAL;
  return 0;
}

static int priorities_why(const chime__table_t *t, const double *prio, size_t n,
                          int all, char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    const char *why = priority_why(t, prio[i], all);
    if (why == NULL)
      continue;
    if (err != NULL && errlen > 0) {
      if (t->sum != NULL && isfinite(prio[i]) && prio[i] >= 0)
        snprintf(err, errlen,
                 "priority %zu is %g: %s (%g^%g = %g, at most %g, so that "
                 "the sum over the table stays finite)",
                 i, prio[i], why, prio[i], t->cfg.priority_exponent,
                 chime__tbl_weight(t, prio[i]), CHIME__SUMTREE_MAX_VALUE);
      else
        snprintf(err, errlen, "priority %zu is %g: %s", i, prio[i], why);
    }
    return CHIME_EINVAL;
  }
  return 0;
}

int chime__table_check_priorities(const chime__table_t *t, const double *prio,
                                  size_t n, char *err, size_t errlen) {
  return priorities_why(t, prio, n, 0, err, errlen);
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
  if (t->sum != NULL)
    e |= chime__sumtree_set(t->sum, r, chime__tbl_weight(t, prio));
  if (t->hmin != NULL)
    e |= chime__heap_update(t->hmin, r, prio);
  if (t->hmax != NULL)
    e |= chime__heap_update(t->hmax, r, prio);
  (void)e; /* live, valid: cannot fail */
  out->updated++;
}

int chime__table_mutate(chime__table_t *t, const uint64_t *keys,
                        const double *priorities, size_t nupdates,
                        const uint64_t *deletes, size_t ndeletes,
                        chime__table_mutated_t *out) {
  memset(out, 0, sizeof(*out));
  /* Checked whole first, without the lock (the bound is the config's):
   * a refused request changes nothing. */
  if (!priorities_fine(t, priorities, nupdates, 1) &&
      priorities_why(t, priorities, nupdates, 1, NULL, 0) != 0)
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
