/* An indexed binary heap of slots (0 .. capacity - 1) ordered by a double
 * key, smallest or largest first, for selectors and removers that take the
 * lowest or highest priority item. Each slot's position in the heap is
 * kept, so removing or re-keying a slot is O(log n) like push and pop; top
 * is O(1). Nothing allocates after create. Not thread-safe: the table calls
 * it under its lock.
 *
 * Ties: of slots with equal keys, the one pushed or last updated earliest is
 * on top (first in, first out, as Reverb's heap selector), so the order is
 * fully determined by the calls.
 *
 * Memory: 28 bytes per slot of capacity (a 24-byte entry and a position). */
#ifndef CHIME_SERVER_HEAP_H
#define CHIME_SERVER_HEAP_H

#include <stdint.h>

#include "chime/errors.h"

#define CHIME__HEAP_MAX_SLOTS UINT32_C(0xfffffffe)

typedef struct chime__heap_s chime__heap_t;

typedef enum { CHIME__HEAP_MIN = 0, CHIME__HEAP_MAX = 1 } chime__heap_order_t;

/* An empty heap for slots 0 .. capacity - 1 (1 .. CHIME__HEAP_MAX_SLOTS).
 * CHIME_EINVAL, CHIME_ENOMEM. */
CHIME_NODISCARD int chime__heap_create(chime__heap_t **out, uint32_t capacity,
                                       chime__heap_order_t order);
void chime__heap_destroy(chime__heap_t *h); /* NULL-safe */

uint32_t chime__heap_size(const chime__heap_t *h);
int chime__heap_contains(const chime__heap_t *h, uint32_t slot);

/* CHIME_EINVAL: slot out of range or key NaN; CHIME_EEXIST: already in. */
CHIME_NODISCARD int chime__heap_push(chime__heap_t *h, uint32_t slot,
                                     double key);
/* CHIME_ENOTFOUND: slot not in the heap. */
CHIME_NODISCARD int chime__heap_remove(chime__heap_t *h, uint32_t slot);
/* Re-keys a slot in the heap; it counts as the newest among equal keys.
 * CHIME_EINVAL: key NaN; CHIME_ENOTFOUND: slot not in the heap. */
CHIME_NODISCARD int chime__heap_update(chime__heap_t *h, uint32_t slot,
                                       double key);
/* The slot on top and its key (key may be NULL). CHIME_ENOTFOUND: empty. */
CHIME_NODISCARD int chime__heap_top(const chime__heap_t *h, uint32_t *slot,
                                    double *key);
/* A slot's key; CHIME_ENOTFOUND when it is not in the heap. */
CHIME_NODISCARD int chime__heap_key(const chime__heap_t *h, uint32_t slot,
                                    double *key);

#endif
