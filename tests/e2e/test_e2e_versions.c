/* Policy versions and staleness gates through the real chimed (issue 25,
 * docs/replay.md): each sample's version and staleness in a batch's info,
 * in shm and stream mode; a learner's version reported on its stream
 * (at open and later) and by SetVersion from another process, making the
 * items more than max_staleness behind it leave (removed_stale in Stats)
 * and never reach the learner, batches drawn before it included; a
 * version going backwards allowed and changing nothing; bad input
 * refused (an unknown table, a count of versions that fits no rule). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "rawcall.h"

static const char *config =
    "{\"tables\": [{\"name\": \"u\", \"spec\": \"x:u64[]\", \"capacity\": "
    "1000, \"sampler\": \"uniform\"},\n"
    " {\"name\": \"g\", \"spec\": \"x:u64[]\", \"capacity\": 1000, "
    "\"sampler\": \"uniform\", \"max_staleness\": 2}]}\n";

CHIME__CHIMED_GROUP(config)

/* n samples x = version * 1000 + i of each version in [lo, hi], through
 * one writer that changes its version between appends. */
static void write_versions(const char *table, uint64_t lo, uint64_t hi,
                           uint32_t n) {
  chime_writer_t *w;
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.version = lo;
  assert_int_equal(chime_writer_open(&w, client, table, &o), 0);
  for (uint64_t v = lo; v <= hi; v++) {
    assert_int_equal(chime_writer_set_version(w, v), 0);
    for (uint32_t i = 0; i < n; i++) {
      uint64_t x = v * 1000 + i;
      assert_int_equal(chime_writer_append(w, &x, sizeof(x), 1.0), 0);
    }
  }
  assert_int_equal(chime_writer_close(w), 0);
}

/* Each sample's version is its writer's (x / 1000 says which it was) and
 * its staleness how far behind the newest version the table knew. */
static void info_mode(chime_mode_t mode) {
  chime_stream_t *s;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 16;
  so.slots = 2;
  so.mode = mode;
  assert_int_equal(chime_stream_open(&s, client, "u", &so), 0);
  for (int b = 0; b < 4; b++) {
    chime_batch_t bt;
    assert_int_equal(chime_stream_next(s, &bt, 10000), 0);
    const uint64_t *x = bt.leaf[0].data;
    for (uint32_t j = 0; j < bt.count; j++) {
      assert_int_equal(bt.info[j].version, x[j] / 1000);
      assert_int_equal(bt.info[j].staleness, 7 - bt.info[j].version);
    }
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
  chime_stream_close(s);
}

static void test_info(void **state) {
  (void)state;
  write_versions("u", 3, 7, 10);
  info_mode(CHIME_MODE_SHM);
  info_mode(CHIME_MODE_STREAM);
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(client, &info), 0);
  for (uint32_t i = 0; i < info->ntables; i++) {
    if (strcmp(info->tables[i].name, "u") == 0) {
      assert_int_equal(info->tables[i].newest_version, 7);
      assert_int_equal(info->tables[i].max_staleness, 0);
    } else {
      assert_int_equal(info->tables[i].max_staleness, 2);
    }
  }
  chime_server_info_free(info);
  /* No max_staleness: a learner's version leaves every item in. */
  uint64_t newest = 0;
  assert_int_equal(chime_client_set_version(client, "u", 100, &newest), 0);
  assert_int_equal(newest, 100);
  chime_table_stats_t ts = chime__table_stats(client, "u");
  assert_int_equal(ts.size, 50);
  assert_int_equal(ts.removed_stale, 0);
  assert_int_equal(ts.newest_version, 100);
}

/* Waits (bounded) until the table has removed `want` stale items. */
static chime_table_stats_t wait_removed(const char *table, uint64_t want) {
  int64_t end = chime__now_ms() + 10000;
  chime_table_stats_t ts;
  do {
    ts = chime__table_stats(client, table);
    if (ts.removed_stale >= want)
      break;
    chime__sleep_ms(10);
  } while (chime__now_ms() < end);
  assert_int_equal(ts.removed_stale, want);
  return ts;
}

