/* Tables: fifo order and removal, uniform eviction and probabilities,
 * leaf-major copies, blocking inserts and samples and how they end,
 * requests resent by a writer acked again instead of inserted twice, and
 * batches drawn ahead of their bookkeeping giving the draws made one by
 * one; keys that carry the table's shard, and a table that refuses inserts
 * rather than run into the next shard's keys. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/insert_window.h"
#include "common/key.h"
#include "replay/table.h"
#include "table_slot.h"
#include "rng.h"

/* spec "a:u32[2], b:u8[]": 9 bytes a sample; a = {key*10, key*10+1}, b = key */
#define SB 9

static void make_cfg(chime__table_config_t *tc, uint64_t cap,
                     chime__selector_kind_t s, uint64_t min_size) {
  memset(tc, 0, sizeof(*tc));
  snprintf(tc->name, sizeof(tc->name), "t");
  assert_int_equal(chime_spec_parse(&tc->spec, "a:u32[2], b:u8[]"), 0);
  tc->capacity = cap;
  tc->sampler = s;
  tc->min_size = min_size;
}

static void fill(uint8_t *buf, uint64_t first, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t a[2] = {(uint32_t)(first + i) * 10,
                     (uint32_t)(first + i) * 10 + 1};
    memcpy(buf + i * SB, a, 8);
    buf[i * SB + 8] = (uint8_t)(first + i);
  }
}

/* Checks sample j of the slot is the item with `key`, leaf-major. */
static void check_sample(const slot_t *s, uint32_t j, uint64_t key) {
  const uint32_t *a = (const uint32_t *)s->ws.leaf[0];
  const uint8_t *b = s->ws.leaf[1];
  assert_int_equal(s->ws.info[j].key, key);
  assert_int_equal(a[2 * j], key * 10);
  assert_int_equal(a[2 * j + 1], key * 10 + 1);
  assert_int_equal(b[j], (uint8_t)key);
}

/* A table made from make_cfg's spec. */
static chime__table_t *new_table(chime__table_config_t *tc, uint64_t cap,
                                 chime__selector_kind_t s, uint64_t min_size) {
  chime__table_t *t;
  make_cfg(tc, cap, s, min_size);
  assert_int_equal(chime__table_create(&t, tc), 0);
  return t;
}

/* Inserts keys first..first+n-1 and returns the first key given. */
static uint64_t insert_keys(chime__table_t *t, uint64_t first, uint32_t n) {
  uint8_t buf[16 * SB];
  uint64_t k;
  assert_true(n <= 16);
  fill(buf, first, n);
  assert_int_equal(chime__table_insert(t, buf, n, NULL, &k, NULL, NULL), 0);
  return k;
}

/* Samples one batch of `n` and checks it holds keys first..first+n-1. */
static void sample_keys(chime__table_t *t, slot_t *s, uint64_t first,
                        uint32_t n) {
  assert_int_equal(chime__table_sample(t, &s->lay, &s->ws, NULL), 0);
  for (uint32_t j = 0; j < n; j++)
    check_sample(s, j, first + j);
}

/* Ends a wait: sets its stop flag, wakes the table, joins the thread. */
static void stop_and_join(chime__table_t *t, atomic_int *stop, pthread_t th) {
  atomic_store(stop, 1);
  chime__table_wake(t);
  pthread_join(th, NULL);
}

static void test_fifo_order_and_wrap(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  chime__table_stats_t st;
  (void)state;
  t = new_table(&tc, 5, CHIME__SELECTOR_FIFO, 1);
  slot_init(&s, t, 2);
  assert_int_equal(insert_keys(t, 1, 3), 1);
  sample_keys(t, &s, 1, 2);
  assert_true(s.ws.info[0].probability == 1.0);
  assert_int_equal(s.ws.info[0].times_sampled, 1);
  assert_true(s.ws.info[0].insert_time_ns > 0);
  /* 1 left + 4 more = 5 = capacity; positions wrap around the end. */
  assert_int_equal(insert_keys(t, 4, 4), 4);
  for (uint64_t want = 3; want < 7; want += 2)
    sample_keys(t, &s, want, 2);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 1);
  assert_int_equal(st.inserts, 7);
  assert_int_equal(st.samples, 6);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_uniform_evicts_oldest(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  int seen[11] = {0};
  (void)state;
  t = new_table(&tc, 4, CHIME__SELECTOR_UNIFORM, 1);
  slot_init(&s, t, 8);
  insert_keys(t, 1, 10);
  for (int round = 0; round < 50; round++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 8; j++) {
      uint64_t key = s.ws.info[j].key;
      assert_true(key >= 7 && key <= 10);
      check_sample(&s, j, key);
      assert_true(s.ws.info[j].probability == 0.25);
      seen[key]++;
    }
  }
  /* With replacement: 400 draws over 4 items reach every one. */
  for (int key = 7; key <= 10; key++)
    assert_true(seen[key] > 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 4);
  free(s.mem);
  chime__table_destroy(t);
}

typedef struct {
  chime__table_t *t;
  uint8_t buf[4 * SB];
  uint32_t n;
  uint64_t first;
  atomic_int abort;
  int rc;
} ins_t;

static void *insert_thread(void *arg) {
  ins_t *a = arg;
  a->rc =
      chime__table_insert(a->t, a->buf, a->n, NULL, &a->first, &a->abort, NULL);
  return NULL;
}

/* Starts inserting keys first..first+n-1 on a thread of its own. */
static void start_insert(ins_t *a, pthread_t *th, chime__table_t *t,
                         uint64_t first, uint32_t n) {
  memset(a, 0, sizeof(*a));
  a->t = t;
  a->n = n;
  fill(a->buf, first, n);
  assert_int_equal(pthread_create(th, NULL, insert_thread, a), 0);
}

