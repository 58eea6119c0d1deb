/* Key -> row map (see keyindex.h). Keys and rows are two arrays so a probe
 * reads keys only (8 to a cache line) and a hit reads one row. An empty
 * bucket holds key 0, so the lazily mapped zero pages are an empty table and
 * create costs nothing; key 0 itself lives beside the table (zero_in,
 * zero_row). The keys it holds are issued in sequence (a table's item
 * keys, a sequence table's episode ids), so they are spread by Fibonacci
 * hashing (Knuth's multiplicative hash with 2^64/phi) rather than mixed
 * at random: consecutive keys land at evenly spaced, well apart buckets
 * (the three-gap theorem), so a window of live keys -- what a fifo remover
 * keeps -- almost never collides, where randomly placed keys at this load
 * build linear probing's runs (about 5 probe steps an insert, 7 buckets
 * walked a remove, against 0.3 and 1.2; each a chance of a cache miss).
 * The product is mapped onto the buckets with a multiply-high, which needs
 * no power-of-two size: the buckets are exactly 10/7 of the items, not up
 * to twice that.
 *
 * In front of the hash table, a direct-mapped array: key k's slot is
 * k & dmask (a power of two at least half max_items: a table's capacity,
 * its rows being twice that), which holds the newest key of that slot. A
 * table's keys are issued in sequence, so its inserts and a fifo
 * remover's removes walk the array in order (8 keys a cache line, a page
 * after 512) where the hash table's buckets are spread on purpose: at
 * 10^6 items each insert's and remove's bucket was a cache and TLB miss,
 * 60% of chimed's CPU in an import (docs/benchmarks.md, "Dataset
 * import"). A key goes to the hash table only when an older key's slot
 * is taken by a newer one (it outlived dmask + 1 later keys: kept by a
 * remover other than fifo) or a newer key holds its slot (a key given
 * back or restored); while none is there (hcount 0), nothing probes it. */
#include "replay/keyindex.h"

#include <stdlib.h>
#include <sys/mman.h>

#define EMPTY 0u

__extension__ typedef unsigned __int128 u128;

struct chime__keyindex_s {
  uint64_t nbuckets, max_items, count;
  uint64_t hcount; /* of count, in the hash table */
  uint64_t *keys;
  uint32_t *rows;
  uint64_t dmask;  /* direct slots - 1 */
  uint64_t *dkeys; /* EMPTY: a free slot */
  uint32_t *drows;
  void *map;
  size_t map_len;
  int zero_in;
  uint32_t zero_row;
};

static uint64_t direct_slots(uint64_t max_items) {
  uint64_t d = 1;
  while (d < (max_items + 1) / 2)
    d <<= 1;
  return d;
}

uint64_t chime__keyindex_direct_bytes(uint64_t max_items) {
  return direct_slots(max_items) * (sizeof(uint64_t) + sizeof(uint32_t));
}

