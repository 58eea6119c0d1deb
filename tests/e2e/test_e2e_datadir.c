/* A table in files (table "data_dir"), with the real chimed:
 * - chimed killed with SIGKILL while a writer inserts, and started again on
 *   the same data dir: every acked item is there, each exactly once and
 *   whole (its bytes checked), with no checkpoint anywhere; with a
 *   compressed leaf too (its bytes in the bytes file); GetInfo names the
 *   data dir and, as Stats does, the bytes its files hold on disk;
 * - the same for a sequence table: every acked episode's windows there
 *   once, each window its episode's steps;
 * - a data dir holding another table's file, or one that is a file: chimed
 *   refuses to start, naming the path, and the file is left as it was;
 * - --restore into a table that opened with items from its file, or a
 *   sequence table with steps but no windows: refused, saying which;
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
#include <sys/stat.h>
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
static uint64_t kill_at; /* acked items (episodes) to kill at */

static void *killer(void *arg) {
  (void)arg;
  int64_t end = chime__now_ms() + 60000;
  while (atomic_load(&acked) < kill_at && chime__now_ms() < end)
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
  /* Its files' allocated blocks: at least the whole .table file. */
  char path[600];
  struct stat st;
  snprintf(path, sizeof(path), "%s/demo.table", datadir);
  assert_int_equal(stat(path, &st), 0);
  assert_true(in->tables[0].disk_bytes >= (uint64_t)st.st_blocks * 512);
  assert_true(in->tables[0].disk_bytes >= (uint64_t)st.st_size);
  chime_stats_t *sst = NULL;
  assert_int_equal(chime_client_stats(client, &sst), 0);
  assert_int_equal(sst->tables[0].disk_bytes, in->tables[0].disk_bytes);
  chime_stats_free(sst);
  chime_server_info_free(in);
}

static uint64_t table_size(void) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  uint64_t n = st->tables[0].size;
  chime_stats_free(st);
  return n;
}

/* The whole table (n items) as one batch of a stream of table's. */
static chime_stream_t *whole_batch(const char *table, uint64_t n,
                                   chime_batch_t *b) {
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = (uint32_t)n;
  so.slots = 2;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, table, &so), 0);
  assert_int_equal(chime_stream_next(s, b, 30000), 0);
  assert_int_equal(b->count, n);
  return s;
}

/* Every item of the table in one fifo batch, each checked whole, counted
 * into seen[index]; how many. */
