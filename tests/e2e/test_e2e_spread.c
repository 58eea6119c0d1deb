/* Rate limiting stays per shard, and an even spread of inserts holds the
 * configured samples_per_insert over the union (issue 22, item 4;
 * docs/scaling.md "Rate limiting stays per shard"). Three real chimed
 * (shards 1, 2, 3) with the same table (samples_per_insert 2, a small
 * error_buffer, min_size); three writers on one sharded client, each on
 * its own thread (a sharded client spreads its writers: one a shard), insert
 * the same number of samples; one learner samples the union on another sharded
 * client. While they run and at the end, each shard's samples and inserts (its
 * Stats) keep the limiter's contract, so the union's do too:
 *
 *   The limiter (src/replay/limiter_ratio.c, docs/replay.md) lets a batch
 *   start while one more sample keeps  I x spi - S  at or above
 *   spi x min_size - error_buffer, and the batch then takes all its B
 *   items; it lets a request in while the table holds fewer than min_size
 *   items, or while one more item keeps  I x spi - S  at or below
 *   spi x min_size + error_buffer, and the request then puts all its R
 *   items in. With no item ever leaving (capacity above what is inserted),
 *   the table's size is I, nothing is sampled before I reaches min_size,
 *   and so at every moment
 *
 *     spi (I - min_size) - error_buffer - spi (R - 1)
 *         <= S <=  max(0, spi (I - min_size) + error_buffer + B - 1).
 *
 *   Summed over the 3 shards (I, S the union's), S - spi (I - 3 min_size)
 *   lies within [-3 (error_buffer + spi (R - 1)), 3 (error_buffer + B - 1)]:
 *   the overall ratio S / I is spi within that window over I.
 *
 * R is the writers' max_batch_samples (a request is one Insert message),
 * B the stream's batch_size. Each shard ends with exactly its writer's
 * samples (the spread was even), every writer finishes (the union's draws
 * kept every shard's limiter moving) and each shard was sampled. */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define NSHARDS 3
#define SPI 2.0          /* samples_per_insert */
#define ERROR_BUFFER 4.0 /* the smallest allowed is max(1, SPI) */
#define MIN_SIZE 16
#define BATCH 4         /* B */
#define REQUEST 4       /* R: samples per Insert message */
#define PER_WRITER 2000 /* each writer's samples */
#define CAPACITY 100000 /* above PER_WRITER: nothing ever leaves */

static chime__chimed_t d[NSHARDS];
static chime_client_t *direct[NSHARDS]; /* one-server clients, for Stats */
static char target[1024];

/* Shard k's config. */
static void config_of(int k, char *buf, size_t len) {
  /* Two tables alike: one per stream mode. */
  snprintf(buf, len,
           "{\"shard\": %d, \"tables\": [\n"
           " {\"name\": \"shm\", \"spec\": \"x:u64[]\", \"capacity\": %d, "
           "\"sampler\": \"uniform\", \"samples_per_insert\": %g, "
           "\"error_buffer\": %g, \"min_size\": %d},\n"
           " {\"name\": \"stream\", \"spec\": \"x:u64[]\", \"capacity\": "
           "%d, \"sampler\": \"uniform\", \"samples_per_insert\": %g, "
           "\"error_buffer\": %g, \"min_size\": %d}]}\n",
           k + 1, CAPACITY, SPI, ERROR_BUFFER, MIN_SIZE, CAPACITY, SPI,
           ERROR_BUFFER, MIN_SIZE);
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
  return chime__shards_stop(d, NSHARDS, direct, NULL, NULL) == 0 ? 0 : -1;
}

/* --- the limiter's contract --- */

/* The bounds on a shard's samples S given its inserts I. */
static double shard_low(double inserts) {
  return SPI * (inserts - MIN_SIZE) - ERROR_BUFFER - SPI * (REQUEST - 1);
}

static double shard_high(double inserts) {
  double h = SPI * (inserts - MIN_SIZE) + ERROR_BUFFER + (BATCH - 1);
  return h > 0 ? h : 0;
}

/* Table `table`'s inserts and samples on each shard, from one Stats call
 * per shard (each read under its table's lock: a consistent pair). */
static void shard_counts(const char *table, uint64_t ins[NSHARDS],
                         uint64_t smp[NSHARDS]) {
  for (int k = 0; k < NSHARDS; k++) {
    chime_stats_t *st = NULL;
    int rc = chime_client_stats(direct[k], &st);
    if (rc != 0)
      fail_msg("Stats of shard %d: %s: %s", k + 1, chime_strerror(rc),
               chime_last_error());
    int found = 0;
    for (uint32_t t = 0; t < st->ntables; t++)
      if (strcmp(st->tables[t].name, table) == 0) {
        ins[k] = st->tables[t].inserts;
        smp[k] = st->tables[t].samples;
        found = 1;
      }
    chime_stats_free(st);
    assert_true(found);
  }
}

/* Every shard's pair within its bounds, and the union's within the sum
 * of them. */
static void check_counts(const char *table, const char *when) {
  uint64_t ins[NSHARDS], smp[NSHARDS];
  double I = 0, S = 0, lo = 0, hi = 0;
  shard_counts(table, ins, smp);
  for (int k = 0; k < NSHARDS; k++) {
    double i = (double)ins[k], s = (double)smp[k];
    if (s < shard_low(i) || s > shard_high(i))
      fail_msg("%s: shard %d of '%s': %" PRIu64 " samples for %" PRIu64
               " inserts, outside the limiter's [%.0f, %.0f]",
               when, k + 1, table, smp[k], ins[k], shard_low(i), shard_high(i));
    I += i;
    S += s;
    lo += shard_low(i);
    hi += shard_high(i);
  }
  if (S < lo || S > hi)
    fail_msg("%s: the union of '%s': %.0f samples for %.0f inserts, outside "
             "[%.0f, %.0f]",
             when, table, S, I, lo, hi);
}

