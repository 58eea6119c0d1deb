/* Replay table storage. Items live in one preallocated mapping, leaf-major
 * (one array per leaf, indexed by the item's position in a circular buffer),
 * so a fifo batch is one memcpy per leaf per contiguous run and nothing on the
 * insert or sample path allocates. A sampler chooses its rows under the
 * table lock and copies them without it: the rows are pinned meanwhile,
 * and an insert that would overwrite a pinned row waits for it. */
#include "server/table.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "chime/errors.h"
#include "wire/insert.h"

/* A fifo batch given back by a stream that ended before its learner was done
 * with it: the slot's bytes (leaf-major, as in the ring), taken again before
 * the table's own items (they are older), item by item. */
typedef struct returned_s {
  struct returned_s *next;
  chime_ring_layout_t lay;
  uint32_t n, taken;
  uint8_t *slot; /* lay.info_offset + n infos */
} returned_t;

struct chime__table_s {
  chime__table_config_t cfg;
  uint64_t sample_bytes;
  uint32_t nleaves;
  uint64_t lbytes[CHIME_MAX_LEAVES];
  uint64_t loff[CHIME_MAX_LEAVES]; /* offset of the leaf in a sample */
  uint8_t *leaf[CHIME_MAX_LEAVES];
  uint64_t *key;
  uint64_t *itime;
  uint32_t *times;
  double *prio;
  uint32_t *pins; /* samplers copying the row right now, without the lock */
  void *map;
  size_t map_len;

  pthread_mutex_t mu;
  pthread_cond_t space;
  pthread_cond_t items;
  pthread_cond_t unpinned; /* an insert waits for a pinned row */
  int pin_waiters;
  uint64_t head; /* position of the oldest item, free-running */
  uint64_t count;
  returned_t *ret_head, *ret_tail; /* fifo: given back, sampled first */
  uint64_t nreturned;              /* items in them not yet taken again */
  chime__table_waiter_t *waiters;  /* samplers told when items arrive */
  uint64_t next_key;
  uint64_t rng;
  int closed;
  chime__dedupe_t *dedupe; /* writers' requests, under mu */
  uint64_t inserts, samples, sampler_wait_ns, insert_wait_ns, returned;
};

static uint64_t now_ns(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t align64(size_t n) {
  return (n + 63u) & ~(size_t)63u;
}

int chime__table_create(chime__table_t **out,
                        const chime__table_config_t *cfg) {
  int rc = 0;
  chime__table_t *t = calloc(1, sizeof(*t));
  *out = NULL;
  if (t == NULL)
    return CHIME_ENOMEM;
  t->cfg = *cfg;
  t->sample_bytes = chime_spec_sample_bytes(&cfg->spec);
  t->nleaves = cfg->spec.nleaves;
  if (t->sample_bytes == 0 || cfg->capacity == 0 ||
      cfg->capacity > CHIME__MAX_TABLE_BYTES / t->sample_bytes) {
    rc = CHIME_EINVAL;
    goto out;
  }
  size_t cap = (size_t)cfg->capacity;
  size_t len = 0;
  uint64_t off = 0;
  for (uint32_t i = 0; i < t->nleaves; i++) {
    t->lbytes[i] = chime_leaf_bytes(&cfg->spec.leaves[i]);
    t->loff[i] = off;
    off += t->lbytes[i];
    len += align64(cap * t->lbytes[i]);
  }
  size_t meta_off = len;
  len += align64(cap * sizeof(uint64_t)) * 2 + align64(cap * sizeof(double)) +
         align64(cap * sizeof(uint32_t)) * 2;
  /* Anonymous memory: pages are only committed once items land in them. */
  t->map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (t->map == MAP_FAILED) {
    t->map = NULL;
    rc = CHIME_ENOMEM;
    goto out;
  }
  t->map_len = len;
  rc = chime__dedupe_create(&t->dedupe, CHIME__INSERT_WRITERS);
  if (rc != 0)
    goto out;
  uint8_t *p = t->map;
  for (uint32_t i = 0; i < t->nleaves; i++) {
    t->leaf[i] = p;
    p += align64(cap * t->lbytes[i]);
  }
  p = (uint8_t *)t->map + meta_off;
  t->key = (uint64_t *)p;
  p += align64(cap * sizeof(uint64_t));
  t->itime = (uint64_t *)p;
  p += align64(cap * sizeof(uint64_t));
  t->prio = (double *)p;
  p += align64(cap * sizeof(double));
  t->times = (uint32_t *)p;
  p += align64(cap * sizeof(uint32_t));
  t->pins = (uint32_t *)p;
  t->next_key = 1;
  t->rng = now_ns(CLOCK_MONOTONIC) | 1u;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->space, NULL);
  pthread_cond_init(&t->items, NULL);
  pthread_cond_init(&t->unpinned, NULL);
  *out = t;
  t = NULL;
out:
  if (t != NULL && t->map != NULL)
    munmap(t->map, t->map_len);
  free(t);
  return rc;
}

