/* The version index (verindex.h): per row a link pair (a circular list per
 * version, oldest first), and the distinct versions live, sorted, in
 * [lo, hi) of one array with each version's first row and count. The
 * array holds as many entries as rows (no two live versions share a row),
 * mapped lazily; the live entries are moved back to its start once the
 * dead prefix outgrows them, so only about twice the live versions' pages
 * are ever touched. */
#include "replay/verindex.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define NONE UINT32_MAX

typedef struct {
  uint64_t ver;
  uint32_t head; /* its first (oldest) row */
  uint32_t n;    /* its rows */
  double mass;   /* its rows' weights */
} bucket_t;

/* Changes to Z between two sums afresh: the running sum's rounding stays
 * far below the probabilities' precision, at a cost of one pass over the
 * versions per so many changes. */
#define Z_RESUM_EVERY 65536u

struct chime__verindex_s {
  uint32_t *prev, *nx; /* by row: the row's neighbours in its version's list */
  bucket_t *b;
  uint64_t lo, hi, cap;
  int weigh;       /* keep z */
  uint64_t newest; /* the newest version known */
  double z;        /* sum of b[i].mass x w(newest - b[i].ver) */
  uint32_t z_ops;  /* changes since z was summed afresh */
  void *map;
  size_t map_len;
};

static size_t align64(size_t n) {
  return (n + 63u) & ~(size_t)63u;
}

uint64_t chime__verindex_bytes(uint64_t rows) {
  return align64((size_t)rows * 8u) + align64((size_t)rows * sizeof(bucket_t));
}

int chime__verindex_create(chime__verindex_t **out, uint64_t rows) {
  *out = NULL;
  if (rows == 0 || rows > UINT32_MAX)
    return CHIME_EINVAL;
  chime__verindex_t *v = calloc(1, sizeof(*v));
  if (v == NULL)
    return CHIME_ENOMEM;
  size_t len = (size_t)chime__verindex_bytes(rows);
  v->map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (v->map == MAP_FAILED) {
    free(v);
    return CHIME_ENOMEM;
  }
  v->map_len = len;
  v->prev = v->map;
  v->nx = v->prev + rows;
  v->b = (bucket_t *)((uint8_t *)v->map + align64((size_t)rows * 8u));
  v->cap = rows;
  *out = v;
  return 0;
}

void chime__verindex_destroy(chime__verindex_t *v) {
  if (v == NULL)
    return;
  munmap(v->map, v->map_len);
  free(v);
}

/* The entry of version ver, or (none) where it would go: the first entry
 * of a higher version; *found says which. */
static uint64_t find(const chime__verindex_t *v, uint64_t ver, int *found) {
  uint64_t a = v->lo, z = v->hi;
  if (z > a && v->b[z - 1].ver == ver) { /* the common case: the newest */
    *found = 1;
    return z - 1;
  }
  if (z == a || v->b[z - 1].ver < ver) {
    *found = 0;
    return z;
  }
  while (a < z) {
    uint64_t m = a + (z - a) / 2;
    if (v->b[m].ver < ver)
      a = m + 1;
    else
      z = m;
  }
  *found = a < v->hi && v->b[a].ver == ver;
  return a;
}

double chime__verindex_z_exact(chime__verindex_t *v) {
  double z = 0.0;
  for (uint64_t i = v->lo; i < v->hi; i++)
    if (v->b[i].mass > 0)
      z += v->b[i].mass * chime__verindex_stale_weight(v->newest - v->b[i].ver);
  v->z = z;
  v->z_ops = 0;
  return z;
}

/* Version ver's weight changed by dw: so did z, by dw x its w(s). */
static void z_moved(chime__verindex_t *v, uint64_t ver, double dw) {
  if (!v->weigh)
    return;
  if (v->lo == v->hi) { /* nothing live: exactly 0, no rounding left over */
    v->z = 0.0;
    v->z_ops = 0;
    return;
  }
  v->z += dw * chime__verindex_stale_weight(v->newest - ver);
  if (++v->z_ops >= Z_RESUM_EVERY || !(v->z > 0))
    chime__verindex_z_exact(v);
}

