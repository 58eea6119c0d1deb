/* The key layout both ends share (src/common/key.h): the shard in the top
 * 16 bits, a count from 1 in the other 48; shard 0's keys are the counts
 * alone (an unsharded server's keys as they always were); the public
 * chime_key_shard() reads the same bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "common/key.h"

static void test_layout(void **state) {
  (void)state;
  assert_int_equal(CHIME__KEY_SHARD_BITS, 16);
  assert_int_equal(CHIME__KEY_MAX_SHARD, 65535);
  assert_true(CHIME__KEY_MAX_COUNT == (UINT64_C(1) << 48) - 1);
  /* Shard 0: the count itself, as before shards. */
  for (uint64_t n = 1; n < 1000; n += 37)
    assert_true(chime__key_make(0, n) == n);
  assert_true(chime__key_make(1, 5) == (UINT64_C(1) << 48 | 5));
  assert_true(chime__key_make(0x1234, 0xabcdef) ==
              UINT64_C(0x1234000000abcdef));
  assert_true(chime__key_make(65535, CHIME__KEY_MAX_COUNT) == UINT64_MAX);
  /* A count never spills into the shard bits. */
  assert_true(chime__key_make(3, CHIME__KEY_MAX_COUNT + 1) ==
              chime__key_make(3, 0));
}

static void test_round_trip(void **state) {
  (void)state;
  const uint32_t shards[] = {0, 1, 2, 255, 256, 4096, 65534, 65535};
  const uint64_t counts[] = {1,
                             2,
                             1000,
                             UINT64_C(1) << 32,
                             CHIME__KEY_MAX_COUNT - 1,
                             CHIME__KEY_MAX_COUNT};
  for (size_t i = 0; i < sizeof(shards) / sizeof(shards[0]); i++) {
    for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]); j++) {
      uint64_t k = chime__key_make(shards[i], counts[j]);
      assert_int_equal(chime__key_shard(k), shards[i]);
      assert_true(chime__key_count(k) == counts[j]);
      assert_int_equal(chime_key_shard(k), shards[i]);
    }
  }
  /* Keys of two shards never meet: the last of one is below the first of
   * the next. */
  assert_true(chime__key_make(7, CHIME__KEY_MAX_COUNT) < chime__key_make(8, 1));
  assert_int_equal(chime_key_shard(0), 0);
  assert_int_equal(chime_key_shard(UINT64_MAX), 65535);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