static void test_fifo_full_waits_for_sampler(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  ins_t a;
  pthread_t th;
  (void)state;
  t = new_table(&tc, 4, CHIME__SELECTOR_FIFO, 1);
  slot_init(&s, t, 2);
  insert_keys(t, 1, 4);
  start_insert(&a, &th, t, 5, 3);
  /* Two batches free four places; the blocked insert finishes in order. */
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  check_sample(&s, 0, 1);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  check_sample(&s, 1, 4);
  pthread_join(th, NULL);
  assert_int_equal(a.rc, 0);
  assert_int_equal(a.first, 5);
  sample_keys(t, &s, 5, 2);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_blocked_insert_aborts(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  ins_t a;
  pthread_t th;
  (void)state;
  t = new_table(&tc, 2, CHIME__SELECTOR_FIFO, 1);
  insert_keys(t, 1, 2);
  start_insert(&a, &th, t, 3, 1);
  stop_and_join(t, &a.abort, th);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2);
  chime__table_destroy(t);
}

/* A fifo request goes in whole or not at all: one that does not fit waits
 * without taking a place, a stop ends the wait with nothing inserted (and
 * no key used), one beyond the capacity is refused. */
static void test_fifo_insert_all_or_nothing(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  uint8_t buf[8 * SB];
  uint64_t k;
  ins_t a;
  pthread_t th;
  chime__table_stats_t st;
  atomic_int stop;
  (void)state;
  t = new_table(&tc, 5, CHIME__SELECTOR_FIFO, 1);
  assert_int_equal(insert_keys(t, 1, 3), 1);

  /* Two places free, four asked, stopping: nothing goes in. */
  atomic_init(&stop, 1);
  fill(buf, 4, 4);
  assert_int_equal(chime__table_insert(t, buf, 4, NULL, &k, &stop, NULL),
                   CHIME_ESHUTDOWN);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.inserts, 3);
  /* More than the capacity can never go in whole. */
  fill(buf, 4, 6);
  assert_int_equal(chime__table_insert(t, buf, 6, NULL, &k, NULL, NULL),
                   CHIME_EINVAL);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);

  /* Four asked with two free: the insert waits whole; a batch of two makes
   * room for all four, which then follow item 3 with the next keys. */
  start_insert(&a, &th, t, 4, 4);
  slot_init(&s, t, 2);
  sample_keys(t, &s, 1, 2);
  pthread_join(th, NULL);
  assert_int_equal(a.rc, 0);
  assert_int_equal(a.first, 4);
  free(s.mem);
  slot_init(&s, t, 5);
  sample_keys(t, &s, 3, 5);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_sample_waits_for_min_size(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  uint8_t buf[4 * SB];
  uint64_t k;
  slot_sampler_t a;
  pthread_t th;
  (void)state;
  t = new_table(&tc, 8, CHIME__SELECTOR_UNIFORM, 3);
  slot_init(&s, t, 4);
  insert_keys(t, 1, 2);
  slot_sampler_start(&a, &th, t, &s, 1);
  insert_keys(t, 3, 1); /* the third item reaches min_size */
  pthread_join(th, NULL);
  assert_int_equal(a.rc, 0);
  assert_true(s.ws.info[0].key >= 1 && s.ws.info[0].key <= 3);

  /* Below min_size again (new table): stop ends the wait. */
  chime__table_destroy(t);
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_sampler_start(&a, &th, t, &s, 1);
  stop_and_join(t, &a.stop, th);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);

  /* And close ends every wait for good. */
  slot_sampler_start(&a, &th, t, &s, 1);
  chime__table_close(t);
  pthread_join(th, NULL);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);
  fill(buf, 3, 1);
  assert_int_equal(chime__table_insert(t, buf, 1, NULL, &k, NULL, NULL),
                   CHIME_ESHUTDOWN);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_fifo_batch_taken_whole(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  slot_sampler_t a;
  pthread_t th;
  (void)state;
  t = new_table(&tc, 8, CHIME__SELECTOR_FIFO, 1);
  slot_init(&s, t, 4);
  insert_keys(t, 1, 3);
  slot_sampler_start(&a, &th, t, &s, 1);
  stop_and_join(t, &a.stop, th);
  assert_int_equal(a.rc, CHIME_ESHUTDOWN);
  /* Three items were fewer than a batch: none was taken. */
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.samples, 0);
  free(s.mem);
  chime__table_destroy(t);
}

/* Inserts n samples as request seq of writer; returns the table's rc. */
static int insert_from(chime__table_t *t, uint64_t writer, uint64_t seq,
                       uint32_t n, uint64_t *first_key,
                       chime__dedupe_req_t *dq) {
  uint8_t buf[16 * SB];
  fill(buf, seq, n);
  memset(dq, 0, sizeof(*dq));
  dq->writer = writer;
  dq->seq = seq;
  return chime__table_insert(t, buf, n, NULL, first_key, NULL, dq);
}

static uint64_t table_size(chime__table_t *t) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  return st.size;
}

