/* The exposition text of a Stats snapshot: label values escaped, times in
 * seconds, one HELP and TYPE per family, every sample labelled with the
 * server's shard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/metrics.h"

/* Sample lines (not # lines) whose labels do not open with
 * shard="<shard>": each family's series from many shards must stay apart. */
static int samples_without_shard(const char *text, const char *shard) {
  char want[64];
  int bad = 0, n = 0;
  snprintf(want, sizeof(want), "{shard=\"%s\"", shard);
  for (const char *line = text; *line != '\0';) {
    const char *eol = strchr(line, '\n');
    assert_non_null(eol);
    if (line[0] != '#') {
      const char *brace = memchr(line, '{', (size_t)(eol - line));
      n++;
      if (brace == NULL || strncmp(brace, want, strlen(want)) != 0) {
        fprintf(stderr, "no %s in: %.*s\n", want, (int)(eol - line), line);
        bad++;
      }
    }
    line = eol + 1;
  }
  assert_true(n > 0);
  return bad;
}

static void test_format(void **state) {
  (void)state;
  Chime__V1__TableStats t = CHIME__V1__TABLE_STATS__INIT;
  Chime__V1__TableStats *tp[] = {&t};
  Chime__V1__StreamStats s = CHIME__V1__STREAM_STATS__INIT;
  Chime__V1__StreamStats *sp[] = {&s};
  Chime__V1__StatsResponse r = CHIME__V1__STATS_RESPONSE__INIT;
  t.name = "a\"b\\c\nd";
  t.inserts = 42;
  t.rate_sample_wait_ns = 1500000000u;
  t.samplers_waiting_items = 3;
  s.stream_id = 7;
  s.table = "a\"b\\c\nd";
  s.mode = CHIME__V1__MODE__MODE_SHM;
  s.bytes = 4096;
  r.n_tables = 1;
  r.tables = tp;
  r.n_streams = 1;
  r.streams = sp;
  r.ring_bytes_total = 123;
  char *text = chime__metrics_format(&r, 5);
  assert_non_null(text);
  assert_non_null(strstr(text, "chime_table_inserts_total{shard=\"5\",table=\"a"
                               "\\\"b\\\\c\\nd\"} 42\n"));
  assert_non_null(strstr(text, "chime_table_rate_sample_wait_seconds_total{"
                               "shard=\"5\",table=\"a\\\"b\\\\c\\nd\"} "
                               "1.500000000\n"));
  assert_non_null(strstr(text, "chime_table_samplers_waiting_items{shard=\"5\","
                               "table=\"a\\\"b\\\\c\\nd\"} 3\n"));
  assert_non_null(strstr(text, "chime_stream_bytes_total{shard=\"5\",stream="
                               "\"7\",table=\"a\\\"b\\\\c\\nd\",mode=\"shm\"} "
                               "4096\n"));
  assert_non_null(strstr(text, "# TYPE chime_ring_bytes gauge\n"
                               "chime_ring_bytes{shard=\"5\"} 123\n"));
  assert_int_equal(samples_without_shard(text, "5"), 0);
  /* One TYPE line per family. */
  int types = 0;
  for (const char *p = text; (p = strstr(p, "# TYPE chime_table_size ")); p++)
    types++;
  assert_int_equal(types, 1);
  free(text);
}

/* Every family's name, type and HELP text as they were before the names
 * were made from chime/stats.h: they are what dashboards and alerts
 * query, so the list may grow but never rename. */
