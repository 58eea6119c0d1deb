/* Writes the fuzz targets' seed corpora: a few valid inputs and edges for
 * each, in the input format each target documents. The corpora checked in
 * under tests/fuzz/corpus/ came from this program (regression inputs for
 * bugs the fuzzers found are added there by hand, named after the bug).
 *
 * Usage: fuzz_gen_seeds DIR   (writes DIR/insertreq, DIR/zinsert, DIR/chunk,
 *                              DIR/ring_attach, DIR/config, DIR/handoff,
 *                              DIR/requests; the folders must exist) */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "chime.pb-c.h"
#include "chime/ring.h"
#include "common/spec.h"
#include "replay/ztail.h"
#include "ring/producer.h"
#include "ring/ring_internal.h"
#include "wire/chunk.h"
#include "wire/handoff_bytes.h"
#include "fuzz_common.h"
#include "gen_seeds.h"

static const char *out_dir;

void fuzz_seed_put(const char *target, const char *name, const uint8_t *p,
                   size_t len) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "fuzz_gen_seeds: %s: %s\n", path, strerror(errno));
    exit(1);
  }
}

/* --- insertreq: [n][n piece lengths][InsertRequest] --- */

static void put_insert(const char *name, const uint8_t *cuts, size_t ncuts,
                       const uint8_t *msg, size_t len) {
  uint8_t buf[4096];
  FUZZ_CHECK(1 + ncuts + len <= sizeof(buf) && ncuts < 8);
  buf[0] = (uint8_t)ncuts;
  memcpy(buf + 1, cuts, ncuts);
  memcpy(buf + 1 + ncuts, msg, len);
  fuzz_seed_put("insertreq", name, buf, 1 + ncuts + len);
}

static void insert_seeds(void) {
  uint8_t msg[2048];
  uint8_t samples[2 * 12];
  double prio[2] = {1.0, 0.5};
  for (size_t i = 0; i < sizeof(samples); i++)
    samples[i] = (uint8_t)i;

  Chime__V1__Leaf obs = CHIME__V1__LEAF__INIT, act = CHIME__V1__LEAF__INIT;
  uint64_t shape[1] = {2};
  obs.name = "obs";
  obs.dtype = "f32";
  obs.n_shape = 1;
  obs.shape = shape;
  act.name = "action";
  act.dtype = "i32";
  Chime__V1__Leaf *spec[2] = {&obs, &act};

  Chime__V1__InsertRequest q = CHIME__V1__INSERT_REQUEST__INIT;
  q.table = "replay";
  q.count = 2;
  q.data.data = samples;
  q.data.len = sizeof(samples);
  q.n_priorities = 2;
  q.priorities = prio;
  q.id = 7;
  q.n_spec = 2;
  q.spec = spec;
  size_t len = chime__v1__insert_request__pack(&q, msg);
  put_insert("first_with_spec", NULL, 0, msg, len);
  const uint8_t small[] = {1, 2, 3};
  put_insert("first_with_spec_cut", small, 3, msg, len);
  const uint8_t empties[] = {0, 5, 0};
  put_insert("first_with_spec_empty_pieces", empties, 3, msg, len);

  q.n_spec = 0;
  q.spec = NULL;
  len = chime__v1__insert_request__pack(&q, msg);
  put_insert("plain", NULL, 0, msg, len);

  /* A ragged table's: each sample's lengths (packed). */
  uint32_t lengths[2] = {1, 4};
  q.n_lengths = 2;
  q.lengths = lengths;
  q.data.len = 1 * 4 + 4 * 4;
  len = chime__v1__insert_request__pack(&q, msg);
  put_insert("ragged_lengths", small, 3, msg, len);
  q.n_lengths = 0;
  q.lengths = NULL;
  q.data.len = sizeof(samples);
  /* Policy versions: one per sample (packed), then one for all. */
  uint64_t vers[2] = {7, UINT64_C(1) << 40};
  q.n_versions = 2;
  q.versions = vers;
  len = chime__v1__insert_request__pack(&q, msg);
  put_insert("versions", NULL, 0, msg, len);
  q.n_versions = 1;
  len = chime__v1__insert_request__pack(&q, msg);
  put_insert("versions_one", NULL, 0, msg, len);
  q.n_versions = 0;
  q.versions = NULL;

  /* Priorities unpacked (one fixed64 field each), an unknown field of each
   * wire type, and a repeated singular field (the last one wins). */
  len = 0;
  msg[len++] = (1 << 3) | 2;
  msg[len++] = 1;
  msg[len++] = 't';
  for (int i = 0; i < 2; i++) {
    msg[len++] = (4 << 3) | 1;
    memcpy(msg + len, &prio[i], 8);
    len += 8;
  }
  const uint8_t unknown[] = {(20 << 3) | 0,
                             0x96,
                             0x01,
                             (21 << 3) | 1,
                             1,
                             2,
                             3,
                             4,
                             5,
                             6,
                             7,
                             8,
                             (22 << 3) | 2,
                             2,
                             'h',
                             'i',
                             (23 << 3) | 5,
                             1,
                             2,
                             3,
                             4,
                             (2 << 3) | 0,
                             9,
                             (2 << 3) | 0,
                             1};
  memcpy(msg + len, unknown, sizeof(unknown));
  len += sizeof(unknown);
  put_insert("unpacked_priorities_unknown_fields", NULL, 0, msg, len);

  put_insert("empty", NULL, 0, msg, 0);
  /* A 10-byte varint (the longest there is) and one that is too long. */
  const uint8_t v10[] = {(5 << 3) | 0, 0xff, 0xff, 0xff, 0xff, 0xff,
                         0xff,         0xff, 0xff, 0xff, 0x01};
  put_insert("varint_10_bytes", NULL, 0, v10, sizeof(v10));
  const uint8_t v11[] = {(5 << 3) | 0, 0xff, 0xff, 0xff, 0xff, 0xff,
                         0xff,         0xff, 0xff, 0xff, 0x81, 0x00};
  put_insert("varint_11_bytes", NULL, 0, v11, sizeof(v11));
  /* A data field longer than the message. */
  const uint8_t trunc[] = {(3 << 3) | 2, 0x10, 1, 2, 3};
  put_insert("data_truncated", NULL, 0, trunc, sizeof(trunc));
}

