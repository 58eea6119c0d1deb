/* A sum tree over n slots of non-negative doubles, for sampling a slot with
 * probability value / total (prioritized replay: value = priority^exponent,
 * computed by the caller). set, total and find are O(log n); nothing
 * allocates after create. Not thread-safe: the table calls it under its lock.
 *
 * 8 children a node, each node's children's sums in one cache line: a find
 * or set on a tree larger than the cache touches about log8(n) lines (8 at
 * 10^7 slots, the top ones cached) where a binary tree touches log2(n).
 *
 * No drift: every inner sum is recomputed from its children on each set
 * (never adjusted by a delta), so the tree is a pure function of the slots'
 * values, bit for bit the tree a fresh build would give. There is nothing
 * to rebuild periodically.
 *
 * find's guarantee: with total > 0 it always returns a slot whose value is
 * > 0, for any prefix (negative and NaN are taken as 0, a prefix at or past
 * the total as the last slot with a value). For prefix in [0, total) it is
 * the slot whose cumulative range [sum of the slots before it, + value)
 * contains prefix, up to rounding: within a few ulps of a range's boundary
 * it may be the neighbouring non-empty slot, an error of order
 * ulp(total) / total in any slot's probability.
 *
 * Memory: 8 bytes per slot for the values and about 1.2 for the inner
 * sums, mapped lazily and committed as slots are set. 10^8 slots: about
 * 0.9 GB once all are set. */
#ifndef CHIME_SERVER_SUMTREE_H
#define CHIME_SERVER_SUMTREE_H

#include <stddef.h>
#include <stdint.h>

#include "chime/errors.h"

/* The most slots a tree takes (row indexes elsewhere are 32-bit). */
#define CHIME__SUMTREE_MAX_SLOTS UINT64_C(0xffffffff)
/* The most a slot should hold for the total to stay finite however many
 * slots hold it: MAX_SLOTS of them sum to 4.3e307 (DBL_MAX is 1.8e308).
 * set takes more (its total is checked), but then whether a value fits
 * depends on the others; the table refuses weights above it up front. */
#define CHIME__SUMTREE_MAX_VALUE 1e298

typedef struct chime__sumtree_s chime__sumtree_t;

/* A tree of n slots (1 .. CHIME__SUMTREE_MAX_SLOTS), all 0. CHIME_EINVAL,
 * CHIME_ENOMEM. */
CHIME_NODISCARD int chime__sumtree_create(chime__sumtree_t **out, uint64_t n);
void chime__sumtree_destroy(chime__sumtree_t *t); /* NULL-safe */

uint64_t chime__sumtree_slots(const chime__sumtree_t *t);
/* Sets a slot's value (0 removes it from sampling). CHIME_EINVAL for a slot
 * out of range or a value that is negative, NaN or infinite;
 * CHIME_EOVERFLOW, changing nothing, when the total would be infinite. */
CHIME_NODISCARD int chime__sumtree_set(chime__sumtree_t *t, uint64_t slot,
                                       double value);
/* A slot's value (0 for one out of range). */
double chime__sumtree_get(const chime__sumtree_t *t, uint64_t slot);
/* The sum of all values. */
double chime__sumtree_total(const chime__sumtree_t *t);
/* The slot whose cumulative range contains prefix (draw prefix uniformly in
 * [0, total) to sample), as guaranteed above. CHIME_ENOTFOUND when the
 * total is 0. */
CHIME_NODISCARD int chime__sumtree_find(const chime__sumtree_t *t,
                                        double prefix, uint64_t *slot);
/* n finds at once, slot[j] what chime__sumtree_find gives for prefix[j]:
 * the descents go down the tree together, each level's groups asked for
 * before any is read, so on a tree larger than the cache their misses
 * overlap instead of queueing one behind another (a batch drawn from an
 * unchanging tree: no max_times_sampled). CHIME_ENOTFOUND, slot
 * untouched, when the total is 0. */
CHIME_NODISCARD int chime__sumtree_find_many(const chime__sumtree_t *t,
                                             const double *prefix, size_t n,
                                             uint64_t *slot);

#endif
