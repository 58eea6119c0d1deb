/* Stream mode, receiving side: each chunk's bytes go straight from gRPC's
 * slices into a slot of the local ring (one copy, no protobuf-c unpack). */
#include <inttypes.h>
#include <string.h>

#include "client/internal.h"
#include "wire/chunk.h"

int chime__remote_chunk(chime__remote_t *r, grpc_byte_buffer *bb, char *err,
                        size_t errlen) {
  if (bb->type != GRPC_BB_RAW || bb->data.raw.compression != GRPC_COMPRESS_NONE)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: compressed message not expected");
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  size_t msg_len = sb->length;

  /* The header may straddle slices: gather it first. */
  uint8_t hdr[CHIME_CHUNK_HEADER_MAX];
  size_t have = 0;
  for (size_t i = 0; i < sb->count && have < sizeof(hdr); i++) {
    size_t n = GRPC_SLICE_LENGTH(sb->slices[i]);
    if (n > sizeof(hdr) - have)
      n = sizeof(hdr) - have;
    memcpy(hdr + have, GRPC_SLICE_START_PTR(sb->slices[i]), n);
    have += n;
  }
  chime__chunk_t c;
  int rc = chime__chunk_parse(hdr, have, msg_len, &c);
  if (rc == CHIME_ENOTFOUND)
    return rc;
  if (rc)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: malformed chunk (%zu bytes)", msg_len);
  if (c.total != r->send_bytes)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: chunk of batch %" PRIu64 " says %" PRIu64
                       " bytes per batch, the layout says %" PRIu64,
                       c.seq, c.total, r->send_bytes);
  if (!r->active) {
    if (c.offset != 0)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: batch %" PRIu64 " starts at offset %" PRIu64
                         ", not 0",
                         c.seq, c.offset);
    uint64_t started = atomic_load(&r->started);
    if (started >= atomic_load(&r->granted))
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: server sent batch %" PRIu64
                         " beyond the %" PRIu64 " credits given",
                         c.seq, started);
    /* Credits keep a slot free; waiting only happens on a ring that reuses
     * slots in order, and chime_stream_close() shuts the ring to end it. */
    rc = chime_ring_acquire(r->ring, &r->w, -1);
    if (rc)
      return chime__fail(err, errlen, rc, "stream: local ring: %s",
                         chime_strerror(rc));
    r->active = 1;
    atomic_fetch_add(&r->started, 1); /* read by the learner's thread */
    r->seq = c.seq;
    r->received = 0;
  } else if (c.seq != r->seq || c.offset != r->received) {
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: expected batch %" PRIu64 " at offset %" PRIu64
                       ", got batch %" PRIu64 " at offset %" PRIu64,
                       r->seq, r->received, c.seq, c.offset);
  }

  uint8_t *dst = (uint8_t *)r->w.base + c.offset;
  size_t skip = c.header_len;
  for (size_t i = 0; i < sb->count; i++) {
    const uint8_t *p = GRPC_SLICE_START_PTR(sb->slices[i]);
    size_t n = GRPC_SLICE_LENGTH(sb->slices[i]);
    if (skip >= n) {
      skip -= n;
      continue;
    }
    memcpy(dst, p + skip, n - skip);
    dst += n - skip;
    skip = 0;
  }
  r->received += c.data_len;
  atomic_fetch_add_explicit(&r->bytes, c.data_len, memory_order_relaxed);
  if (r->received == r->send_bytes) {
    uint64_t seq;
    r->active = 0;
    r->slot_seq[r->w.slot] = r->seq;
    rc = chime_ring_publish(r->ring, r->w.slot, &seq);
    if (rc)
      return chime__fail(err, errlen, rc, "stream: local ring publish: %s",
                         chime_strerror(rc));
    r->batches++;
  }
  return 0;
}

void chime__remote_abandon(chime__remote_t *r) {
  if (r->active)
    chime_ring_abandon(r->ring, r->w.slot);
  r->active = 0;
}
