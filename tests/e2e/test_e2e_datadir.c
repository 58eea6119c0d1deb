/* A table in files (table "data_dir"), with the real chimed:
 * - chimed killed with SIGKILL while a writer inserts, and started again on
 *   the same data dir: every acked item is there, each exactly once and
 *   whole (its bytes checked), with no checkpoint anywhere; with a
 *   compressed leaf too (its bytes in the bytes file); GetInfo names the
 *   data dir;
 * - a data dir holding another table's file, or one that is a file: chimed
 *   refuses to start, naming the path, and the file is left as it was;
 * - --restore into a table that opened with items from its file: refused;
 *   with the file moved away, restored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"
#include "pattern.h"

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define N_MAX 200000
#define KILL_AT 3000
#define PER_FLUSH 50

static chime__chimed_t chimed;
static chime_client_t *client;
static char config[2048], datadir[512];

/* extra: more of the table's config ("" or ", \"compress\": ..."). */
static void write_config_with(uint64_t capacity, const char *sub,
                              const char *extra) {
  snprintf(datadir, sizeof(datadir), "%s/%s", chime__harness_tmpdir(), sub);
  snprintf(config, sizeof(config),
           "{\"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC "\", "
           "\"capacity\": %llu, \"sampler\": \"fifo\", \"data_dir\": "
           "\"%s\"%s}]}\n",
           (unsigned long long)capacity, datadir, extra);
}

static void write_config(uint64_t capacity, const char *sub) {
  write_config_with(capacity, sub, "");
}

static int teardown(void **state) {
  (void)state;
  chime_client_destroy(client);
  client = NULL;
  chime__proc_kill(&chimed.proc);
  chime__harness_kill_all();
  return 0;
}

static atomic_ullong acked;

static void *killer(void *arg) {
  (void)arg;
  int64_t end = chime__now_ms() + 60000;
  while (atomic_load(&acked) < KILL_AT && chime__now_ms() < end)
    chime__sleep_ms(1);
  kill(chimed.proc.pid, SIGKILL);
  return NULL;
}

/* Appends and flushes PER_FLUSH at a time until the writer fails (chimed
 * killed); acked counts those whose flush returned. */
static void insert_until_killed(void) {
  chime_writer_t *w = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  chime_spec_t spec;
  uint8_t sample[264];
  wo.resend = 0;
  wo.timeout_ms = 10000;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_writer_open(&w, client, "demo", &wo), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, killer, NULL), 0);
  int rc = 0;
  for (uint64_t i = 0; rc == 0 && i < N_MAX; i += PER_FLUSH) {
    for (uint64_t k = i; rc == 0 && k < i + PER_FLUSH; k++) {
      chime__pattern_fill(&spec, chime__pattern_id(6, k), sample);
      rc = chime_writer_append(w, sample, sizeof(sample), 1.0);
    }
    if (rc == 0 && (rc = chime_writer_flush(w)) == 0)
      atomic_store(&acked, i + PER_FLUSH);
  }
  pthread_join(th, NULL);
  assert_int_not_equal(rc, 0);     /* it ended by the kill */
  int crc = chime_writer_close(w); /* frees it; it fails: chimed is gone */
  (void)crc;
}

/* GetInfo names the table's data dir. */
static void check_info_data_dir(void) {
  chime_server_info_t *in = NULL;
  assert_int_equal(chime_client_info(client, &in), 0);
  assert_int_equal(in->ntables, 1);
  assert_string_equal(in->tables[0].data_dir, datadir);
  chime_server_info_free(in);
}

static uint64_t table_size(void) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  uint64_t n = st->tables[0].size;
  chime_stats_free(st);
  return n;
}

/* Every item of the table in one fifo batch, each checked whole, counted
 * into seen[index]; how many. */
static uint64_t drain(uint8_t *seen) {
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_batch_t b;
  char err[256];
  uint64_t n = table_size();
  uint64_t *ids = calloc(n, sizeof(*ids));
  assert_non_null(ids);
  so.batch_size = (uint32_t)n;
  so.slots = 2;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
  assert_int_equal(chime_stream_next(s, &b, 30000), 0);
  assert_int_equal(b.count, n);
  if (chime__pattern_verify(&b, ids, err, sizeof(err)) != 0)
    fail_msg("a torn item after the restart: %s", err);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t x = ids[i] & CHIME__PATTERN_MAX_INDEX;
    assert_int_equal(ids[i] >> 40, 6);
    assert_true(x < N_MAX);
    seen[x]++;
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  free(ids);
  return n;
}

