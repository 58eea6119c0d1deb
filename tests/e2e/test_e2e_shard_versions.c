/* Policy versions over shards (issue 25 on issue 22's sharded clients),
 * two real chimed: chime_client_set_version on a sharded client raises
 * every shard's newest version (each shard's Stats read through its own
 * one-server client), and a shard that is down fails it at once with an
 * error naming that shard while the others are told; a sharded stream's
 * chime_stream_set_version reaches every sub-stream, so batches drawn
 * into a sub-stream's ring before the version are dropped as on one
 * server (fifo: merged sub-streams; uniform: one shard's batch lent), in
 * shm and stream mode; with writers on both shards racing the learner's
 * version bumps, no sample more than max_staleness behind the learner's
 * version ever reaches it (nor from a shard back from down: its reopened
 * sub-stream tells it the version), and each sample's info says its
 * version and a staleness within the window; a prioritized table that
 * weighs staleness ("inverse") keeps its union probabilities exact over
 * shards, p^a / (s + 1) over the shards' summed masses, and says so in
 * GetInfo. */
#include <math.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define NSHARDS 2
#define STALENESS 2
#define EXPONENT 0.5
#define X(k, v, i) ((uint64_t)(k) << 48 | (uint64_t)(v) << 24 | (uint64_t)(i))

static chime__chimed_t d[NSHARDS];
static chime_client_t *direct[NSHARDS]; /* one-server clients */
static chime_client_t *sharded;
static int stopped[NSHARDS];
static char target[1024];

static void config_of(int k, char *config, size_t len) {
  snprintf(config, len,
           "{\"shard\": %d, \"tables\": [\n"
           " {\"name\": \"u\", \"spec\": \"x:u64[]\", \"capacity\": 10000, "
           "\"sampler\": \"uniform\"},\n"
           " {\"name\": \"g\", \"spec\": \"x:u64[]\", \"capacity\": 10000, "
           "\"sampler\": \"uniform\", \"max_staleness\": %d},\n"
           " {\"name\": \"q\", \"spec\": \"x:u64[]\", \"capacity\": 100000, "
           "\"sampler\": \"fifo\", \"max_staleness\": %d},\n"
           " {\"name\": \"w\", \"spec\": \"x:u64[]\", \"capacity\": 10000, "
           "\"sampler\": \"prioritized\", \"priority_exponent\": %g, "
           "\"staleness_weight\": \"inverse\"},\n"
           /* configured differently on each shard: one thing each */
           " {\"name\": \"dw\", \"spec\": \"x:u64[]\", \"capacity\": 100, "
           "\"sampler\": \"prioritized\", \"staleness_weight\": \"%s\"},\n"
           " {\"name\": \"de\", \"spec\": \"x:u64[]\", \"capacity\": 100, "
           "\"sampler\": \"prioritized\", \"priority_exponent\": %g},\n"
           " {\"name\": \"ds\", \"spec\": \"x:u64[]\", \"capacity\": 100, "
           "\"sampler\": \"%s\"},\n"
           " {\"name\": \"dx\", \"spec\": \"x:u%d[]\", \"capacity\": 100, "
           "\"sampler\": \"uniform\"}]}\n",
           k + 1, STALENESS, STALENESS, EXPONENT, k ? "none" : "inverse",
           k ? 0.6 : 0.5, k ? "uniform" : "prioritized", k ? 32 : 64);
}

static int setup(void **state) {
  (void)state;
  memset(stopped, 0, sizeof(stopped));
  return chime__shards_start(d, NSHARDS, config_of, direct, target,
                             sizeof target, &sharded);
}

static int teardown(void **state) {
  (void)state;
  return chime__shards_stop(d, NSHARDS, direct, stopped, &sharded);
}

/* n samples x = X(k, v, i) of each version v in [lo, hi] into shard k's
 * table, through one writer of that shard alone. */
static void write_shard(int k, const char *table, uint64_t lo, uint64_t hi,
                        uint32_t n) {
  chime_writer_t *w;
  assert_int_equal(chime_writer_open(&w, direct[k], table, NULL), 0);
  for (uint64_t v = lo; v <= hi; v++) {
    assert_int_equal(chime_writer_set_version(w, v), 0);
    for (uint32_t i = 0; i < n; i++) {
      uint64_t x = X(k, v, i);
      assert_int_equal(chime_writer_append(w, &x, sizeof(x), 1.0), 0);
    }
  }
  assert_int_equal(chime_writer_close(w), 0);
}

