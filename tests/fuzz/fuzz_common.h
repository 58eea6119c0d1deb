/* What the fuzz targets share: a check that aborts (libFuzzer reports it as a
 * crash, NDEBUG or not), the way an input names the pieces a message arrives
 * in, and the ring the chunk target fills (the seed generator writes chunks
 * for the same ring). */
#ifndef CHIME_FUZZ_COMMON_H
#define CHIME_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/span.h"

#define FUZZ_CHECK(cond)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* The chunk target's local ring: small, so a batch is a few chunks. */
#define FUZZ_CHUNK_SPEC "x:u8[8],y:f32[]"
/* ... or, when the first record's ctl has bit 7 set, ragged leaves (a
 * batch sends its extents: ring/extents.h). */
#define FUZZ_CHUNK_RAGGED_SPEC "t:u8[<=5],u:u8[<=5 ~t],v:u8[<=3,2],y:f32[]"
/* ... or, with bit 6 instead, x compressed (docs/replay.md, "Compressed
 * leaves"): it travels as its stored bytes, a ragged u8 leaf bounded by
 * its 64 bytes, and the client decompresses each into its local slot. */
#define FUZZ_CHUNK_FRAMED_SPEC "x:u8[64],y:f32[]"
#define FUZZ_CHUNK_FRAMED_LEAF 64
/* ... or, with bits 6 and 5, a sequence table's window of 2 steps of x
 * compressed: its stored bytes are 2 u32 stored sizes (0: a padded step)
 * and the steps' stored bytes (docs/protocol.md, "A window's frames"). */
#define FUZZ_CHUNK_WINDOW_SPEC "x:u8[2,32],y:f32[]"
#define FUZZ_CHUNK_WINDOW_STEPS 2u
#define FUZZ_CHUNK_BATCH 2u
#define FUZZ_CHUNK_SLOTS 4u

/* Most pieces one message is cut into. */
#define FUZZ_MAX_PIECES 512

/* One piece of a message in its own heap block of exactly its length, so a
 * read past the end of a piece is an ASan report, not a read of the next
 * piece's bytes. */
typedef struct {
  uint8_t *p;
  size_t len;
} fuzz_piece_t;

/* An input's cut list: [n][n piece lengths], n = first byte % 8. Sets *cuts
 * and *ncuts and returns the bytes it took; 0 (nothing set) when the input
 * is too short to hold it. */
static inline size_t fuzz_cuts(const uint8_t *data, size_t size,
                               const uint8_t **cuts, size_t *ncuts) {
  if (size < 1)
    return 0;
  size_t n = data[0] % 8;
  if (size < 1 + n)
    return 0;
  *cuts = data + 1;
  *ncuts = n;
  return 1 + n;
}

/* Cuts msg into pieces whose lengths cycle through cuts (0: an empty piece,
 * as gRPC may hand over); the last piece takes the rest. No cuts: one piece.
 * Returns how many pieces; free them with fuzz_pieces_free. */
static inline size_t fuzz_split(const uint8_t *msg, size_t len,
                                const uint8_t *cuts, size_t ncuts,
                                fuzz_piece_t *out) {
  size_t n = 0, pos = 0;
  while (ncuts > 0 && n < FUZZ_MAX_PIECES - 1) {
    size_t take = cuts[n % ncuts];
    if (take >= len - pos)
      break;
    out[n].len = take;
    out[n].p = malloc(take ? take : 1);
    FUZZ_CHECK(out[n].p != NULL);
    memcpy(out[n].p, msg + pos, take);
    pos += take;
    n++;
  }
  out[n].len = len - pos;
  out[n].p = malloc(len - pos ? len - pos : 1);
  FUZZ_CHECK(out[n].p != NULL);
  memcpy(out[n].p, msg + pos, len - pos);
  return n + 1;
}

/* An input [n][n piece lengths][message] as the message (*msg, *len) in
 * the pieces fuzz_split cuts it into, each also as a span: how many; 0
 * (nothing to free) when the input is too short to hold its cut list. */
static inline size_t fuzz_message(const uint8_t *data, size_t size,
                                  fuzz_piece_t *pieces, chime__span_t *spans,
                                  const uint8_t **msg, size_t *len) {
  const uint8_t *cuts;
  size_t ncuts, skip = fuzz_cuts(data, size, &cuts, &ncuts);
  if (skip == 0)
    return 0;
  *msg = data + skip;
  *len = size - skip;
  size_t n = fuzz_split(*msg, *len, cuts, ncuts, pieces);
  for (size_t i = 0; i < n; i++)
    spans[i] = (chime__span_t){pieces[i].p, pieces[i].len};
  return n;
}

static inline void fuzz_pieces_free(fuzz_piece_t *pieces, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(pieces[i].p);
}

#endif
