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

static const char *str(json_t *obj, const char *key) {
  const char *v = json_string_value(json_object_get(obj, key));
  if (v == NULL)
    fail_msg("no string '%s' in %s", key, json_dumps(obj, 0));
  return v;
}

/* key, key_min and key_max, in order */
static void check_stat(json_t *obj, const char *key) {
  char k[128];
  double med = num(obj, key);
  snprintf(k, sizeof(k), "%s_min", key);
  double lo = num(obj, k);
  snprintf(k, sizeof(k), "%s_max", key);
  double hi = num(obj, k);
  if (!(lo <= med && med <= hi))
    fail_msg("%s: %g not within [%g, %g]", key, med, lo, hi);
}

/* chime-bench ragged: the bytes held, moved and sent in stream mode
 * within 1.05x the bytes used (deterministic: the lengths are seeded), the
 * delivery figures printed (speed is not judged here: a shared machine). */
static void test_ragged_output(void **state) {
  (void)state;
  const char *args[] = {"ragged",   "--json", "--items", "512",
                        "--rounds", "3",      NULL};
  json_t *all = run_bench(args, "ragged");
  assert_int_equal(json_array_size(all), 1);
  json_t *o = json_array_get(all, 0);
  assert_string_equal(str(o, "bench"), "ragged");
  double mean = num(o, "mean_tokens");
  assert_true(mean > 700 && mean < 1300);
  assert_true(num(o, "held_over_used") >= 1.0);
  assert_true(num(o, "held_over_used") <= 1.05);
  assert_true(num(o, "moved_over_used") >= 1.0);
  assert_true(num(o, "moved_over_used") <= 1.05);
  /* What stream mode sends: the rows used, their offsets and the info. */
  assert_true(num(o, "stream_sent_over_used") >= 1.0);
  assert_true(num(o, "stream_sent_over_used") <= 1.05);
  assert_true(num(o, "fixed_stream_sent_over_used") >= 1.0);
  assert_true(num(o, "prefix_over_used") > 5);
  assert_true(num(o, "ragged_gbps") > 0);
  assert_true(num(o, "fixed_gbps") > 0);
  assert_true(num(o, "ragged_over_fixed") > 0);
  json_decref(all);
}

/* chime-bench storage: the frames held compressed at about what libzstd
 * makes of them (deterministic: the frames are rendered, the level set),
 * stream mode's bytes a batch near what its samples hold, the rates
 * printed (speed is not judged here). */
static void test_storage_output(void **state) {
  (void)state;
  const char *args[] = {"storage", "--json", "--frames", "2000", NULL};
  json_t *all = run_bench(args, "storage");
  assert_int_equal(json_array_size(all), 1);
  json_t *o = json_array_get(all, 0);
  assert_string_equal(str(o, "bench"), "storage");
  assert_true(num(o, "held_frame_vs_zstd") >= 1.0);
  assert_true(num(o, "held_frame_vs_zstd") <= 1.05);
  /* the rendered screens compress as Atari frames do: well past 20x */
  assert_true(num(o, "raw_per_sample") / num(o, "held_per_sample") > 20);
  assert_true(num(o, "insert_vs_zstd_compress") > 0);
  assert_true(num(o, "sample_vs_zstd_decompress") > 0);
  /* Stream mode's bytes: each frame as stored, the raw leaves, and the
   * offsets and info packed (replay/ztail.h): at most 1.1x the samples as
   * stored (issue 34's target), below them and their info raw; a small
   * part of a raw batch. */
  assert_true(num(o, "wire_per_batch") > num(o, "stored_per_batch"));
  assert_true(num(o, "wire_vs_stored") <= 1.1);
  assert_true(num(o, "wire_vs_stored_and_info") < 1.0);
  assert_true(num(o, "wire_vs_raw") < 0.1);
  json_decref(all);
}

/* chime-bench storage --stacked: frames stored once as sequence steps, the
 * stack of 4 a window over them; the bytes are deterministic (rendered
 * frames, set level), the rates printed (not judged here). */
static void test_storage_stacked_output(void **state) {
  (void)state;
  const char *args[] = {"storage", "--json",    "--frames",
                        "2000",    "--stacked", NULL};
  json_t *all = run_bench(args, "storage_stacked");
  assert_int_equal(json_array_size(all), 1);
  json_t *o = json_array_get(all, 0);
  assert_string_equal(str(o, "bench"), "storage_stacked");
  /* 4 episodes (games) of 500 steps, a window every step but the last 3 */
  assert_true(num(o, "steps") == 2000);
  assert_true(num(o, "windows") == 4 * 497);
  assert_true(num(o, "raw_per_transition") == 4 * 84 * 84 + 8);
  /* each frame held once, at about libzstd's frame (its size beside it) */
  assert_true(num(o, "frame_vs_zstd") >= 1.0);
  assert_true(num(o, "frame_vs_zstd") <= 1.05);
  assert_true(num(o, "raw_per_transition") / num(o, "held_per_transition") >=
              20);
  /* raw, frames stored once: a frame and a, r per transition, about */
  assert_true(num(o, "raw_seq_held_per_transition") >= 84 * 84 + 8);
  assert_true(num(o, "sample_vs_zstd_decompress") > 0);
  /* stream mode: windows as their steps are stored, the tail packed */
  assert_true(num(o, "wire_per_batch") > num(o, "stored_per_batch"));
  assert_true(num(o, "wire_vs_stored") <= 1.1);
  json_decref(all);
}