static void test_resent_request_acked_not_inserted(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t = new_table(&tc, 1000, CHIME__SELECTOR_UNIFORM, 0);
  chime__dedupe_req_t dq;
  uint64_t k[4], again;
  const uint64_t w = 0x1234567890abcdefu;
  for (uint64_t seq = 1; seq <= 3; seq++) {
    assert_int_equal(insert_from(t, w, seq, 2, &k[seq], &dq), 0);
    assert_false(dq.resent);
  }
  assert_int_equal(table_size(t), 6);
  /* The same request again: its first key, nothing inserted. */
  assert_int_equal(insert_from(t, w, 2, 2, &again, &dq), 0);
  assert_true(dq.resent);
  assert_int_equal(again, k[2]);
  assert_int_equal(insert_from(t, w, 3, 2, &again, &dq), 0);
  assert_int_equal(again, k[3]);
  assert_int_equal(table_size(t), 6);
  /* Resent with another count: refused. */
  assert_int_equal(insert_from(t, w, 3, 1, &again, &dq), CHIME_EINVAL);
  assert_true(dq.refused);
  assert_int_equal(dq.known, 2);
  /* Another writer's seq 2 is its own. */
  assert_int_equal(insert_from(t, w + 1, 2, 2, &again, &dq), 0);
  assert_false(dq.resent);
  assert_int_equal(table_size(t), 8);
  /* Writer 0: no dedupe, the same request goes in twice. */
  assert_int_equal(insert_from(t, 0, 5, 1, &k[0], &dq), 0);
  assert_int_equal(insert_from(t, 0, 5, 1, &again, &dq), 0);
  assert_int_equal(again, k[0] + 1);
  assert_int_equal(table_size(t), 10);
  chime__table_destroy(t);
}

static void test_resend_older_than_window_refused(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t = new_table(&tc, 1000, CHIME__SELECTOR_UNIFORM, 0);
  chime__dedupe_req_t dq;
  uint64_t k, first = 0;
  const uint64_t w = 77;
  for (uint64_t seq = 1; seq <= CHIME__INSERT_WINDOW + 1; seq++) {
    assert_int_equal(insert_from(t, w, seq, 1, &k, &dq), 0);
    if (seq == 2)
      first = k;
  }
  /* seq 1 left the window; seq 2 is its oldest. */
  assert_int_equal(insert_from(t, w, 1, 1, &k, &dq), CHIME_EEXIST);
  assert_true(dq.refused);
  assert_int_equal(dq.known, CHIME__INSERT_WINDOW + 1);
  assert_int_equal(insert_from(t, w, 2, 1, &k, &dq), 0);
  assert_true(dq.resent);
  assert_int_equal(k, first);
  assert_int_equal(table_size(t), CHIME__INSERT_WINDOW + 1);
  chime__table_destroy(t);
}

/* Writers no call binds, in a table made in code (writer_idle_ms 0):
 * beyond CHIME__INSERT_WRITERS the least recently used is forgotten; its
 * next request past its first cannot be told apart from a resend, so it is
 * refused as CHIME_EFORGOTTEN; new writers still start. (Bound writers:
 * test_dedupe.c.) */
static void test_forgotten_writer_refused(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t =
      new_table(&tc, CHIME__INSERT_WRITERS + 8, CHIME__SELECTOR_UNIFORM, 0);
  chime__dedupe_req_t dq;
  uint64_t k;
  assert_int_equal(insert_from(t, 1, 1, 1, &k, &dq), 0);
  assert_int_equal(insert_from(t, 2, 1, 1, &k, &dq), 0);
  /* Writer 2 stays recent; writer 1 is the least recently used. */
  for (uint64_t w = 3; w <= CHIME__INSERT_WRITERS + 1; w++) {
    assert_int_equal(insert_from(t, w, 1, 1, &k, &dq), 0);
    if (w % 1024 == 0)
      assert_int_equal(insert_from(t, 2, w, 1, &k, &dq), 0);
  }
  assert_int_equal(insert_from(t, 1, 2, 1, &k, &dq), CHIME_EFORGOTTEN);
  assert_true(dq.refused);
  assert_int_equal(insert_from(t, 2, 1, 1, &k, &dq), 0);
  assert_true(dq.resent);
  assert_int_equal(insert_from(t, 1000000, 1, 1, &k, &dq), 0);
  assert_false(dq.resent);
  chime__table_destroy(t);
}

/* A resend of a request already in a full fifo table is acked at once:
 * nothing waits for room it does not need. */
static void test_resend_into_full_fifo_does_not_wait(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t = new_table(&tc, 4, CHIME__SELECTOR_FIFO, 0);
  chime__dedupe_req_t dq;
  uint64_t k1, k;
  assert_int_equal(insert_from(t, 9, 1, 4, &k1, &dq), 0);
  uint8_t buf[4 * SB];
  fill(buf, 1, 4);
  memset(&dq, 0, sizeof(dq));
  dq.writer = 9;
  dq.seq = 1;
  chime__span_t sp = {buf, sizeof(buf)};
  assert_int_equal(
      chime__table_try_insert_spans(t, &sp, 1, 4, NULL, NULL, &k, &dq), 0);
  assert_true(dq.resent);
  assert_int_equal(k, k1);
  dq.seq = 2;
  assert_int_equal(
      chime__table_try_insert_spans(t, &sp, 1, 4, NULL, NULL, &k, &dq),
      CHIME_EBUSY);
  chime__table_destroy(t);
}

/* Rows are copied into a batch without the table's lock: an insert that
 * would overwrite a row being copied waits, so no sampled row is ever torn
 * (half old item, half new). Rows of 64 KiB whose every word is the key,
 * a table of 4 rows, an inserter thread evicting all the time. */
#define BIG_WORDS 8192

typedef struct {
  chime__table_t *t;
  int n;
  int rc;
} churn_t;

static void *churn_main(void *arg) {
  churn_t *c = arg;
  uint64_t *row = malloc(BIG_WORDS * sizeof(uint64_t));
  for (int i = 0; i < c->n && c->rc == 0; i++) {
    uint64_t key = (uint64_t)i + 1, k;
    for (int w = 0; w < BIG_WORDS; w++)
      row[w] = key;
    c->rc = chime__table_insert(c->t, (const uint8_t *)row, 1, NULL, &k, NULL,
                                NULL);
    if (c->rc == 0 && k != key)
      c->rc = -100;
  }
  free(row);
  return NULL;
}

