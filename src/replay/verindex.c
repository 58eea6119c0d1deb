/* The version index (verindex.h): per row a link pair (a circular list per
 * version, oldest first), and the distinct versions live, sorted, in
 * [lo, hi) of one array with each version's first row and count. The
 * array holds as many entries as rows (no two live versions share a row),
 * mapped lazily; the live entries are moved back to its start once the
 * dead prefix outgrows them, so only about twice the live versions' pages
 * are ever touched.
 *
 * Each version's weight and Z are sums kept as weights come and go, and a
 * plain running sum drifts: a version whose rows all went to 0 kept a
 * rounding residue (0.1 + 0.2 - 0.1 - 0.2 is 2.8e-17), and one that lost
 * a row of 1e298 lost its other rows' weight with it (1e298 + 1 - 1e298
 * is 0). So a sum is an acc_t: hi, the running sum, plus lo, the exact
 * rounding error of each addition to hi (TwoSum), and err, a bound on how
 * far hi + lo is from the true sum (lo's own roundings, which are tiny
 * next to hi's). While err is within ACC_TOL of hi + lo the sum is as
 * good as one made afresh; past it, the sum is made afresh: a version's
 * from its rows (their sum tree weights), Z from the versions' weights.
 * That happens only when a change takes out nearly all of a sum (what
 * stays is a sliver of what left, so lo holds much of it) or, for Z,
 * after a great many changes: the common case costs a few more
 * floating-point operations than a plain running sum. */
#include "replay/verindex.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "replay/sumtree.h"

#define NONE UINT32_MAX

/* A sum of doubles, hi + lo within err of the truth (above). */
typedef struct {
  double hi, lo, err;
} acc_t;

/* How far (relative) a version's sum may be from its rows' before it is
 * made afresh from them; Z's is twice that, since Z made afresh carries
 * the versions' own error. Either is far below the probabilities'
 * precision that matters (the sum tree's own find is good to a few ulps
 * of its total). */
#define ACC_TOL 0x1p-46
#define Z_TOL (2 * ACC_TOL)

/* Z's scale (v->ze): Z made afresh below Z_SMALL is kept x 2^-e instead,
 * e the exponent of its largest term, so that no term is near subnormal;
 * an unscaled Z that falls below Z_RESCALE_LOW (items left) is made
 * afresh, and may be scaled then. The gap keeps Z from being made afresh
 * at every change while it sits near the bound. */
#define Z_SMALL_EXP (-900)
#define Z_SMALL 0x1p-900
#define Z_RESCALE_LOW 0x1p-960

/* Adds x: TwoSum gives hi's rounding error e exactly (hi_old + x == hi +
 * e), and lo takes it, rounding by at most an ulp of lo (DBL_EPSILON x
 * |lo| bounds that and err's own rounding). */
static inline void acc_add(acc_t *a, double x) {
  double s = a->hi + x, bb = s - a->hi;
  double e = (a->hi - (s - bb)) + (x - bb);
  a->hi = s;
  if (e != 0) {
    a->lo += e;
    a->err += DBL_EPSILON * fabs(a->lo);
  }
}

static inline double acc_value(const acc_t *a) {
  return a->hi + a->lo;
}

/* Whether the sum has drifted too far to be trusted; with err 0 it is
 * exact (0 while no weight is in it, never a residue). */
static inline int acc_off(const acc_t *a, double tol) {
  return a->err > tol * acc_value(a);
}

typedef struct {
  uint64_t ver;
  uint32_t head; /* its first (oldest) row */
  uint32_t n;    /* its rows */
  acc_t mass;    /* its rows' weights */
} bucket_t;