static uint64_t drain(uint8_t *seen) {
  chime_batch_t b;
  char err[256];
  uint64_t n = table_size();
  uint64_t *ids = calloc(n, sizeof(*ids));
  assert_non_null(ids);
  chime_stream_t *s = whole_batch("demo", n, &b);
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

/* chimed on config, insert() run until the killer kills it at `at`
 * acked, then chimed started again on it: the acked count. */
static uint64_t killed_and_restarted(void (*insert)(void), uint64_t at) {
  atomic_store(&acked, 0);
  kill_at = at;
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  insert();
  assert_int_equal(chime__proc_wait(&chimed.proc, 10000, NULL), 0);
  chime_client_destroy(client);
  client = NULL;
  uint64_t a = atomic_load(&acked);
  assert_true(a >= at);
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  return a;
}

static void kill9_keeps_acked(void) {
  uint64_t a = killed_and_restarted(insert_until_killed, KILL_AT);
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

/* A sequence table in files: episodes of SEQ_LEN steps {tag, index} and
 * x[k] = tag * 1000 + index + k, each ended and flushed (acked whole),
 * windows of 4 every 2 steps: 9 an episode. */
#define SEQ_LEN 20
#define SEQ_WINDOWS 9
#define SEQ_KILL_AT 300
#define SEQ_MAX 10000

static void seq_step(uint8_t *p, uint32_t tag, uint32_t idx) {
  uint32_t id[2] = {tag, idx};
  memcpy(p, id, 8);
  for (uint32_t k = 0; k < 16; k++) {
    float x = (float)(tag * 1000 + idx + k);
    memcpy(p + 8 + 4 * k, &x, 4);
  }
}

static void seq_insert_until_killed(void) {
  chime_writer_t *w = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  uint8_t step[72];
  wo.resend = 0;
  wo.timeout_ms = 10000;
  assert_int_equal(chime_writer_open(&w, client, "seq", &wo), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, killer, NULL), 0);
  int rc = 0;
  for (uint32_t tag = 1; rc == 0 && tag < SEQ_MAX; tag++) {
    for (uint32_t i = 0; rc == 0 && i < SEQ_LEN; i++) {
      seq_step(step, tag, i);
      rc = chime_writer_append(w, step, sizeof(step), 1.0);
    }
    if (rc == 0)
      rc = chime_writer_end_episode(w);
    if (rc == 0 && (rc = chime_writer_flush(w)) == 0)
      atomic_store(&acked, tag);
  }
  pthread_join(th, NULL);
  assert_int_not_equal(rc, 0);
  int crc = chime_writer_close(w);
  (void)crc;
}

/* Every window of the table in one fifo batch, each its episode's steps
 * in order, counted by episode tag into per[tag]; how many. */
static uint64_t seq_drain(uint32_t *per) {
  chime_batch_t b;
  uint64_t n = table_size();
  chime_stream_t *s = whole_batch("seq", n, &b);
  for (uint64_t j = 0; j < n; j++) {
    const chime_sample_info_t *in = &b.info[j];
    const uint8_t *id = (const uint8_t *)b.leaf[0].data + j * 4 * 8;
    const uint8_t *x = (const uint8_t *)b.leaf[1].data + j * 4 * 64;
    uint8_t want[72];
    uint32_t tag;
    memcpy(&tag, id, 4);
    assert_true(tag >= 1 && tag < SEQ_MAX);
    assert_int_equal(in->length, 4);
    for (uint32_t i = 0; i < 4; i++) {
      seq_step(want, tag, in->first_step + i);
      if (memcmp(id + 8 * i, want, 8) != 0 ||
          memcmp(x + 64 * i, want + 8, 64) != 0)
        fail_msg("window %llu (episode tag %u, first step %u): step %u torn",
                 (unsigned long long)j, tag, in->first_step, i);
    }
    per[tag]++;
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  return n;
}

/* chimed killed while a writer appends episodes to a sequence table in
 * files: started again, every acked episode's windows are there once,
 * whole; of the episode in flight, some at most. */
static void kill9_sequence(const char *sub, const char *extra) {
  snprintf(datadir, sizeof(datadir), "%s/%s", chime__harness_tmpdir(), sub);
  snprintf(config, sizeof(config),
           "{\"tables\": [{\"name\": \"seq\", \"spec\": \"id:u32[2], "
           "x:f32[16]\", \"capacity_steps\": 200000, \"sequence_length\": 4, "
           "\"stride\": 2, \"sampler\": \"fifo\", \"data_dir\": \"%s\"%s}]}\n",
           datadir, extra);
  uint64_t a = killed_and_restarted(seq_insert_until_killed, SEQ_KILL_AT);
  uint32_t *per = calloc(SEQ_MAX, sizeof(*per));
  assert_non_null(per);
  uint64_t n = seq_drain(per);
  for (uint32_t tag = 1; tag < SEQ_MAX; tag++)
    if (tag <= a ? per[tag] != SEQ_WINDOWS : per[tag] > SEQ_WINDOWS)
      fail_msg("episode %u: %u windows (%llu acked)", tag, per[tag],
               (unsigned long long)a);
  free(per);
  fprintf(stderr, "acked %llu episodes, after the restart %llu windows\n",
          (unsigned long long)a, (unsigned long long)n);
}

static void test_kill9_sequence(void **state) {
  (void)state;
  kill9_sequence("seq", "");
}

/* Its x leaf compressed: the steps' bytes in the bytes file. */
static void test_kill9_sequence_compressed(void **state) {
  (void)state;
  kill9_sequence("seq-z", ", \"compress\": {\"x\": 3}");
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

/* A sequence table in files that opened with steps but no windows (an
 * episode shorter than sequence_length, not ended) refuses --restore as
 * one with items does, saying so (the checkpoint's steps would mix with
 * them); with its file moved away it restores. */
static void test_restore_refused_over_steps(void **state) {
  (void)state;
  char ckdir[512], file[600];
  uint8_t step[72];
  chime_writer_t *w = NULL;
  snprintf(datadir, sizeof(datadir), "%s/restore-seq", chime__harness_tmpdir());
  snprintf(ckdir, sizeof(ckdir), "%s/ckpt-seq", chime__harness_tmpdir());
  snprintf(config, sizeof(config),
           "{\"tables\": [{\"name\": \"seq\", \"spec\": \"id:u32[2], "
           "x:f32[16]\", \"capacity_steps\": 20000, \"sequence_length\": 4, "
           "\"stride\": 2, \"sampler\": \"fifo\", \"data_dir\": \"%s\"}], "
           "\"checkpoint\": {\"dir\": \"%s\"}}\n",
           datadir, ckdir);
  /* A checkpoint of one whole episode. */
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  assert_int_equal(chime_writer_open(&w, client, "seq", NULL), 0);
  for (uint32_t i = 0; i < SEQ_LEN; i++) {
    seq_step(step, 1, i);
    assert_int_equal(chime_writer_append(w, step, sizeof(step), 1.0), 0);
  }
  assert_int_equal(chime_writer_end_episode(w), 0);
  assert_int_equal(chime_writer_close(w), 0);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(client, &r), 0);
  assert_int_equal(r.items, SEQ_WINDOWS);
  assert_int_equal(chime__chimed_stop_client(&chimed, client), 0);
  client = NULL;
  /* A fresh file, then 3 steps of an episode: no window yet. */
  snprintf(file, sizeof(file), "%s/seq.table", datadir);
  assert_int_equal(unlink(file), 0);
  assert_int_equal(chime__chimed_start_client(&chimed, config, &client), 0);
  assert_int_equal(chime_writer_open(&w, client, "seq", NULL), 0);
  for (uint32_t i = 0; i < 3; i++) {
    seq_step(step, 2, i);
    assert_int_equal(chime_writer_append(w, step, sizeof(step), 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
  assert_int_equal(table_size(), 0);
  assert_int_equal(chime__chimed_stop_client(&chimed, client), 0);
  client = NULL;
  refused("opened with 3 steps but no windows", datadir, "latest");
  assert_int_equal(unlink(file), 0);
  const char *args[] = {"--restore", "latest", NULL};
  assert_int_equal(chime__chimed_start(&chimed, config, args, 30000), 0);
  assert_int_equal(chime_client_create(&client, chimed.addr, NULL), 0);
  assert_int_equal(table_size(), SEQ_WINDOWS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_kill9_keeps_acked, teardown),
      cmocka_unit_test_teardown(test_kill9_keeps_acked_compressed, teardown),
      cmocka_unit_test_teardown(test_kill9_sequence, teardown),
      cmocka_unit_test_teardown(test_kill9_sequence_compressed, teardown),
      cmocka_unit_test_teardown(test_other_table_refused, teardown),
      cmocka_unit_test_teardown(test_restore_refused_over_items, teardown),
      cmocka_unit_test_teardown(test_restore_refused_over_steps, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
