/* The client library against the real chimed: writer acks and local size
 * errors, auto fallback when the server looks remote, leases and credits
 * (slots - 1 held, release in any order, EBUSY), and how a stream ends: a
 * graceful stop gives CHIME_ESHUTDOWN, a killed server CHIME_EDISCONNECTED,
 * and batches already held stay readable in both modes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chime/chime.h"
#include "chime/ring.h"
#include "harness.h"
#include "asserts.h"
#include "streams.h"
#include "writes.h"
#include "pattern.h"

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define SAMPLE_BYTES 264

/* uniform: samples with replacement, so tests need not count items. */
static const char *config =
    "{\"tables\": [{\"name\": \"u\", \"spec\": \"" SPEC "\", \"capacity\": "
    "4096, \"min_size\": 1, \"sampler\": \"uniform\"}, {\"name\": \"f\", "
    "\"spec\": \"" SPEC "\", \"capacity\": 4096, \"min_size\": 1, "
    "\"sampler\": \"fifo\"}, {\"name\": \"small\", \"spec\": \"" SPEC
    "\", \"capacity\": 40, \"min_size\": 1, \"sampler\": \"fifo\"}]}\n";

static chime_spec_t spec;

static void start(chime__chimed_t *d, chime_client_t **c) {
  assert_int_equal(chime__chimed_start_client(d, config, c), 0);
}

/* Pattern samples seed in messages of 16, several in flight. */
static void write_in_messages(chime_client_t *c, const char *table,
                              uint64_t seed, uint64_t n) {
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 16; /* several messages in flight */
  assert_int_equal(chime__write_pattern(c, table, &spec, seed, n, &o), 0);
}

/* Consumes `batches` batches of 8 from table "small" (see test below). */
typedef struct {
  chime_client_t *c;
  int batches;
  int rc;
} drain_t;

static void *drain_main(void *arg) {
  drain_t *d = arg;
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.batch_size = 8;
  o.mode = CHIME_MODE_SHM;
  chime_stream_t *s = NULL;
  d->rc = chime_stream_open(&s, d->c, "small", &o);
  for (int i = 0; i < d->batches && d->rc == 0; i++) {
    chime_batch_t b;
    d->rc = chime_stream_next(s, &b, 20000);
    if (d->rc == 0)
      d->rc = chime_stream_release(s, &b);
  }
  chime_stream_close(s);
  return NULL;
}

/* A fifo table smaller than the writer's default request (256 samples): the
 * writer caps its requests at the capacity, so every sample goes in while a
 * learner drains the table, instead of a request the server must refuse. */
static void test_writer_small_fifo(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  drain_t dr = {c, 12, -1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, drain_main, &dr), 0);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "small", NULL), 0);
  uint8_t sample[SAMPLE_BYTES];
  for (uint64_t i = 0; i < 96; i++) {
    chime__pattern_fill(&spec, chime__pattern_id(3, i), sample);
    assert_int_equal(chime_writer_append(w, sample, sizeof(sample), 1.0), 0);
  }
  int rc = chime_writer_flush(w);
  if (rc)
    fprintf(stderr, "flush: %s\n", chime_last_error());
  assert_int_equal(rc, 0);
  assert_int_equal(chime_writer_acked(w), 96);
  assert_int_equal(chime_writer_close(w), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_int_equal(dr.rc, 0);
  chime__stop_clean(&d, c);
}

/* Batches of 8 on a ring of exactly slots, in stream mode too (the least
 * max_inflight_bytes: these tests count on the ring's slots). */
static chime_stream_t *open_slot_bound(chime_client_t *c, const char *table,
                                       chime_mode_t mode, uint32_t slots) {
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.max_inflight_bytes = 1;
  return chime__open_stream(c, table, mode, 8, slots, &o);
}

static void verify(const chime_batch_t *b) {
  char err[256];
  int rc = chime__pattern_verify(b, NULL, err, sizeof(err));
  if (rc)
    fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
}

static int setup(void **state) {
  (void)state;
  return chime_spec_parse(&spec, SPEC) == 0 ? 0 : -1;
}