/* --- chunk: records [ctl][n][cuts][len lo][len hi][message] --- */

static uint8_t chunk_buf[8192];
static size_t chunk_len;

static void record(uint8_t ctl, const uint8_t *cuts, size_t ncuts,
                   const uint8_t *msg, size_t len) {
  FUZZ_CHECK(chunk_len + 4 + ncuts + len <= sizeof(chunk_buf));
  chunk_buf[chunk_len++] = ctl;
  chunk_buf[chunk_len++] = (uint8_t)ncuts;
  memcpy(chunk_buf + chunk_len, cuts, ncuts);
  chunk_len += ncuts;
  chunk_buf[chunk_len++] = (uint8_t)len;
  chunk_buf[chunk_len++] = (uint8_t)(len >> 8);
  memcpy(chunk_buf + chunk_len, msg, len);
  chunk_len += len;
}

static void chunk_record(uint8_t ctl, const uint8_t *cuts, size_t ncuts,
                         uint64_t seq, uint64_t off, uint64_t total,
                         uint64_t len) {
  uint8_t msg[CHIME_CHUNK_HEADER_MAX + 1024];
  FUZZ_CHECK(len <= 1024);
  size_t h = chime__chunk_header_encode(msg, seq, off, total, len);
  for (uint64_t i = 0; i < len; i++)
    msg[h + i] = (uint8_t)(seq * 31 + off + i);
  record(ctl, cuts, ncuts, msg, h + len);
}

static uint64_t chunk_send_bytes(void) {
  chime_spec_t spec;
  chime_ring_layout_t l;
  char err[128];
  FUZZ_CHECK(chime_spec_parse(&spec, FUZZ_CHUNK_SPEC) == 0);
  FUZZ_CHECK(chime_ring_layout_compute(&l, &spec, FUZZ_CHUNK_BATCH,
                                       FUZZ_CHUNK_SLOTS) == 0);
  return l.info_offset + FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t);
}

/* A ring of FUZZ_CHUNK_RAGGED_SPEC (ctl bit 7 on the first record): one
 * batch as its sender sends it, the offsets and info first, then each
 * leaf's used bytes (docs/protocol.md), in two chunks that cut the tail;
 * then the same batch with a sample past its bound. */
