/* A table's variable-size row bytes in a file (table_bytes.h): extents in
 * size classes, free lists per class, the file grown in allocated steps. */
#include "replay/table_bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/detail.h"

#define GRANULE 16u
#define NCLASS 128u
#define GROW_MIN (UINT64_C(8) << 20)

typedef struct {
  uint64_t *off;
  size_t n, cap;
} freelist_t;

struct chime__tbl_bytes_s {
  int fd;
  uint8_t *base;
  uint64_t limit, size, end; /* mapped, the file's, the extents' end */
  char path[1100];
  freelist_t fl[NCLASS];
};

static int top_bit(uint64_t g) {
  return 63 - __builtin_clzll(g);
}

/* A count of granules rounded up to its class: itself up to 8, else four
 * classes per power of two. */
static uint64_t class_granules(uint64_t g) {
  if (g <= 8)
    return g;
  uint64_t step = (UINT64_C(1) << top_bit(g)) / 4;
  return (g + step - 1) / step * step;
}

/* Its free list (g a class's granules). */
static unsigned class_index(uint64_t g) {
  if (g <= 8)
    return (unsigned)(g - 1);
  int k = top_bit(g);
  uint64_t p = UINT64_C(1) << k;
  return 8u + (unsigned)(k - 3) * 4u + (unsigned)((g - p) / (p / 4));
}

uint64_t chime__tbl_bytes_class(uint64_t len) {
  return class_granules((len + GRANULE - 1) / GRANULE) * GRANULE;
}

int chime__tbl_bytes_open(chime__tbl_bytes_t **out, const char *path,
                          uint64_t limit, int fresh) {
  chime__tbl_bytes_t *b = calloc(1, sizeof(*b));
  struct stat st;
  *out = NULL;
  if (b == NULL)
    return chime__detail(CHIME_ENOMEM, NULL);
  snprintf(b->path, sizeof(b->path), "%s", path);
  b->fd =
      open(path, O_RDWR | O_CREAT | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0644);
  if (b->fd < 0 || fstat(b->fd, &st) != 0) {
    int e = errno;
    if (b->fd >= 0)
      close(b->fd);
    free(b);
    return chime__detailf(e == EACCES || e == EROFS ? CHIME_EPERM : CHIME_ESYS,
                          "data_dir: cannot open '%s': %s", path, strerror(e));
  }
  b->size = (uint64_t)st.st_size;
  b->limit = limit > b->size ? limit : b->size;
  void *m = mmap(NULL, b->limit, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_NORESERVE, b->fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(b->fd);
    free(b);
    return chime__detailf(CHIME_ENOMEM, "data_dir: cannot map '%s': %s", path,
                          strerror(e));
  }
  b->base = m;
  (void)madvise(m, b->limit, MADV_RANDOM);
  *out = b;
  return 0;
}

void chime__tbl_bytes_close(chime__tbl_bytes_t *b) {
  if (b == NULL)
    return;
  munmap(b->base, b->limit);
  (void)fsync(b->fd);
  close(b->fd);
  for (unsigned c = 0; c < NCLASS; c++)
    free(b->fl[c].off);
  free(b);
}

uint8_t *chime__tbl_bytes_base(const chime__tbl_bytes_t *b) {
  return b->base;
}

/* st_blocks counts 512-byte units whatever the file system's block. */
uint64_t chime__tbl_fd_disk_bytes(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
}

uint64_t chime__tbl_bytes_disk(const chime__tbl_bytes_t *b) {
  return chime__tbl_fd_disk_bytes(b->fd);
}

uint64_t chime__tbl_bytes_file_size(const chime__tbl_bytes_t *b) {
  return b->size;
}

uint64_t chime__tbl_bytes_end(const chime__tbl_bytes_t *b) {
  return b->end;
}

/* The file allocated up to want bytes (a multiple of the page). */
static int grow_to(chime__tbl_bytes_t *b, uint64_t want) {
  int e = posix_fallocate(b->fd, (off_t)b->size, (off_t)(want - b->size));
  if (e != 0)
    return e;
  b->size = want;
  return 0;
}