static const struct {
  const char *name, *type, *help;
} families[] = {
    {"chime_table_size", "gauge", "Items in the table."},
    {"chime_table_capacity", "gauge", "Items the table holds at most."},
    {"chime_table_inserts_total", "counter", "Items inserted."},
    {"chime_table_samples_total", "counter", "Items sampled into batches."},
    {"chime_table_sampler_wait_seconds_total", "counter",
     "Time samplers waited for items."},
    {"chime_table_insert_wait_seconds_total", "counter",
     "Time inserts waited for room."},
    {"chime_table_rate_insert_wait_seconds_total", "counter",
     "Time inserts waited on the rate limiter."},
    {"chime_table_rate_sample_wait_seconds_total", "counter",
     "Time samplers waited on the rate limiter."},
    {"chime_table_returned_total", "counter",
     "Items given back by streams that ended."},
    {"chime_table_left_total", "counter",
     "Items that left the table (sampled out, evicted, deleted)."},
    {"chime_table_left_times_sampled_total", "counter",
     "Times the items that left were sampled, in all."},
    {"chime_table_inserts_waiting_rate", "gauge",
     "Inserts waiting on the rate limiter now."},
    {"chime_table_samplers_waiting_rate", "gauge",
     "Samplers waiting on the rate limiter now."},
    {"chime_table_samplers_waiting_items", "gauge",
     "Samplers waiting for items now."},
    {"chime_table_steps", "gauge", "Steps stored now (sequence tables)."},
    {"chime_table_steps_inserted_total", "counter",
     "Steps appended (sequence tables)."},
    {"chime_table_episodes_open", "gauge",
     "Episodes open now (sequence tables)."},
    {"chime_table_step_bytes", "gauge",
     "Bytes of step storage (sequence tables)."},
    {"chime_table_removed_stale_total", "counter",
     "Items that left for being more than max_staleness versions behind."},
    {"chime_table_newest_version", "gauge",
     "The newest policy version the table knows (items' and learners')."},
    {"chime_table_raw_bytes", "gauge",
     "Bytes of the items held, as inserted (plain tables)."},
    {"chime_table_stored_bytes", "gauge",
     "Bytes the table keeps for them, compressed leaves as stored."},
    {"chime_table_leaves_stored_raw_total", "counter",
     "Compressed leaves' values kept raw: compression did not shrink them."},
    {"chime_table_dropped_zero_variance_total", "counter",
     "Groups a zero_variance filter dropped at insert (group tables)."},
    {"chime_table_dropped_mean_outside_total", "counter",
     "Groups a mean_outside filter dropped at insert (group tables)."},
    {"chime_table_disk_bytes", "gauge",
     "Bytes the table's files hold on disk (allocated blocks; 0 in memory)."},
    {"chime_table_pace_wait_seconds_total", "counter",
     "Time inserts waited on pacing (producers held back)."},
    {"chime_table_paced_inserts_total", "counter",
     "Insert requests that waited on pacing."},
    {"chime_table_inserts_waiting_pace", "gauge",
     "Inserts waiting on pacing now."},
    {"chime_table_pace_ahead", "gauge",
     "Samples written ahead of the learner's progress (pacing)."},
    {"chime_table_leaf_raw_bytes", "gauge",
     "Bytes of a compressed leaf of the items held, as inserted."},
    {"chime_table_leaf_stored_bytes", "gauge",
     "Bytes the table keeps for a compressed leaf (u32 sizes included)."},
    {"chime_table_leaf_stored_raw_total", "counter",
     "A compressed leaf's values kept raw: compression did not shrink "
     "them."},
    {"chime_stream_batches_total", "counter",
     "Batches delivered (shm: published, stream: sent)."},
    {"chime_stream_bytes_total", "counter", "Bytes of batches delivered."},
    {"chime_stream_leases", "gauge", "Batches the learner holds now."},
    {"chime_stream_producer_wait_seconds_total", "counter",
     "Time the sampler waited for a free slot."},
    {"chime_stream_consumer_wait_seconds_total", "counter",
     "Time the learner waited for a batch."},
    {"chime_stream_ring_bytes", "gauge", "Bytes of the stream's ring."},
    {"chime_streams", "gauge", "Streams open now."},
    {"chime_ring_bytes", "gauge", "Bytes of rings charged to the budget now."},
    {"chime_pinned_bytes", "gauge", "Bytes of rings page-locked now."},
    {"chime_staged_insert_bytes", "gauge",
     "Bytes of insert requests staged to wait for room."},
    {"chime_staged_insert_budget_bytes", "gauge",
     "The budget of staged insert bytes."},
    {"chime_insert_calls_parked", "gauge",
     "Insert calls not read while the staging budget is spent."},
    {"chime_staged_insert_reserved_bytes", "gauge",
     "Staging budget held for Insert messages asked of gRPC, not yet read."},
    {"chime_insert_reads_reserved", "gauge",
     "Insert reads in the works that hold a part of the staging budget."},
    {"chime_staged_insert_peak_bytes", "gauge",
     "The most staged and reserved insert bytes at once since start."},
    {"chime_checkpoints_total", "counter", "Checkpoints written since start."},
    {"chime_checkpoint_failures_total", "counter",
     "Checkpoints that failed since start."},
    {"chime_checkpoint_age_seconds", "gauge",
     "Seconds since the last checkpoint was written."},
    {"chime_checkpoint_last_duration_seconds", "gauge",
     "How long the last checkpoint took, DONE included."},
    {"chime_checkpoint_last_pause_seconds", "gauge",
     "The longest hold of one table's lock in the last checkpoint."},
};

