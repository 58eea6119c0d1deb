/* Checkpoints: a table's view (the items' bookkeeping copied and their
 * rows pinned in one hold of the lock) and items put back at restore. */
#include "replay/table_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"
#include "common/spec.h"

/* --- checkpoints: a pinned view, and items put back (ckpt_format.c) --- */

/* Rows unpinned per lock hold on release: inserts and samplers get the
 * lock between chunks. */
#define VIEW_UNPIN_CHUNK 65536u

static void view_free(chime__table_view_t *v) {
  if (v->map != NULL)
    munmap(v->map, v->map_len);
  chime__dedupe_copy_free(&v->writers);
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
    c += chime__tbl_align64((size_t)(bytes));                                  \
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
  chime__tbl_lock(t);
  uint64_t want = t->count;
  uint32_t want_w = chime__dedupe_writers(t->dedupe);
  pthread_mutex_unlock(&t->mu);
  for (;;) {
    uint64_t room = want + want / 8 + 1024;
    if (room > t->rows)
      room = t->rows;
    int rc = view_alloc(t, v, room);
    if (rc == 0)
      rc = chime__dedupe_copy_alloc(&v->writers, want_w + want_w / 8 + 16);
    if (rc != 0) {
      view_free(v);
      return rc;
    }
    chime__tbl_lock(t);
    uint64_t t0 = chime__clock_ns(CLOCK_MONOTONIC);
    /* The writers' windows in the same hold as the items: every request
     * they remember is one whose items the view has (or that left). */
    if (t->count > room || chime__dedupe_copy(t->dedupe, &v->writers) != 0) {
      want = t->count;
      want_w = chime__dedupe_writers(t->dedupe);
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
    v->newest_version = t->vnewest;
    v->pace_ahead = t->pace_ahead;
    t->viewing++;
    if (t->steps != NULL) {
      chime__steps_view_take(t->steps, &v->steps);
      v->max_prio = t->max_prio;
      v->step_key = t->step_key;
      v->windows_dropped = t->windows_dropped;
    }
    v->pause_ns = chime__clock_ns(CLOCK_MONOTONIC) - t0;
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
  out->version = t->meta[r].version;
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

const uint8_t *chime__table_view_ragged(const chime__table_t *t,
                                        const chime__table_view_t *v,
                                        uint64_t i, const uint32_t **lengths) {
  uint32_t r = v->rows[i];
  *lengths = t->nrag > 0 ? t->rlen + (size_t)r * t->nrag : NULL;
  return t->nrag > 0 ? t->rbuf[r] : NULL;
}

const uint8_t *chime__table_view_z(const chime__table_t *t,
                                   const chime__table_view_t *v, uint64_t i,
                                   uint32_t l, uint32_t *stored) {
  const uint8_t *buf = t->zbuf[v->rows[i]];
  uint32_t k = 0;
  while (t->zl[k] != l)
    k++;
  *stored = chime__zleaf_size(buf, k);
  return chime__zleaf_at(buf, t->nz, k);
}

int chime__table_view_sample(const chime__table_t *t,
                             const chime__table_view_t *v, uint64_t i,
                             uint8_t *dst) {
  if (t->steps != NULL || t->nrag > 0)
    return CHIME_ENOTSUP;
  /* loff is a leaf's place in the row the table stores (compressed
   * leaves are not in it); in a sample every leaf has its place. */
  for (uint32_t l = 0; l < t->nleaves; l++) {
    if (t->zraw[l] != 0) {
      uint32_t stored;
      const uint8_t *z = chime__table_view_z(t, v, i, l, &stored);
      int rc = chime__zleaf_decompress(dst, (size_t)t->zraw[l], z, stored);
      if (rc != 0)
        return rc;
      dst += t->zraw[l];
    } else {
      memcpy(dst, chime__table_view_leaf(t, v, i, l), t->lbytes[l]);
      dst += t->lbytes[l];
    }
  }
  return 0;
}

int chime__table_compressed(const chime__table_t *t, uint32_t l) {
  /* A sequence table's item leaves begin with its step leaves. */
  return l < (t->steps != NULL ? t->sleaves : t->nleaves) && t->zraw[l] != 0;
}

void chime__table_view_unpin(chime__table_t *t, chime__table_view_t *v,
                             uint64_t upto) {
  if (upto > v->count)
    upto = v->count;
  for (uint64_t i = v->unpinned; i < upto;) {
    uint64_t end = i + VIEW_UNPIN_CHUNK < upto ? i + VIEW_UNPIN_CHUNK : upto;
    chime__tbl_lock(t);
    for (; i < end; i++)
      chime__tbl_unpin_row(t, v->rows[i]);
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
  chime__tbl_lock(t);
  chime__steps_view_unpin(t->steps, &v->steps, upto);
  if (t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
  pthread_mutex_unlock(&t->mu);
}

void chime__table_view_release(chime__table_t *t, chime__table_view_t *v) {
  chime__table_view_unpin(t, v, v->count);
  chime__table_view_unpin_steps(t, v, v->steps.nused);
  if (v->map != NULL) { /* a view taken, not one that failed */
    chime__tbl_lock(t);
    t->viewing--;
    if (t->pin_waiters > 0)
      pthread_cond_broadcast(&t->unpinned);
    pthread_mutex_unlock(&t->mu);
  }
  view_free(v);
}

int chime__table_restore_item(chime__table_t *t, uint64_t key, uint64_t itime,
                              double prio, uint32_t times,
                              const uint8_t *sample) {
  return chime__table_restore_item_ragged(t, key, itime, prio, times, 0, NULL,
                                          sample);
}

int chime__table_restore_item_version(chime__table_t *t, uint64_t key,
                                      uint64_t itime, double prio,
                                      uint32_t times, uint64_t version,
                                      const uint8_t *sample) {
  return chime__table_restore_item_ragged(t, key, itime, prio, times, version,
                                          NULL, sample);
}

/* Row r's leaves from sample (spec order, ragged leaves at lengths): the
 * fixed ones into the table's rows, the ragged ones into buf. */
static void restore_leaves(chime__table_t *t, uint32_t r, const uint32_t *lens,
                           const uint8_t *sample, uint8_t *buf) {
  for (uint32_t l = 0, k = 0; l < t->nleaves; l++) {
    if (t->zraw[l] != 0) { /* restore_z took it */
      k += t->rrow[l] != 0;
      sample += 4 + chime__zleaf_size(sample, 0);
      continue;
    }
    uint64_t n =
        t->rrow[l] != 0 ? (uint64_t)lens[k++] * t->rrow[l] : t->lbytes[l];
    uint8_t *dst = t->rrow[l] != 0 ? buf : t->leaf[l] + (size_t)r * n;
    if (n == 0) /* buf is NULL when every length is 0 */
      continue;
    memcpy(dst, sample, (size_t)n);
    if (t->rrow[l] != 0)
      buf += n;
    sample += n;
  }
}

/* A record's compressed leaves (each its u32 stored size and its stored
 * bytes, in their places among the leaves) into one allocation (zleaf.h),
 * each checked to be a leaf of its size (a frame that decompresses to
 * exactly it) before the item goes in: CHIME_ECORRUPT. */
static int restore_z(const chime__table_t *t, const uint32_t *lens,
                     const uint8_t *sample, uint8_t **out) {
  uint64_t total = 4 * (uint64_t)t->nz, big = 0;
  const uint8_t *p = sample;
  for (uint32_t l = 0; l < t->nleaves; l++) {
    if (t->zraw[l] != 0) {
      uint32_t s = chime__zleaf_size(p, 0);
      if (s > chime__tbl_z_rawsize(t, l, lens))
        return CHIME_ECORRUPT;
      total += s;
      big = t->zraw[l] > big ? t->zraw[l] : big;
      p += 4 + (uint64_t)s;
    } else {
      p += t->rrow[l] != 0 ? (uint64_t)lens[t->rk[l]] * t->rrow[l]
                           : t->lbytes[l];
    }
  }
  uint8_t *buf = malloc((size_t)total), *scratch = malloc((size_t)big);
  int rc = buf == NULL || scratch == NULL ? CHIME_ENOMEM : 0;
  size_t at = 4 * (size_t)t->nz;
  p = sample;
  for (uint32_t l = 0, kz = 0; rc == 0 && l < t->nleaves; l++) {
    if (t->zraw[l] != 0) {
      uint32_t s = chime__zleaf_size(p, 0);
      rc = chime__zleaf_check(
          p + 4, s, (size_t)chime__tbl_z_rawsize(t, l, lens), scratch);
      memcpy(buf + 4 * (size_t)kz++, p, 4);
      memcpy(buf + at, p + 4, s);
      at += s;
      p += 4 + (uint64_t)s;
    } else {
      p += t->rrow[l] != 0 ? (uint64_t)lens[t->rk[l]] * t->rrow[l]
                           : t->lbytes[l];
    }
  }
  free(scratch);
  if (rc != 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}

int chime__table_restore_item_ragged(chime__table_t *t, uint64_t key,
                                     uint64_t itime, double prio,
                                     uint32_t times, uint64_t version,
                                     const uint32_t *lengths,
                                     const uint8_t *sample) {
  uint32_t dummy;
  uint64_t bytes = 0, rag = 0;
  uint8_t *buf = NULL;
  if (t->steps != NULL)
    return CHIME_ENOTSUP;
  if (chime__tbl_check_priorities(t, &prio, 1) != 0)
    return CHIME_EINVAL;
  /* The lengths again, whoever read them: each within its bound and like
   * the one it shares, so the copies below stay inside buf. */
  if (t->nrag > 0 &&
      (lengths == NULL || chime__spec_ragged_bytes(&t->cfg.spec, 1, lengths,
                                                   &bytes, NULL, 0) != 0))
    return CHIME_EINVAL;
  if (t->nrag > 0) /* in rbuf: compressed ones are in zbuf */
    rag = chime__tbl_rag_bytes(t, lengths);
  if (rag > 0 && (buf = malloc((size_t)rag)) == NULL)
    return CHIME_ENOMEM;
  uint8_t *zbuf = NULL;
  int rc = t->nz > 0 ? restore_z(t, lengths, sample, &zbuf) : 0;
  if (rc != 0) {
    free(buf);
    return rc;
  }
  chime__tbl_lock(t);
  if (chime__keyindex_lookup(t->keys, key, &dummy) == 0) {
    rc = CHIME_EINVAL;
  } else if ((rc = chime__tbl_store_reserve(t, &zbuf, lengths, 1)) != 0) {
    /* a table in files whose bytes file cannot grow */
  } else if (t->rows - t->count - t->ndead == 0) {
    rc = CHIME_ENOMEM;
  } else {
    uint32_t r = chime__tbl_free_pop(t);
    if (t->nrag == 0 && t->nz == 0) {
      for (uint32_t l = 0; l < t->nleaves; l++)
        memcpy(t->leaf[l] + (size_t)r * t->lbytes[l], sample + t->loff[l],
               t->lbytes[l]);
    } else {
      restore_leaves(t, r, lengths, sample, buf);
    }
    if (t->nrag > 0) {
      chime__tbl_rag_take(t, r, buf, lengths);
      buf = NULL;
    }
    if (t->nz > 0) { /* after the lengths: a ragged one's raw bytes */
      chime__tbl_z_take(t, r, zbuf);
      zbuf = NULL;
    }
    t->meta[r].key = key;
    t->meta[r].itime = itime;
    t->meta[r].prio = prio;
    t->meta[r].times = times;
    t->meta[r].version = version;
    if (prio > t->max_prio)
      t->max_prio = prio;
    chime__tbl_live_add(t, r, 0);
  }
  pthread_mutex_unlock(&t->mu);
  free(buf); /* not taken: the item did not go in */
  free(zbuf);
  return rc;
}

void chime__table_restore_version(chime__table_t *t, uint64_t newest) {
  chime__tbl_lock(t);
  chime__tbl_version_seen(t, newest);
  pthread_mutex_unlock(&t->mu);
}

void chime__table_restore_pace(chime__table_t *t, uint64_t ahead) {
  chime__tbl_lock(t);
  t->pace_ahead = t->cfg.pace_batch != 0 ? ahead : 0;
  pthread_mutex_unlock(&t->mu);
}

void chime__table_restore_counts(chime__table_t *t, uint64_t next_key,
                                 uint64_t inserts, uint64_t samples,
                                 uint64_t left, uint64_t left_times,
                                 uint64_t rng) {
  chime__tbl_lock(t);
  t->next_key = next_key;
  t->inserts = inserts;
  t->samples = samples;
  t->left = left;
  t->left_times = left_times;
  /* Until the checkpoint's writers are put back (a format 6 file's,
   * chime__table_restore_writers), any writer may have had requests go
   * in before it: a writer resending one must not get it in twice. */
  chime__dedupe_restored(t->dedupe);
  if (rng != 0)
    t->rng = rng;
  pthread_mutex_unlock(&t->mu);
}

int chime__table_restore_writers(chime__table_t *t,
                                 const chime__dedupe_copy_t *c,
                                 uint32_t *loaded) {
  int rc = 0, forgot = c->forgot;
  uint32_t i = 0;
  chime__tbl_lock(t);
  for (; i < c->nwriters; i++) {
    const chime__dedupe_writer_t *w = &c->writers[i];
    rc = chime__dedupe_load(t->dedupe, w->writer, &c->entries[w->first], w->n);
    if (rc == CHIME_ERESOURCE) { /* a smaller max_writers: the rest forgotten */
      forgot = 1;
      rc = 0;
      break;
    }
    if (rc != 0)
      break;
  }
  if (rc == 0)
    chime__dedupe_set_restored(t->dedupe, forgot);
  pthread_mutex_unlock(&t->mu);
  *loaded = i;
  return rc;
}