struct chime__verindex_s {
  uint32_t *prev, *nx; /* by row: the row's neighbours in its version's list */
  bucket_t *b;
  uint64_t lo, hi, cap;
  const chime__sumtree_t *sum; /* rows' weights; NULL: no weights kept */
  uint64_t newest;             /* the newest version known */
  acc_t z; /* sum of b[i].mass x w(newest - b[i].ver), x 2^-ze */
  int ze;  /* Z's scale: 0 unless Z is too small for doubles (below) */
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

/* Version i's weight afresh from its rows: exact again when a change took
 * out most of it (a version of many rows weighs few of them heavily only
 * rarely, so this is rare). */
static void mass_resum(chime__verindex_t *v, bucket_t *b) {
  acc_t m = {0};
  uint32_t r = b->head;
  for (uint32_t k = 0; k < b->n; k++, r = v->nx[r])
    acc_add(&m, chime__sumtree_get(v->sum, r));
  b->mass = m;
}

/* A row of version b came with weight add, left with weight sub or went
 * from sub to add (the other 0), its list and sum tree slot already as
 * they are now (a resum reads them). */
static inline void mass_moved(chime__verindex_t *v, bucket_t *b, double add,
                              double sub) {
  if (add != 0) /* a constant 0 where a row comes or goes: no adds */
    acc_add(&b->mass, add);
  if (sub != 0)
    acc_add(&b->mass, -sub);
  if (acc_off(&b->mass, ACC_TOL))
    mass_resum(v, b);
}

/* Version b's term of Z, x 2^-e: its weight x its w(s). */
static inline double term_of(const chime__verindex_t *v, const bucket_t *b,
                             int e) {
  double m = acc_value(&b->mass),
         f = chime__verindex_stale_weight(v->newest - b->ver);
  return (e != 0 ? ldexp(m, -e) : m) * f;
}

/* Z afresh at scale e: v->z = Z x 2^-e, v->ze = e. */
static void z_sum(chime__verindex_t *v, int e) {
  acc_t z = {0};
  for (uint64_t i = v->lo; i < v->hi; i++) {
    const acc_t *m = &v->b[i].mass;
    double t = term_of(v, &v->b[i], e);
    if (!(t > 0))
      continue;
    acc_add(&z, t);
    /* hi + lo's rounding and the product's, and the version's own. */
    z.err += 2 * DBL_EPSILON * t +
             (e != 0 ? ldexp(m->err, -e) : m->err) *
                 chime__verindex_stale_weight(v->newest - v->b[i].ver);
  }
  v->z = z;
  v->ze = e;
}

/* Z is summed unscaled (e 0) unless it comes out below Z_SMALL: then its
 * terms may be subnormal (1e-300 x w(2^64 - 1) is 5e-320, a few bits of
 * precision left), so it is summed again x 2^-e, e the largest term's
 * exponent, every term as precise as a normal double's. */
double chime__verindex_z_exact(chime__verindex_t *v, int *e) {
  z_sum(v, 0);
  double z = acc_value(&v->z);
  if (!(z < Z_SMALL)) {
    *e = 0;
    return z;
  }
  int emax = INT_MIN;
  for (uint64_t i = v->lo; i < v->hi; i++) {
    double m = acc_value(&v->b[i].mass);
    if (!(m > 0))
      continue;
    int x =
        ilogb(m) + ilogb(chime__verindex_stale_weight(v->newest - v->b[i].ver));
    emax = x > emax ? x : emax;
  }
  if (emax != INT_MIN && emax < Z_SMALL_EXP)
    z_sum(v, emax);
  *e = v->ze;
  return acc_value(&v->z);
}

/* Whether Z has left the range its scale was chosen for, after a weight
 * came (add) or went (sub): unscaled, below Z_RESCALE_LOW (its terms near
 * subnormal, or gone to 0) unless no weight moved (priorities of 0);
 * scaled, far from 1 either way (a heavy item came or went, or a term
 * overflowed to inf or NaN). */
static inline int z_out_of_range(const chime__verindex_t *v, double add,
                                 double sub) {
  double a = fabs(v->z.hi);
  if (v->ze == 0)
    return a < Z_RESCALE_LOW && (a != 0 || add != 0 || sub != 0);
  return !(a <= 0x1p128) || (a != 0 && a < 0x1p-128);
}

double chime__verindex_share_scaled(double w, double f, double z, int e) {
  int ew, ez;
  double mw = frexp(w, &ew), mz = frexp(z, &ez);
  /* mw, mz in [0.5, 1), f in [2^-64, 1]: no rounding but the product's
   * and the quotient's; the scale goes on last (exact unless P itself is
   * subnormal). */
  return ldexp(mw * f / mz, ew - ez - e);
}

/* The same for Z, after the versions' weights moved: each weight x the
 * version's w(s), the products' rounding counted in the bound. */
static inline void z_moved(chime__verindex_t *v, uint64_t ver, double add,
                           double sub) {
  if (v->lo == v->hi) { /* nothing live: exactly 0, no rounding left over */
    v->z = (acc_t){0};
    v->ze = 0;
    return;
  }
  double f = chime__verindex_stale_weight(v->newest - ver);
  if (v->ze != 0) {
    add = ldexp(add, -v->ze);
    sub = ldexp(sub, -v->ze);
  }
  double ta = add * f, ts = sub * f;
  if (ta != 0)
    acc_add(&v->z, ta);
  if (ts != 0)
    acc_add(&v->z, -ts);
  v->z.err += DBL_EPSILON * (ta + ts);
  if (z_out_of_range(v, add, sub) || acc_off(&v->z, Z_TOL)) {
    int e;
    (void)chime__verindex_z_exact(v, &e);
  }
}

void chime__verindex_weigh(chime__verindex_t *v, const chime__sumtree_t *sum) {
  int e;
  v->sum = sum;
  (void)chime__verindex_z_exact(v, &e);
}

void chime__verindex_set_newest(chime__verindex_t *v, uint64_t newest) {
  if (newest <= v->newest)
    return;
  v->newest = newest;
  if (v->sum != NULL) {
    int e;
    (void)chime__verindex_z_exact(v, &e);
  }
}

double chime__verindex_z(const chime__verindex_t *v) {
  double z = acc_value(&v->z);
  return z > 0 ? (v->ze != 0 ? ldexp(z, v->ze) : z) : 0.0;
}

double chime__verindex_z_scaled(const chime__verindex_t *v, int *e) {
  double z = acc_value(&v->z);
  *e = v->ze;
  return z > 0 ? z : 0.0;
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
    v->b[i] = (bucket_t){
        .ver = ver, .head = r, .n = 1, .mass = {v->sum != NULL ? w : 0, 0, 0}};
    v->prev[r] = v->nx[r] = r;
    if (v->sum != NULL)
      z_moved(v, ver, w, 0.0);
    return;
  }
  bucket_t *b = &v->b[i];
  uint32_t h = b->head, tail = v->prev[h];
  v->prev[r] = tail;
  v->nx[r] = h;
  v->nx[tail] = r;
  v->prev[h] = r;
  b->n++;
  if (v->sum != NULL) {
    mass_moved(v, b, w, 0.0);
    z_moved(v, ver, w, 0.0);
  }
}

