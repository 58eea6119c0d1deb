/* libFuzzer target: stream-mode messages as the client receives them: the
 * chunk header (src/wire/chunk.c) and the assembly of chunks into a local
 * ring (src/client/mode_stream.c), without a gRPC connection: each message is a
 * grpc_byte_buffer built from pieces, as a completed receive hands it over.
 *
 * Input: a sequence of records, each
 *   [ctl][n][n piece lengths][len lo][len hi][len bytes of message]
 * ctl bit 0: after the message, the learner takes a batch, releases it and
 * returns a credit; bit 1: the stream ends mid-batch (abandon), as on close;
 * bit 7 of the first record's: the ring's spec has ragged leaves, so a
 * batch is its extents, offsets first, checked before a leaf byte lands;
 * bit 6 (without 7): a leaf travels compressed (frames), landing as the
 * server's slot holds it and decompressed into the local slot, each
 * sample's bytes the raw leaf or a zstd frame of exactly the leaf, the
 * batch's tail packed (replay/ztail.h: a stored size, then a zstd frame
 * of exactly the tail, or the tail); with bit 5 as well, x is a sequence
 * table's window of steps, each step's stored bytes after their sizes.
 * A message that is not a chunk is unpacked whole as the client does; a
 * notice with UNAVAILABLE shuts the ring, as a server shutdown does.
 *
 * Beyond "no crash": the parser agrees with protobuf-c on every chunk it
 * accepts and with itself on a header cut at CHIME_CHUNK_HEADER_MAX bytes;
 * re-encoding what it read parses back the same; and the remote side never
 * starts more batches than credits, never overruns a batch, and publishes
 * exactly the bytes the chunks of that batch carried (ragged: each where
 * the published offsets, which hold, put it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "chime.pb-c.h"
#include "chime/ring.h"
#include "client/stream.h"
#include "common/spec.h"
#include "replay/ztail.h"
#include "wire/chunk.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One connection only here (r->lanes NULL): lanes.c links, and what it
 * needs of the client and the stream is never called. */
int chime__conn_again(chime_client_t **out, const chime_client_t *like) {
  (void)like;
  *out = NULL;
  return CHIME_ENOTSUP;
}
void chime__conn_destroy(chime_client_t *client) {
  (void)client;
}
void chime__stream_cut(chime_stream_t *s, int code, const char *why) {
  (void)s, (void)code, (void)why;
}

static chime_spec_t spec, ragged_spec, framed_spec, framed_wire, window_spec,
    window_wire;
static const uint8_t framed_mask[CHIME_MAX_LEAVES] = {1};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  grpc_init();
  FUZZ_CHECK(chime_spec_parse(&spec, FUZZ_CHUNK_SPEC) == 0);
  FUZZ_CHECK(chime_spec_parse(&ragged_spec, FUZZ_CHUNK_RAGGED_SPEC) == 0);
  FUZZ_CHECK(chime_spec_parse(&framed_spec, FUZZ_CHUNK_FRAMED_SPEC) == 0);
  FUZZ_CHECK(chime__spec_framed(&framed_wire, &framed_spec, framed_mask) == 0);
  FUZZ_CHECK(chime_spec_parse(&window_spec, FUZZ_CHUNK_WINDOW_SPEC) == 0);
  FUZZ_CHECK(chime__spec_framed_steps(&window_wire, &window_spec, framed_mask,
                                      FUZZ_CHUNK_WINDOW_STEPS) == 0);
  return 0;
}

