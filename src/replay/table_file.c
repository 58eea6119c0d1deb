/* A table's storage file (table_file.h): made, checked, mapped; and a table
 * opened again on it (chime__tbl_reopen), its indexes rebuilt from the rows'
 * records and commit words. */
#include "replay/table_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/detail.h"
#include "common/spec.h"
#include "replay/table_internal.h"

#define MAGIC "CHIMETBL"
#define SPEC_TEXT 3968u

/* The header page. Everything but key_end is written once, at creation. */
typedef struct {
  char magic[8];
  uint32_t version, header_bytes;
  uint64_t fingerprint; /* of what shapes the layout (fingerprint) */
  uint64_t capacity, rows, file_bytes;
  uint64_t key_end; /* keys below this count may have been issued */
  uint32_t shard, pad;
  char spec[SPEC_TEXT]; /* for messages: the spec it was made with */
} file_header_t;

_Static_assert(sizeof(file_header_t) <= CHIME__TBL_FILE_HEADER,
               "the header fits its page");

struct chime__tbl_file_s {
  int fd;
  volatile file_header_t *hdr; /* in the mapping */
};

int chime__tbl_file_path(const chime__table_config_t *cfg, char *buf,
                         size_t len) {
  int n = snprintf(buf, len, "%s/%s.table", cfg->data_dir, cfg->name);
  return n < 0 || (size_t)n >= len ? CHIME_EINVAL : 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * UINT64_C(0x100000001b3);
  return h;
}

/* What decides the file's layout and what its rows mean: the spec, the
 * capacity and rows, the shard its keys are of, the compressed leaves, a
 * sequence table's shape, the row record's size and the format. The
 * selectors are not in it: their indexes are rebuilt at every open, so a
 * table may change its sampler, remover or rate limit between runs. */
static uint64_t fingerprint(const chime__table_config_t *cfg, uint64_t rows,
                            uint64_t len, const char *spec) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  uint64_t v[] = {CHIME__TBL_FILE_VERSION,
                  cfg->capacity,
                  rows,
                  len,
                  cfg->shard,
                  cfg->sequence_length,
                  cfg->stride,
                  cfg->capacity_steps,
                  (uint64_t)cfg->episode_pad,
                  sizeof(row_meta_t)};
  h = fnv(h, v, sizeof(v));
  h = fnv(h, cfg->compress, sizeof(cfg->compress));
  /* Rows with bytes in the bytes file: its extents' format (table_bytes.h;
   * 16-byte granules, four classes per power of two) and record. */
  int bytes = chime_spec_ragged(&cfg->spec) > 0;
  for (uint32_t i = 0; i < CHIME_MAX_LEAVES; i++)
    bytes |= cfg->compress[i] != 0;
  if (bytes) {
    uint64_t b[] = {1, sizeof(chime__tbl_extent_t), chime__tbl_bytes_class(17)};
    h = fnv(h, b, sizeof(b));
  }
  return fnv(h, spec, strlen(spec));
}

static int sys_fail(int rc, const char *what, const char *path, int e) {
  return chime__detailf(rc, "data_dir: %s '%s': %s", what, path, strerror(e));
}

/* The data dir: made when missing (one level), else a directory. */
static int check_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT)
      return sys_fail(CHIME_ESYS, "cannot look at", dir, errno);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
      return sys_fail(CHIME_ESYS, "cannot make", dir, errno);
    if (stat(dir, &st) != 0)
      return sys_fail(CHIME_ESYS, "cannot look at", dir, errno);
  }
  if (!S_ISDIR(st.st_mode))
    return chime__detailf(CHIME_EINVAL, "data_dir '%s' is not a directory",
                          dir);
  return 0;
}

/* A new file: written under a temporary name and renamed once whole, so a
 * chimed killed while making it leaves no file that looks like a table. */
