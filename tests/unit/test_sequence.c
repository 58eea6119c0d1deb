/* Sequence tables in process: every sampled window is sequence_length
 * consecutive steps of one episode (each step's bytes say its episode and
 * index) across interleaved episodes of several writers and through
 * eviction; step storage is capacity_steps steps whatever the overlap;
 * padded windows and their mask, dropped short tails; initial priority
 * "max", max_times_sampled and MutatePriorities on windows; resent
 * requests appended once; step and window keys carrying the table's shard,
 * and appends refused rather than run into the next shard's keys. */
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
#include "common/key.h"
#include "replay/steps.h"
#include "replay/table.h"
#include "seq_steps.h"
#include "table_slot.h"

static void make_cfg(chime__table_config_t *tc, uint64_t steps, uint32_t t,
                     uint32_t stride, int pad, chime__selector_kind_t s) {
  seq_table_cfg(tc, "seq", steps, t, stride, pad, s);
}

/* Checks window j of a sampled batch: T (or info.length, then zeros and a
 * mask) consecutive steps of one episode from info.first_step. Returns the
 * steps' tag. */
static uint32_t check_window(const slot_t *s, const chime__table_t *t,
                             uint32_t j) {
  const chime__table_config_t *tc = chime__table_config(t);
  uint32_t tl = tc->sequence_length;
  const chime_sample_info_t *in = &s->ws.info[j];
  const uint32_t *id = (const uint32_t *)s->ws.leaf[0] + (size_t)j * tl * 2;
  const uint8_t *x = (const uint8_t *)s->ws.leaf[1] + (size_t)j * tl * 3;
  uint32_t tag = id[0];
  assert_true(in->episode_id >= 1);
  assert_true(in->length >= 1 && in->length <= tl);
  if (!tc->episode_pad)
    assert_int_equal(in->length, tl);
  assert_int_equal(in->first_step % tc->stride, 0);
  for (uint32_t i = 0; i < tl; i++) {
    if (i < in->length) {
      assert_int_equal(id[2 * i], tag);
      assert_int_equal(id[2 * i + 1], in->first_step + i);
      for (int b = 0; b < 3; b++)
        assert_int_equal(
            x[3 * i + b],
            (uint8_t)(tag * 31 + (in->first_step + i) * 7 + (uint32_t)b));
    } else {
      assert_int_equal(id[2 * i], 0);
      assert_int_equal(id[2 * i + 1], 0);
      assert_int_equal(x[3 * i], 0);
    }
    if (tc->episode_pad) {
      const uint8_t *m = (const uint8_t *)s->ws.leaf[2] + (size_t)j * tl;
      assert_int_equal(m[i], i < in->length ? 1 : 0);
    }
  }
  return tag;
}

static uint32_t rnd(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return (uint32_t)(*x >> 11);
}

/* Three writers' episodes interleaved, many times the capacity: every
 * window sampled (uniform) holds one episode's consecutive steps, and an
 * episode id always names the same episode. */
static void check_interleaved(int pad, chime__selector_kind_t sampler) {
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 8, 4, pad, sampler);
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_t s;
  slot_init(&s, t, 16);
  seq_writer_t w[3] = {{101, 0, 1, 0}, {202, 0, 2, 0}, {303, 0, 3, 0}};
  uint64_t seed = 88172645463325252ull, ep_tag[4096] = {0};
  uint32_t sampled = 0;
  for (int round = 0; round < 3000; round++) {
    seq_writer_t *wr = &w[rnd(&seed) % 3];
    uint32_t n = 1 + rnd(&seed) % 9;
    int end = wr->len + n >= 5 + (wr->tag % 53) ? 1 : 0;
    assert_int_equal(seq_append(t, wr, n, end), 0);
    chime__table_stats_t st;
    chime__table_get_stats(t, &st);
    assert_true(st.steps <= 256);
    assert_true(st.size <= st.steps);
    if (st.size == 0)
      continue;
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 16; j++) {
      uint32_t tag = check_window(&s, t, j);
      uint64_t e = s.ws.info[j].episode_id;
      assert_true(e < 4096);
      if (ep_tag[e] == 0)
        ep_tag[e] = tag;
      assert_int_equal(ep_tag[e], tag);
      sampled++;
    }
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_true(st.steps_inserted > 10 * 256); /* evicted many times over */
  assert_true(sampled > 10000);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_interleaved_uniform(void **state) {
  (void)state;
  check_interleaved(0, CHIME__SELECTOR_UNIFORM);
}

