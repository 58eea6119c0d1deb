/* Sampling: a batch drawn by the sampler under the lock, its rows pinned
 * and copied into a ring slot without it (or left pinned and sent from
 * the table: spans), and the items of a batch its learner never finished
 * given back from its pinned rows. */
#include "replay/table_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"

/* A batch is chosen under the lock (rows, sample info, the rows pinned so
 * no insert reuses them) and copied without it, so inserts and other
 * streams' samplers do not wait behind a large copy. The rows go in rows[]
 * (a stream's pins), or, when there is none, are parked in info[j].key
 * until the copy is done. */

/* Whether a batch's draws are made ahead (the selector's say), never when
 * a draw may change the table (max_times_sampled). */
static int draws_ahead(const chime__table_t *t) {
  return t->mts == 0 && t->sel->draws_ahead != NULL && t->sel->draws_ahead(t);
}

/* A row a selector gave that is no row of the table (NONE: a selector's
 * bug, as staleness weighting's walk once returned on a version of
 * rounding residue) is never indexed with: the draw is tried again, and
 * then taken uniformly (or the oldest item, with no dense index), its
 * probability that draw's. Counted in t->bad_picks. The table holds an
 * item (sampling waits for one). */
static uint32_t repick(chime__table_t *t, double *p) {
  t->bad_picks++;
  for (int k = 0; k < 3; k++) {
    uint32_t r = t->sel->pick(t, p);
    if (r < t->rows)
      return r;
  }
  return t->dense_on ? chime__selector_uniform.pick(t, p)
                     : chime__selector_fifo.pick(t, p);
}

/* Draws the batch's samples in order: an item that reaches
 * max_times_sampled leaves at once (its row stays pinned), so the next
 * draw cannot pick it. */
