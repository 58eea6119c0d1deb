/* One direction of an emulated link: serialization at a rate behind a
 * byte-bounded queue, then the one-way delay (linkq.h). */
#include "linkq.h"

void chime__linkq_init(chime__linkq_t *q, uint64_t delay_ns, uint64_t rate_bps,
                       uint64_t queue_bytes, double loss, uint64_t seed) {
  *q = (chime__linkq_t){0};
  q->delay_ns = delay_ns;
  q->rate_bps = rate_bps;
  q->queue_bytes = queue_bytes;
  q->loss = loss;
  q->rng = seed != 0 ? seed : 0x9e3779b97f4a7c15u;
}

static double uniform01(chime__linkq_t *q) {
  uint64_t x = q->rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  q->rng = x;
  return (double)(x >> 11) / (double)(UINT64_C(1) << 53);
}

/* Nanoseconds to serialize len bytes at the rate. */
static uint64_t tx_ns(const chime__linkq_t *q, uint64_t len) {
  return q->rate_bps == 0 ? 0 : (len * 8 * UINT64_C(1000000000)) / q->rate_bps;
}

uint64_t chime__linkq_offer(chime__linkq_t *q, uint64_t now_ns, uint32_t len) {
  if (q->down) {
    q->down_dropped++;
    return 0;
  }
  if (q->every > 0 ? ++q->offered % q->every == 0
                   : q->loss > 0 && uniform01(q) < q->loss) {
    q->lost++;
    return 0;
  }
  uint64_t start = q->tx_free_ns > now_ns ? q->tx_free_ns : now_ns;
  if (q->rate_bps != 0) {
    /* the bytes still waiting ahead of this packet */
    uint64_t backlog =
        (uint64_t)((double)(start - now_ns) * (double)q->rate_bps / 8e9);
    if (backlog + len > q->queue_bytes && backlog > 0) {
      q->tail_dropped++;
      return 0;
    }
  }
  q->tx_free_ns = start + tx_ns(q, len);
  q->sent++;
  q->sent_bytes += len;
  return q->tx_free_ns + q->delay_ns;
}