static void test_interleaved_padded_prioritized(void **state) {
  (void)state;
  check_interleaved(1, CHIME__SELECTOR_PRIORITIZED);
}

/* Whatever the overlap (stride 1 makes T windows cover each step), step
 * storage is capacity_steps steps (rounded up to whole blocks), and the
 * table's memory is far below items x T steps. */
static void test_storage_is_steps(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 1000, 80, 1, 0, CHIME__SELECTOR_UNIFORM);
  assert_int_equal(chime__table_create(&t, &tc), 0);
  seq_writer_t w = {7, 0, 1, 0};
  for (int i = 0; i < 15; i++)
    assert_int_equal(seq_append(t, &w, 64, 0), 0); /* 960 steps, one episode */
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  uint32_t k = chime__steps_block(1000, SEQ_STEP);
  uint64_t slots = (1000 + k - 1) / k * k;
  assert_int_equal(st.step_bytes, slots * SEQ_STEP);
  assert_true(slots < 1000 + k);
  assert_int_equal(st.steps, 960);
  assert_int_equal(st.size, 960 - 80 + 1); /* a window every step */
  assert_int_equal(st.episodes_open, 1);
  /* A table's memory is its steps and per-item bookkeeping, never items x
   * T steps (here 10^5 x 80 x 11 bytes = 88 MB). */
  tc.capacity_steps = 100000;
  uint64_t bytes = chime__table_bytes(&tc);
  assert_true(bytes >= 100000u * SEQ_STEP);
  assert_true(bytes < 100000u * 80u * SEQ_STEP / 4);
  chime__table_destroy(t);
}

/* Drains a fifo (max_times_sampled 1) table one window at a time into
 * firsts/lens; returns how many. */
static uint32_t drain(chime__table_t *t, slot_t *s, uint32_t *firsts,
                      uint32_t *lens, uint32_t max) {
  uint32_t n = 0;
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  while (st.size > 0 && n < max) {
    assert_int_equal(chime__table_sample(t, &s->lay, &s->ws, NULL), 0);
    check_window(s, t, 0);
    firsts[n] = s->ws.info[0].first_step;
    lens[n++] = s->ws.info[0].length;
    chime__table_get_stats(t, &st);
  }
  return n;
}

static void test_pad_and_mask(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 4, 2, 1, CHIME__SELECTOR_FIFO);
  tc.max_times_sampled = 1;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  const chime_spec_t *sp = chime__table_item_spec(t);
  assert_int_equal(sp->nleaves, 3);
  assert_string_equal(sp->leaves[0].name, "id");
  assert_int_equal(sp->leaves[0].ndim, 2);
  assert_int_equal(sp->leaves[0].shape[0], 4);
  assert_int_equal(sp->leaves[0].shape[1], 2);
  assert_string_equal(sp->leaves[2].name, "mask");
  assert_int_equal(sp->leaves[2].dtype, CHIME_DTYPE_U8);
  assert_int_equal(sp->leaves[2].shape[0], 4);
  slot_t s;
  slot_init(&s, t, 1);
  seq_writer_t w = {9, 0, 1, 0};
  uint32_t f[16], l[16];
  /* A short episode: one padded window. */
  assert_int_equal(seq_append(t, &w, 3, 1), 0);
  assert_int_equal(drain(t, &s, f, l, 16), 1);
  assert_int_equal(f[0], 0);
  assert_int_equal(l[0], 3);
  /* 7 steps: windows at 0 and 2 cover 6, the tail makes one at 4 of 3. */
  assert_int_equal(seq_append(t, &w, 5, 0), 0);
  assert_int_equal(seq_append(t, &w, 2, 1), 0);
  assert_int_equal(drain(t, &s, f, l, 16), 3);
  assert_int_equal(f[0], 0);
  assert_int_equal(l[0], 4);
  assert_int_equal(f[1], 2);
  assert_int_equal(l[1], 4);
  assert_int_equal(f[2], 4);
  assert_int_equal(l[2], 3);
  /* 6 steps: covered exactly, no padded window. */
  assert_int_equal(seq_append(t, &w, 6, 1), 0);
  assert_int_equal(drain(t, &s, f, l, 16), 2);
  assert_int_equal(l[0], 4);
  assert_int_equal(l[1], 4);
  /* An end with no steps (the episode already had its windows). */
  assert_int_equal(seq_append(t, &w, 4, 0), 0);
  assert_int_equal(seq_append(t, &w, 0, 1), 0);
  assert_int_equal(drain(t, &s, f, l, 16), 1);
  free(s.mem);
  chime__table_destroy(t);
}

