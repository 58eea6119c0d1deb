/* A table made from its config (storage laid out in one mapping, the
 * indexes its selectors need, the limiter, a sequence table's step store)
 * and unmade; chime__table_bytes sums the same layout beforehand. */
#include "replay/table_internal.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"
#include "common/detail.h"

/* The indexes (CHIME__SEL_*) the table's sampler and remover read. */
static unsigned needs(const chime__table_config_t *cfg) {
  const chime__selector_t *s = chime__selector(cfg->sampler);
  const chime__selector_t *r = chime__selector(cfg->remover);
  return (s != NULL ? s->needs : 0) | (r != NULL ? r->needs : 0);
}

/* Per-row bookkeeping in the mapping: the row_meta_t records, then the
 * 32-bit arrays dense, dpos, prev, next, freeq, fspare. */
#define NMETA 7
static const uint64_t meta_bytes[NMETA] = {
    sizeof(row_meta_t), 4, 4, 4, 4, 4, 4};

/* Spare rows: as many as the capacity, within 32-bit row numbers. */
static uint64_t rows_for(uint64_t cap) {
  uint64_t max = CHIME__MAX_TABLE_ITEMS; /* NONE stays out of range */
  return cap + (cap < max - cap ? cap : max - cap);
}

/* What create allocated (any part may be missing), and t itself. */
static void free_parts(chime__table_t *t) {
  int own = t->bytes == NULL; /* else they point into the bytes file */
  if (t->rbuf != NULL && own)
    for (uint64_t r = 0; r < t->rows; r++)
      free(t->rbuf[r]);
  free(t->rbuf);
  if (t->file == NULL)
    free(t->rlen);
  if (t->zbuf != NULL && own)
    for (uint64_t r = 0; r < t->rows; r++)
      free(t->zbuf[r]);
  free(t->zbuf);
  chime__tbl_bytes_close(t->bytes);
  chime__tbl_seq_destroy(t); /* before the mapping its store may be in */
  if (t->file != NULL)
    chime__tbl_file_close(t->file, t->map, t->map_len);
  else if (t->map != NULL)
    munmap(t->map, t->map_len);
  chime__dedupe_destroy(t->dedupe);
  chime__keyindex_destroy(t->keys);
  chime__sumtree_destroy(t->sum);
  chime__heap_destroy(t->hmin);
  chime__heap_destroy(t->hmax);
  chime__verindex_destroy(t->vidx);
  free(t);
}

/* A priority up to which priority^exponent is surely at most
 * CHIME__SUMTREE_MAX_VALUE, for the fast check of a request's priorities
 * (priority_why decides the rest exactly): a millionth under the exact
 * bound, far more than pow's rounding; DBL_MAX when every finite priority
 * is (exponent 0, or an exponent under log(MAX_VALUE) / log(DBL_MAX)). */
/* Compressed leaves (of a plain table's items, ragged ones too, or a
 * sequence table's steps), at a level zstd has, each under 4 GiB at its
 * bound (a u32 stored size); server/config.c names what is wrong. */
static int compress_ok(const chime__table_config_t *cfg) {
  for (uint32_t i = 0; i < cfg->spec.nleaves && i < CHIME_MAX_LEAVES; i++) {
    const chime_leaf_t *l = &cfg->spec.leaves[i];
    int lv = cfg->compress[i];
    if (lv != 0 &&
        (lv > CHIME__ZLEAF_MAX_LEVEL || chime_leaf_bytes(l) >= UINT32_MAX))
      return 0;
  }
  for (uint32_t i = cfg->spec.nleaves; i < CHIME_MAX_LEAVES; i++)
    if (cfg->compress[i] != 0)
      return 0;
  return 1;
}

static int compress_none(const chime__table_config_t *cfg) {
  for (uint32_t i = 0; i < CHIME_MAX_LEAVES; i++)
    if (cfg->compress[i] != 0)
      return 0;
  return 1;
}