static void check_untorn(chime__selector_kind_t sampler,
                         chime__selector_kind_t remover) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "big");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u64[8192]"), 0);
  tc.capacity = 4;
  tc.sampler = sampler;
  tc.remover = remover;
  tc.priority_exponent = 1.0;
  chime__table_t *t;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  churn_t c = {t, 3000, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, churn_main, &c), 0);
  slot_t s;
  slot_init(&s, t, 2);
  atomic_int stop = 0;
  uint64_t torn = 0, batches = 0;
  /* fifo takes every item once (1500 batches of 2); uniform samples while
   * the inserter runs. */
  for (int b = 0; b < 1500; b++) {
    if (chime__table_sample(t, &s.lay, &s.ws, &stop) != 0)
      break;
    batches++;
    for (uint32_t j = 0; j < 2; j++) {
      const uint64_t *x =
          (const uint64_t *)s.ws.leaf[0] + (size_t)j * BIG_WORDS;
      for (int w = 0; w < BIG_WORDS; w++)
        torn += x[w] != s.ws.info[j].key;
    }
  }
  pthread_join(th, NULL);
  assert_int_equal(c.rc, 0);
  assert_int_equal(batches, 1500);
  assert_int_equal(torn, 0);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* A table of make_cfg's spec with the given selectors and a fixed seed. */
static chime__table_t *sel_table(chime__table_config_t *tc, uint64_t cap,
                                 chime__selector_kind_t s,
                                 chime__selector_kind_t r, uint64_t mts,
                                 double exponent) {
  chime__table_t *t;
  make_cfg(tc, cap, s, 1);
  tc->remover = r;
  tc->max_times_sampled = mts;
  tc->priority_exponent = exponent;
  tc->seed = 12345;
  assert_int_equal(chime__table_create(&t, tc), 0);
  return t;
}

/* Inserts keys first..first+n-1 with priorities. */
static void insert_prio(chime__table_t *t, uint64_t first, uint32_t n,
                        const double *prio) {
  uint8_t buf[16 * SB];
  uint64_t k;
  assert_true(n <= 16);
  fill(buf, first, n);
  assert_int_equal(chime__table_insert(t, buf, n, prio, &k, NULL, NULL), 0);
  assert_int_equal(k, first);
}

/* Draws `draws` samples in batches of 10 from a table holding keys
 * 1..n with weights w (unnormalised) and checks the counts with a
 * chi-square test (fixed seed, threshold 40 for up to 9 degrees of
 * freedom: p < 1e-5 for a correct sampler) and each sample's
 * probability against w / sum exactly. */
static void check_distribution(chime__table_t *t, uint32_t n, const double *w,
                               uint32_t draws) {
  slot_t s;
  uint64_t counts[16] = {0};
  double sum = 0;
  for (uint32_t i = 0; i < n; i++)
    sum += w[i];
  slot_init(&s, t, 10);
  for (uint32_t b = 0; b < draws / 10; b++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 10; j++) {
      uint64_t key = s.ws.info[j].key;
      assert_true(key >= 1 && key <= n);
      check_sample(&s, j, key);
      counts[key - 1]++;
      double want = w[key - 1] / sum;
      double got = s.ws.info[j].probability;
      assert_true(got > want * (1 - 1e-12) && got < want * (1 + 1e-12));
    }
  }
  double chi = 0;
  for (uint32_t i = 0; i < n; i++) {
    double e = (double)draws * w[i] / sum;
    chi += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
  }
  if (chi > 40)
    fail_msg("chi-square %.1f over %u keys", chi, n);
  free(s.mem);
}

static void test_uniform_distribution(void **state) {
  chime__table_config_t tc;
  (void)state;
  chime__table_t *t = sel_table(&tc, 10, CHIME__SELECTOR_UNIFORM, 0, 0, 1.0);
  double w[10];
  for (int i = 0; i < 10; i++)
    w[i] = 1;
  insert_prio(t, 1, 10, NULL);
  check_distribution(t, 10, w, 50000);
  chime__table_destroy(t);
}

static void test_prioritized_distribution(void **state) {
  chime__table_config_t tc;
  (void)state;
  double prio[8] = {1, 2, 3, 4, 5, 0, 7, 0.5}, w[8];
  double exps[] = {1.0, 0.5, 2.0, 0.0};
  for (size_t e = 0; e < sizeof(exps) / sizeof(exps[0]); e++) {
    chime__table_t *t =
        sel_table(&tc, 8, CHIME__SELECTOR_PRIORITIZED, 0, 0, exps[e]);
    insert_prio(t, 1, 8, prio);
    for (int i = 0; i < 8; i++)
      w[i] = pow(prio[i], exps[e]);
    /* Priority 0 is never sampled, except with exponent 0 where, as in
     * Reverb (0^0 = 1), every item weighs the same. */
    check_distribution(t, 8, w, 60000);
    chime__table_destroy(t);
  }
}

/* mass (GetInfo's TableInfo.mass) of the table now, and that it is what
 * the sampler draws against: a batch's every probability is its item's
 * weight / mass. */
static double mass_of(chime__table_t *t) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  return st.mass;
}

static void assert_rel(double got, double want) {
  if (!(fabs(got - want) <= 1e-9 * fabs(want)))
    fail_msg("got %.17g, want %.17g", got, want);
}

/* A prioritized sampler's mass is the sum of priority^exponent over its
 * items, through inserts, updates, deletes and items sampled out (0 with
 * every priority 0 or no item); every other sampler's is the item count,
 * even one whose prioritized remover keeps a sum tree. */