static chime_table_stats_t shard_stats(int k, const char *table) {
  chime_stats_t *st = NULL;
  chime_table_stats_t out;
  memset(&out, 0, sizeof(out));
  assert_int_equal(chime_client_stats(direct[k], &st), 0);
  for (uint32_t i = 0; i < st->ntables; i++)
    if (strcmp(st->tables[i].name, table) == 0)
      out = st->tables[i];
  chime_stats_free(st);
  return out;
}

static chime_stream_t *open_union(const char *table, chime_mode_t mode,
                                  uint64_t version) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 4;
  so.slots = 4;
  so.mode = mode;
  so.version = version;
  chime_stream_t *s = NULL;
  int rc = chime_stream_open(&s, sharded, table, &so);
  if (rc != 0)
    fail_msg("chime_stream_open on '%s' over shards: %s: %s", table,
             chime_strerror(rc), chime_last_error());
  return s;
}

/* --- staleness-weighted union probabilities --- */

/* Item i of version v on shard k: priority 1 + (i + k) % 4, so the
 * shards' masses differ. */
static double prio_of(int k, uint64_t i) {
  return 1.0 + (double)((i + (uint64_t)k) % 4);
}

/* Shard k gets n items of each version 1..newest; returns its mass,
 * the sum of p^a / (s + 1) with s = newest - v. */
static double write_weighted(int k, uint64_t newest, uint32_t n) {
  chime_writer_t *w;
  double z = 0;
  assert_int_equal(chime_writer_open(&w, direct[k], "w", NULL), 0);
  for (uint64_t v = 1; v <= newest; v++) {
    assert_int_equal(chime_writer_set_version(w, v), 0);
    for (uint32_t i = 0; i < n; i++) {
      uint64_t x = X(k, v, i);
      double p = prio_of(k, i);
      assert_int_equal(chime_writer_append(w, &x, sizeof(x), p), 0);
      z += pow(p, EXPONENT) / (double)(newest - v + 1);
    }
  }
  assert_int_equal(chime_writer_close(w), 0);
  return z;
}

/* Every sample's union probability is exactly its weight over the summed
 * masses, batch after batch: the masses the union learns from batches
 * (weight / probability of a batch's first item) divide the staleness out
 * as the shard's sampler does, so they agree with GetInfo's. */
static void test_stale_weighted_union(void **state) {
  (void)state;
  double z = 0;
  for (int k = 0; k < NSHARDS; k++)
    z += write_weighted(k, 3, 10 + 7 * (uint32_t)k);
  chime_server_info_t *si = NULL;
  assert_int_equal(chime_client_info(direct[0], &si), 0);
  int seen = 0;
  for (uint32_t t = 0; t < si->ntables; t++) {
    const chime_table_info_t *ti = &si->tables[t];
    if (strcmp(ti->name, "w") == 0 || strcmp(ti->name, "u") == 0) {
      assert_string_equal(ti->staleness_weight,
                          ti->name[0] == 'w' ? "inverse" : "none");
      seen++;
    }
  }
  assert_int_equal(seen, 2);
  chime_server_info_free(si);
  chime_stream_t *s = open_union("w", CHIME_MODE_SHM, 0);
  uint32_t stale = 0;
  for (int b = 0; b < 400; b++) {
    chime_batch_t bt;
    int rc = chime_stream_next(s, &bt, 10000);
    if (rc != 0)
      fail_msg("next: %s: %s", chime_strerror(rc), chime_last_error());
    const uint64_t *x = bt.leaf[0].data;
    for (uint32_t j = 0; j < bt.count; j++) {
      int k = (int)(x[j] >> 48);
      uint64_t v = (x[j] >> 24) & 0xffffff, i = x[j] & 0xffffff;
      assert_int_equal(bt.info[j].staleness, 3 - v);
      stale += bt.info[j].staleness > 0;
      double want = pow(prio_of(k, i), EXPONENT) / (double)(4 - v) / z;
      if (fabs(bt.info[j].probability - want) > 1e-9 * want)
        fail_msg("batch %d: x %#" PRIx64 " (shard %d, staleness %" PRIu64
                 ") has union probability %.12g, its weight over the summed "
                 "masses is %.12g",
                 b, x[j], k + 1, 3 - v, bt.info[j].probability, want);
    }
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
  assert_true(stale > 0); /* the case that tells the weights apart */
  chime_stream_close(s);
}

/* A table configured differently on the shards (staleness_weight,
 * priority_exponent, sampler, spec) fails a sharded open, naming it. */
static void test_differing_table_refused(void **state) {
  (void)state;
  static const char *const tables[] = {"dw", "de", "ds", "dx"};
  for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = 4;
    chime_stream_t *s = NULL;
    int rc = chime_stream_open(&s, sharded, tables[t], &so);
    if (rc != CHIME_EINVAL)
      fail_msg("'%s' differs on the shards: open gave %s, not CHIME_EINVAL",
               tables[t], chime_strerror(rc));
    assert_non_null(strstr(chime_last_error(), "configured alike"));
    assert_null(s);
  }
}

