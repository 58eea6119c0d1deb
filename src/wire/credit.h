/* Stream mode's credits as both ends count them (docs/protocol.md,
 * Credits): how many batches the server may have sent and the learner not
 * yet released; and shm mode's like bound, the batches sampled ahead of the
 * learner's next(). */
#ifndef CHIME_WIRE_CREDIT_H
#define CHIME_WIRE_CREDIT_H

#include <stdint.h>

/* Stream mode's heartbeat (docs/protocol.md, "Heartbeats"): the interval
 * a learner asks for and a server sends at, while the stream has credits
 * and nothing to send; a learner that expects a batch and hears nothing
 * for CHIME__STALL_MS (or 4 times the longest recent gap between the
 * messages it heard, if longer) takes its connection for stalled. */
#define CHIME__HEARTBEAT_MS 250
#define CHIME__STALL_MS 1500

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

/* The batches an shm stream keeps sampled and not yet taken, from the
 * Open's ready_bytes (docs/protocol.md, Open): 0 is no limit. Two at
 * least, so one is ready while the next is written. */
static inline uint32_t chime__ready_max(uint64_t ready_bytes,
                                        uint64_t batch_bytes) {
  if (ready_bytes == 0)
    return 0;
  uint64_t n = batch_bytes != 0 ? ready_bytes / batch_bytes : UINT64_MAX;
  if (n < 2)
    return 2;
  return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

#endif
