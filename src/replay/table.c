/* Replay table storage. Items live in one preallocated mapping, leaf-major
 * (one array per leaf, indexed by row), and nothing on the insert or sample
 * path allocates. Rows come from a free list kept in the order rows were
 * freed, so a fifo table fills and drains rows in circular order and a fifo
 * batch is still one memcpy per leaf per contiguous run. Any item can leave
 * (a remover or max_times_sampled may pick one in the middle), so the live
 * rows are also kept in insert order (a doubly linked list: fifo, lifo), in
 * a dense array (uniform draws), and, when a selector needs them, in a sum
 * tree (prioritized) and heaps (min_heap, max_heap), all indexed by row.
 * A sampler chooses its rows under the table lock and copies them without
 * it: the rows are pinned meanwhile, and a row that leaves while pinned
 * returns to the free list only once unpinned, so no insert overwrites it.
 * A stream-mode stream keeps its batches' rows pinned until gRPC has sent
 * them (chime__table_pins_t): they go out straight from here. So that rows
 * in flight never make inserts wait, the table has spare rows beyond its
 * capacity (as many again, at most), used only while rows are pinned or
 * items given back push it past its capacity; rows under the capacity are
 * reused first, so spare rows are touched only then. */
#include "replay/table_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/insert_window.h"

#include <float.h>

const chime__table_config_t *chime__table_config(const chime__table_t *t) {
  return &t->cfg;
}

uint64_t chime__table_sample_bytes(const chime__table_t *t) {
  return t->sample_bytes;
}

const chime_spec_t *chime__table_item_spec(const chime__table_t *t) {
  return &t->item_spec;
}

int chime__table_compress_text(const chime__table_config_t *cfg, char *buf,
                               size_t len) {
  size_t at = 0;
  if (len == 0)
    return CHIME_EINVAL;
  buf[0] = '\0';
  for (uint32_t i = 0; i < cfg->spec.nleaves; i++) {
    if (cfg->compress[i] == 0)
      continue;
    int n = snprintf(buf + at, len - at, "%s%s:%u", at > 0 ? "," : "",
                     cfg->spec.leaves[i].name, cfg->compress[i]);
    if (n < 0 || (size_t)n >= len - at) {
      buf[0] = '\0';
      return CHIME_EINVAL;
    }
    at += (size_t)n;
  }
  return 0;
}