static void test_drop(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 4, 2, 0, CHIME__SELECTOR_FIFO);
  tc.max_times_sampled = 1;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  assert_int_equal(chime__table_item_spec(t)->nleaves, 2); /* no mask */
  slot_t s;
  slot_init(&s, t, 1);
  seq_writer_t w = {9, 0, 1, 0};
  uint32_t f[16], l[16];
  assert_int_equal(seq_append(t, &w, 3, 1), 0); /* short: no item */
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.steps, 3);
  assert_int_equal(seq_append(t, &w, 7, 1), 0); /* windows at 0 and 2 only */
  assert_int_equal(drain(t, &s, f, l, 16), 2);
  assert_int_equal(f[0], 0);
  assert_int_equal(f[1], 2);
  free(s.mem);
  chime__table_destroy(t);
}

/* initial_priority "max": a window takes the largest priority seen;
 * MutatePriorities by key on windows; max_times_sampled removes them. */
static void test_priorities_and_mts(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 4, 4, 0, CHIME__SELECTOR_MAX_HEAP);
  tc.initial_priority_max = 1;
  tc.max_times_sampled = 2;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_t s;
  slot_init(&s, t, 1);
  seq_writer_t w = {5, 0, 1, 0};
  assert_int_equal(seq_append(t, &w, 12, 0), 0); /* keys 1, 2, 3 */
  uint64_t keys[2] = {2, 3};
  double pr[2] = {5.0, 0.5};
  chime__table_mutated_t m;
  assert_int_equal(chime__table_mutate(t, keys, pr, 2, NULL, 0, &m), 0);
  assert_int_equal(m.updated, 2);
  assert_int_equal(seq_append(t, &w, 4, 0), 0); /* key 4 takes priority 5 */
  /* max heap, ties oldest first: 2 (5.0) twice, then 4 (5.0) twice. */
  uint64_t want[4] = {2, 2, 4, 4};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    check_window(&s, t, 0);
    assert_int_equal(s.ws.info[0].key, want[i]);
    assert_true(s.ws.info[0].priority == 5.0);
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 2); /* 2 and 4 left after two samples each */
  assert_int_equal(st.left, 2);
  /* A deleted window leaves; its steps stay for the windows over them. */
  uint64_t del = 1;
  assert_int_equal(chime__table_mutate(t, NULL, NULL, 0, &del, 1, &m), 0);
  assert_int_equal(m.deleted, 1);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 1);
  assert_int_equal(st.steps, 16);
  free(s.mem);
  chime__table_destroy(t);
}

/* A request resent (same writer and seq) is acked again, not appended
 * again, and does not end the episode twice; no writer id is refused. */