/* --- writers and the learner --- */

typedef struct {
  chime_writer_t *w;
  int rc;
  atomic_int done;
  char why[512];
  pthread_t th;
} writer_t;

static void *counting_writer_main(void *arg) {
  writer_t *wr = arg;
  wr->rc = 0;
  for (uint64_t i = 0; i < PER_WRITER && wr->rc == 0; i++)
    wr->rc = chime_writer_append(wr->w, &i, sizeof i, 1.0);
  if (wr->rc == 0)
    wr->rc = chime_writer_flush(wr->w);
  if (wr->rc != 0)
    snprintf(wr->why, sizeof wr->why, "%s", chime_last_error());
  atomic_store(&wr->done, 1);
  return NULL;
}

typedef struct {
  chime_stream_t *s;
  atomic_int stop;
  uint64_t batches;
  int rc;
  char why[512];
  pthread_t th;
} learner_t;

/* Reads the union until told to stop. A next() that times out is no
 * failure: near the end a drawn shard waits for inserts that may not come
 * (its limiter at the top of its window once its writer is done). */
static void *batch_counting_learner_main(void *arg) {
  learner_t *l = arg;
  l->rc = 0;
  while (!atomic_load(&l->stop)) {
    chime_batch_t b;
    int rc = chime_stream_next(l->s, &b, 50);
    if (rc == CHIME_ETIMEDOUT)
      continue;
    if (rc == 0 && b.count != BATCH)
      rc = CHIME_EPROTO;
    if (rc == 0)
      rc = chime_stream_release(l->s, &b);
    if (rc != 0) {
      l->rc = rc;
      snprintf(l->why, sizeof l->why, "%s", chime_last_error());
      return NULL;
    }
    l->batches++;
  }
  return NULL;
}

static void spread(const char *table, chime_mode_t mode) {
  chime_client_t *wc = NULL, *lc = NULL;
  assert_int_equal(chime_client_create(&wc, target, NULL), 0);
  assert_int_equal(chime_client_create(&lc, target, NULL), 0);
  assert_int_equal(chime_client_nshards(wc), NSHARDS);

  learner_t l;
  memset(&l, 0, sizeof l);
  atomic_init(&l.stop, 0);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.mode = mode;
  int rc = chime_stream_open(&l.s, lc, table, &so);
  if (rc != 0)
    fail_msg("open over shards: %s: %s", chime_strerror(rc),
             chime_last_error());
  assert_int_equal(chime_stream_mode(l.s), mode);
  assert_int_equal(pthread_create(&l.th, NULL, batch_counting_learner_main, &l),
                   0);

  writer_t w[NSHARDS];
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = REQUEST;
  for (int i = 0; i < NSHARDS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    atomic_init(&w[i].done, 0);
    rc = chime_writer_open(&w[i].w, wc, table, &wo);
    if (rc != 0)
      fail_msg("writer %d: %s: %s", i, chime_strerror(rc), chime_last_error());
  }
  for (int i = 0; i < NSHARDS; i++)
    assert_int_equal(
        pthread_create(&w[i].th, NULL, counting_writer_main, &w[i]), 0);

  /* The contract holds at every moment, not only at the end: look while
   * the writers run (each look is one Stats per shard). */
  int looks = 0, done;
  do {
    done = 1;
    for (int i = 0; i < NSHARDS; i++)
      done &= atomic_load(&w[i].done);
    check_counts(table, "while writing");
    looks++;
    if (!done)
      chime__sleep_ms(5);
  } while (!done);
  for (int i = 0; i < NSHARDS; i++) {
    pthread_join(w[i].th, NULL);
    if (w[i].rc != 0)
      fail_msg("writer %d: %s: %s", i, chime_strerror(w[i].rc), w[i].why);
    assert_int_equal(chime_writer_acked(w[i].w), PER_WRITER);
    assert_int_equal(chime_writer_close(w[i].w), 0);
  }
  atomic_store(&l.stop, 1);
  pthread_join(l.th, NULL);
  if (l.rc != 0)
    fail_msg("learner: %s: %s", chime_strerror(l.rc), l.why);
  chime_stream_close(l.s);

  /* The end: the streams are closed, nothing samples any more. */
  uint64_t ins[NSHARDS], smp[NSHARDS];
  double I = 0, S = 0;
  shard_counts(table, ins, smp);
  check_counts(table, "at the end");
  for (int k = 0; k < NSHARDS; k++) {
    /* One writer per shard: the client spread them evenly. */
    assert_int_equal(ins[k], PER_WRITER);
    I += (double)ins[k];
    S += (double)smp[k];
  }
  double lo = 0, hi = 0;
  for (int k = 0; k < NSHARDS; k++) {
    lo += shard_low((double)ins[k]);
    hi += shard_high((double)ins[k]);
  }
  print_message("'%s' (%s): %.0f samples / %.0f inserts = %.4f (the "
                "limiter's bounds: %.4f to %.4f; %d looks while writing, "
                "%" PRIu64 " batches read)\n",
                table, chime_mode_name(mode), S, I, S / I, lo / I, hi / I,
                looks, l.batches);
  chime_client_destroy(lc);
  chime_client_destroy(wc);
}

static void test_spread_shm(void **state) {
  (void)state;
  spread("shm", CHIME_MODE_SHM);
}

static void test_spread_stream(void **state) {
  (void)state;
  spread("stream", CHIME_MODE_STREAM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spread_shm),
      cmocka_unit_test(test_spread_stream),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