static void test_mass(void **state) {
  chime__table_config_t tc;
  (void)state;
  double prio[8] = {1, 2, 3, 4, 5, 0, 7, 0.5}, e = 0.6, want = 0;
  chime__table_t *t = sel_table(&tc, 16, CHIME__SELECTOR_PRIORITIZED, 0, 0, e);
  assert_true(mass_of(t) == 0);
  insert_prio(t, 1, 8, prio);
  for (int i = 0; i < 8; i++)
    want += pow(prio[i], e);
  assert_rel(mass_of(t), want);
  slot_t s;
  slot_init(&s, t, 10);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 10; j++)
    assert_rel(s.ws.info[j].probability,
               pow(prio[s.ws.info[j].key - 1], e) / mass_of(t));
  free(s.mem);
  /* Key 1 to priority 10, key 2 deleted. */
  chime__table_mutated_t r;
  uint64_t k1 = 1, k2 = 2;
  assert_int_equal(chime__table_mutate(t, &k1, (double[]){10}, 1, &k2, 1, &r),
                   0);
  assert_int_equal(r.updated + r.deleted, 2);
  want += pow(10, e) - pow(1, e) - pow(2, e);
  assert_rel(mass_of(t), want);
  chime__table_destroy(t);

  /* Every priority 0: 0, though such a table draws uniformly. */
  t = sel_table(&tc, 16, CHIME__SELECTOR_PRIORITIZED, 0, 0, 1.0);
  insert_prio(t, 1, 3, (double[]){0, 0, 0});
  assert_true(mass_of(t) == 0);
  chime__table_destroy(t);

  /* Items sampled out leave the sum. */
  t = sel_table(&tc, 16, CHIME__SELECTOR_PRIORITIZED, 0, 1, 2.0);
  insert_prio(t, 1, 1, (double[]){3});
  assert_rel(mass_of(t), 9);
  slot_init(&s, t, 1);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  free(s.mem);
  assert_true(mass_of(t) == 0);
  chime__table_destroy(t);

  /* Not prioritized: the size, whatever the priorities. */
  chime__selector_kind_t others[][2] = {
      {CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_PRIORITIZED},
      {CHIME__SELECTOR_UNIFORM, 0},
      {CHIME__SELECTOR_FIFO, 0},
      {CHIME__SELECTOR_LIFO, 0},
      {CHIME__SELECTOR_MAX_HEAP, 0},
  };
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
    t = sel_table(&tc, 16, others[i][0], others[i][1], 0, e);
    assert_true(mass_of(t) == 0);
    insert_prio(t, 1, 8, prio);
    assert_true(mass_of(t) == 8);
    chime__table_destroy(t);
  }
}

/* Samples one batch of n and checks its keys are want[0..n-1], each with
 * probability 1. */
static void sample_exact(chime__table_t *t, uint32_t n, const uint64_t *want) {
  slot_t s;
  slot_init(&s, t, n);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < n; j++) {
    check_sample(&s, j, want[j]);
    assert_true(s.ws.info[j].probability == 1.0);
  }
  free(s.mem);
}

static void test_lifo_is_a_stack(void **state) {
  chime__table_config_t tc;
  chime__table_stats_t st;
  (void)state;
  chime__table_t *t = sel_table(&tc, 8, CHIME__SELECTOR_LIFO, 0, 1, 1.0);
  insert_prio(t, 1, 5, NULL);
  sample_exact(t, 3, (uint64_t[]){5, 4, 3});
  insert_prio(t, 6, 2, NULL);
  sample_exact(t, 4, (uint64_t[]){7, 6, 2, 1});
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  chime__table_destroy(t);
  /* No limit: the newest item, again and again. */
  t = sel_table(&tc, 8, CHIME__SELECTOR_LIFO, 0, 0, 1.0);
  insert_prio(t, 1, 3, NULL);
  sample_exact(t, 3, (uint64_t[]){3, 3, 3});
  chime__table_destroy(t);
}

static void test_heaps_in_priority_order(void **state) {
  chime__table_config_t tc;
  (void)state;
  double prio[6] = {3, 1, 4, 1, 5, 9};
  chime__table_t *t = sel_table(&tc, 8, CHIME__SELECTOR_MIN_HEAP, 0, 1, 1.0);
  insert_prio(t, 1, 6, prio);
  /* Equal priorities: the earlier insert first. */
  sample_exact(t, 6, (uint64_t[]){2, 4, 1, 3, 5, 6});
  chime__table_destroy(t);
  t = sel_table(&tc, 8, CHIME__SELECTOR_MAX_HEAP, 0, 1, 1.0);
  insert_prio(t, 1, 6, prio);
  sample_exact(t, 3, (uint64_t[]){6, 5, 3});
  insert_prio(t, 7, 1, (double[]){4});
  sample_exact(t, 3, (uint64_t[]){7, 1, 2});
  chime__table_destroy(t);
}

static void test_max_times_sampled_exact(void **state) {
  chime__table_config_t tc;
  chime__table_stats_t st;
  slot_t s;
  uint32_t seen[11] = {0};
  (void)state;
  chime__table_t *t = sel_table(&tc, 10, CHIME__SELECTOR_UNIFORM, 0, 3, 1.0);
  insert_prio(t, 1, 10, NULL);
  slot_init(&s, t, 1);
  for (int b = 0; b < 30; b++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    uint64_t key = s.ws.info[0].key;
    check_sample(&s, 0, key);
    assert_int_equal(s.ws.info[0].times_sampled, ++seen[key]);
    assert_true(seen[key] <= 3);
  }
  for (int k = 1; k <= 10; k++)
    assert_int_equal(seen[k], 3);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.samples, 30);
  free(s.mem);
  chime__table_destroy(t);
  /* A fifo queue that gives each item twice. */
  t = sel_table(&tc, 4, CHIME__SELECTOR_FIFO, 0, 2, 1.0);
  insert_prio(t, 1, 4, NULL);
  sample_exact(t, 4, (uint64_t[]){1, 1, 2, 2});
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2);
  insert_prio(t, 5, 2, NULL);
  sample_exact(t, 4, (uint64_t[]){3, 3, 4, 4});
  chime__table_destroy(t);
}