void chime__table_get_stats(chime__table_t *t, chime__table_stats_t *out) {
  memset(out, 0, sizeof(*out)); /* a field this does not count reads 0 */
  chime__tbl_lock(t);
  out->size = t->count;
  out->capacity = t->cfg.capacity;
  out->inserts = t->inserts;
  out->samples = t->samples;
  out->sampler_wait_ns = t->sampler_wait_ns;
  out->insert_wait_ns = t->insert_wait_ns;
  out->returned = t->returned;
  out->rate_insert_wait_ns = t->rate_insert_wait_ns;
  out->rate_sample_wait_ns = t->rate_sample_wait_ns;
  out->left = t->left;
  out->left_times_sampled = t->left_times;
  out->dropped_zero_variance = t->group_dropped[0];
  out->dropped_mean_outside = t->group_dropped[1];
  out->inserts_waiting_rate = t->inserts_waiting_rate;
  out->windows_dropped = t->windows_dropped;
  out->ragged_bytes = t->rag_bytes;
  out->ragged_alloc_bytes = t->rag_alloc;
  /* The items' bytes as inserted and as kept: they differ by what the
   * compressed leaves saved. */
  uint64_t plain = t->count * (t->fixed_bytes - t->z_sample) + t->rag_bytes;
  out->raw_bytes = plain + t->z_raw;
  out->stored_bytes = plain + t->z_stored;
  out->leaves_stored_raw = t->z_kept_raw;
  out->nzleaves = t->nz;
  for (uint32_t k = 0; k < t->nz; k++) {
    out->zleaf[k].leaf = t->zl[k];
    out->zleaf[k].level = t->cfg.compress[t->zl[k]];
    out->zleaf[k].raw_bytes = t->zk_raw[k];
    out->zleaf[k].stored_bytes = t->zk_stored[k];
    out->zleaf[k].stored_raw = t->zk_kept_raw[k];
  }
  out->removed_stale = t->removed_stale;
  out->newest_version = t->vnewest;
  if (t->file != NULL) /* fstat: a syscall each, not under a hot path */
    out->disk_bytes = chime__tbl_file_disk_bytes(t->file) +
                      (t->bytes != NULL ? chime__tbl_bytes_disk(t->bytes) : 0);
  out->pace_wait_ns = t->pace_wait_ns;
  out->paced_inserts = t->paced_inserts;
  out->inserts_waiting_pace = t->inserts_waiting_pace;
  out->pace_ahead = t->pace_ahead;
  out->mass = t->sel->mass != NULL ? t->sel->mass(t) : (double)t->count;
  out->sample_blocked =
      t->count >= t->cfg.min_size && !t->lim->allows_sample(t);
  if (t->steps != NULL) {
    chime__steps_stats_t ss;
    chime__steps_get_stats(t->steps, &ss);
    out->steps = ss.steps;
    out->episodes_open = ss.episodes;
    out->step_bytes = ss.bytes;
    /* The steps' bytes as inserted and as kept (windows hold none). */
    uint64_t zs = 0;
    for (uint32_t l = 0; l < t->sleaves; l++)
      zs += t->zraw[l];
    uint64_t rawleaves = ss.steps * (t->sample_bytes - zs);
    out->raw_bytes = rawleaves + ss.z_raw;
    out->stored_bytes = rawleaves + ss.z_stored;
    out->leaves_stored_raw = ss.z_kept_raw;
    out->steps_inserted = chime__key_count(t->step_key) - 1; /* not the shard */
  }
  uint64_t now = chime__clock_ns(CLOCK_MONOTONIC);
  for (const chime__table_waiter_t *w = t->waiters; w != NULL; w = w->next) {
    if (w->rate)
      out->samplers_waiting_rate++;
    else
      out->samplers_waiting_items++;
    if (w->rate_since != 0) /* the waits going on count so far */
      out->rate_sample_wait_ns += now - w->rate_since;
  }
  pthread_mutex_unlock(&t->mu);
}

/* Items arrived (or the table closed): wakes blocked samplers and hands
 * back the waiters to call once the lock is released. */
chime__table_waiter_t *chime__tbl_items_arrived(chime__table_t *t) {
  chime__table_waiter_t *w = t->waiters;
  t->waiters = NULL;
  for (chime__table_waiter_t *x = w; x != NULL; x = x->next)
    x->queued = 0;
  pthread_cond_broadcast(&t->items);
  return w;
}

void chime__tbl_notify(chime__table_waiter_t *w) {
  while (w != NULL) {
    chime__table_waiter_t *n = w->next; /* fn may queue w again */
    w->fn(w);
    w = n;
  }
}

void chime__tbl_wait_timed(pthread_cond_t *c, pthread_mutex_t *mu,
                           uint64_t *acc) {
  uint64_t t0 = chime__clock_ns(CLOCK_MONOTONIC);
  pthread_cond_wait(c, mu);
  *acc += chime__clock_ns(CLOCK_MONOTONIC) - t0;
}

/* Makes row r (its item written) live in every structure: the newest in
 * insert order, or the oldest (an item given back). w: its weight in the
 * sum tree, chime__tbl_weight(t, its priority), when there is one. */