/* The detail of a step store in a file that does not open. */
static void seq_corrupt(const chime__table_t *t) {
  char path[CHIME__MAX_DATA_DIR + CHIME_MAX_NAME + 16];
  if (chime__tbl_file_path(&t->cfg, path, sizeof(path)) != 0)
    path[0] = '\0';
  chime__detailf(CHIME_ECORRUPT,
                 "data_dir: '%s': its step store's header, blocks or "
                 "compressed steps' extents are out of range; move it away",
                 path);
}

/* Pacing needs a staleness bound, and a version leaf is a ragged
 * one-dimensional integer leaf kept raw, in plain tables only;
 * server/config_table.c names what is wrong. */
static int versions_ok(const chime__table_config_t *cfg) {
  int seq = cfg->sequence_length > 0;
  if (cfg->pace_batch != 0 && (cfg->max_staleness == 0 || seq))
    return 0;
  if (cfg->version_leaf == 0)
    return 1;
  uint32_t i = cfg->version_leaf - 1;
  if (i >= cfg->spec.nleaves || seq || cfg->compress[i] != 0)
    return 0;
  const chime_leaf_t *l = &cfg->spec.leaves[i];
  return l->ragged && l->ndim == 1 && l->dtype >= CHIME_DTYPE_U8 &&
         l->dtype <= CHIME_DTYPE_I64;
}

/* The most bytes one row keeps in the bytes file: its compressed leaves
 * (each with its size; stored raw when it does not compress) and its
 * ragged rows at their bounds. */
static uint64_t row_bytes_max(const chime__table_t *t) {
  uint64_t b = 0;
  if (t->cfg.sequence_length > 0) { /* a step's compressed leaves */
    for (uint32_t i = 0; i < t->cfg.spec.nleaves; i++)
      if (t->cfg.compress[i] != 0)
        b += 4 + chime_leaf_bytes(&t->cfg.spec.leaves[i]);
    return b;
  }
  for (uint32_t i = 0; i < t->nleaves; i++) {
    const chime_leaf_t *l = &t->cfg.spec.leaves[i];
    if (t->cfg.compress[i] != 0)
      b += 4 + chime_leaf_bytes(l);
    else if (l->ragged)
      b += chime_leaf_bytes(l);
  }
  return b;
}

/* The bytes file beside the table's file (table_bytes.h): room mapped for
 * twice every row at its most, the rest for extents of other classes
 * than the rows of the moment hold. */
static int open_bytes(chime__table_t *t, uint64_t rows, int fresh) {
  char path[CHIME__MAX_DATA_DIR + CHIME_MAX_NAME + 16];
  int n =
      snprintf(path, sizeof(path), "%s/%s.bytes", t->cfg.data_dir, t->cfg.name);
  if (n < 0 || (size_t)n >= sizeof(path))
    return chime__detailf(CHIME_EINVAL, "data_dir '%s': path too long",
                          t->cfg.data_dir);
  uint64_t most = row_bytes_max(t);
  if (most >= UINT32_MAX) /* an extent's length is a u32 */
    return chime__detailf(CHIME_ENOTSUP,
                          "data_dir: a row's compressed or ragged bytes may "
                          "reach %llu, over the 4 GiB a row keeps in files",
                          (unsigned long long)most);
  uint64_t limit = 2 * rows * chime__tbl_bytes_class(most);
  return chime__tbl_bytes_open(&t->bytes, path, limit + (UINT64_C(64) << 20),
                               fresh);
}

/* The fixed-shape leaves' arrays, then the bookkeeping (NMETA arrays) in
 * one mapping: anonymous (pages committed only once items land in them),
 * or the table's file under its data dir (table_file.h) behind its header
 * page, with the commit words after the rest. Sets the pointers into it,
 * the leaves' sizes and offsets, and the compressed and ragged leaves'
 * per-row pieces. *fresh: 0 when the file held the table before. */
