/* The sequence adapter: a sequence table's items are windows of the step
 * store (steps.c), its inserts are steps, and a batch copies each window's
 * steps (docs/sequences.md). */
#include "replay/table_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"
#include "common/spec.h"

/* A sequence table's batch spec: each step leaf with sequence_length
 * prepended to its shape, then mask: u8[T] when episodes end padded. */
int chime__tbl_seq_spec(const chime__table_config_t *cfg, chime_spec_t *out) {
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
  return chime__spec_validate(out, NULL, 0) == 0 ? 0 : CHIME_EINVAL;
}

static uint32_t seq_window(void *ctx, const chime__window_t *w);
static void seq_evict(void *ctx, uint32_t row);

void chime__tbl_seq_config(const chime__table_config_t *cfg,
                           chime__steps_config_t *sc) {
  *sc = (chime__steps_config_t){
      .capacity_steps = cfg->capacity_steps,
      .sequence_length = cfg->sequence_length,
      .stride = cfg->stride,
      .pad = cfg->episode_pad,
      .max_episodes = WRITERS(cfg), /* a lane per writer remembered */
      .compress = cfg->compress,
  };
}

int chime__tbl_seq_create(chime__table_t *t, void *mem, int reopen) {
  chime__steps_config_t sc;
  chime__tbl_seq_config(&t->cfg, &sc);
  sc.mem = mem;
  sc.reopen = reopen;
  sc.zfile = mem != NULL;
  sc.bytes = t->bytes;
  chime__steps_cb_t cb = {seq_window, seq_evict, t};
  t->sleaves = t->cfg.spec.nleaves;
  for (uint32_t i = 0, nz = 0; i < t->sleaves; i++) {
    t->lbytes[i] = chime_leaf_bytes(&t->cfg.spec.leaves[i]);
    /* Compressed steps (insert.c's z_gather reads zraw and zl; nz stays
     * 0: rows hold windows, no zbuf). */
    if (t->cfg.compress[i] != 0) {
      t->zraw[i] = t->lbytes[i];
      t->zl[nz++] = i;
    }
  }
  t->max_prio = 1.0;
  t->step_key = chime__key_make(t->cfg.shard, 1);
  return chime__steps_create(&t->steps, &t->cfg.spec, &sc, &cb);
}

void chime__tbl_seq_destroy(chime__table_t *t) {
  chime__steps_destroy(t->steps);
}

/* A window an episode completed becomes an item (the table lock held,
 * from chime__steps_append or _end): the newest, with the table's initial
 * priority, and the policy version of its oldest step, so that a gate
 * (max_staleness) never lets a window through with a step further behind
 * (a writer's versions only rise). A window already too far behind takes
 * its key and counts as inserted and as left (removed_stale), but never
 * goes in, as a plain table's sample does. */
static uint32_t seq_window(void *ctx, const chime__window_t *w) {
  chime__table_t *t = ctx;
  uint64_t ver = chime__steps_version(t->steps, w->slot);
  if (ver < chime__tbl_stale_below(t)) {
    t->next_key++;
    t->inserts++;
    t->left++;
    t->removed_stale++;
    return NONE;
  }
  if (t->rows - t->count - t->ndead == 0) {
    t->windows_dropped++; /* every row live or pinned: cannot happen while
                             pinned rows stay under the spares */
    return NONE;
  }
  uint32_t r = chime__tbl_free_pop(t);
  t->meta[r].key = t->next_key++;
  t->meta[r].itime = chime__clock_ns(CLOCK_REALTIME);
  t->meta[r].times = 0;
  t->meta[r].prio =
      t->cfg.initial_priority_max ? t->max_prio : t->cfg.initial_priority;
  t->wslot[r] = w->slot;
  t->wfirst[r] = w->first;
  t->wlen[r] = w->len;
  t->wep[r] = w->episode;
  t->meta[r].version = ver;
  chime__tbl_live_add(t, r, 0);
  t->inserts++;
  return r;
}

/* The block holding the window's first step leaves: so does the item. */
static void seq_evict(void *ctx, uint32_t row) {
  chime__tbl_live_remove(ctx, row);
}

/* A step's leaves read from the request: a compressed leaf is the step's
 * (zbufs) and skipped, n bytes raw or, sent stored, its stored size (the
 * k-th of the step's zbuf). */
