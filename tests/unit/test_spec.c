/* Spec parsing, validation and formatting, including every rejection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chime/ring.h"
#include "common/spec.h"

static void parse_ok(const char *text, chime_spec_t *spec) {
  int rc = chime_spec_parse(spec, text);
  if (rc != 0)
    fail_msg("parse '%s': %s", text, chime_last_error());
}

/* Asserts a rejection whose message mentions `needle`. */
static void parse_bad(const char *text, const char *needle) {
  chime_spec_t spec;
  assert_int_equal(chime_spec_parse(&spec, text), CHIME_EINVAL);
  if (strstr(chime_last_error(), needle) == NULL)
    fail_msg("parse '%s': error '%s' does not mention '%s'", text,
             chime_last_error(), needle);
  assert_int_equal(spec.nleaves, 0);
}

static void test_parse_basic(void **state) {
  chime_spec_t s;
  (void)state;
  parse_ok("obs:f32[64], action:i32[], reward:f32[]", &s);
  assert_int_equal(s.nleaves, 3);
  assert_string_equal(s.leaves[0].name, "obs");
  assert_int_equal(s.leaves[0].dtype, CHIME_DTYPE_F32);
  assert_int_equal(s.leaves[0].ndim, 1);
  assert_int_equal(s.leaves[0].shape[0], 64);
  assert_string_equal(s.leaves[1].name, "action");
  assert_int_equal(s.leaves[1].dtype, CHIME_DTYPE_I32);
  assert_int_equal(s.leaves[1].ndim, 0);
  assert_int_equal(s.leaves[2].dtype, CHIME_DTYPE_F32);
  assert_int_equal(chime_spec_sample_bytes(&s), 64 * 4 + 4 + 4);
}

static void test_parse_shapes_and_whitespace(void **state) {
  chime_spec_t s;
  (void)state;
  parse_ok("x:u8[84,84,4]", &s);
  assert_int_equal(s.nleaves, 1);
  assert_int_equal(s.leaves[0].ndim, 3);
  assert_int_equal(s.leaves[0].shape[2], 4);
  assert_int_equal(chime_leaf_bytes(&s.leaves[0]), 84 * 84 * 4);

  parse_ok("r:f32", &s);
  assert_int_equal(s.leaves[0].ndim, 0);
  assert_int_equal(chime_spec_sample_bytes(&s), 4);

  parse_ok("  a : bf16 [ 2 , 3 ] ,\n\tb.c/d-e_f:bool  ", &s);
  assert_int_equal(s.nleaves, 2);
  assert_string_equal(s.leaves[0].name, "a");
  assert_int_equal(s.leaves[0].dtype, CHIME_DTYPE_BF16);
  assert_int_equal(s.leaves[0].shape[1], 3);
  assert_string_equal(s.leaves[1].name, "b.c/d-e_f");
  assert_int_equal(chime_spec_sample_bytes(&s), 2 * 3 * 2 + 1);
}

static void test_every_dtype(void **state) {
  static const struct {
    const char *name;
    chime_dtype_t dtype;
    size_t size;
  } all[] = {{"u8", CHIME_DTYPE_U8, 1},    {"i8", CHIME_DTYPE_I8, 1},
             {"u16", CHIME_DTYPE_U16, 2},  {"i16", CHIME_DTYPE_I16, 2},
             {"u32", CHIME_DTYPE_U32, 4},  {"i32", CHIME_DTYPE_I32, 4},
             {"u64", CHIME_DTYPE_U64, 8},  {"i64", CHIME_DTYPE_I64, 8},
             {"f16", CHIME_DTYPE_F16, 2},  {"bf16", CHIME_DTYPE_BF16, 2},
             {"f32", CHIME_DTYPE_F32, 4},  {"f64", CHIME_DTYPE_F64, 8},
             {"bool", CHIME_DTYPE_BOOL, 1}};
  (void)state;
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
    char text[32];
    chime_spec_t s;
    assert_int_equal(chime_dtype_from_name(all[i].name), all[i].dtype);
    assert_string_equal(chime_dtype_name(all[i].dtype), all[i].name);
    assert_int_equal(chime_dtype_size(all[i].dtype), all[i].size);
    snprintf(text, sizeof(text), "v:%s[3]", all[i].name);
    parse_ok(text, &s);
    assert_int_equal(chime_spec_sample_bytes(&s), 3 * all[i].size);
  }
  assert_int_equal(chime_dtype_from_name("f128"), CHIME_DTYPE_INVALID);
  assert_int_equal(chime_dtype_from_name(NULL), CHIME_DTYPE_INVALID);
  assert_int_equal(chime_dtype_size(CHIME_DTYPE_INVALID), 0);
  assert_int_equal(chime_dtype_size((chime_dtype_t)99), 0);
}

