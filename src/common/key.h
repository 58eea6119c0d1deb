/* Internal: the layout of an item's key, one fact both ends share. A key
 * says where its item lives: the top CHIME__KEY_SHARD_BITS bits are the
 * shard of the chimed that issued it (0: an unsharded server), the rest
 * counts from 1 per table. An unsharded server's keys are therefore the
 * counts alone, as before shards existed; a sharded client splits a
 * MutatePriorities by these bits and sends each part to its owner
 * (docs/protocol.md, Keys). */
#ifndef CHIME_COMMON_KEY_H
#define CHIME_COMMON_KEY_H

#include <stdint.h>

#define CHIME__KEY_SHARD_BITS 16
#define CHIME__KEY_COUNT_BITS (64 - CHIME__KEY_SHARD_BITS)
/* The largest shard (config `shard`), and the last count a table issues:
 * past it a table refuses inserts rather than wrap into the next shard's
 * keys. */
#define CHIME__KEY_MAX_SHARD ((UINT32_C(1) << CHIME__KEY_SHARD_BITS) - 1)
#define CHIME__KEY_MAX_COUNT ((UINT64_C(1) << CHIME__KEY_COUNT_BITS) - 1)

/* The shard that issued key. */
static inline uint32_t chime__key_shard(uint64_t key) {
  return (uint32_t)(key >> CHIME__KEY_COUNT_BITS);
}

/* The count part of key (1.. for a key a table issued). */
static inline uint64_t chime__key_count(uint64_t key) {
  return key & CHIME__KEY_MAX_COUNT;
}

/* Shard's key number n (shard <= CHIME__KEY_MAX_SHARD, n <=
 * CHIME__KEY_MAX_COUNT). */
static inline uint64_t chime__key_make(uint32_t shard, uint64_t n) {
  return (uint64_t)shard << CHIME__KEY_COUNT_BITS | (n & CHIME__KEY_MAX_COUNT);
}

#endif