static int teardown_each(void **state) {
  (void)state;
  unsetenv("CHIME_BOOT_ID");
  chime__harness_kill_all();
  return 0;
}

static void test_writer(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 7, 100);

  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "nope", NULL), CHIME_ENOTFOUND);
  assert_null(w);
  assert_non_null(strstr(chime_last_error(), "'nope'"));

  assert_int_equal(chime_writer_open(&w, c, "u", NULL), 0);
  uint8_t sample[SAMPLE_BYTES + 8];
  chime__pattern_fill(&spec, chime__pattern_id(7, 100), sample);
  /* Too short: the leaf that does not fit is named; nothing is sent. */
  assert_int_equal(chime_writer_append(w, sample, 260, 1.0), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "leaf 'reward'"));
  assert_non_null(strstr(chime_last_error(), "260"));
  assert_int_equal(chime_writer_append(w, sample, SAMPLE_BYTES + 8, 1.0),
                   CHIME_EINVAL);
  /* The writer is still usable, with priorities. */
  assert_int_equal(chime_writer_append(w, sample, SAMPLE_BYTES, 2.5), 0);
  assert_int_equal(chime_writer_close(w), 0);

  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(c, &info), 0);
  assert_int_equal(info->ntables, 3);
  assert_string_equal(info->tables[0].name, "u");
  assert_int_equal(info->tables[0].size, 101);
  assert_int_equal(info->tables[0].sample_bytes, SAMPLE_BYTES);
  assert_int_equal(info->tables[0].spec.nleaves, 3);
  chime_server_info_free(info);
  chime__stop_clean(&d, c);
}

static void test_auto_fallback(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 1, 64);

  chime_stream_t *s = open_slot_bound(c, "u", CHIME_MODE_AUTO, 4);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_SHM);
  assert_null(chime_stream_fallback_reason(s));
  chime_stream_close(s);

  setenv("CHIME_BOOT_ID", "another-host", 1);
  s = open_slot_bound(c, "u", CHIME_MODE_AUTO, 4);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  assert_non_null(chime_stream_fallback_reason(s));
  assert_non_null(strstr(chime_stream_fallback_reason(s), "boot_id differs"));
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  verify(&b);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);

  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.batch_size = 8;
  o.mode = CHIME_MODE_SHM;
  s = NULL;
  assert_int_equal(chime_stream_open(&s, c, "u", &o), CHIME_ENOTSUP);
  assert_null(s);
  assert_non_null(strstr(chime_last_error(), "boot_id differs"));
  unsetenv("CHIME_BOOT_ID");
  chime__stop_clean(&d, c);
}

/* Holds slots - 1 batches, releases them in a scrambled order, and checks
 * that held batches never change underneath (the producer must not write a
 * leased slot; in stream mode, credits must not outrun the local ring, and
 * credits the client gathers must not leave a learner holding batches
 * waiting for one the server has no credit for). */
