/* A small, strict protobuf field reader over a message that arrived in
 * pieces (gRPC slices), so large fields can be located and copied where
 * they are going without first gathering the message into one buffer or
 * unpacking it with protobuf-c.
 *
 * Strict: a varint longer than 10 bytes or beyond 64 bits, a tag or a
 * length longer than 5 bytes (protobuf-c refuses those), a truncated field,
 * field number 0 or above 2^29 - 1, and the group wire types (3, 4) or unknown
 * ones (6, 7) are malformed. Unknown fields of the other wire types are for the
 * caller to skip (chime__pb_next already stepped over their bytes). */
#ifndef CHIME_WIRE_PBREAD_H
#define CHIME_WIRE_PBREAD_H

#include <stddef.h>
#include <stdint.h>

#include "common/span.h"

enum {
  CHIME__PB_VARINT = 0,
  CHIME__PB_I64 = 1,
  CHIME__PB_LEN = 2,
  CHIME__PB_I32 = 5,
};

typedef struct {
  uint32_t number;
  int wire;        /* CHIME__PB_* */
  uint64_t value;  /* varint, fixed64 or fixed32 value; LEN: the length */
  uint64_t offset; /* LEN: where its bytes start, from the message start */
} chime__pb_field_t;

typedef struct {
  const chime__span_t *spans;
  size_t nspans;
  size_t span, off; /* cursor: pos is off bytes into spans[span] */
  uint64_t pos;     /* from the message start */
  uint64_t end;     /* where this reader stops */
  uint64_t total;   /* bytes of the whole message */
} chime__pb_reader_t;

/* A reader over the whole message: the spans in order. */
void chime__pb_reader_init(chime__pb_reader_t *r, const chime__span_t *spans,
                           size_t nspans);
/* A reader over [offset, offset + len) of r's message (a LEN field's
 * bytes), positioned at its start. CHIME_EPROTO when outside the message. */
int chime__pb_reader_sub(chime__pb_reader_t *sub, const chime__pb_reader_t *r,
                         uint64_t offset, uint64_t len);
/* Bytes left in the reader. */
uint64_t chime__pb_left(const chime__pb_reader_t *r);

/* Reads the next field: 1 with *f, 0 at the end, CHIME_EPROTO when the
 * bytes are malformed. A LEN field's bytes are stepped over, not read. */
int chime__pb_next(chime__pb_reader_t *r, chime__pb_field_t *f);
/* Reads a varint / a little-endian fixed64 (packed repeated fields).
 * CHIME_EPROTO when truncated or over-long. */
int chime__pb_varint(chime__pb_reader_t *r, uint64_t *v);
int chime__pb_fixed64(chime__pb_reader_t *r, uint64_t *v);

/* Copies len bytes at offset of r's message into dst. CHIME_EPROTO when
 * outside the message. Offsets are found from r's cursor, so the cost is
 * the pieces between the two, not the whole message's: a field just read
 * (it ends at the cursor) is found in the pieces it covers. The same for
 * chime__pb_reader_sub and chime__pb_spans. */
int chime__pb_copy(const chime__pb_reader_t *r, uint64_t offset, void *dst,
                   uint64_t len);
/* The pieces of [offset, offset + len) of r's message, at most max of them;
 * returns how many there are (more than max: call again with room). */
size_t chime__pb_spans(const chime__pb_reader_t *r, uint64_t offset,
                       uint64_t len, chime__span_t *out, size_t max);

#endif
