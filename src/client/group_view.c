/* A group table's batches (group.h). The ring holds a group table's
 * batch as a ragged table's: every leaf's offsets per group. The learner
 * wants each sample's rows, so each ragged leaf's offsets per sample are
 * made here from the group leaf's lengths (a pass over the samples'
 * lengths, the values never copied), checked against the ring's. */
#include "client/group_view.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chime__group_view_s {
  uint32_t cols;                   /* the group leaf's: ragged leaves */
  uint8_t fixed[CHIME_MAX_LEAVES]; /* a leaf of a row per sample */
  uint64_t most;                   /* samples a batch holds at most, + 1 */
  int64_t *offs;                   /* per slot, per column: most offsets */
};

int chime__group_view_new(chime__group_view_t **out, const chime_spec_t *spec,
                          uint32_t batch_size, uint32_t slots) {
  uint32_t gmax = chime_spec_group_max(spec);
  *out = NULL;
  if (gmax == 0)
    return 0;
  chime__group_view_t *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return CHIME_ENOMEM;
  g->cols = (uint32_t)spec->leaves[0].shape[1];
  for (uint32_t i = 1; i < spec->nleaves; i++)
    g->fixed[i] = spec->leaves[i].shares == 1;
  g->most = (uint64_t)batch_size * gmax + 1;
  g->offs = malloc((size_t)slots * g->cols * g->most * sizeof(*g->offs));
  if (g->offs == NULL) {
    free(g);
    return CHIME_ENOMEM;
  }
  *out = g;
  return 0;
}

void chime__group_view_free(chime__group_view_t *g) {
  if (g == NULL)
    return;
  free(g->offs);
  free(g);
}

/* Leaf l's per-sample offsets (column c of the lengths) into o. */
static int sample_offsets(const chime_batch_t *b, uint32_t cols, uint32_t c,
                          const chime_batch_leaf_t *l, int64_t *o, char *err,
                          size_t errlen) {
  const int64_t *grp = b->groups, *per = l->offsets;
  const uint32_t *len = b->leaf[0].data;
  for (uint32_t j = 0; j < b->count; j++) {
    int64_t at = per[j];
    for (int64_t k = grp[j]; k < grp[j + 1]; k++) {
      o[k] = at;
      at += len[(size_t)k * cols + c];
    }
    if (at != per[j + 1]) {
      snprintf(err, errlen,
               "leaf '%s': group %" PRIu32 " holds %" PRId64
               " rows, its samples' lengths sum to %" PRId64,
               l->name, j, per[j + 1] - per[j], at - per[j]);
      return CHIME_EPROTO;
    }
  }
  o[grp[b->count]] = per[b->count];
  return 0;
}

int chime__group_view_lend(chime__group_view_t *g, uint32_t slot,
                           chime_batch_t *b, char *err, size_t errlen) {
  b->groups = b->leaf[0].offsets;
  uint64_t samples = b->leaf[0].shape[0]; /* groups[count], checked */
  if (samples >= g->most) {
    snprintf(err, errlen, "%" PRIu64 " samples in %" PRIu32 " groups", samples,
             b->count);
    return CHIME_EPROTO;
  }
  int64_t *o = g->offs + (size_t)slot * g->cols * g->most;
  for (uint32_t i = 1, c = 0; i < b->nleaves; i++) {
    chime_batch_leaf_t *l = &b->leaf[i];
    if (g->fixed[i]) { /* a row per sample, as the group leaf's */
      if (l->shape[0] != samples ||
          memcmp(l->offsets, b->groups, (b->count + 1) * sizeof(int64_t))) {
        snprintf(err, errlen,
                 "leaf '%s': its rows are not a row per sample of the "
                 "groups (%" PRIu64 " rows, %" PRIu64 " samples)",
                 l->name, l->shape[0], samples);
        return CHIME_EPROTO;
      }
      l->offsets = NULL;
      continue;
    }
    int rc = sample_offsets(b, g->cols, c, l, o, err, errlen);
    if (rc != 0)
      return rc;
    l->offsets = o;
    o += g->most;
    c++;
  }
  return 0;
}
