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
#include "replay/table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/insert_window.h"
#include "replay/heap.h"
#include "replay/keyindex.h"
#include "replay/steps.h"
#include "replay/sumtree.h"

#include <float.h>
#include <math.h>

/* A row's bookkeeping, in one record: a sample reads and writes all of
 * it, and in a table far larger than the caches each array it lived in
 * was one more cache and TLB miss per sample. */
typedef struct {
  uint64_t key;
  uint64_t itime; /* insert time, ns */
  double prio;
  uint32_t times; /* times sampled */
  uint32_t pins;  /* samplers copying the row right now, without the lock */
} row_meta_t;

struct chime__table_s {
  chime__table_config_t cfg;
  uint64_t sample_bytes;
  uint32_t nleaves;
  uint64_t lbytes[CHIME_MAX_LEAVES];
  uint64_t loff[CHIME_MAX_LEAVES]; /* offset of the leaf in a sample */
  uint8_t *leaf[CHIME_MAX_LEAVES];
  row_meta_t *meta;
  uint32_t *dense;       /* the live rows, in no order */
  uint32_t *dpos;        /* row -> its index in dense; NONE: not live */
  uint32_t *prev, *nx;   /* live rows in insert order */
  uint32_t *freeq;       /* free rows under the capacity, in the order freed */
  uint32_t *fspare;      /* free spare rows, a stack */
  chime__sumtree_t *sum; /* priority^exponent by row (prioritized) */
  chime__heap_t *hmin, *hmax;
  chime__keyindex_t *keys; /* key -> live row (MutatePriorities) */
  uint64_t mts;            /* max_times_sampled, 0: no limit */
  double prio_sure; /* priorities up to it weigh within bounds (surely) */
  void *map;
  size_t map_len;

  pthread_mutex_t mu;
  pthread_cond_t space;
  pthread_cond_t items;
  pthread_cond_t unpinned; /* an insert waits for a pinned row */
  pthread_cond_t handoff;  /* a sliced mutation lets a waiter go first */
  int pin_waiters;
  /* Threads queued for mu (lock_table), and how many took it after a
   * wait: a mutation between two slices waits for one of them. */
  atomic_uint lock_waiters;
  uint64_t handoffs;
  int yielding;                   /* mutations waiting on handoff */
  void (*mutate_hook)(void *arg); /* tests: at each break of a mutation */
  void *mutate_hook_arg;
  int viewing; /* checkpoint views holding rows (chime__table_view) */
  uint32_t oldest, newest;   /* NONE when empty */
  uint64_t rows;             /* capacity + spare rows */
  uint32_t free_head, nfree; /* freeq ring, wrapped at the capacity */
  uint32_t nspare;           /* fspare stack */
  int dense_on;              /* a uniform selector needs dense */
  uint64_t count;            /* live items */
  uint64_t ndead; /* rows whose item left while pinned: neither live nor free */
  chime__table_waiter_t *waiters; /* samplers told when items arrive */
  uint64_t next_key;
  uint64_t rng;
  int closed;
  chime__dedupe_t *dedupe; /* writers' requests, under mu */
  uint64_t inserts, samples, sampler_wait_ns, insert_wait_ns, returned;
  uint64_t rate_insert_wait_ns; /* inserts held back by the rate limiter */
  uint64_t rate_sample_wait_ns; /* samplers held back by it */
  uint32_t inserts_waiting_rate;
  uint64_t left, left_times; /* items that left, and their times sampled */
  /* A sequence table: rows hold windows (no leaf bytes), the steps are in
   * the step store. nleaves is 0 then; the step spec's leaves are sleaves,
   * their bytes in lbytes. */
  chime__steps_t *steps;
  chime_spec_t item_spec; /* a batch's: [T, *shape] per leaf (+ mask) */
  uint32_t sleaves;
  uint32_t *wslot, *wfirst, *wlen; /* a window's first step, index, length */
  uint64_t *wep;                   /* its episode */
  double max_prio;                 /* initial_priority "max" */
  uint64_t step_key, windows_dropped;
  uint32_t spare_hw; /* spare rows below it touched since the last trim */
};

#define NONE UINT32_MAX
/* Writers remembered (and a sequence table's lanes). */
#define WRITERS(cfg)                                                           \
  ((cfg)->max_writers ? (cfg)->max_writers : CHIME__INSERT_WRITERS)

/* The table's lock, taken by everyone but a mutation's next slice. A
 * large MutatePriorities holds it in slices (chime__table_mutate) and,
 * between two, lets a thread that queued for it go first: glibc's mutexes
 * are not fair, and the mutation would take the lock straight back while
 * the waiter is still being woken. Uncontended, this is one trylock. */
static void lock_table(chime__table_t *t) {
  if (pthread_mutex_trylock(&t->mu) == 0)
    return;
  atomic_fetch_add(&t->lock_waiters, 1);
  pthread_mutex_lock(&t->mu);
  atomic_fetch_sub(&t->lock_waiters, 1);
  t->handoffs++;
  if (t->yielding > 0)
    pthread_cond_broadcast(&t->handoff);
}

