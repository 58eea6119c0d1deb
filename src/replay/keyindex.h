/* A map from an item's u64 key to its row in the table, so a priority
 * update naming a key (MutatePriorities) finds its item in O(1) expected
 * time. Every key is allowed, 0 and UINT64_MAX included; none is reserved.
 * Sized at create for a fixed number of items: insert, lookup and remove
 * never allocate. Not thread-safe: the table calls it under its lock.
 *
 * Open addressing with linear probing at a load factor of at most 0.7
 * (expected probes about 2.2 for a hit, 6 for a miss), and deletion by
 * backward shift rather than tombstones: a replay table replaces its keys
 * endlessly, and tombstones would fill the table and lengthen every probe
 * until a rehash, which a fixed-size hot path cannot afford.
 *
 * Memory: 12 bytes per bucket, 10/7 buckets per item (about 17 bytes an
 * item), and in front of them a direct-mapped array of the newest keys
 * (keyindex.c says why), 12 bytes a slot, a power of two of slots at
 * least half the items (chime__keyindex_direct_bytes); mapped lazily. */
#ifndef CHIME_SERVER_KEYINDEX_H
#define CHIME_SERVER_KEYINDEX_H

#include <stdint.h>

#include "chime/errors.h"

#define CHIME__KEYINDEX_MAX_ITEMS UINT32_C(0xffffffff)

typedef struct chime__keyindex_s chime__keyindex_t;

/* An empty map for up to max_items keys (1 .. CHIME__KEYINDEX_MAX_ITEMS).
 * CHIME_EINVAL, CHIME_ENOMEM. */
CHIME_NODISCARD int chime__keyindex_create(chime__keyindex_t **out,
                                           uint64_t max_items);
void chime__keyindex_destroy(chime__keyindex_t *k); /* NULL-safe */

uint64_t chime__keyindex_count(const chime__keyindex_t *k);
/* The direct-mapped array's bytes of a map for max_items keys. */
uint64_t chime__keyindex_direct_bytes(uint64_t max_items);

/* Maps key to row. CHIME_EEXIST (row unchanged) when the key is in;
 * CHIME_ERESOURCE when max_items keys are in already. */
CHIME_NODISCARD int chime__keyindex_insert(chime__keyindex_t *k, uint64_t key,
                                           uint32_t row);
/* The key's row. CHIME_ENOTFOUND when it is not in. */
CHIME_NODISCARD int chime__keyindex_lookup(const chime__keyindex_t *k,
                                           uint64_t key, uint32_t *row);
/* Asks the caches for the bucket where key's probe starts (an insert's,
 * lookup's or remove's first miss), so a caller that knows its next keys can
 * have their misses overlap instead of paying them one after another. */
void chime__keyindex_prefetch(const chime__keyindex_t *k, uint64_t key);
/* Takes the key out; its row in *row when row is not NULL.
 * CHIME_ENOTFOUND when it is not in. */
CHIME_NODISCARD int chime__keyindex_remove(chime__keyindex_t *k, uint64_t key,
                                           uint32_t *row);

#endif