static int map_storage(chime__table_t *t, size_t rows, int *fresh) {
  const chime__table_config_t *cfg = &t->cfg;
  int file = cfg->data_dir[0] != '\0';
  size_t len = file ? CHIME__TBL_FILE_HEADER : 0;
  uint64_t off = 0;
  t->fixed_bytes = t->sample_bytes;
  for (uint32_t i = 0; i < t->nleaves; i++) {
    const chime_leaf_t *l = &cfg->spec.leaves[i];
    if (l->ragged) { /* in rbuf (compressed: zbuf), not in the rows */
      t->rrow[i] = chime_leaf_row_bytes(l);
      t->rk[i] = t->nrag;
      t->rag[t->nrag++] = i;
      t->fixed_bytes -= chime_leaf_bytes(l);
      if (cfg->compress[i] != 0) {
        t->zraw[i] = chime_leaf_bytes(l); /* the bound; z_sample: fixed */
        t->zl[t->nz++] = i;
      }
      continue;
    }
    if (cfg->compress[i] != 0) { /* in zbuf, not in the rows */
      t->zraw[i] = chime_leaf_bytes(l);
      t->z_sample += t->zraw[i];
      t->zl[t->nz++] = i;
      continue;
    }
    t->lbytes[i] = chime_leaf_bytes(l);
    t->loff[i] = off;
    off += t->lbytes[i];
    len += chime__tbl_align64(rows * t->lbytes[i]);
  }
  size_t meta_off = len;
  for (int i = 0; i < NMETA; i++)
    len += chime__tbl_align64(rows * meta_bytes[i]);
  /* A sequence table's window records, and in a file its step store. */
  int seq = cfg->sequence_length > 0;
  size_t win_off = len, steps_off = 0;
  if (seq)
    len += 3 * chime__tbl_align64(rows * 4) + chime__tbl_align64(rows * 8);
  steps_off = len;
  if (seq && file) {
    chime__steps_config_t sc;
    chime__tbl_seq_config(cfg, &sc);
    sc.zfile = 1;
    uint64_t sb = chime__steps_map_bytes(&cfg->spec, &sc);
    if (sb == UINT64_MAX || sb > SIZE_MAX / 2)
      return chime__detail(CHIME_EOVERFLOW, NULL);
    len += chime__tbl_align64((size_t)sb);
  }
  /* In a file, also the ragged lengths and the rows' extents in the
   * bytes file (table_bytes.h). */
  size_t rlen_off = len, zext_off = 0, rext_off = 0;
  if (file && t->nrag > 0)
    len += chime__tbl_align64(rows * t->nrag * sizeof(uint32_t));
  zext_off = len;
  if (file && t->nz > 0)
    len += chime__tbl_align64(rows * sizeof(chime__tbl_extent_t));
  rext_off = len;
  if (file && t->nrag > 0)
    len += chime__tbl_align64(rows * sizeof(chime__tbl_extent_t));
  size_t commit_off = len;
  if (file)
    len += chime__tbl_align64(rows * sizeof(uint64_t));
  if (file) {
    int rc = chime__tbl_file_map(&t->file, cfg, rows, len, &t->map, fresh);
    if (rc != 0)
      return rc;
  } else {
    t->map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t->map == MAP_FAILED) {
      t->map = NULL;
      return chime__detail(CHIME_ENOMEM, NULL);
    }
  }
  t->map_len = len;
  t->rows = rows;
  uint8_t *p = (uint8_t *)t->map + (file ? CHIME__TBL_FILE_HEADER : 0);
  for (uint32_t i = 0; i < t->nleaves; i++) {
    t->leaf[i] = p;
    if (file && t->lbytes[i] != 0)
      chime__tbl_file_random(p, rows * t->lbytes[i]);
    p += chime__tbl_align64(rows * t->lbytes[i]);
  }
  p = (uint8_t *)t->map + meta_off;
  t->meta = (row_meta_t *)p;
  p += chime__tbl_align64(rows * sizeof(row_meta_t));
  uint32_t **u32[] = {&t->dense, &t->dpos,  &t->prev,
                      &t->nx,    &t->freeq, &t->fspare};
  for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++) {
    *u32[i] = (uint32_t *)p;
    p += chime__tbl_align64(rows * sizeof(uint32_t));
  }
  if (seq) {
    p = (uint8_t *)t->map + win_off;
    t->wslot = (uint32_t *)p;
    t->wfirst = (uint32_t *)(p + chime__tbl_align64(rows * 4));
    t->wlen = (uint32_t *)(p + 2 * chime__tbl_align64(rows * 4));
    t->wep = (uint64_t *)(p + 3 * chime__tbl_align64(rows * 4));
    t->smem = file ? (uint8_t *)t->map + steps_off : NULL;
  }
  if (file) {
    t->commit = (uint64_t *)((uint8_t *)t->map + commit_off);
    t->rlen = t->nrag > 0 ? (uint32_t *)((uint8_t *)t->map + rlen_off) : NULL;
    if (t->nz > 0)
      t->zext = (chime__tbl_extent_t *)((uint8_t *)t->map + zext_off);
    if (t->nrag > 0)
      t->rext = (chime__tbl_extent_t *)((uint8_t *)t->map + rext_off);
  }
  t->seq_lo = t->seq_hi = UINT64_C(1) << 63;
  if (t->nrag > 0 && ((t->rbuf = calloc(rows, sizeof(*t->rbuf))) == NULL ||
                      (!file && (t->rlen = calloc(rows * t->nrag, 4)) == NULL)))
    return chime__detail(CHIME_ENOMEM, NULL);
  if (t->nz > 0 && (t->zbuf = calloc(rows, sizeof(*t->zbuf))) == NULL)
    return chime__detail(CHIME_ENOMEM, NULL);
  if (file && (t->nz > 0 || t->nrag > 0 || (seq && !compress_none(cfg))))
    return open_bytes(t, rows, *fresh);
  return 0;
}

