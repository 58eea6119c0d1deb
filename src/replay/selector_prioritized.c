/* prioritized: an item with probability priority^exponent / sum, over the
 * sum tree; uniform while every priority is 0. */
#include "replay/selector.h"
#include "replay/sumtree.h"
#include "replay/table_internal.h"

static uint32_t pick(chime__table_t *t, double *prob) {
  double total = chime__sumtree_total(t->sum);
  uint64_t slot;
  double u = chime__tbl_rand_unit(t);
  if (total > 0 && chime__sumtree_find(t->sum, u * total, &slot) == 0) {
    *prob = chime__sumtree_get(t->sum, slot) / total;
    return (uint32_t)slot;
  }
  return chime__selector_uniform.pick(t, prob); /* every priority 0 */
}

/* The new one with its weight's share of the sum, its own included (every
 * weight 0: uniform). Within range: each weight is at most
 * CHIME__SUMTREE_MAX_VALUE and the rows outnumber the items, the new one
 * included. */
static uint32_t victim(chime__table_t *t, double prio, double w) {
  double total = chime__sumtree_total(t->sum);
  double all = total + w;
  double u = chime__tbl_rand_unit(t);
  uint64_t slot;
  if (!(all > 0))
    return chime__selector_uniform.victim(t, prio, w);
  if (u * all >= total) /* past the items' ranges: the new one's */
    return NONE;
  if (chime__sumtree_find(t->sum, u * all, &slot) == 0)
    return (uint32_t)slot;
  return NONE; /* total > 0 here: unreachable */
}

/* The sum tree's descents pay side by side even in the caches (their steps
 * interleave); with every priority 0 the draws are pick's, uniform. */
static int draws_ahead(const chime__table_t *t) {
  return chime__sumtree_total(t->sum) > 0;
}

static void draw_many(chime__table_t *t, uint64_t n, uint32_t *row,
                      double *prob) {
  double total = chime__sumtree_total(t->sum), px[CHIME__TBL_DRAW_CHUNK];
  uint64_t slot[CHIME__TBL_DRAW_CHUNK];
  for (uint64_t j = 0; j < n; j++)
    px[j] = chime__tbl_rand_unit(t) * total;
  if (chime__sumtree_find_many(t->sum, px, n, slot) == 0) {
    for (uint64_t j = 0; j < n; j++) {
      row[j] = (uint32_t)slot[j];
      prob[j] = chime__sumtree_get(t->sum, slot[j]) / total;
      chime__tbl_prefetch_meta(t, row[j]); /* plan_batch's next read */
    }
    return;
  } /* total > 0 was checked under the lock held since: unreachable */
  for (uint64_t j = 0; j < n; j++)
    row[j] = pick(t, &prob[j]);
}

/* The weights' sum: 0 while every priority is 0, though pick then draws
 * uniformly, so that in a union with weighed items (shards) none of these
 * is drawn, as one table holding them all would do. */
static double mass(const chime__table_t *t) {
  return chime__sumtree_total(t->sum);
}

const chime__selector_t chime__selector_prioritized = {
    .id = CHIME__SELECTOR_PRIORITIZED,
    /* DENSE: uniform draws while every priority is 0 */
    .name = "prioritized",
    .needs = CHIME__SEL_SUM | CHIME__SEL_DENSE,
    .random = 1,
    .pick = pick,
    .victim = victim,
    .draws_ahead = draws_ahead,
    .draw_many = draw_many,
    .mass = mass,
};
