/* Device streams through the real chimed, in shm and stream mode, with the
 * client's CUDA runtime the fake one (tests/support/fake_cudart.c, lazy:
 * a little device work runs at each cudaEventQuery). The server refills
 * every slot the client gives back, so a slot given back before its copy
 * ended would be rewritten under the copy ("copy-src-changed" in the
 * fake's log, and samples whose leaves disagree).
 *
 * Each batch: next, chime_stream_wait on a learner stream of the test's
 * own, a "kernel" there that reads the batch, release. Checked: every
 * sample arrives whole (obs[j] == act * 16 + j), the ring is registered
 * once per stream (not at all when pin_host_memory pinned it), no slot
 * goes back before its copy completed, the device is never synchronised
 * while batches flow, at most device_prefetch slots are held, an injected
 * copy failure is CHIME_ECUDA and the stream goes on, and close leaves no
 * allocation, stream, event or registration. The same over two shards (a
 * device stream on a sharded client: drawn by mass for a uniform table,
 * merged for fifo, each shard's sub-stream a device stream of its own).
 * Skips (77) when chimed is not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chime/chime.h"
#include "fake_control.h"
#include "harness.h"

#define SPEC "obs:f32[16], act:i32[]"
#define DIM 16
#define BATCH 8
#define SLOTS 4
#define SAMPLES 512

static const char *config =
    "{\"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC "\", "
    "\"capacity\": 4096, \"min_size\": 1, \"sampler\": \"uniform\"},\n"
    " {\"name\": \"queue\", \"spec\": \"" SPEC "\", "
    "\"capacity\": 4096, \"min_size\": 1, \"sampler\": \"fifo\"}]}\n";

/* The table the next run_stream reads (fill_table writes both). */
static const char *g_table = "demo";

static fake_control_t fk;

static char g_log[512];

/* The fake's control calls: the library loads the fake on the first
 * device stream, and this binds them then. */
static void bind_fake(void) {
  if (!fk.run)
    fake_control_bind(&fk, FAKE_CUDART_FILE);
}

static void fill_table(chime_client_t *c) {
  chime_writer_t *w = NULL;
  struct {
    float obs[DIM];
    int32_t act;
  } sample;
  for (int t = 0; t < 2; t++) {
    assert_int_equal(chime_writer_open(&w, c, t ? "queue" : "demo", NULL), 0);
    for (int i = 0; i < SAMPLES; i++) {
      for (int j = 0; j < DIM; j++)
        sample.obs[j] = (float)(i * DIM + j);
      sample.act = i;
      assert_int_equal(chime_writer_append(w, &sample, sizeof(sample), 1.0), 0);
    }
    assert_int_equal(chime_writer_close(w), 0);
  }
}

/* Every sample of a batch whose copy has run is whole. */
static void check_obs_batch(const chime_batch_t *b) {
  const float *obs = b->leaf[0].data;
  const int32_t *act = b->leaf[1].data;
  assert_int_equal(b->count, BATCH);
  for (uint32_t k = 0; k < b->count; k++) {
    assert_true(act[k] >= 0 && act[k] < SAMPLES);
    for (int j = 0; j < DIM; j++)
      if (obs[k * DIM + j] != (float)(act[k] * DIM + j))
        fail_msg("sample %u: obs[%d] = %g with act %d", k, j,
                 (double)obs[k * DIM + j], act[k]);
  }
}

/* n batches through a device stream in `mode`; returns the stream's stats
 * before close. fail_at: inject a copy failure at that cudaMemcpyAsync. */