static void leases(chime_client_t *c, chime_mode_t mode, uint32_t slots) {
  enum { MAX_HOLD = 15 };
  const int HOLD = (int)slots - 1;
  assert_true(HOLD >= 1 && HOLD <= MAX_HOLD);
  chime_stream_t *s = open_slot_bound(c, "u", mode, slots);
  chime_batch_t held[MAX_HOLD];
  uint64_t last_seq = 0;
  for (int round = 0; round < 40; round++) {
    for (int i = 0; i < HOLD; i++) {
      assert_int_equal(chime_stream_next(s, &held[i], 10000), 0);
      assert_true(round + i == 0 || held[i].seq > last_seq);
      last_seq = held[i].seq;
      assert_int_equal(held[i].count, 8);
      assert_int_equal(held[i].nleaves, 3);
      assert_int_equal(held[i].leaf[0].ndim, 2);
      assert_int_equal(held[i].leaf[0].shape[0], 8);
      assert_int_equal(held[i].leaf[0].shape[1], 64);
      assert_int_equal(held[i].leaf[0].dtype, CHIME_DTYPE_F32);
      assert_int_equal(held[i].leaf[1].ndim, 1);
      assert_int_equal(held[i].leaf[2].bytes, 8 * 4);
      assert_non_null(held[i].info);
      assert_true(held[i].info[0].key >= 1);
    }
    chime_batch_t extra;
    assert_int_equal(chime_stream_next(s, &extra, 0), CHIME_EBUSY);
    chime_stream_local_stats_t st;
    assert_int_equal(chime_stream_stats(s, &st), 0);
    assert_int_equal(st.mode, mode);
    assert_int_equal(st.batches, (uint64_t)(round + 1) * HOLD);
    assert_int_equal(st.bytes, st.batches * 8 * SAMPLE_BYTES);
    assert_int_equal(st.leases, HOLD);
    if (mode == CHIME_MODE_STREAM) {
      /* prefetch (slots - 1) plus one credit per release so far */
      assert_int_equal(st.credits, HOLD + (uint64_t)round * HOLD);
      assert_true(st.received_bytes >= st.batches * 8 * SAMPLE_BYTES);
    }
    for (int i = 0; i < HOLD; i++)
      verify(&held[i]);
    /* HOLD - 1 is coprime with HOLD: a permutation, shifted each round. */
    for (int i = 0; i < HOLD; i++)
      assert_int_equal(
          chime_stream_release(s, &held[(round + (HOLD - 1) * i) % HOLD]), 0);
  }
  chime_stream_close(s);
}

static void test_leases_shm(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 2, 64);
  leases(c, CHIME_MODE_SHM, 4);
  chime__stop_clean(&d, c);
}

static void test_leases_stream(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 3, 64);
  leases(c, CHIME_MODE_STREAM, 4);
  /* 8 slots: the client gathers releases into Credits of 3. */
  leases(c, CHIME_MODE_STREAM, 8);
  chime__stop_clean(&d, c);
}

/* Release finds a batch's slot without being told it, and refuses a batch
 * it did not lend now: given back twice (also once its slot lends the next
 * batch, which stays held), forged, or another stream's. Nothing is
 * released by a refusal. */
static void expect_refused(chime_stream_t *s, const chime_batch_t *b) {
  assert_int_equal(chime_stream_release(s, b), CHIME_EINVAL);
  if (strstr(chime_last_error(), "not lent by this stream") == NULL)
    fail_msg("detail '%s'", chime_last_error());
}

static void release_checks(chime_client_t *c, chime_mode_t mode) {
  chime_stream_t *s = open_slot_bound(c, "u", mode, 4);
  chime_stream_t *other = open_slot_bound(c, "u", mode, 4);
  chime_batch_t a, b, o;
  assert_int_equal(chime_stream_next(s, &a, 10000), 0);
  assert_int_equal(chime_stream_release(s, &a), 0);
  expect_refused(s, &a);
  /* The next batch lent from a's slot (its info where a's was). */
  int found = 0;
  for (int i = 0; i < 64 && !found; i++) {
    assert_int_equal(chime_stream_next(s, &b, 10000), 0);
    found = b.info == a.info;
    if (!found)
      assert_int_equal(chime_stream_release(s, &b), 0);
  }
  assert_true(found);
  expect_refused(s, &a); /* would give back b */
  chime_stream_local_stats_t st;
  assert_int_equal(chime_stream_stats(s, &st), 0);
  assert_int_equal(st.leases, 1);
  chime_batch_t forged = b;
  forged.info = (const chime_sample_info_t *)((const char *)b.info + 8);
  expect_refused(s, &forged);
  forged = b;
  forged.info = NULL;
  expect_refused(s, &forged);
  forged = b;
  forged.seq++;
  expect_refused(s, &forged);
  assert_int_equal(chime_stream_next(other, &o, 10000), 0);
  expect_refused(s, &o);
  assert_int_equal(chime_stream_stats(s, &st), 0);
  assert_int_equal(st.leases, 1);
  verify(&b); /* still lent: its data is b's */
  assert_int_equal(chime_stream_release(s, &b), 0);
  assert_int_equal(chime_stream_release(other, &o), 0);
  chime_stream_close(other);
  chime_stream_close(s);
}

static void test_release_checks_shm(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 4, 64);
  release_checks(c, CHIME_MODE_SHM);
  chime__stop_clean(&d, c);
}

