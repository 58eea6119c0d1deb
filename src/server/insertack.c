/* Insert's ack (insertack.h): keys, and the groups a filter dropped. */
#include "server/insertack.h"

#include <stdlib.h>
#include <string.h>

#include "chime.pb-c.h"
#include "common/clock.h"

uint8_t *chime__insert_drops_for(chime__insert_drops_t *d, uint32_t count,
                                 int filters) {
  if (!filters || count == 0)
    return NULL;
  if (d->cap < count) {
    uint8_t *r = realloc(d->r, count);
    if (r == NULL)
      return NULL;
    d->r = r;
    d->cap = count;
  }
  memset(d->r, 0, count);
  return d->r;
}

void chime__insert_drops_free(chime__insert_drops_t *d) {
  free(d->r);
  d->r = NULL;
  d->cap = 0;
}

void chime__insert_send_ack(chime__call_t *c, uint64_t id, uint32_t count,
                            uint64_t first_key, const uint8_t *drop,
                            chime__insert_beat_t *beat) {
  Chime__V1__InsertAck ack = CHIME__V1__INSERT_ACK__INIT;
  ack.heartbeat_ms = atomic_load(&beat->ms);
  atomic_store(&beat->sent_ns, chime__now_ns());
  ack.id = id;
  ack.count = count;
  ack.first_key = first_key;
  uint32_t n = 0, *idx = NULL, *why = NULL;
  for (uint32_t j = 0; drop != NULL && j < count; j++)
    n += drop[j] != 0;
  if (n > 0 && (idx = malloc(2 * (size_t)n * sizeof(*idx))) != NULL) {
    why = idx + n;
    for (uint32_t j = 0, k = 0; j < count; j++)
      if (drop[j] != 0) {
        idx[k] = j;
        why[k++] = drop[j];
      }
    ack.n_dropped = ack.n_dropped_reasons = n;
    ack.dropped = idx;
    ack.dropped_reasons = why;
  }
  chime__call_send_msg(c, &ack);
  free(idx);
}

void chime__insert_beat(chime__call_t *c, chime__insert_beat_t *beat,
                        uint64_t now_ns) {
  uint64_t every_ns = (uint64_t)atomic_load(&beat->ms) * 1000000u;
  if (every_ns == 0 || now_ns - atomic_load(&beat->sent_ns) < every_ns ||
      chime__call_sending(c))
    return;
  Chime__V1__InsertAck hb = CHIME__V1__INSERT_ACK__INIT;
  hb.heartbeat = 1;
  hb.heartbeat_ms = atomic_load(&beat->ms);
  if (chime__call_send_msg(c, &hb) == 0)
    atomic_store(&beat->sent_ns, now_ns);
}