/* Checks the keys left in a uniform table (no limit) are exactly want:
 * size, and every key seen over many draws. */
static void check_left(chime__table_t *t, uint32_t n, const uint64_t *want) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, n);
  slot_t s;
  int found[64] = {0};
  slot_init(&s, t, 1);
  for (int b = 0; b < 2000; b++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    assert_true(s.ws.info[0].key < 64);
    found[s.ws.info[0].key] = 1;
  }
  for (uint32_t i = 0; i < n; i++) {
    assert_true(found[want[i]]);
    found[want[i]] = 0;
  }
  for (int k = 0; k < 64; k++)
    assert_int_equal(found[k], 0);
  free(s.mem);
}

/* As Reverb: a sample that finds the table full goes in, then its
 * remover picks the item that leaves among all of them, the sample
 * itself included (test_table_remover has the distributions). */
static void test_evictions_follow_remover(void **state) {
  chime__table_config_t tc;
  (void)state;
  double prio[4] = {5, 1, 3, 4};
  /* min_heap: the lowest priority leaves: 2 (priority 1) for 5, then 6
   * itself (0.5, the lowest of all). */
  chime__table_t *t = sel_table(&tc, 4, CHIME__SELECTOR_UNIFORM,
                                CHIME__SELECTOR_MIN_HEAP, 0, 1);
  insert_prio(t, 1, 4, prio);
  insert_prio(t, 5, 1, (double[]){2});
  insert_prio(t, 6, 1, (double[]){0.5});
  check_left(t, 4, (uint64_t[]){1, 3, 4, 5});
  chime__table_destroy(t);
  /* max_heap: the highest: 5 itself (9), then 1 (5) for 6. */
  t = sel_table(&tc, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_MAX_HEAP, 0,
                1);
  insert_prio(t, 1, 4, prio);
  insert_prio(t, 5, 2, (double[]){9, 2});
  check_left(t, 4, (uint64_t[]){2, 3, 4, 6});
  chime__table_destroy(t);
  /* lifo: the newest, which is the sample coming in: a full table keeps
   * what it holds (the inserts are still acked, with their keys). */
  t = sel_table(&tc, 3, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_LIFO, 0, 1);
  insert_prio(t, 1, 3, NULL);
  insert_prio(t, 4, 1, NULL);
  insert_prio(t, 5, 1, NULL);
  check_left(t, 3, (uint64_t[]){1, 2, 3});
  chime__table_destroy(t);
  /* prioritized: only an item of non-zero priority can be drawn. */
  t = sel_table(&tc, 3, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_PRIORITIZED, 0,
                1);
  insert_prio(t, 1, 3, (double[]){0, 1, 0});
  insert_prio(t, 4, 1, (double[]){0});
  check_left(t, 3, (uint64_t[]){1, 3, 4});
  chime__table_destroy(t);
  /* fifo (the default): the oldest; a request over the capacity
   * evicts its own first samples. */
  t = sel_table(&tc, 3, CHIME__SELECTOR_UNIFORM, 0, 0, 1);
  insert_prio(t, 1, 4, NULL);
  check_left(t, 3, (uint64_t[]){2, 3, 4});
  chime__table_destroy(t);
}

static void test_bad_priorities_refused(void **state) {
  chime__table_config_t tc;
  uint8_t buf[SB];
  uint64_t k;
  (void)state;
  chime__table_t *t = sel_table(&tc, 4, CHIME__SELECTOR_PRIORITIZED, 0, 0, 2.0);
  fill(buf, 1, 1);
  double bad[] = {-1, NAN, INFINITY, 1e200};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_equal(chime__table_insert(t, buf, 1, &bad[i], &k, NULL, NULL),
                     CHIME_EINVAL);
  chime__table_destroy(t);
}

/* Issue 20: four items of priority 1e308 were each accepted, the sum tree's
 * total became infinite and every draw gave the first. A weight over
 * CHIME__SUMTREE_MAX_VALUE is refused, at insert and at mutate, saying
 * the bound; up to it the sum stays finite and draws follow the weights,
 * however large. */