/* The header parser on its own. Returns its result for the whole message. */
static int check_parse(const uint8_t *msg, size_t len, chime__chunk_t *c) {
  int rc = chime__chunk_parse(msg, len, len, c);
  FUZZ_CHECK(rc == 0 || rc == CHIME_ENOTFOUND || rc == CHIME_EPROTO);

  /* mode_stream.c parses from at most CHIME_CHUNK_HEADER_MAX gathered bytes. */
  chime__chunk_t head;
  size_t avail = len < CHIME_CHUNK_HEADER_MAX ? len : CHIME_CHUNK_HEADER_MAX;
  int rc_head = chime__chunk_parse(msg, avail, len, &head);
  if (rc_head == 0) {
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(memcmp(&head, c, sizeof(head)) == 0);
  }
  if (rc != 0)
    return rc;

  FUZZ_CHECK(c->header_len <= len && c->data_len == len - c->header_len);
  FUZZ_CHECK(c->offset <= c->total && c->data_len <= c->total - c->offset);

  Chime__V1__SubscribeResponse *m =
      chime__v1__subscribe_response__unpack(NULL, len, msg);
  FUZZ_CHECK(m != NULL);
  FUZZ_CHECK(m->kind_case == CHIME__V1__SUBSCRIBE_RESPONSE__KIND_CHUNK);
  FUZZ_CHECK(m->chunk->seq == c->seq && m->chunk->offset == c->offset &&
             m->chunk->total == c->total);
  FUZZ_CHECK(m->chunk->data.len == c->data_len);
  FUZZ_CHECK(c->data_len == 0 || memcmp(m->chunk->data.data,
                                        msg + c->header_len, c->data_len) == 0);
  chime__v1__subscribe_response__free_unpacked(m, NULL);

  uint8_t hdr[CHIME_CHUNK_HEADER_MAX];
  size_t h =
      chime__chunk_header_encode(hdr, c->seq, c->offset, c->total, c->data_len);
  FUZZ_CHECK(h <= CHIME_CHUNK_HEADER_MAX);
  chime__chunk_t again;
  FUZZ_CHECK(chime__chunk_parse(hdr, h, h + c->data_len, &again) == 0);
  FUZZ_CHECK(again.seq == c->seq && again.offset == c->offset &&
             again.total == c->total && again.data_len == c->data_len &&
             again.header_len == h);
  return 0;
}

static void release_piece(void *p) {
  free(p);
}

static grpc_byte_buffer *message(const uint8_t *msg, size_t len,
                                 const uint8_t *cuts, size_t ncuts) {
  static fuzz_piece_t pieces[FUZZ_MAX_PIECES];
  static grpc_slice slices[FUZZ_MAX_PIECES];
  size_t n = fuzz_split(msg, len, cuts, ncuts, pieces);
  for (size_t i = 0; i < n; i++)
    slices[i] = grpc_slice_new(pieces[i].p, pieces[i].len, release_piece);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, n);
  for (size_t i = 0; i < n; i++)
    grpc_slice_unref(slices[i]);
  return bb;
}

/* Not a chunk: the client unpacks it whole (chime__unpack, as stream.c's
 * on_message does). The notice's code, or -1 when it is not a notice. */
static int notice_code(grpc_byte_buffer *bb) {
  Chime__V1__SubscribeResponse *m =
      (Chime__V1__SubscribeResponse *)chime__unpack(
          &chime__v1__subscribe_response__descriptor, bb);
  int code = -1;
  if (m != NULL && m->kind_case == CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE)
    code = m->notice->code < 0 ? 0 : (int)m->notice->code;
  if (m != NULL)
    protobuf_c_message_free_unpacked(&m->base, NULL);
  return code;
}

/* A ragged batch just published in the slot at base: its offsets hold,
 * its extents add up to what was received, and each holds the bytes that
 * came for it (image: the batch's bytes as sent). */
static void check_ragged(const chime_ring_layout_t *l, const chime_spec_t *sp,
                         const uint8_t *base, const uint8_t *image,
                         uint64_t received) {
  chime__extents_t x;
  FUZZ_CHECK(chime__slot_extents(l, sp, base, &x, NULL, 0) == 0);
  FUZZ_CHECK(x.total == received);
  uint64_t at = 0;
  for (uint32_t i = 0; i < x.n; i++) {
    FUZZ_CHECK(x.e[i].off + x.e[i].len <= l->slot_bytes);
    FUZZ_CHECK(memcmp(base + x.e[i].off, image + at, x.e[i].len) == 0);
    at += x.e[i].len;
  }
}

/* A framed batch just published (it landed in r->wire, which holds): its
 * packed tail unpacks to the tail there, the leaves' extents after it
 * hold the bytes that came for them, and in the local slot at base each
 * sample's x is its bytes decompressed (or copied, when as long as the
 * leaf), y and the info as they came. */
