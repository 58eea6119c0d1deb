/* Sum tree (see sumtree.h). Slots are grouped in blocks of 8 doubles (one
 * cache line); a complete binary tree of inner sums sits over the blocks,
 * node 1 the root, node i's children 2i and 2i + 1, and block b's sum at
 * node nblocks_pow2 + b. A set rewrites its block's sum from the 8 values
 * and every ancestor from its two children, so sums are always the same
 * function of the values (no drift); a find descends by comparing prefix
 * with left sums, then scans at most 8 values. Blocks past the last slot
 * stay 0. Compared with one leaf per slot this uses a quarter of the inner
 * nodes and finishes in one cache line. */
#include "server/sumtree.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BLOCK 8u

struct chime__sumtree_s {
  uint64_t n;
  uint64_t pow2; /* blocks rounded up to a power of two (the tree's leaves) */
  double *value; /* pow2 * BLOCK, 64-byte aligned (the mapping's start) */
  double *node;  /* 2 * pow2; node[0] unused */
  size_t map_len;
};

int chime__sumtree_create(chime__sumtree_t **out, uint64_t n) {
  *out = NULL;
  if (n == 0 || n > CHIME__SUMTREE_MAX_SLOTS)
    return CHIME_EINVAL;
  chime__sumtree_t *t = malloc(sizeof(*t));
  if (t == NULL)
    return CHIME_ENOMEM;
  uint64_t blocks = (n + BLOCK - 1) / BLOCK;
  uint64_t pow2 = 1;
  while (pow2 < blocks)
    pow2 *= 2;
  t->n = n;
  t->pow2 = pow2;
  t->map_len = (size_t)(pow2 * BLOCK + 2 * pow2) * sizeof(double);
  /* Anonymous memory is zero (every sum 0) and committed as it is touched,
   * so a large, sparsely used tree costs little until it fills. */
  void *m = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    free(t);
    return CHIME_ENOMEM;
  }
  t->value = m;
  t->node = t->value + pow2 * BLOCK;
  *out = t;
  return 0;
}

void chime__sumtree_destroy(chime__sumtree_t *t) {
  if (t == NULL)
    return;
  munmap(t->value, t->map_len);
  free(t);
}

uint64_t chime__sumtree_slots(const chime__sumtree_t *t) {
  return t->n;
}

/* Always summed in the same order, so a block's sum depends only on its
 * values. */
static double block_sum(const double *v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

static void refresh(chime__sumtree_t *t, uint64_t block) {
  uint64_t i = t->pow2 + block;
  t->node[i] = block_sum(t->value + block * BLOCK);
  for (i /= 2; i >= 1; i /= 2)
    t->node[i] = t->node[2 * i] + t->node[2 * i + 1];
}

int chime__sumtree_set(chime__sumtree_t *t, uint64_t slot, double value) {
  if (slot >= t->n || !(value >= 0) || isinf(value))
    return CHIME_EINVAL;
  double old = t->value[slot];
  t->value[slot] = value;
  refresh(t, slot / BLOCK);
  if (isinf(t->node[1])) {
    t->value[slot] = old;
    refresh(t, slot / BLOCK);
    return CHIME_EOVERFLOW;
  }
  return 0;
}

double chime__sumtree_get(const chime__sumtree_t *t, uint64_t slot) {
  return slot < t->n ? t->value[slot] : 0;
}

double chime__sumtree_total(const chime__sumtree_t *t) {
  return t->node[1];
}

int chime__sumtree_find(const chime__sumtree_t *t, double prefix,
                        uint64_t *slot) {
  const double *node = t->node;
  if (!(node[1] > 0))
    return CHIME_ENOTFOUND;
  if (!(prefix >= 0))
    prefix = 0;
  /* Only ever step into a subtree whose sum is > 0: one of non-negative
   * values sums to > 0 only if a value in it is > 0, so the scan below
   * always finds one. When rounding (or a prefix at the total) leaves the
   * prefix past a right subtree that is empty, or past the end of a block,
   * `last` turns the rest of the descent into "the last non-empty slot
   * here", which is where the prefix belongs. */
  int last = prefix >= node[1];
  uint64_t i = 1;
  while (i < t->pow2) {
    double l = node[2 * i], r = node[2 * i + 1];
    if (last) {
      i = r > 0 ? 2 * i + 1 : 2 * i;
    } else if (prefix < l) {
      i = 2 * i;
    } else if (r > 0) {
      prefix -= l;
      i = 2 * i + 1;
    } else {
      last = 1;
      i = 2 * i;
    }
  }
  uint64_t b = i - t->pow2;
  const double *v = t->value + b * BLOCK;
  uint32_t pick = BLOCK;
  for (uint32_t k = 0; k < BLOCK; k++) {
    if (!(v[k] > 0))
      continue;
    pick = k;
    if (!last && prefix < v[k])
      break;
    prefix -= v[k];
  }
  *slot = b * BLOCK + pick; /* pick < BLOCK: the block's sum is > 0 */
  return 0;
}