static void ragged_seeds(void) {
  chime_spec_t spec;
  chime_ring_layout_t l;
  char err[128];
  FUZZ_CHECK(chime_spec_parse(&spec, FUZZ_CHUNK_RAGGED_SPEC) == 0);
  FUZZ_CHECK(chime_ring_layout_compute(&l, &spec, FUZZ_CHUNK_BATCH,
                                       FUZZ_CHUNK_SLOTS) == 0);
  FUZZ_CHECK(FUZZ_CHUNK_BATCH == 2);
  uint64_t send =
      l.info_offset + FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t);
  uint64_t tail = l.offsets_offset[0], tail_len = send - tail;
  uint8_t wire[1024];
  const int64_t tu[3] = {0, 2, 5}, v[3] = {0, 1, 3};
  for (int bad = 0; bad < 2; bad++) {
    memset(wire, 0, sizeof(wire));
    memcpy(wire + l.offsets_offset[0] - tail, tu, sizeof(tu));
    memcpy(wire + l.offsets_offset[1] - tail, tu, sizeof(tu));
    memcpy(wire + l.offsets_offset[2] - tail, v, sizeof(v));
    if (bad)
      wire[l.offsets_offset[2] - tail + 8] = 4; /* v: 4 rows, bound 3 */
    /* t and u 5 rows of 1 byte, v 3 rows of 2, y 2 floats. */
    uint64_t total = tail_len + 5 + 5 + 6 + 8;
    FUZZ_CHECK(total <= sizeof(wire) && total < 1024);
    for (uint64_t i = tail_len; i < total; i++)
      wire[i] = (uint8_t)(i * 13);
    uint8_t msg[CHIME_CHUNK_HEADER_MAX + 1024];
    uint64_t cut = tail_len / 2;
    chunk_len = 0;
    size_t h = chime__chunk_header_encode(msg, 0, 0, total, cut);
    memcpy(msg + h, wire, cut);
    record(0x80, NULL, 0, msg, h + cut);
    h = chime__chunk_header_encode(msg, 0, cut, total, total - cut);
    memcpy(msg + h, wire + cut, total - cut);
    record(1, NULL, 0, msg, h + total - cut);
    fuzz_seed_put("chunk", bad ? "ragged_past_bound" : "ragged_batch",
                  chunk_buf, chunk_len);
  }
}

/* x's stored bytes in a framed seed (n: their count): sample 0's a zstd
 * frame of zeros, sample 1's the leaf raw; for a window of 2 steps
 * (win), sample 0's a frame and a padded step, sample 1's a raw step and
 * a frame, each after the 2 steps' u32 stored sizes. */
static size_t framed_x(uint8_t *x, int win) {
  static const uint8_t zero[FUZZ_CHUNK_FRAMED_LEAF] = {0};
  uint8_t raw[FUZZ_CHUNK_FRAMED_LEAF], z[FUZZ_CHUNK_FRAMED_LEAF];
  for (size_t i = 0; i < sizeof(raw); i++)
    raw[i] = (uint8_t)(i * 151 + 7);
  size_t lb = win ? FUZZ_CHUNK_FRAMED_LEAF / FUZZ_CHUNK_WINDOW_STEPS
                  : FUZZ_CHUNK_FRAMED_LEAF;
  size_t k = ZSTD_compress(z, sizeof(z), zero, lb, 3);
  FUZZ_CHECK(!ZSTD_isError(k) && k < lb);
  if (!win) {
    memcpy(x, z, k);
    memcpy(x + k, raw, lb);
    return k + lb;
  }
  const uint32_t sizes[4] = {(uint32_t)k, 0, (uint32_t)lb, (uint32_t)k};
  memcpy(x, sizes, 8);
  memcpy(x + 8, z, k);
  memcpy(x + 8 + k, sizes + 2, 8);
  memcpy(x + 16 + k, raw, lb);
  memcpy(x + 16 + k + lb, z, k);
  return 16 + 2 * k + lb;
}

/* A ring of FUZZ_CHUNK_FRAMED_SPEC with x framed (ctl bit 6 on the first
 * record): one batch as chimed sends it to a client that decompresses,
 * its tail packed (replay/ztail.h), then x's stored bytes (framed_x), y;
 * in two chunks that cut the packed tail. Variants: the tail stored as
 * it is, a tail frame that declares more than the tail (a bomb), and a
 * sequence table's windows (FUZZ_CHUNK_WINDOW_SPEC, bit 5 too). */
