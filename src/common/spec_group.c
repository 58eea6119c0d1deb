/* Group specs (docs/replay.md, "Groups"): a group table's item is up to
 * group_max samples of a per-sample spec, stored as one item of a derived
 * spec whose every leaf is ragged at the group level. Both ends use it:
 * chimed to make the table, writers to pack a group, streams to show a
 * batch's groups (and each sample's rows), so it lives here, once. */
#include <stdio.h>
#include <string.h>

#include "chime/spec.h"
#include "common/errfmt.h"
#include "common/spec.h"

/* The group leaf's columns: one per ragged leaf of the sample spec, or a
 * single column of zeros when it has none (a leaf needs a dimension). */
static uint32_t group_cols(uint32_t nrag) {
  return nrag > 0 ? nrag : 1;
}

int chime_spec_group(chime_spec_t *out, const chime_spec_t *in,
                     uint32_t group_max, char *err, size_t errlen) {
  int rc = chime__spec_validate(in, err, errlen);
  if (rc != 0)
    return rc;
  if (group_max == 0 || group_max > CHIME_GROUP_MAX) {
    chime__errf(err, errlen, "group_max %u: must be 1..%u", group_max,
                CHIME_GROUP_MAX);
    return CHIME_EINVAL;
  }
  if (in->nleaves + 1 > CHIME_MAX_LEAVES) {
    chime__errf(err, errlen,
                "a group spec adds the leaf '" CHIME_GROUP_LEAF
                "': %u leaves leave no room (at most %d)",
                in->nleaves, CHIME_MAX_LEAVES);
    return CHIME_EINVAL;
  }
  chime_spec_t s;
  memset(&s, 0, sizeof(s));
  chime_leaf_t *g = &s.leaves[0];
  snprintf(g->name, sizeof(g->name), "%s", CHIME_GROUP_LEAF);
  g->dtype = CHIME_DTYPE_U32;
  g->ndim = 2;
  g->shape[0] = group_max;
  g->shape[1] = group_cols(chime_spec_ragged(in));
  g->ragged = 1;
  for (uint32_t i = 0; i < in->nleaves; i++) {
    const chime_leaf_t *l = &in->leaves[i];
    chime_leaf_t *o = &s.leaves[i + 1];
    if (strncmp(l->name, "__", 2) == 0) {
      chime__errf(err, errlen,
                  "leaf '%s': names starting with '__' are the group's own",
                  l->name);
      return CHIME_EINVAL;
    }
    *o = *l;
    if (l->ragged) { /* up to group_max samples of up to its bound */
      if (__builtin_mul_overflow(l->shape[0], (uint64_t)group_max,
                                 &o->shape[0]) ||
          o->shape[0] > UINT32_MAX) {
        chime__errf(err, errlen,
                    "leaf '%s': %u samples of up to %llu rows pass the 2^32 "
                    "rows an item's leaf may hold",
                    l->name, group_max, (unsigned long long)l->shape[0]);
        return CHIME_EINVAL;
      }
      o->shares = l->shares != 0 ? l->shares + 1 : 0;
      continue;
    }
    if (l->ndim + 1 > CHIME_MAX_DIMS) {
      chime__errf(err, errlen,
                  "leaf '%s': %u dims and the group's make more than %d",
                  l->name, l->ndim, CHIME_MAX_DIMS);
      return CHIME_EINVAL;
    }
    o->ndim = l->ndim + 1; /* a row per sample, as many as the group's */
    o->shape[0] = group_max;
    for (uint32_t d = 0; d < l->ndim; d++)
      o->shape[d + 1] = l->shape[d];
    o->ragged = 1;
    o->shares = 1;
  }
  s.nleaves = in->nleaves + 1;
  if ((rc = chime__spec_validate(&s, err, errlen)) != 0)
    return rc;
  *out = s;
  return 0;
}

uint32_t chime_spec_group_max(const chime_spec_t *spec) {
  if (spec == NULL || spec->nleaves < 2)
    return 0;
  const chime_leaf_t *g = &spec->leaves[0];
  if (strcmp(g->name, CHIME_GROUP_LEAF) != 0 || !g->ragged ||
      g->dtype != CHIME_DTYPE_U32 || g->ndim != 2 ||
      g->shape[0] > CHIME_GROUP_MAX)
    return 0;
  return (uint32_t)g->shape[0];
}