typedef struct {
  chime__tbl_cursor_t cur;
  const uint8_t *z; /* the step's zbuf, when sent stored */
  uint32_t k;       /* compressed leaves skipped so far */
} seq_reader_t;

static void seq_read(void *ctx, uint8_t *dst, uint64_t n) {
  seq_reader_t *r = ctx;
  if (dst == NULL) /* a compressed leaf: the step holds it (zbufs) */
    chime__tbl_cursor_skip(&r->cur,
                           r->z != NULL ? chime__zleaf_size(r->z, r->k++) : n);
  else
    chime__tbl_cursor_read(&r->cur, dst, n);
}

/* A sequence table's insert: count steps appended to the writer's open
 * episode (all under one lock hold, so samplers see the windows they make
 * all or none), then the episode ends if the request says so. Never waits
 * for room: the oldest steps leave, with the windows starting in them. */
int chime__tbl_seq_insert(chime__table_t *t, const chime__span_t *spans,
                          uint32_t count, const double *priorities,
                          const chime__table_versions_t *versions,
                          uint64_t *first_key, const atomic_int *abort,
                          chime__dedupe_req_t *dq, int nowait, uint8_t **zbufs,
                          int stored) {
  int rc = 0;
  chime__table_waiter_t *arrived = NULL;
  seq_reader_t rd = {{spans, 0, 0}, NULL, 0};
  if (priorities != NULL || dq == NULL || dq->writer == 0)
    return CHIME_EINVAL; /* windows' priorities; episodes are per writer */
  chime__tbl_lock(t);
  for (;;) {
    if (t->closed) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    if ((rc = chime__tbl_seen(t, dq, count, first_key)) != 0) {
      rc = rc > 0 ? 0 : rc;
      goto out;
    }
    /* Each step takes a step key and starts at most one window, and an
     * episode's end may make one more (a padded tail). */
    if (chime__tbl_keys_out(t, t->step_key, count) ||
        chime__tbl_keys_out(t, t->next_key, (uint64_t)count + 1)) {
      rc = CHIME_EOVERFLOW;
      goto out;
    }
    uint64_t send = chime__tbl_key_pos(t, t->step_key) + count,
             wend = chime__tbl_key_pos(t, t->next_key) + count + 1;
    if ((rc = chime__tbl_keys_reserve(t, send > wend ? send : wend)) != 0)
      goto out;
    int rate = dq->warm || t->lim->allows_insert(t);
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
      chime__tbl_wait_timed(&t->unpinned, &t->mu, &t->insert_wait_ns);
      t->pin_waiters--;
      continue;
    }
    t->inserts_waiting_rate++;
    chime__tbl_wait_timed(&t->space, &t->mu, &t->rate_insert_wait_ns);
    t->inserts_waiting_rate--;
  }
  if (zbufs != NULL &&
      (rc = chime__steps_z_reserve(t->steps, zbufs, count)) != 0)
    goto out;
  uint32_t ep = chime__steps_lane(t->steps, dq->writer);
  uint64_t vmax = 0;
  for (size_t j = 0; versions != NULL && j < versions->n; j++)
    vmax = versions->v[j] > vmax ? versions->v[j] : vmax;
  /* Before the steps go in: windows it leaves behind are never made. */
  chime__tbl_version_seen(t, vmax);
  for (uint32_t j = 0; j < count; j++) {
    rd.z = stored ? zbufs[j] : NULL;
    rd.k = 0;
    chime__steps_append(t->steps, ep, chime__tbl_version_at(versions, j),
                        seq_read, &rd, zbufs != NULL ? zbufs[j] : NULL);
    if (zbufs != NULL)
      zbufs[j] = NULL; /* the step's now */
  }
  if (dq->end_episode)
    chime__steps_end(t->steps, ep);
  *first_key = t->step_key;
  t->step_key += count;
  chime__dedupe_record(t->dedupe, dq, count, *first_key);
  arrived = chime__tbl_items_arrived(t);
out:
  pthread_mutex_unlock(&t->mu);
  chime__tbl_notify(arrived);
  return rc;
}