static void test_families_as_before(void **state) {
  (void)state;
  Chime__V1__TableStats t = CHIME__V1__TABLE_STATS__INIT;
  Chime__V1__TableStats *tp[] = {&t};
  Chime__V1__StreamStats s = CHIME__V1__STREAM_STATS__INIT;
  Chime__V1__StreamStats *sp[] = {&s};
  Chime__V1__StatsResponse r = CHIME__V1__STATS_RESPONSE__INIT;
  t.name = "t";
  t.left_times_sampled = 14;
  t.step_bytes = 19;
  t.inserts_waiting_rate = 10;
  Chime__V1__LeafBytes lb = CHIME__V1__LEAF_BYTES__INIT;
  Chime__V1__LeafBytes *lbp[] = {&lb};
  lb.leaf = "obs";
  lb.raw_bytes = 7056;
  lb.stored_bytes = 180;
  lb.stored_raw = 2;
  t.n_leaf_bytes = 1;
  t.leaf_bytes = lbp;
  s.table = "t";
  s.ring_bytes = 10;
  s.max_leases = 9;
  s.pinned = 1;
  r.n_tables = 1;
  r.tables = tp;
  r.n_streams = 1;
  r.streams = sp;
  r.staged_insert_budget = 6;
  r.insert_calls_parked = 7;
  r.checkpoint_last_unix_ns = 1;             /* the checkpoint gauges show */
  char *text = chime__metrics_format(&r, 0); /* unsharded: shard="0" */
  assert_non_null(text);
  size_t n = sizeof(families) / sizeof(families[0]), lines = 0;
  char want[512];
  for (size_t i = 0; i < n; i++) {
    snprintf(want, sizeof(want), "# HELP %s %s\n# TYPE %s %s\n",
             families[i].name, families[i].help, families[i].name,
             families[i].type);
    if (strstr(text, want) == NULL)
      fail_msg("missing or changed: %s", want);
  }
  for (const char *p = text; (p = strstr(p, "# TYPE ")) != NULL; p++)
    lines++;
  assert_int_equal(lines, n); /* and nothing else */
  /* Values from the fields of the same name, in their unit. */
  assert_non_null(strstr(
      text,
      "\nchime_table_left_times_sampled_total{shard=\"0\",table=\"t\"} 14\n"));
  assert_non_null(
      strstr(text, "\nchime_table_step_bytes{shard=\"0\",table=\"t\"} 19\n"));
  /* A compressed leaf's, labelled by its table and leaf. */
  assert_non_null(strstr(text, "\nchime_table_leaf_raw_bytes{shard=\"0\","
                               "table=\"t\",leaf=\"obs\"} 7056\n"));
  assert_non_null(strstr(text, "\nchime_table_leaf_stored_bytes{shard=\"0\","
                               "table=\"t\",leaf=\"obs\"} 180\n"));
  assert_non_null(strstr(text, "\nchime_table_leaf_stored_raw_total{shard="
                               "\"0\",table=\"t\",leaf=\"obs\"} 2\n"));
  assert_non_null(strstr(
      text,
      "\nchime_table_inserts_waiting_rate{shard=\"0\",table=\"t\"} 10\n"));
  assert_non_null(
      strstr(text, "\nchime_stream_ring_bytes{shard=\"0\",stream=\"0\",table="
                   "\"t\",mode=\"stream\"} 10\n"));
  assert_non_null(
      strstr(text, "\nchime_staged_insert_budget_bytes{shard=\"0\"} 6\n"));
  assert_non_null(strstr(text, "\nchime_insert_calls_parked{shard=\"0\"} 7\n"));
  assert_non_null(strstr(text, "\nchime_checkpoint_last_pause_seconds{shard="
                               "\"0\"} 0.000000\n"));
  assert_int_equal(samples_without_shard(text, "0"), 0);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_format),
                                     cmocka_unit_test(test_families_as_before)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