static void framed_seeds(void) {
  static const uint8_t mask[CHIME_MAX_LEAVES] = {1};
  const char *names[4] = {"framed", "framed_tail_raw", "framed_tail_bomb",
                          "framed_window"};
  for (int v = 0; v < 4; v++) {
    int win = v == 3;
    chime_spec_t raw, spec;
    chime_ring_layout_t l;
    char err[128];
    FUZZ_CHECK(chime_spec_parse(&raw, win ? FUZZ_CHUNK_WINDOW_SPEC
                                          : FUZZ_CHUNK_FRAMED_SPEC) == 0);
    FUZZ_CHECK(chime__spec_framed_steps(
                   &spec, &raw, mask, win ? FUZZ_CHUNK_WINDOW_STEPS : 0) == 0);
    FUZZ_CHECK(chime_ring_layout_compute(&l, &spec, FUZZ_CHUNK_BATCH,
                                         FUZZ_CHUNK_SLOTS) == 0);
    size_t send =
        l.info_offset + FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t);
    size_t tail = l.offsets_offset[0], n = send - tail;
    static uint8_t slot[4096], scratch[4096], wire[8192], x[512];
    FUZZ_CHECK(l.slot_bytes <= sizeof(slot) && n <= sizeof(scratch));
    size_t xn = framed_x(x, win);
    size_t x0 = win ? 8 + (xn - 16 - FUZZ_CHUNK_FRAMED_LEAF / 2) / 2
                    : xn - FUZZ_CHUNK_FRAMED_LEAF;
    memset(slot, 0, sizeof(slot));
    const int64_t offs[3] = {0, (int64_t)x0, (int64_t)xn};
    memcpy(slot + l.offsets_offset[0], offs, sizeof(offs));
    chime_sample_info_t *info = (chime_sample_info_t *)(slot + l.info_offset);
    for (uint32_t j = 0; j < FUZZ_CHUNK_BATCH; j++)
      info[j] = (chime_sample_info_t){.key = 40 + j,
                                      .probability = 0.5,
                                      .table_size = 2,
                                      .priority = 1.0,
                                      .length = win ? 2 - j : 0};
    size_t packed = 0;
    FUZZ_CHECK(chime__ztail_pack(wire, slot + tail, n,
                                 FUZZ_CHUNK_BATCH * sizeof(chime_sample_info_t),
                                 scratch, &packed) == 0);
    if (v == 1) { /* as it is: the transformed tail pack left in scratch */
      uint32_t s = (uint32_t)n;
      memcpy(wire, &s, 4); /* little-endian, as chime's hosts */
      memcpy(wire + 4, scratch, n);
      packed = CHIME__ZTAIL_HEAD + n;
    }
    if (v == 2) { /* a frame of twice the tail's bytes */
      uint8_t *big = calloc(1, 2 * n);
      FUZZ_CHECK(big != NULL);
      size_t k = ZSTD_compress(wire + 4, n - 1, big, 2 * n, 1);
      FUZZ_CHECK(!ZSTD_isError(k));
      uint32_t s = (uint32_t)k;
      memcpy(wire, &s, 4);
      packed = 4 + k;
      free(big);
    }
    size_t total = packed;
    memcpy(wire + total, x, xn);
    total += xn;
    const float y[2] = {1.5f, -2.0f};
    memcpy(wire + total, y, sizeof(y));
    total += sizeof(y);
    uint8_t msg[CHIME_CHUNK_HEADER_MAX + sizeof(wire)];
    size_t cut = packed / 2;
    chunk_len = 0;
    size_t h = chime__chunk_header_encode(msg, 0, 0, total, cut);
    memcpy(msg + h, wire, cut);
    record(win ? 0x60 : 0x40, NULL, 0, msg, h + cut);
    h = chime__chunk_header_encode(msg, 0, cut, total, total - cut);
    memcpy(msg + h, wire + cut, total - cut);
    record(1, NULL, 0, msg, h + total - cut);
    fuzz_seed_put("chunk", names[v], chunk_buf, chunk_len);
  }
}

