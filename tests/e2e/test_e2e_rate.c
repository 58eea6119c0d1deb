/* The rate limiter (samples_per_insert, error_buffer) against the real
 * chimed, with 4 actors and 2 learners (shm and stream) as processes: at
 * every Stats poll past min_size, inserts * samples_per_insert - samples
 * stays within error_buffer of its value at min_size, give or take one
 * request and one batch; both sides are held back at times (Stats say who
 * waits for what); and chimed stops cleanly while either side waits. */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define SPI 4.0
#define BUFFER 200.0
#define MIN_SIZE 100
#define REQUEST 50 /* samples per actor request */
#define BATCH 32
#define ACTORS 4
#define PER_ACTOR 20000

static const char *config =
    "{\"tables\": [{\"name\": \"r\", \"spec\": \"x:u64[]\", \"capacity\": "
    "100000, \"sampler\": \"uniform\", \"min_size\": 100, "
    "\"samples_per_insert\": 4.0, \"error_buffer\": 200}]}\n";

static chime_table_stats_t table_stats(chime_client_t *c) {
  chime_stats_t *st = NULL;
  int rc = chime_client_stats(c, &st);
  if (rc != 0)
    fail_msg("Stats: %s", chime_last_error());
  assert_int_equal(st->ntables, 1);
  chime_table_stats_t t = st->tables[0];
  chime_stats_free(st);
  return t;
}

static void spawn_actor(chime__proc_t *p, const char *addr, int seed) {
  char bin[512], seeds[16], count[16], batch[16];
  assert_non_null(chime__harness_bin("examples/chime-actor", bin, sizeof bin));
  snprintf(seeds, sizeof seeds, "%d", seed);
  snprintf(count, sizeof count, "%d", PER_ACTOR);
  snprintf(batch, sizeof batch, "%d", REQUEST);
  const char *argv[] = {bin,   "--server",        addr,  "--table",
                        "r",   "--count",         count, "--seed",
                        seeds, "--batch-samples", batch, NULL};
  assert_int_equal(chime__proc_spawn(p, argv, "/dev/null"), 0);
}

/* A learner that keeps sampling until chimed stops: its idle limit
 * (60 s) outlasts the test, so a loaded machine that is slow to reap the
 * actors never finds the learners gone before it looks at their wait. */
static void spawn_learner(chime__proc_t *p, const char *addr,
                          const char *mode) {
  char bin[512], batch[16];
  assert_non_null(
      chime__harness_bin("examples/chime-learner", bin, sizeof bin));
  snprintf(batch, sizeof batch, "%d", BATCH);
  const char *argv[] = {bin,     "--server",     addr,    "--table",
                        "r",     "--batch-size", batch,   "--batches",
                        "0",     "--mode",       mode,    "--until-idle",
                        "60000", "--timeout-ms", "60000", NULL};
  assert_int_equal(chime__proc_spawn(p, argv, "/dev/null"), 0);
}

static void test_ratio_held(void **state) {
  (void)state;
  chime__chimed_t d;
  int rc = chime__chimed_start_or_skip(&d, config, NULL, 30000);
  assert_int_equal(rc, 0);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  chime__proc_t actors[ACTORS], learners[2];
  spawn_learner(&learners[0], d.addr, "shm");
  spawn_learner(&learners[1], d.addr, "stream");
  for (int i = 0; i < ACTORS; i++)
    spawn_actor(&actors[i], d.addr, i + 1);

  /* The window, and what one request or one batch may add to it. */
  const double mid = SPI * MIN_SIZE;
  const double top = mid + BUFFER + SPI * REQUEST;
  const double bottom = mid - BUFFER - BATCH;
  int polls = 0, inserts_held = 0, samplers_held = 0, running = ACTORS;
  int64_t end = chime__now_ms() + 90000;
  while (running > 0) {
    chime_table_stats_t t = table_stats(c);
    if (t.inserts >= MIN_SIZE) {
      double diff = (double)t.inserts * SPI - (double)t.samples;
      polls++;
      if (diff > top || diff < bottom)
        fail_msg("inserts %" PRIu64 ", samples %" PRIu64
                 ": inserts x %g - samples = %g, outside [%g, %g]",
                 t.inserts, t.samples, SPI, diff, bottom, top);
    }
    inserts_held |= t.inserts_waiting_rate > 0 || t.rate_insert_wait_ns > 0;
    samplers_held |= t.samplers_waiting_rate > 0;
    running = 0;
    for (int i = 0; i < ACTORS; i++)
      if (!actors[i].reaped &&
          chime__proc_wait(&actors[i], 0, NULL) == CHIME_ETIMEDOUT)
        running++;
    if (chime__now_ms() > end)
      fail_msg("actors still inserting after 90 s (%d running)", running);
    chime__sleep_ms(10);
  }
  for (int i = 0; i < ACTORS; i++) {
    assert_true(WIFEXITED(actors[i].status));
    assert_int_equal(WEXITSTATUS(actors[i].status), 0);
  }
  chime_table_stats_t t = table_stats(c);
  assert_int_equal(t.inserts, ACTORS * PER_ACTOR);
  fprintf(stderr,
          "%d polls; inserts %" PRIu64 ", samples %" PRIu64
          "; inserts waited %.1f ms on the ratio\n",
          polls, t.inserts, t.samples, (double)t.rate_insert_wait_ns / 1e6);
  assert_true(polls > 0);
  assert_true(inserts_held);
  /* All inserted: the learners reach the bottom of the window and wait
   * there until chimed's stop below ends them. */
  int64_t end2 = chime__now_ms() + 30000;
  for (;;) {
    t = table_stats(c);
    /* Its wait shows in the time samplers waited on the ratio. */
    if (t.samplers_waiting_rate > 0 && t.rate_sample_wait_ns > 0) {
      samplers_held = 1;
      break;
    }
    if (chime__now_ms() > end2)
      fail_msg("no sampler waits on the ratio once inserts stopped "
               "(waiting %u, waited %" PRIu64 " ns)",
               t.samplers_waiting_rate, t.rate_sample_wait_ns);
    chime__sleep_ms(10);
  }
  assert_true(samplers_held);
  double diff = (double)t.inserts * SPI - (double)t.samples;
  assert_true(diff >= bottom && diff <= mid - BUFFER + BATCH);

  /* A stop while samplers wait on the ratio: chimed exits 0. */
  chime_client_destroy(c);
  int st = -1;
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(chime__proc_wait(&learners[i], 20000, NULL), 0);
  chime__harness_kill_all();
}

