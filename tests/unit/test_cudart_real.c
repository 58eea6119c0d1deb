/* The real CUDA runtime on a host with no driver (these build machines: a
 * libcudart.so.13 under /usr/local/cuda, no GPU): asking for page-locking
 * must fail, naming cudaErrorInsufficientDriver and the ladder. Skips (77)
 * where no runtime is installed, or where a driver is (then pinning could
 * succeed and tests/gpu/ is the check to run). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "chime/ring.h"
#include "ring/cudart.h"
#include "ring/pin.h"
#include "ring/producer.h"

static int g_rc;
static char g_err[CHIME__CUDA_MSG_MAX * 2];

static void test_require_names_insufficient_driver(void **state) {
  char err2[CHIME__CUDA_MSG_MAX * 2];
  const char *hit;

  (void)state;
  fprintf(stderr, "error as reported: %s\n", g_err);
  assert_int_equal(g_rc, CHIME_ECUDA);
  hit = strstr(g_err, "cudaErrorInsufficientDriver (35) from cudaFree(NULL)");
  assert_non_null(hit);
  assert_non_null(strstr(g_err, "page-locking failed: CUDA runtime: "));
  assert_non_null(strstr(hit, " in /"));
  assert_non_null(strstr(hit, "libcudart.so"));
  /* The ladder ran from the top: nothing was mapped before. */
  assert_non_null(strstr(hit, "; ladder: [loaded] no libcudart mapped"));
  assert_non_null(strstr(hit, "] loaded /"));
  assert_non_null(strstr(hit, "; [sonames] "));
  assert_null(chime__cudart());
  assert_int_equal(chime__cuda_require(err2, sizeof err2), CHIME_ECUDA);
  assert_string_equal(g_err, err2);
}

static void test_ring_pin_fails_whole(void **state) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;

  (void)state;
  assert_int_equal(chime_spec_parse(&spec, "x:u8[4096]"), 0);
  assert_int_equal(chime__ring_create(&ring, &spec, 2, 4), 0);
  assert_int_equal(chime_ring_pin(ring), CHIME_ECUDA);
  assert_non_null(
      strstr(chime_last_error(), "cudaErrorInsufficientDriver (35)"));
  assert_int_equal(chime_ring_pinned_bytes(ring), 0);
  chime_ring_destroy(ring);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_require_names_insufficient_driver),
      cmocka_unit_test(test_ring_pin_fails_whole),
  };

  /* Probing for the driver loads no CUDA runtime, so the ladder below still
   * starts from nothing mapped. */
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != NULL) {
    fprintf(stderr, "skip: a CUDA driver is installed; run "
                    "scripts/gpu-check.sh instead\n");
    return 77;
  }
  g_rc = chime__cuda_require(g_err, sizeof g_err);
  if (g_rc != 0 && strstr(g_err, "no CUDA runtime found") != NULL) {
    fprintf(stderr, "skip: no CUDA runtime installed: %s\n", g_err);
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