static void chunk_seeds(void) {
  uint64_t total = chunk_send_bytes();
  const uint8_t cuts[] = {1, 2, 7, 30};

  /* Two whole batches in one chunk each, the first taken by the learner. */
  chunk_len = 0;
  chunk_record(1, NULL, 0, 0, 0, total, total);
  chunk_record(0, NULL, 0, 1, 0, total, total);
  fuzz_seed_put("chunk", "two_batches", chunk_buf, chunk_len);

  /* One batch in three chunks cut into pieces inside the header. */
  chunk_len = 0;
  chunk_record(0, cuts, 4, 0, 0, total, 5);
  chunk_record(0, cuts, 4, 0, 5, total, total / 2 - 5);
  chunk_record(1, cuts, 4, 0, total / 2, total, total - total / 2);
  fuzz_seed_put("chunk", "three_chunks_cut", chunk_buf, chunk_len);

  /* More batches than credits unless the learner takes them. */
  chunk_len = 0;
  for (uint64_t s = 0; s < FUZZ_CHUNK_SLOTS + 1; s++)
    chunk_record(s % 2, NULL, 0, s, 0, total, total);
  fuzz_seed_put("chunk", "credits", chunk_buf, chunk_len);

  /* A notice (not a chunk), then half a batch and the stream ends. */
  Chime__V1__Notice notice = CHIME__V1__NOTICE__INIT;
  notice.message = "shutting down";
  notice.code = 14;
  Chime__V1__SubscribeResponse r = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
  r.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE;
  r.notice = &notice;
  uint8_t msg[256];
  size_t len = chime__v1__subscribe_response__pack(&r, msg);
  chunk_len = 0;
  record(0, NULL, 0, msg, len);
  chunk_record(2, NULL, 0, 0, 0, total, total / 2);
  fuzz_seed_put("chunk", "notice_then_abandon", chunk_buf, chunk_len);

  /* Edges: huge values (longest header), a wrong total, a gap. */
  chunk_len = 0;
  chunk_record(0, NULL, 0, UINT64_MAX, UINT64_MAX - 4, UINT64_MAX, 4);
  fuzz_seed_put("chunk", "huge_values", chunk_buf, chunk_len);
  chunk_len = 0;
  chunk_record(0, NULL, 0, 0, 0, total + 1, 8);
  fuzz_seed_put("chunk", "wrong_total", chunk_buf, chunk_len);
  chunk_len = 0;
  chunk_record(0, NULL, 0, 0, 0, total, 8);
  chunk_record(0, NULL, 0, 0, 16, total, 8);
  fuzz_seed_put("chunk", "gap", chunk_buf, chunk_len);
  ragged_seeds();
  framed_seeds();
}

/* --- ring_attach: the segment's first bytes (trailing zeros dropped) --- */

static void put_ring(const char *name, chime_ring_t *ring) {
  size_t len;
  const uint8_t *base = chime_ring_map_base(ring, &len);
  while (len > 0 && base[len - 1] == 0)
    len--;
  fuzz_seed_put("ring_attach", name, base, len);
}

static void ring_seeds(void) {
  chime_spec_t spec;
  chime_ring_t *ring;
  char err[128];
  FUZZ_CHECK(chime_spec_parse(&spec, "obs:f32[3],action:i32[]") == 0);
  FUZZ_CHECK(chime__ring_create(&ring, &spec, 2, 3) == 0);
  put_ring("fresh", ring);

  /* The same ring claiming another format version: refused by it. */
  {
    size_t len;
    const uint8_t *base = chime_ring_map_base(ring, &len);
    uint8_t head[sizeof(chime__ring_header_t)];
    const uint32_t v3 = 3;
    memcpy(head, base, sizeof(head));
    memcpy(head + offsetof(chime__ring_header_t, version), &v3, sizeof(v3));
    fuzz_seed_put("ring_attach", "other_version", head, sizeof(head));
  }

  /* Two batches published, not yet taken. (Slot bytes and the consumer's
   * words stay zero so the seed ends with the publish queue.) */
  for (int i = 0; i < 2; i++) {
    chime__ring_wslot_t w;
    uint64_t seq;
    FUZZ_CHECK(chime__ring_acquire(ring, &w, 0) == 0);
    FUZZ_CHECK(chime__ring_publish(ring, w.slot, &seq) == 0);
  }
  put_ring("published", ring);
  chime__ring_shutdown(ring);
  put_ring("shut_down", ring);
  chime_ring_destroy(ring);

  FUZZ_CHECK(chime_spec_parse(&spec, "x:u8") == 0);
  FUZZ_CHECK(chime__ring_create(&ring, &spec, 1, 2) == 0);
  put_ring("smallest", ring);
  chime_ring_destroy(ring);

  /* Ragged leaves: flags in the dtype words, offsets in the slots. */
  FUZZ_CHECK(chime_spec_parse(&spec, "t:i32[<=6],l:f32[<=6 ~t],r:f32[]") == 0);
  FUZZ_CHECK(chime__ring_create(&ring, &spec, 2, 2) == 0);
  put_ring("ragged", ring);
  chime_ring_destroy(ring);

  /* Too short for a header. */
  const uint8_t magic[8] = {'C', 'H', 'I', 'M', 'E', 'R', 'N', 'G'};
  fuzz_seed_put("ring_attach", "magic_only", magic, sizeof(magic));
}