int chime__tbl_bytes_reserve(chime__tbl_bytes_t *b, uint64_t need) {
  if (need <= b->size - b->end)
    return 0;
  uint64_t must = (b->end + need + 4095) & ~UINT64_C(4095);
  if (must > b->limit)
    return chime__detailf(CHIME_ERESOURCE,
                          "data_dir: '%s' would pass its %llu bytes (its free "
                          "extents are of other sizes than the new rows')",
                          b->path, (unsigned long long)b->limit);
  uint64_t step = b->size / 8 > GROW_MIN ? b->size / 8 : GROW_MIN;
  uint64_t want = (b->size + step + 4095) & ~UINT64_C(4095);
  want = want < must ? must : want > b->limit ? b->limit : want;
  int e = grow_to(b, want);
  if (e != 0 && want > must)
    e = grow_to(b, must);
  if (e != 0)
    return chime__detailf(e == ENOSPC || e == EFBIG ? CHIME_ERESOURCE
                                                    : CHIME_ESYS,
                          "data_dir: cannot grow '%s' to %llu bytes: %s",
                          b->path, (unsigned long long)must, strerror(e));
  return 0;
}

static int push(freelist_t *f, uint64_t off) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 64;
    uint64_t *p = realloc(f->off, cap * sizeof(*p));
    if (p == NULL)
      return CHIME_ENOMEM;
    f->off = p;
    f->cap = cap;
  }
  f->off[f->n++] = off;
  return 0;
}

uint64_t chime__tbl_bytes_alloc(chime__tbl_bytes_t *b, uint32_t len) {
  uint64_t g = class_granules((len + GRANULE - 1) / GRANULE);
  freelist_t *f = &b->fl[class_index(g)];
  if (f->n > 0)
    return f->off[--f->n];
  uint64_t off = b->end;
  b->end += g * GRANULE;
  return off;
}

void chime__tbl_bytes_free(chime__tbl_bytes_t *b, chime__tbl_extent_t e) {
  if (e.len == 0)
    return;
  uint64_t g = class_granules((e.len + GRANULE - 1) / GRANULE);
  /* Out of memory for the list: the extent is lost until the next open. */
  (void)push(&b->fl[class_index(g)], e.off);
}

/* [from, to) (granule multiples) as free extents, largest class first. */
static int carve(chime__tbl_bytes_t *b, uint64_t from, uint64_t to) {
  uint64_t g = (to - from) / GRANULE;
  while (g > 0) {
    uint64_t c = g;
    if (g > 8) {
      uint64_t p = UINT64_C(1) << top_bit(g), step = p / 4;
      c = p + (g - p) / step * step;
    }
    if (push(&b->fl[class_index(c)], from) != 0)
      return chime__detail(CHIME_ENOMEM, NULL);
    from += c * GRANULE;
    g -= c;
  }
  return 0;
}

static int by_off(const void *x, const void *y) {
  uint64_t a = ((const chime__tbl_live_extent_t *)x)->e.off;
  uint64_t c = ((const chime__tbl_live_extent_t *)y)->e.off;
  return (a > c) - (a < c);
}

int chime__tbl_bytes_rebuild(chime__tbl_bytes_t *b,
                             chime__tbl_live_extent_t *live, size_t n) {
  qsort(live, n, sizeof(*live), by_off);
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    chime__tbl_extent_t e = live[i].e;
    uint64_t c = chime__tbl_bytes_class(e.len);
    if (e.off % GRANULE != 0 || e.off < at || e.off > b->size ||
        c > b->size - e.off)
      return chime__detailf(CHIME_ECORRUPT,
                            "data_dir: '%s': row %u's bytes (%u at %llu) are "
                            "%s (the file is %llu bytes)",
                            b->path, live[i].row, e.len,
                            (unsigned long long)e.off,
                            e.off < at ? "over another row's" : "not in it",
                            (unsigned long long)b->size);
    int rc = carve(b, at, e.off);
    if (rc != 0)
      return rc;
    at = e.off + c;
  }
  b->end = at;
  return 0;
}
