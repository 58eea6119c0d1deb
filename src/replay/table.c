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

/* The indexes (CHIME__SEL_*) the table's sampler and remover read. */
static unsigned needs(const chime__table_config_t *cfg) {
  const chime__selector_t *s = chime__selector(cfg->sampler);
  const chime__selector_t *r = chime__selector(cfg->remover);
  return (s != NULL ? s->needs : 0) | (r != NULL ? r->needs : 0);
}

/* Per-row bookkeeping in the mapping: the row_meta_t records, then the
 * 32-bit arrays dense, dpos, prev, next, freeq, fspare. */
#define NMETA 7
static const uint64_t meta_bytes[NMETA] = {
    sizeof(row_meta_t), 4, 4, 4, 4, 4, 4};

/* Spare rows: as many as the capacity, within 32-bit row numbers. */
static uint64_t rows_for(uint64_t cap) {
  uint64_t max = CHIME__MAX_TABLE_ITEMS; /* NONE stays out of range */
  return cap + (cap < max - cap ? cap : max - cap);
}

/* What create allocated (any part may be missing), and t itself. */
static void free_parts(chime__table_t *t) {
  if (t->map != NULL)
    munmap(t->map, t->map_len);
  chime__dedupe_destroy(t->dedupe);
  chime__keyindex_destroy(t->keys);
  chime__sumtree_destroy(t->sum);
  chime__heap_destroy(t->hmin);
  chime__heap_destroy(t->hmax);
  chime__tbl_seq_destroy(t);
  free(t);
}

/* A priority up to which priority^exponent is surely at most
 * CHIME__SUMTREE_MAX_VALUE, for the fast check of a request's priorities
 * (priority_why decides the rest exactly): a millionth under the exact
 * bound, far more than pow's rounding; DBL_MAX when every finite priority
 * is (exponent 0, or an exponent under log(MAX_VALUE) / log(DBL_MAX)). */
static double sure_priority(const chime__table_config_t *cfg) {
  double e = cfg->priority_exponent;
  if (!(e > 0))
    return DBL_MAX;
  double b = pow(CHIME__SUMTREE_MAX_VALUE, 1.0 / e);
  return isfinite(b) ? b * (1 - 1e-6) : DBL_MAX;
}