static void test_parse_rejections(void **state) {
  char many[CHIME_MAX_LEAVES * 16 + 64];
  char longname[CHIME_MAX_NAME + 32];
  size_t used = 0;
  (void)state;
  parse_bad("", "empty spec");
  parse_bad("   \t ", "empty spec");
  parse_bad("obs:f99[3]", "obs");
  parse_bad("obs:f99[3]", "unknown dtype");
  parse_bad("obs:float32[3]", "unknown dtype");
  parse_bad("obs:f32[0]", "obs");
  parse_bad("obs:f32[4,0]", "zero");
  parse_bad("a:f32, a:i32", "duplicate");
  parse_bad(":f32", "empty");
  parse_bad("a:f32,,b:f32", "empty");
  parse_bad("a:f32,", "empty");
  parse_bad("o bs:f32", "o");
  parse_bad("obs$:f32", "obs");
  parse_bad("obs", "expected ':'");
  parse_bad("obs:", "unknown dtype");
  parse_bad("obs:f32[3", "obs");
  parse_bad("obs:f32[3,]", "obs");
  parse_bad("obs:f32[-3]", "obs");
  parse_bad("obs:f32[3] x", "obs");
  parse_bad("obs:f32[1,2,3,4,5,6,7,8,9]", "dims");
  parse_bad("obs:f32[99999999999999999999]", "overflow");
  parse_bad("big:u64[4294967296,4294967296]", "big");
  parse_bad("big:u64[4294967296,4294967296]", "overflow");

  for (int i = 0; i <= CHIME_MAX_LEAVES; i++)
    used += (size_t)snprintf(many + used, sizeof(many) - used, "%sl%d:u8",
                             i ? "," : "", i);
  parse_bad(many, "leaves");

  memset(longname, 'n', CHIME_MAX_NAME);
  strcpy(longname + CHIME_MAX_NAME, ":f32");
  parse_bad(longname, "name longer");
}

static void test_max_leaves_and_dims_accepted(void **state) {
  char many[CHIME_MAX_LEAVES * 16 + 64];
  size_t used = 0;
  chime_spec_t s;
  (void)state;
  for (int i = 0; i < CHIME_MAX_LEAVES; i++)
    used += (size_t)snprintf(many + used, sizeof(many) - used, "%sl%d:u8",
                             i ? "," : "", i);
  parse_ok(many, &s);
  assert_int_equal(s.nleaves, CHIME_MAX_LEAVES);
  parse_ok("d:u8[1,2,3,4,5,6,7,8]", &s);
  assert_int_equal(s.leaves[0].ndim, CHIME_MAX_DIMS);
  assert_int_equal(chime_spec_sample_bytes(&s), 40320);
}

static void test_validate_struct(void **state) {
  chime_spec_t s;
  (void)state;
  parse_ok("a:f32[2], b:u8", &s);
  assert_int_equal(chime_spec_validate(&s), 0);

  s.leaves[1].dtype = (chime_dtype_t)42;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "'b'"));
  s.leaves[1].dtype = CHIME_DTYPE_U8;

  s.leaves[0].ndim = CHIME_MAX_DIMS + 1;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  assert_int_equal(chime_leaf_bytes(&s.leaves[0]), 0);
  s.leaves[0].ndim = 1;

  /* A name without a terminating NUL, as a hostile header could hold. */
  memset(s.leaves[0].name, 'x', CHIME_MAX_NAME);
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "longer"));
  strcpy(s.leaves[0].name, "a");

  s.nleaves = 0;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  assert_int_equal(chime_spec_sample_bytes(&s), 0);
  s.nleaves = CHIME_MAX_LEAVES + 1;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  assert_int_equal(chime_spec_validate(NULL), CHIME_EINVAL);
}

