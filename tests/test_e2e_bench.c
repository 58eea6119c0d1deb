/* chime-bench service and ingest still run end to end and print what
 * docs/benchmarks.md promises: one JSON object per line with the documented
 * fields, every case present. Tiny runs; no figure is judged here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "harness.h"

static char bench[512];

static int setup(void **state) {
  (void)state;
  char chimed[512];
  if (chime__harness_bin("bench/chime-bench", bench, sizeof(bench)) == NULL ||
      chime__harness_bin("src/server/chimed", chimed, sizeof(chimed)) == NULL)
    chime__skip("chime-bench or chimed is not built");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  chime__harness_kill_all();
  return 0;
}

/* Runs chime-bench with args; returns its stdout lines as JSON objects in
 * an array (fails the test unless it exits 0 and every line is JSON). */
static json_t *run_bench(const char *const args[], const char *name) {
  char out[600], line[4096], sbuf[64];
  const char *argv[16];
  size_t n = 0;
  argv[n++] = bench;
  for (size_t i = 0; args[i] != NULL && n < 15; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  snprintf(out, sizeof(out), "%s/%s.out", chime__harness_tmpdir(), name);
  chime__proc_t p;
  int st = 0;
  assert_int_equal(chime__proc_spawn(&p, argv, out), 0);
  if (chime__proc_wait(&p, 150000, &st) != 0)
    fail_msg("chime-bench %s did not finish in 150 s", name);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("chime-bench %s: %s", name,
             chime__status_str(st, sbuf, sizeof(sbuf)));
  json_t *all = json_array();
  FILE *f = fopen(out, "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    json_error_t jerr;
    json_t *j = json_loads(line, 0, &jerr);
    if (j == NULL || !json_is_object(j))
      fail_msg("chime-bench %s printed a line that is not a JSON object: %s",
               name, line);
    json_array_append_new(all, j);
  }
  fclose(f);
  return all;
}

static double num(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_number(v))
    fail_msg("no number '%s' in %s", key, json_dumps(obj, 0));
  return json_number_value(v);
}

static void test_service_output(void **state) {
  (void)state;
  static const char *const cases[] = {"memcpy", "tcp", "grpc_plain",
                                      "chime_shm", "chime_stream"};
  const char *args[] = {"service", "--json",  "--runs", "1", "--mib",
                        "16",      "--sizes", "1,16",   NULL};
  json_t *all = run_bench(args, "service");
  assert_int_equal(json_array_size(all), 10);
  for (int size = 0; size < 2; size++) {
    for (size_t c = 0; c < 5; c++) {
      int found = 0;
      size_t i;
      json_t *j;
      json_array_foreach(all, i, j) {
        if (strcmp(json_string_value(json_object_get(j, "case")), cases[c]) ||
            num(j, "batch_bytes") != (size ? 16 : 1) * 1048576.0)
          continue;
        found = 1;
        assert_string_equal(json_string_value(json_object_get(j, "bench")),
                            "service");
        assert_true(num(j, "gbps") > 0);
        assert_true(num(j, "cpu_s_per_gb") >= 0);
        if (c > 0)
          assert_true(num(j, "ratio_vs_memcpy") > 0);
        if (c >= 3)
          assert_true(num(j, "ratio_vs_grpc_plain") > 0);
      }
      if (!found)
        fail_msg("no %s line for %d MiB", cases[c], size ? 16 : 1);
    }
  }
  json_decref(all);
}

static void test_ingest_output(void **state) {
  (void)state;
  const char *args[] = {"ingest",  "--json", "--runs", "1",
                        "--scale", "0.02",   NULL};
  json_t *all = run_bench(args, "ingest");
  assert_int_equal(json_array_size(all), 2);
  size_t i;
  json_t *j;
  json_array_foreach(all, i, j) {
    assert_string_equal(json_string_value(json_object_get(j, "bench")),
                        "ingest");
    assert_true(num(j, "sample_bytes") == (i == 0 ? 256 : 65536));
    assert_true(num(j, "samples_per_s") > 0);
    assert_true(num(j, "gbps") > 0);
  }
  json_decref(all);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_service_output),
      cmocka_unit_test(test_ingest_output),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
