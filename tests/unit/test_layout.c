/* Slot layout math and every rejection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chime/ring.h"
#include "ring/ring_internal.h"

static chime_spec_t spec_of(const char *text) {
  chime_spec_t s;
  if (chime_spec_parse(&s, text) != 0)
    fail_msg("spec '%s': %s", text, chime_last_error());
  return s;
}

static void test_basic_layout(void **state) {
  chime_spec_t s = spec_of("obs:f32[3], action:i32, r:u8");
  chime_ring_layout_t l;
  (void)state;
  assert_int_equal(chime_ring_layout_compute(&l, &s, 10, 4), 0);
  assert_int_equal(l.slots, 4);
  assert_int_equal(l.batch_size, 10);
  /* obs: 10 x 12 = 120 bytes at 0; action at 128 (40 bytes); r at 192. */
  assert_int_equal(l.leaf_offset[0], 0);
  assert_int_equal(l.leaf_bytes[0], 120);
  assert_int_equal(l.leaf_offset[1], 128);
  assert_int_equal(l.leaf_bytes[1], 40);
  assert_int_equal(l.leaf_offset[2], 192);
  assert_int_equal(l.leaf_bytes[2], 10);
  assert_int_equal(l.info_offset, 256);
  assert_int_equal(sizeof(chime_sample_info_t), 80);
  /* 256 + 10 x 80 = 1056, one page. */
  assert_int_equal(l.slot_bytes, 4096);
  assert_int_equal(l.data_bytes, 4 * 4096);
  assert_int_equal(l.leaf_offset[3], 0);
  assert_int_equal(l.leaf_bytes[3], 0);
}

/* A ragged leaf: room for the batch at its bound, its B + 1 offsets after
 * every leaf's values (64-aligned), a fixed leaf none. */
static void test_ragged_layout(void **state) {
  chime_spec_t s;
  chime_ring_layout_t l;
  (void)state;
  assert_int_equal(chime_spec_parse(&s, "t:i32[<=10], x:f32[], f:u8[<=2,3]"),
                   0);
  assert_int_equal(chime_ring_layout_compute(&l, &s, 4, 2), 0);
  assert_int_equal(l.leaf_offset[0], 0);
  assert_int_equal(l.leaf_bytes[0], 4 * 10 * 4);
  assert_int_equal(l.leaf_offset[1], 192);
  assert_int_equal(l.leaf_offset[2], 256);
  assert_int_equal(l.leaf_bytes[2], 4 * 2 * 3);
  assert_int_equal(l.offsets_offset[0], 320);
  assert_int_equal(l.offsets_offset[1], 0);
  assert_int_equal(l.offsets_offset[2], 384);
  assert_int_equal(l.info_offset, 448);
  /* Without ragged leaves: the layout it always had. */
  assert_int_equal(chime_spec_parse(&s, "t:i32[10], x:f32[]"), 0);
  assert_int_equal(chime_ring_layout_compute(&l, &s, 4, 2), 0);
  assert_int_equal(l.offsets_offset[0], 0);
  assert_int_equal(l.info_offset, 256);
}

static void test_alignment_invariants(void **state) {
  chime_spec_t s = spec_of("a:u8[3], b:f64[7,5], c:bool, d:f16[33]");
  (void)state;
  for (uint32_t batch = 1; batch < 300; batch += 37) {
    chime_ring_layout_t l;
    uint64_t end = 0;
    assert_int_equal(chime_ring_layout_compute(&l, &s, batch, 3), 0);
    for (uint32_t i = 0; i < s.nleaves; i++) {
      assert_int_equal(l.leaf_offset[i] % 64, 0);
      assert_true(l.leaf_offset[i] >= end); /* no overlap */
      assert_int_equal(l.leaf_bytes[i],
                       (uint64_t)batch * chime_leaf_bytes(&s.leaves[i]));
      end = l.leaf_offset[i] + l.leaf_bytes[i];
    }
    assert_int_equal(l.info_offset % 64, 0);
    assert_true(l.info_offset >= end);
    assert_true(l.info_offset + (uint64_t)batch * 80 <= l.slot_bytes);
    assert_true(l.info_offset + (uint64_t)batch * 80 + 4096 > l.slot_bytes);
    assert_int_equal(l.slot_bytes % 4096, 0);
    assert_int_equal(l.data_bytes, 3 * l.slot_bytes);
  }
}

