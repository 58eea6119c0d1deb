/* Stream mode's window: the bytes a remote stream keeps in flight. A
 * pipelined stream moves at most (slots - 1) x batch bytes per round trip,
 * so a fixed count of slots that fills a loopback link starves one across
 * a region (8 slots of 64 KiB at 10 ms: 0.19x raw TCP). Before Open the
 * client times its GetInfo (the round trip, server time included) and
 * grows the ring's slots until they cover twice the bytes a link of
 * AIM_BYTES_PER_S moves in that round trip, bounded by the stream's
 * max_inflight_bytes (docs/remote.md). Twice: the learner's releases go
 * back as credits in half windows (mode_stream.c), and a window that only just
 * covers the round trip leaves the link idle while one is on its way. */
#include <string.h>

#include "client/stream.h"
#include "wire/credit.h"
#include "ring/layout.h"

/* 10 Gb/s: more than one TCP flow carries across a WAN. */
#define AIM_BYTES_PER_S 1250000000ull
/* A round trip longer than this is not a link's (a stalled server). */
#define RTT_MAX_NS 10000000000ull
/* One shorter is a host's or a rack's: the asked slots keep up there
 * (loopback: 8 slots of 64 KiB already move 1 GB/s per 0.5 ms), and the
 * ring stays what the learner asked for. */
#define RTT_LOCAL_NS 500000ull

uint32_t chime__window_slots(uint32_t asked, uint64_t batch_bytes,
                             uint64_t rtt_ns, uint64_t max_inflight,
                             uint32_t lanes) {
  if (batch_bytes == 0 || rtt_ns < RTT_LOCAL_NS)
    return asked;
  if (rtt_ns > RTT_MAX_NS)
    rtt_ns = RTT_MAX_NS;
  uint64_t want = 2 * (AIM_BYTES_PER_S * rtt_ns / 1000000000ull);
  /* Over several connections the server deals whole batches, each to one
   * lane: two on each (one on the wire, one queued behind it) keep every
   * connection sending, where one connection in loss recovery would
   * otherwise hold a share of the window (docs/remote.md, "More
   * connections"). */
  if (lanes > 1 && want < 2ull * lanes * batch_bytes)
    want = 2ull * lanes * batch_bytes;
  if (want > max_inflight)
    want = max_inflight;
  /* slots - 1 are lent: one more, and one for the division's remainder */
  uint64_t n = want / batch_bytes + 2;
  if (n > CHIME_RING_MAX_SLOTS)
    n = CHIME_RING_MAX_SLOTS;
  return n > asked ? (uint32_t)n : asked;
}

/* A GetInfo that took longer than a local round trip may have waited for
 * the channel to connect (TCP and HTTP/2 handshakes: round trips of their
 * own), or for a busy host: the quickest of PROBES is the round trip. Only
 * a link pays for them (a round trip each); a local server almost always
 * answers one of them in time. */
#define PROBES 3

int chime__window_lookup(chime_stream_t *s, chime_table_info_t *ti,
                         chime_server_info_t **info, uint64_t *rtt_ns,
                         char *err, size_t errlen) {
  uint64_t t0 = chime__now_ns();
  int rc = chime__table_lookup(s->client, s->table, ti, info, err, errlen);
  *rtt_ns = chime__now_ns() - t0;
  for (int i = 1; rc == 0 && i < PROBES && *rtt_ns >= RTT_LOCAL_NS; i++) {
    chime_table_info_t again;
    char why[CHIME__ERRLEN];
    t0 = chime__now_ns();
    if (chime__table_lookup(s->client, s->table, &again, NULL, why,
                            sizeof(why)) != 0)
      break;
    uint64_t t = chime__now_ns() - t0;
    if (t < *rtt_ns)
      *rtt_ns = t;
  }
  return rc;
}

/* Whether a one-server target names this host's loopback or a Unix
 * socket: no link to cover, whatever a busy server's GetInfo took (256
 * streams opening at once must not each take a link's window). */
static int loopback(const char *target) {
  static const char *const schemes[] = {"dns:///", "dns:", "ipv4:", "ipv6:"};
  if (target == NULL)
    return 0;
  if (strncmp(target, "unix", 4) == 0)
    return 1;
  for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
    if (strncmp(target, schemes[i], strlen(schemes[i])) == 0) {
      target += strlen(schemes[i]);
      break;
    }
  return strncmp(target, "127.", 4) == 0 ||
         strncmp(target, "localhost", 9) == 0 ||
         strncmp(target, "[::1]", 5) == 0;
}

void chime__window_size(chime_stream_t *s, const chime_table_info_t *ti,
                        uint64_t rtt_ns) {
  s->rtt_ns = rtt_ns;
  if (s->opts.prefetch != 0 || loopback(s->client->address))
    return;
  chime_ring_layout_t lay;
  char why[256];
  if (chime__ring_layout(&lay, &ti->spec, s->opts.batch_size, 2, why,
                         sizeof(why)) != 0)
    return; /* Open says why */
  uint64_t max = s->opts.max_inflight_bytes != 0 ? s->opts.max_inflight_bytes
                                                 : CHIME_MAX_INFLIGHT_BYTES;
  s->opts.slots =
      chime__window_slots(s->asked_slots, chime__slot_send_bytes(&lay), rtt_ns,
                          max, s->opts.connections);
  s->prefetch = chime__credits_initial(0, s->opts.slots);
}

int chime__window_shrink(chime_stream_t *s) {
  if (s->opts.slots <= s->asked_slots)
    return 0;
  s->opts.slots = s->asked_slots + (s->opts.slots - s->asked_slots) / 2;
  s->prefetch = chime__credits_initial(s->opts.prefetch, s->opts.slots);
  return 1;
}