static void test_format_round_trip(void **state) {
  chime_spec_t s, t;
  char buf[256], small[8];
  (void)state;
  parse_ok(" obs : f32[64] , action:i32, x:u8[84, 84,4]", &s);
  assert_int_equal(chime_spec_format(&s, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "obs:f32[64],action:i32[],x:u8[84,84,4]");
  parse_ok(buf, &t);
  assert_memory_equal(&s, &t, sizeof(s));
  assert_int_equal(chime_spec_format(&s, small, sizeof(small)),
                   CHIME_EOVERFLOW);
  assert_true(strlen(small) < sizeof(small));
  memset(&t, 0, sizeof(t));
  assert_int_equal(chime_spec_format(&t, buf, sizeof(buf)), CHIME_EINVAL);
}

/* Where two specs part (a checkpoint's against its config, a writer's
 * against its table): the first leaf that differs, and how. */
static void test_diff(void **state) {
  (void)state;
  chime_spec_t a, b;
  uint32_t at = 99;
  assert_int_equal(chime_spec_parse(&a, "x:f32[2,3], y:i64[]"), 0);
  assert_int_equal(chime_spec_parse(&b, "x:f32[2,3], y:i64[]"), 0);
  assert_int_equal(chime__spec_diff(&a, &b, &at), CHIME__SPEC_SAME);
  assert_int_equal(chime_spec_parse(&b, "x:f32[2,3], z:i64[]"), 0);
  assert_int_equal(chime__spec_diff(&a, &b, &at), CHIME__SPEC_NAME);
  assert_int_equal(at, 1);
  assert_int_equal(chime_spec_parse(&b, "x:f32[3,2], y:i64[]"), 0);
  assert_int_equal(chime__spec_diff(&a, &b, &at), CHIME__SPEC_TYPE);
  assert_int_equal(at, 0);
  assert_int_equal(chime_spec_parse(&b, "x:f32[2,3,1], y:i64[]"), 0);
  assert_int_equal(chime__spec_diff(&a, &b, &at), CHIME__SPEC_TYPE);
  assert_int_equal(chime_spec_parse(&b, "x:f64[2,3], y:i64[]"), 0);
  assert_int_equal(chime__spec_diff(&a, &b, &at), CHIME__SPEC_TYPE);
  assert_int_equal(chime_spec_parse(&b, "x:f32[2,3]"), 0);
  assert_int_equal(chime__spec_diff(&a, &b, &at), CHIME__SPEC_ONLY_A);
  assert_int_equal(at, 1);
  assert_int_equal(chime__spec_diff(&b, &a, &at), CHIME__SPEC_ONLY_B);
  assert_int_equal(at, 1);
}

/* Ragged leaves: "[<=N, ...]" bounds the first dimension, "~leaf" shares
 * an earlier ragged leaf's length; parsed, printed back the same, compared,
 * and their sizes counted at the bound. */
static void test_ragged_parse_format(void **state) {
  chime_spec_t s, t;
  char buf[512], buf2[512];
  (void)state;
  parse_ok("tokens:i32[<=8192], logprobs:f32[ <= 8192 ~ tokens ], "
           "frames:u8[<=64,84,84], reward:f32[]",
           &s);
  assert_int_equal(s.nleaves, 4);
  assert_int_equal(s.leaves[0].ragged, 1);
  assert_int_equal(s.leaves[0].shares, 0);
  assert_int_equal(s.leaves[0].shape[0], 8192);
  assert_int_equal(s.leaves[1].ragged, 1);
  assert_int_equal(s.leaves[1].shares, 1); /* 1 + index of tokens */
  assert_int_equal(s.leaves[2].ragged, 1);
  assert_int_equal(s.leaves[2].ndim, 3);
  assert_int_equal(s.leaves[2].shares, 0);
  assert_int_equal(s.leaves[3].ragged, 0);
  assert_int_equal(chime_spec_ragged(&s), 3);
  assert_int_equal(chime_leaf_bytes(&s.leaves[2]), 64 * 84 * 84);
  assert_int_equal(chime_leaf_row_bytes(&s.leaves[2]), 84 * 84);
  assert_int_equal(chime_leaf_row_bytes(&s.leaves[0]), 4);
  assert_int_equal(chime_spec_format(&s, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "tokens:i32[<=8192],logprobs:f32[<=8192 ~tokens],"
                           "frames:u8[<=64,84,84],reward:f32[]");
  parse_ok(buf, &t);
  assert_int_equal(chime_spec_format(&t, buf2, sizeof(buf2)), 0);
  assert_string_equal(buf, buf2);
  uint32_t at;
  assert_int_equal(chime__spec_diff(&s, &t, &at), CHIME__SPEC_SAME);
  /* A chain is followed to the leaf that owns the length. */
  parse_ok("a:i32[<=8], b:f32[<=8 ~a], c:u8[<=8 ~b]", &s);
  assert_int_equal(s.leaves[2].shares, 1);
  /* Ragged and fixed of one bound differ; so do shared and own lengths. */
  parse_ok("a:i32[<=8], b:f32[<=8]", &s);
  parse_ok("a:i32[8], b:f32[<=8]", &t);
  assert_int_equal(chime__spec_diff(&s, &t, &at), CHIME__SPEC_TYPE);
  assert_int_equal(at, 0);
  parse_ok("a:i32[<=8], b:f32[<=8 ~a]", &t);
  assert_int_equal(chime__spec_diff(&s, &t, &at), CHIME__SPEC_TYPE);
  assert_int_equal(at, 1);
  /* The error text of a ragged leaf's type says its bound. */
  chime__leaf_type_text(&t.leaves[1], buf, sizeof(buf));
  assert_string_equal(buf, "f32[<=8]");
}

static void test_ragged_rejections(void **state) {
  (void)state;
  parse_bad("x:u8[64,<=84]", "only the first dimension may be ragged");
  parse_bad("x:u8[<=0]", "dimension is zero");
  parse_bad("x:u8[<=]", "expected a dimension");
  parse_bad("x:u8[<= -1]", "expected a dimension");
  parse_bad("x:u8[<8]", "expected a dimension");
  parse_bad("a:i32[8], b:f32[8 ~a]", "only a ragged leaf");
  parse_bad("a:i32[8], b:f32[<=8 ~a]", "which is not ragged");
  parse_bad("b:f32[<=8 ~a], a:i32[<=8]", "no earlier leaf");
  parse_bad("b:f32[<=8 ~b]", "no earlier leaf");
  parse_bad("a:i32[<=8], b:f32[<=9 ~a]", "bound 9 differs");
  parse_bad("a:i32[<=8], b:f32[<=8 ~a, 3]", "expected ']'");
  parse_bad("a:i32[<=8], b:f32[<=8 ~]", "no earlier leaf");
  /* The struct form: flags from a message or a ring header. */
  chime_spec_t s;
  parse_ok("a:i32[<=8], b:f32[]", &s);
  s.leaves[1].ragged = 1; /* a scalar has no first dimension */
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "needs a first dimension"));
  s.leaves[1].ragged = 2;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  parse_ok("a:i32[<=8], b:f32[<=8]", &s);
  s.leaves[1].shares = 3; /* itself, then past it */
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  s.leaves[1].shares = 2;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
  s.leaves[0].shares = 1;
  assert_int_equal(chime_spec_validate(&s), CHIME_EINVAL);
}

