/* The unit tests' random numbers: splitmix64, seeded by the test so that a
 * failure repeats. Header-only, as seq_steps.h: one small function that
 * every unit test may include without a source of its own to link. */
#ifndef CHIME_TESTS_RNG_H
#define CHIME_TESTS_RNG_H

#include <stdint.h>

/* The next number of the sequence in *s (advances *s). */
static inline uint64_t chime__rng_next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

#endif