/* What a sample's stored bytes (k at src) make of the leaf (n bytes into
 * got), as libzstd alone reads them: the leaf as it is, one frame of it,
 * or (steps) the steps' sizes and each step so (size 0: zeros). */
static void expect_leaf(uint8_t *got, size_t n, const uint8_t *src, size_t k,
                        uint32_t steps) {
  if (steps == 0) {
    if (k == n)
      memcpy(got, src, k);
    else
      FUZZ_CHECK(ZSTD_decompress(got, n, src, k) == n);
    return;
  }
  size_t lb = n / steps, at = 4 * (size_t)steps;
  for (uint32_t i = 0; i < steps; i++) {
    uint32_t s;
    memcpy(&s, src + 4 * i, 4);
    FUZZ_CHECK(s <= lb && at + s <= k);
    if (s == 0)
      memset(got + i * lb, 0, lb);
    else
      expect_leaf(got + i * lb, lb, src + at, s, 0);
    at += s;
  }
  FUZZ_CHECK(at == k);
}

static void check_framed(const chime__remote_t *r, const uint8_t *base,
                         const uint8_t *image) {
  const chime_ring_layout_t *ll = chime_ring_layout(r->ring);
  chime__extents_t x;
  FUZZ_CHECK(chime__slot_extents(&r->wlay, r->spec, r->wire, &x, NULL, 0) == 0);
  size_t stored = 0, n = (size_t)r->ztail;
  FUZZ_CHECK(chime__ztail_stored(image, n, &stored) == 0);
  uint64_t at = CHIME__ZTAIL_HEAD + stored;
  FUZZ_CHECK(x.n > 0 && x.e[0].off == r->tail && x.e[0].len == n);
  FUZZ_CHECK(x.total - n + at == r->received);
  uint8_t *t = malloc(2 * n);
  FUZZ_CHECK(t != NULL);
  FUZZ_CHECK(
      chime__ztail_unpack(t, n, FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t),
                          image + CHIME__ZTAIL_HEAD, stored, t + n) == 0);
  FUZZ_CHECK(memcmp(t, r->wire + r->tail, n) == 0);
  free(t);
  for (uint32_t i = 1; i < x.n; i++) {
    FUZZ_CHECK(x.e[i].off + x.e[i].len <= r->wlay.slot_bytes);
    FUZZ_CHECK(memcmp(r->wire + x.e[i].off, image + at, x.e[i].len) == 0);
    at += x.e[i].len;
  }
  const int64_t *o = (const int64_t *)(r->wire + r->wlay.offsets_offset[0]);
  const uint8_t *xs = r->wire + r->wlay.leaf_offset[0];
  for (uint32_t j = 0; j < FUZZ_CHUNK_BATCH; j++) {
    uint8_t got[FUZZ_CHUNK_FRAMED_LEAF];
    expect_leaf(got, sizeof(got), xs + o[j], (size_t)(o[j + 1] - o[j]),
                r->steps);
    FUZZ_CHECK(memcmp(base + ll->leaf_offset[0] + sizeof(got) * j, got,
                      sizeof(got)) == 0);
  }
  FUZZ_CHECK(memcmp(base + ll->leaf_offset[1], r->wire + r->wlay.leaf_offset[1],
                    4 * FUZZ_CHUNK_BATCH) == 0);
  FUZZ_CHECK(memcmp(base + ll->info_offset, r->wire + r->wlay.info_offset,
                    FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  chime_ring_t *ring;
  int framed = size > 0 && (data[0] & 0xC0) == 0x40;
  int window = framed && (data[0] & 0x20);
  const chime_spec_t *sp = size > 0 && (data[0] & 0x80) ? &ragged_spec
                           : window                     ? &window_spec
                           : framed                     ? &framed_spec
                                                        : &spec;
  FUZZ_CHECK(
      chime__ring_create(&ring, sp, FUZZ_CHUNK_BATCH, FUZZ_CHUNK_SLOTS) == 0);
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  chime__remote_t r;
  uint64_t slot_seq[FUZZ_CHUNK_SLOTS];
  memset(&r, 0, sizeof(r));
  r.ring = ring;
  r.slot_seq = slot_seq;
  r.send_bytes =
      l->info_offset + FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t);
  if (framed) { /* batches land as the server's slot holds them */
    const chime_spec_t *ws = window ? &window_wire : &framed_wire;
    FUZZ_CHECK(chime_ring_layout_compute(&r.wlay, ws, FUZZ_CHUNK_BATCH,
                                         FUZZ_CHUNK_SLOTS) == 0);
    r.unframe = framed_mask;
    r.steps = window ? FUZZ_CHUNK_WINDOW_STEPS : 0;
    r.send_bytes =
        r.wlay.info_offset + FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t);
    FUZZ_CHECK(chime__remote_wire_alloc(&r, ws) == 0);
  } else {
    chime__remote_set_spec(&r, sp);
  }
  /* A packed tail may take its head more than the tail itself. */
  uint64_t most = r.send_bytes + (framed ? CHIME__ZTAIL_HEAD : 0);
  /* As chime_stream_open: the server may run slots - 1 batches ahead. */
  atomic_store(&r.granted, FUZZ_CHUNK_SLOTS - 1);
  /* What the batch being received should hold, from the chunks parsed. */
  uint8_t *image = calloc(1, most);
  FUZZ_CHECK(image != NULL);

  size_t pos = 0;
  while (size - pos >= 4) {
    uint8_t ctl = data[pos++];
    const uint8_t *cuts;
    size_t ncuts;
    size_t k = fuzz_cuts(data + pos, size - pos, &cuts, &ncuts);
    if (k == 0 || size - pos - k < 2)
      break;
    pos += k;
    size_t len = (size_t)data[pos] | (size_t)data[pos + 1] << 8;
    pos += 2;
    if (len > size - pos)
      len = size - pos;
    const uint8_t *msg = data + pos;
    pos += len;

    chime__chunk_t c;
    int parsed = check_parse(msg, len, &c);
    uint64_t batches = r.batches;
    grpc_byte_buffer *bb = message(msg, len, cuts, ncuts);
    char err[512];
    int rc = chime__remote_chunk(&r, bb, err, sizeof(err));
    int notice = rc == CHIME_ENOTFOUND ? notice_code(bb) : -1;
    grpc_byte_buffer_destroy(bb);
    FUZZ_CHECK(rc == 0 || rc == CHIME_ENOTFOUND || rc == CHIME_EPROTO ||
               rc == CHIME_ESHUTDOWN);
    FUZZ_CHECK(rc != CHIME_ENOTFOUND || parsed == CHIME_ENOTFOUND);
    FUZZ_CHECK(rc != 0 || parsed == 0);
    FUZZ_CHECK(r.received <= most);
    FUZZ_CHECK(atomic_load(&r.started) <= atomic_load(&r.granted));
    /* The stream ends on a protocol error, a message that is neither a
     * chunk nor a notice, and once the ring is shut. */
    if (rc == CHIME_EPROTO || rc == CHIME_ESHUTDOWN ||
        (rc == CHIME_ENOTFOUND && notice < 0))
      break;
    if (notice == GRPC_STATUS_UNAVAILABLE)
      chime__ring_shutdown(ring); /* as on_message() in stream.c */
    if (rc == 0) {
      memcpy(image + c.offset, msg + c.header_len, c.data_len);
      if (r.batches != batches) {
        const uint8_t *base = chime_ring_slot_base(ring, r.w.slot);
        if (framed)
          check_framed(&r, base, image);
        else if (r.tail != 0)
          check_ragged(l, sp, base, image, r.received);
        else
          FUZZ_CHECK(memcmp(base, image, r.send_bytes) == 0);
        memset(image, 0, most);
      }
    }
    if (ctl & 1) {
      chime_ring_view_t v;
      if (chime_ring_next(ring, &v, 0) == 0) {
        FUZZ_CHECK(chime_ring_release(ring, v.slot) == 0);
        atomic_fetch_add(&r.granted, 1);
      }
    }
    if (ctl & 2) {
      chime__remote_abandon(&r);
      break;
    }
  }
  chime__remote_abandon(&r);
  chime_ring_destroy(ring);
  free(image);
  free(r.wire);
  return 0;
}