/* --- chime_client_set_version over shards --- */

static void test_client_set_version(void **state) {
  (void)state;
  write_shard(0, "u", 3, 7, 5);
  write_shard(1, "u", 3, 5, 5);
  uint64_t newest = 0;
  /* Below shard 1's newest, above shard 2's: the highest comes back. */
  assert_int_equal(chime_client_set_version(sharded, "u", 6, &newest), 0);
  assert_int_equal(newest, 7);
  assert_int_equal(shard_stats(0, "u").newest_version, 7);
  assert_int_equal(shard_stats(1, "u").newest_version, 6);
  assert_int_equal(chime_client_set_version(sharded, "u", 9, &newest), 0);
  assert_int_equal(newest, 9);
  for (int k = 0; k < NSHARDS; k++)
    assert_int_equal(shard_stats(k, "u").newest_version, 9);
  /* Every shard knows 9 now: a sample's staleness is 9 - its version
   * whichever shard it came from, in the union's info copy too. */
  chime_stream_t *s = open_union("u", CHIME_MODE_SHM, 0);
  int seen[NSHARDS] = {0};
  for (int b = 0; b < 40; b++) {
    chime_batch_t bt;
    assert_int_equal(chime_stream_next(s, &bt, 10000), 0);
    const uint64_t *x = bt.leaf[0].data;
    for (uint32_t j = 0; j < bt.count; j++) {
      uint64_t v = (x[j] >> 24) & 0xffffff;
      seen[x[j] >> 48] = 1;
      assert_int_equal(bt.info[j].version, v);
      assert_int_equal(bt.info[j].staleness, 9 - v);
    }
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
  assert_true(seen[0] && seen[1]);
  chime_stream_close(s);

  /* Shard 2 down: an error naming it, soon (no wait for it to return),
   * and shard 1 told all the same. */
  int st = 0;
  assert_int_equal(chime__chimed_stop(&d[1], 20000, &st), 0);
  stopped[1] = 1;
  int64_t t0 = chime__now_ms();
  int rc = chime_client_set_version(sharded, "u", 12, &newest);
  int64_t took = chime__now_ms() - t0;
  assert_int_not_equal(rc, 0);
  if (strstr(chime_last_error(), d[1].addr) == NULL)
    fail_msg("the error does not name the shard that is down (%s): %s",
             d[1].addr, chime_last_error());
  assert_true(took < 10000); /* liveness: not a hang */
  assert_int_equal(shard_stats(0, "u").newest_version, 12);
  assert_int_equal(newest, 12);
}

/* --- a sharded stream's version drops what its sub-streams drew before --- */

/* Waits (bounded) until every shard's sampler drew at least n samples of
 * table: its sub-stream's ring holds batches drawn before what follows. */
static void wait_sampled(const char *table, uint64_t n) {
  int64_t end = chime__now_ms() + 10000;
  for (int k = 0; k < NSHARDS; k++) {
    while (shard_stats(k, table).samples < n && chime__now_ms() < end)
      chime__sleep_ms(5);
    assert_true(shard_stats(k, table).samples >= n);
  }
}

static void drops_stale(const char *table, chime_mode_t mode, int fifo) {
  for (int k = 0; k < NSHARDS; k++)
    write_shard(k, table, 1, 1, 40);
  chime_stream_t *s = open_union(table, mode, 1);
  wait_sampled(table, 8); /* two batches each, not taken */
  assert_int_equal(chime_stream_set_version(s, 10), 0);
  for (int k = 0; k < NSHARDS; k++)
    write_shard(k, table, 10, 10, 40);
  /* fifo: every version-10 item once (80); uniform: 20 batches. */
  uint32_t fresh = 0;
  for (int b = 0; fifo ? fresh < 80 : b < 20; b++) {
    chime_batch_t bt;
    int rc = chime_stream_next(s, &bt, 10000);
    if (rc != 0)
      fail_msg("next: %s: %s (%u fresh so far)", chime_strerror(rc),
               chime_last_error(), fresh);
    const uint64_t *x = bt.leaf[0].data;
    for (uint32_t j = 0; j < bt.count; j++) {
      if (bt.info[j].version + STALENESS < 10)
        fail_msg("'%s': sample of version %" PRIu64 " (x %#" PRIx64
                 ") reached a learner at version 10, max_staleness %d",
                 table, bt.info[j].version, x[j], STALENESS);
      assert_int_equal(bt.info[j].version, (x[j] >> 24) & 0xffffff);
      assert_int_equal(bt.info[j].staleness, 0);
      fresh++;
    }
    assert_int_equal(chime_stream_release(s, &bt), 0);
  }
  if (fifo)
    assert_int_equal(fresh, 80);
  chime_stream_local_stats_t ls;
  assert_int_equal(chime_stream_stats(s, &ls), 0);
  assert_true(ls.dropped_stale >= 1);
  chime_stream_close(s);
}

static void test_drops_fifo_shm(void **state) {
  (void)state;
  drops_stale("q", CHIME_MODE_SHM, 1);
}
static void test_drops_fifo_stream(void **state) {
  (void)state;
  drops_stale("q", CHIME_MODE_STREAM, 1);
}
static void test_drops_uniform_shm(void **state) {
  (void)state;
  drops_stale("g", CHIME_MODE_SHM, 0);
}
static void test_drops_uniform_stream(void **state) {
  (void)state;
  drops_stale("g", CHIME_MODE_STREAM, 0);
}

/* A shard back from down gets the learner's version when its sub-stream
 * opens again: its items older than the window never reach the learner,
 * and it delivers again once it has fresh ones. */
static void test_reopened_shard_gets_version(void **state) {
  (void)state;
  for (int k = 0; k < NSHARDS; k++)
    write_shard(k, "g", 1, 1, 20);
  chime_stream_t *s = open_union("g", CHIME_MODE_SHM, 1);
  chime_batch_t bt;
  assert_int_equal(chime_stream_next(s, &bt, 10000), 0);
  assert_int_equal(chime_stream_release(s, &bt), 0);
  char addr[256], config[1024];
  snprintf(addr, sizeof addr, "%s", d[1].addr);
  chime__proc_kill(&d[1].proc);
  stopped[1] = 1;
  assert_int_equal(chime_stream_set_version(s, 10), 0);
  write_shard(0, "g", 10, 10, 20);
  /* Shard 2 again on its port, empty, its newest version 1 until told. */
  const char *args[] = {"--listen", addr, NULL};
  config_of(1, config, sizeof config);
  assert_int_equal(chime__chimed_start(&d[1], config, args, 30000), 0);
  stopped[1] = 0;
  chime_client_destroy(direct[1]);
  assert_int_equal(chime_client_create(&direct[1], d[1].addr, NULL), 0);
  write_shard(1, "g", 1, 1, 20);
  int wrote = 0, from2 = 0;
  for (int64_t end = chime__now_ms() + 20000;
       !from2 && chime__now_ms() < end;) {
    int rc = chime_stream_next(s, &bt, 200);
    if (rc == 0) {
      const uint64_t *x = bt.leaf[0].data;
      for (uint32_t j = 0; j < bt.count; j++) {
        if (bt.info[j].version + STALENESS < 10)
          fail_msg("shard %d's sample of version %" PRIu64
                   " reached a learner at version 10",
                   (int)(x[j] >> 48) + 1, bt.info[j].version);
        from2 |= x[j] >> 48 == 1;
      }
      assert_int_equal(chime_stream_release(s, &bt), 0);
    } else if (rc != CHIME_ETIMEDOUT) {
      fail_msg("next: %s: %s", chime_strerror(rc), chime_last_error());
    }
    /* The reopened sub-stream told shard 2: fresh items go in there. */
    if (!wrote && shard_stats(1, "g").newest_version >= 10) {
      write_shard(1, "g", 10, 10, 20);
      wrote = 1;
    }
  }
  assert_true(wrote);
  assert_true(from2);
  chime_stream_close(s);
}

/* --- writers on both shards racing the learner's bumps --- */

#define WRITERS 4
static atomic_uint_fast64_t learner_version;
static atomic_int writers_stop;
static const char *race_table;

/* A writer of the sharded client (bound to the shard with the fewest):
 * each sample at the learner's version as it last read it, or one
 * behind, as an actor a little late with its weights. */
static void *versioned_writer_main(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  chime_writer_t *w = NULL;
  int rc = chime_writer_open(&w, sharded, race_table, NULL);
  for (uint64_t i = 0; rc == 0 && !atomic_load(&writers_stop); i++) {
    uint64_t v = atomic_load(&learner_version);
    if (i % 2 && v > 0)
      v--;
    uint64_t x = X(id, v, i & 0xffffff);
    rc = chime_writer_set_version(w, v);
    if (rc == 0)
      rc = chime_writer_append(w, &x, sizeof(x), 1.0);
    if (rc == 0 && i % 32 == 31)
      rc = chime_writer_flush(w);
  }
  int crc = chime_writer_close(w);
  return (void *)(intptr_t)(rc ? rc : crc);
}

static void race(const char *table, chime_mode_t mode) {
  race_table = table;
  atomic_store(&learner_version, 1);
  atomic_store(&writers_stop, 0);
  pthread_t th[WRITERS];
  for (uintptr_t i = 0; i < WRITERS; i++)
    assert_int_equal(
        pthread_create(&th[i], NULL, versioned_writer_main, (void *)i), 0);
  chime_stream_t *s = open_union(table, mode, 1);
  uint64_t lv = 1, samples = 0;
  for (int b = 0; b < 300; b++) {
    chime_batch_t bt;
    int rc = chime_stream_next(s, &bt, 10000);
    if (rc != 0)
      fail_msg("next: %s: %s", chime_strerror(rc), chime_last_error());
    for (uint32_t j = 0; j < bt.count; j++) {
      if (bt.info[j].version + STALENESS < lv)
        fail_msg("'%s' batch %d: a sample of version %" PRIu64
                 " reached the learner at version %" PRIu64
                 " (max_staleness %d)",
                 table, b, bt.info[j].version, lv, STALENESS);
      assert_true(bt.info[j].staleness <= STALENESS);
      samples++;
    }
    assert_int_equal(chime_stream_release(s, &bt), 0);
    if (b % 3 == 2) { /* a bump every third batch */
      lv++;
      assert_int_equal(chime_stream_set_version(s, lv), 0);
      atomic_store(&learner_version, lv);
    }
  }
  atomic_store(&writers_stop, 1);
  for (int i = 0; i < WRITERS; i++) {
    void *ret;
    assert_int_equal(pthread_join(th[i], &ret), 0);
    assert_int_equal((intptr_t)ret, 0);
  }
  assert_true(samples >= 300);
  chime_stream_close(s);
  /* The writers spread over both shards, and both saw the bumps. */
  for (int k = 0; k < NSHARDS; k++) {
    chime_table_stats_t ts = shard_stats(k, table);
    assert_true(ts.inserts > 0);
    assert_true(ts.newest_version >= lv - 1);
  }
}

static void test_race_fifo_shm(void **state) {
  (void)state;
  race("q", CHIME_MODE_SHM);
}
static void test_race_uniform_stream(void **state) {
  (void)state;
  race("g", CHIME_MODE_STREAM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_client_set_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_drops_fifo_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_drops_fifo_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_drops_uniform_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_drops_uniform_stream, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_reopened_shard_gets_version, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_race_fifo_shm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stale_weighted_union, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_differing_table_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_race_uniform_stream, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
