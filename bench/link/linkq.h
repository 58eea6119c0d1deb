/* One direction of an emulated link (chime-link, docs/remote.md): when a
 * packet offered at a time leaves the far end, or that it is dropped. The
 * link serializes packets at its rate behind a queue of bounded bytes
 * (tail drop, as a router's), then holds each for the one-way delay; it
 * loses packets at random (independently, at a given probability), or
 * evenly (every Nth packet: each flow in turn loses exactly its share, no
 * luck of the draw between two runs compared), and drops everything while
 * down. Pure arithmetic on a clock the caller
 * passes, so a unit test drives it without a network. */
#ifndef CHIME_BENCH_LINKQ_H
#define CHIME_BENCH_LINKQ_H

#include <stdint.h>

typedef struct {
  uint64_t delay_ns; /* one way */
  uint64_t rate_bps; /* bits per second, 0: no limit */
  uint64_t
      queue_bytes;  /* bytes not yet sent (the one on the wire too), at most */
  double loss;      /* probability a packet is lost, 0..1 */
  uint64_t every;   /* > 0: every Nth packet lost instead (loss unused) */
  uint64_t offered; /* packets offered while up, for every */
  uint64_t rng;     /* xorshift state, nonzero */
  uint64_t tx_free_ns; /* when the serializer is free next */
  int down;
  /* counts */
  uint64_t sent, sent_bytes, lost, tail_dropped, down_dropped;
} chime__linkq_t;

/* A direction with these settings, its random stream from seed. */
void chime__linkq_init(chime__linkq_t *q, uint64_t delay_ns, uint64_t rate_bps,
                       uint64_t queue_bytes, double loss, uint64_t seed);

/* A packet of len bytes offered at now_ns: the time it arrives at the far
 * end (>= now_ns + delay_ns), or 0 when it is dropped (counted). Times
 * are monotonic nanoseconds, never 0. */
uint64_t chime__linkq_offer(chime__linkq_t *q, uint64_t now_ns, uint32_t len);

#endif
