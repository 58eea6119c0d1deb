/* A sharded client's stream samples the union of its shards as one table:
 * three real chimed (shards 1, 2, 3) holding 100, 1,000 and 10,000 items.
 * uniform (shm) and prioritized with skewed priorities (stream mode): the
 * batches' shards and the items drawn follow the union's distribution
 * (chi-square at p = 0.001, over shards per batch and over item buckets),
 * and every reported probability is the item's probability in the union
 * (relative 1e-9). fifo (shm, stream mode): sub-streams merged, every
 * item inserted while the stream waits delivered exactly once. A shard
 * empty at first is drawn once it fills, at the new union's
 * probabilities. One shard
 * killed with SIGKILL mid-stream: next() goes on with the others, and
 * their probabilities become the smaller union's; with every shard
 * killed, next() fails. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define NSHARDS 3
#define EXPONENT 0.8
#define BATCH 8
#define BATCHES 5000 /* draws for the chi-square tests */
#define BUCKETS 20
#define X(k, i) ((uint64_t)(k) << 32 | (uint64_t)(i)) /* shard k's item i */

static const uint32_t sizes[NSHARDS] = {100, 1000, 10000};
static chime__chimed_t d[NSHARDS];
static chime_client_t *direct[NSHARDS]; /* one-server clients, for inserts */
static int killed[NSHARDS];
static char target[1024];

/* Skewed: within a shard priorities repeat (1 + i % 37)^2; shard 1's are
 * scaled up so that the shards' masses are far from their sizes' shares. */
static double prio_of(uint32_t k, uint32_t i) {
  static const double scale[NSHARDS + 1] = {0, 60, 8, 1};
  double b = 1 + (double)(i % 37);
  return scale[k] * b * b;
}

/* --- chi-square's critical value: Q(df/2, x/2) = p, solved for x --- */

/* The regularized upper incomplete gamma function Q(a, x) (series below
 * a + 1, Lentz's continued fraction above). */
static double gamma_q(double a, double x) {
  if (x <= 0)
    return 1;
  double lead = exp(-x + a * log(x) - lgamma(a));
  if (x < a + 1) {
    double sum = 1 / a, term = 1 / a;
    for (int n = 1; n < 1000; n++) {
      term *= x / (a + n);
      sum += term;
      if (fabs(term) < fabs(sum) * 1e-15)
        break;
    }
    return 1 - sum * lead;
  }
  double b = x + 1 - a, c = 1 / 1e-300, dd = 1 / b, h = dd;
  for (int i = 1; i < 1000; i++) {
    double an = -i * (i - a);
    b += 2;
    dd = an * dd + b;
    if (fabs(dd) < 1e-300)
      dd = 1e-300;
    c = b + an / c;
    if (fabs(c) < 1e-300)
      c = 1e-300;
    dd = 1 / dd;
    double del = dd * c;
    h *= del;
    if (fabs(del - 1) < 1e-15)
      break;
  }
  return lead * h;
}

static double chi2_critical(int df, double p) {
  double lo = 0, hi = 10000;
  for (int i = 0; i < 200; i++) {
    double mid = (lo + hi) / 2;
    if (gamma_q(df / 2.0, mid / 2) > p)
      lo = mid;
    else
      hi = mid;
  }
  return (lo + hi) / 2;
}

static double chi2(const double *observed, const double *expect, int n) {
  double s = 0;
  for (int i = 0; i < n; i++)
    s += (observed[i] - expect[i]) * (observed[i] - expect[i]) / expect[i];
  return s;
}

/* The computation against printed tables (df 2: -2 ln 0.001; df 19). */
static void test_critical_values(void **state) {
  (void)state;
  assert_true(fabs(chi2_critical(2, 0.001) - 13.8155) < 1e-3);
  assert_true(fabs(chi2_critical(19, 0.001) - 43.8202) < 1e-3);
  assert_true(fabs(chi2_critical(1, 0.05) - 3.8415) < 1e-3);
}

/* --- fixture --- */