int chime__table_create(chime__table_t **out,
                        const chime__table_config_t *cfg) {
  int rc = 0;
  chime__table_t *t = calloc(1, sizeof(*t));
  *out = NULL;
  if (t == NULL)
    return CHIME_ENOMEM;
  t->cfg = *cfg;
  int seq = cfg->sequence_length > 0;
  if (seq)
    t->cfg.capacity = cfg->capacity_steps; /* a step starts one window */
  if (t->cfg.remover == 0)
    t->cfg.remover = CHIME__SAMPLER_FIFO;
  if (t->cfg.min_size == 0) /* config refuses it; in-process callers */
    t->cfg.min_size = 1;
  if (t->cfg.sampler == CHIME__SAMPLER_FIFO && t->cfg.max_times_sampled == 0)
    t->cfg.max_times_sampled = 1;
  t->mts = t->cfg.max_times_sampled;
  t->prio_sure = sure_priority(&t->cfg);
  t->sample_bytes = chime_spec_sample_bytes(&cfg->spec);
  t->nleaves = seq ? 0 : cfg->spec.nleaves;
  t->item_spec = cfg->spec;
  if (seq && (rc = chime__tbl_seq_spec(&t->cfg, &t->item_spec)) != 0)
    goto out;
  if (t->sample_bytes == 0 || t->cfg.capacity == 0 ||
      t->cfg.capacity > CHIME__MAX_TABLE_ITEMS ||
      t->cfg.capacity > CHIME__MAX_TABLE_BYTES / t->sample_bytes ||
      (t->sel = chime__selector(t->cfg.sampler)) == NULL ||
      (t->rem = chime__selector(t->cfg.remover)) == NULL ||
      (t->cfg.sampler == CHIME__SAMPLER_FIFO &&
       t->cfg.remover != CHIME__SAMPLER_FIFO) ||
      !(t->cfg.priority_exponent >= 0) || isinf(t->cfg.priority_exponent)) {
    rc = CHIME_EINVAL;
    goto out;
  }
  size_t cap = (size_t)t->cfg.capacity;
  size_t rows = (size_t)rows_for(t->cfg.capacity);
  size_t len = 0;
  uint64_t off = 0;
  for (uint32_t i = 0; i < t->nleaves; i++) {
    t->lbytes[i] = chime_leaf_bytes(&cfg->spec.leaves[i]);
    t->loff[i] = off;
    off += t->lbytes[i];
    len += chime__tbl_align64(rows * t->lbytes[i]);
  }
  size_t meta_off = len;
  for (int i = 0; i < NMETA; i++)
    len += chime__tbl_align64(rows * meta_bytes[i]);
  /* Anonymous memory: pages are only committed once items land in them. */
  t->map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (t->map == MAP_FAILED) {
    t->map = NULL;
    rc = CHIME_ENOMEM;
    goto out;
  }
  t->map_len = len;
  t->rows = rows;
  rc =
      chime__dedupe_create(&t->dedupe, WRITERS(&t->cfg), t->cfg.writer_idle_ms);
  if (rc != 0)
    goto out;
  uint8_t *p = t->map;
  for (uint32_t i = 0; i < t->nleaves; i++) {
    t->leaf[i] = p;
    p += chime__tbl_align64(rows * t->lbytes[i]);
  }
  p = (uint8_t *)t->map + meta_off;
  t->meta = (row_meta_t *)p;
  p += chime__tbl_align64(rows * sizeof(row_meta_t));
  uint32_t **u32[] = {&t->dense, &t->dpos,  &t->prev,
                      &t->nx,    &t->freeq, &t->fspare};
  for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++) {
    *u32[i] = (uint32_t *)p;
    p += chime__tbl_align64(rows * sizeof(uint32_t));
  }
  for (size_t r = 0; r < rows; r++)
    t->dpos[r] = NONE;
  for (size_t r = 0; r < cap; r++)
    t->freeq[r] = (uint32_t)r;
  t->nfree = (uint32_t)cap;
  /* Popped last first: the lowest spare rows are the ones touched. */
  for (size_t r = cap; r < rows; r++)
    t->fspare[rows - 1 - r] = (uint32_t)r;
  t->nspare = (uint32_t)(rows - cap);
  t->lim = &chime__limiter_ratio;
  unsigned need = needs(&t->cfg);
  t->dense_on = (need & CHIME__SEL_DENSE) != 0;
  t->oldest = t->newest = NONE;
  /* Indexed by row: items given back may take spare rows. */
  if ((rc = chime__keyindex_create(&t->keys, rows)) != 0)
    goto out;
  if ((need & CHIME__SEL_SUM) &&
      (rc = chime__sumtree_create(&t->sum, rows)) != 0)
    goto out;
  if ((need & CHIME__SEL_MIN_HEAP) &&
      (rc = chime__heap_create(&t->hmin, (uint32_t)rows, CHIME__HEAP_MIN)) != 0)
    goto out;
  if ((need & CHIME__SEL_MAX_HEAP) &&
      (rc = chime__heap_create(&t->hmax, (uint32_t)rows, CHIME__HEAP_MAX)) != 0)
    goto out;
  if (seq && (rc = chime__tbl_seq_create(t, rows)) != 0)
    goto out;
  t->next_key = 1;
  t->rng =
      (cfg->seed != 0 ? cfg->seed : chime__tbl_now_ns(CLOCK_MONOTONIC)) | 1u;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->space, NULL);
  pthread_cond_init(&t->items, NULL);
  pthread_cond_init(&t->unpinned, NULL);
  pthread_cond_init(&t->handoff, NULL);
  *out = t;
  t = NULL;
out:
  if (t != NULL)
    free_parts(t);
  return rc;
}

void chime__table_destroy(chime__table_t *t) {
  if (t == NULL)
    return;
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->space);
  pthread_cond_destroy(&t->items);
  pthread_cond_destroy(&t->unpinned);
  pthread_cond_destroy(&t->handoff);
  free_parts(t);
}

const chime__table_config_t *chime__table_config(const chime__table_t *t) {
  return &t->cfg;
}

uint64_t chime__table_sample_bytes(const chime__table_t *t) {
  return t->sample_bytes;
}

const chime_spec_t *chime__table_item_spec(const chime__table_t *t) {
  return &t->item_spec;
}

