/* A sequence table's section of its checkpoint table file (ckpt_seq.h):
 * both directions here, beside the plain tables' in ckpt_format.c. */
#include "replay/ckpt_seq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "common/errfmt.h"
#include "common/key.h"
#include "replay/zleaf.h"

#define fail chime__fail

/* A sequence table's part after the items' common fields: its settings
 * and counters, each window's first step (a position-based slot), episode,
 * index and length, then the blocks holding steps, oldest first (steps,
 * links as positions, each step's episode and index, then per leaf the
 * steps' bytes). Windows come first so that their rows go before the
 * blocks are written (windows that leave meanwhile would otherwise hold
 * rows until the end, and new windows could run out of rows); each block
 * goes once written, oldest first, which is the order appends want them
 * back in. An append into a full store waits for the windows' write and
 * one block's (see docs/operations.md for figures). */
void chime__ckpt_seq_write(chime__table_t *t, wr_t *w, chime__table_view_t *v) {
  const chime__table_config_t *cfg = chime__table_config(t);
  const chime__steps_view_t *sv = &v->steps;
  const chime_spec_t *spec = &cfg->spec;
  uint64_t mp;
  memcpy(&mp, &v->max_prio, 8);
  wr_u32(w, cfg->sequence_length);
  wr_u32(w, cfg->stride);
  wr_u32(w, cfg->episode_pad ? 1u : 0u);
  wr_u32(w, sv->k);
  wr_u64(w, cfg->capacity_steps);
  wr_u32(w, sv->nused);
  wr_u64(w, sv->next_episode);
  wr_u64(w, v->step_key);
  wr_u64(w, v->windows_dropped);
  wr_u64(w, mp);
  wr_u64(w, sv->abandoned);
  wr_u64(w, sv->evicted);
  for (uint64_t i = 0; i < v->count && w->err == 0; i++) {
    uint64_t pb;
    chime__table_view_item_t it;
    chime__table_view_item(t, v, i, &it);
    memcpy(&pb, &v->prio[i], 8);
    wr_u64(w, it.key);
    wr_u64(w, it.itime);
    wr_u64(w, pb);
    wr_u32(w, v->times[i]);
    wr_u32(w, chime__steps_view_slot(sv, it.slot));
    wr_u64(w, it.episode);
    wr_u32(w, it.first);
    wr_u32(w, it.len);
    if ((i + 1) % UNPIN_EVERY == 0)
      chime__table_view_unpin(t, v, i + 1);
  }
  chime__table_view_unpin(t, v, v->count);
  for (uint32_t pos = 0; pos < sv->nused && w->err == 0; pos++) {
    const uint64_t *ep, *ver;
    const uint32_t *idx;
    const uint8_t *leaf[CHIME_MAX_LEAVES];
    uint32_t bn = sv->bn[pos];
    chime__steps_view_block(chime__table_steps(t), sv, pos, &ep, &idx, &ver,
                            leaf);
    wr_u32(w, bn);
    wr_u32(w, sv->bnext[pos]);
    wr_u32(w, sv->bprev[pos]);
    for (uint32_t o = 0; o < bn; o++) {
      wr_u64(w, ep[o]);
      wr_u32(w, idx[o]);
      wr_u64(w, ver[o]); /* version 5 */
    }
    uint8_t *const *z = chime__steps_view_z(chime__table_steps(t), sv, pos);
    for (uint32_t l = 0, k = 0; l < spec->nleaves; l++) {
      if (leaf[l] != NULL) {
        wr_raw(w, leaf[l], (size_t)(bn * chime_leaf_bytes(&spec->leaves[l])));
        continue;
      }
      /* Version 6: a compressed leaf's steps as stored. */
      uint32_t nz = chime__steps_nz(chime__table_steps(t));
      for (uint32_t o = 0; o < bn; o++) {
        uint32_t st = chime__zleaf_size(z[o], k);
        wr_u32(w, st);
        wr_raw(w, chime__zleaf_at(z[o], nz, k), st);
      }
      k++;
    }
    chime__table_view_unpin_steps(t, v, pos + 1);
  }
}

