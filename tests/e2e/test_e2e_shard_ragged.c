/* Ragged leaves over shards (issue 25 on issue 22's sharded clients), two
 * real chimed each holding its own samples of every length up to the
 * bound (written by each shard's own client, or by writers of the sharded
 * client, one bound to each shard): a sharded stream delivers them in shm
 * and in stream mode as one server does (values packed, count + 1 offsets
 * from 0 ending at the values' rows, the shared length's offsets equal,
 * each sample's rows and fixed leaves its own): fifo merges the
 * sub-streams and delivers every sample of both shards once; uniform and
 * prioritized lend one shard's batch with the union's info copy, whose
 * records keep each sample's key, version and staleness and only the
 * probability changes. */
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

#define NSHARDS 2
#define BOUND 64
#define PER_SHARD 64 /* whole batches: fifo delivers only full ones */
#define BATCH 8
#define SPEC "tokens:i32[<=64], lp:f32[<=64 ~tokens], frames:u8[<=3,2], r:f32[]"

static chime__chimed_t d[NSHARDS];
static chime_client_t *direct[NSHARDS]; /* one-server clients, for inserts */
static chime_client_t *sharded;

/* Sample id's lengths (0 and the bound both hit) and version. */
static uint32_t tok_len(uint32_t id) {
  return id % 10 == 1 ? BOUND : (id * 37) % (BOUND + 1);
}
static uint32_t frame_len(uint32_t id) {
  return id % 4;
}
static uint64_t version_of(uint32_t id) {
  return 1 + id % 3;
}
static uint32_t id_of(int k, uint32_t i) {
  return (uint32_t)(k + 1) * 1000 + i;
}

static chime_writer_t *open_writer(chime_client_t *c, const char *table) {
  chime_writer_t *w;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = 7; /* several messages, samples of mixed sizes */
  assert_int_equal(chime_writer_open(&w, c, table, &wo), 0);
  return w;
}

/* Samples id_of(k, 0 ..) on w. */
static void append_ids(chime_writer_t *w, int k) {
  int32_t tok[BOUND];
  float lp[BOUND], r;
  uint8_t frames[3 * 2];
  for (uint32_t i = 0; i < PER_SHARD; i++) {
    uint32_t id = id_of(k, i);
    for (uint32_t t = 0; t < BOUND; t++) {
      tok[t] = (int32_t)(id * 100 + t);
      lp[t] = (float)id + (float)t / 8;
    }
    for (uint32_t t = 0; t < sizeof(frames); t++)
      frames[t] = (uint8_t)(id + t);
    r = (float)id;
    const void *leaves[4] = {tok, lp, frames, &r};
    const uint32_t lengths[4] = {tok_len(id), tok_len(id), frame_len(id), 0};
    assert_int_equal(chime_writer_set_version(w, version_of(id)), 0);
    /* Shard 2's items weigh 5x shard 1's (prioritized): shares not 1. */
    assert_int_equal(
        chime_writer_append_leaves(w, leaves, lengths, k ? 5.0 : 1.0), 0);
  }
}

static void write_shard(int k, const char *table) {
  chime_writer_t *w = open_writer(direct[k], table);
  append_ids(w, k);
  assert_int_equal(chime_writer_close(w), 0);
}

static void config_of(int k, char *config, size_t len) {
  static const char *const tables[][2] = {{"q_shm", "fifo"},
                                          {"q_stream", "fifo"},
                                          {"q_w", "fifo"},
                                          {"u", "uniform"},
                                          {"p", "prioritized"}};
  size_t n =
      (size_t)snprintf(config, len, "{\"shard\": %d, \"tables\": [\n", k + 1);
  for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
    n += (size_t)snprintf(config + n, len - n,
                          "%s {\"name\": \"%s\", \"spec\": \"" SPEC
                          "\", \"capacity\": 1000, \"sampler\": \"%s\"%s}\n",
                          t ? "," : "", tables[t][0], tables[t][1],
                          strcmp(tables[t][1], "prioritized") == 0
                              ? ", \"priority_exponent\": 1"
                              : "");
  snprintf(config + n, len - n, "]}\n");
}

static int setup(void **state) {
  (void)state;
  char target[1024];
  return chime__shards_start(d, NSHARDS, config_of, direct, target,
                             sizeof target, &sharded);
}

static int teardown(void **state) {
  (void)state;
  return chime__shards_stop(d, NSHARDS, direct, NULL, &sharded);
}

