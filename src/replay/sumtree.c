/* Sum tree (see sumtree.h), FAN children a node. Level 0 is the values;
 * level l + 1 holds one sum per FAN consecutive entries of level l, the top
 * level one entry (the total). Every level is padded with zeros to a whole
 * number of groups and starts on a group boundary, and a group is one or
 * two cache lines, so a find reads one group per level: about
 * log_FAN(n) lines where a binary tree reads log2(n) nodes on as many
 * lines once it outgrows the cache. A set rewrites one sum per level from
 * its group, always adding in the same order, so sums are the same
 * function of the values whatever the history (no drift). */
#include "replay/sumtree.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef CHIME__SUMTREE_FAN
#define CHIME__SUMTREE_FAN 8
#endif
#define FAN ((uint64_t)CHIME__SUMTREE_FAN)
/* Levels above the values: ceil(log_FAN(2^32)) at FAN 8 is 11. */
#define MAX_LEVELS 40

_Static_assert(CHIME__SUMTREE_FAN == 8 || CHIME__SUMTREE_FAN == 16,
               "group_sum adds 8 or 16 children");

struct chime__sumtree_s {
  uint64_t n;
  uint32_t top;                     /* level[top][0] is the total */
  double *level[MAX_LEVELS + 1];    /* level[0]: the values */
  uint64_t entries[MAX_LEVELS + 1]; /* before padding */
  void *map;
  size_t map_len;
};

static uint64_t groups(uint64_t n) {
  return (n + FAN - 1) / FAN;
}

int chime__sumtree_create(chime__sumtree_t **out, uint64_t n) {
  *out = NULL;
  if (n == 0 || n > CHIME__SUMTREE_MAX_SLOTS)
    return CHIME_EINVAL;
  chime__sumtree_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return CHIME_ENOMEM;
  t->n = n;
  /* At least one level of sums, so the total is never a value itself and
   * find always scans a group. */
  uint64_t len = n, words = 0;
  uint32_t l = 0;
  for (;;) {
    t->entries[l] = len;
    words += groups(len) * FAN;
    if (l > 0 && len == 1)
      break;
    len = groups(len);
    l++;
  }
  t->top = l;
  t->map_len = (size_t)words * sizeof(double);
  /* Anonymous memory is zero (every sum 0) and committed as it is touched,
   * so a large, sparsely used tree costs little until it fills. */
  void *m = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    free(t);
    return CHIME_ENOMEM;
  }
  /* No MADV_HUGEPAGE: on this project's VMs it made a prioritized table's
   * samples at 10^7 items 2.6 times slower (docs/benchmarks.md). */
  t->map = m;
  double *p = m;
  for (uint32_t i = 0; i <= t->top; i++) {
    t->level[i] = p;
    p += groups(t->entries[i]) * FAN;
  }
  *out = t;
  return 0;
}

void chime__sumtree_destroy(chime__sumtree_t *t) {
  if (t == NULL)
    return;
  munmap(t->map, t->map_len);
  free(t);
}

uint64_t chime__sumtree_slots(const chime__sumtree_t *t) {
  return t->n;
}

/* Always summed in the same order, so a group's sum depends only on its
 * values. */
static double sum8(const double *v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

static double group_sum(const double *v) {
#if CHIME__SUMTREE_FAN == 16
  return sum8(v) + sum8(v + 8);
#else
  return sum8(v);
#endif
}

static void refresh(chime__sumtree_t *t, uint64_t slot) {
  uint64_t i = slot;
  for (uint32_t l = 1; l <= t->top; l++) {
    i /= FAN;
    t->level[l][i] = group_sum(t->level[l - 1] + i * FAN);
  }
}

int chime__sumtree_set(chime__sumtree_t *t, uint64_t slot, double value) {
  if (slot >= t->n || !(value >= 0) || isinf(value))
    return CHIME_EINVAL;
  double *v = t->level[0];
  double old = v[slot];
  v[slot] = value;
  refresh(t, slot);
  if (isinf(t->level[t->top][0])) {
    v[slot] = old;
    refresh(t, slot);
    return CHIME_EOVERFLOW;
  }
  return 0;
}

double chime__sumtree_get(const chime__sumtree_t *t, uint64_t slot) {
  return slot < t->n ? t->level[0][slot] : 0;
}

double chime__sumtree_total(const chime__sumtree_t *t) {
  return t->level[t->top][0];
}

/* One level of a descent: the child of group c to step into, with prefix
 * made relative to it. Only ever a child whose sum is > 0: non-negative
 * values sum to > 0 only if one of them is > 0, so every group scanned has
 * one. When rounding (or a prefix at the total) leaves the prefix past the
 * last non-empty child of a group, *last turns the rest of the descent
 * into "the last non-empty slot here", which is where the prefix
 * belongs. */
static inline uint64_t step(const double *c, double *prefix, int *last) {
  if (!*last) {
    /* prefix >= 0, so prefix < c[k] only for a child > 0; an empty one
     * subtracts nothing. */
    double p = *prefix;
    for (uint64_t k = 0; k < FAN; k++) {
      if (p < c[k]) {
        *prefix = p;
        return k;
      }
      p -= c[k];
    }
    *last = 1; /* ran past the group: its last non-empty child */
  }
  uint64_t pick;
  for (pick = FAN - 1; pick > 0 && !(c[pick] > 0); pick--)
    ;
  return pick;
}

int chime__sumtree_find(const chime__sumtree_t *t, double prefix,
                        uint64_t *slot) {
  double total = t->level[t->top][0];
  if (!(total > 0))
    return CHIME_ENOTFOUND;
  if (!(prefix >= 0))
    prefix = 0;
  int last = prefix >= total;
  uint64_t i = 0; /* the node at level l + 1 whose group is scanned */
  for (uint32_t l = t->top; l-- > 0;)
    i = i * FAN + step(t->level[l] + i * FAN, &prefix, &last);
  *slot = i; /* every pick < FAN: each group scanned has a sum > 0 */
  return 0;
}

/* Descents in flight together: enough to cover a memory latency with
 * misses, few enough for the core's outstanding-miss buffers. */
#define TOGETHER 16

int chime__sumtree_find_many(const chime__sumtree_t *t, const double *prefix,
                             size_t n, uint64_t *slot) {
  double total = t->level[t->top][0];
  if (!(total > 0))
    return CHIME_ENOTFOUND;
  for (size_t b = 0; b < n; b += TOGETHER) {
    size_t m = n - b < TOGETHER ? n - b : TOGETHER;
    double p[TOGETHER];
    int last[TOGETHER];
    uint64_t i[TOGETHER];
    for (size_t j = 0; j < m; j++) {
      p[j] = prefix[b + j] >= 0 ? prefix[b + j] : 0;
      last[j] = p[j] >= total;
      i[j] = 0;
    }
    /* Level by level: ask for every descent's next group first, then scan
     * them, so the misses of the m descents overlap. */
    for (uint32_t l = t->top; l-- > 0;) {
      const double *lv = t->level[l];
      for (size_t j = 0; j < m; j++) {
        __builtin_prefetch(lv + i[j] * FAN);
#if CHIME__SUMTREE_FAN == 16
        __builtin_prefetch(lv + i[j] * FAN + 8);
#endif
      }
      for (size_t j = 0; j < m; j++)
        i[j] = i[j] * FAN + step(lv + i[j] * FAN, &p[j], &last[j]);
    }
    memcpy(slot + b, i, m * sizeof(uint64_t));
  }
  return 0;
}
