/* A stream's ready limit over the wire (chime_stream_opts_t.ready_bytes,
 * the Open's ready_bytes): chimed keeps no more batches sampled ahead of
 * the learner's takes than it asked for, a fifo table's items all arrive
 * exactly once while the learner holds batches as it asks for more, a
 * stream held back by the limit closes, and a sharded stream passes its
 * limit to each shard's shm sub-stream (none given: none, as on one
 * server). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "chime/chime.h"
#include "harness.h"
#include "streams.h"
#include "writes.h"
#include "pattern.h"

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define SAMPLE_BYTES 264
#define BATCH 4
#define SLOTS 8
#define ITEMS 96
/* Below one batch: the least limit, 2 batches. */
#define READY_BYTES 1
#define READY 2

static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  return chime_spec_parse(&spec, SPEC) == 0 ? 0 : -1;
}

static void start(chime__chimed_t *d, chime_client_t **c, const char *sampler) {
  char config[512];
  snprintf(config, sizeof(config),
           "{\"tables\": [{\"name\": \"t\", \"spec\": \"" SPEC
           "\", \"capacity\": 1024, \"min_size\": 1, \"sampler\": \"%s\"}]}\n",
           sampler);
  assert_int_equal(chime__chimed_start_client(d, config, c), 0);
}

/* A shm stream of "t" that keeps at most ready_bytes sampled ahead. */
static chime_stream_t *open_ready_limited(chime_client_t *c,
                                          uint64_t ready_bytes) {
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.ready_bytes = ready_bytes;
  return chime__open_stream(c, "t", CHIME_MODE_SHM, BATCH, SLOTS, &o);
}

/* The batches chimed published into its one stream's ring. */
static uint64_t published(chime_client_t *c) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(c, &st), 0);
  assert_int_equal(st->nstreams, 1);
  uint64_t n = st->streams[0].batches;
  chime_stats_free(st);
  return n;
}

/* Waits (10 s at most) until chimed published `want`, failing on more;
 * then, after as many stats round trips as it took a sampler to fill a
 * ring, still no more. */
static void expect_published(chime_client_t *c, uint64_t want) {
  int64_t deadline = chime__now_ms() + 10000;
  uint64_t n;
  while ((n = published(c)) < want) {
    if (chime__now_ms() > deadline)
      fail_msg("%llu batches published after 10 s, expected %llu",
               (unsigned long long)n, (unsigned long long)want);
    chime__sleep_ms(5);
  }
  for (int i = 0; i < 20 && n == want; i++)
    n = published(c);
  if (n != want)
    fail_msg("%llu batches published with %llu taken: more than %d ready",
             (unsigned long long)n, (unsigned long long)(want - READY), READY);
}

/* A uniform table never runs dry: only the limit stops the sampler. Each
 * take lets it sample one more; held batches do not count. */
static void test_never_more_ready(void **state) {
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime_batch_t b[SLOTS];
  (void)state;
  start(&d, &c, "uniform");
  assert_int_equal(chime__write_pattern(c, "t", &spec, 1, ITEMS, NULL), 0);
  chime_stream_t *s = open_ready_limited(c, READY_BYTES);
  expect_published(c, READY);
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_equal(chime_stream_next(s, &b[i], 10000), 0);
    expect_published(c, i + 1 + READY);
  }
  for (uint32_t i = 0; i < 3; i++)
    assert_int_equal(chime_stream_release(s, &b[i]), 0);
  expect_published(c, 3 + READY); /* releases alone sample nothing */
  /* Closed while the sampler is held back by the limit. */
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

/* Without a limit, as before: every free slot. */
/* Waits (10 s at most) until chimed published every slot of the ring. */
static void expect_every_slot(chime_client_t *c) {
  int64_t deadline = chime__now_ms() + 10000;
  while (published(c) < SLOTS) {
    if (chime__now_ms() > deadline)
      fail_msg("a stream without a limit filled %llu of %d slots",
               (unsigned long long)published(c), SLOTS);
    chime__sleep_ms(5);
  }
}

