/* Stream mode's credits as both ends count them (docs/protocol.md,
 * Credits): how many batches the server may have sent and the learner not
 * yet released. */
#ifndef CHIME_WIRE_CREDIT_H
#define CHIME_WIRE_CREDIT_H

#include <stdint.h>

/* The most the server lends at once: its side of the ring keeps one slot
 * to fill while the learner holds the others. */
static inline uint32_t chime__credits_max(uint32_t slots) {
  return slots - 1;
}

/* What the server lends at open: the Open's prefetch, where 0 (and a
 * prefetch of slots or more) means as many as it may. */
static inline uint32_t chime__credits_initial(uint32_t prefetch,
                                              uint32_t slots) {
  return prefetch != 0 && prefetch < slots ? prefetch
                                           : chime__credits_max(slots);
}

#endif