static void test_priority_sum_stays_finite(void **state) {
  chime__table_config_t tc;
  uint8_t buf[4 * SB];
  uint64_t k;
  char err[256];
  (void)state;
  chime__table_t *t = sel_table(&tc, 4, CHIME__SELECTOR_PRIORITIZED, 0, 0, 1.0);
  fill(buf, 1, 4);
  double huge[4] = {1e308, 1e308, 1e308, 1e308};
  for (int i = 0; i < 4; i++)
    assert_int_equal(chime__table_insert(t, buf, 1, huge, &k, NULL, NULL),
                     CHIME_EINVAL);
  assert_int_equal(chime__table_insert(t, buf, 4, huge, &k, NULL, NULL),
                   CHIME_EINVAL);
  assert_int_equal(chime__table_check_priorities(t, huge, 4, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "priority 0 is 1e+308"));
  assert_non_null(strstr(err, "at most 1e+298"));
  /* Each finite and under DBL_MAX / 4, but over the bound. */
  double big[4] = {1, 1, 1, 4e307};
  assert_int_equal(chime__table_check_priorities(t, big, 4, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "priority 3 is 4e+307"));
  /* Up to the bound: four of the largest sum to 4e298, and the draws are
   * even. */
  double top[4] = {1e298, 1e298, 1e298, 1e298};
  insert_prio(t, 1, 4, top);
  check_distribution(t, 4, top, 40000);
  /* A mutate past it is refused whole; to it, the draws follow. */
  chime__table_mutated_t m;
  uint64_t keys[4] = {1, 2, 3, 4};
  assert_int_equal(chime__table_mutate(t, keys, huge, 4, NULL, 0, &m),
                   CHIME_EINVAL);
  check_distribution(t, 4, top, 10000);
  double mixed[4] = {1e298, 5e297, 2.5e297, 2.5e297};
  assert_int_equal(chime__table_mutate(t, keys, mixed, 4, NULL, 0, &m), 0);
  assert_int_equal(m.updated, 4);
  check_distribution(t, 4, mixed, 40000);
  chime__table_destroy(t);
  /* The bound is on priority^exponent. */
  t = sel_table(&tc, 4, CHIME__SELECTOR_PRIORITIZED, 0, 0, 2.0);
  double sq[4] = {1e148, 2e148, 3e148, 4e149};
  assert_int_equal(chime__table_check_priorities(t, sq, 4, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "priority 3 is 4e+149"));
  sq[3] = 4e148;
  insert_prio(t, 1, 4, sq);
  double w[4];
  for (int i = 0; i < 4; i++)
    w[i] = sq[i] * sq[i];
  check_distribution(t, 4, w, 40000);
  chime__table_destroy(t);
  /* A prioritized remover weighs the sample coming in too: never past
   * the bound either. */
  t = sel_table(&tc, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_PRIORITIZED, 0,
                1.0);
  assert_int_equal(chime__table_insert(t, buf, 4, huge, &k, NULL, NULL),
                   CHIME_EINVAL);
  chime__table_destroy(t);
  /* A heap orders any number: no bound there. */
  t = sel_table(&tc, 4, CHIME__SELECTOR_MAX_HEAP, 0, 1, 1.0);
  insert_prio(t, 1, 4, (double[]){1e308, 1, 2, 3});
  sample_exact(t, 2, (uint64_t[]){1, 4});
  chime__table_destroy(t);
}

static void test_rows_never_torn(void **state) {
  (void)state;
  check_untorn(CHIME__SELECTOR_UNIFORM, 0);
  check_untorn(CHIME__SELECTOR_FIFO, 0);
  /* Evictions from the middle while a sampler copies the rows. */
  check_untorn(CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_LIFO);
  check_untorn(CHIME__SELECTOR_PRIORITIZED, CHIME__SELECTOR_UNIFORM);
  check_untorn(CHIME__SELECTOR_MAX_HEAP, CHIME__SELECTOR_MIN_HEAP);
}

/* Samples one batch into s, through the stream-mode path (rows kept
 * pinned, then let go) when pinned. */
static void sample_batch(chime__table_t *t, slot_t *s, int pinned) {
  if (!pinned) {
    assert_int_equal(chime__table_sample(t, &s->lay, &s->ws, NULL), 0);
    return;
  }
  uint32_t rows[300];
  chime__table_pins_t pins = {.rows = rows};
  chime__table_waiter_t w;
  memset(&w, 0, sizeof(w));
  assert_true(s->lay.batch_size <= 300);
  assert_int_equal(
      chime__table_try_sample_pinned(t, &s->lay, &s->ws, &pins, UINT64_MAX, &w),
      0);
  assert_int_equal(pins.n, s->lay.batch_size);
  chime__table_unpin(t, &pins);
}

/* Without max_times_sampled a uniform or prioritized batch is drawn ahead
 * of its bookkeeping (table.c, plan_batch); with one, draw by draw. A
 * limit no item reaches changes nothing else, so two tables with the same
 * seed and items, one with such a limit, must give the same samples, bit
 * for bit, at batch sizes around the chunks the draws are made in, in
 * shm and stream mode, after priority updates and deletes too. */
static void test_batch_drawn_ahead_same_draws(void **state) {
  (void)state;
  chime__selector_kind_t kinds[2] = {CHIME__SELECTOR_UNIFORM,
                                     CHIME__SELECTOR_PRIORITIZED};
  uint32_t sizes[] = {1, 7, 8, 9, 63, 64, 65, 72, 73, 128, 200, 300};
  for (int kind = 0; kind < 2; kind++) {
    chime__table_config_t tc;
    chime__table_t *t[2];
    /* A capacity far above the items: uniform draws ahead only in a
     * table larger than the caches. */
    t[0] = sel_table(&tc, 100000, kinds[kind], 0, 0, 0.6);
    t[1] = sel_table(&tc, 100000, kinds[kind], 0, UINT32_MAX, 0.6);
    double prio[16];
    uint64_t seed = 99;
    for (uint64_t first = 1; first <= 1000; first += 16) {
      uint32_t n = 1000 - first + 1 < 16 ? (uint32_t)(1000 - first + 1) : 16;
      for (uint32_t i = 0; i < n; i++)
        prio[i] = (double)(chime__rng_next(&seed) % 1000) / 10.0; /* some 0 */
      insert_prio(t[0], first, n, prio);
      insert_prio(t[1], first, n, prio);
    }
    for (int round = 0; round < 2; round++) {
      if (round == 1) { /* new priorities and deletes, the same on both */
        uint64_t keys[100], dels[50];
        double np[100];
        for (int i = 0; i < 100; i++) {
          keys[i] = 1 + chime__rng_next(&seed) % 1000;
          np[i] = (double)(chime__rng_next(&seed) % 1000) / 10.0;
        }
        for (int i = 0; i < 50; i++)
          dels[i] = 1 + chime__rng_next(&seed) % 1000;
        for (int i = 0; i < 2; i++) {
          chime__table_mutated_t m;
          assert_int_equal(
              chime__table_mutate(t[i], keys, np, 100, dels, 50, &m), 0);
        }
      }
      for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        slot_t s[2];
        for (int i = 0; i < 2; i++) {
          slot_init(&s[i], t[i], sizes[z]);
          sample_batch(t[i], &s[i], (int)(z % 2));
        }
        for (uint32_t j = 0; j < sizes[z]; j++) {
          const chime_sample_info_t *a = &s[0].ws.info[j],
                                    *b = &s[1].ws.info[j];
          check_sample(&s[0], j, a->key);
          assert_int_equal(a->key, b->key);
          assert_memory_equal(&a->probability, &b->probability, sizeof(double));
          assert_memory_equal(&a->priority, &b->priority, sizeof(double));
          assert_int_equal(a->times_sampled, b->times_sampled);
          assert_int_equal(a->table_size, b->table_size);
        }
        free(s[0].mem);
        free(s[1].mem);
      }
    }
    chime__table_destroy(t[0]);
    chime__table_destroy(t[1]);
  }
}

