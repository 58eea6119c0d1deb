/* The byte pattern ring tests write into a batch and check on the other side:
 * every byte depends on the batch's sequence number and its position, so a
 * torn, stale or overwritten batch shows up as a mismatch. */
#ifndef CHIME_TEST_RING_PATTERN_H
#define CHIME_TEST_RING_PATTERN_H

#include <stdint.h>
#include <string.h>

#include "ring/producer.h"

static inline uint8_t ring_pattern_byte(uint64_t seq, uint32_t leaf,
                                        uint64_t i) {
  uint64_t x = seq * UINT64_C(0x9E3779B97F4A7C15) + leaf * 131u + i;
  x ^= x >> 29;
  x *= UINT64_C(0xBF58476D1CE4E5B9);
  return (uint8_t)(x >> 32);
}

static inline void ring_pattern_fill(const chime_ring_layout_t *l,
                                     uint32_t nleaves, chime__ring_wslot_t *w,
                                     uint64_t seq) {
  for (uint32_t k = 0; k < nleaves; k++) {
    uint8_t *p = w->leaf[k];
    for (uint64_t i = 0; i < l->leaf_bytes[k]; i++)
      p[i] = ring_pattern_byte(seq, k, i);
  }
  for (uint32_t j = 0; j < l->batch_size; j++) {
    w->info[j].key = seq * 1000003u + j;
    w->info[j].probability = 1.0 / (double)(j + 1);
    w->info[j].times_sampled = (uint32_t)seq;
    w->info[j].reserved = 0;
    w->info[j].insert_time_ns = seq;
  }
}

/* Returns -1 when the batch is intact, else the leaf (or nleaves for the
 * info records) holding the first wrong byte. */
static inline int ring_pattern_check(const chime_ring_layout_t *l,
                                     uint32_t nleaves,
                                     const chime_ring_view_t *v, uint64_t seq) {
  for (uint32_t k = 0; k < nleaves; k++) {
    const uint8_t *p = v->leaf[k];
    for (uint64_t i = 0; i < l->leaf_bytes[k]; i++)
      if (p[i] != ring_pattern_byte(seq, k, i))
        return (int)k;
  }
  if (v->count != l->batch_size)
    return (int)nleaves;
  for (uint32_t j = 0; j < l->batch_size; j++) {
    const chime_sample_info_t *in = &v->info[j];
    if (in->key != seq * 1000003u + j ||
        in->probability != 1.0 / (double)(j + 1) ||
        in->times_sampled != (uint32_t)seq || in->insert_time_ns != seq)
      return (int)nleaves;
  }
  return -1;
}

/* xorshift64*: reproducible choices for release order and hold times. */
static inline uint64_t ring_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

#endif