static void test_resend_and_writer(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 4, 4, 1, CHIME__SELECTOR_UNIFORM);
  assert_int_equal(chime__table_create(&t, &tc), 0);
  uint8_t buf[8 * SEQ_STEP];
  for (uint32_t i = 0; i < 8; i++)
    seq_step_bytes(buf + i * SEQ_STEP, 1, i);
  uint64_t k1, k2;
  chime__dedupe_req_t dq = {.writer = 77, .seq = 1, .end_episode = 1};
  assert_int_equal(chime__table_insert(t, buf, 6, NULL, &k1, NULL, &dq), 0);
  chime__dedupe_req_t again = {.writer = 77, .seq = 1, .end_episode = 1};
  assert_int_equal(chime__table_insert(t, buf, 6, NULL, &k2, NULL, &again), 0);
  assert_int_equal(again.resent, 1);
  assert_int_equal(k1, k2);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.steps, 6);
  assert_int_equal(st.size, 2); /* 0..3 and the padded 4..5 */
  assert_int_equal(st.episodes_open, 0);
  assert_int_equal(chime__table_insert(t, buf, 1, NULL, &k1, NULL, NULL),
                   CHIME_EINVAL);
  double p = 1.0;
  chime__dedupe_req_t dq2 = {.writer = 78, .seq = 1};
  assert_int_equal(chime__table_insert(t, buf, 1, &p, &k1, NULL, &dq2),
                   CHIME_EINVAL);
  chime__table_destroy(t);
}

/* A writer that stops mid-episode (killed): its complete windows are
 * sampled whole, its tail never, and its steps leave in their turn. */
static void test_abandoned_episode(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 128, 8, 8, 1, CHIME__SELECTOR_FIFO);
  tc.max_times_sampled = 1;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_t s;
  slot_init(&s, t, 1);
  seq_writer_t dead = {1, 0, 1, 0}, live = {2, 0, 2, 0};
  assert_int_equal(seq_append(t, &dead, 13, 0),
                   0); /* one window, 5 steps left */
  uint32_t f[64], l[64];
  assert_int_equal(drain(t, &s, f, l, 64), 1);
  assert_int_equal(l[0], 8);
  for (int i = 0; i < 40; i++)
    assert_int_equal(seq_append(t, &live, 8, 0), 0); /* evicts the dead one's */
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_true(st.steps <= 128);
  assert_int_equal(st.episodes_open, 2);
  while (st.size > 0) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    assert_int_equal(check_window(&s, t, 0), 2);
    assert_int_equal(s.ws.info[0].length, 8);
    chime__table_get_stats(t, &st);
  }
  free(s.mem);
  chime__table_destroy(t);
}

/* More writers than lanes (max_writers), each ending its episode (a
 * writer per episode), beside a writer with an open call mid-episode: the
 * lanes of ended episodes make room, so the open episode goes on and ends
 * as one window (before: the least recently used lane went, open episode
 * and all). */
static void test_lanes_of_ended_episodes_go_first(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 8192, 8, 8, 1, CHIME__SELECTOR_UNIFORM); /* a block each */
  tc.max_writers = 4;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  seq_writer_t a = {1, 0, 1, 0};
  assert_int_equal(chime__table_writer_bind(t, a.id, 1, 0, NULL), 0);
  assert_int_equal(seq_append(t, &a, 3, 0), 0);
  for (uint64_t i = 0; i < 20; i++) {
    seq_writer_t e = {100 + i, 0, (uint32_t)(100 + i), 0};
    assert_int_equal(seq_append(t, &e, 8, 1), 0);
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.episodes_open, 1);
  assert_int_equal(st.size, 20);
  assert_int_equal(seq_append(t, &a, 5, 1), 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.episodes_open, 0);
  assert_int_equal(st.size, 21); /* a's 8 steps: one window, no padding */
  chime__table_writer_unbind(t, a.id, 1);
  chime__table_destroy(t);
}

/* The rate limiter counts windows: inserts of steps wait once the windows
 * made outrun samples by the window, and go on after a batch. */