/* --- config: the JSON text (files named "mem:BYTES" hold BYTES) --- */

static void put_text(const char *target, const char *name, const char *text) {
  fuzz_seed_put(target, name, (const uint8_t *)text, strlen(text));
}

static void config_seeds(void) {
  put_text("config", "default",
           "{\"tables\":[{\"name\":\"demo\",\"spec\":\"obs:f32[64], "
           "action:i32[], reward:f32[]\",\"capacity\":65536,\"sampler\":"
           "\"fifo\",\"min_size\":1}]}");
  put_text(
      "config", "every_key",
      "{\"listen\": \"0.0.0.0:50051\", \"handoff_socket\": \"@auto\",\n"
      " \"handoff_expires_ms\": 5000, \"max_connections\": 4096,\n"
      " \"max_calls_per_connection\": 1024, \"max_calls\": 65536,\n"
      " \"handshake_timeout_ms\": 10000, \"keepalive_time_ms\": 20000,\n"
      " \"keepalive_timeout_ms\": 10000, \"sampler_threads\": 2,\n"
      " \"allowed_uids\": [1000, 1001],\n"
      " \"auth\": {\"tokens\": [{\"file\": \"mem:actor-token\", \"role\": "
      "\"actor\"},\n"
      "   {\"file\": \"mem:learner-token\\n\", \"role\": \"learner\"},\n"
      "   {\"file\": \"mem:admin\", \"role\": \"admin\"}]},\n"
      " \"tls\": {\"cert\": \"mem:cert\", \"key\": \"mem:key\", "
      "\"client_ca\": \"mem:ca\"},\n"
      " \"budgets\": {\"stream_ring_bytes\": 268435456, "
      "\"total_ring_bytes\": 1073741824, \"staged_insert_bytes\": 1024},\n"
      " \"pin_host_memory\": false,\n"
      " \"tables\": [{\"name\": \"q\", \"spec\": \"x:u8[84,84,4], "
      "a:i32\", \"capacity\": 1000, \"max_times_sampled\": 2},\n"
      "  {\"name\": \"u\", \"spec\": \"x:f16[3]\", \"capacity\": 10, "
      "\"sampler\": \"uniform\", \"remover\": \"lifo\", \"min_size\": 2},\n"
      "  {\"name\": \"p\", \"spec\": \"x:bf16[2,2]\", \"capacity\": 5, "
      "\"sampler\": \"prioritized\", \"remover\": \"min_heap\", "
      "\"priority_exponent\": 0.6, \"samples_per_insert\": 4.5, "
      "\"error_buffer\": 10},\n"
      "  {\"name\": \"h\", \"spec\": \"b:bool\", \"capacity\": 1, "
      "\"sampler\": \"max_heap\", \"max_staleness\": 3}]}");
  put_text("config", "bad_token",
           "{\"auth\":{\"tokens\":[{\"file\":\"mem:a b\",\"role\":\"actor\"}]},"
           "\"tables\":[{\"name\":\"t\",\"spec\":\"x:u8\",\"capacity\":1}]}");
  put_text("config", "tls_without_key",
           "{\"tls\":{\"cert\":\"mem:c\"},\"tables\":[{\"name\":\"t\","
           "\"spec\":\"x:u8\",\"capacity\":1}]}");
  put_text("config", "too_large",
           "{\"tables\":[{\"name\":\"t\",\"spec\":\"x:f64[1048576]\","
           "\"capacity\":4294967294}]}");
  put_text("config", "not_json", "{\"tables\": [");
  put_text("config", "ragged",
           "{\"tables\":[{\"name\":\"r\",\"spec\":\"tokens:i32[<=8192], "
           "logprobs:f32[<=8192 ~tokens], frames:u8[<=64,84,84], "
           "reward:f32[]\",\"capacity\":1000,\"sampler\":\"uniform\"}]}");
  put_text("config", "ragged_sequence",
           "{\"tables\":[{\"name\":\"s\",\"spec\":\"tokens:i32[<=8]\","
           "\"capacity_steps\":100,\"sequence_length\":4}]}");
}

