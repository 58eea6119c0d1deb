/* GetInfo's TableInfo.compress read back into levels by a writer
 * (chime__zleaf_levels, replay/zleaf.h): what chimed writes
 * (chime__table_compress_text) reads back as the config's levels, and
 * text that is not leaf:level of the spec is refused with every level 0,
 * so a writer never compresses a leaf its table does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/table.h"
#include "replay/zleaf.h"

static const char *spec_text = "obs:u8[84,84], a:i32[], frames:u8[4,8]";

static void test_round_trip(void **state) {
  (void)state;
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  assert_int_equal(chime_spec_parse(&tc.spec, spec_text), 0);
  tc.compress[0] = 3;
  tc.compress[2] = 22;
  char text[128];
  assert_int_equal(chime__table_compress_text(&tc, text, sizeof(text)), 0);
  assert_string_equal(text, "obs:3,frames:22");
  uint8_t lv[CHIME_MAX_LEAVES];
  assert_int_equal(chime__zleaf_levels(&tc.spec, text, lv), 0);
  assert_memory_equal(lv, tc.compress, CHIME_MAX_LEAVES);
  assert_int_equal(chime__zleaf_levels(&tc.spec, "", lv), 0);
  for (int l = 0; l < CHIME_MAX_LEAVES; l++)
    assert_int_equal(lv[l], 0);
}

static void test_refused(void **state) {
  (void)state;
  chime_spec_t spec;
  assert_int_equal(chime_spec_parse(&spec, spec_text), 0);
  const char *bad[] = {"obs",    "obs:",       "obs:0",     "obs:23", "ob:3",
                       "obsx:3", "obs:3x",     "obs:3;a:1", ":3",     "obs:-1",
                       ",obs:3", "obs:3,,a:1", "nope:1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint8_t lv[CHIME_MAX_LEAVES];
    memset(lv, 9, sizeof(lv));
    if (chime__zleaf_levels(&spec, bad[i], lv) != CHIME_EPROTO)
      fail_msg("'%s' read", bad[i]);
    for (int l = 0; l < CHIME_MAX_LEAVES; l++)
      assert_int_equal(lv[l], 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