static void test_rate_limiter(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 4, 4, 0, CHIME__SELECTOR_UNIFORM);
  tc.samples_per_insert = 1;
  tc.error_buffer = 2;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_t s;
  slot_init(&s, t, 2);
  uint8_t buf[4 * SEQ_STEP];
  uint64_t key, seq = 0;
  int busy = 0, i;
  for (i = 0; i < 20 && !busy; i++) {
    for (uint32_t j = 0; j < 4; j++)
      seq_step_bytes(buf + j * SEQ_STEP, 1, (uint32_t)i * 4 + j);
    chime__span_t sp = {buf, sizeof(buf)};
    chime__dedupe_req_t dq = {.writer = 3, .seq = ++seq};
    int rc = chime__table_try_insert_spans(t, &sp, 1, 4, NULL, NULL, &key, &dq);
    if (rc == CHIME_EBUSY) {
      busy = 1;
      seq--; /* not inserted: the same seq goes again */
      i--;
    } else {
      assert_int_equal(rc, 0);
    }
  }
  assert_true(busy); /* windows (one per request) outran the samples */
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.inserts, 3); /* min_size 1 + samples_per_insert x 2 */
  assert_int_equal(st.steps, 12);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  check_window(&s, t, 0);
  chime__span_t sp = {buf, sizeof(buf)};
  chime__dedupe_req_t dq = {.writer = 3, .seq = ++seq};
  for (uint32_t j = 0; j < 4; j++)
    seq_step_bytes(buf + j * SEQ_STEP, 1, (uint32_t)i * 4 + j);
  assert_int_equal(
      chime__table_try_insert_spans(t, &sp, 1, 4, NULL, NULL, &key, &dq), 0);
  free(s.mem);
  chime__table_destroy(t);
}

/* A writer thread keeps evicting the oldest blocks of a small store while
 * the test samples: windows are copied outside the lock (their first block
 * pinned, inserts that would reuse it wait), so every byte must still be
 * its window's. */
typedef struct {
  chime__table_t *t;
  atomic_int stop;
  atomic_int failed; /* an append failed: the writer stopped */
  _Atomic uint64_t appended;
} churn_t;

static void *churn_main(void *arg) {
  churn_t *c = arg;
  seq_writer_t w[3] = {{11, 0, 1, 0}, {12, 0, 2, 0}, {13, 0, 3, 0}};
  uint64_t seed = 12345;
  while (!atomic_load(&c->stop)) {
    seq_writer_t *wr = &w[rnd(&seed) % 3];
    uint32_t n = 1 + rnd(&seed) % 7;
    int end = wr->len + n >= 9 + wr->tag % 31;
    if (seq_append(c->t, wr, n, end) != 0) {
      atomic_store(&c->failed, 1);
      break;
    }
    atomic_fetch_add(&c->appended, n);
  }
  return NULL;
}

static void test_copy_while_evicting(void **state) {
  (void)state;
  chime__table_config_t tc;
  churn_t c = {0};
  make_cfg(&tc, 128, 8, 2, 1, CHIME__SELECTOR_UNIFORM);
  assert_int_equal(chime__table_create(&c.t, &tc), 0);
  slot_t s;
  slot_init(&s, c.t, 16);
  seq_writer_t first = {10, 0, 4, 0};
  assert_int_equal(seq_append(c.t, &first, 8, 0), 0); /* min_size */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, churn_main, &c), 0);
  /* At least 10,000 batches, and on until the writer went round the
   * store a few times meanwhile (a busy machine may run it late): the
   * copies must have raced evictions, whatever the scheduling. */
  for (int i = 0; i < 10000 || atomic_load(&c.appended) <= 4 * 128; i++) {
    assert_false(atomic_load(&c.failed));
    assert_int_equal(chime__table_sample(c.t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 16; j++)
      check_window(&s, c.t, j);
  }
  atomic_store(&c.stop, 1);
  pthread_join(th, NULL);
  assert_false(atomic_load(&c.failed));
  assert_true(atomic_load(&c.appended) > 4 * 128); /* it did evict */
  free(s.mem);
  chime__table_destroy(c.t);
}

/* Windows a batch took out (fifo, max_times_sampled 1) come back when the
 * batch is given back from its pinned rows, in order, with their keys; a
 * window whose steps left meanwhile does not. */