/* --- handoff: [n][n piece lengths][flags][bytes] --- */

static void put_handoff(const char *name, const uint8_t *cuts, size_t ncuts,
                        uint8_t flags, const uint8_t *msg, size_t len) {
  uint8_t buf[256];
  FUZZ_CHECK(2 + ncuts + len <= sizeof(buf) && ncuts < 8);
  buf[0] = (uint8_t)ncuts;
  memcpy(buf + 1, cuts, ncuts);
  buf[1 + ncuts] = flags;
  memcpy(buf + 2 + ncuts, msg, len);
  fuzz_seed_put("handoff", name, buf, 2 + ncuts + len);
}

static void handoff_seeds(void) {
  uint8_t req[CHIME__HANDOFF_REQUEST_BYTES + 16];
  memset(req, 0, sizeof(req));
  memcpy(req, CHIME__HANDOFF_MAGIC, CHIME__HANDOFF_MAGIC_BYTES);
  const uint8_t cuts[] = {1, 7, 16};
  put_handoff("valid", NULL, 0, 1, req, CHIME__HANDOFF_REQUEST_BYTES);
  put_handoff("valid_cut", cuts, 3, 1, req, CHIME__HANDOFF_REQUEST_BYTES);
  put_handoff("replayed", NULL, 0, 5, req, CHIME__HANDOFF_REQUEST_BYTES);
  put_handoff("valid_then_more", NULL, 0, 1, req, sizeof(req));
  put_handoff("unknown_token", NULL, 0, 0, req, CHIME__HANDOFF_REQUEST_BYTES);
  put_handoff("short", NULL, 0, 1, req, CHIME__HANDOFF_REQUEST_BYTES - 1);
  req[3] ^= 0x20;
  put_handoff("wrong_magic", NULL, 0, 1, req, CHIME__HANDOFF_REQUEST_BYTES);
  put_handoff("empty", NULL, 0, 0, req, 0);
}

/* --- requests: [method][flags][len lo][len hi][bytes]... --- */

static uint8_t req_buf[4096];
static size_t req_len;

static void req_begin(uint8_t method, uint8_t flags) {
  req_buf[0] = method;
  req_buf[1] = flags;
  req_len = 2;
}

static void req_add(const ProtobufCMessage *m) {
  size_t len = m != NULL ? protobuf_c_message_get_packed_size(m) : 0;
  FUZZ_CHECK(req_len + 2 + len <= sizeof(req_buf));
  req_buf[req_len++] = (uint8_t)len;
  req_buf[req_len++] = (uint8_t)(len >> 8);
  if (m != NULL)
    protobuf_c_message_pack(m, req_buf + req_len);
  req_len += len;
}

static void req_open(const char *table, uint32_t batch, uint32_t slots,
                     Chime__V1__Mode mode, uint32_t prefetch) {
  Chime__V1__Open o = CHIME__V1__OPEN__INIT;
  Chime__V1__SubscribeRequest r = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  o.table = (char *)table;
  o.batch_size = batch;
  o.slots = slots;
  o.mode = mode;
  o.prefetch = prefetch;
  r.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  r.open = &o;
  req_add(&r.base);
}

static void req_credit(uint32_t batches, uint64_t *released, size_t n) {
  Chime__V1__Credit c = CHIME__V1__CREDIT__INIT;
  Chime__V1__SubscribeRequest r = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  c.batches = batches;
  c.released = released;
  c.n_released = n;
  r.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT;
  r.credit = &c;
  req_add(&r.base);
}

