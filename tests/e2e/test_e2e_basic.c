/* End to end against the real chimed: GetInfo, insert, consume in shm, stream
 * and auto (auto must pick shm on this host), and shm and stream delivering
 * the same bytes for the same inserts (fifo, one writer, so the order is
 * fixed). */
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
#include "harness.h"
#include "writes.h"
#include "pattern.h"

#define SAMPLES 64
#define BATCH 8
#define SAMPLE_BYTES 264 /* obs:f32[64], action:i32[], reward:f32[] */

static const char *config =
    "{\"tables\": [{\"name\": \"demo\", \"spec\": \"obs:f32[64], "
    "action:i32[], reward:f32[]\", \"capacity\": 4096, \"min_size\": 1, "
    "\"sampler\": \"fifo\"},\n"
    "  {\"name\": \"uni\", \"spec\": \"obs:f32[64], action:i32[], "
    "reward:f32[]\", \"capacity\": 16, \"min_size\": 16, \"sampler\": "
    "\"uniform\"},\n"
    "  {\"name\": \"pri\", \"spec\": \"x:u8\", \"capacity\": 8, \"sampler\": "
    "\"prioritized\", \"priority_exponent\": 0.6, \"remover\": \"max_heap\", "
    "\"max_times_sampled\": 2}]}\n";

static chime__chimed_t chimed;
static chime_client_t *client;
static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  int rc = chime__chimed_start_or_skip(&chimed, config, NULL, 30000);
  if (rc != 0)
    return -1;
  if (chime_client_create(&client, chimed.addr, NULL) != 0)
    return -1;
  if (chime_spec_parse(&spec, "obs:f32[64], action:i32[], reward:f32[]") != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int st = 0;
  chime_client_destroy(client);
  client = NULL;
  int rc = chime__chimed_stop(&chimed, 20000, &st);
  chime__harness_kill_all();
  /* A graceful stop that exits 0 is part of what is tested. */
  return rc == 0 && st == 0 ? 0 : -1;
}

/* Streams closed by earlier tests must be gone before the next inserts, or a
 * dying stream's sampler could take items (fifo: each item to one stream). */
static void wait_no_streams(void) {
  int64_t deadline = chime__now_ms() + 10000;
  for (;;) {
    chime_stats_t *st = NULL;
    assert_int_equal(chime_client_stats(client, &st), 0);
    uint32_t n = st->nstreams;
    chime_stats_free(st);
    if (n == 0)
      return;
    if (chime__now_ms() > deadline)
      fail_msg("%u streams still open 10 s after their learners closed", n);
    chime__sleep_ms(20);
  }
}

/* n pattern samples of seed into table, every one acked. */
static void write_to(const char *table, uint64_t seed, uint64_t n) {
  assert_int_equal(chime_spec_sample_bytes(&spec), SAMPLE_BYTES);
  int rc = chime__write_pattern(client, table, &spec, seed, n, NULL);
  if (rc != 0)
    fail_msg("writing %llu samples into %s: %s: %s", (unsigned long long)n,
             table, chime_err_name(rc), chime_last_error());
}

/* Reads n samples in batches; every byte checked against the pattern; the
 * leaf bytes of sample i go to bytes + i * SAMPLE_BYTES (leaves in order). */