/* The batch as documented, each sample as written; *ids gets the ids. */
static void check_ragged_batch(const chime_batch_t *b, uint32_t *ids) {
  const chime_batch_leaf_t *t = chime_batch_leaf(b, "tokens");
  const chime_batch_leaf_t *l = chime_batch_leaf(b, "lp");
  const chime_batch_leaf_t *f = chime_batch_leaf(b, "frames");
  const chime_batch_leaf_t *r = chime_batch_leaf(b, "r");
  assert_non_null(t);
  assert_non_null(l);
  assert_non_null(f);
  assert_non_null(r);
  const int64_t *to = chime_batch_offsets(b, "tokens");
  const int64_t *fo = chime_batch_offsets(b, "frames");
  assert_ptr_equal(to, t->offsets);
  assert_ptr_equal(fo, f->offsets);
  assert_null(chime_batch_offsets(b, "r"));
  assert_int_equal(to[0], 0);
  assert_int_equal(fo[0], 0);
  assert_int_equal(t->shape[0], to[b->count]);
  assert_int_equal(t->bytes, t->shape[0] * sizeof(int32_t));
  assert_int_equal(f->shape[0], fo[b->count]);
  assert_int_equal(f->shape[1], 2);
  assert_int_equal(r->shape[0], b->count);
  const int32_t *tv = t->data;
  const float *lv = l->data;
  const uint8_t *fv = f->data;
  for (uint32_t j = 0; j < b->count; j++) {
    uint32_t id = (uint32_t)((const float *)r->data)[j];
    ids[j] = id;
    assert_true(to[j] <= to[j + 1]);
    assert_int_equal(to[j + 1] - to[j], tok_len(id));
    assert_int_equal(l->offsets[j], to[j]);
    assert_int_equal(l->offsets[j + 1], to[j + 1]);
    assert_int_equal(fo[j + 1] - fo[j], frame_len(id));
    for (int64_t k = 0; k < to[j + 1] - to[j]; k++) {
      assert_int_equal(tv[to[j] + k], (int32_t)(id * 100 + (uint32_t)k));
      assert_true(lv[to[j] + k] == (float)id + (float)k / 8);
    }
    for (int64_t k = 0; k < (fo[j + 1] - fo[j]) * 2; k++)
      assert_int_equal(fv[fo[j] * 2 + k], (uint8_t)(id + (uint32_t)k));
    /* The info record is this sample's (the union's copy included). */
    assert_int_equal(b->info[j].version, version_of(id));
    assert_int_equal(b->info[j].staleness, 3 - version_of(id));
    assert_true(b->info[j].probability > 0 && b->info[j].probability <= 1);
  }
}

static chime_stream_t *open_union(const char *table, chime_mode_t mode) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = 4;
  so.mode = mode;
  chime_stream_t *s = NULL;
  int rc = chime_stream_open(&s, sharded, table, &so);
  if (rc != 0)
    fail_msg("open '%s' over shards: %s", table, chime_last_error());
  assert_int_equal(chime_stream_mode(s), mode);
  return s;
}

/* fifo: the sub-streams merged, every sample of both shards once. The
 * samples go through one-server writers (k to shard k), or through
 * writers of the sharded client, one bound to each shard. */
static void merged(const char *table, chime_mode_t mode, int sharded_writers) {
  if (sharded_writers) {
    chime_writer_t *w[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
      w[k] = open_writer(sharded, table);
    for (int k = 0; k < NSHARDS; k++)
      append_ids(w[k], k);
    for (int k = 0; k < NSHARDS; k++)
      assert_int_equal(chime_writer_close(w[k]), 0);
    for (int k = 0; k < NSHARDS; k++) { /* one writer's samples each */
      chime_stats_t *st = NULL;
      assert_int_equal(chime_client_stats(direct[k], &st), 0);
      for (uint32_t t = 0; t < st->ntables; t++)
        if (strcmp(st->tables[t].name, table) == 0)
          assert_int_equal(st->tables[t].inserts, PER_SHARD);
      chime_stats_free(st);
    }
  } else {
    for (int k = 0; k < NSHARDS; k++)
      write_shard(k, table);
  }
  chime_stream_t *s = open_union(table, mode);
  static uint8_t seen[NSHARDS + 1][PER_SHARD];
  memset(seen, 0, sizeof(seen));
  uint32_t total = 0, ids[BATCH];
  while (total < NSHARDS * PER_SHARD) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("next: %s (%u of %u)", chime_last_error(), total,
               NSHARDS * PER_SHARD);
    assert_int_equal(b.count, BATCH);
    check_ragged_batch(&b, ids);
    for (uint32_t j = 0; j < b.count; j++) {
      uint32_t k = ids[j] / 1000, i = ids[j] % 1000;
      assert_true(k >= 1 && k <= NSHARDS && i < PER_SHARD);
      assert_int_equal(seen[k][i], 0);
      seen[k][i] = 1;
    }
    total += b.count;
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

static void test_fifo_shm(void **state) {
  (void)state;
  merged("q_shm", CHIME_MODE_SHM, 0);
}
static void test_fifo_stream(void **state) {
  (void)state;
  merged("q_stream", CHIME_MODE_STREAM, 0);
}
static void test_fifo_sharded_writers(void **state) {
  (void)state;
  merged("q_w", CHIME_MODE_SHM, 1);
}

/* uniform, prioritized: batches from both shards, each whole from one,
 * two held at once (the union's info copies are per batch). */
static void weighed(const char *table, chime_mode_t mode) {
  chime_stream_t *s = open_union(table, mode);
  int from[NSHARDS + 1] = {0};
  uint32_t ids[BATCH];
  for (int n = 0; n < 100; n++) {
    chime_batch_t a, b;
    assert_int_equal(chime_stream_next(s, &a, 20000), 0);
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    check_ragged_batch(&a, ids);
    for (uint32_t j = 1; j < a.count; j++)
      assert_int_equal(ids[j] / 1000, ids[0] / 1000);
    from[ids[0] / 1000]++;
    check_ragged_batch(&b, ids);
    check_ragged_batch(&a, ids); /* b's lend left a's info alone */
    assert_int_equal(chime_stream_release(s, &a), 0);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  assert_true(from[1] > 0 && from[2] > 0);
  chime_stream_close(s);
}

static void test_weighed(void **state) {
  (void)state;
  for (int k = 0; k < NSHARDS; k++) {
    write_shard(k, "u");
    write_shard(k, "p");
  }
  /* Every shard's newest version is 3: staleness 3 - version. */
  weighed("u", CHIME_MODE_SHM);
  weighed("u", CHIME_MODE_STREAM);
  weighed("p", CHIME_MODE_SHM);
  weighed("p", CHIME_MODE_STREAM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_shm),
      cmocka_unit_test(test_fifo_stream),
      cmocka_unit_test(test_fifo_sharded_writers),
      cmocka_unit_test(test_weighed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