static int make_file(const char *path, const file_header_t *h, int *fd_out) {
  char tmp[CHIME__MAX_DATA_DIR + CHIME_MAX_NAME + 32];
  snprintf(tmp, sizeof(tmp), "%s.new", path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return sys_fail(errno == EACCES || errno == EROFS || errno == EPERM
                        ? CHIME_EPERM
                        : CHIME_ESYS,
                    "cannot create", tmp, errno);
  int e = posix_fallocate(fd, 0, (off_t)h->file_bytes);
  if (e != 0) {
    close(fd);
    unlink(tmp);
    return chime__detailf(
        e == ENOSPC || e == EFBIG ? CHIME_ERESOURCE : CHIME_ESYS,
        "data_dir: cannot allocate the table's %llu bytes in '%s': %s (the "
        "whole file is allocated at start)",
        (unsigned long long)h->file_bytes, tmp, strerror(e));
  }
  if (pwrite(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
      rename(tmp, path) != 0) {
    e = errno;
    close(fd);
    unlink(tmp);
    return sys_fail(CHIME_ESYS, "cannot write", path, e);
  }
  *fd_out = fd;
  return 0;
}

/* The file from before: this config's, whole. */
static int check_file(int fd, const char *path, const file_header_t *want) {
  file_header_t h;
  struct stat st;
  if (fstat(fd, &st) != 0)
    return sys_fail(CHIME_ESYS, "cannot look at", path, errno);
  if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
      memcmp(h.magic, MAGIC, 8) != 0)
    return chime__detailf(CHIME_ECORRUPT,
                          "data_dir: '%s' is not a chime table file (no "
                          "header); move it away",
                          path);
  h.spec[SPEC_TEXT - 1] = '\0';
  if (h.version != CHIME__TBL_FILE_VERSION)
    return chime__detailf(CHIME_ECORRUPT,
                          "data_dir: '%s' is format %u, this chimed reads %u",
                          path, h.version, CHIME__TBL_FILE_VERSION);
  if (h.fingerprint != want->fingerprint)
    return chime__detailf(
        CHIME_EINVAL,
        "data_dir: '%s' holds another table (spec '%s', capacity %llu, shard "
        "%u; this config: spec '%s', capacity %llu, shard %u): move it away "
        "or name another data_dir",
        path, h.spec, (unsigned long long)h.capacity, h.shard, want->spec,
        (unsigned long long)want->capacity, want->shard);
  if ((uint64_t)st.st_size != want->file_bytes ||
      h.file_bytes != want->file_bytes || h.rows != want->rows)
    return chime__detailf(CHIME_ECORRUPT,
                          "data_dir: '%s' is %llu bytes, its table's are %llu "
                          "(truncated?)",
                          path, (unsigned long long)st.st_size,
                          (unsigned long long)want->file_bytes);
  return 0;
}

int chime__tbl_file_map(chime__tbl_file_t **out,
                        const chime__table_config_t *cfg, uint64_t rows,
                        size_t len, void **map, int *fresh) {
  char path[CHIME__MAX_DATA_DIR + CHIME_MAX_NAME + 16];
  file_header_t *want = calloc(1, sizeof(*want));
  chime__tbl_file_t *f = calloc(1, sizeof(*f));
  int rc = 0;
  *out = NULL;
  if (want == NULL || f == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  f->fd = -1;
  if (chime__tbl_file_path(cfg, path, sizeof(path)) != 0) {
    rc = chime__detailf(CHIME_EINVAL, "data_dir '%s': path too long",
                        cfg->data_dir);
    goto out;
  }
  memcpy(want->magic, MAGIC, 8);
  want->version = CHIME__TBL_FILE_VERSION;
  want->header_bytes = CHIME__TBL_FILE_HEADER;
  want->capacity = cfg->capacity;
  want->rows = rows;
  want->file_bytes = len;
  want->shard = cfg->shard;
  if (chime_spec_format(&cfg->spec, want->spec, SPEC_TEXT) != 0)
    want->spec[0] = '\0';
  want->fingerprint = fingerprint(cfg, rows, len, want->spec);
  if ((rc = check_dir(cfg->data_dir)) != 0)
    goto out;
  f->fd = open(path, O_RDWR | O_CLOEXEC);
  *fresh = f->fd < 0;
  if (f->fd < 0 && errno != ENOENT) {
    rc = sys_fail(errno == EACCES || errno == EROFS ? CHIME_EPERM : CHIME_ESYS,
                  "cannot open", path, errno);
    goto out;
  }
  if (f->fd < 0 && (rc = make_file(path, want, &f->fd)) != 0)
    goto out;
  if (flock(f->fd, LOCK_EX | LOCK_NB) != 0) {
    rc = chime__detailf(CHIME_EBUSY,
                        "data_dir: '%s' is in use by another process (a "
                        "chimed on the same data_dir?)",
                        path);
    goto out;
  }
  if (!*fresh && (rc = check_file(f->fd, path, want)) != 0)
    goto out;
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
  if (m == MAP_FAILED) {
    rc = sys_fail(CHIME_ENOMEM, "cannot map", path, errno);
    goto out;
  }
  f->hdr = m;
  *map = m;
  *out = f;
  f = NULL;
out:
  if (f != NULL && f->fd >= 0)
    close(f->fd);
  free(f);
  free(want);
  return rc;
}

/* A clean close leaves the file on disk: fsync writes back the mapping's
 * pages (the same page cache pages). */
void chime__tbl_file_close(chime__tbl_file_t *f, void *map, size_t len) {
  if (f == NULL)
    return;
  munmap(map, len);
  (void)fsync(f->fd);
  close(f->fd);
  free(f);
}

uint64_t chime__tbl_file_disk_bytes(const chime__tbl_file_t *f) {
  return chime__tbl_fd_disk_bytes(f->fd);
}

void chime__tbl_file_keys(chime__tbl_file_t *f, uint64_t end) {
  if (end > f->hdr->key_end)
    f->hdr->key_end = end;
}

uint64_t chime__tbl_file_key_end(const chime__tbl_file_t *f) {
  return f->hdr->key_end;
}

int chime__tbl_file_zextent(const chime__table_t *t, uint32_t r, uint64_t *off,
                            uint32_t *len) {
  if (t->zext == NULL || r >= t->rows)
    return -1;
  *off = t->zext[r].off;
  *len = t->zext[r].len;
  return 0;
}

/* madvise over the whole pages that [p, p + n) touches. */
static void advise(const void *p, size_t n, int advice) {
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)p & ~(pg - 1);
  (void)madvise((void *)lo, (uintptr_t)p + n - lo, advice);
}

void chime__tbl_file_random(void *p, size_t n) {
  advise(p, n, MADV_RANDOM);
}

void chime__tbl_file_ask(const void *p, size_t n) {
  advise(p, n, MADV_WILLNEED);
}

/* A live row found in the file: its commit word orders it. */
typedef struct {
  uint64_t seq;
  uint32_t row;
} found_t;

int chime__tbl_store_reserve(chime__table_t *t, uint8_t *const *zbufs,
                             const uint32_t *lengths, uint64_t count) {
  if (t->bytes == NULL)
    return 0;
  uint64_t need = 0;
  for (uint64_t j = 0; j < count; j++) {
    if (t->nz > 0 && zbufs != NULL && zbufs[j] != NULL)
      need += chime__tbl_bytes_class(chime__zleaf_total(zbufs[j], t->nz));
    if (t->nrag > 0 && lengths != NULL)
      need += chime__tbl_bytes_class(
          chime__tbl_rag_bytes(t, lengths + j * t->nrag));
  }
  return chime__tbl_bytes_reserve(t->bytes, need);
}

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