static void plan_batch(chime__table_t *t, const chime_ring_layout_t *lay,
                       chime__ring_wslot_t *slot, chime__table_pins_t *pins) {
  uint32_t *rows = pins != NULL ? pins->rows : NULL;
  uint32_t *times = pins != NULL ? pins->times : NULL;
  int left = 0, ahead = draws_ahead(t);
  uint32_t drawn[CHIME__TBL_DRAW_CHUNK];
  double dprob[CHIME__TBL_DRAW_CHUNK];
  uint64_t from = 0, have = 0; /* drawn[] holds draws [from, from + have) */
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    double p;
    uint32_t k;
    if (ahead) {
      if (j == from + have) {
        uint64_t n = lay->batch_size - j;
        from = j;
        have = n < CHIME__TBL_DRAW_CHUNK ? n : CHIME__TBL_DRAW_CHUNK;
        t->sel->draw_many(t, have, drawn, dprob);
      }
      k = drawn[j - from];
      p = dprob[j - from];
    } else {
      k = t->sel->pick(t, &p);
    }
    if (__builtin_expect(k >= t->rows, 0))
      k = repick(t, &p);
    chime_sample_info_t *info = &slot->info[j];
    info->probability = p;
    info->times_sampled = ++t->meta[k].times;
    if (times != NULL)
      times[j] = info->times_sampled;
    info->reserved = 0;
    info->insert_time_ns = t->meta[k].itime;
    info->priority = t->meta[k].prio;
    info->table_size = t->count;
    info->version = t->meta[k].version;
    info->staleness = t->vnewest - t->meta[k].version; /* newest: the max */
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
      chime__tbl_live_remove(t, k);
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
static uint64_t run_at(const uint32_t *rows, const chime__ring_wslot_t *slot,
                       uint64_t j, uint64_t batch) {
  uint64_t k = chime__tbl_row_at(slot, rows, j), n = 1;
  while (j + n < batch && chime__tbl_row_at(slot, rows, j + n) == k + n)
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

/* A compressed ragged leaf's rows (the kz-th compressed leaf) of item r,
 * len of them, decompressed at dst: the frame must say exactly those
 * bytes (one that says more is never written: zeros there). */
static void unz_rows(const chime__table_t *t, uint32_t r, uint32_t kz,
                     uint8_t *dst, uint64_t n) {
  const uint8_t *buf = t->zbuf[r];
  (void)chime__zleaf_decompress(dst, (size_t)n, chime__zleaf_at(buf, t->nz, kz),
                                chime__zleaf_size(buf, kz));
}

/* A ragged leaf's rows packed back to back in the slot, with the batch's
 * offsets (Arrow's list layout): always copied (a compressed one
 * decompressed), never sent from the table (a row's bytes are an
 * allocation of its own). */
static void copy_ragged(const chime__table_t *t, const chime_ring_layout_t *lay,
                        chime__ring_wslot_t *slot, const uint32_t *rows,
                        uint32_t k) {
  uint32_t l = t->rag[k], kz = 0;
  while (t->zraw[l] != 0 && t->zl[kz] != l)
    kz++;
  uint64_t rb = t->rrow[l], at = 0;
  uint8_t *dst = slot->leaf[l];
  int64_t *offs = slot->offsets[l];
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    uint32_t r = chime__tbl_row_at(slot, rows, j);
    const uint32_t *len = t->rlen + (size_t)r * t->nrag;
    /* Items' rows are allocations scattered over the heap: each asked
     * for ahead of its copy, as copy_rows does a fixed leaf's. */
    if (j + CHIME__TBL_PREFETCH_AHEAD < lay->batch_size) {
      const uint8_t *p =
          t->rbuf[chime__tbl_row_at(slot, rows, j + CHIME__TBL_PREFETCH_AHEAD)];
      for (int b = 0; p != NULL && b < 512; b += 64)
        __builtin_prefetch(p + b);
    }
    uint64_t from = 0; /* the rows in rbuf before k's */
    for (uint32_t i = 0; i < k; i++)
      if (t->zraw[t->rag[i]] == 0)
        from += (uint64_t)len[i] * t->rrow[t->rag[i]];
    offs[j] = (int64_t)at;
    if (t->zraw[l] != 0)
      unz_rows(t, r, kz, dst + at * rb, len[k] * rb);
    else if (len[k] > 0)
      memcpy(dst + at * rb, t->rbuf[r] + from, (size_t)(len[k] * rb));
    at += len[k];
  }
  offs[lay->batch_size] = (int64_t)at;
}

/* A compressed leaf (the k-th) decompressed into the slot's leaf array,
 * each sample at its place: a batch is the same leaf views as a raw
 * table's. Always here, never sent from the table. A frame that does not
 * decompress to the leaf's size (none should: insert made it, restore
 * checked it) leaves zeros. */
static void copy_z(const chime__table_t *t, const chime_ring_layout_t *lay,
                   chime__ring_wslot_t *slot, const uint32_t *rows,
                   uint32_t k) {
  uint32_t l = t->zl[k];
  size_t n = (size_t)t->zraw[l];
  uint8_t *dst = slot->leaf[l];
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    if (j + CHIME__TBL_PREFETCH_AHEAD < lay->batch_size) {
      const uint8_t *p =
          t->zbuf[chime__tbl_row_at(slot, rows, j + CHIME__TBL_PREFETCH_AHEAD)];
      __builtin_prefetch(p);
    }
    const uint8_t *buf = t->zbuf[chime__tbl_row_at(slot, rows, j)];
    (void)chime__zleaf_decompress(dst + j * n, n,
                                  chime__zleaf_at(buf, t->nz, k),
                                  chime__zleaf_size(buf, k));
  }
}

/* A compressed leaf (the k-th) that the ring holds as it is stored (a
 * ragged u8 leaf there, bounded by the raw leaf: chime__spec_framed):
 * each sample's stored bytes packed back to back, with the batch's
 * offsets, for a learner that decompresses them itself or keeps them. */
static void copy_frames(const chime__table_t *t, const chime_ring_layout_t *lay,
                        chime__ring_wslot_t *slot, const uint32_t *rows,
                        uint32_t k) {
  uint32_t l = t->zl[k];
  uint8_t *dst = slot->leaf[l];
  int64_t *offs = slot->offsets[l];
  uint64_t at = 0;
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    if (j + CHIME__TBL_PREFETCH_AHEAD < lay->batch_size)
      __builtin_prefetch(t->zbuf[chime__tbl_row_at(
          slot, rows, j + CHIME__TBL_PREFETCH_AHEAD)]);
    const uint8_t *buf = t->zbuf[chime__tbl_row_at(slot, rows, j)];
    uint32_t n = chime__zleaf_size(buf, k);
    offs[j] = (int64_t)at;
    memcpy(dst + at, chime__zleaf_at(buf, t->nz, k), n);
    at += n;
  }
  offs[lay->batch_size] = (int64_t)at;
}