static void test_zero_fills_every_slot(void **state) {
  chime__chimed_t d;
  chime_client_t *c = NULL;
  (void)state;
  start(&d, &c, "uniform");
  assert_int_equal(chime__write_pattern(c, "t", &spec, 1, ITEMS, NULL), 0);
  chime_stream_t *s = open_ready_limited(c, 0);
  expect_every_slot(c);
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

/* fifo: every item exactly once, the learner holding up to slots - 1
 * batches as it asks for the next (each next within 10 s: no deadlock). */
static void test_fifo_every_item_while_holding(void **state) {
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime_batch_t held[SLOTS];
  uint8_t seen[ITEMS] = {0};
  uint32_t nheld = 0;
  int got = 0;
  (void)state;
  start(&d, &c, "fifo");
  assert_int_equal(chime__write_pattern(c, "t", &spec, 1, ITEMS, NULL), 0);
  chime_stream_t *s = open_ready_limited(c, READY_BYTES);
  for (uint32_t k = 0; got < ITEMS; k++) {
    uint32_t keep = k % (SLOTS - 1); /* 0..slots - 2 held as it asks */
    while (nheld > keep)
      assert_int_equal(chime_stream_release(s, &held[--nheld]), 0);
    chime_batch_t *b = &held[nheld];
    uint64_t ids[BATCH];
    char err[256];
    int rc = chime_stream_next(s, b, 10000);
    if (rc != 0)
      fail_msg("%d of %d items delivered holding %u, then %s: %s", got, ITEMS,
               nheld, chime_err_name(rc), chime_last_error());
    nheld++;
    assert_int_equal(chime__pattern_verify(b, ids, err, sizeof(err)), 0);
    for (int i = 0; i < BATCH; i++) {
      uint64_t idx = ids[i] & CHIME__PATTERN_MAX_INDEX;
      assert_true(idx < ITEMS);
      assert_int_equal(seen[idx], 0);
      seen[idx] = 1;
      got++;
    }
  }
  while (nheld > 0)
    assert_int_equal(chime_stream_release(s, &held[--nheld]), 0);
  chime_stream_close(s);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

/* Two shards: a sharded stream's ready_bytes goes to each shard's
 * sub-stream (2 ready on each); none given, every slot on each, as on one
 * server. The learner reads either way. */
static void union_case(uint64_t ready_bytes) {
  chime__chimed_t d[2];
  chime_client_t *direct[2] = {NULL, NULL}, *c = NULL;
  char target[600];
  chime_batch_t b;
  for (int k = 0; k < 2; k++) {
    start(&d[k], &direct[k], "uniform");
    assert_int_equal(
        chime__write_pattern(direct[k], "t", &spec, 1, ITEMS, NULL), 0);
  }
  snprintf(target, sizeof(target), "%s,%s", d[0].addr, d[1].addr);
  assert_int_equal(chime_client_create(&c, target, NULL), 0);
  chime_stream_t *s = open_ready_limited(c, ready_bytes);
  for (int k = 0; k < 2; k++) {
    if (ready_bytes)
      expect_published(direct[k], READY);
    else
      expect_every_slot(direct[k]);
  }
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(b.count, BATCH);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
  for (int k = 0; k < 2; k++)
    assert_int_equal(chime__chimed_stop_client(&d[k], direct[k]), 0);
}

static void test_union_passes_limit(void **state) {
  (void)state;
  union_case(READY_BYTES);
}

static void test_union_default_fills(void **state) {
  (void)state;
  union_case(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_never_more_ready),
      cmocka_unit_test(test_zero_fills_every_slot),
      cmocka_unit_test(test_fifo_every_item_while_holding),
      cmocka_unit_test(test_union_passes_limit),
      cmocka_unit_test(test_union_default_fills),
  };
  return cmocka_run_group_tests(tests, setup, chime__harness_teardown);
}