static void test_service_output(void **state) {
  (void)state;
  static const char *const cases[] = {"memcpy",    "tcp",          "grpc_plain",
                                      "chime_shm", "chime_stream", "learners"};
  const char *args[] = {"service",   "--json",  "--runs", "1",          "--mib",
                        "16",        "--sizes", "1,16",   "--learners", "1",
                        "--seconds", "0.2",     NULL};
  json_t *all = run_bench(args, "service");
  assert_int_equal(json_array_size(all), 12);
  for (int size = 0; size < 2; size++) {
    for (size_t c = 0; c < 6; c++) {
      int found = 0;
      size_t i;
      json_t *j;
      json_array_foreach(all, i, j) {
        if (strcmp(json_string_value(json_object_get(j, "case")), cases[c]) ||
            num(j, "batch_bytes") != (size ? 16 : 1) * 1048576.0)
          continue;
        found = 1;
        assert_string_equal(str(j, "bench"), "service");
        assert_string_equal(str(j, "touch"), "line");
        assert_true(num(j, "gbps") > 0);
        check_stat(j, "gbps");
        if (c == 5) {
          /* the fan-out phase: one shm and one stream learner process */
          assert_true(num(j, "learners") == 1);
          assert_string_equal(str(j, "learner_modes"), "both");
          assert_true(num(j, "shm_gbps") > 0);
          assert_true(num(j, "stream_gbps") > 0);
          check_stat(j, "shm_gbps");
          check_stat(j, "stream_gbps");
          assert_true(num(j, "chimed_threads") >= 1);
          assert_true(num(j, "chimed_threads_before") >= 1);
          assert_true(num(j, "ingest_sample_bytes") == 256);
          assert_true(num(j, "ingest_samples_per_s") > 0);
          assert_true(num(j, "ingest_alone_samples_per_s") > 0);
          check_stat(j, "ingest_samples_per_s");
          check_stat(j, "ingest_ratio_vs_alone");
          check_stat(j, "chimed_cpu_cores");
          check_stat(j, "learners_cpu_cores");
          check_stat(j, "actor_cpu_cores");
          check_stat(j, "actor_alone_cpu_cores");
          check_stat(j, "actor_runq_cores");
          check_stat(j, "actor_alone_runq_cores");
          continue;
        }
        /* every case skips as many batches as the ring has slots */
        assert_true(num(j, "warmup_batches") == (size ? 4 : 8));
        assert_true(num(j, "cpu_s_per_gb") > 0);
        check_stat(j, "cpu_s_per_gb");
        if (c > 0)
          check_stat(j, "ratio_vs_memcpy");
        if (c >= 3) {
          check_stat(j, "ratio_vs_grpc_plain");
          check_stat(j, "cpu_ratio_vs_grpc_plain");
        }
        if (c >= 2) {
          /* the sending process's share of the CPU, and how busy it was */
          check_stat(j, "server_cpu_s_per_gb");
          check_stat(j, "server_busy");
          assert_true(num(j, "server_cpu_s_per_gb") >= 0);
          assert_true(num(j, "server_cpu_s_per_gb") <= num(j, "cpu_s_per_gb"));
        } else {
          assert_null(json_object_get(j, "server_busy"));
        }
        if (c == 0 || c >= 3) {
          /* memcpy gathers rows of a table as big as chimed's */
          assert_true(num(j, "sample_bytes") == 65536);
          assert_true(num(j, "table_bytes") == 64 * 1048576.0);
          assert_true(num(j, "batch_size") * 65536 == num(j, "batch_bytes"));
        }
      }
      if (!found)
        fail_msg("no %s line for %d MiB", cases[c], size ? 16 : 1);
    }
  }
  json_decref(all);
}

/* --touch page: named in the output; --only: that case alone, no ratios. */
static void test_service_touch_page(void **state) {
  (void)state;
  const char *args[] = {"service", "--json",  "--runs", "1",      "--mib",
                        "8",       "--sizes", "1",      "--only", "chime_shm",
                        "--touch", "page",    NULL};
  json_t *all = run_bench(args, "service_page");
  assert_int_equal(json_array_size(all), 1);
  json_t *j = json_array_get(all, 0);
  assert_string_equal(str(j, "case"), "chime_shm");
  assert_string_equal(str(j, "touch"), "page");
  assert_true(num(j, "gbps") > 0);
  assert_null(json_object_get(j, "ratio_vs_memcpy"));
  assert_null(json_object_get(j, "ratio_vs_grpc_plain"));
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
      cmocka_unit_test(test_ragged_output),
      cmocka_unit_test(test_storage_output),
      cmocka_unit_test(test_storage_stacked_output),
      cmocka_unit_test(test_service_output),
      cmocka_unit_test(test_service_touch_page),
      cmocka_unit_test(test_ingest_output),
  };
  return cmocka_run_group_tests(tests, setup, chime__harness_teardown);
}