/* Shard k's config. */
static void config_of(int k, char *buf, size_t len) {
  snprintf(buf, len,
           "{\"shard\": %d, \"tables\": [\n"
           " {\"name\": \"uni\", \"spec\": \"x:u64[]\", \"capacity\": "
           "20000, \"sampler\": \"uniform\"},\n"
           " {\"name\": \"pri\", \"spec\": \"x:u64[]\", \"capacity\": "
           "20000, \"sampler\": \"prioritized\", \"priority_exponent\": "
           "%g},\n"
           " {\"name\": \"q\", \"spec\": \"x:u64[]\", \"capacity\": 2000, "
           "\"sampler\": \"fifo\"},\n"
           " {\"name\": \"qs\", \"spec\": \"x:u64[]\", \"capacity\": 2000, "
           "\"sampler\": \"fifo\"},\n"
           " {\"name\": \"grow\", \"spec\": \"x:u64[]\", \"capacity\": "
           "2000, \"sampler\": \"uniform\"},\n"
           " {\"name\": \"kill\", \"spec\": \"x:u64[]\", \"capacity\": "
           "2000, \"sampler\": \"uniform\"},\n"
           " {\"name\": \"solo\", \"spec\": \"x:u64[]\", \"capacity\": "
           "2000, \"sampler\": \"uniform\"}]}\n",
           k + 1, EXPONENT);
}

static int setup(void **state) {
  (void)state;
  return chime__shards_start(d, NSHARDS, config_of, direct, target,
                             sizeof target, NULL) == 0
             ? 0
             : -1;
}

static int teardown(void **state) {
  (void)state;
  return chime__shards_stop(d, NSHARDS, direct, killed, NULL) == 0 ? 0 : -1;
}

/* Writes shard k's items of `table`: x = X(k, i), priority prio_of. 0,
 * or the code that failed (no assert: a writer thread calls it too). */
static int write_shard_items_rc(int k, const char *table, uint32_t n) {
  chime_writer_t *w = NULL;
  int rc = chime_writer_open(&w, direct[k], table, NULL);
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    uint64_t x = X(k + 1, i);
    rc = chime_writer_append(w, &x, sizeof x, prio_of(k + 1, i));
  }
  int crc = chime_writer_close(w);
  return rc ? rc : crc;
}

/* The same, failing the test. */
static void write_shard_items(int k, const char *table, uint32_t n) {
  int rc = write_shard_items_rc(k, table, n);
  if (rc != 0)
    fail_msg("inserting into shard %d's '%s': %s: %s", k + 1, table,
             chime_strerror(rc), chime_last_error());
}

static chime_stream_t *open_union(chime_client_t *c, const char *table,
                                  chime_mode_t mode, uint32_t batch,
                                  uint32_t slots) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = batch;
  so.slots = slots;
  so.mode = mode;
  chime_stream_t *s = NULL;
  int rc = chime_stream_open(&s, c, table, &so);
  if (rc != 0)
    fail_msg("chime_stream_open on '%s' over shards: %s: %s", table,
             chime_strerror(rc), chime_last_error());
  return s;
}

/* --- the union's distribution --- */

/* Draws BATCHES batches from s, counting them per shard and the first
 * item of each per bucket, and the worst relative error of a reported
 * probability against weight / total. */
