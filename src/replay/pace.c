/* Pacing (docs/replay.md, "Pacing producers"): producers held back by the
 * learner's progress instead of their samples going stale in the table
 * (AReaL's bound on samples ahead of the trainer). A learner draws
 * pace_batch samples per version step; the table counts the samples
 * written ahead of that progress (pace_ahead: up by each sample that goes
 * in, down by pace_batch for each step of the newest version, never below
 * 0, so a learner that waited for samples banks no burst), and an insert
 * waits while its samples would take that count past (max_staleness - 1)
 * batches. A sample that goes in when the newest version is N then has at
 * most that many ahead of it, so a learner drawing in insert order takes
 * it by version N + max_staleness - 2: within max_staleness of its own
 * version while that is at most two steps behind N (the step it was made
 * in and the one its wait ended at). The wait is the rate limiter's: the
 * table's space condition, woken by each version step and by a sampler
 * that starts waiting (for items, or for the rate limiter), which a paced
 * insert never keeps waiting (a learner that draws more than pace_batch per
 * step, or items that left early, never leave both sides waiting). */
#include "replay/table_internal.h"

/* The most samples ahead of the learner's progress. */
static uint64_t pace_bound(const chime__table_t *t) {
  uint64_t s = t->cfg.max_staleness;
  return s > 1 ? (s - 1) * t->cfg.pace_batch : 0;
}

/* A sampler waits: for items, or for the rate limiter, which more inserts
 * open (stream waiters queued, or a blocking sampler). */
static int starving(const chime__table_t *t) {
  return t->samplers_blocked > 0 || t->waiters != NULL;
}

int chime__tbl_pace_holds(const chime__table_t *t, uint64_t n) {
  if (t->cfg.pace_batch == 0 || n == 0)
    return 0;
  uint64_t bound = pace_bound(t);
  if (t->pace_ahead <= bound && n <= bound - t->pace_ahead)
    return 0;
  /* A request larger than the bound goes in alone (nothing ahead), so
   * it never waits for ever. */
  if (n > bound && t->pace_ahead == 0)
    return 0;
  return !starving(t);
}

void chime__tbl_pace_progress(chime__table_t *t, uint64_t old, uint64_t now) {
  uint64_t b = t->cfg.pace_batch;
  if (b == 0 || now <= old)
    return;
  if (now - old > t->pace_ahead / b)
    t->pace_ahead = 0;
  else
    t->pace_ahead -= (now - old) * b;
  if (t->inserts_waiting_pace > 0)
    pthread_cond_broadcast(&t->space);
}

void chime__tbl_pace_starving(chime__table_t *t) {
  if (t->inserts_waiting_pace > 0)
    pthread_cond_broadcast(&t->space);
}

/* A value of an integer leaf (little-endian, its dtype's size) as u64;
 * a negative one (the signed dtypes are the even ones) counts as 0. */
static uint64_t row_value(chime_dtype_t dt, const uint8_t *p) {
  size_t n = chime_dtype_size(dt);
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  if (dt % 2 == 0 && (p[n - 1] & 0x80) != 0)
    return 0;
  return v;
}

void chime__tbl_leaf_versions(const chime__table_t *t, uint8_t *const *bufs,
                              const uint32_t *lengths, uint32_t count,
                              const chime__table_versions_t *given,
                              uint64_t *out, uint64_t *vmax) {
  uint32_t l = t->cfg.version_leaf - 1, k = t->rk[l];
  const chime_leaf_t *leaf = &t->cfg.spec.leaves[l];
  uint64_t row = t->rrow[l];
  /* The leaf's rows follow the earlier ragged leaves' in a sample's
   * allocation (rag_gather). */
  *vmax = 0;
  for (uint32_t j = 0; j < count; j++) {
    const uint32_t *len = lengths + (size_t)j * t->nrag;
    uint64_t at = 0;
    for (uint32_t q = 0; q < k; q++) /* a compressed one is not there */
      if (t->zraw[t->rag[q]] == 0)
        at += (uint64_t)len[q] * t->rrow[t->rag[q]];
    uint64_t v = chime__tbl_version_at(given, j);
    for (uint32_t i = 0; i < len[k]; i++) {
      uint64_t x = row_value(leaf->dtype, bufs[j] + at + i * row);
      v = i == 0 || x < v ? x : v;
    }
    out[j] = v;
    *vmax = v > *vmax ? v : *vmax;
  }
}
