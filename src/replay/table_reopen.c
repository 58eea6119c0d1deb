/* A table opened again on its storage file (table_file.h): its indexes,
 * free lists and counts rebuilt from the rows' records and commit words.
 * Kept apart from table_file.c, which makes, checks and maps the file and
 * knows nothing of the table's indexes: this file calls both. */
#include <stdlib.h>

#include "chime/errors.h"
#include "common/detail.h"
#include "common/spec.h"
#include "replay/table_file.h"
#include "replay/table_internal.h"

/* A live row found in the file: its commit word orders it. */
typedef struct {
  uint64_t seq;
  uint32_t row;
} found_t;

static int bad_row(const char *path, uint32_t r, const char *what) {
  return chime__detailf(CHIME_ECORRUPT, "data_dir: '%s': row %u: %s", path, r,
                        what);
}

/* Row r's ragged lengths and extents as this table writes them; its
 * extents (those of any bytes) appended to ex[*m]. */
static int row_extents(chime__table_t *t, uint32_t r, const char *path,
                       chime__tbl_live_extent_t *ex, size_t *m) {
  uint64_t b = 0;
  if (t->nrag > 0) {
    const uint32_t *len = t->rlen + (size_t)r * t->nrag;
    if (chime__spec_ragged_bytes(&t->cfg.spec, 1, len, &b, NULL, 0) != 0 ||
        t->rext[r].len != chime__tbl_rag_size(t, r))
      return bad_row(path, r,
                     "ragged lengths past their bounds or unlike "
                     "its bytes' extent");
    if (t->rext[r].len > 0)
      ex[(*m)++] = (chime__tbl_live_extent_t){t->rext[r], r};
  }
  if (t->nz > 0) {
    if (t->zext[r].len < 4 * t->nz)
      return bad_row(path, r, "compressed leaves' extent too short");
    ex[(*m)++] = (chime__tbl_live_extent_t){t->zext[r], r};
  }
  return 0;
}

/* Row r's compressed leaves at their extent: their sizes summing to it,
 * each within its leaf's raw size. */
static int z_ok(chime__table_t *t, uint32_t r) {
  const uint8_t *buf = t->zbuf[r];
  const uint32_t *len = t->nrag > 0 ? t->rlen + (size_t)r * t->nrag : NULL;
  uint64_t at = 4 * (uint64_t)t->nz;
  for (uint32_t k = 0; k < t->nz; k++) {
    uint32_t s = chime__zleaf_size(buf, k);
    if (s > chime__tbl_z_rawsize(t, t->zl[k], len) && s > 0)
      return 0;
    at += s;
  }
  return at == t->zext[r].len;
}

/* The live rows' bytes in the bytes file: extents checked and the free
 * lists rebuilt from the gaps, the rows' pointers set, their bytes
 * counted. */
static int reopen_bytes(chime__table_t *t, const found_t *live, uint64_t n,
                        const char *path) {
  chime__tbl_live_extent_t *ex = malloc((2 * n + 1) * sizeof(*ex));
  size_t m = 0;
  int rc = 0;
  if (ex == NULL)
    return chime__detail(CHIME_ENOMEM, NULL);
  for (uint64_t i = 0; i < n && rc == 0; i++)
    rc = row_extents(t, live[i].row, path, ex, &m);
  if (rc == 0)
    rc = chime__tbl_bytes_rebuild(t->bytes, ex, m);
  free(ex);
  uint8_t *base = chime__tbl_bytes_base(t->bytes);
  for (uint64_t i = 0; i < n && rc == 0; i++) {
    uint32_t r = live[i].row;
    if (t->nrag > 0) {
      t->rbuf[r] = t->rext[r].len > 0 ? base + t->rext[r].off : NULL;
      t->rag_bytes += t->rext[r].len;
    }
    if (t->nz > 0) {
      t->zbuf[r] = base + t->zext[r].off;
      if (!z_ok(t, r)) {
        t->zbuf[r] = NULL;
        rc = bad_row(path, r, "compressed leaves' sizes unlike their extent");
      } else {
        chime__tbl_z_count(t, r);
      }
    }
  }
  return rc;
}

static int by_seq(const void *a, const void *b) {
  uint64_t x = ((const found_t *)a)->seq, y = ((const found_t *)b)->seq;
  return (x > y) - (x < y);
}