static void requests_seeds(void) {
  req_begin(0, 1);
  req_add(NULL);
  fuzz_seed_put("requests", "getinfo", req_buf, req_len);
  req_begin(1, 1);
  req_add(NULL);
  fuzz_seed_put("requests", "stats", req_buf, req_len);

  Chime__V1__MutatePrioritiesRequest m =
      CHIME__V1__MUTATE_PRIORITIES_REQUEST__INIT;
  Chime__V1__PriorityUpdate u[2] = {CHIME__V1__PRIORITY_UPDATE__INIT,
                                    CHIME__V1__PRIORITY_UPDATE__INIT};
  Chime__V1__PriorityUpdate *up[2] = {&u[0], &u[1]};
  uint64_t del[2] = {3, 1u << 20};
  u[0].key = 1;
  u[0].priority = 2.5;
  u[1].key = 2;
  u[1].priority = 0;
  m.table = "p";
  m.n_updates = 2;
  m.updates = up;
  m.n_deletes = 2;
  m.deletes = del;
  req_begin(2, 1);
  req_add(&m.base);
  fuzz_seed_put("requests", "mutate", req_buf, req_len);
  m.table = "nope";
  req_begin(2, 1);
  req_add(&m.base);
  fuzz_seed_put("requests", "mutate_unknown_table", req_buf, req_len);

  uint64_t rel[2] = {0, 1};
  req_begin(3, 1);
  req_open("u", 2, 4, CHIME__V1__MODE__MODE_STREAM, 0);
  req_credit(2, rel, 2);
  fuzz_seed_put("requests", "subscribe_stream", req_buf, req_len);
  req_begin(3, 1);
  req_open("q", 4, 2, CHIME__V1__MODE__MODE_STREAM, 2);
  req_credit(1, rel, 1);
  req_credit(1, rel + 1, 1);
  fuzz_seed_put("requests", "subscribe_fifo", req_buf, req_len);
  req_begin(3, 0);
  req_open("p", 1, 8, CHIME__V1__MODE__MODE_SHM, 0);
  fuzz_seed_put("requests", "subscribe_shm", req_buf, req_len);
  req_begin(3, 1);
  req_open("u", 2, 1, CHIME__V1__MODE__MODE_STREAM, 0);
  fuzz_seed_put("requests", "subscribe_bad_slots", req_buf, req_len);
  req_begin(3, 1);
  req_credit(1, NULL, 0);
  fuzz_seed_put("requests", "subscribe_credit_first", req_buf, req_len);

  /* Lanes: a Join naming no stream (the token is random), after an
   * Open (refused: the call has its stream), and an Open asking for 4
   * connections. */
  Chime__V1__Join jn = CHIME__V1__JOIN__INIT;
  Chime__V1__SubscribeRequest jq = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  uint8_t tok[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  jn.stream_id = 1;
  jn.resume_token.data = tok;
  jn.resume_token.len = sizeof(tok);
  jn.lane = 1;
  jn.table = "u";
  jq.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_JOIN;
  jq.join = &jn;
  req_begin(3, 1);
  req_add(&jq.base);
  fuzz_seed_put("requests", "subscribe_join", req_buf, req_len);
  req_begin(3, 1);
  req_open("u", 2, 4, CHIME__V1__MODE__MODE_STREAM, 0);
  req_add(&jq.base);
  fuzz_seed_put("requests", "subscribe_join_after_open", req_buf, req_len);

  /* Policy versions: a learner's on its stream, and SetVersion. */
  Chime__V1__VersionReport vr = CHIME__V1__VERSION_REPORT__INIT;
  Chime__V1__SubscribeRequest vq = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  vr.version = 9;
  vq.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_VERSION;
  vq.version = &vr;
  req_begin(3, 1);
  req_open("u", 2, 4, CHIME__V1__MODE__MODE_STREAM, 0);
  req_add(&vq.base);
  req_credit(2, rel, 2);
  fuzz_seed_put("requests", "subscribe_version", req_buf, req_len);
  Chime__V1__SetVersionRequest sv = CHIME__V1__SET_VERSION_REQUEST__INIT;
  sv.table = "u";
  sv.version = 12;
  req_begin(4, 1);
  req_add(&sv.base);
  fuzz_seed_put("requests", "setversion", req_buf, req_len);

  /* Export: a table's snapshot streamed back, and an unknown table. */
  Chime__V1__ExportRequest ex = CHIME__V1__EXPORT_REQUEST__INIT;
  ex.table = "u";
  req_begin(5, 1);
  req_add(&ex.base);
  fuzz_seed_put("requests", "export", req_buf, req_len);
  ex.table = "nope";
  req_begin(5, 1);
  req_add(&ex.base);
  fuzz_seed_put("requests", "export_unknown_table", req_buf, req_len);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  insert_seeds();
  fuzz_zinsert_seeds();
  chunk_seeds();
  ring_seeds();
  config_seeds();
  handoff_seeds();
  requests_seeds();
  return 0;
}