void chime__table_get_stats(chime__table_t *t, chime__table_stats_t *out) {
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
  out->inserts_waiting_rate = t->inserts_waiting_rate;
  out->samplers_waiting_rate = out->samplers_waiting_items = 0;
  out->steps = out->episodes_open = out->step_bytes = out->steps_inserted = 0;
  out->windows_dropped = t->windows_dropped;
  if (t->steps != NULL) {
    chime__steps_stats_t ss;
    chime__steps_get_stats(t->steps, &ss);
    out->steps = ss.steps;
    out->episodes_open = ss.episodes;
    out->step_bytes = ss.bytes;
    out->steps_inserted = t->step_key - 1;
  }
  uint64_t now = chime__tbl_now_ns(CLOCK_MONOTONIC);
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
  uint64_t t0 = chime__tbl_now_ns(CLOCK_MONOTONIC);
  pthread_cond_wait(c, mu);
  *acc += chime__tbl_now_ns(CLOCK_MONOTONIC) - t0;
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
  (void)e; /* the row was free, the key checked: cannot fail */
}

void chime__tbl_live_add(chime__table_t *t, uint32_t r, int oldest) {
  chime__tbl_live_add_weighted(
      t, r, oldest,
      t->sum != NULL ? chime__tbl_weight(t, t->meta[r].prio) : 0.0);
}

/* Takes live row r out; it is free again once no sampler copies it. */
void chime__tbl_live_remove(chime__table_t *t, uint32_t r) {
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
  if (t->sum != NULL)
    e = chime__sumtree_set(t->sum, r, 0.0);
  if (t->hmin != NULL)
    e |= chime__heap_remove(t->hmin, r);
  if (t->hmax != NULL)
    e |= chime__heap_remove(t->hmax, r);
  e |= chime__keyindex_remove(t->keys, t->meta[r].key, NULL);
  (void)e; /* r was live, so in each: cannot fail */
  if (t->steps != NULL)
    chime__steps_forget(t->steps, t->wslot[r]);
  if (t->meta[r].pins != 0)
    t->ndead++;
  else
    chime__tbl_free_push(t, r);
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

/* The same sums as chime__table_create's layout; keep the two in step.
 * The sum tree and heaps are allocated beside it and counted here too. */
uint64_t chime__table_bytes(const chime__table_config_t *cfg) {
  uint64_t cap = cfg->capacity, total = 0, b;
  uint32_t n = cfg->spec.nleaves;
  if (cfg->sequence_length > 0) {
    /* Rows hold windows (no leaf bytes; first step, index, length and
     * episode: 20 bytes, spares included); the steps are stored once. */
    chime__steps_config_t sc = {
        .capacity_steps = cfg->capacity_steps,
        .sequence_length = cfg->sequence_length,
        .stride = cfg->stride,
        .pad = cfg->episode_pad,
        .max_episodes = WRITERS(cfg),
    };
    uint64_t sb = chime__steps_bytes(&cfg->spec, &sc);
    cap = cfg->capacity_steps;
    n = 0;
    if (sb == UINT64_MAX || __builtin_mul_overflow(cap, UINT64_C(40), &b) ||
        __builtin_add_overflow(sb, b, &total))
      return UINT64_MAX;
  }
  for (uint32_t i = 0; i < n + NMETA + 4; i++) {
    uint64_t per;
    if (i < n)
      per = chime_leaf_bytes(&cfg->spec.leaves[i]);
    else if (i < n + NMETA)
      per = meta_bytes[i - n];
    else if (i == n + NMETA)
      per = needs(cfg) & CHIME__SEL_SUM ? 16 : 0;
    else if (i == n + NMETA + 3)
      per = 18; /* the key index: 12 bytes a bucket, 10/7 buckets an item */
    else
      per = needs(cfg) & (i == n + NMETA + 1 ? CHIME__SEL_MIN_HEAP
                                             : CHIME__SEL_MAX_HEAP)
                ? 28
                : 0;
    if (__builtin_mul_overflow(cap, per, &b) || b > UINT64_MAX - 63 ||
        __builtin_add_overflow(total, (b + 63) & ~UINT64_C(63), &total))
      return UINT64_MAX;
  }
  return total;
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