void chime__tbl_live_add_weighted(chime__table_t *t, uint32_t r, int oldest,
                                  double w) {
  t->dpos[r] = (uint32_t)t->count; /* also says "live" without dense */
  if (t->dense_on)
    t->dense[t->count] = r;
  t->count++;
  if (oldest) {
    t->nx[r] = t->oldest;
    t->prev[r] = NONE;
    if (t->oldest != NONE)
      t->prev[t->oldest] = r;
    else
      t->newest = r;
    t->oldest = r;
  } else {
    t->prev[r] = t->newest;
    t->nx[r] = NONE;
    if (t->newest != NONE)
      t->nx[t->newest] = r;
    else
      t->oldest = r;
    t->newest = r;
  }
  int e = 0;
  if (t->sum != NULL && chime__sumtree_set(t->sum, r, w))
    e = chime__sumtree_set(t->sum, r, 0.0); /* checked at insert: can't */
  if (t->hmin != NULL)
    e |= chime__heap_push(t->hmin, r, t->meta[r].prio);
  if (t->hmax != NULL)
    e |= chime__heap_push(t->hmax, r, t->meta[r].prio);
  /* Keys are new (or left: given back) and the index holds every row. */
  e |= chime__keyindex_insert(t->keys, t->meta[r].key, r);
  if (t->vidx != NULL)
    chime__verindex_add(t->vidx, r, t->meta[r].version, w);
  (void)e; /* the row was free, the key checked: cannot fail */
  if (t->commit != NULL)
    chime__tbl_commit(t, r, oldest ? t->seq_lo-- : ++t->seq_hi);
}

void chime__tbl_live_add(chime__table_t *t, uint32_t r, int oldest) {
  chime__tbl_live_add_weighted(
      t, r, oldest,
      t->sum != NULL ? chime__tbl_weight(t, t->meta[r].prio) : 0.0);
}

/* Takes live row r out; it is free again once no sampler copies it. */
void chime__tbl_live_remove(chime__table_t *t, uint32_t r) {
  if (t->commit != NULL)
    chime__tbl_commit(t, r, 0);
  --t->count;
  t->left++;
  t->left_times += t->meta[r].times;
  if (t->dense_on) {
    uint32_t last = t->dense[t->count];
    t->dense[t->dpos[r]] = last;
    t->dpos[last] = t->dpos[r];
  }
  t->dpos[r] = NONE;
  if (t->prev[r] != NONE)
    t->nx[t->prev[r]] = t->nx[r];
  else
    t->oldest = t->nx[r];
  if (t->nx[r] != NONE)
    t->prev[t->nx[r]] = t->prev[r];
  else
    t->newest = t->prev[r];
  int e = 0;
  double w = 0.0; /* its weight, for the version index */
  if (t->sum != NULL) {
    w = chime__sumtree_get(t->sum, r);
    e = chime__sumtree_set(t->sum, r, 0.0);
  }
  if (t->hmin != NULL)
    e |= chime__heap_remove(t->hmin, r);
  if (t->hmax != NULL)
    e |= chime__heap_remove(t->hmax, r);
  e |= chime__keyindex_remove(t->keys, t->meta[r].key, NULL);
  (void)e; /* r was live, so in each: cannot fail */
  if (t->vidx != NULL)
    chime__verindex_remove(t->vidx, r, t->meta[r].version, w);
  if (t->steps != NULL)
    chime__steps_forget(t->steps, t->wslot[r]);
  if (t->meta[r].pins != 0)
    t->ndead++;
  else
    chime__tbl_free_push(t, r);
}

/* Only the stale leave, lowest version first: the index hands them over
 * without a look at any item that stays. */
uint64_t chime__tbl_version_seen(chime__table_t *t, uint64_t ver) {
  uint64_t n = 0, v;
  uint32_t r;
  int rose = ver > t->vnewest;
  if (rose) {
    chime__tbl_pace_progress(t, t->vnewest, ver);
    t->vnewest = ver;
  }
  if (t->vidx == NULL)
    return 0;
  if (rose) /* before removals: Z (staleness weighting) counts on it */
    chime__verindex_set_newest(t->vidx, t->vnewest);
  uint64_t below = chime__tbl_stale_below(t);
  while (chime__verindex_lowest(t->vidx, &r, &v) == 0 && v < below) {
    chime__tbl_live_remove(t, r);
    n++;
  }
  t->removed_stale += n;
  if (n > 0) /* room for a fifo table's inserts */
    pthread_cond_broadcast(&t->space);
  return n;
}

int chime__table_set_version(chime__table_t *t, uint64_t version,
                             uint64_t *newest) {
  chime__tbl_lock(t);
  chime__tbl_version_seen(t, version);
  if (newest != NULL)
    *newest = t->vnewest;
  pthread_mutex_unlock(&t->mu);
  return 0;
}