/* A sequence table's window record. */
#define WIN_REC 48u

/* A sequence table's section, walked whole (windows and blocks, their
 * sizes); what goes into the table is checked when it goes in. */
int chime__ckpt_seq_parse(rd_t *r, uint32_t ver, uint64_t count, uint64_t sb,
                          const chime_spec_t *spec, const uint8_t *zmask,
                          chime__ckpt_seqhdr_t *h) {
  uint32_t nl = spec->nleaves;
  char why[256];
  h->step_rec = ver >= 5 ? 20 : 12;
  h->t = rd_u32(r);
  h->stride = rd_u32(r);
  h->pad = rd_u32(r);
  h->k = rd_u32(r);
  h->capacity_steps = rd_u64(r);
  h->nused = rd_u32(r);
  h->next_episode = rd_u64(r);
  h->step_key = rd_u64(r);
  h->dropped = rd_u64(r);
  uint64_t mp = rd_u64(r);
  memcpy(&h->max_prio, &mp, 8);
  h->abandoned = rd_u64(r);
  h->evicted = rd_u64(r);
  if (r->bad || h->t == 0 || h->stride == 0 || h->stride > h->t || h->pad > 1 ||
      h->k == 0 || h->k > 4096 || nl == 0 || sb == 0)
    return -1;
  h->items_at = r->off;
  if (count > (r->n - r->off) / WIN_REC)
    return -1;
  r->off += (size_t)count * WIN_REC;
  h->blocks_at = r->off;
  for (uint32_t pos = 0; pos < h->nused; pos++) {
    uint32_t bn = rd_u32(r);
    rd_u32(r);
    rd_u32(r);
    uint64_t lb;
    if (r->bad || bn == 0 || bn > h->k ||
        (uint64_t)bn * h->step_rec > r->n - r->off)
      return -1;
    r->off += (size_t)bn * h->step_rec;
    /* The leaves: bn * sb, or (version 6) compressed ones as stored. */
    if (chime__zleaf_block(r->p + r->off, r->n - r->off, spec, zmask, bn, NULL,
                           NULL, &lb, why, sizeof(why)) != 0)
      return -1;
    r->off += (size_t)lb;
  }
  return r->off == r->n ? 0 : -1;
}

/* The config's sequence settings against the checkpoint's: T and the
 * episode end shape the items; the steps' blocks must be the same size
 * and fit (stride may differ: it shapes only windows made later). */
int chime__ckpt_seq_check(const char *table, const chime__ckpt_seqhdr_t *h,
                          const chime__table_config_t *cfg, chime__steps_t *st,
                          char *err, size_t errlen) {
  if (h->t != cfg->sequence_length)
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': sequence_length is %u in the checkpoint, %u in "
                "the config",
                table, h->t, cfg->sequence_length);
  if (h->pad != (cfg->episode_pad ? 1u : 0u))
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': episode_end is %s in the checkpoint, %s in the "
                "config",
                table, h->pad ? "pad" : "drop",
                cfg->episode_pad ? "pad" : "drop");
  if (h->k != chime__steps_k(st) || h->nused > chime__steps_nblocks(st))
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': capacity_steps %llu in the checkpoint (%u blocks "
                "of %u steps stored), %llu in the config (%u blocks of %u): "
                "the steps do not fit",
                table, (unsigned long long)h->capacity_steps, h->nused, h->k,
                (unsigned long long)cfg->capacity_steps,
                chime__steps_nblocks(st), chime__steps_k(st));
  return 0;
}

