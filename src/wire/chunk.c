/* Chunk framing: protobuf bytes written and read by hand (see chunk.h). */
#include "wire/chunk.h"

#include "chime/errors.h"
#include "wire/pbwrite.h"

enum {
  TAG_CHUNK = (2 << 3) | 2,  /* SubscribeResponse.chunk, length-delimited */
  TAG_SEQ = (1 << 3) | 0,    /* Chunk.seq, varint */
  TAG_OFFSET = (2 << 3) | 0, /* Chunk.offset */
  TAG_TOTAL = (3 << 3) | 0,  /* Chunk.total */
  TAG_DATA = (4 << 3) | 2,   /* Chunk.data, length-delimited */
  /* Longest length prefix: protobuf-c refuses a longer one, even padded. */
  LEN_MAX = 5,
};

/* Returns bytes consumed, 0 on a truncated varint or one longer than max
 * bytes. */
static size_t varint_get(const uint8_t *p, size_t avail, size_t max,
                         uint64_t *out) {
  uint64_t v = 0;
  for (size_t i = 0; i < avail && i < max; i++) {
    v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
    if (!(p[i] & 0x80)) {
      *out = v;
      return i + 1;
    }
  }
  return 0;
}

size_t chime__chunk_header_encode(uint8_t *buf, uint64_t seq, uint64_t offset,
                                  uint64_t total, uint64_t data_len) {
  uint8_t inner[CHIME_CHUNK_HEADER_MAX];
  size_t n = 0;
  inner[n++] = TAG_SEQ;
  n += chime__pb_put_varint(inner + n, seq);
  inner[n++] = TAG_OFFSET;
  n += chime__pb_put_varint(inner + n, offset);
  inner[n++] = TAG_TOTAL;
  n += chime__pb_put_varint(inner + n, total);
  inner[n++] = TAG_DATA;
  n += chime__pb_put_varint(inner + n, data_len);

  size_t h = 0;
  buf[h++] = TAG_CHUNK;
  h += chime__pb_put_varint(buf + h, n + data_len);
  for (size_t i = 0; i < n; i++)
    buf[h++] = inner[i];
  return h;
}

int chime__chunk_parse(const uint8_t *p, size_t avail, size_t msg_len,
                       chime__chunk_t *out) {
  if (avail > msg_len)
    avail = msg_len;
  if (avail == 0 || p[0] != TAG_CHUNK)
    return CHIME_ENOTFOUND;
  size_t pos = 1;
  uint64_t inner_len = 0;
  size_t k = varint_get(p + pos, avail - pos, LEN_MAX, &inner_len);
  if (k == 0)
    return CHIME_EPROTO;
  pos += k;
  if (inner_len != msg_len - pos)
    return CHIME_EPROTO;

  uint64_t fields[4] = {0, 0, 0, 0};
  const uint8_t want[4] = {TAG_SEQ, TAG_OFFSET, TAG_TOTAL, TAG_DATA};
  for (int f = 0; f < 4; f++) {
    if (pos >= avail || p[pos] != want[f])
      return CHIME_EPROTO;
    pos++;
    k = varint_get(p + pos, avail - pos, want[f] == TAG_DATA ? LEN_MAX : 10,
                   &fields[f]);
    if (k == 0)
      return CHIME_EPROTO;
    pos += k;
  }
  out->seq = fields[0];
  out->offset = fields[1];
  out->total = fields[2];
  out->data_len = fields[3];
  out->header_len = pos;
  if (out->data_len != msg_len - pos)
    return CHIME_EPROTO;
  if (out->offset > out->total || out->data_len > out->total - out->offset)
    return CHIME_EPROTO;
  return 0;
}
