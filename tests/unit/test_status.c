/* CHIME_E* codes across gRPC (src/wire/status.c): every code the server can
 * send comes back to the client exactly, through the trailing metadata the
 * server attaches; without it only the gRPC status counts (the client has no
 * way to read the details text); malformed or unknown values are ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "chime/errors.h"
#include "wire/status.h"

static const int codes[] = {
#define CODE(name, value, msg) CHIME_##name,
    CHIME_ERRNO_MAP(CODE)
#undef CODE
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

/* A trailing metadata array of one entry besides some unrelated ones. */
typedef struct {
  grpc_metadata md[3];
  grpc_metadata_array arr;
} trailing_t;

static void trailing_with(trailing_t *t, const char *key, const char *value) {
  memset(t, 0, sizeof(*t));
  t->md[0].key = grpc_slice_from_static_string("x-proxy");
  t->md[0].value = grpc_slice_from_static_string("-4");
  t->md[1].key = grpc_slice_from_static_string(key);
  t->md[1].value = grpc_slice_from_copied_string(value);
  t->md[2].key = grpc_slice_from_static_string("grpc-status-details-bin");
  t->md[2].value = grpc_slice_from_static_string("shutting down page-lock");
  t->arr.count = t->arr.capacity = 3;
  t->arr.metadata = t->md;
}

static void trailing_free(trailing_t *t) {
  grpc_slice_unref(t->md[1].value);
}

/* What the server sends for each code (chime__call_finish: the mapped
 * status, chime__err_metadata) maps back to exactly that code. */
static void test_every_code_round_trips(void **state) {
  (void)state;
  assert_true(NCODES >= 18);
  for (size_t i = 0; i < NCODES; i++) {
    int code = codes[i];
    grpc_status_code st = chime__status_from_err(code);
    assert_int_not_equal(st, GRPC_STATUS_OK);
    grpc_metadata md;
    chime__err_metadata(&md, code);
    assert_int_equal(grpc_slice_str_cmp(md.key, CHIME__ERROR_KEY), 0);
    char want[CHIME__ERROR_VALUE_LEN];
    snprintf(want, sizeof(want), "%d", code);
    assert_int_equal(grpc_slice_str_cmp(md.value, want), 0);
    grpc_metadata_array one = {1, 1, &md};
    if (chime__status_to_err(st, &one) != code)
      fail_msg("%s: sent as status %d, read back as %s", chime_err_name(code),
               (int)st, chime_err_name(chime__status_to_err(st, &one)));
    /* Among other entries, and under any status (e.g. a proxy that rewrote
     * it), the code still wins. */
    trailing_t t;
    trailing_with(&t, CHIME__ERROR_KEY, want);
    assert_int_equal(chime__status_to_err(st, &t.arr), code);
    assert_int_equal(chime__status_to_err(GRPC_STATUS_UNKNOWN, &t.arr), code);
    trailing_free(&t);
    grpc_slice_unref(md.value);
  }
  assert_int_equal(chime__status_from_err(CHIME_OK), GRPC_STATUS_OK);
}

/* OK is success whatever metadata came with it. */
static void test_ok(void **state) {
  (void)state;
  trailing_t t;
  trailing_with(&t, CHIME__ERROR_KEY, "-4");
  assert_int_equal(chime__status_to_err(GRPC_STATUS_OK, &t.arr), 0);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_OK, NULL), 0);
  trailing_free(&t);
}

/* No chime-error (a plain gRPC status, e.g. from a proxy or gRPC itself):
 * the status alone decides; the text that used to be matched ("shutting
 * down", "page-lock") cannot reach the mapping at all. */
