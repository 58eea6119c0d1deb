/* The sample pattern (see pattern.h). Hashing works on 8-byte words so the
 * learner can verify at close to memory speed. */
#include "pattern.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  x ^= x >> 31;
  return x;
}

static uint64_t leaf_seed(uint64_t id, uint32_t leaf) {
  return mix(id * UINT64_C(0x9e3779b97f4a7c15) + leaf + 1);
}

static uint64_t word(uint64_t seed, uint64_t k) {
  return (seed ^ k) * UINT64_C(0xd6e8feb86659fd93);
}

/* Fills one leaf of one sample; the id goes first in leaf 0. */
static void fill_leaf(uint8_t *p, uint64_t bytes, uint64_t id, uint32_t leaf) {
  uint64_t seed = leaf_seed(id, leaf);
  uint64_t k = 0;
  for (; (k + 1) * 8 <= bytes; k++) {
    uint64_t w = (leaf == 0 && k == 0) ? id : word(seed, k);
    memcpy(p + k * 8, &w, 8);
  }
  if (k * 8 < bytes) {
    uint64_t w = word(seed, k);
    memcpy(p + k * 8, &w, (size_t)(bytes - k * 8));
  }
}

/* The sample id sits in the first 8 bytes of the first leaf. */
static int id_fits(const char *leaf, uint64_t bytes, char *err, size_t errlen) {
  if (bytes >= 8)
    return 0;
  snprintf(err, errlen,
           "pattern: the first leaf '%s' holds %" PRIu64
           " bytes per sample; the sample id needs at least 8",
           leaf, bytes);
  return CHIME_EINVAL;
}

int chime__pattern_check_spec(const chime_spec_t *spec, char *err,
                              size_t errlen) {
  if (!spec || spec->nleaves == 0) {
    snprintf(err, errlen, "pattern: empty spec");
    return CHIME_EINVAL;
  }
  return id_fits(spec->leaves[0].name, chime_leaf_bytes(&spec->leaves[0]), err,
                 errlen);
}

void chime__pattern_fill(const chime_spec_t *spec, uint64_t id, void *sample) {
  uint8_t *p = sample;
  for (uint32_t l = 0; l < spec->nleaves; l++) {
    uint64_t b = chime_leaf_bytes(&spec->leaves[l]);
    fill_leaf(p, b, id, l);
    p += b;
  }
}

/* Finds the first differing byte of a leaf whose words differ. */
static int report(const chime_batch_t *batch, uint32_t i, uint32_t l,
                  const uint8_t *got, uint64_t bytes, uint64_t id, char *err,
                  size_t errlen) {
  uint8_t want[64];
  for (uint64_t off = 0; off < bytes; off += sizeof(want)) {
    uint64_t n = bytes - off < sizeof(want) ? bytes - off : sizeof(want);
    /* Regenerate the whole leaf window by window. */
    uint64_t seed = leaf_seed(id, l);
    for (uint64_t j = 0; j < n; j++) {
      uint64_t o = off + j;
      uint64_t w = (l == 0 && o < 8) ? id : word(seed, o / 8);
      want[j] = (uint8_t)(w >> (8 * (o % 8)));
    }
    for (uint64_t j = 0; j < n; j++) {
      if (got[off + j] != want[j]) {
        snprintf(err, errlen,
                 "batch %" PRIu64 ", sample %" PRIu32 " (id %" PRIu64
                 "), leaf '%s', byte %" PRIu64 ": got 0x%02x, expected 0x%02x",
                 batch->seq, i, id, batch->leaf[l].name, off + j, got[off + j],
                 want[j]);
        return CHIME_ECORRUPT;
      }
    }
  }
  return 0;
}

int chime__pattern_verify(const chime_batch_t *batch, uint64_t *ids, char *err,
                          size_t errlen) {
  if (batch->nleaves == 0 || batch->count == 0) {
    snprintf(err, errlen, "batch %" PRIu64 " is empty", batch->seq);
    return CHIME_ECORRUPT;
  }
  uint64_t first = batch->leaf[0].bytes / batch->count;
  int rc = id_fits(batch->leaf[0].name, first, err, errlen);
  if (rc)
    return rc;
  for (uint32_t i = 0; i < batch->count; i++) {
    uint64_t id;
    memcpy(&id, (const uint8_t *)batch->leaf[0].data + i * first, 8);
    if (ids)
      ids[i] = id;
    for (uint32_t l = 0; l < batch->nleaves; l++) {
      uint64_t b = batch->leaf[l].bytes / batch->count;
      const uint8_t *p = (const uint8_t *)batch->leaf[l].data + i * b;
      uint64_t seed = leaf_seed(id, l);
      uint64_t bad = 0;
      uint64_t k = (l == 0) ? 1 : 0;
      for (; (k + 1) * 8 <= b; k++) {
        uint64_t w;
        memcpy(&w, p + k * 8, 8);
        bad |= w ^ word(seed, k);
      }
      if (k * 8 < b) {
        uint64_t w = 0, want = word(seed, k);
        memcpy(&w, p + k * 8, (size_t)(b - k * 8));
        uint64_t mask = (b - k * 8) == 8
                            ? ~UINT64_C(0)
                            : ((UINT64_C(1) << (8 * (b - k * 8))) - 1);
        bad |= (w ^ want) & mask;
      }
      if (bad)
        return report(batch, i, l, p, b, id, err, errlen);
    }
  }
  return 0;
}