static void test_release_checks_stream(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 5, 64);
  release_checks(c, CHIME_MODE_STREAM);
  chime__stop_clean(&d, c);
}

/* Stream mode: a learner polls the call itself in next(), and the stream's
 * thread takes over once it stays away (computing): the batches its
 * credits allow arrive meanwhile, while the learner is not in next(), and
 * next() then hands them out. */
static void test_stream_fills_while_learner_away(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 6, 64);
  chime_stream_t *s = open_slot_bound(c, "u", CHIME_MODE_STREAM, 8);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  verify(&b);
  assert_int_equal(chime_stream_release(s, &b), 0);
  /* 7 batches lent (slots - 1); one taken, its credit not yet sent, so
   * the server sends 7 and no more. received_bytes counts each batch's
   * payload: its leaf arrays, padded, and its sample info, more than its
   * leaf bytes (with 7 batches of leaf bytes as the mark, 6 batches passed
   * it and next() found 5 of 6 while the 7th was on its way). Bytes count
   * as they arrive, a moment before their batch is published: next() is
   * given time for that, not for the batches to come. */
  chime_ring_layout_t l;
  assert_int_equal(chime_ring_layout_compute(&l, &spec, 8, 8), 0);
  uint64_t want = 7 * (l.info_offset + 8 * sizeof(chime_sample_info_t));
  chime_stream_local_stats_t st;
  int64_t end = chime__now_ms() + 10000;
  do {
    usleep(100); /* the learner away: only the stream's thread polls */
    assert_int_equal(chime_stream_stats(s, &st), 0);
  } while (st.received_bytes < want && chime__now_ms() < end);
  assert_true(st.received_bytes >= want);
  assert_int_equal(st.batches, 1);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(chime_stream_next(s, &b, 10000), 0);
    verify(&b);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* Stream mode: a learner that only looks (timeout 0), often enough that
 * the stream's thread never takes over, is still served: each look takes
 * what the call completed meanwhile. */
static void test_stream_learner_only_looks(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 7, 64);
  chime_stream_t *s = open_slot_bound(c, "u", CHIME_MODE_STREAM, 4);
  int got = 0;
  int64_t end = chime__now_ms() + 20000;
  while (got < 50 && chime__now_ms() < end) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 0);
    if (rc == CHIME_ETIMEDOUT) {
      usleep(500);
      continue;
    }
    assert_int_equal(rc, 0);
    verify(&b);
    assert_int_equal(chime_stream_release(s, &b), 0);
    got++;
  }
  assert_int_equal(got, 50);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* Opens one stream per mode and takes one batch from each. */
static void open_both(chime_client_t *c, chime_stream_t *s[2],
                      chime_batch_t b[2]) {
  s[0] = open_slot_bound(c, "u", CHIME_MODE_SHM, 4);
  s[1] = open_slot_bound(c, "u", CHIME_MODE_STREAM, 4);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(chime_stream_next(s[i], &b[i], 10000), 0);
    verify(&b[i]);
  }
}

/* Uniform sampling never runs dry: consume until the stream ends, for at
 * most a minute. */
static int next_until_error(chime_stream_t *s) {
  int64_t end = chime__now_ms() + 60000;
  while (chime__now_ms() < end) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 20000);
    if (rc)
      return rc;
    if ((rc = chime_stream_release(s, &b)) != 0)
      return rc;
  }
  return 0;
}