static void kill9_keeps_acked(void) {
  atomic_store(&acked, 0);
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  insert_until_killed();
  assert_int_equal(chime__proc_wait(&chimed.proc, 10000, NULL), 0);
  chime_client_destroy(client);
  client = NULL;
  uint64_t a = atomic_load(&acked);
  assert_true(a >= KILL_AT);

  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  check_info_data_dir();
  uint8_t *seen = calloc(N_MAX, 1);
  assert_non_null(seen);
  uint64_t n = drain(seen);
  /* The acked ones, and of the request in flight a prefix at most. */
  assert_true(n >= a);
  for (uint64_t i = 0; i < n; i++)
    if (seen[i] != 1)
      fail_msg("item %llu seen %u times (%llu acked, %llu there)",
               (unsigned long long)i, seen[i], (unsigned long long)a,
               (unsigned long long)n);
  free(seen);
  fprintf(stderr, "acked %llu, after the restart %llu\n", (unsigned long long)a,
          (unsigned long long)n);
}

static void test_kill9_keeps_acked(void **state) {
  (void)state;
  write_config(N_MAX, "killed");
  kill9_keeps_acked();
}

/* The same with the obs leaf compressed: its bytes in the bytes file
 * (table_bytes.h), written before the row's extent and commit word. */
static void test_kill9_keeps_acked_compressed(void **state) {
  (void)state;
  write_config_with(N_MAX, "killed-z", ", \"compress\": {\"obs\": 3}");
  kill9_keeps_acked();
}

/* chimed on the config: it must refuse to start, its stderr holding
 * every needle. */
static void refused(const char *needle1, const char *needle2,
                    const char *restore) {
  char bin[512], path[1024], out[256], err[8192];
  int status = 0;
  assert_non_null(chime__harness_bin("src/server/chimed", bin, sizeof(bin)));
  assert_int_equal(
      chime__harness_write_file("bad.json", config, path, sizeof(path)), 0);
  const char *argv[] = {bin,           "--config",
                        path,          "--listen",
                        "127.0.0.1:0", restore != NULL ? "--restore" : NULL,
                        restore,       NULL};
  assert_int_equal(
      chime__proc_run(argv, 30000, out, sizeof(out), err, sizeof(err), &status),
      0);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  if (strstr(err, needle1) == NULL || strstr(err, needle2) == NULL)
    fail_msg("chimed's error lacks '%s' or '%s': %s", needle1, needle2, err);
}

static void test_other_table_refused(void **state) {
  (void)state;
  write_config(1000, "other");
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  assert_int_equal(chime__chimed_stop_client(&chimed, client), 0);
  client = NULL;
  write_config(2000, "other");
  refused("holds another table", datadir, NULL);
  /* Untouched: the first config opens it again. */
  write_config(1000, "other");
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  assert_int_equal(chime__chimed_stop_client(&chimed, client), 0);
  client = NULL;
  /* A data dir that is a file. */
  snprintf(datadir + strlen(datadir), sizeof(datadir) - strlen(datadir),
           "/demo.table");
  snprintf(config, sizeof(config),
           "{\"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC "\", "
           "\"capacity\": 1000, \"data_dir\": \"%s\"}]}\n",
           datadir);
  refused("is not a directory", datadir, NULL);
}

/* A table that opened with items from its file refuses --restore (two
 * histories would mix); with its file moved away it restores as any. */
static void test_restore_refused_over_items(void **state) {
  (void)state;
  char ckdir[512], file[600];
  chime_spec_t spec;
  uint8_t sample[264];
  chime_writer_t *w = NULL;
  snprintf(datadir, sizeof(datadir), "%s/restore", chime__harness_tmpdir());
  snprintf(ckdir, sizeof(ckdir), "%s/ckpt", chime__harness_tmpdir());
  snprintf(config, sizeof(config),
           "{\"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC "\", "
           "\"capacity\": 1000, \"sampler\": \"uniform\", \"data_dir\": "
           "\"%s\"}], \"checkpoint\": {\"dir\": \"%s\"}}\n",
           datadir, ckdir);
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_writer_open(&w, client, "demo", NULL), 0);
  for (uint64_t i = 0; i < 10; i++) {
    chime__pattern_fill(&spec, chime__pattern_id(7, i), sample);
    assert_int_equal(chime_writer_append(w, sample, sizeof(sample), 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(client, &r), 0);
  assert_int_equal(r.items, 10);
  assert_int_equal(chime__chimed_stop_client(&chimed, client), 0);
  client = NULL;
  refused("opened with 10 items", datadir, "latest");
  snprintf(file, sizeof(file), "%s/demo.table", datadir);
  assert_int_equal(unlink(file), 0);
  const char *args[] = {"--restore", "latest", NULL};
  assert_int_equal(chime__chimed_start(&chimed, config, args, 30000), 0);
  assert_int_equal(chime_client_create(&client, chimed.addr, NULL), 0);
  assert_int_equal(table_size(), 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_kill9_keeps_acked, teardown),
      cmocka_unit_test_teardown(test_kill9_keeps_acked_compressed, teardown),
      cmocka_unit_test_teardown(test_other_table_refused, teardown),
      cmocka_unit_test_teardown(test_restore_refused_over_items, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
