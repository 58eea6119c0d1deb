/* A table's storage file (table_file.h): made, checked, mapped. A table
 * opened again on it, its indexes rebuilt from the rows' records and commit
 * words, is table_reopen.c's. */
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