int chime_spec_group_samples(chime_spec_t *out, const chime_spec_t *stored) {
  uint32_t gmax = chime_spec_group_max(stored);
  if (gmax == 0 || out == NULL)
    return CHIME_EINVAL;
  chime_spec_t s;
  memset(&s, 0, sizeof(s));
  for (uint32_t i = 1; i < stored->nleaves; i++) {
    const chime_leaf_t *l = &stored->leaves[i];
    chime_leaf_t *o = &s.leaves[i - 1];
    *o = *l;
    if (l->shares == 1) { /* a fixed leaf: a row per sample */
      o->ndim = l->ndim - 1;
      memset(o->shape, 0, sizeof(o->shape));
      for (uint32_t d = 1; d < l->ndim; d++)
        o->shape[d - 1] = l->shape[d];
      o->ragged = 0;
      o->shares = 0;
    } else {
      o->shape[0] = l->shape[0] / gmax;
      o->shares = l->shares > 1 ? l->shares - 1 : 0;
    }
  }
  s.nleaves = stored->nleaves - 1;
  *out = s;
  return 0;
}

int chime__group_count_check(uint32_t gmax, uint32_t n, uint32_t group,
                             char *err, size_t errlen) {
  if (n == 0) {
    chime__errf(err, errlen, "group %u is empty (a group holds 1..%u samples)",
                group, gmax);
    return CHIME_EINVAL;
  }
  if (n > gmax) {
    chime__errf(err, errlen,
                "group %u has %u samples, more than the table's group_max %u",
                group, n, gmax);
    return CHIME_EINVAL;
  }
  return 0;
}

int chime__group_check(const chime_spec_t *stored, uint32_t gmax,
                       const uint8_t *rows, const uint32_t *lengths,
                       uint32_t group, char *err, size_t errlen) {
  uint32_t n = lengths[0], cols = (uint32_t)stored->leaves[0].shape[1];
  if (chime__group_count_check(gmax, n, group, err, errlen) != 0)
    return CHIME_EINVAL;
  /* Each ragged leaf's column: the samples' lengths, each within the
   * leaf's own bound (and equal to the length it shares), summing to the
   * group's rows of it. Every leaf is ragged here: lengths[i] is leaf i's. */
  uint32_t col[CHIME_MAX_LEAVES];
  for (uint32_t i = 1, c = 0; i < stored->nleaves; i++) {
    const chime_leaf_t *l = &stored->leaves[i];
    if (l->shares == 1)
      continue;
    uint64_t sum = 0, bound = l->shape[0] / gmax;
    const chime_leaf_t *sh =
        l->shares > 1 ? &stored->leaves[l->shares - 1] : NULL;
    col[i] = c++;
    for (uint32_t j = 0; j < n; j++) {
      uint32_t v, w;
      memcpy(&v, rows + ((size_t)j * cols + col[i]) * 4, 4);
      if (v > bound) {
        chime__errf(err, errlen,
                    "group %u: leaf '%s' of sample %u has %u rows, more than "
                    "its bound %llu",
                    group, l->name, j, v, (unsigned long long)bound);
        return CHIME_EINVAL;
      }
      if (sh != NULL &&
          (memcpy(&w, rows + ((size_t)j * cols + col[l->shares - 1]) * 4, 4),
           w != v)) {
        chime__errf(err, errlen,
                    "group %u: leaf '%s' of sample %u has %u rows, '%s' %u: "
                    "they share a length",
                    group, l->name, j, v, sh->name, w);
        return CHIME_EINVAL;
      }
      sum += v;
    }
    if (sum != lengths[i]) {
      chime__errf(err, errlen,
                  "group %u: leaf '%s' holds %u rows, its samples' lengths "
                  "sum to %llu",
                  group, l->name, lengths[i], (unsigned long long)sum);
      return CHIME_EINVAL;
    }
  }
  return 0;
}