static void test_fallback_is_status_only(void **state) {
  (void)state;
  grpc_metadata_array none = {0, 0, NULL};
  assert_int_equal(chime__status_to_err(GRPC_STATUS_UNAVAILABLE, &none),
                   CHIME_EUNAVAILABLE);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_UNAVAILABLE, NULL),
                   CHIME_EUNAVAILABLE);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_FAILED_PRECONDITION, NULL),
                   CHIME_EINVAL);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_INVALID_ARGUMENT, NULL),
                   CHIME_EINVAL);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_NOT_FOUND, NULL),
                   CHIME_ENOTFOUND);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_RESOURCE_EXHAUSTED, NULL),
                   CHIME_ERESOURCE);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_DEADLINE_EXCEEDED, NULL),
                   CHIME_ETIMEDOUT);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_UNIMPLEMENTED, NULL),
                   CHIME_ENOTSUP);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_CANCELLED, NULL),
                   CHIME_ECLOSED);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_INTERNAL, NULL),
                   CHIME_EPROTO);
  /* Each code's status falls back to a code of its own kind. */
  for (size_t i = 0; i < NCODES; i++) {
    grpc_status_code st = chime__status_from_err(codes[i]);
    assert_int_equal(chime__status_to_err(st, NULL),
                     chime__err_from_status(st));
    assert_int_not_equal(chime__err_from_status(st), 0);
  }
}

/* A value that is not a known code is ignored, never half-read. */
static void test_bad_values(void **state) {
  (void)state;
  const char *bad[] = {"",
                       "-",
                       "4",
                       "-0",
                       "-999",
                       "-4x",
                       " -4",
                       "-4 ",
                       "+4",
                       "--4",
                       "-77",
                       "-1.0",
                       "-000000000004",
                       "-99999999999",
                       "CHIME_ESHUTDOWN",
                       "shutting down"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(chime__err_parse(bad[i], strlen(bad[i])), 0);
    trailing_t t;
    trailing_with(&t, CHIME__ERROR_KEY, bad[i]);
    assert_int_equal(chime__status_to_err(GRPC_STATUS_UNAVAILABLE, &t.arr),
                     CHIME_EUNAVAILABLE);
    trailing_free(&t);
  }
  /* Only the exact key counts. */
  trailing_t t;
  trailing_with(&t, "chime-errors", "-4");
  assert_int_equal(chime__status_to_err(GRPC_STATUS_UNAVAILABLE, &t.arr),
                   CHIME_EUNAVAILABLE);
  trailing_free(&t);
  assert_int_equal(chime__err_parse("-4", 2), CHIME_ESHUTDOWN);
  assert_int_equal(chime__err_parse("-18", 3), CHIME_ECLOSED);
  assert_int_equal(chime__err_parse("-40", 1), 0); /* length counts */
}

/* A forgotten writer (docs/protocol.md, Insert) is ABORTED on the wire:
 * its writer goes on under a new id. Only chime-error names it: a bare
 * ABORTED (a proxy's) says nothing about writers. */
static void test_forgotten_writer(void **state) {
  (void)state;
  assert_int_equal(chime__status_from_err(CHIME_EFORGOTTEN),
                   GRPC_STATUS_ABORTED);
  assert_string_equal(chime_err_name(CHIME_EFORGOTTEN), "CHIME_EFORGOTTEN");
  assert_int_equal(chime__err_parse("-20", 3), CHIME_EFORGOTTEN);
  assert_int_equal(chime__status_to_err(GRPC_STATUS_ABORTED, NULL),
                   CHIME_EPROTO);
}

/* Subscribe notices: the code when the server sends one; an older server's
 * UNAVAILABLE notice is the shutdown notice. */
static void test_notice(void **state) {
  (void)state;
  assert_int_equal(chime__notice_err(CHIME_ESHUTDOWN, GRPC_STATUS_UNAVAILABLE),
                   CHIME_ESHUTDOWN);
  assert_int_equal(chime__notice_err(0, GRPC_STATUS_UNAVAILABLE),
                   CHIME_ESHUTDOWN);
  assert_int_equal(chime__notice_err(CHIME_ECUDA, GRPC_STATUS_UNAVAILABLE),
                   CHIME_ECUDA);
  assert_int_equal(chime__notice_err(-999, GRPC_STATUS_UNAVAILABLE),
                   CHIME_ESHUTDOWN);
  assert_int_equal(chime__notice_err(0, GRPC_STATUS_OK), 0);
  assert_int_equal(chime__notice_err(0, GRPC_STATUS_NOT_FOUND),
                   CHIME_ENOTFOUND);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_code_round_trips),
      cmocka_unit_test(test_ok),
      cmocka_unit_test(test_fallback_is_status_only),
      cmocka_unit_test(test_bad_values),
      cmocka_unit_test(test_notice),
      cmocka_unit_test(test_forgotten_writer),
  };
  grpc_init();
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  grpc_shutdown_blocking();
  return rc;
}