static void consume(chime_mode_t mode, chime_mode_t want_mode, uint64_t n,
                    uint64_t *ids, uint8_t *bytes) {
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = 4;
  so.mode = mode;
  int rc = chime_stream_open(&s, client, "demo", &so);
  if (rc != 0)
    fail_msg("open %s: %s", chime_mode_name(mode), chime_last_error());
  assert_int_equal(chime_stream_mode(s), want_mode);
  assert_null(chime_stream_fallback_reason(s));
  uint64_t prev_key = 0;
  for (uint64_t got = 0; got < n; got += BATCH) {
    chime_batch_t b;
    char err[512];
    rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("next (%s) after %llu samples: %s", chime_mode_name(mode),
               (unsigned long long)got, chime_last_error());
    assert_int_equal(b.count, BATCH);
    assert_int_equal(b.nleaves, 3);
    if (chime__pattern_verify(&b, ids + got, err, sizeof(err)) != 0)
      fail_msg("%s: %s", chime_mode_name(mode), err);
    assert_string_equal(b.leaf[0].name, "obs");
    assert_int_equal(b.leaf[0].ndim, 2);
    assert_int_equal(b.leaf[0].shape[0], BATCH);
    assert_int_equal(b.leaf[0].shape[1], 64);
    assert_int_equal(b.leaf[2].bytes, BATCH * 4);
    for (uint32_t i = 0; i < BATCH; i++) {
      /* fifo: keys increase, probability 1, each item sampled once */
      assert_true(b.info[i].key > prev_key);
      prev_key = b.info[i].key;
      assert_true(b.info[i].probability == 1.0);
      assert_int_equal(b.info[i].times_sampled, 1);
      assert_true(b.info[i].insert_time_ns > 0);
      uint8_t *dst = bytes + (got + i) * SAMPLE_BYTES;
      uint64_t off = 0;
      for (uint32_t l = 0; l < b.nleaves; l++) {
        uint64_t lb = b.leaf[l].bytes / BATCH;
        memcpy(dst + off, (const uint8_t *)b.leaf[l].data + i * lb, lb);
        off += lb;
      }
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

static void test_get_info(void **state) {
  (void)state;
  chime_server_info_t *info = NULL;
  char boot[64] = "", host[256] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  assert_non_null(f);
  assert_non_null(fgets(boot, sizeof(boot), f));
  fclose(f);
  boot[strcspn(boot, "\n")] = '\0';
  assert_int_equal(gethostname(host, sizeof(host)), 0);

  assert_int_equal(chime_client_info(client, &info), 0);
  assert_string_equal(info->version, CHIME_VERSION_STRING);
  assert_string_equal(info->boot_id, boot);
  assert_string_equal(info->hostname, host);
  assert_int_equal(info->pin_host_memory, 0);
  assert_int_equal(info->ntables, 3);
  const chime_table_info_t *t = NULL, *pri = NULL;
  for (uint32_t i = 0; i < info->ntables; i++) {
    if (strcmp(info->tables[i].name, "demo") == 0)
      t = &info->tables[i];
    if (strcmp(info->tables[i].name, "pri") == 0)
      pri = &info->tables[i];
  }
  assert_non_null(t);
  assert_non_null(pri);
  assert_string_equal(pri->sampler, "prioritized");
  assert_string_equal(pri->remover, "max_heap");
  assert_true(pri->priority_exponent == 0.6);
  assert_int_equal(pri->max_times_sampled, 2);
  /* An old config's fifo table: a queue. */
  assert_string_equal(t->remover, "fifo");
  assert_int_equal(t->max_times_sampled, 1);
  assert_int_equal(t->capacity, 4096);
  assert_int_equal(t->min_size, 1);
  assert_int_equal(t->sample_bytes, SAMPLE_BYTES);
  assert_string_equal(t->sampler, "fifo");
  assert_int_equal(t->spec.nleaves, 3);
  assert_string_equal(t->spec.leaves[1].name, "action");
  assert_int_equal(t->spec.leaves[1].dtype, CHIME_DTYPE_I32);
  assert_int_equal(t->spec.leaves[1].ndim, 0);
  assert_int_equal(t->spec.leaves[0].shape[0], 64);
  chime_server_info_free(info);
}

static void check_mode(chime_mode_t mode, chime_mode_t want, uint64_t seed) {
  uint64_t ids[SAMPLES];
  uint8_t *bytes = malloc(SAMPLES * SAMPLE_BYTES);
  assert_non_null(bytes);
  wait_no_streams();
  write_to("demo", seed, SAMPLES);
  consume(mode, want, SAMPLES, ids, bytes);
  /* fifo, one writer: exactly the inserted items, in insert order */
  for (uint64_t i = 0; i < SAMPLES; i++)
    assert_int_equal(ids[i], chime__pattern_id(seed, i));
  free(bytes);
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  assert_int_equal(st->ntables, 3);
  for (uint32_t i = 0; i < st->ntables; i++)
    if (strcmp(st->tables[i].name, "demo") == 0)
      assert_int_equal(st->tables[i].size, 0);
  chime_stats_free(st);
}

static void test_shm(void **state) {
  (void)state;
  check_mode(CHIME_MODE_SHM, CHIME_MODE_SHM, 1);
}

static void test_stream(void **state) {
  (void)state;
  check_mode(CHIME_MODE_STREAM, CHIME_MODE_STREAM, 2);
}

static void test_auto_picks_shm(void **state) {
  (void)state;
  check_mode(CHIME_MODE_AUTO, CHIME_MODE_SHM, 3);
}

static void test_shm_and_stream_same_bytes(void **state) {
  (void)state;
  uint64_t ids_shm[SAMPLES], ids_stream[SAMPLES];
  uint8_t *a = malloc(SAMPLES * SAMPLE_BYTES);
  uint8_t *b = malloc(SAMPLES * SAMPLE_BYTES);
  assert_non_null(a);
  assert_non_null(b);
  memset(a, 0x11, SAMPLES * SAMPLE_BYTES);
  memset(b, 0x22, SAMPLES * SAMPLE_BYTES);
  wait_no_streams();
  write_to("demo", 9, SAMPLES);
  consume(CHIME_MODE_SHM, CHIME_MODE_SHM, SAMPLES, ids_shm, a);
  wait_no_streams();
  write_to("demo", 9, SAMPLES);
  consume(CHIME_MODE_STREAM, CHIME_MODE_STREAM, SAMPLES, ids_stream, b);
  assert_memory_equal(ids_shm, ids_stream, sizeof(ids_shm));
  assert_memory_equal(a, b, SAMPLES * SAMPLE_BYTES);
  free(a);
  free(b);
}

/* A full uniform table evicts its oldest items: after 64 inserts into 16
 * places only the last 16 are ever sampled, each with probability 1/16. */
static void test_uniform_evicts_oldest(void **state) {
  (void)state;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  uint64_t ids[BATCH];
  char err[512];
  write_to("uni", 11, 64);
  so.batch_size = BATCH;
  so.slots = 4;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "uni", &so), 0);
  for (int k = 0; k < 6; k++) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("next: %s", chime_last_error());
    if (chime__pattern_verify(&b, ids, err, sizeof(err)) != 0)
      fail_msg("%s", err);
    for (uint32_t i = 0; i < b.count; i++) {
      uint64_t index = ids[i] & CHIME__PATTERN_MAX_INDEX;
      if (index < 48)
        fail_msg("sampled item %llu of 64, evicted long ago",
                 (unsigned long long)index);
      /* keys count from 1 per table: item i has key i + 1 */
      assert_int_equal(b.info[i].key, index + 1);
      assert_true(b.info[i].probability == 1.0 / 16);
      assert_true(b.info[i].times_sampled >= 1);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get_info),
      cmocka_unit_test(test_shm),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_auto_picks_shm),
      cmocka_unit_test(test_shm_and_stream_same_bytes),
      cmocka_unit_test(test_uniform_evicts_oldest),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
