/* Chunk framing: what chime__chunk_header_encode() writes is the protobuf
 * encoding of SubscribeResponse{chunk}, and chime__chunk_parse() accepts it and
 * rejects every malformed variant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/errors.h"
#include "wire/chunk.h"
#include "wire/credit.h"

/* header + payload in one buffer; returns its length. */
static size_t build(uint8_t *buf, uint64_t seq, uint64_t off, uint64_t total,
                    const uint8_t *data, size_t len) {
  size_t h = chime__chunk_header_encode(buf, seq, off, total, len);
  memcpy(buf + h, data, len);
  return h + len;
}

static void test_roundtrip(void **state) {
  (void)state;
  const uint64_t vals[] = {
      0, 1, 127, 128, 16383, 16384, UINT64_C(1) << 32, (UINT64_C(1) << 40) - 1};
  uint8_t data[300];
  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = (uint8_t)(i * 7);
  uint8_t buf[CHIME_CHUNK_HEADER_MAX + sizeof(data)];
  for (size_t a = 0; a < sizeof(vals) / sizeof(vals[0]); a++) {
    for (size_t b = 0; b < sizeof(vals) / sizeof(vals[0]); b++) {
      size_t lens[] = {0, 1, 127, 128, 300};
      for (size_t l = 0; l < 5; l++) {
        uint64_t total = vals[b] + lens[l] + vals[a];
        size_t n = build(buf, vals[a], vals[b], total, data, lens[l]);
        chime__chunk_t c;
        assert_int_equal(chime__chunk_parse(buf, n, n, &c), 0);
        assert_true(c.header_len <= CHIME_CHUNK_HEADER_MAX);
        assert_int_equal(c.seq, vals[a]);
        assert_int_equal(c.offset, vals[b]);
        assert_int_equal(c.total, total);
        assert_int_equal(c.data_len, lens[l]);
        assert_int_equal(c.header_len + lens[l], n);
        assert_memory_equal(buf + c.header_len, data, lens[l]);
      }
    }
  }
}

static void test_largest_header_fits(void **state) {
  (void)state;
  uint8_t buf[CHIME_CHUNK_HEADER_MAX + 16];
  memset(buf, 0xee, sizeof(buf));
  size_t h = chime__chunk_header_encode(buf, UINT64_MAX, UINT64_MAX - 9,
                                        UINT64_MAX, 8);
  assert_true(h <= CHIME_CHUNK_HEADER_MAX);
  /* Nothing written beyond the returned length. */
  for (size_t i = h; i < sizeof(buf); i++)
    assert_int_equal(buf[i], 0xee);
}

/* protobuf-c must read the same message the hand encoder wrote. */
static void test_is_valid_protobuf(void **state) {
  (void)state;
  uint8_t data[1000];
  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = (uint8_t)(i ^ 0x5a);
  uint8_t buf[CHIME_CHUNK_HEADER_MAX + sizeof(data)];
  size_t n = build(buf, 42, 4096, 8192, data, sizeof(data));
  Chime__V1__SubscribeResponse *r =
      chime__v1__subscribe_response__unpack(NULL, n, buf);
  assert_non_null(r);
  assert_int_equal(r->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_CHUNK);
  assert_int_equal(r->chunk->seq, 42);
  assert_int_equal(r->chunk->offset, 4096);
  assert_int_equal(r->chunk->total, 8192);
  assert_int_equal(r->chunk->data.len, sizeof(data));
  assert_memory_equal(r->chunk->data.data, data, sizeof(data));
  chime__v1__subscribe_response__free_unpacked(r, NULL);
}

/* Other SubscribeResponse kinds are "not a chunk", not an error. */
static void test_not_a_chunk(void **state) {
  (void)state;
  Chime__V1__Notice notice = CHIME__V1__NOTICE__INIT;
  notice.message = "shutting down";
  notice.code = 14;
  Chime__V1__SubscribeResponse r = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
  r.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE;
  r.notice = &notice;
  uint8_t buf[128];
  size_t n = chime__v1__subscribe_response__pack(&r, buf);
  chime__chunk_t c;
  assert_int_equal(chime__chunk_parse(buf, n, n, &c), CHIME_ENOTFOUND);
  assert_int_equal(chime__chunk_parse(buf, 0, 0, &c), CHIME_ENOTFOUND);
}