/* An actor held back by the ratio (no learner): a stop ends its wait and
 * chimed exits 0. */
static void test_stop_while_insert_waits(void **state) {
  (void)state;
  chime__chimed_t d;
  int rc = chime__chimed_start_or_skip(&d, config, NULL, 30000);
  assert_int_equal(rc, 0);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  chime__proc_t a;
  spawn_actor(&a, d.addr, 9);
  int64_t end = chime__now_ms() + 30000;
  for (;;) {
    chime_table_stats_t t = table_stats(c);
    if (t.inserts_waiting_rate > 0) {
      /* min_size, then the window's top, plus at most one request. */
      assert_true((double)t.inserts <= MIN_SIZE + BUFFER / SPI + 1 + REQUEST);
      break;
    }
    if (chime__now_ms() > end)
      fail_msg("the actor is not held back by the ratio");
    chime__sleep_ms(10);
  }
  chime_client_destroy(c);
  int st = -1;
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_int_equal(chime__proc_wait(&a, 20000, NULL), 0);
  chime__harness_kill_all();
}

/* max_times_sampled with a rate limiter: a stream whose batch is larger
 * than min_size could wait for items the limiter holds back while the
 * inserts wait for samples, so Subscribe refuses it and says why; a batch
 * of min_size runs the configuration to the end (every insert
 * acked, every item read once). */
static void test_batch_over_min_size_refused(void **state) {
  (void)state;
  static const char *stall_config =
      "{\"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
      "\"capacity\": 100, \"sampler\": \"uniform\", \"min_size\": 2, "
      "\"samples_per_insert\": 2, \"error_buffer\": 2, "
      "\"max_times_sampled\": 1}]}\n";
  chime__chimed_t d;
  int rc = chime__chimed_start_or_skip(&d, stall_config, NULL, 30000);
  assert_int_equal(rc, 0);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 3;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, c, "q", &so), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(),
                         "batch_size 3 exceeds min_size 2 of table 'q'"));

  so.batch_size = 2;
  assert_int_equal(chime_stream_open(&s, c, "q", &so), 0);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "q", NULL), 0);
  uint64_t seen = 0;
  for (uint64_t i = 0; i < 10; i++) {
    assert_int_equal(chime_writer_append(w, &i, sizeof i, 1.0), 0);
    assert_int_equal(chime_writer_flush(w), 0);
    if (i % 2 == 1) { /* two items in: one batch is due */
      chime_batch_t b;
      assert_int_equal(chime_stream_next(s, &b, 20000), 0);
      assert_int_equal(b.count, 2);
      const uint64_t *x = b.leaf[0].data;
      seen |= (1ull << x[0]) | (1ull << x[1]);
      assert_int_equal(chime_stream_release(s, &b), 0);
    }
  }
  assert_int_equal(seen, 0x3ff);
  assert_int_equal(chime_writer_close(w), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
  int st = -1;
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  chime__harness_kill_all();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ratio_held),
      cmocka_unit_test(test_stop_while_insert_waits),
      cmocka_unit_test(test_batch_over_min_size_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