/* A sample's lengths: within bounds, shared ones equal, bytes counted at
 * the lengths (nothing padded). */
static void test_ragged_lengths(void **state) {
  chime_spec_t s;
  char err[256] = "";
  uint64_t bytes;
  (void)state;
  parse_ok("t:i32[<=8], lp:f32[<=8 ~t], f:u8[<=4,3], r:f32[]", &s);
  uint32_t ok[2 * 3] = {8, 8, 0, 0, 0, 4};
  assert_int_equal(
      chime__spec_ragged_bytes(&s, 2, ok, &bytes, err, sizeof(err)), 0);
  assert_int_equal(bytes, 2 * 4 + (8 * 4 + 8 * 4) + (4 * 3));
  uint32_t long_[3] = {9, 9, 0};
  assert_int_equal(
      chime__spec_ragged_bytes(&s, 1, long_, &bytes, err, sizeof(err)),
      CHIME_EINVAL);
  assert_non_null(strstr(err, "leaf 't': sample 0 has 9 rows, more than its "
                              "bound 8"));
  uint32_t unlike[6] = {1, 1, 1, 2, 3, 1};
  assert_int_equal(
      chime__spec_ragged_bytes(&s, 2, unlike, &bytes, err, sizeof(err)),
      CHIME_EINVAL);
  assert_non_null(strstr(err, "leaf 'lp': sample 1 has 3 rows, 't' 2: they "
                              "share a length"));
  assert_int_equal(
      chime__spec_ragged_bytes(&s, 1, NULL, &bytes, err, sizeof(err)),
      CHIME_EINVAL);
  /* A spec without ragged leaves: count * sample bytes. */
  parse_ok("x:f32[3]", &s);
  assert_int_equal(chime__spec_ragged_bytes(&s, 5, NULL, &bytes, NULL, 0), 0);
  assert_int_equal(bytes, 60);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_basic),
      cmocka_unit_test(test_parse_shapes_and_whitespace),
      cmocka_unit_test(test_every_dtype),
      cmocka_unit_test(test_parse_rejections),
      cmocka_unit_test(test_max_leaves_and_dims_accepted),
      cmocka_unit_test(test_validate_struct),
      cmocka_unit_test(test_format_round_trip),
      cmocka_unit_test(test_diff),
      cmocka_unit_test(test_ragged_parse_format),
      cmocka_unit_test(test_ragged_rejections),
      cmocka_unit_test(test_ragged_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