/* Every row free but those a file's commit words hold (chime__tbl_reopen
 * makes them live): rows under the capacity in order, then the spares,
 * popped last first, so the lowest spare rows are the ones touched. */
static void free_init(chime__table_t *t, size_t cap, size_t rows) {
  t->nfree = t->nspare = 0;
  for (size_t r = 0; r < rows; r++)
    t->dpos[r] = NONE;
  for (size_t r = 0; r < cap; r++)
    if (t->commit == NULL || t->commit[r] == 0)
      t->freeq[t->nfree++] = (uint32_t)r;
  for (size_t r = rows; r-- > cap;)
    if (t->commit == NULL || t->commit[r] == 0)
      t->fspare[t->nspare++] = (uint32_t)r;
}

/* A table opened on its file from before: the indexes from its rows. */
static int reopen(chime__table_t *t) {
  char path[CHIME__MAX_DATA_DIR + CHIME_MAX_NAME + 16];
  if (chime__tbl_file_path(&t->cfg, path, sizeof(path)) != 0)
    path[0] = '\0';
  return chime__tbl_reopen(t, path);
}

static double sure_priority(const chime__table_config_t *cfg) {
  double e = cfg->priority_exponent;
  if (!(e > 0))
    return DBL_MAX;
  double b = pow(CHIME__SUMTREE_MAX_VALUE, 1.0 / e);
  return isfinite(b) ? b * (1 - 1e-6) : DBL_MAX;
}

