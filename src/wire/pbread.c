/* A strict protobuf field reader over pieces of a message (see pbread.h). */
#include "wire/pbread.h"

#include <string.h>

#include "chime/errors.h"

void chime__pb_reader_init(chime__pb_reader_t *r, const chime__span_t *spans,
                           size_t nspans) {
  uint64_t total = 0;
  for (size_t i = 0; i < nspans; i++)
    total += spans[i].len;
  memset(r, 0, sizeof(*r));
  r->spans = spans;
  r->nspans = nspans;
  r->end = total;
  r->total = total;
}

uint64_t chime__pb_left(const chime__pb_reader_t *r) {
  return r->end - r->pos;
}

/* Moves the cursor n bytes on; the caller checked n <= left. */
static void advance(chime__pb_reader_t *r, uint64_t n) {
  r->pos += n;
  while (n > 0) {
    size_t avail = r->spans[r->span].len - r->off;
    if (avail == 0) {
      r->span++;
      r->off = 0;
      continue;
    }
    size_t take = n < avail ? (size_t)n : avail;
    r->off += take;
    n -= take;
  }
}

/* The span and offset in it of message byte `offset` (<= the total),
 * walked to from r's cursor rather than from the start: parsing a message
 * of many small fields in many pieces stays linear (from the start, every
 * field cost every piece before it). Past the last piece: nspans, 0. */
static void locate(const chime__pb_reader_t *r, uint64_t offset, size_t *span,
                   size_t *off) {
  size_t i = r->span;
  uint64_t start = r->pos - r->off; /* where spans[i] starts */
  while (offset < start) {
    i--;
    start -= r->spans[i].len;
  }
  while (i < r->nspans && offset - start >= r->spans[i].len) {
    start += r->spans[i].len;
    i++;
  }
  *span = i;
  *off = (size_t)(offset - start);
}

int chime__pb_reader_sub(chime__pb_reader_t *sub, const chime__pb_reader_t *r,
                         uint64_t offset, uint64_t len) {
  uint64_t total = r->total;
  if (offset > total || len > total - offset)
    return CHIME_EPROTO;
  *sub = *r;
  locate(r, offset, &sub->span, &sub->off);
  sub->pos = offset;
  sub->end = offset + len;
  return 0;
}

static int get_byte(chime__pb_reader_t *r, uint8_t *b) {
  if (r->pos >= r->end)
    return CHIME_EPROTO;
  while (r->off >= r->spans[r->span].len) {
    r->span++;
    r->off = 0;
  }
  *b = r->spans[r->span].p[r->off++];
  r->pos++;
  return 0;
}

int chime__pb_varint(chime__pb_reader_t *r, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 10; i++) {
    uint8_t b;
    if (get_byte(r, &b) != 0)
      return CHIME_EPROTO;
    /* The tenth byte holds bit 63 only. */
    if (i == 9 && b > 1)
      return CHIME_EPROTO;
    x |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return CHIME_EPROTO;
}

static int fixed(chime__pb_reader_t *r, int n, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < n; i++) {
    uint8_t b;
    if (get_byte(r, &b) != 0)
      return CHIME_EPROTO;
    x |= (uint64_t)b << (8 * i);
  }
  *v = x;
  return 0;
}

int chime__pb_fixed64(chime__pb_reader_t *r, uint64_t *v) {
  return fixed(r, 8, v);
}

int chime__pb_next(chime__pb_reader_t *r, chime__pb_field_t *f) {
  uint64_t tag, start = r->pos;
  if (r->pos >= r->end)
    return 0;
  /* A tag is a uint32: five bytes at most, padded or not (protobuf-c refuses
   * a longer one, and both ends must agree on what a message is). */
  if (chime__pb_varint(r, &tag) != 0 || r->pos - start > 5 ||
      tag > UINT32_MAX || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
    return CHIME_EPROTO;
  f->number = (uint32_t)(tag >> 3);
  f->wire = (int)(tag & 7);
  f->value = 0;
  f->offset = 0;
  switch (f->wire) {
  case CHIME__PB_VARINT:
    return chime__pb_varint(r, &f->value) == 0 ? 1 : CHIME_EPROTO;
  case CHIME__PB_I64:
    return fixed(r, 8, &f->value) == 0 ? 1 : CHIME_EPROTO;
  case CHIME__PB_I32:
    return fixed(r, 4, &f->value) == 0 ? 1 : CHIME_EPROTO;
  case CHIME__PB_LEN:
    /* Like a tag, a length is five bytes at most for protobuf-c. */
    start = r->pos;
    if (chime__pb_varint(r, &f->value) != 0 || r->pos - start > 5 ||
        f->value > chime__pb_left(r))
      return CHIME_EPROTO;
    f->offset = r->pos;
    advance(r, f->value);
    return 1;
  default: /* groups (3, 4) and the unassigned 6, 7 */
    return CHIME_EPROTO;
  }
}

int chime__pb_copy(const chime__pb_reader_t *r, uint64_t offset, void *dst,
                   uint64_t len) {
  uint64_t total = r->total;
  size_t span, off;
  uint8_t *d = dst;
  if (offset > total || len > total - offset)
    return CHIME_EPROTO;
  locate(r, offset, &span, &off);
  while (len > 0) {
    size_t avail = r->spans[span].len - off;
    size_t take = len < avail ? (size_t)len : avail;
    memcpy(d, r->spans[span].p + off, take);
    d += take;
    len -= take;
    span++;
    off = 0;
  }
  return 0;
}

size_t chime__pb_spans(const chime__pb_reader_t *r, uint64_t offset,
                       uint64_t len, chime__span_t *out, size_t max) {
  size_t span, off, n = 0;
  locate(r, offset, &span, &off);
  while (len > 0 && span < r->nspans) {
    size_t avail = r->spans[span].len - off;
    size_t take = len < avail ? (size_t)len : avail;
    if (take > 0) {
      if (n < max) {
        out[n].p = r->spans[span].p + off;
        out[n].len = take;
      }
      n++;
    }
    len -= take;
    span++;
    off = 0;
  }
  return n;
}