static void test_rejections(void **state) {
  chime_spec_t s = spec_of("x:u8[16]");
  chime_spec_t empty;
  chime_ring_layout_t l;
  (void)state;
  memset(&empty, 0, sizeof(empty));

  assert_int_equal(chime_ring_layout_compute(&l, &empty, 8, 4), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "empty"));
  assert_int_equal(chime_ring_layout_compute(&l, NULL, 8, 4), CHIME_EINVAL);
  assert_int_equal(chime_ring_layout_compute(NULL, &s, 8, 4), CHIME_EINVAL);

  assert_int_equal(chime_ring_layout_compute(&l, &s, 0, 4), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "batch"));
  assert_int_equal(
      chime_ring_layout_compute(&l, &s, CHIME_RING_MAX_BATCH + 1, 4),
      CHIME_EINVAL);
  assert_int_equal(chime_ring_layout_compute(&l, &s, 8, 0), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "slot"));
  assert_int_equal(chime_ring_layout_compute(&l, &s, 8, 1), CHIME_EINVAL);
  assert_int_equal(
      chime_ring_layout_compute(&l, &s, 8, CHIME_RING_MAX_SLOTS + 1),
      CHIME_EINVAL);
  /* Limits themselves are fine when the bytes fit. */
  assert_int_equal(chime_ring_layout_compute(&l, &s, CHIME_RING_MAX_BATCH, 2),
                   0);
  assert_int_equal(chime_ring_layout_compute(&l, &s, 1, CHIME_RING_MAX_SLOTS),
                   0);

  /* Unknown dtype in a hand-built spec. */
  s.leaves[0].dtype = CHIME_DTYPE_INVALID;
  assert_int_equal(chime_ring_layout_compute(&l, &s, 8, 4), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "'x'"));
  assert_int_equal(l.slot_bytes, 0); /* out is cleared on failure */
}

static void test_overflow(void **state) {
  /* 2^31 bytes per sample x 2^24 batch = 2^55 > 2^40. */
  chime_spec_t huge = spec_of("h:u8[2147483648]");
  /* 2^60 bytes a sample: the batch product overflows 64 bits. */
  chime_spec_t wrap = spec_of("w:u64[1152921504606846976,1]");
  /* Each slot fits but slots x slot_bytes exceeds 2^40: 2^30 x 4096. */
  chime_spec_t big = spec_of("b:u8[1073741824]");
  chime_ring_layout_t l;
  (void)state;
  assert_int_equal(
      chime_ring_layout_compute(&l, &huge, CHIME_RING_MAX_BATCH, 2),
      CHIME_EOVERFLOW);
  assert_non_null(strstr(chime_last_error(), "'h'"));
  assert_int_equal(chime_ring_layout_compute(&l, &wrap, 1u << 20, 2),
                   CHIME_EOVERFLOW);
  assert_int_equal(chime_ring_layout_compute(&l, &big, 1, 1000), 0);
  assert_int_equal(chime_ring_layout_compute(&l, &big, 1, 1024),
                   CHIME_EOVERFLOW);
  assert_non_null(strstr(chime_last_error(), "exceeds"));
}

static void test_regions(void **state) {
  chime_spec_t s = spec_of("x:f32[128]");
  chime_ring_layout_t l;
  chime__ring_regions_t r;
  uint64_t page = chime__page_size();
  (void)state;
  assert_int_equal(chime_ring_layout_compute(&l, &s, 64, 8), 0);
  assert_int_equal(chime__ring_regions(&l, page, &r), 0);
  assert_int_equal(r.prod_offset % 64, 0);
  assert_true(r.prod_offset >= sizeof(chime__ring_header_t));
  assert_true(r.queue_offset >= r.prod_offset + sizeof(chime__ring_prod_t));
  assert_true(r.ctrl_offset >=
              r.queue_offset + 8 * sizeof(chime__ring_pubent_t));
  assert_int_equal(r.ctrl_offset % page, 0);
  assert_int_equal(r.ctrl_bytes % page, 0);
  assert_int_equal(r.data_offset, r.ctrl_offset + r.ctrl_bytes);
  assert_int_equal(r.total_bytes, r.data_offset + l.data_bytes);
  assert_int_equal(chime__ring_regions(&l, 3000, &r), CHIME_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basic_layout),
      cmocka_unit_test(test_ragged_layout),
      cmocka_unit_test(test_alignment_invariants),
      cmocka_unit_test(test_rejections),
      cmocka_unit_test(test_overflow),
      cmocka_unit_test(test_regions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