void chime__table_destroy(chime__table_t *t) {
  if (t == NULL)
    return;
  while (t->ret_head != NULL) {
    returned_t *r = t->ret_head;
    t->ret_head = r->next;
    free(r->slot);
    free(r);
  }
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->space);
  pthread_cond_destroy(&t->items);
  pthread_cond_destroy(&t->unpinned);
  if (t->map != NULL)
    munmap(t->map, t->map_len);
  chime__dedupe_destroy(t->dedupe);
  free(t);
}

const chime__table_config_t *chime__table_config(const chime__table_t *t) {
  return &t->cfg;
}

uint64_t chime__table_sample_bytes(const chime__table_t *t) {
  return t->sample_bytes;
}

void chime__table_get_stats(chime__table_t *t, chime__table_stats_t *out) {
  pthread_mutex_lock(&t->mu);
  out->size = t->count + t->nreturned;
  out->capacity = t->cfg.capacity;
  out->inserts = t->inserts;
  out->samples = t->samples;
  out->sampler_wait_ns = t->sampler_wait_ns;
  out->insert_wait_ns = t->insert_wait_ns;
  out->returned = t->returned;
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

/* Whether an insert of count samples would write a row a sampler is still
 * copying: the rows from head + count on (all of them past the capacity;
 * eviction moves head and count, not where the next row goes). */
static int rows_pinned(const chime__table_t *t, uint32_t count) {
  uint64_t cap = t->cfg.capacity;
  uint64_t n = count < cap ? count : cap;
  uint64_t pos = t->head + t->count;
  for (uint64_t j = 0; j < n; j++)
    if (t->pins[(pos + j) % cap] != 0)
      return 1;
  return 0;
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
  uint64_t cap = t->cfg.capacity;
  int fifo = t->cfg.sampler == CHIME__SAMPLER_FIFO;
  uint64_t done = 0;
  uint64_t when = now_ns(CLOCK_REALTIME);
  if (fifo && count > cap)
    return CHIME_EINVAL; /* could never go in whole */
  pthread_mutex_lock(&t->mu);
  /* All or nothing: a fifo request waits until every sample fits, so a
   * request ended by a stop leaves nothing behind that its writer would
   * send again (and a sampler can never take half of it). */
  for (;;) {
    if (t->closed) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    /* Asked again after every wait: the answer holds only while mu is. */
    if (dq != NULL && dq->writer != 0) {
      rc = chime__dedupe_check(t->dedupe, dq, count, first_key);
      if (rc == CHIME__DEDUPE_RESENT) {
        rc = 0;
        goto out;
      }
      if (rc != CHIME__DEDUPE_NEW)
        goto out;
      rc = 0;
    }
    /* Items given back count against the capacity until taken again. */
    int room = !fifo || (t->count + t->nreturned <= cap &&
                         cap - t->count - t->nreturned >= count);
    /* A row a sampler is copying is not overwritten meanwhile. */
    int pinned = room && rows_pinned(t, count);
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
  while (done < count) {
    /* uniform: a request beyond the capacity evicts its own first samples */
    uint64_t n = count - done > cap ? cap : count - done;
    if (t->count + n > cap) {
      uint64_t evict = t->count + n - cap;
      t->head += evict;
      t->count -= evict;
    }
    uint64_t pos = t->head + t->count;
    for (uint64_t j = 0; j < n; j++) {
      uint64_t idx = (pos + j) % cap;
      for (uint32_t l = 0; l < t->nleaves; l++)
        cursor_read(&cur, t->leaf[l] + idx * t->lbytes[l], t->lbytes[l]);
      t->key[idx] = key0 + done + j;
      t->itime[idx] = when;
      t->times[idx] = 0;
      t->prio[idx] = priorities != NULL ? priorities[done + j] : 1.0;
    }
    t->count += n;
    t->inserts += n;
    done += n;
  }
  if (dq != NULL && dq->writer != 0)
    chime__dedupe_record(t->dedupe, dq, count, key0);
  arrived = items_arrived_locked(t);
out:
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
  return rc;
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

static uint64_t next_rand(chime__table_t *t) {
  /* xorshift64*: quality is ample for replay sampling and it is cheap. */
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * UINT64_C(2685821657736338717);
}

/* Takes the first `want` items given back into samples [0, want) of slot. */
static void take_returned(chime__table_t *t, chime_ring_wslot_t *slot,
                          uint64_t want) {
  for (uint64_t j = 0; j < want; j++) {
    returned_t *r = t->ret_head;
    uint32_t i = r->taken++;
    for (uint32_t l = 0; l < t->nleaves; l++) {
      uint64_t lb = t->lbytes[l];
      copy_leaf((uint8_t *)slot->leaf[l] + j * lb,
                r->slot + r->lay.leaf_offset[l] + i * lb, lb);
    }
    chime_sample_info_t *info = &slot->info[j];
    memcpy(info, r->slot + r->lay.info_offset + i * sizeof(*info),
           sizeof(*info));
    info->probability = 1.0;
    info->times_sampled++;
    if (r->taken == r->n) {
      t->ret_head = r->next;
      if (t->ret_head == NULL)
        t->ret_tail = NULL;
      free(r->slot);
      free(r);
    }
  }
  t->nreturned -= want;
}

/* A batch is chosen under the lock (rows, sample info, the rows pinned so
 * no insert overwrites them) and copied without it, so inserts and other
 * streams' samplers do not wait behind a large copy. uniform parks each
 * sample's row in info[j].key until the copy is done; fifo copies one run
 * of rows that left the table, from `start`. */
typedef struct {
  uint64_t first; /* samples [0, first) came from given-back batches */
  uint64_t start; /* fifo: the run's first row */
} plan_t;

static void pin(chime__table_t *t, uint64_t k) {
  t->pins[k]++; /* one per sample of each batch being copied */
}

static void plan_fifo(chime__table_t *t, const chime_ring_layout_t *lay,
                      chime_ring_wslot_t *slot, plan_t *pl) {
  uint64_t cap = t->cfg.capacity;
  pl->first = t->nreturned < lay->batch_size ? t->nreturned : lay->batch_size;
  take_returned(t, slot, pl->first);
  uint64_t batch = lay->batch_size - pl->first;
  pl->start = t->head % cap;
  for (uint64_t j = 0; j < batch; j++) {
    uint64_t k = (pl->start + j) % cap;
    chime_sample_info_t *info = &slot->info[pl->first + j];
    info->key = t->key[k];
    info->probability = 1.0;
    info->times_sampled = ++t->times[k];
    info->reserved = 0;
    info->insert_time_ns = t->itime[k];
    pin(t, k);
  }
  t->head += batch;
  t->count -= batch;
  pthread_cond_broadcast(&t->space);
}

static void plan_uniform(chime__table_t *t, const chime_ring_layout_t *lay,
                         chime_ring_wslot_t *slot, plan_t *pl) {
  uint64_t cap = t->cfg.capacity;
  double p = 1.0 / (double)t->count;
  pl->first = 0;
  pl->start = 0;
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    uint64_t k = (t->head + next_rand(t) % t->count) % cap;
    chime_sample_info_t *info = &slot->info[j];
    info->key = k; /* the row, until unpin_locked */
    info->probability = p;
    info->times_sampled = ++t->times[k];
    info->reserved = 0;
    info->insert_time_ns = t->itime[k];
    pin(t, k);
  }
}

/* No lock: the rows are pinned. */
static void copy_rows(const chime__table_t *t, const chime_ring_layout_t *lay,
                      chime_ring_wslot_t *slot, const plan_t *pl) {
  uint64_t cap = t->cfg.capacity;
  if (t->cfg.sampler == CHIME__SAMPLER_FIFO) {
    uint64_t batch = lay->batch_size - pl->first;
    uint64_t run = cap - pl->start < batch ? cap - pl->start : batch;
    for (uint32_t l = 0; l < t->nleaves; l++) {
      uint64_t lb = t->lbytes[l];
      uint8_t *dst = (uint8_t *)slot->leaf[l] + pl->first * lb;
      memcpy(dst, t->leaf[l] + pl->start * lb, run * lb);
      if (run < batch)
        memcpy(dst + run * lb, t->leaf[l], (batch - run) * lb);
    }
    return;
  }
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    uint64_t k = slot->info[j].key;
    for (uint32_t l = 0; l < t->nleaves; l++) {
      uint64_t lb = t->lbytes[l];
      copy_leaf((uint8_t *)slot->leaf[l] + j * lb, t->leaf[l] + k * lb, lb);
    }
  }
}

static void unpin_locked(chime__table_t *t, const chime_ring_layout_t *lay,
                         chime_ring_wslot_t *slot, const plan_t *pl) {
  uint64_t cap = t->cfg.capacity;
  int fifo = t->cfg.sampler == CHIME__SAMPLER_FIFO;
  for (uint64_t j = pl->first; j < lay->batch_size; j++) {
    uint64_t k = fifo ? (pl->start + j - pl->first) % cap : slot->info[j].key;
    t->pins[k]--;
    if (!fifo)
      slot->info[j].key = t->key[k]; /* pinned: still the sampled item */
  }
  if (t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
}

/* Items a batch needs: min_size, and a whole batch for fifo. */
static uint64_t need_items(const chime__table_t *t,
                           const chime_ring_layout_t *lay) {
  uint64_t need = t->cfg.min_size > 0 ? t->cfg.min_size : 1;
  if (t->cfg.sampler == CHIME__SAMPLER_FIFO && need < lay->batch_size)
    need = lay->batch_size;
  return need;
}

/* Called and returns with t->mu held; drops it for the copy. */
static void sample_locked(chime__table_t *t, const chime_ring_layout_t *lay,
                          chime_ring_wslot_t *slot) {
  plan_t pl;
  if (t->cfg.sampler == CHIME__SAMPLER_FIFO)
    plan_fifo(t, lay, slot, &pl);
  else
    plan_uniform(t, lay, slot, &pl);
  t->samples += lay->batch_size;
  pthread_mutex_unlock(&t->mu);
  copy_rows(t, lay, slot, &pl);
  pthread_mutex_lock(&t->mu);
  unpin_locked(t, lay, slot, &pl);
}

int chime__table_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                        chime_ring_wslot_t *slot, const atomic_int *stop) {
  int rc = 0;
  uint64_t need = need_items(t, lay);
  if (need > t->cfg.capacity)
    return CHIME_EINVAL;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    if (t->closed || (stop != NULL && atomic_load(stop))) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if (t->count + t->nreturned >= need)
      break;
    wait_timed(&t->items, &t->mu, &t->sampler_wait_ns);
  }
  sample_locked(t, lay, slot);
out:
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int chime__table_try_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                            chime_ring_wslot_t *slot,
                            chime__table_waiter_t *w) {
  int rc = 0;
  uint64_t need = need_items(t, lay);
  if (need > t->cfg.capacity)
    return CHIME_EINVAL;
  pthread_mutex_lock(&t->mu);
  if (t->closed) {
    rc = CHIME_ESHUTDOWN;
  } else if (t->count + t->nreturned < need) {
    /* Checked and queued under one lock: an insert after this calls w. */
    if (!w->queued) {
      w->queued = 1;
      w->next = t->waiters;
      t->waiters = w;
    }
    rc = CHIME_EBUSY;
  } else {
    sample_locked(t, lay, slot);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

void chime__table_unwait(chime__table_t *t, chime__table_waiter_t *w) {
  pthread_mutex_lock(&t->mu);
  for (chime__table_waiter_t **pp = &t->waiters; *pp != NULL;
       pp = &(*pp)->next) {
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  }
  w->queued = 0;
  pthread_mutex_unlock(&t->mu);
}

int chime__table_give_back(chime__table_t *t, const chime_ring_layout_t *lay,
                           const void *slot) {
  if (t->cfg.sampler != CHIME__SAMPLER_FIFO)
    return 0; /* sampling left the items in the table */
  returned_t *r = calloc(1, sizeof(*r));
  size_t len =
      lay->info_offset + (size_t)lay->batch_size * sizeof(chime_sample_info_t);
  if (r == NULL || (r->slot = malloc(len)) == NULL) {
    free(r);
    return CHIME_ENOMEM;
  }
  memcpy(r->slot, slot, len);
  r->lay = *lay;
  r->n = lay->batch_size;
  pthread_mutex_lock(&t->mu);
  if (t->ret_tail != NULL)
    t->ret_tail->next = r;
  else
    t->ret_head = r;
  t->ret_tail = r;
  t->nreturned += r->n;
  t->returned += r->n;
  chime__table_waiter_t *arrived = items_arrived_locked(t);
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
  return 0;
}

void chime__table_wake(chime__table_t *t) {
  pthread_mutex_lock(&t->mu);
  pthread_cond_broadcast(&t->items);
  pthread_cond_broadcast(&t->space);
  pthread_mutex_unlock(&t->mu);
}

void chime__table_close(chime__table_t *t) {
  pthread_mutex_lock(&t->mu);
  t->closed = 1;
  chime__table_waiter_t *arrived = items_arrived_locked(t);
  pthread_cond_broadcast(&t->space);
  pthread_mutex_unlock(&t->mu);
  notify(arrived);
}

/* The same sums as chime__table_create's layout; keep the two in step. */
uint64_t chime__table_bytes(const chime__table_config_t *cfg) {
  uint64_t cap = cfg->capacity, total = 0, b;
  static const uint64_t meta[] = {sizeof(uint64_t), sizeof(uint64_t),
                                  sizeof(double), sizeof(uint32_t),
                                  sizeof(uint32_t)};
  for (uint32_t i = 0; i < cfg->spec.nleaves + 5; i++) {
    uint64_t per = i < cfg->spec.nleaves
                       ? chime_leaf_bytes(&cfg->spec.leaves[i])
                       : meta[i - cfg->spec.nleaves];
    if (__builtin_mul_overflow(cap, per, &b) || b > UINT64_MAX - 63 ||
        __builtin_add_overflow(total, (b + 63) & ~UINT64_C(63), &total))
      return UINT64_MAX;
  }
  return total;
}