static chime_stream_local_stats_t
run_stream(chime_client_t *c, chime_mode_t mode, int pin, int n, int fail_at) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_stream_local_stats_t st;
  chime_stream_t *s = NULL;
  void *ls = NULL;
  char num[32];
  int failed = 0;
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = mode;
  so.pin_host_memory = pin;
  so.device = 0;
  so.device_prefetch = 2;
  int rc = chime_stream_open(&s, c, g_table, &so);
  if (rc)
    fail_msg("open: %d: %s", rc, chime_last_error());
  assert_int_equal(chime_stream_mode(s), mode);
  bind_fake();
  assert_int_equal(fk.stream_create(&ls, 1), 0);
  if (fail_at) {
    fk.reset();
    snprintf(num, sizeof num, "%d", fail_at);
    setenv("FAKE_CUDART_FAIL_COPY_AT", num, 1);
  }
  for (int i = 0; i < n; i++) {
    chime_batch_t b;
    rc = chime_stream_next(s, &b, 10000);
    if (rc == CHIME_ECUDA && fail_at && !failed) {
      assert_non_null(strstr(chime_last_error(), "cudaMemcpyAsync"));
      failed = 1;
      continue;
    }
    if (rc)
      fail_msg("batch %d: %d: %s", i, rc, chime_last_error());
    assert_int_equal(chime_stream_wait(s, &b, ls), 0);
    assert_true(fk.launch(ls, b.leaf[0].data, (size_t)b.leaf[0].bytes) > 0);
    if (i % 8 == 7) {
      /* Now and then the device catches up, and the batch is read. */
      fk.run(-1);
      check_obs_batch(&b);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  unsetenv("FAKE_CUDART_FAIL_COPY_AT");
  assert_int_equal(failed, fail_at != 0);
  assert_int_equal(chime_stream_stats(s, &st), 0);
  fk.note("closing");
  chime_stream_close(s);
  assert_int_equal(fk.stream_destroy(ls), 0);
  return st;
}

static void fresh_log(const char *name) {
  snprintf(g_log, sizeof g_log, "%s/%s.log", chime__harness_tmpdir(), name);
  unlink(g_log);
  setenv("FAKE_CUDART_LOG", g_log, 1);
}

/* The log up to "closing": copies from registered memory only, no
 * synchronisation, no source rewritten under a copy. */
static void check_log(int registrations) {
  char *log = fake_log_read(g_log);
  assert_int_equal(fake_log_count(log, "register "), registrations);
  assert_int_equal(fake_log_count(log, "copy-src-changed"), 0);
  assert_int_equal(fake_log_count(log, "bad-handle"), 0);
  assert_int_equal(fake_log_count(log, "free-busy"), 0);
  assert_true(fake_log_count(log, "copy ") > 0);
  char *closing = strstr(log, "closing\n");
  assert_non_null(closing);
  *closing = '\0';
  assert_int_equal(fake_log_count(log, "sync"), 0);
  assert_int_equal(fake_log_count(log, "stream-sync"), 0);
  assert_int_equal(fake_log_count(log, "event-sync"), 0);
  free(log);
}

static void assert_nothing_left(void) {
  assert_int_equal(fk.count("malloc"), 0);
  assert_int_equal(fk.count("stream"), 0);
  assert_int_equal(fk.count("event"), 0);
  assert_int_equal(fk.count("register"), 0);
}

static void run_mode(chime_mode_t mode) {
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(chime__chimed_start_client(&d, config, &c), 0);
  fill_table(c);

  fresh_log(mode == CHIME_MODE_SHM ? "shm" : "stream");
  chime_stream_local_stats_t st = run_stream(c, mode, 0, 200, 0);
  assert_int_equal(st.batches, 200);
  assert_true(st.device_copies >= 200);
  assert_true(st.device_max_slots_held >= 1 && st.device_max_slots_held <= 2);
  assert_true(st.device_bytes > 0);
  assert_true(st.pinned_bytes > 0); /* the device end's registration */
  check_log(1);
  assert_nothing_left();

  /* pin_host_memory pinned the ring already: no second registration. */
  fresh_log(mode == CHIME_MODE_SHM ? "shm-pinned" : "stream-pinned");
  (void)run_stream(c, mode, 1, 40, 0);
  check_log(SLOTS);
  assert_nothing_left();

  /* The 5th copy fails to start: that batch is dropped with CHIME_ECUDA,
   * and the stream goes on. */
  fresh_log(mode == CHIME_MODE_SHM ? "shm-fail" : "stream-fail");
  (void)run_stream(c, mode, 0, 40, 5);
  assert_nothing_left();
  unsetenv("FAKE_CUDART_LOG");
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

static void test_shm(void **state) {
  (void)state;
  run_mode(CHIME_MODE_SHM);
}

static void test_stream_mode(void **state) {
  (void)state;
  run_mode(CHIME_MODE_STREAM);
}

/* Two shards, each with both tables: a device stream on the sharded
 * client is a device sub-stream per shard (one registration each), its
 * batches whole on the device whichever shard they come from; waits and
 * releases go to the shard that lent the batch. */
static chime__chimed_t g_shard[2];
static chime_client_t *g_direct[2];

static void shard_config(int k, char *buf, size_t len) {
  (void)k;
  snprintf(buf, len, "%s", config);
}

static void run_sharded(chime_mode_t mode, const char *table, int n) {
  chime_client_t *sharded = NULL;
  char target[1024];
  assert_int_equal(chime__shards_start(g_shard, 2, shard_config, g_direct,
                                       target, sizeof target, &sharded),
                   0);
  for (int k = 0; k < 2; k++)
    fill_table(g_direct[k]);
  char name[64];
  snprintf(name, sizeof name, "sharded-%s-%s",
           mode == CHIME_MODE_SHM ? "shm" : "stream", table);
  fresh_log(name);
  g_table = table;
  chime_stream_local_stats_t st = run_stream(sharded, mode, 0, n, 0);
  g_table = "demo";
  assert_int_equal(st.batches, (uint64_t)n);
  assert_true(st.device_copies >= (uint64_t)n);
  assert_true(st.device_max_slots_held >= 1 && st.device_max_slots_held <= 2);
  check_log(2); /* each shard's ring, once */
  assert_nothing_left();
  unsetenv("FAKE_CUDART_LOG");
  assert_int_equal(chime__shards_stop(g_shard, 2, g_direct, NULL, &sharded), 0);
}

static void test_sharded_drawn_shm(void **state) {
  (void)state;
  run_sharded(CHIME_MODE_SHM, "demo", 120);
}

static void test_sharded_drawn_stream(void **state) {
  (void)state;
  run_sharded(CHIME_MODE_STREAM, "demo", 120);
}

static void test_sharded_merged_shm(void **state) {
  (void)state;
  /* fifo: 2 x 512 items, each once; 100 batches of 8 take 800 */
  run_sharded(CHIME_MODE_SHM, "queue", 100);
}

/* Option checks, and a host stream refuses wait. */
static void test_options(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_batch_t b;
  assert_int_equal(chime__chimed_start_client(&d, config, &c), 0);
  fill_table(c);
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.device = 0;
  so.device_prefetch = SLOTS; /* > slots - 1 */
  assert_int_equal(chime_stream_open(&s, c, "demo", &so), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "device_prefetch"));
  so.device = -2;
  so.device_prefetch = 0;
  assert_int_equal(chime_stream_open(&s, c, "demo", &so), CHIME_EINVAL);
  so.device = 7; /* the fake has one device */
  assert_int_equal(chime_stream_open(&s, c, "demo", &so), CHIME_ECUDA);
  assert_non_null(strstr(chime_last_error(), "no CUDA device 7"));
  assert_null(s);
  so.device = -1;
  assert_int_equal(chime_stream_open(&s, c, "demo", &so), 0);
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(chime_stream_wait(s, &b, NULL), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "not a device stream"));
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

int main(void) {
  char path[1024];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_shm, chime__harness_teardown),
      cmocka_unit_test_teardown(test_stream_mode, chime__harness_teardown),
      cmocka_unit_test_teardown(test_options, chime__harness_teardown),
      cmocka_unit_test_teardown(test_sharded_drawn_shm,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_sharded_drawn_stream,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_sharded_merged_shm,
                                chime__harness_teardown),
  };
  if (chime__harness_bin("src/server/chimed", path, sizeof path) == NULL) {
    fprintf(stderr, "skip: chimed is not built\n");
    return 77;
  }
  /* The client's runtime is the fake; chimed pins nothing, loads none. */
  unsetenv("CUDA_HOME");
  unsetenv("CUDA_PATH");
  unsetenv("FAKE_CUDART_MANUAL");
  setenv("CHIME_CUDART", FAKE_CUDART_FILE, 1);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