static void copy_rows(const chime__table_t *t, const chime_ring_layout_t *lay,
                      chime__ring_wslot_t *slot, const uint32_t *rows,
                      uint64_t copy_min) {
  uint64_t batch = lay->batch_size;
  for (uint32_t k = 0; k < t->nrag; k++)
    copy_ragged(t, lay, slot, rows, k);
  for (uint32_t k = 0; k < t->nz; k++) {
    uint32_t l = t->zl[k];
    if (t->rrow[l] != 0) /* ragged: copy_ragged */
      continue;
    if (lay->offsets_offset[l] != 0) /* framed: sent as stored */
      copy_frames(t, lay, slot, rows, k);
    else
      copy_z(t, lay, slot, rows, k);
  }
  for (uint32_t l = 0; l < t->nleaves; l++) {
    uint64_t lb = t->lbytes[l];
    if (t->rrow[l] != 0 || t->zraw[l] != 0)
      continue; /* ragged: copy_ragged; compressed: copy_z */
    uint8_t *dst = (uint8_t *)slot->leaf[l];
    /* Rows sent from the table are not read here. */
    int pf = chime__tbl_scattered(t) && lb < copy_min;
    if (pf && t->file != NULL && lb >= CHIME__TBL_FILE_ASK_BYTES)
      for (uint64_t j = 0; j < batch; j++)
        chime__tbl_file_ask(t->leaf[l] + chime__tbl_row_at(slot, rows, j) * lb,
                            lb);
    for (uint64_t j = 0; pf && j < CHIME__TBL_PREFETCH_AHEAD && j < batch; j++)
      prefetch_leaf(t, l, chime__tbl_row_at(slot, rows, j));
    for (uint64_t j = 0; j < batch;) {
      if (pf && j + CHIME__TBL_PREFETCH_AHEAD < batch)
        prefetch_leaf(
            t, l, chime__tbl_row_at(slot, rows, j + CHIME__TBL_PREFETCH_AHEAD));
      uint64_t k = chime__tbl_row_at(slot, rows, j),
               n = run_at(rows, slot, j, batch);
      if (n * lb >= copy_min)
        ; /* sent from the table */
      else if (n == 1)
        chime__tbl_copy_leaf(dst + j * lb, t->leaf[l] + k * lb, lb);
      else
        memcpy(dst + j * lb, t->leaf[l] + k * lb, n * lb);
      j += n;
    }
  }
}

void chime__tbl_unpin_row(chime__table_t *t, uint32_t k) {
  if (--t->meta[k].pins == 0 && t->dpos[k] == NONE) {
    t->ndead--; /* it left while pinned: free now */
    chime__tbl_free_push(t, k);
  }
}

static void unpin_locked(chime__table_t *t, const chime_ring_layout_t *lay,
                         chime__ring_wslot_t *slot) {
  for (uint64_t j = 0; j < lay->batch_size; j++) {
    uint32_t k = (uint32_t)slot->info[j].key;
    slot->info[j].key = t->meta[k].key; /* pinned: still the sampled item */
    chime__tbl_unpin_row(t, k);
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
                          chime__ring_wslot_t *slot, chime__table_pins_t *pins,
                          uint64_t copy_min) {
  uint32_t *rows = pins != NULL ? pins->rows : NULL;
  plan_batch(t, lay, slot, pins);
  t->samples += lay->batch_size;
  if (t->cfg.samples_per_insert > 0) /* inserts the ratio held back */
    pthread_cond_broadcast(&t->space);
  if (pins != NULL) {
    pins->n = lay->batch_size;
    pins->given_back = 0;
  }
  if (t->steps != NULL) {
    chime__tbl_seq_copy(t, lay, slot, rows); /* drops the lock for the copy */
  } else {
    pthread_mutex_unlock(&t->mu);
    copy_rows(t, lay, slot, rows, pins != NULL ? copy_min : UINT64_MAX);
    chime__tbl_lock(t);
  }
  if (pins == NULL)
    unpin_locked(t, lay, slot);
}

int chime__table_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                        chime__ring_wslot_t *slot, const atomic_int *stop) {
  int rc = 0;
  uint64_t need = need_items(t, lay);
  if (need > t->max_items) /* would wait for ever */
    return CHIME_EINVAL;
  chime__tbl_lock(t);
  for (;;) {
    if (t->closed || (stop != NULL && atomic_load(stop))) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if (t->count >= need && t->lim->allows_sample(t))
      break;
    t->samplers_blocked++; /* paced inserts let in (pace.c) */
    chime__tbl_pace_starving(t);
    chime__tbl_wait_timed(&t->items, &t->mu,
                          t->count >= need ? &t->rate_sample_wait_ns
                                           : &t->sampler_wait_ns);
    t->samplers_blocked--;
  }
  sample_locked(t, lay, slot, NULL, 0);
out:
  pthread_mutex_unlock(&t->mu);
  return rc;
}

