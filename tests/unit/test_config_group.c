/* Group tables' spec and keys (docs/replay.md, "Groups" and "Admission
 * filters"): the stored spec chime_spec_group makes and the sample spec
 * it gives back, group_max and filters read into a table's config, and
 * every mistake named: a bound out of range, a leaf named "__...", a
 * filter on a leaf that is not a scalar or not there, filters without
 * groups, groups with a sequence, compress or data_dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "server/config.h"

static chime__config_t cfg;

#define T(spec, rest)                                                          \
  "{\"tables\":[{\"name\":\"g\",\"spec\":\"" spec "\",\"capacity\":8" rest "}" \
  "]"                                                                          \
  "}"

static void expect_bad(const char *json, const char *needle) {
  char err[512] = "";
  int rc = chime__config_parse(&cfg, json, err, sizeof(err));
  if (rc != CHIME_EINVAL || strstr(err, needle) == NULL)
    fail_msg("config %s: rc %d, err '%s', wanted '%s'", json, rc, err, needle);
}

static void test_spec_round_trip(void **state) {
  (void)state;
  chime_spec_t in, st, back;
  char buf[512], err[256];
  assert_int_equal(chime_spec_parse(&in,
                                    "tokens:i32[<=100], lp:f32[<=100 ~tokens], "
                                    "obs:u8[3,4], reward:f32[]"),
                   0);
  assert_int_equal(chime_spec_group(&st, &in, 8, err, sizeof(err)), 0);
  assert_int_equal(chime_spec_format(&st, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "__group:u32[<=8,2],tokens:i32[<=800],"
                           "lp:f32[<=800 ~tokens],obs:u8[<=8,3,4 ~__group],"
                           "reward:f32[<=8 ~__group]");
  assert_int_equal(chime_spec_group_max(&st), 8);
  assert_int_equal(chime_spec_group_max(&in), 0);
  assert_int_equal(chime_spec_group_samples(&back, &st), 0);
  assert_int_equal(chime_spec_format(&back, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "tokens:i32[<=100],lp:f32[<=100 ~tokens],"
                           "obs:u8[3,4],reward:f32[]");
  assert_int_equal(chime_spec_group_samples(&back, &in), CHIME_EINVAL);
  /* No ragged leaf: one column of zeros. */
  assert_int_equal(chime_spec_parse(&in, "r:f32"), 0);
  assert_int_equal(chime_spec_group(&st, &in, 3, err, sizeof(err)), 0);
  assert_int_equal(chime_spec_format(&st, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "__group:u32[<=3,1],r:f32[<=3 ~__group]");
  assert_int_equal(chime_spec_group(&st, &in, 0, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "group_max 0"));
  assert_int_equal(chime_spec_parse(&in, "__x:f32"), 0);
  assert_int_equal(chime_spec_group(&st, &in, 3, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "leaf '__x'"));
  assert_int_equal(chime_spec_parse(&in, "t:u8[<=4294967295]"), 0);
  assert_int_equal(chime_spec_group(&st, &in, 2, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "leaf 't'"));
}

static void test_keys(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("t:i32[<=10], r:f32",
                            ",\"group_max\":4,\"filters\":[{\"leaf\":\"r\","
                            "\"drop\":\"zero_variance\"},{\"leaf\":\"r\","
                            "\"drop\":\"mean_outside\",\"min\":0.1}]"),
                          err, sizeof(err)),
      0);
  const chime__table_config_t *t = &cfg.tables[0];
  assert_int_equal(t->group_max, 4);
  assert_int_equal(chime_spec_group_max(&t->spec), 4);
  assert_int_equal(t->nfilters, 2);
  assert_int_equal(t->filters[0].kind, CHIME__FILTER_ZERO_VARIANCE);
  assert_int_equal(t->filters[0].leaf, 2);
  assert_int_equal(t->filters[1].kind, CHIME__FILTER_MEAN_OUTSIDE);
  assert_true(t->filters[1].min == 0.1 && t->filters[1].max > 1e308);
}

static void test_mistakes(void **state) {
  (void)state;
  expect_bad(T("r:f32", ",\"group_max\":0"), "'group_max'");
  expect_bad(T("r:f32", ",\"group_max\":65537"), "'group_max'");
  expect_bad(T("__group:f32", ",\"group_max\":2"), "leaf '__group'");
  expect_bad(T("t:i32[<=10], r:f32",
               ",\"group_max\":2,\"filters\":[{\"leaf\":\"t\","
               "\"drop\":\"zero_variance\"}]"),
             "leaf 't' is not a scalar");
  expect_bad(T("o:f32[2], r:f32",
               ",\"group_max\":2,\"filters\":[{\"leaf\":\"o\","
               "\"drop\":\"zero_variance\"}]"),
             "leaf 'o' is not a scalar");
  expect_bad(T("r:f16", ",\"group_max\":2,\"filters\":[{\"leaf\":\"r\","
                        "\"drop\":\"zero_variance\"}]"),
             "leaf 'r' is f16");
  expect_bad(T("r:f32", ",\"group_max\":2,\"filters\":[{\"leaf\":\"q\","
                        "\"drop\":\"zero_variance\"}]"),
             "no leaf 'q'");
  expect_bad(T("r:f32", ",\"group_max\":2,\"filters\":[{\"leaf\":\"r\","
                        "\"drop\":\"odd\"}]"),
             "'drop': expected");
  expect_bad(T("r:f32", ",\"group_max\":2,\"filters\":[{\"leaf\":\"r\","
                        "\"drop\":\"mean_outside\"}]"),
             "needs 'min', 'max'");
  expect_bad(T("r:f32", ",\"group_max\":2,\"filters\":[{\"leaf\":\"r\","
                        "\"drop\":\"mean_outside\",\"min\":2,\"max\":1}]"),
             "'min' 2 is above 'max' 1");
  expect_bad(T("r:f32", ",\"group_max\":2,\"filters\":[{\"leaf\":\"r\","
                        "\"drop\":\"zero_variance\",\"x\":1}]"),
             "unknown key 'x'");
  expect_bad(T("r:f32", ",\"filters\":[]"), "set group_max");
  expect_bad(T("r:f32", ",\"group_max\":2,\"compress\":{\"r\":3}"),
             "keep their leaves raw");
  expect_bad(T("r:f32", ",\"group_max\":2,\"data_dir\":\"/d\""),
             "kept in memory");
  expect_bad("{\"tables\":[{\"name\":\"s\",\"spec\":\"o:u8\","
             "\"capacity_steps\":100,\"sequence_length\":4,"
             "\"group_max\":2}]}",
             "windows, not groups");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_round_trip),
      cmocka_unit_test(test_keys),
      cmocka_unit_test(test_mistakes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
