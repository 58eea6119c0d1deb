/* Deterministic sample contents shared by chime-actor, chime-learner, the
 * tests and the benchmarks, so that a learner can check every byte of every
 * batch whatever the sampler's order and however many actors inserted.
 *
 * A sample's id, (seed << 40) | index, is stored in the first 8 bytes of its
 * first leaf; every other byte of every leaf is a hash of (id, leaf, byte
 * offset). The first leaf must therefore hold at least 8 bytes. */
#ifndef CHIME_EXAMPLES_PATTERN_H
#define CHIME_EXAMPLES_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"

#define CHIME__PATTERN_MAX_SEED ((UINT64_C(1) << 24) - 1)
#define CHIME__PATTERN_MAX_INDEX ((UINT64_C(1) << 40) - 1)

static inline uint64_t chime__pattern_id(uint64_t seed, uint64_t index) {
  return (seed << 40) | (index & CHIME__PATTERN_MAX_INDEX);
}

/* CHIME_EINVAL with a sentence when the spec cannot carry the pattern. */
int chime__pattern_check_spec(const chime_spec_t *spec, char *err,
                              size_t errlen);
/* Writes one sample (chime_spec_sample_bytes(spec) bytes, leaves in order). */
void chime__pattern_fill(const chime_spec_t *spec, uint64_t id, void *sample);
/* Checks every byte of every sample of a batch. ids (count entries, may be
 * NULL) receives each sample's id. CHIME_ECORRUPT with err naming the batch,
 * sample, leaf and byte at the first mismatch. */
int chime__pattern_verify(const chime_batch_t *batch, uint64_t *ids, char *err,
                          size_t errlen);

#endif