static void test_graceful_stop(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 4, 64);
  chime_stream_t *s[2];
  chime_batch_t b[2];
  open_both(c, s, b);
  chime_writer_t *live = NULL;
  uint8_t sample[SAMPLE_BYTES];
  chime__pattern_fill(&spec, chime__pattern_id(4, 64), sample);
  assert_int_equal(chime_writer_open(&live, c, "u", NULL), 0);
  assert_int_equal(chime_writer_append(live, sample, sizeof(sample), 1.0), 0);
  assert_int_equal(chime_writer_flush(live), 0);
  assert_int_equal(kill(d.proc.pid, SIGTERM), 0);
  /* The open Insert call ends with "shutting down": the writer says so. */
  int rc = 0;
  int64_t end = chime__now_ms() + 60000;
  while (rc == 0 && chime__now_ms() < end) {
    rc = chime_writer_append(live, sample, sizeof(sample), 1.0);
    if (rc == 0)
      rc = chime_writer_flush(live);
  }
  assert_int_equal(rc, CHIME_ESHUTDOWN);
  assert_non_null(strstr(chime_last_error(), "shutting down"));
  assert_int_equal(chime_writer_close(live), CHIME_ESHUTDOWN);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(next_until_error(s[i]), CHIME_ESHUTDOWN);
    verify(&b[i]); /* still readable */
    assert_non_null(strstr(chime_last_error(), "shutting down"));
    chime_stream_close(s[i]);
  }
  /* A writer to a server that is gone fails with a clear error. */
  chime_writer_t *w = NULL;
  int st = -1;
  assert_int_equal(chime__proc_wait(&d.proc, 20000, &st), 0);
  assert_int_not_equal(chime_writer_open(&w, c, "u", NULL), 0);
  assert_null(w);
  chime_client_destroy(c);
}

static void test_server_killed(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "u", 5, 64);
  chime_stream_t *s[2];
  chime_batch_t b[2];
  open_both(c, s, b);
  chime__proc_kill(&d.proc);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(next_until_error(s[i]), CHIME_EDISCONNECTED);
    verify(&b[i]); /* the mapping outlives the server */
    chime_stream_close(s[i]);
  }
  /* Unary calls say so too (the connection lost, then refused), not the
   * CHIME_EUNAVAILABLE of a server that was never there. */
  for (int i = 0; i < 2; i++) {
    chime_server_info_t *info = NULL;
    assert_int_equal(chime_client_info(c, &info), CHIME_EDISCONNECTED);
    assert_non_null(strstr(chime_last_error(), "server is gone"));
  }
  chime_client_destroy(c);
}

/* fifo: what two writers insert reaches the streams exactly once. */
/* Reads `batches` batches of 8 from a fifo stream: every id is one of
 * seeds seed0 and seed0 + 1 with an index under per_seed, its bytes are its
 * pattern, and none comes twice. */
static void read_each_once(chime_stream_t *s, uint64_t seed0, uint64_t per_seed,
                           int batches) {
  uint8_t *seen = calloc(2 * per_seed, 1);
  assert_non_null(seen);
  for (int n = 0; n < batches; n++) {
    chime_batch_t b;
    uint64_t ids[8];
    char err[256];
    assert_int_equal(chime_stream_next(s, &b, 10000), 0);
    assert_int_equal(chime__pattern_verify(&b, ids, err, sizeof(err)), 0);
    for (int i = 0; i < 8; i++) {
      uint64_t seed = ids[i] >> 40, idx = ids[i] & CHIME__PATTERN_MAX_INDEX;
      assert_true(seed == seed0 || seed == seed0 + 1);
      assert_true(idx < per_seed);
      assert_int_equal(seen[(seed - seed0) * per_seed + idx]++, 0);
      assert_true(b.info[i].probability > 0);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  free(seen);
}

static void test_fifo_exactly_once(void **state) {
  (void)state;
  enum { N = 400 };
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "f", 8, N / 2);
  write_in_messages(c, "f", 9, N / 2);
  chime_stream_t *s = open_slot_bound(c, "f", CHIME_MODE_STREAM, 4);
  read_each_once(s, 8, N / 2, N / 8);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 200), CHIME_ETIMEDOUT);
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(c, &st), 0);
  assert_int_equal(st->nstreams, 1);
  assert_int_equal(st->streams[0].mode, CHIME_MODE_STREAM);
  assert_string_equal(st->streams[0].table, "f");
  chime_stats_free(st);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

static uint64_t table_size(chime_client_t *c, uint32_t table) {
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(c, &info), 0);
  assert_true(table < info->ntables);
  uint64_t n = info->tables[table].size;
  chime_server_info_free(info);
  return n;
}

/* When chime_stream_close() returns, every item of a fifo table that its
 * learner did not release is back in the table (the server ends the call
 * only after giving them back), and the batch it released is not: a batch
 * held, the batches sampled and never taken, all there again at once. */
