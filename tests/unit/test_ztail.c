/* Stream mode's packed tail (replay/ztail.h): a tail of offsets and info
 * records packs and unpacks to itself, and to far fewer bytes than it
 * has when the info is a batch's (shared probability, priority, table
 * size; keys and times close); a tail of noise travels as it is, its
 * head more; a head saying 0 or more than the tail is refused, and a
 * stored tail that is no frame of exactly the tail's bytes (cut short,
 * corrupt, or declaring more: a bomb) is CHIME_ECORRUPT with nothing
 * written past the tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zstd.h>

#include "chime/errors.h"
#include "chime/spec.h"
#include "replay/ztail.h"

#define B 64
#define OFFS 128 /* B + 1 offsets, padded to 64 bytes (chime_ring_layout) */
#define NINFO (B * sizeof(chime_sample_info_t))
#define N (OFFS * 8 + NINFO)
#define GUARD 64

/* A batch's tail as a sampler leaves it: obs' offsets rising by about
 * a frame's size, then the info records. */
static void batch_tail(uint8_t *t) {
  memset(t, 0, N);
  int64_t at = 0;
  for (int j = 0; j <= B; j++) {
    memcpy(t + 8 * j, &at, 8);
    at += 150 + (j * 37) % 40;
  }
  chime_sample_info_t *info = (chime_sample_info_t *)(t + OFFS * 8);
  for (int j = 0; j < B; j++)
    info[j] = (chime_sample_info_t){
        .key = ((uint64_t)3 << 56) + (uint64_t)(j * 7919) % 100000,
        .probability = 1.0 / 100000,
        .insert_time_ns = 1765000000000000000ull + (uint64_t)j * 997,
        .priority = 1.0,
        .table_size = 100000};
}

static void test_round_trip(void **state) {
  (void)state;
  static uint8_t tail[N], packed[N + CHIME__ZTAIL_HEAD], scratch[N],
      back[N + GUARD];
  batch_tail(tail);
  size_t out = 0, stored = 0;
  assert_int_equal(chime__ztail_pack(packed, tail, N, NINFO, scratch, &out), 0);
  assert_true(out < N / 4); /* compresses: a quarter of the tail at most */
  assert_int_equal(chime__ztail_stored(packed, N, &stored), 0);
  assert_int_equal(stored + CHIME__ZTAIL_HEAD, out);
  memset(back, 0xAB, sizeof(back));
  assert_int_equal(chime__ztail_unpack(back, N, NINFO,
                                       packed + CHIME__ZTAIL_HEAD, stored,
                                       scratch),
                   0);
  assert_memory_equal(back, tail, N);
  for (size_t i = N; i < sizeof(back); i++)
    assert_int_equal(back[i], 0xAB);
}

static void test_noise_as_is(void **state) {
  (void)state;
  static uint8_t tail[N], packed[N + CHIME__ZTAIL_HEAD], scratch[N], back[N];
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    tail[i] = (uint8_t)x;
  }
  size_t out = 0, stored = 0;
  assert_int_equal(chime__ztail_pack(packed, tail, N, NINFO, scratch, &out), 0);
  assert_int_equal(out, N + CHIME__ZTAIL_HEAD);
  assert_int_equal(chime__ztail_stored(packed, N, &stored), 0);
  assert_int_equal(stored, N);
  assert_int_equal(chime__ztail_unpack(back, N, NINFO,
                                       packed + CHIME__ZTAIL_HEAD, stored,
                                       scratch),
                   0);
  assert_memory_equal(back, tail, N);
}

static void test_head_refused(void **state) {
  (void)state;
  size_t stored = 0;
  const uint8_t zero[4] = {0}, over[4] = {(N + 1) & 0xFF, (N + 1) >> 8, 0, 0};
  const uint8_t huge[4] = {0xFF, 0xFF, 0xFF, 0xFF};
  assert_int_equal(chime__ztail_stored(zero, N, &stored), CHIME_EPROTO);
  assert_int_equal(chime__ztail_stored(over, N, &stored), CHIME_EPROTO);
  assert_int_equal(stored, N + 1);
  assert_int_equal(chime__ztail_stored(huge, N, &stored), CHIME_EPROTO);
}

/* Unpacking src (k bytes) fails with nothing past the tail written. */
static void refused(const uint8_t *src, size_t k) {
  static uint8_t back[N + GUARD], scratch[N];
  memset(back, 0xAB, sizeof(back));
  assert_int_equal(chime__ztail_unpack(back, N, NINFO, src, k, scratch),
                   CHIME_ECORRUPT);
  for (size_t i = N; i < sizeof(back); i++)
    assert_int_equal(back[i], 0xAB);
}

static void test_bad_frames(void **state) {
  (void)state;
  static uint8_t tail[N], packed[N + CHIME__ZTAIL_HEAD], scratch[N];
  batch_tail(tail);
  size_t out = 0, stored = 0;
  assert_int_equal(chime__ztail_pack(packed, tail, N, NINFO, scratch, &out), 0);
  stored = out - CHIME__ZTAIL_HEAD;
  refused(packed + CHIME__ZTAIL_HEAD, stored - 1); /* cut short */
  uint8_t *z = packed + CHIME__ZTAIL_HEAD;
  z[stored / 2] ^= 0x5A; /* corrupt (the frame's checksum, or its blocks) */
  z[stored / 2 + 1] ^= 0xA5;
  z[stored - 1] ^= 0xFF;
  refused(z, stored);
  /* A bomb: a small frame of four times the tail's bytes. */
  uint8_t *big = calloc(1, 4 * N);
  assert_non_null(big);
  size_t k = ZSTD_compress(z, N - 1, big, 4 * N, 1);
  assert_false(ZSTD_isError(k));
  free(big);
  refused(z, k);
  /* A frame of fewer bytes than the tail. */
  k = ZSTD_compress(z, N - 1, tail, N - 8, 1);
  assert_false(ZSTD_isError(k));
  refused(z, k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_noise_as_is),
      cmocka_unit_test(test_head_refused),
      cmocka_unit_test(test_bad_frames),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