static void draw(chime_stream_t *s, const uint8_t *bucket_of,
                 double (*weight)(uint32_t, uint32_t), double total,
                 double *per_shard, double *per_bucket, double *worst) {
  for (int n = 0; n < BATCHES; n++) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("batch %d: %s: %s", n, chime_strerror(rc), chime_last_error());
    assert_int_equal(b.count, BATCH);
    const uint64_t *x = b.leaf[0].data;
    uint32_t k = (uint32_t)(x[0] >> 32);
    assert_true(k >= 1 && k <= NSHARDS);
    per_shard[k - 1]++;
    for (uint32_t j = 0; j < b.count; j++) {
      uint32_t kj = (uint32_t)(x[j] >> 32), i = (uint32_t)x[j];
      /* A batch comes whole from one shard, keys and all. */
      assert_int_equal(kj, k);
      assert_int_equal(chime_key_shard(b.info[j].key), k);
      assert_true(i < sizes[k - 1]);
      double want = weight(k, i) / total;
      double err = fabs(b.info[j].probability - want) / want;
      *worst = err > *worst ? err : *worst;
      if (j == 0) { /* the first items of batches are independent draws */
        uint32_t at = i + (k > 1 ? sizes[0] : 0) + (k > 2 ? sizes[1] : 0);
        per_bucket[bucket_of[at]]++;
      }
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
}

/* Draws BATCHES batches of `table` over the three shards and checks the
 * union's distribution and probabilities; weight(k, i) is an item's weight
 * in its sampler. */
static void check_union(const char *table, chime_mode_t mode,
                        double (*weight)(uint32_t, uint32_t)) {
  /* What one table holding every item would give. */
  double total = 0, shard_mass[NSHARDS] = {0};
  for (int k = 0; k < NSHARDS; k++) {
    write_shard_items(k, table, sizes[k]);
    for (uint32_t i = 0; i < sizes[k]; i++)
      shard_mass[k] += weight(k + 1, i);
    total += shard_mass[k];
  }
  /* Buckets of about equal union mass, items in (shard, index) order. */
  uint32_t nitems = sizes[0] + sizes[1] + sizes[2];
  uint8_t *bucket_of = calloc(nitems, 1);
  double bucket_p[BUCKETS] = {0}, acc = 0;
  assert_non_null(bucket_of);
  for (int k = 0, at = 0; k < NSHARDS; k++)
    for (uint32_t i = 0; i < sizes[k]; i++, at++) {
      double p = weight(k + 1, i) / total;
      int b = (int)((acc + p / 2) * BUCKETS);
      b = b < BUCKETS ? b : BUCKETS - 1;
      bucket_of[at] = (uint8_t)b;
      bucket_p[b] += p;
      acc += p;
    }

  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, target, NULL), 0);
  assert_int_equal(chime_client_nshards(c), NSHARDS);
  chime_stream_t *s = open_union(c, table, mode, BATCH, 8);
  if (mode != CHIME_MODE_AUTO)
    assert_int_equal(chime_stream_mode(s), mode);
  double want_shard[NSHARDS], want_bucket[BUCKETS];
  for (int k = 0; k < NSHARDS; k++)
    want_shard[k] = BATCHES * shard_mass[k] / total;
  for (int b = 0; b < BUCKETS; b++)
    want_bucket[b] = BATCHES * bucket_p[b];
  /* A chi-square check at p = 0.001 fails a correct union once in a
   * thousand samples; four checks a run would fail one run in 250. So a
   * sample that fails is followed by a fresh one, and the test fails only
   * when both do (a false failure once in 10^6 per check; a real bias,
   * such as Reverb's even spread over shards at chi2 1,862..66,859, fails
   * every sample). */
  int passed = 0, drawn = 0;
  for (int attempt = 0; attempt < 2 && !passed; attempt++, drawn += BATCHES) {
    double per_shard[NSHARDS] = {0}, per_bucket[BUCKETS] = {0};
    double worst = 0;
    draw(s, bucket_of, weight, total, per_shard, per_bucket, &worst);
    double xs = chi2(per_shard, want_shard, NSHARDS);
    double xb = chi2(per_bucket, want_bucket, BUCKETS);
    print_message("%s: shards %.0f/%.0f/%.0f (want %.1f/%.1f/%.1f), "
                  "chi2 %.2f (critical %.2f); buckets chi2 %.2f (critical "
                  "%.2f); worst relative probability error %.3g\n",
                  table, per_shard[0], per_shard[1], per_shard[2],
                  want_shard[0], want_shard[1], want_shard[2], xs,
                  chi2_critical(NSHARDS - 1, 0.001), xb,
                  chi2_critical(BUCKETS - 1, 0.001), worst);
    assert_true(worst < 1e-9);
    passed = xs < chi2_critical(NSHARDS - 1, 0.001) &&
             xb < chi2_critical(BUCKETS - 1, 0.001);
  }
  assert_true(passed);

  chime_stream_local_stats_t st;
  assert_int_equal(chime_stream_stats(s, &st), 0);
  assert_int_equal(st.batches, drawn);
  assert_int_equal(st.leases, 0);
  chime_stream_close(s);
  chime_client_destroy(c);
  free(bucket_of);
}

static double weight_one(uint32_t k, uint32_t i) {
  (void)k;
  (void)i;
  return 1;
}

static double weight_prio(uint32_t k, uint32_t i) {
  return pow(prio_of(k, i), EXPONENT);
}

static void test_uniform_union(void **state) {
  (void)state;
  check_union("uni", CHIME_MODE_AUTO, weight_one);
}

static void test_prioritized_union(void **state) {
  (void)state;
  check_union("pri", CHIME_MODE_STREAM, weight_prio);
}

/* --- fifo: merged --- */

static const uint32_t fifo_n[NSHARDS] = {300, 500, 700};

static int fifo_rc;

static void *fifo_writer(void *arg) {
  for (int k = 0; k < NSHARDS && fifo_rc == 0; k++)
    fifo_rc = write_shard_items_rc(k, arg, fifo_n[k]);
  return NULL;
}

