/* Many streams, few threads: chimed serves 256 open streams (shm and
 * stream mode) with at most 4 threads more than it runs for one, and every
 * stream gets its batches. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"
#include "streams.h"

#define STREAMS 256
#define SAMPLE 64 /* id:u64[], pad:u8[56] */

static const char *config =
    "{\"tables\": [{\"name\": \"u\", \"spec\": \"id:u64[], pad:u8[56]\", "
    "\"capacity\": 4096, \"sampler\": \"uniform\"}]}\n";

static chime__chimed_t chimed;
static chime_client_t *client;

static int setup(void **state) {
  (void)state;
  return chime__chimed_start_client(&chimed, config, &client) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  int st = 0;
  (void)state;
  chime_client_destroy(client);
  chime__chimed_stop(&chimed, 20000, &st);
  chime__harness_kill_all();
  return 0;
}

static int threads_of(pid_t pid) {
  char path[64], line[256];
  int n = -1;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "Threads: %d", &n) == 1)
      break;
  fclose(f);
  return n;
}

/* Stream i's mode: every fourth in shm, the others in stream mode. */
static chime_mode_t mode_of(int i) {
  return i % 4 == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
}

/* Takes one batch and checks it came from the table. */
static void take_one(chime_stream_t *s, int i) {
  chime_batch_t b;
  int rc = chime_stream_next(s, &b, 30000);
  if (rc != 0)
    fail_msg("stream %d: next: %s (%s)", i, chime_strerror(rc),
             chime_last_error());
  assert_int_equal(b.count, 4);
  for (uint32_t k = 0; k < b.count; k++) {
    uint64_t id;
    memcpy(&id, (const uint8_t *)b.leaf[0].data + k * 8, 8);
    assert_true(id < 64);
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
}

static void test_256_streams_few_threads(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  uint8_t sample[SAMPLE] = {0};
  assert_int_equal(chime_writer_open(&w, client, "u", NULL), 0);
  for (uint64_t id = 0; id < 64; id++) {
    memcpy(sample, &id, sizeof id);
    assert_int_equal(chime_writer_append(w, sample, sizeof sample, 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);

  static chime_stream_t *s[STREAMS];
  s[0] = chime__open_stream(client, "u", mode_of(0), 4, 2, NULL);
  take_one(s[0], 0);
  int one = threads_of(chimed.proc.pid);
  for (int i = 1; i < STREAMS; i++)
    s[i] = chime__open_stream(client, "u", mode_of(i), 4, 2, NULL);
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < STREAMS; i++)
      take_one(s[i], i);
  int many = threads_of(chimed.proc.pid);
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  assert_int_equal(st->nstreams, STREAMS);
  chime_stats_free(st);
  fprintf(stderr, "chimed threads: %d with one stream, %d with %d\n", one, many,
          STREAMS);
  assert_true(one > 0);
  assert_true(many - one <= 4);
  for (int i = 0; i < STREAMS; i++)
    chime_stream_close(s[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_256_streams_few_threads),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