void chime__verindex_weigh(chime__verindex_t *v) {
  v->weigh = 1;
  chime__verindex_z_exact(v);
}

void chime__verindex_set_newest(chime__verindex_t *v, uint64_t newest) {
  if (newest <= v->newest)
    return;
  v->newest = newest;
  if (v->weigh)
    chime__verindex_z_exact(v);
}

double chime__verindex_z(const chime__verindex_t *v) {
  return v->z > 0 ? v->z : 0.0;
}

void chime__verindex_add(chime__verindex_t *v, uint32_t r, uint64_t ver,
                         double w) {
  int found;
  uint64_t i = find(v, ver, &found);
  if (!found) {
    /* Live versions never outnumber rows, so one side has room. */
    if (v->hi < v->cap) {
      memmove(&v->b[i + 1], &v->b[i], (size_t)(v->hi - i) * sizeof(bucket_t));
      v->hi++;
    } else {
      memmove(&v->b[v->lo - 1], &v->b[v->lo],
              (size_t)(i - v->lo) * sizeof(bucket_t));
      v->lo--;
      i--;
    }
    v->b[i] = (bucket_t){.ver = ver, .head = r, .n = 1, .mass = w};
    v->prev[r] = v->nx[r] = r;
    z_moved(v, ver, w);
    return;
  }
  bucket_t *b = &v->b[i];
  uint32_t h = b->head, tail = v->prev[h];
  v->prev[r] = tail;
  v->nx[r] = h;
  v->nx[tail] = r;
  v->prev[h] = r;
  b->n++;
  b->mass += w;
  z_moved(v, ver, w);
}

void chime__verindex_remove(chime__verindex_t *v, uint32_t r, uint64_t ver,
                            double w) {
  int found;
  uint64_t i = find(v, ver, &found);
  if (!found)
    return; /* not in the index: the caller's mistake, nothing to undo */
  bucket_t *b = &v->b[i];
  b->mass -= w;
  if (--b->n > 0) {
    v->nx[v->prev[r]] = v->nx[r];
    v->prev[v->nx[r]] = v->prev[r];
    if (b->head == r)
      b->head = v->nx[r];
    z_moved(v, ver, -w);
    return;
  }
  /* Its last row: the version goes. Stale versions go from the low end,
   * a max_times_sampled table's newest from the high end. */
  if (i == v->lo) {
    v->lo++;
  } else if (i == v->hi - 1) {
    v->hi--;
  } else {
    memmove(&v->b[i], &v->b[i + 1], (size_t)(v->hi - i - 1) * sizeof(bucket_t));
    v->hi--;
  }
  if (v->lo == v->hi) {
    v->lo = v->hi = 0;
  } else if (v->lo >= 64 && v->lo > v->hi - v->lo) {
    memmove(&v->b[0], &v->b[v->lo], (size_t)(v->hi - v->lo) * sizeof(bucket_t));
    v->hi -= v->lo;
    v->lo = 0;
  }
  z_moved(v, ver, -w);
}

int chime__verindex_lowest(const chime__verindex_t *v, uint32_t *r,
                           uint64_t *ver) {
  if (v->lo == v->hi)
    return CHIME_ENOTFOUND;
  *r = v->b[v->lo].head;
  *ver = v->b[v->lo].ver;
  return 0;
}

uint64_t chime__verindex_versions(const chime__verindex_t *v) {
  return v->hi - v->lo;
}

void chime__verindex_reweigh(chime__verindex_t *v, uint64_t ver, double dw) {
  int found;
  uint64_t i = find(v, ver, &found);
  if (found) {
    v->b[i].mass += dw;
    z_moved(v, ver, dw);
  }
}

void chime__verindex_at(const chime__verindex_t *v, uint64_t i, uint64_t *ver,
                        double *mass, uint32_t *first) {
  const bucket_t *b = &v->b[v->lo + i];
  *ver = b->ver;
  *mass = b->mass > 0 ? b->mass : 0.0; /* a running sum may dip below */
  *first = b->head;
}

uint32_t chime__verindex_next(const chime__verindex_t *v, uint32_t r) {
  return v->nx[r];
}
