/* Indexed binary heap (see heap.h). Entries carry their key and an order
 * stamp, so a comparison never leaves the heap array; pos[] maps a slot to
 * its entry. A max heap stores negated keys (exact for doubles) and runs the
 * same min-heap code. Sifts move a hole instead of swapping, one write of
 * each moved entry and its position. */
#include "replay/heap.h"

#include <math.h>
#include <stdlib.h>

#define ABSENT UINT32_MAX

typedef struct {
  double key;   /* negated for a max heap */
  uint64_t seq; /* push/update order: equal keys, earlier first */
  uint32_t slot;
} entry_t;

struct chime__heap_s {
  uint32_t capacity, size;
  double sign; /* 1 for min, -1 for max */
  uint64_t seq;
  entry_t *e;
  uint32_t *pos; /* slot -> index in e, ABSENT when not in */
};

int chime__heap_create(chime__heap_t **out, uint32_t capacity,
                       chime__heap_order_t order) {
  *out = NULL;
  if (capacity == 0 || capacity > CHIME__HEAP_MAX_SLOTS ||
      (order != CHIME__HEAP_MIN && order != CHIME__HEAP_MAX))
    return CHIME_EINVAL;
  chime__heap_t *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return CHIME_ENOMEM;
  h->e = malloc((size_t)capacity * sizeof(*h->e));
  h->pos = malloc((size_t)capacity * sizeof(*h->pos));
  if (h->e == NULL || h->pos == NULL) {
    chime__heap_destroy(h);
    return CHIME_ENOMEM;
  }
  for (uint32_t i = 0; i < capacity; i++)
    h->pos[i] = ABSENT;
  h->capacity = capacity;
  h->sign = order == CHIME__HEAP_MAX ? -1.0 : 1.0;
  *out = h;
  return 0;
}

void chime__heap_destroy(chime__heap_t *h) {
  if (h == NULL)
    return;
  free(h->e);
  free(h->pos);
  free(h);
}

uint32_t chime__heap_size(const chime__heap_t *h) {
  return h->size;
}

int chime__heap_contains(const chime__heap_t *h, uint32_t slot) {
  return slot < h->capacity && h->pos[slot] != ABSENT;
}

static int before(const entry_t *a, const entry_t *b) {
  return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void place(chime__heap_t *h, uint32_t i, const entry_t *x) {
  h->e[i] = *x;
  h->pos[x->slot] = i;
}

/* Puts x at or above hole i. */
static void sift_up(chime__heap_t *h, uint32_t i, const entry_t *x) {
  while (i > 0) {
    uint32_t p = (i - 1) / 2;
    if (!before(x, &h->e[p]))
      break;
    place(h, i, &h->e[p]);
    i = p;
  }
  place(h, i, x);
}

/* Puts x at or below hole i. */
static void sift_down(chime__heap_t *h, uint32_t i, const entry_t *x) {
  for (;;) {
    uint64_t c = 2 * (uint64_t)i + 1;
    if (c >= h->size)
      break;
    if (c + 1 < h->size && before(&h->e[c + 1], &h->e[c]))
      c++;
    if (!before(&h->e[c], x))
      break;
    place(h, i, &h->e[c]);
    i = (uint32_t)c;
  }
  place(h, i, x);
}

/* x goes into hole i, up or down as its order against the parent says. */
static void settle(chime__heap_t *h, uint32_t i, const entry_t *x) {
  if (i > 0 && before(x, &h->e[(i - 1) / 2]))
    sift_up(h, i, x);
  else
    sift_down(h, i, x);
}

int chime__heap_push(chime__heap_t *h, uint32_t slot, double key) {
  if (slot >= h->capacity || isnan(key))
    return CHIME_EINVAL;
  if (h->pos[slot] != ABSENT)
    return CHIME_EEXIST;
  entry_t x = {.key = key * h->sign, .seq = h->seq++, .slot = slot};
  sift_up(h, h->size++, &x);
  return 0;
}

int chime__heap_remove(chime__heap_t *h, uint32_t slot) {
  if (!chime__heap_contains(h, slot))
    return CHIME_ENOTFOUND;
  uint32_t i = h->pos[slot];
  h->pos[slot] = ABSENT;
  entry_t last = h->e[--h->size];
  if (i < h->size)
    settle(h, i, &last);
  return 0;
}

int chime__heap_update(chime__heap_t *h, uint32_t slot, double key) {
  if (isnan(key))
    return CHIME_EINVAL;
  if (!chime__heap_contains(h, slot))
    return CHIME_ENOTFOUND;
  entry_t x = {.key = key * h->sign, .seq = h->seq++, .slot = slot};
  settle(h, h->pos[slot], &x);
  return 0;
}

int chime__heap_top(const chime__heap_t *h, uint32_t *slot, double *key) {
  if (h->size == 0)
    return CHIME_ENOTFOUND;
  *slot = h->e[0].slot;
  if (key != NULL)
    *key = h->e[0].key * h->sign;
  return 0;
}

int chime__heap_key(const chime__heap_t *h, uint32_t slot, double *key) {
  if (!chime__heap_contains(h, slot))
    return CHIME_ENOTFOUND;
  *key = h->e[h->pos[slot]].key * h->sign;
  return 0;
}