void chime__table_wake(chime__table_t *t) {
  chime__tbl_lock(t);
  pthread_cond_broadcast(&t->items);
  pthread_cond_broadcast(&t->space);
  pthread_mutex_unlock(&t->mu);
}

void chime__table_close(chime__table_t *t) {
  chime__tbl_lock(t);
  t->closed = 1;
  chime__table_waiter_t *arrived = chime__tbl_items_arrived(t);
  pthread_cond_broadcast(&t->space);
  pthread_mutex_unlock(&t->mu);
  chime__tbl_notify(arrived);
}

/* The whole pages of [base + a * elem, base + b * elem) back to the
 * system (zero when touched again). */
static void drop_pages(uint8_t *base, uint64_t elem, uint64_t a, uint64_t b,
                       uintptr_t pg) {
  uintptr_t lo = ((uintptr_t)(base + a * elem) + pg - 1) & ~(pg - 1);
  uintptr_t hi = (uintptr_t)(base + b * elem) & ~(pg - 1);
  if (hi > lo)
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Spare rows scanned (and their pages given back) per hold of the lock:
 * a few MiB of madvise at most, so inserts and samplers get the lock
 * between chunks. */
#define TRIM_CHUNK 16384u

void chime__table_trim_spares(chime__table_t *t) {
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  chime__tbl_lock(t);
  uint64_t cap = t->cfg.capacity, hw = t->spare_hw, top = cap;
  pthread_mutex_unlock(&t->mu);
  /* Runs of free spare rows: a free row is not live (dpos) and not
   * pinned (a row that left while pinned is neither). Their leaves and
   * bookkeeping are written whole when they are taken again. A row is
   * free or not only while the lock is held, so each chunk is looked at
   * and given back in one hold. */
  for (uint64_t c = cap; c < hw; c += TRIM_CHUNK) {
    uint64_t end = c + TRIM_CHUNK < hw ? c + TRIM_CHUNK : hw;
    chime__tbl_lock(t);
    for (uint64_t r = c; r < end;) {
      if (t->dpos[r] != NONE || t->meta[r].pins != 0) {
        top = ++r;
        continue;
      }
      uint64_t e = r;
      while (e < end && t->dpos[e] == NONE && t->meta[e].pins == 0)
        e++;
      for (uint32_t l = 0; l < t->nleaves; l++)
        drop_pages(t->leaf[l], t->lbytes[l], r, e, pg);
      drop_pages((uint8_t *)t->meta, sizeof(row_meta_t), r, e, pg);
      r = e;
    }
    pthread_mutex_unlock(&t->mu);
  }
  /* Rows taken meanwhile above the scan raised the mark themselves; one
   * taken below it in a chunk already scanned is missed until a row
   * above the mark is taken again (its pages stay: memory, not data). */
  chime__tbl_lock(t);
  if (t->spare_hw == hw)
    t->spare_hw = (uint32_t)top;
  pthread_mutex_unlock(&t->mu);
}

/* A writer's request the table has seen: 1 when it went in before (its
 * original first key in *first_key, dq->resent set: ack it again), 0 when
 * it is new, a CHIME_E code when the table cannot tell (dedupe.h). Under
 * mu, asked again after every wait: the answer holds only while mu is. */
int chime__tbl_seen(chime__table_t *t, chime__dedupe_req_t *dq, uint32_t count,
                    uint64_t *first_key) {
  int rc = chime__dedupe_check(t->dedupe, dq, count, first_key);
  if (rc == CHIME__DEDUPE_RESENT)
    return 1;
  return rc == CHIME__DEDUPE_NEW ? 0 : rc;
}

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
int chime__tbl_priorities_fine(const chime__table_t *t, const double *prio,
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
      chime__tbl_priorities_fine(t, prio, (size_t)count, 0))
    return 0;
  for (uint64_t i = 0; i < count; i++)
    if (priority_why(t, prio[i], 0) != NULL)
      return CHIME_EINVAL;
  return 0;
}

int chime__tbl_priorities_why(const chime__table_t *t, const double *prio,
                              size_t n, int all, char *err, size_t errlen) {
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