/* A row's record is one this table could have written: a key of its shard
 * not seen twice, a priority it takes. */
static int row_ok(chime__table_t *t, uint32_t r) {
  const row_meta_t *m = &t->meta[r];
  uint32_t dummy;
  return chime__key_shard(m->key) == t->cfg.shard &&
         chime__keyindex_lookup(t->keys, m->key, &dummy) != 0 &&
         chime__tbl_check_priorities(t, &m->prio, 1) == 0;
}

/* A sequence table's row: a window of steps the store holds, along its
 * lane, that no other row starts at (then listed with its first step).
 * Its record is written before its commit word, its steps before the
 * window is made, and a block's windows leave before the block is taken
 * again: a kill -9 leaves none other. */
static int window_ok(chime__table_t *t, uint32_t r) {
  if (t->steps == NULL)
    return 1;
  if (chime__steps_check_window(t->steps, t->wslot[r], t->wep[r], t->wfirst[r],
                                t->wlen[r]) != 0)
    return 0;
  chime__steps_relist(t->steps, t->wslot[r], r);
  return 1;
}

int chime__tbl_reopen(chime__table_t *t, const char *path) {
  uint64_t n = 0, maxkey = 0, maxver = 0;
  /* Pins are the old process's samplers': a row one held when it died is
   * free or live now, pinned by no one. */
  for (uint64_t r = 0; r < t->rows; r++) {
    n += t->commit[r] != 0;
    if (t->meta[r].pins != 0)
      t->meta[r].pins = 0;
  }
  found_t *live = malloc((n ? n : 1) * sizeof(*live));
  if (live == NULL)
    return chime__detail(CHIME_ENOMEM, NULL);
  n = 0;
  for (uint64_t r = 0; r < t->rows; r++)
    if (t->commit[r] != 0)
      live[n++] = (found_t){t->commit[r], (uint32_t)r};
  qsort(live, n, sizeof(*live), by_seq);
  /* A sequence table's bytes file holds its steps' compressed leaves:
   * the step store rebuilt it (steps_file.c); its rows hold none. */
  int rc =
      t->bytes != NULL && t->steps == NULL ? reopen_bytes(t, live, n, path) : 0;
  if (rc != 0) {
    free(live);
    return rc;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint32_t r = live[i].row;
    if (!row_ok(t, r) || !window_ok(t, r)) {
      free(live);
      return chime__detailf(CHIME_ECORRUPT,
                            "data_dir: '%s': row %u holds a key, priority "
                            "or window this table never wrote (key %llu, "
                            "priority %g)",
                            path, r, (unsigned long long)t->meta[r].key,
                            t->meta[r].prio);
    }
    if (r >= t->spare_hw && r >= t->cfg.capacity)
      t->spare_hw = r + 1;
    uint64_t pos = chime__tbl_key_pos(t, t->meta[r].key);
    maxkey = pos > maxkey ? pos : maxkey;
    maxver = t->meta[r].version > maxver ? t->meta[r].version : maxver;
    if (t->meta[r].prio > t->max_prio)
      t->max_prio = t->meta[r].prio;
    chime__tbl_live_add(t, r, 0);
  }
  free(live);
  uint64_t end = chime__tbl_file_key_end(t->file);
  if (end < maxkey + 1)
    end = maxkey + 1;
  /* A sequence table's step keys share the bound (chime__tbl_seq_insert
   * reserves past both): they go on past it too. */
  if (end > 1)
    t->next_key = ((uint64_t)t->cfg.shard << CHIME__KEY_COUNT_BITS) + end;
  if (end > 1 && t->steps != NULL)
    t->step_key = t->next_key;
  chime__tbl_version_seen(t, maxver);
  /* The rate limiter's counts are not in the file either: it starts at
   * its balance over the items there (inserted, and sampled at the ratio
   * down to min_size's margin), where neither side waits; from 0 samples
   * would wait for new inserts. */
  double spi = t->cfg.samples_per_insert;
  t->inserts = n;
  if (spi > 0 && n > t->cfg.min_size)
    t->samples = (uint64_t)(spi * (double)(n - t->cfg.min_size));
  /* The writers' request memory is not in the file: one resending across
   * the restart is refused as forgotten, never let in twice (as after a
   * checkpoint's restore). */
  if (n > 0)
    chime__dedupe_restored(t->dedupe);
  return 0;
}
