/* Pacing and per-token versions through the real chimed (issue 37,
 * docs/replay.md "Pacing producers", "Per-token versions"): a writer whose
 * request would run too far ahead of the learner waits in the server (its
 * flush gives CHIME_ETIMEDOUT after the writer's timeout, the request
 * still there, Stats saying one insert waits on pacing), and a learner's
 * SetVersion lets it in (the next flush acks it; paced_inserts and
 * pace_wait_ns counted); the samples ahead survive a checkpoint and a
 * --restore, so the restored server holds the writer as before; a ragged
 * version leaf makes each sample's version the minimum of its tokens',
 * in batches' info and for the staleness gate; GetInfo says both
 * settings. */
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
#include "asserts.h"

static char cfg_json[2048];

static void start(chime__chimed_t *d, chime_client_t **c, const char *restore) {
  const char *args[] = {"--restore", restore, NULL};
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/ckpt", chime__harness_tmpdir());
  snprintf(cfg_json, sizeof(cfg_json),
           "{\"checkpoint\": {\"dir\": \"%s\"},\n"
           " \"tables\": [{\"name\": \"p\", \"spec\": \"x:u64[]\", "
           "\"capacity\": 1000, \"sampler\": \"fifo\", \"max_staleness\": 3, "
           "\"pace_batch\": 4},\n"
           "  {\"name\": \"t\", \"spec\": \"tokens:i32[<=8], "
           "tok_ver:u64[<=8 ~tokens]\", \"capacity\": 100, \"sampler\": "
           "\"fifo\", \"max_staleness\": 2, \"version_leaf\": \"tok_ver\"}]}\n",
           dir);
  if (restore == NULL) {
    assert_int_equal(chime__chimed_start_client(d, cfg_json, c), 0);
    return;
  }
  assert_int_equal(chime__chimed_start(d, cfg_json, args, 60000), 0);
  assert_int_equal(chime_client_create(c, d->addr, NULL), 0);
}

/* A writer of table with this timeout and version, on a new chimed (or
 * one restored from restore). */
static chime_writer_t *start_writer(chime__chimed_t *d, chime_client_t **c,
                                    const char *restore, const char *table,
                                    int timeout_ms, uint64_t version) {
  chime_writer_t *w;
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  start(d, c, restore);
  o.timeout_ms = timeout_ms;
  o.version = version;
  assert_int_equal(chime_writer_open(&w, *c, table, &o), 0);
  return w;
}

static void append_n(chime_writer_t *w, uint64_t first, uint32_t n) {
  for (uint64_t x = first; x < first + n; x++)
    assert_int_equal(chime_writer_append(w, &x, sizeof(x), 1.0), 0);
}

/* Flushes until acked: a flush gives CHIME_ETIMEDOUT while the request
 * is held (the test's timeout bounds it). */
static void flush_acked(chime_writer_t *w) {
  int rc;
  while ((rc = chime_writer_flush(w)) == CHIME_ETIMEDOUT)
    ;
  assert_int_equal(rc, 0);
}

/* Until Stats say n inserts wait on pacing (the test's timeout bounds
 * it). */
static void until_waiting(chime_client_t *c, uint32_t n) {
  while (chime__table_stats(c, "p").inserts_waiting_pace != n)
    chime__sleep_ms(5);
}

/* n samples from first that pacing holds in the server: the flush times
 * out with them there, Stats saying an insert waits. */
static void held(chime_client_t *c, chime_writer_t *w, uint64_t first,
                 uint32_t n) {
  append_n(w, first, n);
  assert_int_equal(chime_writer_flush(w), CHIME_ETIMEDOUT);
  until_waiting(c, 1);
}