static int uses(const chime__table_config_t *cfg, chime__sampler_t s) {
  return cfg->sampler == s || cfg->remover == s;
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

static uint64_t now_ns(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t align64(size_t n) {
  return (n + 63u) & ~(size_t)63u;
}

/* A sequence table's batch spec: each step leaf with sequence_length
 * prepended to its shape, then mask: u8[T] when episodes end padded. */
static int seq_spec(const chime__table_config_t *cfg, chime_spec_t *out) {
  const chime_spec_t *st = &cfg->spec;
  uint32_t n = st->nleaves;
  if (cfg->stride == 0 || cfg->stride > cfg->sequence_length ||
      n + (cfg->episode_pad ? 1u : 0u) > CHIME_MAX_LEAVES)
    return CHIME_EINVAL;
  *out = *st;
  for (uint32_t i = 0; i < n; i++) {
    chime_leaf_t *l = &out->leaves[i];
    if (l->ndim >= CHIME_MAX_DIMS)
      return CHIME_EINVAL;
    memmove(&l->shape[1], &l->shape[0], l->ndim * sizeof(l->shape[0]));
    l->shape[0] = cfg->sequence_length;
    l->ndim++;
  }
  if (cfg->episode_pad) {
    chime_leaf_t *m = &out->leaves[n];
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "mask");
    m->dtype = CHIME_DTYPE_U8;
    m->ndim = 1;
    m->shape[0] = cfg->sequence_length;
    out->nleaves = n + 1;
  }
  return chime_spec_validate(out, NULL, 0) == 0 ? 0 : CHIME_EINVAL;
}

static uint32_t seq_window(void *ctx, const chime__window_t *w);
static void seq_evict(void *ctx, uint32_t row);

static int seq_create(chime__table_t *t, size_t rows) {
  chime__steps_config_t sc = {
      .capacity_steps = t->cfg.capacity_steps,
      .sequence_length = t->cfg.sequence_length,
      .stride = t->cfg.stride,
      .pad = t->cfg.episode_pad,
      .max_episodes = WRITERS(&t->cfg), /* a lane per writer remembered */
  };
  chime__steps_cb_t cb = {seq_window, seq_evict, t};
  t->sleaves = t->cfg.spec.nleaves;
  for (uint32_t i = 0; i < t->sleaves; i++)
    t->lbytes[i] = chime_leaf_bytes(&t->cfg.spec.leaves[i]);
  t->wslot = calloc(rows, sizeof(uint32_t));
  t->wfirst = calloc(rows, sizeof(uint32_t));
  t->wlen = calloc(rows, sizeof(uint32_t));
  t->wep = calloc(rows, sizeof(uint64_t));
  if (!t->wslot || !t->wfirst || !t->wlen || !t->wep)
    return CHIME_ENOMEM;
  t->max_prio = 1.0;
  t->step_key = 1;
  return chime__steps_create(&t->steps, &t->cfg.spec, &sc, &cb);
}

static void seq_destroy(chime__table_t *t) {
  chime__steps_destroy(t->steps);
  free(t->wslot);
  free(t->wfirst);
  free(t->wlen);
  free(t->wep);
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
  seq_destroy(t);
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
  if (seq && (rc = seq_spec(&t->cfg, &t->item_spec)) != 0)
    goto out;
  if (t->sample_bytes == 0 || t->cfg.capacity == 0 ||
      t->cfg.capacity > CHIME__MAX_TABLE_ITEMS ||
      t->cfg.capacity > CHIME__MAX_TABLE_BYTES / t->sample_bytes ||
      t->cfg.sampler < CHIME__SAMPLER_FIFO ||
      t->cfg.sampler > CHIME__SAMPLER_MAX_HEAP ||
      t->cfg.remover < CHIME__SAMPLER_FIFO ||
      t->cfg.remover > CHIME__SAMPLER_MAX_HEAP ||
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
    len += align64(rows * t->lbytes[i]);
  }
  size_t meta_off = len;
  for (int i = 0; i < NMETA; i++)
    len += align64(rows * meta_bytes[i]);
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
    p += align64(rows * t->lbytes[i]);
  }
  p = (uint8_t *)t->map + meta_off;
  t->meta = (row_meta_t *)p;
  p += align64(rows * sizeof(row_meta_t));
  uint32_t **u32[] = {&t->dense, &t->dpos,  &t->prev,
                      &t->nx,    &t->freeq, &t->fspare};
  for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++) {
    *u32[i] = (uint32_t *)p;
    p += align64(rows * sizeof(uint32_t));
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
  t->dense_on = uses(&t->cfg, CHIME__SAMPLER_UNIFORM) ||
                uses(&t->cfg, CHIME__SAMPLER_PRIORITIZED); /* all-zero */
  t->oldest = t->newest = NONE;
  /* Indexed by row: items given back may take spare rows. */
  if ((rc = chime__keyindex_create(&t->keys, rows)) != 0)
    goto out;
  if (uses(&t->cfg, CHIME__SAMPLER_PRIORITIZED) &&
      (rc = chime__sumtree_create(&t->sum, rows)) != 0)
    goto out;
  if (uses(&t->cfg, CHIME__SAMPLER_MIN_HEAP) &&
      (rc = chime__heap_create(&t->hmin, (uint32_t)rows, CHIME__HEAP_MIN)) != 0)
    goto out;
  if (uses(&t->cfg, CHIME__SAMPLER_MAX_HEAP) &&
      (rc = chime__heap_create(&t->hmax, (uint32_t)rows, CHIME__HEAP_MAX)) != 0)
    goto out;
  if (seq && (rc = seq_create(t, rows)) != 0)
    goto out;
  t->next_key = 1;
  t->rng = (cfg->seed != 0 ? cfg->seed : now_ns(CLOCK_MONOTONIC)) | 1u;
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
  lock_table(t);
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
  uint64_t now = now_ns(CLOCK_MONOTONIC);
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

/* Small leaves (scalars) are the common case; a fixed-size memcpy is inlined
 * by the compiler where a variable one is a call. */
static inline void copy_leaf(uint8_t *dst, const uint8_t *src, uint64_t n) {
  switch (n) {
  case 1:
    *dst = *src;
    break;
  case 2:
    memcpy(dst, src, 2);
    break;
  case 4:
    memcpy(dst, src, 4);
    break;
  case 8:
    memcpy(dst, src, 8);
    break;
  default:
    memcpy(dst, src, n);
  }
}

/* Items arrived (or the table closed): wakes blocked samplers and hands
 * back the waiters to call once the lock is released. */
static chime__table_waiter_t *items_arrived_locked(chime__table_t *t) {
  chime__table_waiter_t *w = t->waiters;
  t->waiters = NULL;
  for (chime__table_waiter_t *x = w; x != NULL; x = x->next)
    x->queued = 0;
  pthread_cond_broadcast(&t->items);
  return w;
}

static void notify(chime__table_waiter_t *w) {
  while (w != NULL) {
    chime__table_waiter_t *n = w->next; /* fn may queue w again */
    w->fn(w);
    w = n;
  }
}

static void wait_timed(pthread_cond_t *c, pthread_mutex_t *mu, uint64_t *acc) {
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  pthread_cond_wait(c, mu);
  *acc += now_ns(CLOCK_MONOTONIC) - t0;
}

int chime__table_insert(chime__table_t *t, const uint8_t *data, uint32_t count,
                        const double *priorities, uint64_t *first_key,
                        const atomic_int *abort, chime__dedupe_req_t *dq) {
  chime__span_t one = {data, (size_t)(count * t->sample_bytes)};
  return chime__table_insert_spans(t, &one, 1, count, priorities, first_key,
                                   abort, dq);
}

/* Reads a sample's bytes in order from pieces of a message; a leaf that
 * straddles two pieces is the rare case. */
typedef struct {
  const chime__span_t *sp;
  size_t i, off;
} cursor_t;

static void cursor_read(cursor_t *c, uint8_t *dst, uint64_t n) {
  const chime__span_t *s = &c->sp[c->i];
  if (s->len - c->off >= n) {
    copy_leaf(dst, s->p + c->off, n);
    c->off += (size_t)n;
    return;
  }
  while (n > 0) {
    size_t avail = c->sp[c->i].len - c->off;
    if (avail == 0) {
      c->i++;
      c->off = 0;
      continue;
    }
    size_t take = n < avail ? (size_t)n : avail;
    memcpy(dst, c->sp[c->i].p + c->off, take);
    dst += take;
    c->off += take;
    n -= take;
  }
}

static void cursor_skip(cursor_t *c, uint64_t n) {
  while (n > 0) {
    size_t avail = c->sp[c->i].len - c->off;
    if (avail == 0) {
      c->i++;
      c->off = 0;
      continue;
    }
    size_t take = n < avail ? (size_t)n : avail;
    c->off += take;
    n -= take;
  }
}

static uint64_t next_rand(chime__table_t *t) {
  /* xorshift64*: quality is ample for replay sampling and it is cheap. */
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * UINT64_C(2685821657736338717);
}

/* Free rows: rows - count - ndead of them. Rows under the capacity go
 * round a ring in the order they were freed (no division on the hot path:
 * the index wraps by comparison); spare rows are taken only when none of
 * those is free. */
static void free_push(chime__table_t *t, uint32_t r) {
  if (r >= t->cfg.capacity) {
    t->fspare[t->nspare++] = r;
    return;
  }
  uint64_t tail = t->free_head + (uint64_t)t->nfree;
  if (tail >= t->cfg.capacity)
    tail -= t->cfg.capacity;
  t->freeq[tail] = r;
  t->nfree++;
}

static uint32_t free_pop(chime__table_t *t) {
  if (t->nfree == 0) {
    uint32_t r = t->fspare[--t->nspare];
    if (r >= t->spare_hw) /* pages to give back (trim_spares) */
      t->spare_hw = r + 1;
    return r;
  }
  uint32_t r = t->freeq[t->free_head];
  if (++t->free_head == t->cfg.capacity)
    t->free_head = 0;
  t->nfree--;
  return r;
}

/* The value a row weighs in the sum tree. */
static double weight(const chime__table_t *t, double prio) {
  double e = t->cfg.priority_exponent;
  return e == 1.0 ? prio : pow(prio, e);
}

/* Makes row r (its item written) live in every structure: the newest in
 * insert order, or the oldest (an item given back). w: its weight in the
 * sum tree, weight(t, its priority), when there is one. */
static void live_add_weighted(chime__table_t *t, uint32_t r, int oldest,
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

static void live_add(chime__table_t *t, uint32_t r, int oldest) {
  live_add_weighted(t, r, oldest,
                    t->sum != NULL ? weight(t, t->meta[r].prio) : 0.0);
}

/* Takes live row r out; it is free again once no sampler copies it. */
static void live_remove(chime__table_t *t, uint32_t r) {
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
    free_push(t, r);
}

/* The live row a selector picks (the table holds at least one item), and
 * the probability it had of being picked. */
static uint32_t select_row(chime__table_t *t, chime__sampler_t how,
                           double *prob) {
  uint32_t r = NONE;
  *prob = 1.0;
  switch (how) {
  case CHIME__SAMPLER_FIFO:
    return t->oldest;
  case CHIME__SAMPLER_LIFO:
    return t->newest;
  case CHIME__SAMPLER_MIN_HEAP:
    if (chime__heap_top(t->hmin, &r, NULL) == 0)
      return r;
    break;
  case CHIME__SAMPLER_MAX_HEAP:
    if (chime__heap_top(t->hmax, &r, NULL) == 0)
      return r;
    break;
  case CHIME__SAMPLER_PRIORITIZED: {
    double total = chime__sumtree_total(t->sum);
    uint64_t slot;
    /* 53 random bits: a double in [0, 1). */
    double u = (double)(next_rand(t) >> 11) * 0x1p-53;
    if (total > 0 && chime__sumtree_find(t->sum, u * total, &slot) == 0) {
      *prob = chime__sumtree_get(t->sum, slot) / total;
      return (uint32_t)slot;
    }
    break; /* every priority 0: uniform */
  }
  case CHIME__SAMPLER_UNIFORM:
    break;
  }
  *prob = 1.0 / (double)t->count;
  return t->dense[next_rand(t) % t->count];
}

/* The rate limiter (samples_per_insert, Reverb's SampleToInsertRatio and
 * its RateLimiter's rules): samples - samples_per_insert * inserts stays
 * within error_buffer of its value at min_size. Reverb counts inserts,
 * samples and deletes, every item that leaves (sampled out, evicted,
 * deleted) a delete, so that inserts - deletes is the table's size:
 * t->count here (an item given back is un-deleted, and counts again).
 * An insert goes in while the table, with one more item, holds at most
 * min_size (until the min size is reached, or removals brought the table
 * back below it, inserts are free: else a table that sampling emptied
 * below min_size would wait for ever, the sampler for items and the
 * insert for samples), or else while one more item keeps the difference
 * under the top of the window; a batch may be taken while the table holds
 * min_size items and one more sample keeps it over the bottom. A request
 * or a batch can pass the window by itself, less one item. Checked under
 * the table lock. */
static int rate_allows_insert(const chime__table_t *t) {
  double spi = t->cfg.samples_per_insert;
  if (spi == 0 || t->count < t->cfg.min_size)
    return 1;
  double top = spi * (double)t->cfg.min_size + t->cfg.error_buffer;
  return (double)(t->inserts + 1) * spi - (double)t->samples <= top;
}

static int rate_allows_sample(const chime__table_t *t) {
  double spi = t->cfg.samples_per_insert;
  if (spi == 0)
    return 1;
  if (t->count < t->cfg.min_size)
    return 0;
  double bottom = spi * (double)t->cfg.min_size - t->cfg.error_buffer;
  return (double)t->inserts * spi - (double)(t->samples + 1) >= bottom;
}

/* A writer's request the table has seen: 1 when it went in before (its
 * original first key in *first_key, dq->resent set: ack it again), 0 when
 * it is new, a CHIME_E code when the table cannot tell (dedupe.h). Under
 * mu, asked again after every wait: the answer holds only while mu is. */
static int seen_locked(chime__table_t *t, chime__dedupe_req_t *dq,
                       uint32_t count, uint64_t *first_key) {
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
  if (t->sum != NULL && !(weight(t, p) <= CHIME__SUMTREE_MAX_VALUE))
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
static int check_priorities(const chime__table_t *t, const double *prio,
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
                 weight(t, prio[i]), CHIME__SUMTREE_MAX_VALUE);
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

/* A window an episode completed becomes an item (the table lock held,
 * from chime__steps_append or _end): the newest, with the table's initial
 * priority. */
static uint32_t seq_window(void *ctx, const chime__window_t *w) {
  chime__table_t *t = ctx;
  if (t->rows - t->count - t->ndead == 0) {
    t->windows_dropped++; /* every row live or pinned: cannot happen while
                             pinned rows stay under the spares */
    return NONE;
  }
  uint32_t r = free_pop(t);
  t->meta[r].key = t->next_key++;
  t->meta[r].itime = now_ns(CLOCK_REALTIME);
  t->meta[r].times = 0;
  t->meta[r].prio =
      t->cfg.initial_priority_max ? t->max_prio : t->cfg.initial_priority;
  t->wslot[r] = w->slot;
  t->wfirst[r] = w->first;
  t->wlen[r] = w->len;
  t->wep[r] = w->episode;
  live_add(t, r, 0);
  t->inserts++;
  return r;
}

/* The block holding the window's first step leaves: so does the item. */
static void seq_evict(void *ctx, uint32_t row) {
  live_remove(ctx, row);
}

static void seq_read(void *ctx, uint8_t *dst, uint64_t n) {
  cursor_read(ctx, dst, n);
}

/* A sequence table's insert: count steps appended to the writer's open
 * episode (all under one lock hold, so samplers see the windows they make
 * all or none), then the episode ends if the request says so. Never waits
 * for room: the oldest steps leave, with the windows starting in them. */
static int seq_insert(chime__table_t *t, const chime__span_t *spans,
                      uint32_t count, const double *priorities,
                      uint64_t *first_key, const atomic_int *abort,
                      chime__dedupe_req_t *dq, int nowait) {
  int rc = 0;
  chime__table_waiter_t *arrived = NULL;
  cursor_t cur = {spans, 0, 0};
  if (priorities != NULL || dq == NULL || dq->writer == 0)
    return CHIME_EINVAL; /* windows' priorities; episodes are per writer */
  lock_table(t);
  for (;;) {
    if (t->closed) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if ((rc = seen_locked(t, dq, count, first_key)) != 0) {
      rc = rc > 0 ? 0 : rc;
      goto out;
    }
    int rate = rate_allows_insert(t);
    /* The oldest blocks it would reuse may be pinned by a sampler's copy
     * (for as long as the copy takes): checked before any step goes in. */
    if (rate && chime__steps_room(
                    t->steps, chime__steps_lane(t->steps, dq->writer), count))
      break;
    if ((abort != NULL && atomic_load(abort)) || nowait) {
      rc = nowait ? CHIME_EBUSY : CHIME_ESHUTDOWN;
      goto out;
    }
    if (rate) {
      t->pin_waiters++;
      wait_timed(&t->unpinned, &t->mu, &t->insert_wait_ns);
      t->pin_waiters--;
      continue;
    }
    t->inserts_waiting_rate++;
    wait_timed(&t->space, &t->mu, &t->rate_insert_wait_ns);
    t->inserts_waiting_rate--;
  }
  uint32_t ep = chime__steps_lane(t->steps, dq->writer);
  for (uint32_t j = 0; j < count; j++)
    chime__steps_append(t->steps, ep, seq_read, &cur);
  if (dq->end_episode)
    chime__steps_end(t->steps, ep);
  *first_key = t->step_key;
  t->step_key += count;
  chime__dedupe_record(t->dedupe, dq, count, *first_key);
  arrived = items_arrived_locked(t);
out:
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
  return rc;
}

/* An insert's keys land on random buckets of the key index, which a stream
 * of inserted bytes keeps out of the caches: each insert and each eviction
 * paid a miss or two there one after another (a third of chimed's CPU for
 * 256-B samples). Their buckets are asked for KEY_AHEAD items ahead. */
#define KEY_AHEAD 16

/* Evicts the table's oldest items until `need` more fit (remover fifo),
 * asking for each evicted key's bucket KEY_AHEAD items ahead: a scout walks
 * the age list ahead of the removals. */
static void evict_oldest(chime__table_t *t, uint64_t need) {
  uint64_t cap = t->cfg.capacity;
  uint32_t scout = t->oldest;
  for (int i = 0; i < KEY_AHEAD && scout != NONE; i++) {
    chime__keyindex_prefetch(t->keys, t->meta[scout].key);
    scout = t->nx[scout];
  }
  while (t->count + need > cap) {
    if (scout != NONE) {
      chime__keyindex_prefetch(t->keys, t->meta[scout].key);
      scout = t->nx[scout];
    }
    live_remove(t, t->oldest);
  }
}

/* Reverb's rule for a full table (its Table inserts, then asks the
 * remover over every item): the item that leaves is the remover's pick
 * among the table's items and the one coming in, of priority prio and
 * weight w (in a table with a sum tree: weight(t, prio)). NONE:
 * the new one, which then never goes in. The table holds an item at
 * least (count >= capacity >= 1), so fifo's pick is never the new one;
 * lifo's always is, a heap's when it is the extreme (of equal priorities
 * the older item is on top), uniform's with chance 1 / (size + 1) and
 * prioritized's with its weight's share of the sum, the new one's
 * included (every weight 0: uniform). */
static uint32_t choose_victim(chime__table_t *t, double prio, double w) {
  uint32_t r = NONE;
  double top = 0;
  switch (t->cfg.remover) {
  case CHIME__SAMPLER_FIFO:
    return t->oldest;
  case CHIME__SAMPLER_LIFO:
    return NONE;
  case CHIME__SAMPLER_MIN_HEAP:
    if (chime__heap_top(t->hmin, &r, &top) != 0)
      return NONE; /* count >= 1: unreachable */
    return prio < top ? NONE : r;
  case CHIME__SAMPLER_MAX_HEAP:
    if (chime__heap_top(t->hmax, &r, &top) != 0)
      return NONE;
    return prio > top ? NONE : r;
  case CHIME__SAMPLER_PRIORITIZED: {
    /* Within range: each weight is at most CHIME__SUMTREE_MAX_VALUE and
     * the rows outnumber the items, the new one included. */
    double total = chime__sumtree_total(t->sum);
    double all = total + w;
    double u = (double)(next_rand(t) >> 11) * 0x1p-53;
    uint64_t slot;
    if (!(all > 0))
      break;              /* every weight 0: uniform */
    if (u * all >= total) /* past the items' ranges: the new one's */
      return NONE;
    if (chime__sumtree_find(t->sum, u * all, &slot) == 0)
      return (uint32_t)slot;
    return NONE; /* total > 0 here: unreachable */
  }
  case CHIME__SAMPLER_UNIFORM:
    break;
  }
  uint64_t k = next_rand(t) % (t->count + 1);
  return k == t->count ? NONE : t->dense[k];
}

static int insert_spans(chime__table_t *t, const chime__span_t *spans,
                        size_t nspans, uint32_t count, const double *priorities,
                        uint64_t *first_key, const atomic_int *abort,
                        chime__dedupe_req_t *dq, int nowait) {
  int rc = 0;
  chime__table_waiter_t *arrived = NULL;
  cursor_t cur = {spans, 0, 0};
  uint64_t have = 0;
  for (size_t i = 0; i < nspans; i++)
    have += spans[i].len;
  if (have != (uint64_t)count * t->sample_bytes)
    return CHIME_EINVAL;
  if (t->steps != NULL)
    return seq_insert(t, spans, count, priorities, first_key, abort, dq,
                      nowait);
  uint64_t cap = t->cfg.capacity;
  int fifo = t->cfg.sampler == CHIME__SAMPLER_FIFO;
  /* A fifo remover's picks are known before the request goes in: the
   * oldest items, then (a request over the capacity) the request's own
   * first samples, which take keys and count as inserted and as removed
   * but are never written. Any other remover picks as each sample comes
   * (choose_victim), the sample itself a candidate. */
  int by_age = !fifo && t->cfg.remover == CHIME__SAMPLER_FIFO;
  int choose = !fifo && !by_age;
  uint64_t when = now_ns(CLOCK_REALTIME);
  if (fifo && count > cap)
    return CHIME_EINVAL; /* could never go in whole */
  uint64_t skip = by_age && count > cap ? count - cap : 0;
  /* Rows the request may take: one per sample that stays. A chosen
   * victim frees its row (unless pinned: one more), so past the capacity
   * a request never needs more than the capacity's worth. */
  uint64_t need = count - skip;
  if (choose && need > cap)
    need = cap;
  if (check_priorities(t, priorities, count) != 0)
    return CHIME_EINVAL;
  lock_table(t);
  /* All or nothing: a fifo request waits until every sample fits, so a
   * request ended by a stop leaves nothing behind that its writer would
   * send again (and a sampler can never take half of it). */
  for (;;) {
    if (t->closed) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if (dq != NULL && dq->writer != 0 &&
        (rc = seen_locked(t, dq, count, first_key)) != 0) {
      rc = rc > 0 ? 0 : rc;
      goto out;
    }
    if (!rate_allows_insert(t)) {
      if (abort != NULL && atomic_load(abort)) {
        rc = CHIME_ESHUTDOWN;
        goto out;
      }
      if (nowait) {
        rc = CHIME_EBUSY;
        goto out;
      }
      t->inserts_waiting_rate++;
      wait_timed(&t->space, &t->mu, &t->rate_insert_wait_ns);
      t->inserts_waiting_rate--;
      continue;
    }
    /* Items given back count against the capacity until taken again. */
    int room = !fifo || (t->count <= cap && cap - t->count >= need);
    if (by_age) {
      evict_oldest(t, need);
    } else if (choose) {
      /* Items given back past the capacity leave first, the remover's
       * picks among them and the rest, before the request's turn. */
      double p;
      while (t->count > cap)
        live_remove(t, select_row(t, t->cfg.remover, &p));
    }
    /* A pinned row is not reused meanwhile: an item that left while
     * pinned holds its row until unpinned (spare rows stand in, so this
     * waits only when more rows than those are pinned). */
    int pinned = room && t->rows - t->count - t->ndead < need;
    /* While a checkpoint's view holds rows, rows it will let go soon (it
     * writes oldest first, the order items leave in) are waited for
     * rather than spare rows taken: those would stay in the process's
     * memory until their items leave (trim_spares). */
    if (room && !pinned && t->viewing > 0 && t->nfree < need && t->ndead > 0)
      pinned = 1;
    if (room && !pinned)
      break;
    if (abort != NULL && atomic_load(abort)) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if (nowait) {
      rc = CHIME_EBUSY;
      goto out;
    }
    if (pinned) {
      t->pin_waiters++;
      wait_timed(&t->unpinned, &t->mu, &t->insert_wait_ns);
      t->pin_waiters--;
    } else {
      wait_timed(&t->space, &t->mu, &t->insert_wait_ns);
    }
  }
  uint64_t key0 = t->next_key;
  t->next_key += count;
  *first_key = key0;
  cursor_skip(&cur, skip * t->sample_bytes);
  for (uint64_t j = skip; j < count && j < skip + KEY_AHEAD; j++)
    chime__keyindex_prefetch(t->keys, key0 + j);
  for (uint64_t j = skip; j < count; j++) {
    if (j + KEY_AHEAD < count)
      chime__keyindex_prefetch(t->keys, key0 + j + KEY_AHEAD);
    double prio = priorities != NULL ? priorities[j] : 1.0;
    /* The weight once, for the remover and the sum tree alike. */
    double w = t->sum != NULL ? weight(t, prio) : 0.0;
    if (choose && t->count >= cap) {
      uint32_t v = choose_victim(t, prio, w);
      if (v != NONE)
        live_remove(t, v);
      /* Room for one (need above): a row is free unless v was the new
       * sample itself. */
      if (v == NONE || t->rows - t->count - t->ndead == 0) {
        cursor_skip(&cur, t->sample_bytes);
        t->left++; /* inserted and removed at once */
        continue;
      }
    }
    uint32_t r = free_pop(t);
    for (uint32_t l = 0; l < t->nleaves; l++)
      cursor_read(&cur, t->leaf[l] + (size_t)r * t->lbytes[l], t->lbytes[l]);
    t->meta[r].key = key0 + j;
    t->meta[r].itime = when;
    t->meta[r].times = 0;
    t->meta[r].prio = prio;
    live_add_weighted(t, r, 0, w);
  }
  t->inserts += count;
  t->left += skip; /* a fifo remover's picks among the request's own */
  if (dq != NULL && dq->writer != 0)
    chime__dedupe_record(t->dedupe, dq, count, key0);
  arrived = items_arrived_locked(t);
out:
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
  return rc;
}

int chime__table_writer_bind(chime__table_t *t, uint64_t writer, uint64_t seq) {
  pthread_mutex_lock(&t->mu);
  int rc = chime__dedupe_bind(t->dedupe, writer, seq);
  pthread_mutex_unlock(&t->mu);
  return rc;
}

void chime__table_writer_unbind(chime__table_t *t, uint64_t writer,
                                int closed) {
  pthread_mutex_lock(&t->mu);
  chime__dedupe_unbind(t->dedupe, writer, closed);
  pthread_mutex_unlock(&t->mu);
}

int chime__table_insert_spans(chime__table_t *t, const chime__span_t *spans,
                              size_t nspans, uint32_t count,
                              const double *priorities, uint64_t *first_key,
                              const atomic_int *abort,
                              chime__dedupe_req_t *dq) {
  return insert_spans(t, spans, nspans, count, priorities, first_key, abort, dq,
                      0);
}

int chime__table_try_insert_spans(chime__table_t *t, const chime__span_t *spans,
                                  size_t nspans, uint32_t count,
                                  const double *priorities, uint64_t *first_key,
                                  chime__dedupe_req_t *dq) {
  return insert_spans(t, spans, nspans, count, priorities, first_key, NULL, dq,
                      1);
}

/* A batch is chosen under the lock (rows, sample info, the rows pinned so
 * no insert reuses them) and copied without it, so inserts and other
 * streams' samplers do not wait behind a large copy. The rows go in rows[]
 * (a stream's pins), or, when there is none, are parked in info[j].key
 * until the copy is done. */
static inline uint32_t row_at(const chime_ring_wslot_t *slot,
                              const uint32_t *rows, uint64_t j) {
  return rows != NULL ? rows[j] : (uint32_t)slot->info[j].key;
}

/* A table of 10^7 items is far larger than the caches: each draw's sum
 * tree path, dense entry and leaf bytes are misses, and one by one they
 * queue (a descent cannot start before the draw ahead of it is known).
 * With no max_times_sampled nothing changes the table while a batch is
 * drawn, so a prioritized or (in a table larger than the caches) uniform
 * batch is drawn DRAW_CHUNK draws at a time before any is read (the sum
 * tree's descents side by side, uniform's dense entries asked for
 * together), with the same random numbers in the same order: the same
 * rows and probabilities as select_row one by one. A uniform chunk's
 * records are asked for as their rows are known (CPU per sample over the
 * gather floor 0.88-0.90x at 10^6 and 10^7 items; for prioritized, after
 * find_many, it measured no faster), and copy_rows asks for each row's
 * leaf bytes PREFETCH_AHEAD samples ahead of the copy. */
#define DRAW_CHUNK 64
#define PREFETCH_AHEAD 8
/* Bytes of a table under which its rows are taken to be in the caches:
 * about twice a core's L2 here (uniform at 10^4 items of 256 B, 3 MB,
 * sampled 9-16% slower drawn ahead and with prefetches, at 3 x 10^4 as
 * fast or faster). The per-row bookkeeping: its record, dense, dpos. */
#define CACHED_BYTES (4u << 20)
#define ROW_META_BYTES 40u

/* Whether a batch's rows are scattered over more memory than the caches
 * hold: uniform and prioritized rows are random, fifo's follow one
 * another and lifo's and the heaps' are the same few again and again. */
static int scattered(const chime__table_t *t) {
  if (t->cfg.sampler != CHIME__SAMPLER_UNIFORM &&
      t->cfg.sampler != CHIME__SAMPLER_PRIORITIZED)
    return 0;
  return (double)t->cfg.capacity * (double)(t->sample_bytes + ROW_META_BYTES) >
         (double)CACHED_BYTES;
}

/* Whether a batch's draws are made ahead. The sum tree's descents pay
 * side by side even in the caches (their steps interleave); uniform's
 * draws only where there are misses to overlap. A prioritized table
 * whose priorities are all 0 draws uniformly through select_row. */
static int draws_ahead(const chime__table_t *t) {
  if (t->mts != 0)
    return 0;
  if (t->cfg.sampler == CHIME__SAMPLER_UNIFORM)
    return scattered(t);
  return t->cfg.sampler == CHIME__SAMPLER_PRIORITIZED &&
         chime__sumtree_total(t->sum) > 0;
}

/* n <= DRAW_CHUNK draws (draws_ahead(t)): what n calls of select_row
 * would give, from the same random numbers. */
static void draw_chunk(chime__table_t *t, uint64_t n, uint32_t *row,
                       double *prob) {
  if (t->cfg.sampler == CHIME__SAMPLER_PRIORITIZED) {
    double total = chime__sumtree_total(t->sum), px[DRAW_CHUNK];
    uint64_t slot[DRAW_CHUNK];
    for (uint64_t j = 0; j < n; j++)
      px[j] = (double)(next_rand(t) >> 11) * 0x1p-53 * total;
    if (chime__sumtree_find_many(t->sum, px, n, slot) == 0) {
      for (uint64_t j = 0; j < n; j++) {
        row[j] = (uint32_t)slot[j];
        prob[j] = chime__sumtree_get(t->sum, slot[j]) / total;
      }
      return;
    } /* total > 0 was checked under the lock held since: unreachable */
  }
  for (uint64_t j = 0; j < n; j++) {
    row[j] = (uint32_t)(next_rand(t) % t->count);
    __builtin_prefetch(&t->dense[row[j]]);
  }
  for (uint64_t j = 0; j < n; j++) {
    row[j] = t->dense[row[j]];
    prob[j] = 1.0 / (double)t->count;
    __builtin_prefetch(&t->meta[row[j]], 1); /* plan_batch's next read */
  }
}

/* Draws the batch's samples in order: an item that reaches
 * max_times_sampled leaves at once (its row stays pinned), so the next
 * draw cannot pick it. */
static void plan_batch(chime__table_t *t, const chime_ring_layout_t *lay,
                       chime_ring_wslot_t *slot, uint32_t *rows) {
  int left = 0, ahead = draws_ahead(t);
  uint32_t drawn[DRAW_CHUNK];
  double dprob[DRAW_CHUNK];
  uint64_t from = 0, have = 0; /* drawn[] holds draws [from, from + have) */
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    double p;
    uint32_t k;
    if (ahead) {
      if (j == from + have) {
        uint64_t n = lay->batch_size - j;
        from = j;
        have = n < DRAW_CHUNK ? n : DRAW_CHUNK;
        draw_chunk(t, have, drawn, dprob);
      }
      k = drawn[j - from];
      p = dprob[j - from];
    } else {
      k = select_row(t, t->cfg.sampler, &p);
    }
    chime_sample_info_t *info = &slot->info[j];
    info->probability = p;
    info->times_sampled = ++t->meta[k].times;
    info->reserved = 0;
    info->insert_time_ns = t->meta[k].itime;
    info->priority = t->meta[k].prio;
    info->table_size = t->count;
    if (t->steps != NULL) {
      info->episode_id = t->wep[k];
      info->first_step = t->wfirst[k];
      info->length = t->wlen[k];
    } else {
      info->episode_id = 0;
      info->first_step = info->length = 0;
    }
    if (rows != NULL) {
      rows[j] = k;
      info->key = t->meta[k].key;
    } else {
      info->key = k; /* the row, until unpin_locked */
    }
    t->meta[k].pins++; /* one per sample of each batch pinning it */
    if (t->mts != 0 && t->meta[k].times >= t->mts) {
      live_remove(t, k);
      left = 1;
    }
  }
  if (left)
    pthread_cond_broadcast(&t->space);
}

/* Runs of consecutive rows (a fifo batch, as rows are reused in the order
 * they were freed) are copied as one memcpy per leaf; with rows given, a
 * run of copy_min bytes or more is left where it is (it is sent from the
 * table). No lock: the rows are pinned. */
static uint64_t run_at(const uint32_t *rows, const chime_ring_wslot_t *slot,
                       uint64_t j, uint64_t batch) {
  uint64_t k = row_at(slot, rows, j), n = 1;
  while (j + n < batch && row_at(slot, rows, j + n) == k + n)
    n++;
  return n;
}

/* Asks for row k's bytes of leaf l (their first 8 lines: the hardware
 * follows a longer one by itself). */
static inline void prefetch_leaf(const chime__table_t *t, uint32_t l,
                                 uint64_t k) {
  uint64_t lb = t->lbytes[l];
  const uint8_t *p = t->leaf[l] + k * lb;
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)63;
  uintptr_t end = (uintptr_t)p + (lb < 512 ? lb : 512);
  for (; a < end; a += 64)
    __builtin_prefetch((const void *)a);
}

static void copy_rows(const chime__table_t *t, const chime_ring_layout_t *lay,
                      chime_ring_wslot_t *slot, const uint32_t *rows,
                      uint64_t copy_min) {
  uint64_t batch = lay->batch_size;
  for (uint32_t l = 0; l < t->nleaves; l++) {
    uint64_t lb = t->lbytes[l];
    uint8_t *dst = (uint8_t *)slot->leaf[l];
    /* Rows sent from the table are not read here. */
    int pf = scattered(t) && lb < copy_min;
    for (uint64_t j = 0; pf && j < PREFETCH_AHEAD && j < batch; j++)
      prefetch_leaf(t, l, row_at(slot, rows, j));
    for (uint64_t j = 0; j < batch;) {
      if (pf && j + PREFETCH_AHEAD < batch)
        prefetch_leaf(t, l, row_at(slot, rows, j + PREFETCH_AHEAD));
      uint64_t k = row_at(slot, rows, j), n = run_at(rows, slot, j, batch);
      if (n * lb >= copy_min)
        ; /* sent from the table */
      else if (n == 1)
        copy_leaf(dst + j * lb, t->leaf[l] + k * lb, lb);
      else
        memcpy(dst + j * lb, t->leaf[l] + k * lb, n * lb);
      j += n;
    }
  }
}

/* A sequence table's batch, called and returning with t->mu held: each
 * window's first block is pinned under the lock, then its steps are
 * copied into the window's [T, *shape] place in every leaf (and the mask:
 * 1 for valid steps) without it; an insert that would reuse a pinned
 * block waits for the copy (chime__steps_room). */
static void seq_copy(chime__table_t *t, const chime_ring_layout_t *lay,
                     chime_ring_wslot_t *slot, const uint32_t *rows) {
  uint32_t tl = t->cfg.sequence_length;
  uint64_t batch = lay->batch_size;
  for (uint64_t j = 0; j < batch; j++) {
    uint32_t k = row_at(slot, rows, j);
    chime__steps_pin(t->steps, t->wslot[k]);
    if (t->cfg.episode_pad) {
      uint8_t *m = (uint8_t *)slot->leaf[t->sleaves] + j * tl;
      memset(m, 1, t->wlen[k]);
      memset(m + t->wlen[k], 0, tl - t->wlen[k]);
    }
  }
  pthread_mutex_unlock(&t->mu);
  /* The rows are pinned too (plan_batch): wslot and wlen stay theirs. */
  uint8_t *dst[CHIME_MAX_LEAVES];
  for (uint64_t j = 0; j < batch; j++) {
    uint32_t k = row_at(slot, rows, j);
    for (uint32_t l = 0; l < t->sleaves; l++)
      dst[l] = (uint8_t *)slot->leaf[l] + j * tl * t->lbytes[l];
    chime__steps_copy(t->steps, t->wslot[k], t->wlen[k], dst);
  }
  lock_table(t);
  for (uint64_t j = 0; j < batch; j++)
    chime__steps_unpin(t->steps, t->wslot[row_at(slot, rows, j)]);
  if (t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
}

static void unpin_row_locked(chime__table_t *t, uint32_t k) {
  if (--t->meta[k].pins == 0 && t->dpos[k] == NONE) {
    t->ndead--; /* it left while pinned: free now */
    free_push(t, k);
  }
}

static void unpin_locked(chime__table_t *t, const chime_ring_layout_t *lay,
                         chime_ring_wslot_t *slot) {
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    uint32_t k = (uint32_t)slot->info[j].key;
    slot->info[j].key = t->meta[k].key; /* pinned: still the sampled item */
    unpin_row_locked(t, k);
  }
  if (t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
}

/* Items a batch needs: min_size, and a whole batch when sampling removes
 * items (fifo, max_times_sampled), so a batch never runs dry halfway. */
static uint64_t need_items(const chime__table_t *t,
                           const chime_ring_layout_t *lay) {
  uint64_t need = t->cfg.min_size; /* at least 1 (create) */
  if (t->mts != 0 && need < lay->batch_size)
    need = lay->batch_size;
  return need;
}

/* Called and returns with t->mu held; drops it for the copy. With pins,
 * the rows stay pinned (pins->n set) and runs of copy_min bytes or more
 * are not copied. */
static void sample_locked(chime__table_t *t, const chime_ring_layout_t *lay,
                          chime_ring_wslot_t *slot, chime__table_pins_t *pins,
                          uint64_t copy_min) {
  uint32_t *rows = pins != NULL ? pins->rows : NULL;
  plan_batch(t, lay, slot, rows);
  t->samples += lay->batch_size;
  if (t->cfg.samples_per_insert > 0) /* inserts the ratio held back */
    pthread_cond_broadcast(&t->space);
  if (pins != NULL) {
    pins->n = lay->batch_size;
    pins->given_back = 0;
  }
  if (t->steps != NULL) {
    seq_copy(t, lay, slot, rows); /* drops the lock for the copy */
  } else {
    pthread_mutex_unlock(&t->mu);
    copy_rows(t, lay, slot, rows, pins != NULL ? copy_min : UINT64_MAX);
    lock_table(t);
  }
  if (pins == NULL)
    unpin_locked(t, lay, slot);
}

int chime__table_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                        chime_ring_wslot_t *slot, const atomic_int *stop) {
  int rc = 0;
  uint64_t need = need_items(t, lay);
  if (need > t->cfg.capacity)
    return CHIME_EINVAL;
  lock_table(t);
  for (;;) {
    if (t->closed || (stop != NULL && atomic_load(stop))) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if (t->count >= need && rate_allows_sample(t))
      break;
    wait_timed(&t->items, &t->mu,
               t->count >= need ? &t->rate_sample_wait_ns
                                : &t->sampler_wait_ns);
  }
  sample_locked(t, lay, slot, NULL, 0);
out:
  pthread_mutex_unlock(&t->mu);
  return rc;
}

static int try_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                      chime_ring_wslot_t *slot, chime__table_waiter_t *w,
                      chime__table_pins_t *pins, uint64_t copy_min) {
  int rc = 0;
  uint64_t need = need_items(t, lay);
  if (need > t->cfg.capacity)
    return CHIME_EINVAL;
  lock_table(t);
  /* A wait on the rate limiter ends when the sampler finds it open (or
   * waits for items instead): the time between counts. */
  int rate_open = rate_allows_sample(t);
  if (w->rate_since != 0 && (rate_open || t->closed || t->count < need)) {
    t->rate_sample_wait_ns += now_ns(CLOCK_MONOTONIC) - w->rate_since;
    w->rate_since = 0;
  }
  if (t->closed) {
    rc = CHIME_ESHUTDOWN;
  } else if (t->count < need || !rate_open) {
    /* Checked and queued under one lock: an insert after this calls w. */
    w->rate = t->count >= need;
    if (w->rate && w->rate_since == 0)
      w->rate_since = now_ns(CLOCK_MONOTONIC);
    if (!w->queued) {
      w->queued = 1;
      w->next = t->waiters;
      t->waiters = w;
    }
    rc = CHIME_EBUSY;
  } else {
    sample_locked(t, lay, slot, pins, copy_min);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int chime__table_try_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                            chime_ring_wslot_t *slot,
                            chime__table_waiter_t *w) {
  return try_sample(t, lay, slot, w, NULL, 0);
}

int chime__table_try_sample_pinned(chime__table_t *t,
                                   const chime_ring_layout_t *lay,
                                   chime_ring_wslot_t *slot,
                                   chime__table_pins_t *pins, uint64_t copy_min,
                                   chime__table_waiter_t *w) {
  return try_sample(t, lay, slot, w, pins, copy_min);
}

void chime__table_unwait(chime__table_t *t, chime__table_waiter_t *w) {
  lock_table(t);
  for (chime__table_waiter_t **pp = &t->waiters; *pp != NULL;
       pp = &(*pp)->next) {
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  }
  w->queued = 0;
  if (w->rate_since != 0) {
    t->rate_sample_wait_ns += now_ns(CLOCK_MONOTONIC) - w->rate_since;
    w->rate_since = 0;
  }
  pthread_mutex_unlock(&t->mu);
}

void chime__table_unpin(chime__table_t *t, chime__table_pins_t *pins) {
  lock_table(t);
  for (uint32_t j = 0; j < pins->n; j++)
    unpin_row_locked(t, pins->rows[j]);
  if (pins->n > 0 && t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
  pins->n = 0;
  pthread_mutex_unlock(&t->mu);
}

static const uint8_t zeros[4096];

size_t chime__table_spans(const chime__table_t *t,
                          const chime_ring_layout_t *lay,
                          const chime__table_pins_t *pins,
                          const uint8_t *slot_base, uint64_t copy_min,
                          uint64_t off, uint64_t len, chime__span_t *out,
                          size_t max) {
  size_t n = 0;
  uint64_t end = off + len;
  if (t->steps != NULL) { /* a sequence table's batch is whole in the slot */
    if (max == 0)
      return 0;
    out[0] = (chime__span_t){slot_base + off, (size_t)len};
    return 1;
  }
  /* Appends [p, p + l), merged with the last span when they touch. */
#define EMIT(ptr, l)                                                           \
  do {                                                                         \
    const uint8_t *p_ = (ptr);                                                 \
    size_t l_ = (size_t)(l);                                                   \
    if (n > 0 && out[n - 1].p + out[n - 1].len == p_)                          \
      out[n - 1].len += l_;                                                    \
    else if (n < max)                                                          \
      out[n++] = (chime__span_t){p_, l_};                                      \
    else                                                                       \
      return 0;                                                                \
  } while (0)
  uint64_t pos = off;
  while (pos < end) {
    /* Which part of the slot pos is in: a leaf, padding, or the info. */
    uint32_t l = 0;
    while (l < t->nleaves && !(pos >= lay->leaf_offset[l] &&
                               pos < lay->leaf_offset[l] + lay->leaf_bytes[l]))
      l++;
    if (l == t->nleaves) {
      uint64_t next = end; /* the next leaf after pos, or the end */
      for (uint32_t i = 0; i < t->nleaves; i++)
        if (lay->leaf_offset[i] > pos && lay->leaf_offset[i] < next)
          next = lay->leaf_offset[i];
      if (pos >= lay->info_offset) { /* the info: in the slot */
        EMIT(slot_base + pos, next - pos);
      } else { /* padding between leaves */
        uint64_t stop = next < lay->info_offset ? next : lay->info_offset;
        while (pos < stop) {
          uint64_t z = stop - pos < sizeof(zeros) ? stop - pos : sizeof(zeros);
          EMIT(zeros, z);
          pos += z;
        }
        continue;
      }
      pos = next;
      continue;
    }
    uint64_t lb = t->lbytes[l], base = lay->leaf_offset[l];
    uint64_t lend = base + lay->leaf_bytes[l];
    uint64_t stop = end < lend ? end : lend;
    uint64_t j = (pos - base) / lb;
    while (pos < stop) {
      /* The run holding sample j, from its start: the same runs as
       * copy_rows, so a run is copied or sent from the table whole. */
      uint64_t j0 = j;
      while (j0 > 0 && pins->rows[j0 - 1] + 1 == pins->rows[j0])
        j0--;
      uint64_t nrun = run_at(pins->rows, NULL, j0, lay->batch_size);
      uint64_t rs = base + j0 * lb, re = rs + nrun * lb;
      uint64_t upto = re < stop ? re : stop;
      if (nrun * lb >= copy_min)
        EMIT(t->leaf[l] + (uint64_t)pins->rows[j0] * lb + (pos - rs),
             upto - pos);
      else
        EMIT(slot_base + pos, upto - pos);
      pos = upto;
      j = j0 + nrun;
    }
  }
#undef EMIT
  return n;
}

/* Brings back an item that left (row r, dead or just filled): the oldest
 * in insert order, with times sampled as before the batch that took it. */
static void restore_locked(chime__table_t *t, uint32_t r, uint32_t times) {
  t->meta[r].times = times;
  t->left--;
  t->left_times -= times + 1u;
  live_add(t, r, 1);
  t->returned++;
}

/* Whether sample j of a batch that was never finished took its item out:
 * that item comes back. */
static int took_out(const chime__table_t *t, const chime_sample_info_t *info) {
  return t->mts != 0 && info->times_sampled >= t->mts;
}

int chime__table_give_back(chime__table_t *t, const chime_ring_layout_t *lay,
                           const void *slot) {
  const uint8_t *base = slot;
  const chime_sample_info_t *info =
      (const chime_sample_info_t *)(base + lay->info_offset);
  int rc = 0;
  lock_table(t);
  /* Last first, each to the front: the batch keeps its order. */
  for (uint64_t j = lay->batch_size; j-- > 0;) {
    if (!took_out(t, &info[j]))
      continue;
    if (t->rows - t->count - t->ndead == 0) {
      rc = CHIME_ENOMEM; /* every row live or pinned */
      continue;
    }
    if (t->steps != NULL) { /* a window: back if its steps still are */
      uint32_t at =
          chime__steps_find(t->steps, info[j].episode_id, info[j].first_step);
      if (at == NONE)
        continue;
      uint32_t r = free_pop(t);
      t->meta[r].key = info[j].key;
      t->meta[r].itime = info[j].insert_time_ns;
      t->meta[r].prio = info[j].priority;
      t->wslot[r] = at;
      t->wfirst[r] = info[j].first_step;
      t->wlen[r] = info[j].length;
      t->wep[r] = info[j].episode_id;
      chime__steps_relist(t->steps, at, r);
      restore_locked(t, r, info[j].times_sampled - 1);
      continue;
    }
    uint32_t r = free_pop(t);
    for (uint32_t l = 0; l < t->nleaves; l++)
      memcpy(t->leaf[l] + (size_t)r * t->lbytes[l],
             base + lay->leaf_offset[l] + j * t->lbytes[l], t->lbytes[l]);
    t->meta[r].key = info[j].key;
    t->meta[r].itime = info[j].insert_time_ns;
    t->meta[r].prio = info[j].priority;
    restore_locked(t, r, info[j].times_sampled - 1);
  }
  chime__table_waiter_t *arrived = items_arrived_locked(t);
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
  return rc;
}

void chime__table_give_back_pinned(chime__table_t *t,
                                   const chime_ring_layout_t *lay,
                                   const chime_sample_info_t *info,
                                   chime__table_pins_t *pins) {
  lock_table(t);
  if (pins->n == 0 || pins->given_back) {
    pthread_mutex_unlock(&t->mu);
    return; /* released meanwhile, or given back already */
  }
  pins->given_back = 1;
  for (uint64_t j = lay->batch_size; j-- > 0;) {
    uint32_t r = pins->rows[j];
    if (!took_out(t, &info[j]) || t->dpos[r] != NONE)
      continue;
    if (t->steps != NULL) { /* a window: back if its steps still are */
      uint32_t slot = chime__steps_find(t->steps, t->wep[r], t->wfirst[r]);
      if (slot == NONE)
        continue; /* the row is freed at unpin as before */
      chime__steps_relist(t->steps, slot, r);
    }
    t->ndead--; /* pinned and gone: this batch's item, its bytes intact */
    restore_locked(t, r, info[j].times_sampled - 1);
  }
  chime__table_waiter_t *arrived = items_arrived_locked(t);
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
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
    e |= chime__sumtree_set(t->sum, r, weight(t, prio));
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
      live_remove(t, r);
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

void chime__table_wake(chime__table_t *t) {
  lock_table(t);
  pthread_cond_broadcast(&t->items);
  pthread_cond_broadcast(&t->space);
  pthread_mutex_unlock(&t->mu);
}

void chime__table_close(chime__table_t *t) {
  lock_table(t);
  t->closed = 1;
  chime__table_waiter_t *arrived = items_arrived_locked(t);
  pthread_cond_broadcast(&t->space);
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
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
      per = uses(cfg, CHIME__SAMPLER_PRIORITIZED) ? 16 : 0;
    else if (i == n + NMETA + 3)
      per = 18; /* the key index: 12 bytes a bucket, 10/7 buckets an item */
    else
      per = uses(cfg, i == n + NMETA + 1 ? CHIME__SAMPLER_MIN_HEAP
                                         : CHIME__SAMPLER_MAX_HEAP)
                ? 28
                : 0;
    if (__builtin_mul_overflow(cap, per, &b) || b > UINT64_MAX - 63 ||
        __builtin_add_overflow(total, (b + 63) & ~UINT64_C(63), &total))
      return UINT64_MAX;
  }
  return total;
}

/* --- checkpoints: a pinned view, and items put back (checkpoint.c) --- */

/* Rows unpinned per lock hold on release: inserts and samplers get the
 * lock between chunks. */
#define VIEW_UNPIN_CHUNK 65536u

static void view_free(chime__table_view_t *v) {
  if (v->map != NULL)
    munmap(v->map, v->map_len);
  memset(v, 0, sizeof(*v));
}

/* The view's arrays for n items (and a sequence table's per block) in
 * one private mapping: munmap gives it back to the system,
 * where freed heap memory of this size would stay in a thread's arena.
 * Populated here, so no page fault lengthens the hold of the lock. */
static int view_alloc(const chime__table_t *t, chime__table_view_t *v,
                      uint64_t n) {
  uint64_t m = n ? n : 1, nb = 0;
  if (t->steps != NULL)
    nb = chime__steps_nblocks(t->steps);
  uint64_t len = m * (4 + 8 + 4) + 4 * nb * 4 + 64 * 8;
  void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED)
    return CHIME_ENOMEM;
  v->map = p;
  v->map_len = (size_t)len;
  uint8_t *c = p;
#define TAKE(field, bytes)                                                     \
  do {                                                                         \
    v->field = (void *)c;                                                      \
    c += align64((size_t)(bytes));                                             \
  } while (0)
  TAKE(prio, m * 8);
  TAKE(rows, m * 4);
  TAKE(times, m * 4);
  if (nb > 0) {
    TAKE(steps.block, nb * 4);
    TAKE(steps.bn, nb * 4);
    TAKE(steps.bnext, nb * 4);
    TAKE(steps.bprev, nb * 4);
  }
#undef TAKE
  return 0;
}

int chime__table_view(chime__table_t *t, chime__table_view_t *v) {
  memset(v, 0, sizeof(*v));
  /* The arrays are sized outside the lock; items may arrive meanwhile, so
   * with some room to spare, and again if that was not enough. */
  lock_table(t);
  uint64_t want = t->count;
  pthread_mutex_unlock(&t->mu);
  for (;;) {
    uint64_t room = want + want / 8 + 1024;
    if (room > t->rows)
      room = t->rows;
    int rc = view_alloc(t, v, room);
    if (rc != 0)
      return rc;
    lock_table(t);
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    if (t->count > room) {
      want = t->count;
      pthread_mutex_unlock(&t->mu);
      view_free(v);
      continue;
    }
    uint64_t i = 0;
    for (uint32_t r = t->oldest; r != NONE; r = t->nx[r], i++) {
      t->meta[r].pins++;
      v->rows[i] = r;
      v->prio[i] = t->meta[r].prio;   /* MutatePriorities changes it */
      v->times[i] = t->meta[r].times; /* every sample does */
    }
    v->count = i;
    v->next_key = t->next_key;
    v->inserts = t->inserts;
    v->samples = t->samples;
    v->left = t->left;
    v->left_times = t->left_times;
    v->rng = t->rng;
    t->viewing++;
    if (t->steps != NULL) {
      chime__steps_view_take(t->steps, &v->steps);
      v->max_prio = t->max_prio;
      v->step_key = t->step_key;
      v->windows_dropped = t->windows_dropped;
    }
    v->pause_ns = now_ns(CLOCK_MONOTONIC) - t0;
    pthread_mutex_unlock(&t->mu);
    return 0;
  }
}

void chime__table_view_item(const chime__table_t *t,
                            const chime__table_view_t *v, uint64_t i,
                            chime__table_view_item_t *out) {
  uint32_t r = v->rows[i];
  out->key = t->meta[r].key;
  out->itime = t->meta[r].itime;
  out->episode = 0;
  out->slot = out->first = out->len = 0;
  if (t->steps != NULL) {
    out->slot = t->wslot[r];
    out->first = t->wfirst[r];
    out->len = t->wlen[r];
    out->episode = t->wep[r];
  }
}

const uint8_t *chime__table_view_leaf(const chime__table_t *t,
                                      const chime__table_view_t *v, uint64_t i,
                                      uint32_t l) {
  return t->leaf[l] + (size_t)v->rows[i] * t->lbytes[l];
}

void chime__table_view_unpin(chime__table_t *t, chime__table_view_t *v,
                             uint64_t upto) {
  if (upto > v->count)
    upto = v->count;
  for (uint64_t i = v->unpinned; i < upto;) {
    uint64_t end = i + VIEW_UNPIN_CHUNK < upto ? i + VIEW_UNPIN_CHUNK : upto;
    lock_table(t);
    for (; i < end; i++)
      unpin_row_locked(t, v->rows[i]);
    if (t->pin_waiters > 0)
      pthread_cond_broadcast(&t->unpinned);
    pthread_mutex_unlock(&t->mu);
  }
  if (upto > v->unpinned)
    v->unpinned = upto;
}

void chime__table_view_unpin_steps(chime__table_t *t, chime__table_view_t *v,
                                   uint32_t upto) {
  if (t->steps == NULL || upto <= v->steps.unpinned)
    return;
  lock_table(t);
  chime__steps_view_unpin(t->steps, &v->steps, upto);
  if (t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
  pthread_mutex_unlock(&t->mu);
}

void chime__table_view_release(chime__table_t *t, chime__table_view_t *v) {
  chime__table_view_unpin(t, v, v->count);
  chime__table_view_unpin_steps(t, v, v->steps.nused);
  if (v->map != NULL) { /* a view taken, not one that failed */
    lock_table(t);
    t->viewing--;
    if (t->pin_waiters > 0)
      pthread_cond_broadcast(&t->unpinned);
    pthread_mutex_unlock(&t->mu);
  }
  view_free(v);
}

chime__steps_t *chime__table_steps(chime__table_t *t) {
  return t->steps;
}

int chime__table_restore_window(chime__table_t *t, uint64_t key, uint64_t itime,
                                double prio, uint32_t times, uint32_t slot,
                                uint64_t episode, uint32_t first,
                                uint32_t len) {
  uint32_t dummy;
  if (t->steps == NULL || check_priorities(t, &prio, 1) != 0)
    return CHIME_EINVAL;
  lock_table(t);
  int rc = 0;
  if (chime__keyindex_lookup(t->keys, key, &dummy) == 0 ||
      chime__steps_check_window(t->steps, slot, episode, first, len) != 0) {
    rc = CHIME_EINVAL;
  } else if (t->rows - t->count - t->ndead == 0) {
    rc = CHIME_ENOMEM;
  } else {
    uint32_t r = free_pop(t);
    t->meta[r] =
        (row_meta_t){.key = key, .itime = itime, .prio = prio, .times = times};
    t->wslot[r] = slot;
    t->wfirst[r] = first;
    t->wlen[r] = len;
    t->wep[r] = episode;
    chime__steps_relist(t->steps, slot, r);
    live_add(t, r, 0);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

void chime__table_restore_seq_counts(chime__table_t *t, uint64_t step_key,
                                     double max_prio,
                                     uint64_t windows_dropped) {
  lock_table(t);
  t->step_key = step_key;
  if (max_prio > t->max_prio)
    t->max_prio = max_prio;
  t->windows_dropped = windows_dropped;
  pthread_mutex_unlock(&t->mu);
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
  lock_table(t);
  uint64_t cap = t->cfg.capacity, hw = t->spare_hw, top = cap;
  pthread_mutex_unlock(&t->mu);
  /* Runs of free spare rows: a free row is not live (dpos) and not
   * pinned (a row that left while pinned is neither). Their leaves and
   * bookkeeping are written whole when they are taken again. A row is
   * free or not only while the lock is held, so each chunk is looked at
   * and given back in one hold. */
  for (uint64_t c = cap; c < hw; c += TRIM_CHUNK) {
    uint64_t end = c + TRIM_CHUNK < hw ? c + TRIM_CHUNK : hw;
    lock_table(t);
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
  lock_table(t);
  if (t->spare_hw == hw)
    t->spare_hw = (uint32_t)top;
  pthread_mutex_unlock(&t->mu);
}

int chime__table_restore_item(chime__table_t *t, uint64_t key, uint64_t itime,
                              double prio, uint32_t times,
                              const uint8_t *sample) {
  uint32_t dummy;
  if (t->steps != NULL)
    return CHIME_ENOTSUP;
  if (check_priorities(t, &prio, 1) != 0)
    return CHIME_EINVAL;
  lock_table(t);
  int rc = 0;
  if (chime__keyindex_lookup(t->keys, key, &dummy) == 0) {
    rc = CHIME_EINVAL;
  } else if (t->rows - t->count - t->ndead == 0) {
    rc = CHIME_ENOMEM;
  } else {
    uint32_t r = free_pop(t);
    for (uint32_t l = 0; l < t->nleaves; l++)
      memcpy(t->leaf[l] + (size_t)r * t->lbytes[l], sample + t->loff[l],
             t->lbytes[l]);
    t->meta[r].key = key;
    t->meta[r].itime = itime;
    t->meta[r].prio = prio;
    t->meta[r].times = times;
    if (prio > t->max_prio)
      t->max_prio = prio;
    live_add(t, r, 0);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

void chime__table_restore_counts(chime__table_t *t, uint64_t next_key,
                                 uint64_t inserts, uint64_t samples,
                                 uint64_t left, uint64_t left_times,
                                 uint64_t rng) {
  lock_table(t);
  t->next_key = next_key;
  t->inserts = inserts;
  t->samples = samples;
  t->left = left;
  t->left_times = left_times;
  if (rng != 0)
    t->rng = rng;
  pthread_mutex_unlock(&t->mu);
}