int chime__table_create(chime__table_t **out,
                        const chime__table_config_t *cfg) {
  int rc = 0, told = 0; /* told: the thread's detail says why */
  chime__table_t *t = calloc(1, sizeof(*t));
  *out = NULL;
  if (t == NULL)
    return chime__detail(CHIME_ENOMEM, NULL);
  t->cfg = *cfg;
  int seq = cfg->sequence_length > 0;
  if (seq)
    t->cfg.capacity = cfg->capacity_steps; /* a step starts one window */
  if (t->cfg.remover == 0)
    t->cfg.remover = CHIME__SELECTOR_FIFO;
  if (t->cfg.min_size == 0) /* config refuses it; in-process callers */
    t->cfg.min_size = 1;
  if (t->cfg.sampler == CHIME__SELECTOR_FIFO && t->cfg.max_times_sampled == 0)
    t->cfg.max_times_sampled = 1;
  t->mts = t->cfg.max_times_sampled;
  t->max_items = chime__table_max_items(&t->cfg);
  t->prio_sure = sure_priority(&t->cfg);
  t->sample_bytes = chime_spec_sample_bytes(&cfg->spec);
  t->nleaves = seq ? 0 : cfg->spec.nleaves;
  t->item_spec = cfg->spec;
  if (seq && (rc = chime__tbl_seq_spec(&t->cfg, &t->item_spec)) != 0)
    goto out;
  if (seq && chime_spec_ragged(&cfg->spec) > 0) {
    rc = CHIME_EINVAL; /* sequences keep fixed-shape steps (config.c says) */
    goto out;
  }
  if (t->sample_bytes == 0 || t->cfg.capacity == 0 ||
      t->cfg.capacity > CHIME__MAX_TABLE_ITEMS ||
      t->cfg.capacity > CHIME__MAX_TABLE_BYTES / t->sample_bytes ||
      (t->sel = chime__selector(t->cfg.sampler)) == NULL ||
      (t->rem = chime__selector(t->cfg.remover)) == NULL ||
      (t->cfg.sampler == CHIME__SELECTOR_FIFO &&
       t->cfg.remover != CHIME__SELECTOR_FIFO) ||
      !(t->cfg.priority_exponent >= 0) || isinf(t->cfg.priority_exponent) ||
      t->cfg.shard > CHIME__KEY_MAX_SHARD ||
      chime__fifo_ratio_stalls(&t->cfg) || !compress_ok(&t->cfg) ||
      !versions_ok(&t->cfg) ||
      (t->cfg.staleness_weight != CHIME__STALE_WEIGHT_NONE &&
       (seq || t->cfg.sampler != CHIME__SELECTOR_PRIORITIZED ||
        t->cfg.staleness_weight != CHIME__STALE_WEIGHT_INVERSE))) {
    rc = CHIME_EINVAL;
    goto out;
  }
  /* The same sum tree, draws weighted by staleness (selector_stale.c). */
  t->stale_on = t->cfg.staleness_weight != CHIME__STALE_WEIGHT_NONE;
  if (t->stale_on)
    t->sel = &chime__selector_prioritized_stale;
  size_t cap = (size_t)t->cfg.capacity;
  size_t rows = (size_t)rows_for(t->cfg.capacity);
  int fresh = 1;
  if ((rc = map_storage(t, rows, &fresh)) != 0) {
    told = 1;
    goto out;
  }
  rc =
      chime__dedupe_create(&t->dedupe, WRITERS(&t->cfg), t->cfg.writer_idle_ms);
  if (rc == 0)
    rc = chime__dedupe_set_owners(t->dedupe, t->cfg.writer_owners,
                                  t->cfg.writer_token_reserve);
  if (rc != 0)
    goto out;
  free_init(t, cap, rows);
  t->lim = &chime__limiter_ratio;
  unsigned need = needs(&t->cfg);
  t->dense_on = (need & CHIME__SEL_DENSE) != 0;
  t->oldest = t->newest = NONE;
  /* Indexed by row: items given back may take spare rows. */
  if ((rc = chime__keyindex_create(&t->keys, rows)) != 0)
    goto out;
  if ((need & CHIME__SEL_SUM) &&
      (rc = chime__sumtree_create(&t->sum, rows)) != 0)
    goto out;
  if ((need & CHIME__SEL_MIN_HEAP) &&
      (rc = chime__heap_create(&t->hmin, (uint32_t)rows, CHIME__HEAP_MIN)) != 0)
    goto out;
  if ((need & CHIME__SEL_MAX_HEAP) &&
      (rc = chime__heap_create(&t->hmax, (uint32_t)rows, CHIME__HEAP_MAX)) != 0)
    goto out;
  if (seq && (rc = chime__tbl_seq_create(t, t->smem, !fresh)) != 0) {
    if (rc == CHIME_ECORRUPT) {
      told = 1;
      seq_corrupt(t);
    }
    goto out;
  }
  if ((t->cfg.max_staleness != 0 || t->stale_on) &&
      (rc = chime__verindex_create(&t->vidx, rows)) != 0)
    goto out;
  if (t->stale_on)
    chime__verindex_weigh(t->vidx, t->sum);
  t->next_key = chime__key_make(t->cfg.shard, 1);
  if (!fresh && (rc = reopen(t)) != 0) {
    told = 1;
    goto out;
  }
  t->rng = (cfg->seed != 0 ? cfg->seed : chime__clock_ns(CLOCK_MONOTONIC)) | 1u;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->space, NULL);
  pthread_cond_init(&t->items, NULL);
  pthread_cond_init(&t->unpinned, NULL);
  pthread_cond_init(&t->handoff, NULL);
  *out = t;
  t = NULL;