/* Loads a parsed sequence section into t: blocks, then windows. */
int chime__ckpt_seq_load(const uint8_t *p, size_t n,
                         const chime__ckpt_seqhdr_t *h, const uint8_t *zmask,
                         chime__table_t *t, uint64_t count, const char *fname,
                         const char *name, char *err, size_t errlen) {
  const chime__table_config_t *cfg = chime__table_config(t);
  chime__steps_t *st = chime__table_steps(t);
  uint64_t *ep = malloc(h->k * sizeof(*ep));
  uint64_t *ver = malloc(h->k * sizeof(*ver));
  uint32_t *idx = malloc(h->k * sizeof(*idx));
  int zany = chime__steps_nz(st) > 0;
  uint8_t **z = zany ? calloc(h->k, sizeof(*z)) : NULL;
  rd_t r = {p, n, h->blocks_at, 0};
  int rc = 0;
  if (ep == NULL || idx == NULL || ver == NULL || (zany && z == NULL)) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  if (chime__steps_restore_begin(st, h->nused) != 0) {
    chime__steps_stats_t ss;
    chime__steps_get_stats(st, &ss);
    rc = fail(err, errlen, CHIME_EEXIST,
              "table '%s' already holds %llu steps (%llu episodes open): a "
              "checkpoint restores into an empty table",
              name, (unsigned long long)ss.steps,
              (unsigned long long)ss.episodes);
    goto out;
  }
  for (uint32_t pos = 0; pos < h->nused; pos++) {
    uint32_t bn = rd_u32(&r), next = rd_u32(&r), prev = rd_u32(&r);
    const uint8_t *leaf[CHIME_MAX_LEAVES] = {0};
    for (uint32_t o = 0; o < bn; o++) {
      ep[o] = rd_u64(&r);
      idx[o] = rd_u32(&r);
      ver[o] = h->step_rec > 12 ? rd_u64(&r) : 0;
    }
    /* Each compressed step checked as it goes in (chime__zleaf_block). */
    uint64_t lb = 0;
    char why[256] = "";
    int zr =
        r.bad ? -1
              : chime__zleaf_block(r.p + r.off, r.n - r.off, &cfg->spec, zmask,
                                   bn, leaf, z, &lb, why, sizeof(why));
    r.off += (size_t)lb;
    if (zr == CHIME_ENOMEM) {
      rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
      goto out;
    }
    if (zr != 0 || chime__steps_restore_block(st, pos, bn, next, prev, ep, idx,
                                              ver, leaf, z) != 0) {
      for (uint32_t o = 0; z != NULL && zr == 0 && o < bn; o++) {
        free(z[o]); /* not taken */
        z[o] = NULL;
      }
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: block %u of table '%s' does not hang together%s%s", fname,
                pos, name, why[0] ? ": " : "", why);
      goto out;
    }
    if (z != NULL)
      memset(z, 0, bn * sizeof(*z)); /* the store's now */
  }
  if (chime__steps_restore_finish(st, h->next_episode, h->abandoned,
                                  h->evicted) != 0) {
    rc = fail(err, errlen, CHIME_ECORRUPT,
              "%s: the blocks of table '%s' do not hang together", fname, name);
    goto out;
  }
  r.off = h->items_at;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t key = rd_u64(&r), itime = rd_u64(&r), pb = rd_u64(&r);
    uint32_t times = rd_u32(&r), slot = rd_u32(&r);
    uint64_t episode = rd_u64(&r);
    uint32_t first = rd_u32(&r), len = rd_u32(&r);
    double prio;
    memcpy(&prio, &pb, 8);
    if (chime__key_shard(key) != cfg->shard) {
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: window %llu (key %llu) is shard %u's in a file of shard "
                "%u",
                fname, (unsigned long long)i, (unsigned long long)key,
                chime__key_shard(key), cfg->shard);
      goto out;
    }
    rc = chime__table_restore_window(t, key, itime, prio, times, slot, episode,
                                     first, len);
    if (rc == CHIME_ENOMEM) {
      rc = fail(err, errlen, CHIME_EINVAL,
                "table '%s': the checkpoint holds %llu windows, more than its "
                "rows hold",
                name, (unsigned long long)count);
      goto out;
    }
    if (rc != 0) {
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: window %llu (key %llu): a duplicate key, a priority the "
                "table cannot use, or steps it does not hold",
                fname, (unsigned long long)i, (unsigned long long)key);
      goto out;
    }
  }
  chime__table_restore_seq_counts(t, h->step_key, h->max_prio, h->dropped);
out:
  free(ep);
  free(ver);
  free(idx);
  free(z);
  return rc;
}