static int try_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                      chime__ring_wslot_t *slot, chime__table_waiter_t *w,
                      chime__table_pins_t *pins, uint64_t copy_min) {
  int rc = 0;
  uint64_t need = need_items(t, lay);
  if (need > t->max_items) /* would wait for ever */
    return CHIME_EINVAL;
  chime__tbl_lock(t);
  /* A wait on the rate limiter ends when the sampler finds it open (or
   * waits for items instead): the time between counts. */
  int rate_open = t->lim->allows_sample(t);
  if (w->rate_since != 0 && (rate_open || t->closed || t->count < need)) {
    t->rate_sample_wait_ns += chime__clock_ns(CLOCK_MONOTONIC) - w->rate_since;
    w->rate_since = 0;
  }
  if (t->closed) {
    rc = CHIME_ESHUTDOWN;
  } else if (t->count < need || !rate_open) {
    /* Checked and queued under one lock: an insert after this calls w. */
    w->rate = t->count >= need;
    if (w->rate && w->rate_since == 0)
      w->rate_since = chime__clock_ns(CLOCK_MONOTONIC);
    if (!w->queued) {
      w->queued = 1;
      w->next = t->waiters;
      t->waiters = w;
    }
    chime__tbl_pace_starving(t); /* paced inserts let in (pace.c) */
    rc = CHIME_EBUSY;
  } else {
    sample_locked(t, lay, slot, pins, copy_min);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int chime__table_try_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                            chime__ring_wslot_t *slot,
                            chime__table_waiter_t *w) {
  return try_sample(t, lay, slot, w, NULL, 0);
}

int chime__table_try_sample_pinned(chime__table_t *t,
                                   const chime_ring_layout_t *lay,
                                   chime__ring_wslot_t *slot,
                                   chime__table_pins_t *pins, uint64_t copy_min,
                                   chime__table_waiter_t *w) {
  return try_sample(t, lay, slot, w, pins, copy_min);
}

void chime__table_unwait(chime__table_t *t, chime__table_waiter_t *w) {
  chime__tbl_lock(t);
  for (chime__table_waiter_t **pp = &t->waiters; *pp != NULL;
       pp = &(*pp)->next) {
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  }
  w->queued = 0;
  if (w->rate_since != 0) {
    t->rate_sample_wait_ns += chime__clock_ns(CLOCK_MONOTONIC) - w->rate_since;
    w->rate_since = 0;
  }
  pthread_mutex_unlock(&t->mu);
}

void chime__table_unpin(chime__table_t *t, chime__table_pins_t *pins) {
  chime__tbl_lock(t);
  for (uint32_t j = 0; j < pins->n; j++)
    chime__tbl_unpin_row(t, pins->rows[j]);
  if (pins->n > 0 && t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
  pins->n = 0;
  pthread_mutex_unlock(&t->mu);
}

static const uint8_t zeros[4096];

/* Where the slot's first offsets array starts (they come after every
 * leaf's values, chime_ring_layout: a ragged leaf's, or a compressed
 * one's held as stored), or its info when it has none. */
static uint64_t first_offsets(const chime__table_t *t,
                              const chime_ring_layout_t *lay) {
  for (uint32_t l = 0; l < t->nleaves; l++)
    if (lay->offsets_offset[l] != 0)
      return lay->offsets_offset[l];
  return lay->info_offset;
}

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
      /* The info, and ragged leaves' offsets before it: in the slot. */
      uint64_t lim = first_offsets(t, lay);
      if (pos >= lim) {
        EMIT(slot_base + pos, next - pos);
      } else { /* padding between leaves, up to the offsets or the info */
        uint64_t stop = next < lim ? next : lim;
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
    /* Ragged (packed in the slot, copy_ragged) or compressed (copy_z). */
    if (t->rrow[l] != 0 || t->zraw[l] != 0) {
      EMIT(slot_base + pos, stop - pos);
      pos = stop;
      continue;
    }
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

/* Whether an item of version ver given back is too far behind by now: it
 * stays gone, as removed_stale. */
static int stale_now(chime__table_t *t, uint64_t ver) {
  if (ver >= chime__tbl_stale_below(t))
    return 0;
  t->removed_stale++;
  return 1;
}

/* Brings back an item that left (row r, dead and still pinned): the
 * oldest in insert order, with times sampled as before the batch that took it;
 * it left with left_at (what chime__tbl_live_remove counted). */
static void restore_locked(chime__table_t *t, uint32_t r, uint32_t times,
                           uint32_t left_at) {
  t->meta[r].times = times;
  t->left--;
  t->left_times -= left_at;
  chime__tbl_live_add(t, r, 1);
  t->returned++;
}

/* Whether a draw that counted times took its item out. */
static int took_out(const chime__table_t *t, uint32_t times) {
  return t->mts != 0 && times >= t->mts;
}

/* An item a batch took out (its pinned row), and its times sampled
 * before the batch's first draw of it. */
typedef struct {
  uint32_t row;
  uint32_t before;
} first_t;

static int first_cmp(const void *a, const void *b) {
  uint32_t x = ((const first_t *)a)->row, y = ((const first_t *)b)->row;
  return (x > y) - (x < y);
}

static first_t *first_find(first_t *f, size_t n, uint32_t row) {
  return f == NULL ? NULL
                   : bsearch(&(first_t){row, 0}, f, n, sizeof(*f), first_cmp);
}

/* With max_times_sampled 2 or more one batch may draw an item more than
 * once before it leaves: it comes back with the count before the first of
 * those draws, not the last (the batch's draws of an item are one run of
 * counts, all under one hold of the lock). For each item taken out, the
 * smallest count the batch drew it with less one, sorted by row:
 * O(batch log out), no lock needed (the pins' rows and times are the
 * caller's). NULL when no item could have been drawn twice
 * (max_times_sampled 1), none left, or out of memory: then each comes back
 * with its own draw's count less one, as before. */
static first_t *batch_firsts(const chime__table_t *t, uint64_t batch,
                             const chime__table_pins_t *pins, size_t *nout) {
  const uint32_t *rows = pins->rows, *times = pins->times;
  *nout = 0;
  if (t->mts < 2)
    return NULL;
  size_t n = 0;
  for (uint64_t j = 0; j < batch; j++)
    n += took_out(t, times[j]);
  first_t *f = n > 0 ? malloc(n * sizeof(*f)) : NULL;
  if (f == NULL)
    return NULL;
  size_t k = 0;
  for (uint64_t j = 0; j < batch && k < n; j++)
    if (took_out(t, times[j]))
      f[k++] = (first_t){rows[j], times[j] - 1};
  n = k;
  qsort(f, n, sizeof(*f), first_cmp);
  for (uint64_t j = 0; j < batch; j++) {
    first_t *e = first_find(f, n, rows[j]);
    if (e != NULL && times[j] >= 1 && times[j] - 1 < e->before)
      e->before = times[j] - 1;
  }
  *nout = n;
  return f;
}

static uint32_t before_batch(first_t *f, size_t n, uint32_t row,
                             uint32_t times) {
  first_t *e = first_find(f, n, row);
  return e != NULL ? e->before : times - 1;
}

void chime__table_give_back_pinned(chime__table_t *t,
                                   const chime_ring_layout_t *lay,
                                   chime__table_pins_t *pins) {
  size_t nf = 0;
  first_t *f = NULL;
  if (pins->times != NULL) /* the caller's: no lock needed */
    f = batch_firsts(t, lay->batch_size, pins, &nf);
  chime__tbl_lock(t);
  if (pins->n == 0 || pins->given_back || pins->times == NULL) {
    pthread_mutex_unlock(&t->mu);
    free(f);
    return; /* released meanwhile, given back already, or never to be */
  }
  pins->given_back = 1;
  for (uint64_t j = lay->batch_size; j-- > 0;) {
    uint32_t r = pins->rows[j], times = pins->times[j];
    if (!took_out(t, times) || t->dpos[r] != NONE ||
        stale_now(t, t->meta[r].version))
      continue;             /* a stale one's row is freed at unpin as before */
    if (t->steps != NULL) { /* a window: back if its steps still are */
      uint32_t slot = chime__steps_find(t->steps, t->wep[r], t->wfirst[r]);
      if (slot == NONE)
        continue; /* the row is freed at unpin as before */
      chime__steps_relist(t->steps, slot, r);
    }
    t->ndead--; /* pinned and gone: this batch's item, its bytes intact */
    restore_locked(t, r, before_batch(f, nf, r, times), t->meta[r].times);
  }
  chime__table_waiter_t *arrived = chime__tbl_items_arrived(t);
  pthread_mutex_unlock(&t->mu);
  chime__tbl_notify(arrived);
  free(f);
}
