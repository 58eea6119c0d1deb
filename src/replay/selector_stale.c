/* prioritized with staleness weighting (TorchRL's StalenessAwareSampler,
 * docs/replay.md "Staleness weighting"): an item is drawn with probability
 * p^a x w(s) / Z, s = the newest version known - the item's version, w(s)
 * = 1 / (s + 1), Z = the sum of p^a x w(s) over the live items.
 *
 * Every item's s changes when the newest version rises, so no per-item
 * weight is kept: the sum tree holds p^a as for plain prioritized, the
 * version index (verindex.c) each version's sum of p^a and Z, the sum
 * over live versions of that x w(newest - version), kept as rows come,
 * go and change and summed afresh when the newest version rises. A draw
 * takes an item from the sum tree (probability p^a / T) and keeps it with
 * probability w(s) (w(0) = 1, w falls with s): each try keeps one exactly
 * from the target, and the tries expected are T / Z, at most 1 / w(the
 * largest staleness held): max_staleness + 1 with a gate. Without one
 * they grow with how stale the mass is, so after STALE_TRIES tries a draw
 * walks the versions (choosing one by its share of Z) and that version's
 * rows: exact too, linear in the versions and the version's rows. The
 * walk counts on each version's weight being its rows' (not a running
 * sum's residue: verindex.c keeps it so). */
#include <math.h>

#include "replay/selector.h"
#include "replay/sumtree.h"
#include "replay/table_internal.h"
#include "replay/verindex.h"

/* Tries before the walk: with w(s) >= 1/8 the walk is taken with
 * probability under (7/8)^64 ~ 2e-4. */
#define STALE_TRIES 64

static inline double weight_of(uint64_t s) {
  return chime__verindex_stale_weight(s);
}

/* A draw from the sum tree alone (p^a / T, not P): only where the walk
 * finds nothing, which the version index's sums rule out (a version's
 * weight is > 0 only when one of its rows weighs, verindex.h), so that
 * no bug there hands the table a row that is not one. total > 0. */
static uint32_t by_tree(chime__table_t *t, double z, int e, double *prob) {
  uint64_t slot = 0;
  double total = chime__sumtree_total(t->sum);
  if (chime__sumtree_find(t->sum, chime__tbl_rand_unit(t) * total, &slot) != 0)
    return chime__selector_prioritized.pick(t, prob);
  uint32_t r = (uint32_t)slot;
  *prob =
      chime__verindex_share(chime__sumtree_get(t->sum, r),
                            weight_of(t->vnewest - t->meta[r].version), z, e);
  return r;
}

/* The exact draw by the versions: one by its share of Z, then one of its
 * rows by its share of the version's weight. Rounding that runs past the
 * end takes the last with weight, of the versions and of the rows. Z and
 * the versions' terms are taken at Z's scale (x 2^-e, verindex.h), so
 * that items of tiny weight far behind are drawn as precisely. */
static uint32_t walk(chime__table_t *t, double *prob) {
  uint64_t ver;
  double mass, f = 1.0;
  uint32_t first = NONE, head;
  int e;
  double z = chime__verindex_z_exact(t->vidx, &e);
  double u = chime__tbl_rand_unit(t) * z;
  if (!(z > 0))
    return chime__selector_prioritized.pick(t, prob);
  /* Newest first: most of Z, mostly. */
  for (uint64_t i = chime__verindex_versions(t->vidx); i-- > 0;) {
    chime__verindex_at(t->vidx, i, &ver, &mass, &head);
    if (!(mass > 0))
      continue;
    first = head;
    f = weight_of(t->vnewest - ver);
    double term = (e != 0 ? ldexp(mass, -e) : mass) * f;
    if (u < term)
      break;
    u -= term;
  }
  if (first == NONE) /* Z > 0 says some version weighs: unreachable */
    return by_tree(t, z, e, prob);
  double v = u / f; /* within the version's weight */
  if (e != 0)
    v = ldexp(v, e);
  uint32_t r = first, got = NONE;
  do {
    double w = chime__sumtree_get(t->sum, r);
    if (w > 0) {
      got = r;
      if (v < w)
        break;
      v -= w;
    }
    r = chime__verindex_next(t->vidx, r);
  } while (r != first);
  if (got == NONE) /* its weight > 0 says a row weighs: unreachable */
    return by_tree(t, z, e, prob);
  *prob = chime__verindex_share(chime__sumtree_get(t->sum, got), f, z, e);
  return got;
}

static uint32_t pick(chime__table_t *t, double *prob) {
  int e;
  double total = chime__sumtree_total(t->sum);
  double z = chime__verindex_z_scaled(t->vidx, &e);
  uint64_t slot;
  if (!(total > 0) || !(z > 0)) /* every priority 0: uniform */
    return chime__selector_prioritized.pick(t, prob);
  for (int k = 0; k < STALE_TRIES; k++) {
    if (chime__sumtree_find(t->sum, chime__tbl_rand_unit(t) * total, &slot) !=
        0)
      break;
    uint32_t r = (uint32_t)slot;
    double f = weight_of(t->vnewest - t->meta[r].version);
    if (f >= 1.0 || chime__tbl_rand_unit(t) < f) {
      *prob = chime__verindex_share(chime__sumtree_get(t->sum, slot), f, z, e);
      return r;
    }
  }
  return walk(t, prob);
}

/* Z: what an item's p^a x w(s) is a share of (a sharded learner weighs
 * shards by it); 0 while every priority is 0, as prioritized's. */
static double mass(const chime__table_t *t) {
  double z = chime__verindex_z(t->vidx); /* subnormal, or 0, for tiny Z */
  return chime__sumtree_total(t->sum) > 0 ? z : 0.0;
}

const chime__selector_t chime__selector_prioritized_stale = {
    .id = CHIME__SELECTOR_PRIORITIZED,
    .name = "prioritized",
    .needs = CHIME__SEL_SUM | CHIME__SEL_DENSE,
    .random = 1,
    .pick = pick,
    /* Never a remover: a table's is chime__selector(remover), and a
     * prioritized remover picks by priority alone (Reverb's rule). */
    .victim = NULL,
    .mass = mass,
};