/* The learner's version on its stream gates what it gets, in either
 * mode; SetVersion from elsewhere does the same; backwards changes
 * nothing. */
static void gate_mode(chime_mode_t mode, uint64_t base) {
  /* base+1 .. base+6, 20 each: base+1..base+3 are behind base+6 - 2 at
   * once (60 removed as they arrive or as base+4.. come). */
  uint64_t before = chime__table_stats(client, "g").removed_stale;
  uint64_t size0 = chime__table_stats(client, "g").size;
  write_versions("g", base + 1, base + 6, 20);
  chime_table_stats_t ts = wait_removed("g", before + 60 + size0);
  assert_int_equal(ts.size, 60);
  chime_stream_t *s;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 8;
  so.slots = 4;
  so.mode = mode;
  so.version = base + 5; /* at open: newest stays base + 6 */
  assert_int_equal(chime_stream_open(&s, client, "g", &so), 0);
  chime_batch_t bt;
  assert_int_equal(chime_stream_next(s, &bt, 10000), 0);
  for (uint32_t j = 0; j < bt.count; j++)
    assert_true(bt.info[j].version >= base + 4);
  assert_int_equal(chime_stream_release(s, &bt), 0);
  /* base + 8: base+4 and base+5 leave; batches already in the ring that
   * hold them are dropped by next(). */
  assert_int_equal(chime_stream_set_version(s, base + 8), 0);
  ts = wait_removed("g", before + size0 + 100);
  assert_int_equal(ts.size, 20);
  assert_int_equal(ts.newest_version, base + 8);
  for (int b = 0; b < 8; b++) {
    assert_int_equal(chime_stream_next(s, &bt, 10000), 0);
    for (uint32_t j = 0; j < bt.count; j++) {
      assert_int_equal(bt.info[j].version, base + 6);
      assert_true(bt.info[j].staleness <= 2);
    }
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
  /* Backwards: allowed, changes nothing. */
  assert_int_equal(chime_stream_set_version(s, base + 1), 0);
  uint64_t newest = 0;
  assert_int_equal(chime_client_set_version(client, "g", base + 2, &newest), 0);
  assert_int_equal(newest, base + 8);
  assert_int_equal(chime__table_stats(client, "g").size, 20);
  /* SetVersion from another process: base + 9 leaves base + 6 behind. */
  assert_int_equal(chime_client_set_version(client, "g", base + 9, &newest), 0);
  assert_int_equal(newest, base + 9);
  ts = chime__table_stats(client, "g");
  assert_int_equal(ts.size, 0);
  assert_int_equal(ts.removed_stale, before + size0 + 120);
  chime_stream_close(s);
}

static void test_gate(void **state) {
  (void)state;
  gate_mode(CHIME_MODE_SHM, 0);
  gate_mode(CHIME_MODE_STREAM, 100);
}

static void test_bad_input(void **state) {
  (void)state;
  uint64_t newest = 0;
  assert_int_equal(chime_client_set_version(client, "nope", 1, &newest),
                   CHIME_ENOTFOUND);
  /* Two versions for three samples: neither one for all nor one each. */
  grpc_channel *ch = chime__raw_channel(chimed.addr);
  assert_non_null(ch);
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 10000),
                   0);
  uint64_t data[3] = {1, 2, 3}, ver[2] = {300, 300};
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = "u";
  req.count = 3;
  req.data.data = (uint8_t *)data;
  req.data.len = sizeof(data);
  req.n_versions = 2;
  req.versions = ver;
  assert_int_equal(chime__raw_send(&r, &req.base), 0);
  grpc_status_code st;
  char details[512] = "";
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 10000),
                   0);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(details, "2 versions for 3 samples"));
  chime__raw_destroy(&r);
  grpc_channel_destroy(ch);
  assert_true(chime__table_stats(client, "u").newest_version <
              300); /* nothing went in */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_gate),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