static void test_give_back(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 64, 4, 4, 1, CHIME__SELECTOR_FIFO);
  tc.max_times_sampled = 1;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_t s;
  slot_init(&s, t, 3);
  slot_pin(&s);
  seq_writer_t wr = {21, 0, 1, 0};
  assert_int_equal(seq_append(t, &wr, 16, 0), 0); /* windows 0, 4, 8, 12 */
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  uint64_t keys[3];
  for (uint32_t j = 0; j < 3; j++) {
    check_window(&s, t, j);
    keys[j] = s.ws.info[j].key;
    assert_int_equal(s.ws.info[j].first_step, 4 * j);
  }
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 1);
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 4);
  assert_int_equal(st.returned, 3);
  memset(s.mem, 0xee, s.lay.slot_bytes);
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  for (uint32_t j = 0; j < 3; j++) {
    check_window(&s, t, j);
    assert_int_equal(s.ws.info[j].key, keys[j]);
    assert_int_equal(s.ws.info[j].first_step, 4 * j);
  }
  /* Taken again, then 64 steps of another episode evict them all: a
   * give-back now brings nothing back. */
  seq_writer_t other = {22, 0, 2, 0};
  for (int i = 0; i < 4; i++)
    assert_int_equal(seq_append(t, &other, 16, 0), 0);
  chime__table_get_stats(t, &st);
  uint64_t size = st.size;
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, size);
  assert_int_equal(st.returned, 3);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* Short episodes of one writer share its blocks: a store of 256 steps
 * holds nearly 256 steps of 3-step episodes, not a block per episode, and
 * their padded windows are whole and come back when given back. */
static void test_short_episodes_share_blocks(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  make_cfg(&tc, 256, 4, 2, 1, CHIME__SELECTOR_FIFO);
  tc.max_times_sampled = 1;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  slot_t s;
  slot_init(&s, t, 8);
  slot_pin(&s);
  seq_writer_t w = {31, 0, 1, 0};
  for (int i = 0; i < 100; i++)
    assert_int_equal(seq_append(t, &w, 3, 1), 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  uint32_t k = chime__steps_block(256, SEQ_STEP);
  assert_true(st.steps > 256 - k && st.steps <= 256);
  assert_int_equal(st.size, st.steps / 3); /* one window an episode */
  assert_int_equal(st.episodes_open, 0);
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  for (uint32_t j = 0; j < 8; j++) {
    check_window(&s, t, j);
    assert_int_equal(s.ws.info[j].length, 3);
  }
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_stats_t st2;
  chime__table_get_stats(t, &st2);
  assert_int_equal(st2.size, st.size);
  assert_int_equal(st2.returned, 8);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* The most windows a store holds at once (chime__table_max_items): one
 * long episode appended a step at a time (drop), or episodes of one step
 * each (pad), reach it exactly and never pass it. A batch of more with
 * max_times_sampled could never be filled: refused (CHIME_EINVAL), where
 * it waited for ever; without it a batch may draw windows again and goes.
 * (capacity_steps 64 of 4-step blocks, T 16, stride 16: 4 windows, not
 * the 64 Subscribe compared batch_size with.) */
static void test_max_windows(void **state) {
  (void)state;
  static const struct {
    uint64_t steps;
    uint32_t t, stride;
    int pad;
  } c[] = {
      {64, 16, 16, 0}, {64, 16, 5, 0},  {100, 7, 3, 0},
      {256, 8, 8, 0},  {64, 16, 16, 1}, {50, 40, 1, 0},
  };
  for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
    chime__table_config_t tc;
    chime__table_t *t;
    make_cfg(&tc, c[i].steps, c[i].t, c[i].stride, c[i].pad,
             CHIME__SELECTOR_UNIFORM);
    tc.max_times_sampled = 1;
    uint64_t most = chime__table_max_items(&tc);
    assert_true(most >= 1 && most <= c[i].steps);
    assert_int_equal(chime__table_create(&t, &tc), 0);
    seq_writer_t w = {7, 0, 1, 0};
    uint64_t seen = 0;
    for (uint64_t n = 0; n < 4 * c[i].steps; n++) {
      assert_int_equal(seq_append(t, &w, 1, c[i].pad), 0);
      chime__table_stats_t st;
      chime__table_get_stats(t, &st);
      assert_true(st.size <= most);
      seen = st.size > seen ? st.size : seen;
    }
    if (seen != most)
      fail_msg("case %zu: at most %llu windows, %llu expected", i,
               (unsigned long long)seen, (unsigned long long)most);
    slot_t s;
    slot_init(&s, t, (uint32_t)most + 1);
    chime__table_waiter_t wt;
    memset(&wt, 0, sizeof(wt));
    assert_int_equal(chime__table_try_sample(t, &s.lay, &s.ws, &wt),
                     CHIME_EINVAL);
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), CHIME_EINVAL);
    free(s.mem);
    chime__table_destroy(t);
    tc.max_times_sampled = 0; /* draws may repeat: a batch of more goes */
    assert_int_equal(chime__table_create(&t, &tc), 0);
    w.seq = 0;
    for (uint64_t n = 0; n < c[i].steps; n++)
      assert_int_equal(seq_append(t, &w, 1, c[i].pad), 0);
    slot_init(&s, t, (uint32_t)most + 1);
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    free(s.mem);
    chime__table_destroy(t);
  }
}