/* The stream opens on empty tables; items arrive while it waits. */
static void fifo_exactly_once(const char *table, chime_mode_t mode) {
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, target, NULL), 0);
  chime_stream_t *s = open_union(c, table, mode, 10, 4);
  assert_int_equal(chime_stream_mode(s), mode);
  uint32_t total = fifo_n[0] + fifo_n[1] + fifo_n[2];
  uint8_t *seen[NSHARDS];
  for (int k = 0; k < NSHARDS; k++)
    assert_non_null(seen[k] = calloc(fifo_n[k], 1));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, fifo_writer, (void *)table), 0);
  uint32_t got = 0, from[NSHARDS] = {0};
  while (got < total) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("after %u of %u items: %s: %s", got, total, chime_strerror(rc),
               chime_last_error());
    const uint64_t *x = b.leaf[0].data;
    for (uint32_t j = 0; j < b.count; j++) {
      uint32_t k = (uint32_t)(x[j] >> 32), i = (uint32_t)x[j];
      assert_true(k >= 1 && k <= NSHARDS && i < fifo_n[k - 1]);
      assert_int_equal(chime_key_shard(b.info[j].key), k);
      if (seen[k - 1][i]++)
        fail_msg("shard %u's item %u delivered twice", k, i);
      from[k - 1]++;
      got++;
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(fifo_rc, 0);
  for (int k = 0; k < NSHARDS; k++)
    assert_int_equal(from[k], fifo_n[k]);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 300), CHIME_ETIMEDOUT);
  chime_stream_close(s);
  chime_client_destroy(c);
  for (int k = 0; k < NSHARDS; k++)
    free(seen[k]);
}

static void test_fifo_shm(void **state) {
  (void)state;
  fifo_exactly_once("q", CHIME_MODE_SHM);
}

/* Sub-streams whose own threads receive while the union waits on any. */
static void test_fifo_stream(void **state) {
  (void)state;
  fifo_exactly_once("qs", CHIME_MODE_STREAM);
}

/* --- masses that change --- */

static uint32_t shard_of(const chime_batch_t *b) {
  return (uint32_t)(((const uint64_t *)b->leaf[0].data)[0] >> 32);
}

static int prob_is(const chime_batch_t *b, double want) {
  for (uint32_t j = 0; j < b->count; j++)
    if (!(fabs(b->info[j].probability - want) < 1e-9 * want))
      return 0;
  return 1;
}

/* Shard 3's table is empty when the stream opens, so it is never drawn;
 * once it holds 400 items (the others 200 each), GetInfo's masses, asked
 * for while next() goes on, bring it in: its batches come, and every
 * probability settles at 1/800. */