void chime__verindex_remove(chime__verindex_t *v, uint32_t r, uint64_t ver,
                            double w) {
  int found;
  uint64_t i = find(v, ver, &found);
  if (!found)
    return; /* not in the index: the caller's mistake, nothing to undo */
  bucket_t *b = &v->b[i];
  if (--b->n > 0) {
    v->nx[v->prev[r]] = v->nx[r];
    v->prev[v->nx[r]] = v->prev[r];
    if (b->head == r)
      b->head = v->nx[r];
    if (v->sum != NULL) { /* r is out of the list: a resum leaves it out */
      mass_moved(v, b, 0.0, w);
      z_moved(v, ver, 0.0, w);
    }
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
  if (v->sum != NULL)
    z_moved(v, ver, 0.0, w);
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

void chime__verindex_reweigh(chime__verindex_t *v, uint64_t ver, double old,
                             double w) {
  int found;
  uint64_t i = find(v, ver, &found);
  if (!found || v->sum == NULL)
    return;
  /* Both weights, not their difference: w - old rounds (1 - 1e298 is
   * -1e298), and the sums would lose what it rounded away. */
  mass_moved(v, &v->b[i], w, old);
  z_moved(v, ver, w, old);
}

void chime__verindex_at(const chime__verindex_t *v, uint64_t i, uint64_t *ver,
                        double *mass, uint32_t *first) {
  const bucket_t *b = &v->b[v->lo + i];
  *ver = b->ver;
  double m = acc_value(&b->mass);
  *mass = m > 0 ? m : 0.0; /* > 0 exactly when a row weighs (acc_off) */
  *first = b->head;
}

uint32_t chime__verindex_next(const chime__verindex_t *v, uint32_t r) {
  return v->nx[r];
}