/* A sequence table's batch, called and returning with t->mu held: each
 * window's first block is pinned under the lock, then its steps are
 * copied into the window's [T, *shape] place in every leaf (and the mask:
 * 1 for valid steps) without it; an insert that would reuse a pinned
 * block waits for the copy (chime__steps_room). */
void chime__tbl_seq_copy(chime__table_t *t, const chime_ring_layout_t *lay,
                         chime__ring_wslot_t *slot, const uint32_t *rows) {
  uint32_t tl = t->cfg.sequence_length;
  uint64_t batch = lay->batch_size;
  for (uint64_t j = 0; j < batch; j++) {
    uint32_t k = chime__tbl_row_at(slot, rows, j);
    chime__steps_pin(t->steps, t->wslot[k]);
    if (t->cfg.episode_pad) {
      uint8_t *m = (uint8_t *)slot->leaf[t->sleaves] + j * tl;
      memset(m, 1, t->wlen[k]);
      memset(m + t->wlen[k], 0, tl - t->wlen[k]);
    }
  }
  pthread_mutex_unlock(&t->mu);
  /* The rows are pinned too (plan_batch): wslot and wlen stay theirs. A
   * leaf the ring holds framed (a stream-mode learner decompresses it)
   * gets each window's steps as stored, packed, with the batch's
   * offsets. */
  uint8_t *dst[CHIME_MAX_LEAVES];
  uint64_t at[CHIME_MAX_LEAVES] = {0};
  for (uint64_t j = 0; j < batch; j++) {
    uint32_t k = chime__tbl_row_at(slot, rows, j);
    for (uint32_t l = 0; l < t->sleaves; l++) {
      int framed = lay->offsets_offset[l] != 0;
      dst[l] = framed ? NULL : (uint8_t *)slot->leaf[l] + j * tl * t->lbytes[l];
      if (framed) {
        slot->offsets[l][j] = (int64_t)at[l];
        at[l] += chime__steps_copy_stored(t->steps, t->wslot[k], t->wlen[k], l,
                                          (uint8_t *)slot->leaf[l] + at[l]);
        slot->offsets[l][j + 1] = (int64_t)at[l];
      }
    }
    chime__steps_copy(t->steps, t->wslot[k], t->wlen[k], dst);
  }
  chime__tbl_lock(t);
  for (uint64_t j = 0; j < batch; j++)
    chime__steps_unpin(t->steps, t->wslot[chime__tbl_row_at(slot, rows, j)]);
  if (t->pin_waiters > 0)
    pthread_cond_broadcast(&t->unpinned);
}

chime__steps_t *chime__table_steps(chime__table_t *t) {
  return t->steps;
}

int chime__table_restore_window(chime__table_t *t, uint64_t key, uint64_t itime,
                                double prio, uint32_t times, uint32_t slot,
                                uint64_t episode, uint32_t first,
                                uint32_t len) {
  uint32_t dummy;
  if (t->steps == NULL || chime__tbl_check_priorities(t, &prio, 1) != 0)
    return CHIME_EINVAL;
  chime__tbl_lock(t);
  int rc = 0;
  if (chime__keyindex_lookup(t->keys, key, &dummy) == 0 ||
      chime__steps_check_window(t->steps, slot, episode, first, len) != 0) {
    rc = CHIME_EINVAL;
  } else if (t->rows - t->count - t->ndead == 0) {
    rc = CHIME_ENOMEM;
  } else {
    uint32_t r = chime__tbl_free_pop(t);
    t->meta[r] = (row_meta_t){.key = key,
                              .itime = itime,
                              .prio = prio,
                              .times = times,
                              .version = chime__steps_version(t->steps, slot)};
    t->wslot[r] = slot;
    t->wfirst[r] = first;
    t->wlen[r] = len;
    t->wep[r] = episode;
    chime__steps_relist(t->steps, slot, r);
    chime__tbl_live_add(t, r, 0);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

void chime__table_restore_seq_counts(chime__table_t *t, uint64_t step_key,
                                     double max_prio,
                                     uint64_t windows_dropped) {
  chime__tbl_lock(t);
  t->step_key = step_key;
  if (max_prio > t->max_prio)
    t->max_prio = max_prio;
  t->windows_dropped = windows_dropped;
  pthread_mutex_unlock(&t->mu);
}