static void test_malformed(void **state) {
  (void)state;
  uint8_t data[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  uint8_t buf[CHIME_CHUNK_HEADER_MAX + 32];
  chime__chunk_t c;
  size_t n = build(buf, 1, 0, 16, data, 16);
  assert_int_equal(chime__chunk_parse(buf, n, n, &c), 0);

  /* Message shorter or longer than the chunk claims. */
  assert_int_equal(chime__chunk_parse(buf, n - 1, n - 1, &c), CHIME_EPROTO);
  buf[n] = 0;
  assert_int_equal(chime__chunk_parse(buf, n + 1, n + 1, &c), CHIME_EPROTO);

  /* Truncated header. */
  assert_int_equal(chime__chunk_parse(buf, 3, n, &c), CHIME_EPROTO);

  /* offset + len beyond total. */
  n = build(buf, 1, 8, 16, data, 16);
  assert_int_equal(chime__chunk_parse(buf, n, n, &c), CHIME_EPROTO);
  n = build(buf, 1, 17, 16, data, 0);
  assert_int_equal(chime__chunk_parse(buf, n, n, &c), CHIME_EPROTO);
  n = build(buf, 1, UINT64_MAX, UINT64_MAX, data, 1);
  assert_int_equal(chime__chunk_parse(buf, n, n, &c), CHIME_EPROTO);

  /* A field out of order or missing. */
  n = build(buf, 1, 0, 16, data, 16);
  uint8_t bad[sizeof(buf)];
  memcpy(bad, buf, n);
  bad[2] = (3 << 3) | 0; /* total where seq belongs */
  assert_int_equal(chime__chunk_parse(bad, n, n, &c), CHIME_EPROTO);

  /* Over-long varint for the outer length. */
  uint8_t longv[16] = {(2 << 3) | 2};
  memset(longv + 1, 0xff, 11);
  assert_int_equal(chime__chunk_parse(longv, 12, 12, &c), CHIME_EPROTO);

  /* A data length padded to 6 bytes: protobuf-c refuses the message (as
   * tests/fuzz/fuzz_chunk checks). */
  const uint8_t padded[] = {0x12, 17,   0x08, 0,    0x10, 0,    0x18,
                            4,    0x22, 0x84, 0x80, 0x80, 0x80, 0x80,
                            0x00, 1,    2,    3,    4};
  assert_int_equal(
      chime__chunk_parse(padded, sizeof(padded), sizeof(padded), &c),
      CHIME_EPROTO);
}

/* Random bytes never crash the parser, and what it accepts is consistent. */
static void test_garbage(void **state) {
  (void)state;
  uint8_t buf[96];
  uint64_t x = 88172645463325252ull;
  for (int iter = 0; iter < 200000; iter++) {
    size_t n = 1 + (size_t)(x % sizeof(buf));
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      buf[i] = (uint8_t)x;
    }
    if (iter & 1)
      buf[0] = (2 << 3) | 2;
    chime__chunk_t c;
    int rc = chime__chunk_parse(buf, n, n, &c);
    assert_true(rc == 0 || rc == CHIME_EPROTO || rc == CHIME_ENOTFOUND);
    if (rc == 0) {
      assert_int_equal(c.header_len + c.data_len, n);
      assert_true(c.offset + c.data_len <= c.total);
    }
  }
}

/* docs/protocol.md, Credits: the server lends at most slots - 1 batches;
 * at open the prefetch, 0 or slots meaning slots - 1. */
static void test_credits(void **state) {
  (void)state;
  assert_int_equal(chime__credits_max(8), 7);
  assert_int_equal(chime__credits_initial(0, 8), 7);
  assert_int_equal(chime__credits_initial(3, 8), 3);
  assert_int_equal(chime__credits_initial(7, 8), 7);
  assert_int_equal(chime__credits_initial(8, 8), 7);
  assert_int_equal(chime__credits_initial(1, 2), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_largest_header_fits),
      cmocka_unit_test(test_is_valid_protobuf),
      cmocka_unit_test(test_not_a_chunk),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_garbage),
      cmocka_unit_test(test_credits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