/* A sequence table of shard 3: the acks' step keys and the windows' keys
 * are shard 3's; an append whose steps (or the windows they may make: one
 * a step, one more for a padded tail) would run past the shard's last
 * count is refused whole (CHIME_EOVERFLOW). */
static void test_keys_carry_shard(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  uint64_t max = CHIME__KEY_MAX_COUNT;
  make_cfg(&tc, 256, 4, 4, 1, CHIME__SELECTOR_FIFO);
  tc.shard = 3;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  uint8_t buf[8 * SEQ_STEP];
  for (uint32_t i = 0; i < 8; i++)
    seq_step_bytes(buf + i * SEQ_STEP, 1, i);
  uint64_t k;
  chime__dedupe_req_t dq = {.writer = 9, .seq = 1, .end_episode = 1};
  assert_int_equal(chime__table_insert(t, buf, 6, NULL, &k, NULL, &dq), 0);
  assert_true(k == chime__key_make(3, 1)); /* steps 1..6 */
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.steps_inserted, 6); /* a count, not the next key */
  slot_t s;
  slot_init(&s, t, 2);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  assert_true(s.ws.info[0].key == chime__key_make(3, 1));
  assert_true(s.ws.info[1].key == chime__key_make(3, 2)); /* padded 4..5 */
  free(s.mem);
  /* Step keys: 2 left, 3 steps refused, 2 taken. */
  chime__table_restore_seq_counts(t, chime__key_make(3, max - 1), 1.0, 0);
  chime__dedupe_req_t d2 = {.writer = 9, .seq = 2};
  assert_int_equal(chime__table_insert(t, buf, 3, NULL, &k, NULL, &d2),
                   CHIME_EOVERFLOW);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.steps, 6);
  chime__dedupe_req_t d3 = {.writer = 9, .seq = 3};
  assert_int_equal(chime__table_insert(t, buf, 2, NULL, &k, NULL, &d3), 0);
  assert_true(k == chime__key_make(3, max - 1));
  /* Window keys: 3 left covers 2 steps and a padded tail, not 3 steps. */
  chime__table_restore_seq_counts(t, chime__key_make(3, 100), 1.0, 0);
  chime__table_restore_counts(t, chime__key_make(3, max - 2), 0, 0, 0, 0, 0);
  chime__dedupe_req_t d4 = {.writer = 9, .seq = 4};
  assert_int_equal(chime__table_insert(t, buf, 3, NULL, &k, NULL, &d4),
                   CHIME_EOVERFLOW);
  chime__dedupe_req_t d5 = {.writer = 9, .seq = 5, .end_episode = 1};
  assert_int_equal(chime__table_insert(t, buf, 2, NULL, &k, NULL, &d5), 0);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_interleaved_uniform),
      cmocka_unit_test(test_interleaved_padded_prioritized),
      cmocka_unit_test(test_storage_is_steps),
      cmocka_unit_test(test_pad_and_mask),
      cmocka_unit_test(test_drop),
      cmocka_unit_test(test_priorities_and_mts),
      cmocka_unit_test(test_resend_and_writer),
      cmocka_unit_test(test_abandoned_episode),
      cmocka_unit_test(test_lanes_of_ended_episodes_go_first),
      cmocka_unit_test(test_rate_limiter),
      cmocka_unit_test(test_copy_while_evicting),
      cmocka_unit_test(test_give_back),
      cmocka_unit_test(test_short_episodes_share_blocks),
      cmocka_unit_test(test_keys_carry_shard),
      cmocka_unit_test(test_max_windows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