/* Pacing bound (3 - 1) x 4 = 8 samples ahead of the learner. */
static void test_wait_timeout_wake_restore(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  chime_writer_t *w = start_writer(&d, &c, NULL, "p", 200, 0);
  append_n(w, 1, 8);
  assert_int_equal(chime_writer_flush(w), 0);
  held(c, w, 9, 2); /* two more */
  chime_table_stats_t ts = chime__table_stats(c, "p");
  assert_int_equal(ts.size, 8);
  assert_int_equal(ts.pace_ahead, 8);
  /* The learner's version step: a batch's worth drawn, the request in. */
  uint64_t newest = 0;
  assert_int_equal(chime_client_set_version(c, "p", 1, &newest), 0);
  assert_int_equal(newest, 1);
  flush_acked(w);
  assert_int_equal(chime_writer_acked(w), 10);
  ts = chime__table_stats(c, "p");
  assert_int_equal(ts.size, 10);
  assert_int_equal(ts.pace_ahead, 4 + 2);
  assert_int_equal(ts.paced_inserts, 1);
  assert_int_equal(ts.inserts_waiting_pace, 0);
  assert_true(ts.pace_wait_ns > 0);
  assert_int_equal(ts.removed_stale, 0);
  assert_int_equal(chime_writer_close(w), 0);
  /* Through a checkpoint: the restored table counts the same 6 ahead. */
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  chime__stop_clean(&d, c);
  w = start_writer(&d, &c, r.path, "p", 200, 0);
  ts = chime__table_stats(c, "p");
  assert_int_equal(ts.size, 10);
  assert_int_equal(ts.newest_version, 1);
  assert_int_equal(ts.pace_ahead, 6);
  held(c, w, 11, 3); /* 6 + 3 > 8: held, as before the stop */
  assert_int_equal(chime_client_set_version(c, "p", 2, NULL), 0);
  flush_acked(w);
  assert_int_equal(chime_writer_close(w), 0);
  assert_int_equal(chime__table_stats(c, "p").size, 13);
  chime__stop_clean(&d, c);
}

/* Each sample's version is its oldest token's: in its info and at the
 * staleness gate. */
static void test_token_versions(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  /* Version 9: a sample without tokens has the request's. */
  chime_writer_t *w = start_writer(&d, &c, NULL, "t", 30000, 9);
  int32_t tok[4] = {1, 2, 3, 4};
  uint64_t v0[4] = {5, 3, 6, 6}, v1[2] = {7, 8};
  const void *l0[2] = {tok, v0}, *l1[2] = {tok, v1}, *l2[2] = {tok, v1};
  uint32_t n0[2] = {4, 4}, n1[2] = {2, 2}, n2[2] = {0, 0};
  assert_int_equal(chime_writer_append_leaves(w, l0, n0, 1.0), 0);
  assert_int_equal(chime_writer_append_leaves(w, l1, n1, 1.0), 0);
  assert_int_equal(chime_writer_append_leaves(w, l2, n2, 1.0), 0);
  assert_int_equal(chime_writer_close(w), 0);
  chime_server_info_t *info = NULL; /* GetInfo says both settings */
  assert_int_equal(chime_client_info(c, &info), 0);
  for (uint32_t i = 0; i < info->ntables; i++) {
    const chime_table_info_t *ti = &info->tables[i];
    int p = strcmp(ti->name, "p") == 0;
    assert_int_equal(ti->pace_batch, p ? 4 : 0);
    assert_string_equal(ti->version_leaf, p ? "" : "tok_ver");
  }
  chime_server_info_free(info);
  chime_table_stats_t ts = chime__table_stats(c, "t");
  assert_int_equal(ts.newest_version, 9);
  assert_int_equal(ts.size, 2); /* 3 is more than 2 behind 9: never in */
  assert_int_equal(ts.removed_stale, 1);
  chime_stream_t *s;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 2;
  so.slots = 2;
  assert_int_equal(chime_stream_open(&s, c, "t", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(b.info[0].version, 7);
  assert_int_equal(b.info[1].version, 9);
  assert_int_equal(b.info[0].staleness, 2);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wait_timeout_wake_restore),
      cmocka_unit_test(test_token_versions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