static void test_shard_fills_later(void **state) {
  (void)state;
  write_shard_items(0, "grow", 200);
  write_shard_items(1, "grow", 200);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, target, NULL), 0);
  chime_stream_t *s = open_union(c, "grow", CHIME_MODE_AUTO, 4, 4);
  chime_batch_t b;
  for (int n = 0; n < 50; n++) {
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    assert_true(shard_of(&b) != 3);
    assert_true(prob_is(&b, 1.0 / 400));
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  write_shard_items(2, "grow", 400);
  /* Until shard 3's first batch drawn with its whole mass: batches it
   * sampled while it filled may come first, their probabilities the
   * smaller table's. */
  int64_t deadline = chime__now_ms() + 10000;
  for (;;) {
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    int settled = shard_of(&b) == 3 && prob_is(&b, 1.0 / 800);
    assert_int_equal(chime_stream_release(s, &b), 0);
    if (settled)
      break;
    if (chime__now_ms() > deadline)
      fail_msg("no batch of shard 3 at the union's probability 1/800 in "
               "10 s after it filled");
  }
  uint32_t from3 = 0;
  for (int n = 0; n < 300; n++) {
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    from3 += shard_of(&b) == 3;
    if (!prob_is(&b, 1.0 / 800))
      fail_msg("batch %d of shard %u: probability %.17g, not 1/800", n,
               shard_of(&b), b.info[0].probability);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  assert_true(from3 > 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* Whether b's sample info lies in its ring slot, right after its leaf
 * (docs/ring.md: a slot's leaves, then its info), not in a copy. */
static int in_slot(const chime_batch_t *b) {
  uintptr_t data = (uintptr_t)b->leaf[0].data, info = (uintptr_t)b->info;
  return info > data && info - data < 4096;
}

/* Only shard 1 holds items of 'solo': each batch is drawn from it with
 * share 1, its probabilities are the shard's own (1/300), and the union
 * lends the sub-stream's info as it is (no copy). Then shard 2 fills as
 * much: batches lent before (the shard's info) and after (rewritten
 * copies, 1/600) are held together and all give back, in any order, and
 * once only. */
static void test_one_shard_has_all(void **state) {
  (void)state;
  write_shard_items(0, "solo", 300);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, target, NULL), 0);
  chime_stream_t *s = open_union(c, "solo", CHIME_MODE_AUTO, 4, 4);
  chime_batch_t held[3];
  for (int round = 0; round < 20; round++) {
    for (int h = 0; h < 3; h++) {
      assert_int_equal(chime_stream_next(s, &held[h], 20000), 0);
      assert_int_equal(shard_of(&held[h]), 1);
      assert_true(prob_is(&held[h], 1.0 / 300));
      assert_true(in_slot(&held[h]));
    }
    for (int h = 2; h >= 0; h--)
      assert_int_equal(chime_stream_release(s, &held[h]), 0);
  }
  assert_int_equal(chime_stream_next(s, &held[0], 20000), 0);
  assert_int_equal(chime_stream_next(s, &held[1], 20000), 0);
  assert_true(prob_is(&held[0], 1.0 / 300) && prob_is(&held[1], 1.0 / 300));
  write_shard_items(1, "solo", 300);
  int64_t deadline = chime__now_ms() + 10000;
  for (;;) {
    assert_int_equal(chime_stream_next(s, &held[2], 20000), 0);
    if (prob_is(&held[2], 1.0 / 600))
      break;
    assert_int_equal(chime_stream_release(s, &held[2]), 0);
    if (chime__now_ms() > deadline)
      fail_msg("no batch at the two shards' probability 1/600 in 10 s");
  }
  assert_int_equal(chime_stream_release(s, &held[0]), 0);
  assert_int_equal(chime_stream_release(s, &held[2]), 0);
  assert_int_equal(chime_stream_release(s, &held[1]), 0);
  assert_int_equal(chime_stream_release(s, &held[0]), CHIME_EINVAL);
  assert_int_equal(chime_stream_release(s, &held[2]), CHIME_EINVAL);
  chime_stream_local_stats_t st;
  assert_int_equal(chime_stream_stats(s, &st), 0);
  assert_int_equal(st.leases, 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* --- a shard killed --- */

static void test_shard_killed(void **state) {
  (void)state;
  for (int k = 0; k < NSHARDS; k++)
    write_shard_items(k, "kill", 1000);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, target, NULL), 0);
  chime_stream_t *s = open_union(c, "kill", CHIME_MODE_AUTO, 4, 4);
  uint32_t from[NSHARDS] = {0};
  chime_batch_t b;
  for (int n = 0; n < 60; n++) {
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    from[(((const uint64_t *)b.leaf[0].data)[0] >> 32) - 1]++;
    assert_true(fabs(b.info[0].probability - 1.0 / 3000) < 1e-9 / 3000);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  for (int k = 0; k < NSHARDS; k++)
    assert_true(from[k] > 0);

  chime__proc_kill(&d[1].proc);
  killed[1] = 1;
  /* Batches shard 2 had sampled before it died and this process had
   * already received may still come; then none. */
  uint32_t late = 0, after = 300;
  for (uint32_t n = 0; n < after; n++) {
    int rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("batch %u after the kill: %s: %s", n, chime_strerror(rc),
               chime_last_error());
    uint32_t k = (uint32_t)(((const uint64_t *)b.leaf[0].data)[0] >> 32);
    if (k == 2) {
      late++;
      assert_true(n < after - 100);
    }
    if (n >= after - 100) /* the union is shards 1 and 3 now */
      assert_true(fabs(b.info[0].probability - 1.0 / 2000) < 1e-9 / 2000);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  assert_true(late <= 4); /* slots: all its ring could hold */

  /* Every shard gone: next() fails (once what the rings held is taken),
   * rather than waiting. */
  chime__proc_kill(&d[0].proc);
  chime__proc_kill(&d[2].proc);
  killed[0] = killed[2] = 1;
  int rc = 0;
  for (int n = 0; n < 2 * 4 && rc == 0; n++) {
    rc = chime_stream_next(s, &b, 20000);
    if (rc == 0)
      assert_int_equal(chime_stream_release(s, &b), 0);
  }
  if (rc != CHIME_EDISCONNECTED)
    fail_msg("next() with every shard gone: %s: %s", chime_strerror(rc),
             chime_last_error());
  chime_stream_close(s);
  chime_client_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_critical_values),
      cmocka_unit_test(test_uniform_union),
      cmocka_unit_test(test_prioritized_union),
      cmocka_unit_test(test_fifo_shm),
      cmocka_unit_test(test_fifo_stream),
      cmocka_unit_test(test_shard_fills_later),
      cmocka_unit_test(test_one_shard_has_all),
      cmocka_unit_test(test_shard_killed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
