/* A group table's writer (docs/replay.md, "Groups"): a group of samples
 * packed as the one item of the table's stored spec that it is (the group
 * leaf of each sample's lengths first, then each leaf's samples back to
 * back), and the groups acks say the table's filters dropped. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "client/writer_call.h"
#include "common/detail.h"

/* The group leaf of n samples (cols u32 each: each ragged leaf's length)
 * into g; CHIME_EINVAL naming the leaf and sample when a length is past
 * its bound, or a ragged leaf has no lengths. */
static int pack_group(const chime_writer_t *w, uint32_t gmax, uint32_t n,
                      const uint32_t *const lengths[], uint32_t *g,
                      uint32_t *rows) {
  const chime_spec_t *s = &w->spec;
  uint32_t cols = (uint32_t)s->leaves[0].shape[1];
  memset(g, 0, (size_t)n * cols * sizeof(*g));
  rows[0] = n;
  for (uint32_t i = 1, c = 0; i < s->nleaves; i++) {
    const chime_leaf_t *l = &s->leaves[i];
    if (l->shares == 1) { /* a fixed leaf: a row per sample */
      rows[i] = n;
      continue;
    }
    const uint32_t *len = lengths != NULL ? lengths[i - 1] : NULL;
    if (len == NULL)
      return chime__detailf(CHIME_EINVAL,
                            "insert into '%s': leaf '%s' is ragged: its "
                            "samples' lengths needed",
                            w->table, l->name);
    uint64_t sum = 0, bound = l->shape[0] / gmax;
    for (uint32_t j = 0; j < n; j++) {
      if (len[j] > bound)
        return chime__detailf(CHIME_EINVAL,
                              "insert into '%s': leaf '%s' of sample %" PRIu32
                              " of the group has %" PRIu32
                              " rows, more than its bound %" PRIu64,
                              w->table, l->name, j, len[j], bound);
      g[(size_t)j * cols + c] = len[j];
      sum += len[j];
    }
    rows[i] = (uint32_t)sum; /* n * bound fits: the stored bound does */
    c++;
  }
  return 0;
}

int chime_writer_append_group(chime_writer_t *writer,
                              const void *const leaves[],
                              const uint32_t *const lengths[], uint32_t n,
                              double priority) {
  chime_writer_t *w = writer;
  if (!w || (!leaves && n))
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_append_group: needs a writer and "
                         "leaves");
  uint32_t gmax = chime_spec_group_max(&w->spec);
  if (gmax == 0)
    return chime__detailf(CHIME_EINVAL,
                          "insert into '%s': not a group table (no "
                          "group_max): append samples, not groups",
                          w->table);
  if (n == 0 || n > gmax)
    return chime__detailf(CHIME_EINVAL,
                          "insert into '%s': a group of %" PRIu32
                          " samples; the table takes 1..%" PRIu32
                          " (group_max)",
                          w->table, n, gmax);
  uint32_t cols = (uint32_t)w->spec.leaves[0].shape[1];
  uint32_t *g = malloc((size_t)n * cols * sizeof(*g));
  if (g == NULL)
    return chime__detail(CHIME_ENOMEM, "out of memory");
  uint32_t rows[CHIME_MAX_LEAVES];
  const void *all[CHIME_MAX_LEAVES];
  int rc = pack_group(w, gmax, n, lengths, g, rows);
  if (rc == 0) {
    all[0] = g;
    for (uint32_t i = 1; i < w->spec.nleaves; i++)
      all[i] = leaves[i - 1];
    rc = chime_writer_append_leaves(w, all, rows, priority);
  }
  free(g);
  return rc;
}

uint32_t chime_writer_take_dropped(chime_writer_t *writer,
                                   chime_writer_drop_t *out, uint32_t n) {
  chime_writer_t *w = writer;
  if (w == NULL || out == NULL)
    return 0;
  uint32_t k = w->ndrops < n ? (uint32_t)w->ndrops : n;
  memcpy(out, w->drops, k * sizeof(*out));
  memmove(w->drops, w->drops + k, (w->ndrops - k) * sizeof(*out));
  w->ndrops -= k;
  return k;
}

uint64_t chime_writer_dropped(const chime_writer_t *writer) {
  return writer != NULL ? writer->dropped : 0;
}