static void close_gives_back(chime_mode_t mode) {
  enum { N = 40 };
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "f", 21, N);
  for (int round = 0; round < 3; round++) {
    chime_stream_t *s = open_slot_bound(c, "f", mode, 4);
    chime_batch_t held, done;
    assert_int_equal(chime_stream_next(s, &held, 20000), 0);
    assert_int_equal(chime_stream_next(s, &done, 20000), 0);
    assert_int_equal(chime_stream_release(s, &done), 0);
    chime_stream_close(s);
    assert_int_equal(table_size(c, 1), N - 8 * (uint64_t)(round + 1));
  }
  chime__stop_clean(&d, c);
}

static void test_close_gives_back_shm(void **state) {
  (void)state;
  close_gives_back(CHIME_MODE_SHM);
}

static void test_close_gives_back_stream(void **state) {
  (void)state;
  close_gives_back(CHIME_MODE_STREAM);
}

/* Insert calls complete on a queue of their own, whose thread waits in
 * gRPC only while an Insert call is open (server/service.c): a writer that
 * comes after that thread went back to waiting for one is served, and so
 * are two writers open at once beside a stream. A thread that missed its
 * wake-up would leave the writer without acks (CHIME_ETIMEDOUT). */
static void test_insert_queue_wakes(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  write_in_messages(c, "f", 1, 50);
  usleep(400 * 1000); /* past the thread's 100 ms linger */
  write_in_messages(c, "f", 2, 50);
  assert_int_equal(table_size(c, 1), 100);

  chime_stream_t *s = open_slot_bound(c, "f", CHIME_MODE_STREAM, 4);
  chime_writer_t *w[2] = {NULL, NULL};
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 8;
  o.timeout_ms = 10000;
  for (int k = 0; k < 2; k++)
    assert_int_equal(chime_writer_open(&w[k], c, "u", &o), 0);
  uint8_t sample[SAMPLE_BYTES];
  for (uint64_t i = 0; i < 100; i++) {
    for (int k = 0; k < 2; k++) {
      chime__pattern_fill(&spec, chime__pattern_id(3 + (uint64_t)k, i), sample);
      assert_int_equal(chime_writer_append(w[k], sample, sizeof(sample), 1.0),
                       0);
    }
  }
  for (int k = 0; k < 2; k++) {
    assert_int_equal(chime_writer_flush(w[k]), 0);
    assert_int_equal(chime_writer_acked(w[k]), 100);
    assert_int_equal(chime_writer_close(w[k]), 0);
  }
  assert_int_equal(table_size(c, 0), 200);
  /* The stream read the fifo table's items meanwhile, each once. */
  read_each_once(s, 1, 50, 100 / 8);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* chime_writer_extend: pattern samples split into columns go in as the
 * appends would (fifo order, every byte, priorities), across batches of
 * the writer's message size; a bad priority anywhere queues nothing; a
 * missing column is refused. */
static void test_writer_extend(void **state) {
  (void)state;
  enum { N = 1000 };
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c);
  static uint8_t rows[N][SAMPLE_BYTES];
  static float obs[N][64];
  static int32_t act[N];
  static float rew[N];
  static double prio[N];
  for (uint32_t i = 0; i < N; i++) {
    chime__pattern_fill(&spec, chime__pattern_id(5, i), rows[i]);
    memcpy(obs[i], rows[i], 256);
    memcpy(&act[i], rows[i] + 256, 4);
    memcpy(&rew[i], rows[i] + 260, 4);
    prio[i] = 1.0 + i % 3;
  }
  const void *cols[3] = {obs, act, rew};
  chime_writer_t *w = NULL;
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 64; /* N spans many messages */
  assert_int_equal(chime_writer_open(&w, c, "f", &o), 0);
  uint32_t taken = 99;
  prio[500] = -1.0;
  assert_int_equal(chime_writer_extend(w, cols, prio, N, &taken), CHIME_EINVAL);
  assert_int_equal(taken, 0);
  assert_non_null(strstr(chime_last_error(), "priority -1"));
  prio[500] = 2.0;
  const void *missing[3] = {obs, NULL, rew};
  assert_int_equal(chime_writer_extend(w, missing, NULL, N, NULL),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "'action'"));
  assert_int_equal(chime_writer_extend(w, cols, prio, 7, &taken), 0);
  assert_int_equal(taken, 7);
  const void *rest[3] = {obs[7], &act[7], &rew[7]};
  assert_int_equal(chime_writer_extend(w, rest, prio + 7, N - 7, &taken), 0);
  assert_int_equal(taken, N - 7);
  assert_int_equal(chime_writer_close(w), 0);

  chime_stream_t *s = open_slot_bound(c, "f", CHIME_MODE_STREAM, 4);
  for (uint32_t n = 0; n < N / 8; n++) {
    chime_batch_t b;
    uint64_t ids[8];
    char err[256];
    assert_int_equal(chime_stream_next(s, &b, 10000), 0);
    assert_int_equal(chime__pattern_verify(&b, ids, err, sizeof(err)), 0);
    for (uint32_t i = 0; i < 8; i++) {
      assert_int_equal(ids[i], chime__pattern_id(5, n * 8 + i));
      assert_true(b.info[i].priority == prio[n * 8 + i]);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* NULL options are the defaults everywhere: a client, a writer and a stream
 * opened with none (the stream's batch size is then 256, its mode auto). */
static void test_null_opts(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c; /* created with NULL opts */
  start(&d, &c);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "f", NULL), 0);
  uint8_t sample[SAMPLE_BYTES];
  for (uint64_t i = 0; i < 512; i++) {
    chime__pattern_fill(&spec, chime__pattern_id(11, i), sample);
    assert_int_equal(chime_writer_append(w, sample, sizeof(sample), 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);

  chime_stream_t *s = NULL;
  int rc = chime_stream_open(&s, c, "f", NULL);
  if (rc)
    fail_msg("open: %s", chime_last_error());
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_SHM); /* auto, same host */
  for (int i = 0; i < 2; i++) {
    chime_batch_t b;
    char err[256];
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    assert_int_equal(b.count, 256);
    assert_int_equal(chime__pattern_verify(&b, NULL, err, sizeof(err)), 0);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_local_stats_t ls;
  assert_int_equal(chime_stream_stats(s, &ls), 0);
  assert_int_equal(ls.batches, 2);
  chime_stream_close(s);

  /* Still no defaults for the object or the table. */
  assert_int_equal(chime_stream_open(&s, c, NULL, NULL), CHIME_EINVAL);
  assert_int_equal(chime_stream_open(NULL, c, "f", NULL), CHIME_EINVAL);
  assert_int_equal(chime_writer_open(NULL, c, "f", NULL), CHIME_EINVAL);
  chime__stop_clean(&d, c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_null_opts, teardown_each),
      cmocka_unit_test_teardown(test_writer, teardown_each),
      cmocka_unit_test_teardown(test_writer_small_fifo, teardown_each),
      cmocka_unit_test_teardown(test_auto_fallback, teardown_each),
      cmocka_unit_test_teardown(test_leases_shm, teardown_each),
      cmocka_unit_test_teardown(test_leases_stream, teardown_each),
      cmocka_unit_test_teardown(test_release_checks_shm, teardown_each),
      cmocka_unit_test_teardown(test_release_checks_stream, teardown_each),
      cmocka_unit_test_teardown(test_stream_fills_while_learner_away,
                                teardown_each),
      cmocka_unit_test_teardown(test_stream_learner_only_looks, teardown_each),
      cmocka_unit_test_teardown(test_graceful_stop, teardown_each),
      cmocka_unit_test_teardown(test_server_killed, teardown_each),
      cmocka_unit_test_teardown(test_fifo_exactly_once, teardown_each),
      cmocka_unit_test_teardown(test_writer_extend, teardown_each),
      cmocka_unit_test_teardown(test_insert_queue_wakes, teardown_each),
      cmocka_unit_test_teardown(test_close_gives_back_shm, teardown_each),
      cmocka_unit_test_teardown(test_close_gives_back_stream, teardown_each),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