/* A table of shard 5 issues shard 5's keys, counting from 1 as an
 * unsharded table does; batches carry them. */
static void test_keys_carry_shard(void **state) {
  chime__table_config_t tc;
  chime__table_t *t;
  slot_t s;
  uint8_t buf[8 * SB];
  uint64_t k;
  (void)state;
  make_cfg(&tc, 16, CHIME__SELECTOR_FIFO, 1);
  tc.shard = 5;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_init(&s, t, 5);
  fill(buf, 1, 3);
  assert_int_equal(chime__table_insert(t, buf, 3, NULL, &k, NULL, NULL), 0);
  assert_true(k == chime__key_make(5, 1));
  fill(buf, 4, 2);
  assert_int_equal(chime__table_insert(t, buf, 2, NULL, &k, NULL, NULL), 0);
  assert_true(k == chime__key_make(5, 4));
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 5; j++) {
    assert_true(s.ws.info[j].key == chime__key_make(5, 1 + j));
    assert_int_equal(((const uint8_t *)s.ws.leaf[1])[j], 1 + j); /* its bytes */
  }
  free(s.mem);
  chime__table_destroy(t);
  /* A shard past 16 bits is no table's. */
  tc.shard = 65536;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
}

/* Keys never wrap into the next shard's: a table whose next key is near
 * its shard's last count takes a request only if every sample's key fits
 * (CHIME_EOVERFLOW, nothing inserted, otherwise), and issues the last
 * count itself. Shard 0 too: its next key would be shard 1's first. */
static void test_keys_run_out(void **state) {
  const uint32_t shards[] = {2, 0, 65535};
  (void)state;
  for (size_t i = 0; i < sizeof(shards) / sizeof(shards[0]); i++) {
    chime__table_config_t tc;
    chime__table_t *t;
    chime__table_stats_t st;
    uint8_t buf[8 * SB];
    uint64_t k = 0, max = CHIME__KEY_MAX_COUNT;
    make_cfg(&tc, 8, CHIME__SELECTOR_UNIFORM, 1);
    tc.shard = shards[i];
    assert_int_equal(chime__table_create(&t, &tc), 0);
    /* Where a restored checkpoint would leave it. */
    chime__table_restore_counts(t, chime__key_make(shards[i], max - 2), 0, 0, 0,
                                0, 0);
    fill(buf, 1, 4);
    assert_int_equal(chime__table_insert(t, buf, 4, NULL, &k, NULL, NULL),
                     CHIME_EOVERFLOW);
    chime__table_get_stats(t, &st);
    assert_int_equal(st.size, 0);
    assert_int_equal(st.inserts, 0);
    assert_int_equal(chime__table_insert(t, buf, 3, NULL, &k, NULL, NULL), 0);
    assert_true(k == chime__key_make(shards[i], max - 2));
    assert_int_equal(chime__table_insert(t, buf, 1, NULL, &k, NULL, NULL),
                     CHIME_EOVERFLOW);
    /* The last count is an item like any. */
    chime__table_mutated_t m;
    uint64_t last = chime__key_make(shards[i], max);
    double p = 2.0;
    assert_int_equal(chime__table_mutate(t, &last, &p, 1, NULL, 0, &m), 0);
    assert_int_equal(m.updated, 1);
    chime__table_get_stats(t, &st);
    assert_int_equal(st.size, 3);
    chime__table_destroy(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_order_and_wrap),
      cmocka_unit_test(test_uniform_evicts_oldest),
      cmocka_unit_test(test_fifo_full_waits_for_sampler),
      cmocka_unit_test(test_blocked_insert_aborts),
      cmocka_unit_test(test_fifo_insert_all_or_nothing),
      cmocka_unit_test(test_sample_waits_for_min_size),
      cmocka_unit_test(test_fifo_batch_taken_whole),
      cmocka_unit_test(test_resent_request_acked_not_inserted),
      cmocka_unit_test(test_resend_older_than_window_refused),
      cmocka_unit_test(test_forgotten_writer_refused),
      cmocka_unit_test(test_resend_into_full_fifo_does_not_wait),
      cmocka_unit_test(test_rows_never_torn),
      cmocka_unit_test(test_uniform_distribution),
      cmocka_unit_test(test_prioritized_distribution),
      cmocka_unit_test(test_lifo_is_a_stack),
      cmocka_unit_test(test_heaps_in_priority_order),
      cmocka_unit_test(test_max_times_sampled_exact),
      cmocka_unit_test(test_evictions_follow_remover),
      cmocka_unit_test(test_bad_priorities_refused),
      cmocka_unit_test(test_priority_sum_stays_finite),
      cmocka_unit_test(test_batch_drawn_ahead_same_draws),
      cmocka_unit_test(test_keys_carry_shard),
      cmocka_unit_test(test_keys_run_out),
      cmocka_unit_test(test_mass),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
