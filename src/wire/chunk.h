/* Hand-written framing of SubscribeResponse{chunk: Chunk{...}} so batch bytes
 * go from slot memory to the socket, and from the socket to a local slot,
 * without protobuf-c packing or unpacking the payload. The bytes are valid
 * protobuf for chime.v1.SubscribeResponse (see proto/chime.proto). */
#ifndef CHIME_WIRE_CHUNK_H
#define CHIME_WIRE_CHUNK_H

#include <stddef.h>
#include <stdint.h>

/* Longest header chime__chunk_header_encode() writes (1 + 10 for the outer
 * tag and length, 4 * 11 for the fields; 48 was too small for huge values). */
#define CHIME_CHUNK_HEADER_MAX 64

/* Stream mode's chunk payload, so that every message stays under 1 MiB
 * (the size gRPC's HTTP/2 writer aims a write at, chttp2's
 * target_write_size): a batch sent as one message of just over 1 MiB cost
 * chimed's sender 10-25% more per byte than the same batch as two smaller
 * messages; why is not established (docs/benchmarks.md, "Chunks under
 * 1 MiB"). The last chunk may carry a tail of CHIME__CHUNK_TAIL_BYTES
 * more (sender.c), plus its header and the HTTP/2 frame headers. */
#define CHIME__CHUNK_BYTES (896u << 10)
/* A batch's last bytes up to this many ride in its last chunk. */
#define CHIME__CHUNK_TAIL_BYTES (CHIME__CHUNK_BYTES / 16)
_Static_assert(CHIME__CHUNK_BYTES + CHIME__CHUNK_TAIL_BYTES + (64u << 10) <=
                   (1u << 20),
               "a chunk message must stay under gRPC's 1 MiB write target");

typedef struct {
  uint64_t seq;
  uint64_t offset;
  uint64_t total;
  uint64_t data_len;
  size_t header_len; /* data starts here in the message */
} chime__chunk_t;

/* Writes the message bytes that precede `data_len` payload bytes. Returns the
 * header length (<= CHIME_CHUNK_HEADER_MAX). */
size_t chime__chunk_header_encode(uint8_t *buf, uint64_t seq, uint64_t offset,
                                  uint64_t total, uint64_t data_len);

/* Parses a chunk header from the first `avail` bytes of a message that is
 * `msg_len` bytes long. Returns 0, CHIME_ENOTFOUND when the message is not a
 * chunk (unpack it with protobuf-c instead), or CHIME_EPROTO when it is a
 * malformed chunk (bad varint, payload not ending the message, offset + len
 * beyond total). */
int chime__chunk_parse(const uint8_t *p, size_t avail, size_t msg_len,
                       chime__chunk_t *out);

#endif
