/* An index of a table's live rows by policy version, so that a table with
 * max_staleness removes the items that fell too far behind by walking only
 * them: the rows of each distinct version are one list, and the versions
 * are kept sorted, lowest first. Items arrive roughly in version order, so
 * a new item's version is nearly always the highest already there (one
 * compare) or a new highest (one append); an older one is found by binary
 * search over the distinct versions live, which are few (the staleness
 * window's). Each version also keeps its rows' weight, and the index
 * their sum weighted by staleness (a prioritized table's staleness
 * weighting draws against it). Sized at create for every row:
 * add and remove never allocate and never fail. Not thread-safe: the table
 * calls it under its lock. */
#ifndef CHIME_REPLAY_VERINDEX_H
#define CHIME_REPLAY_VERINDEX_H

#include <float.h>
#include <stdint.h>

#include "chime/errors.h"
#include "replay/sumtree.h"

typedef struct chime__verindex_s chime__verindex_t;

/* An empty index for rows [0, rows). CHIME_EINVAL, CHIME_ENOMEM. */
CHIME_NODISCARD int chime__verindex_create(chime__verindex_t **out,
                                           uint64_t rows);
void chime__verindex_destroy(chime__verindex_t *v); /* NULL-safe */
/* Bytes it maps for this many rows (create's, for chime__table_bytes). */
uint64_t chime__verindex_bytes(uint64_t rows);

/* Row r (not in the index) of version ver and weight w (its sum tree
 * weight, or 0) joins it, after the rows of its version already there. */
void chime__verindex_add(chime__verindex_t *v, uint32_t r, uint64_t ver,
                         double w);
/* Row r, which joined with version ver, leaves with its weight w. */
void chime__verindex_remove(chime__verindex_t *v, uint32_t r, uint64_t ver,
                            double w);
/* A row of version ver went from weight old to w (a new priority). */
void chime__verindex_reweigh(chime__verindex_t *v, uint64_t ver, double old,
                             double w);

/* Staleness weighting (selector_stale.c): w(s) = 1 / (s + 1), s = the
 * newest version - a version. */
static inline double chime__verindex_stale_weight(uint64_t s) {
  return 1.0 / ((double)s + 1.0);
}
/* Once called (at create), the index keeps each version's weight (the
 * sum of its rows' weights in sum, the table's sum tree, where add,
 * remove and reweigh find every row as it now is) and Z = the sum over
 * live versions of their weight x w(newest - version): kept as rows come,
 * go and change, each within about a relative 2^-45 of the same sum made
 * afresh (made afresh, from the rows or the versions, when a change would
 * take it further: verindex.c), and summed afresh when newest rises.
 * Without it no weights are kept (add, remove and reweigh ignore w). */
void chime__verindex_weigh(chime__verindex_t *v, const chime__sumtree_t *sum);
/* The newest version known rose to newest (it only rises). */
void chime__verindex_set_newest(chime__verindex_t *v, uint64_t newest);
/* Z (0 with nothing live, or without chime__verindex_weigh; it may be
 * subnormal, or 0 when below the least double, for items of tiny weight
 * that are all very stale). */
double chime__verindex_z(const chime__verindex_t *v);
/* Z as kept: Z x 2^-*e. *e is 0 unless Z is too small for doubles to hold
 * its terms precisely (items of 1e-300 at staleness 2^64 - 1 weigh 5e-320,
 * subnormal), then Z x 2^-*e is near 1. */
double chime__verindex_z_scaled(const chime__verindex_t *v, int *e);
/* Z summed afresh (exact, one pass over the versions, two when scaled),
 * as chime__verindex_z_scaled gives it. */
double chime__verindex_z_exact(chime__verindex_t *v, int *e);
double chime__verindex_share_scaled(double w, double f, double z, int e);
/* An item's share of Z, w x f / Z: w its weight, f its w(s), z and e
 * Z as chime__verindex_z_scaled gives it (z > 0). Exact to a few ulps
 * however small w x f and Z are, as long as the share is not itself
 * subnormal. */
static inline double chime__verindex_share(double w, double f, double z,
                                           int e) {
  double n = w * f;
  if (e == 0 && n >= DBL_MIN) /* the common case: as plain as it looks */
    return n / z;
  return chime__verindex_share_scaled(w, f, z, e);
}
/* The i-th lowest distinct version live (i < chime__verindex_versions):
 * the version, the sum of its rows' weights (> 0 exactly when one of its
 * rows weighs > 0; 0 without chime__verindex_weigh) and its first row;
 * chime__verindex_next gives the row after r in its version, back to the first
 * after the last. */
void chime__verindex_at(const chime__verindex_t *v, uint64_t i, uint64_t *ver,
                        double *mass, uint32_t *first);
uint32_t chime__verindex_next(const chime__verindex_t *v, uint32_t r);
/* The first row of the lowest version in *r and that version in *ver: 0,
 * or CHIME_ENOTFOUND when the index is empty. */
int chime__verindex_lowest(const chime__verindex_t *v, uint32_t *r,
                           uint64_t *ver);
/* Distinct versions in the index now. */
uint64_t chime__verindex_versions(const chime__verindex_t *v);

#endif