int chime__keyindex_create(chime__keyindex_t **out, uint64_t max_items) {
  *out = NULL;
  if (max_items == 0 || max_items > CHIME__KEYINDEX_MAX_ITEMS)
    return CHIME_EINVAL;
  chime__keyindex_t *k = calloc(1, sizeof(*k));
  if (k == NULL)
    return CHIME_ENOMEM;
  /* Load <= 0.7, and always one empty bucket so every probe ends. */
  k->nbuckets = (max_items * 10 + 6) / 7 + 1;
  k->max_items = max_items;
  size_t klen = (size_t)k->nbuckets * sizeof(uint64_t);
  uint64_t d = direct_slots(max_items);
  k->dmask = d - 1;
  size_t hlen = klen + (size_t)k->nbuckets * sizeof(uint32_t);
  hlen = (hlen + 63) & ~(size_t)63;
  k->map_len = hlen + (size_t)d * (sizeof(uint64_t) + sizeof(uint32_t));
  k->map = mmap(NULL, k->map_len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (k->map == MAP_FAILED) {
    free(k);
    return CHIME_ENOMEM;
  }
  k->keys = k->map;
  k->rows = (uint32_t *)((uint8_t *)k->map + klen);
  k->dkeys = (uint64_t *)((uint8_t *)k->map + hlen);
  k->drows = (uint32_t *)(k->dkeys + d);
  *out = k;
  return 0;
}

void chime__keyindex_destroy(chime__keyindex_t *k) {
  if (k == NULL)
    return;
  munmap(k->map, k->map_len);
  free(k);
}

uint64_t chime__keyindex_count(const chime__keyindex_t *k) {
  return k->count;
}

static uint64_t home(const chime__keyindex_t *k, uint64_t key) {
  key *= UINT64_C(0x9e3779b97f4a7c15); /* 2^64 / phi, odd */
  return (uint64_t)(((u128)key * k->nbuckets) >> 64);
}

static uint64_t next(const chime__keyindex_t *k, uint64_t i) {
  return ++i == k->nbuckets ? 0 : i;
}

/* The bucket holding key, or the empty one where it would go. */
static uint64_t probe(const chime__keyindex_t *k, uint64_t key) {
  uint64_t i = home(k, key);
  while (k->keys[i] != key && k->keys[i] != EMPTY)
    i = next(k, i);
  return i;
}

void chime__keyindex_prefetch(const chime__keyindex_t *k, uint64_t key) {
  if (key == EMPTY)
    return;
  uint64_t d = key & k->dmask;
  __builtin_prefetch(&k->dkeys[d], 1);
  __builtin_prefetch(&k->drows[d], 1);
  if (k->hcount == 0)
    return;
  uint64_t i = home(k, key);
  __builtin_prefetch(&k->keys[i], 1);
  __builtin_prefetch(&k->rows[i], 1);
}

/* key (not in) into the hash table. */
static void h_put(chime__keyindex_t *k, uint64_t key, uint32_t row) {
  uint64_t i = probe(k, key);
  k->keys[i] = key;
  k->rows[i] = row;
  k->hcount++;
}

int chime__keyindex_insert(chime__keyindex_t *k, uint64_t key, uint32_t row) {
  if (key == EMPTY) {
    if (k->zero_in)
      return CHIME_EEXIST;
    if (k->count == k->max_items)
      return CHIME_ERESOURCE;
    k->zero_in = 1;
    k->zero_row = row;
    k->count++;
    return 0;
  }
  uint64_t d = key & k->dmask, old = k->dkeys[d];
  if (old == key)
    return CHIME_EEXIST;
  if (k->hcount > 0 && k->keys[probe(k, key)] == key)
    return CHIME_EEXIST;
  if (k->count == k->max_items)
    return CHIME_ERESOURCE;
  k->count++;
  if (old != EMPTY && old > key) { /* a newer key holds the slot */
    h_put(k, key, row);
    return 0;
  }
  if (old != EMPTY) /* it outlived its slot */
    h_put(k, old, k->drows[d]);
  k->dkeys[d] = key;
  k->drows[d] = row;
  return 0;
}

int chime__keyindex_lookup(const chime__keyindex_t *k, uint64_t key,
                           uint32_t *row) {
  if (key == EMPTY) {
    if (!k->zero_in)
      return CHIME_ENOTFOUND;
    *row = k->zero_row;
    return 0;
  }
  uint64_t d = key & k->dmask;
  if (k->dkeys[d] == key) {
    *row = k->drows[d];
    return 0;
  }
  if (k->hcount == 0)
    return CHIME_ENOTFOUND;
  uint64_t i = probe(k, key);
  if (k->keys[i] != key)
    return CHIME_ENOTFOUND;
  *row = k->rows[i];
  return 0;
}

int chime__keyindex_remove(chime__keyindex_t *k, uint64_t key, uint32_t *row) {
  if (key == EMPTY) {
    if (!k->zero_in)
      return CHIME_ENOTFOUND;
    if (row != NULL)
      *row = k->zero_row;
    k->zero_in = 0;
    k->count--;
    return 0;
  }
  uint64_t d = key & k->dmask;
  if (k->dkeys[d] == key) {
    if (row != NULL)
      *row = k->drows[d];
    k->dkeys[d] = EMPTY;
    k->count--;
    return 0;
  }
  if (k->hcount == 0)
    return CHIME_ENOTFOUND;
  uint64_t hole = probe(k, key);
  if (k->keys[hole] != key)
    return CHIME_ENOTFOUND;
  if (row != NULL)
    *row = k->rows[hole];
  k->hcount--;
  /* Backward shift: walk the run after the hole and pull back every entry
   * whose home is not cyclically in (hole, j], since a lookup for it would
   * otherwise stop at the hole before reaching it. No tombstone is left,
   * so probes stay as short as the live keys make them. */
  for (uint64_t j = next(k, hole); k->keys[j] != EMPTY; j = next(k, j)) {
    uint64_t h = home(k, k->keys[j]);
    int stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays)
      continue;
    k->keys[hole] = k->keys[j];
    k->rows[hole] = k->rows[j];
    hole = j;
  }
  k->keys[hole] = EMPTY;
  k->count--;
  return 0;
}