out:
  if (t != NULL)
    free_parts(t);
  if (rc != 0 && !told)
    chime__detail(rc, NULL);
  return rc;
}

void chime__table_destroy(chime__table_t *t) {
  if (t == NULL)
    return;
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->space);
  pthread_cond_destroy(&t->items);
  pthread_cond_destroy(&t->unpinned);
  pthread_cond_destroy(&t->handoff);
  free_parts(t);
}

/* The same sums as chime__table_create's layout; keep the two in step.
 * The sum tree and heaps are allocated beside it and counted here too; a
 * table in files counts only them (its rows are the page cache's). */
uint64_t chime__table_bytes(const chime__table_config_t *cfg) {
  uint64_t cap = cfg->capacity, total = 0, b;
  uint32_t n = cfg->spec.nleaves;
  if (cfg->sequence_length > 0) {
    /* Rows hold windows (no leaf bytes; first step, index, length and
     * episode: 20 bytes, spares included); the steps are stored once. */
    chime__steps_config_t sc;
    chime__tbl_seq_config(cfg, &sc);
    uint64_t sb = chime__steps_bytes(&cfg->spec, &sc);
    int file = cfg->data_dir[0] != '\0';
    sc.zfile = file;
    sb = chime__steps_bytes(&cfg->spec, &sc);
    cap = cfg->capacity_steps;
    n = 0;
    if (file && sb != UINT64_MAX) /* its mapped part: the page cache's */
      sb -= chime__steps_map_bytes(&cfg->spec, &sc);
    if (sb == UINT64_MAX ||
        __builtin_mul_overflow(cap, (uint64_t)(file ? 0 : 40), &b) ||
        __builtin_add_overflow(sb, b, &total))
      return UINT64_MAX;
  }
  for (uint32_t i = 0; i < n + NMETA + 4; i++) {
    uint64_t per;
    if (i < n && cfg->data_dir[0] != '\0') /* in the files but a pointer */
      per = cfg->spec.leaves[i].ragged || cfg->compress[i] != 0 ? 8 : 0;
    else if (i < n + NMETA && cfg->data_dir[0] != '\0')
      per = 0;      /* in the file: the page cache's, not chimed's own */
    else if (i < n) /* a ragged leaf at its bound, its row's pointer, length */
      per = chime_leaf_bytes(&cfg->spec.leaves[i]) +
            (cfg->spec.leaves[i].ragged ? 12 : 0);
    else if (i < n + NMETA)
      per = meta_bytes[i - n];
    else if (i == n + NMETA)
      per = needs(cfg) & CHIME__SEL_SUM ? 16 : 0;
    else if (i == n + NMETA + 3)
      per = 18; /* the key index: 12 bytes a bucket, 10/7 buckets an item */
    else
      per = needs(cfg) & (i == n + NMETA + 1 ? CHIME__SEL_MIN_HEAP
                                             : CHIME__SEL_MAX_HEAP)
                ? 28
                : 0;
    if (__builtin_mul_overflow(cap, per, &b) || b > UINT64_MAX - 63 ||
        __builtin_add_overflow(total, (b + 63) & ~UINT64_C(63), &total))
      return UINT64_MAX;
  }
  /* The key index's direct-mapped array (keyindex.h), per row. */
  if (__builtin_add_overflow(total, chime__keyindex_direct_bytes(rows_for(cap)),
                             &total))
    return UINT64_MAX;
  /* The version index: per row, spares included (rows_for), of which the
   * pages of about twice the live versions' entries are touched. */
  if ((cfg->max_staleness != 0 ||
       cfg->staleness_weight != CHIME__STALE_WEIGHT_NONE) &&
      __builtin_add_overflow(total, chime__verindex_bytes(rows_for(cap)),
                             &total))
    return UINT64_MAX;
  return total;
}
