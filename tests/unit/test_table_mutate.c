/* Selectors after MutatePriorities and deletes, on the table itself
 * (chime__table_*): prioritized and uniform draws fit the weights of the
 * items left (chi-square, fixed seeds, a fixed threshold) with each
 * sample's probability, priority and table size exact; fifo, lifo and
 * heap orders are exact; removers evict by the new priorities; keys that
 * left are unknown; a refused request changes nothing; a key of another
 * shard refuses the whole request (never a silent no-op); deletes while a
 * sampler copies rows tear none. The samples' bytes are their keys, so
 * every draw also checks its row. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/table.h"
#include "table_slot.h"
#include "rng.h"

#define MAXKEYS 4096

/* What the test believes the table holds, by key. */
typedef struct {
  chime__table_t *t;
  double exponent;
  uint64_t next_key;
  int live[MAXKEYS];
  double prio[MAXKEYS];
  uint64_t order[MAXKEYS]; /* heaps: insert or last update, earlier first */
  uint64_t clock;
} model_t;

static void model_open(model_t *m, uint64_t cap, chime__selector_kind_t sampler,
                       chime__selector_kind_t remover, uint64_t mts,
                       double exponent) {
  chime__table_config_t tc;
  memset(m, 0, sizeof(*m));
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "m");
  assert_int_equal(chime_spec_parse(&tc.spec, "k:u64[]"), 0);
  tc.capacity = cap;
  tc.min_size = 1;
  tc.sampler = sampler;
  tc.remover = remover;
  tc.max_times_sampled = mts;
  tc.priority_exponent = exponent;
  tc.seed = 4242;
  assert_int_equal(chime__table_create(&m->t, &tc), 0);
  m->exponent = exponent;
  m->next_key = 1;
}

static uint64_t model_size(const model_t *m) {
  uint64_t n = 0;
  for (uint64_t k = 1; k < m->next_key; k++)
    n += (uint64_t)m->live[k];
  return n;
}

/* Inserts n items with priorities prio (NULL: 1.0); the caller marks
 * what the table's remover evicts, if anything. */
static uint64_t model_insert(model_t *m, uint32_t n, const double *prio) {
  uint64_t *data = malloc(n * sizeof(uint64_t));
  uint64_t first;
  assert_non_null(data);
  assert_true(m->next_key + n < MAXKEYS);
  for (uint32_t i = 0; i < n; i++)
    data[i] = m->next_key + i;
  assert_int_equal(chime__table_insert(m->t, (const uint8_t *)data, n, prio,
                                       &first, NULL, NULL),
                   0);
  assert_int_equal(first, m->next_key);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t k = m->next_key++;
    m->live[k] = 1;
    m->prio[k] = prio != NULL ? prio[i] : 1.0;
    m->order[k] = m->clock++;
  }
  free(data);
  return first;
}

/* A mutate the model predicts exactly: updates then deletes. */
static void model_mutate(model_t *m, const uint64_t *keys, const double *prio,
                         size_t nup, const uint64_t *dels, size_t ndel) {
  chime__table_mutated_t r;
  uint32_t up = 0, gone = 0, unknown = 0;
  assert_int_equal(chime__table_mutate(m->t, keys, prio, nup, dels, ndel, &r),
                   0);
  for (size_t i = 0; i < nup; i++) {
    if (keys[i] < MAXKEYS && m->live[keys[i]]) {
      m->prio[keys[i]] = prio[i];
      m->order[keys[i]] = m->clock++;
      up++;
    } else {
      unknown++;
    }
  }
  for (size_t i = 0; i < ndel; i++) {
    if (dels[i] < MAXKEYS && m->live[dels[i]]) {
      m->live[dels[i]] = 0;
      gone++;
    } else {
      unknown++;
    }
  }
  assert_int_equal(r.updated, up);
  assert_int_equal(r.deleted, gone);
  assert_int_equal(r.unknown, unknown);
}

static double model_weight(const model_t *m, uint64_t k) {
  return m->exponent == 1.0 ? m->prio[k] : pow(m->prio[k], m->exponent);
}

/* One batch; every sample's bytes are its key, a live one, its info's
 * priority the current one. */
static void slot_sample(slot_t *s, const model_t *m) {
  assert_int_equal(chime__table_sample(m->t, &s->lay, &s->ws, NULL), 0);
  const uint64_t *data = (const uint64_t *)s->ws.leaf[0];
  for (uint32_t j = 0; j < s->lay.batch_size; j++) {
    uint64_t k = s->ws.info[j].key;
    assert_int_equal(data[j], k);
    assert_true(k > 0 && k < m->next_key);
    if (!m->live[k])
      fail_msg("sample %u: key %llu left the table", j, (unsigned long long)k);
    assert_true(s->ws.info[j].priority == m->prio[k]);
  }
}

/* Draws `draws` samples (no max_times_sampled) and checks them against the
 * model's weights: a key of weight 0 (or gone) never drawn, each sample's
 * probability weight / sum (1 / size when every weight is 0) to 1e-12 and
 * its table_size, and the counts a chi-square below df + 5 sqrt(2 df)
 * (p ~ 1e-6 for a correct sampler; the seed is fixed, so the figure is
 * the same every run). uniform: weight 1 for every live key. */
static void check_draws(const model_t *m, int uniform, uint32_t draws) {
  slot_t s;
  uint64_t *count = calloc(MAXKEYS, sizeof(uint64_t));
  double *w = calloc(MAXKEYS, sizeof(double));
  double sum = 0;
  uint64_t size = model_size(m);
  assert_non_null(count);
  assert_non_null(w);
  for (uint64_t k = 1; k < m->next_key; k++) {
    w[k] = !m->live[k] ? 0 : uniform ? 1 : model_weight(m, k);
    sum += w[k];
  }
  if (sum == 0) /* every weight 0: the draw is uniform */
    for (uint64_t k = 1; k < m->next_key; k++)
      sum += w[k] = m->live[k];
  slot_init(&s, m->t, 256);
  for (uint32_t b = 0; b < draws / 256; b++) {
    slot_sample(&s, m);
    for (uint32_t j = 0; j < 256; j++) {
      uint64_t k = s.ws.info[j].key;
      count[k]++;
      double want = w[k] / sum, got = s.ws.info[j].probability;
      if (!(fabs(got - want) <= 1e-12 * want))
        fail_msg("key %llu: probability %.17g, want %.17g",
                 (unsigned long long)k, got, want);
      assert_int_equal(s.ws.info[j].table_size, size);
    }
  }
  /* Keys expected fewer than 10 times share one bin, so that a rare key
   * drawn once does not dominate the figure. */
  double chi2 = 0, n = (double)(draws / 256 * 256), pe = 0, pc = 0;
  int df = -1;
  for (uint64_t k = 1; k < m->next_key; k++) {
    if (w[k] == 0) {
      if (count[k] != 0)
        fail_msg("key %llu of weight 0 drawn %llu times", (unsigned long long)k,
                 (unsigned long long)count[k]);
      continue;
    }
    double e = n * w[k] / sum;
    if (e < 10) {
      pe += e;
      pc += (double)count[k];
      continue;
    }
    chi2 += ((double)count[k] - e) * ((double)count[k] - e) / e;
    df++;
  }
  if (pe > 0) {
    chi2 += (pc - pe) * (pc - pe) / pe;
    df++;
  }
  assert_true(df >= 0);
  printf("chi-square %.1f, %d degrees of freedom\n", chi2, df);
  if (df > 0 && chi2 > df + 5 * sqrt(2.0 * df)) /* df 0: nothing to fit */
    fail_msg("chi-square %.1f over %d degrees of freedom", chi2, df);
  free(s.mem);
  free(count);
  free(w);
}

/* n random priorities: a fifth 0, the rest spread over 1e-3 .. 1e3. */
static void random_prio(uint64_t *seed, double *p, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    p[i] = chime__rng_next(seed) % 5 == 0
               ? 0
               : pow(10, (double)(chime__rng_next(seed) % 6000) / 1000.0 - 3);
}

/* Updates nup random keys (live or not) and deletes ndel, through the
 * model. */
static void random_mutate(model_t *m, uint64_t *seed, uint32_t nup,
                          uint32_t ndel) {
  uint64_t *keys = malloc((nup + 1) * sizeof(uint64_t));
  uint64_t *dels = malloc((ndel + 1) * sizeof(uint64_t));
  double *prio = malloc((nup + 1) * sizeof(double));
  assert_true(keys != NULL && dels != NULL && prio != NULL);
  random_prio(seed, prio, nup);
  for (uint32_t i = 0; i < nup; i++)
    keys[i] = 1 + chime__rng_next(seed) % (m->next_key + 10); /* some unknown */
  for (uint32_t i = 0; i < ndel; i++)
    dels[i] = 1 + chime__rng_next(seed) % (m->next_key - 1);
  model_mutate(m, keys, prio, nup, dels, ndel);
  free(keys);
  free(dels);
  free(prio);
}

/* Prioritized, at several exponents, over a table large enough to span
 * several levels of the sum tree: after updates (to and from 0) and
 * deletes, after inserts into the rows the deletes freed, and with every
 * priority 0. */
static void test_prioritized_after_mutate(void **state) {
  (void)state;
  const double exps[] = {1.0, 0.6, 0.0};
  for (size_t e = 0; e < sizeof(exps) / sizeof(exps[0]); e++) {
    model_t *m = malloc(sizeof(*m));
    uint64_t seed = 99 + e;
    double prio[700];
    assert_non_null(m);
    model_open(m, 1000, CHIME__SELECTOR_PRIORITIZED, 0, 0, exps[e]);
    random_prio(&seed, prio, 700);
    model_insert(m, 700, prio);
    check_draws(m, 0, 200192);
    random_mutate(m, &seed, 300, 250);
    check_draws(m, 0, 200192);
    random_prio(&seed, prio, 200);
    model_insert(m, 200, prio); /* into rows the deletes freed */
    random_mutate(m, &seed, 100, 50);
    check_draws(m, 0, 200192);
    /* Every priority 0: uniform (exponent 0: 0^0 = 1, the same). */
    uint64_t keys[MAXKEYS];
    double zero[MAXKEYS] = {0};
    uint32_t n = 0;
    for (uint64_t k = 1; k < m->next_key; k++)
      if (m->live[k])
        keys[n++] = k;
    model_mutate(m, keys, zero, n, NULL, 0);
    check_draws(m, 0, 100096);
    /* One item left with a weight: only it is drawn. */
    model_mutate(m, keys, (double[]){2.5}, 1, NULL, 0);
    check_draws(m, 0, 2560);
    chime__table_destroy(m->t);
    free(m);
  }
}

/* Uniform after deletes (and updates, which it ignores): every key left
 * with probability 1 / size. */
static void test_uniform_after_deletes(void **state) {
  (void)state;
  model_t *m = malloc(sizeof(*m));
  uint64_t seed = 7;
  assert_non_null(m);
  model_open(m, 800, CHIME__SELECTOR_UNIFORM, 0, 0, 1.0);
  model_insert(m, 600, NULL);
  random_mutate(m, &seed, 100, 250);
  check_draws(m, 1, 150016);
  model_insert(m, 100, NULL);
  random_mutate(m, &seed, 0, 30);
  check_draws(m, 1, 150016);
  chime__table_destroy(m->t);
  free(m);
}

/* Drains a max_times_sampled 1 table in `n` draws and checks them against
 * want. */
static void drain_exact(model_t *m, uint32_t n, const uint64_t *want) {
  slot_t s;
  slot_init(&s, m->t, n);
  slot_sample(&s, m);
  for (uint32_t j = 0; j < n; j++) {
    if (s.ws.info[j].key != want[j])
      fail_msg("draw %u: key %llu, want %llu", j,
               (unsigned long long)s.ws.info[j].key,
               (unsigned long long)want[j]);
    assert_true(s.ws.info[j].probability == 1.0);
    m->live[want[j]] = 0;
  }
  free(s.mem);
}

/* The heap order the model predicts: by priority, then insert or last
 * update (Reverb's heap selectors: the least recently inserted or updated
 * of equal priorities). */
static uint32_t heap_order(const model_t *m, int max, uint64_t *out) {
  uint32_t n = 0;
  for (uint64_t k = 1; k < m->next_key; k++) {
    if (!m->live[k])
      continue;
    uint32_t i = n++;
    for (; i > 0; i--) {
      uint64_t o = out[i - 1];
      double a = max ? -m->prio[k] : m->prio[k];
      double b = max ? -m->prio[o] : m->prio[o];
      if (b < a || (b == a && m->order[o] < m->order[k]))
        break;
      out[i] = o;
    }
    out[i] = k;
  }
  return n;
}

static void test_heaps_after_mutate(void **state) {
  (void)state;
  for (int max = 0; max <= 1; max++) {
    model_t *m = malloc(sizeof(*m));
    uint64_t seed = 11 + (uint64_t)max, want[MAXKEYS];
    double prio[120];
    assert_non_null(m);
    model_open(m, 200,
               max ? CHIME__SELECTOR_MAX_HEAP : CHIME__SELECTOR_MIN_HEAP, 0, 1,
               1.0);
    /* Few distinct priorities: many ties, which updates reorder. */
    for (int i = 0; i < 120; i++)
      prio[i] = (double)(chime__rng_next(&seed) % 8);
    model_insert(m, 120, prio);
    for (int round = 0; round < 4; round++) {
      uint64_t keys[40], dels[15];
      double np[40];
      for (int i = 0; i < 40; i++) {
        keys[i] = 1 + chime__rng_next(&seed) % (m->next_key + 5);
        np[i] = (double)(chime__rng_next(&seed) % 8);
      }
      for (int i = 0; i < 15; i++)
        dels[i] = 1 + chime__rng_next(&seed) % (m->next_key - 1);
      model_mutate(m, keys, np, 40, dels, 15);
      /* Drain part of it exactly, then mutate again. */
      uint32_t n = heap_order(m, max, want);
      assert_true(n >= 10);
      drain_exact(m, 10, want);
    }
    uint32_t n = heap_order(m, max, want);
    assert_true(n > 0);
    drain_exact(m, n, want);
    chime__table_destroy(m->t);
    free(m);
  }
  /* Without a limit the top item is drawn every time, and follows an
   * update at once. */
  model_t *m = malloc(sizeof(*m));
  slot_t s;
  assert_non_null(m);
  model_open(m, 8, CHIME__SELECTOR_MAX_HEAP, 0, 0, 1.0);
  model_insert(m, 4, (double[]){1, 5, 3, 5});
  slot_init(&s, m->t, 3);
  slot_sample(&s, m);
  for (int j = 0; j < 3; j++)
    assert_int_equal(s.ws.info[j].key, 2);
  model_mutate(m, (uint64_t[]){2}, (double[]){5}, 1, NULL, 0);
  slot_sample(&s, m); /* 2 updated: now after 4 among the 5s */
  for (int j = 0; j < 3; j++)
    assert_int_equal(s.ws.info[j].key, 4);
  model_mutate(m, NULL, NULL, 0, (uint64_t[]){4}, 1);
  slot_sample(&s, m);
  for (int j = 0; j < 3; j++)
    assert_int_equal(s.ws.info[j].key, 2);
  free(s.mem);
  chime__table_destroy(m->t);
  free(m);
}

/* fifo and lifo keep insert order whatever the priorities; deleted items,
 * at the ends or in the middle, are skipped. */
static void test_fifo_lifo_after_deletes(void **state) {
  (void)state;
  uint64_t want[MAXKEYS];
  for (int lifo = 0; lifo <= 1; lifo++) {
    model_t *m = malloc(sizeof(*m));
    assert_non_null(m);
    model_open(m, 64, lifo ? CHIME__SELECTOR_LIFO : CHIME__SELECTOR_FIFO, 0, 1,
               1.0);
    model_insert(m, 20, NULL);
    model_mutate(m, (uint64_t[]){3, 20, 7}, (double[]){9, 0.5, 2}, 3,
                 (uint64_t[]){1, 20, 10, 11, 99}, 5);
    model_insert(m, 5, NULL); /* 21 .. 25 */
    model_mutate(m, NULL, NULL, 0, (uint64_t[]){25, 21}, 2);
    uint32_t n = 0;
    for (uint64_t i = 1; i < m->next_key; i++) {
      uint64_t k = lifo ? m->next_key - i : i;
      if (m->live[k])
        want[n++] = k;
    }
    assert_int_equal(n, 19);
    drain_exact(m, 7, want);
    /* Sampled out: unknown to a mutate now. */
    model_mutate(m, want, (double[]){1}, 1, want + 1, 1);
    drain_exact(m, n - 7, want + 7);
    chime__table_stats_t st;
    chime__table_get_stats(m->t, &st);
    assert_int_equal(st.size, 0);
    chime__table_destroy(m->t);
    free(m);
  }
}

/* Which keys are live: each probed with a delete of its own (destructive:
 * the end of a test). */
static void check_live(model_t *m) {
  for (uint64_t k = 1; k < m->next_key; k++) {
    chime__table_mutated_t r;
    assert_int_equal(chime__table_mutate(m->t, NULL, NULL, 0, &k, 1, &r), 0);
    if (r.deleted != (uint32_t)m->live[k])
      fail_msg("key %llu: %s", (unsigned long long)k,
               m->live[k] ? "evicted, should be live" : "live, should be gone");
  }
}

/* A full table's remover picks by the priorities a mutate set and skips
 * the items it deleted. */
static void test_removers_after_mutate(void **state) {
  (void)state;
  model_t *m = malloc(sizeof(*m));
  assert_non_null(m);
  /* min_heap: 2 becomes the lowest, then 4 (a tie with 1 that its update
   * puts after 1); 3 deleted makes room for one. */
  model_open(m, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_MIN_HEAP, 0, 1);
  model_insert(m, 4, (double[]){1, 5, 3, 4});
  model_mutate(m, (uint64_t[]){2, 4}, (double[]){0.5, 1}, 2, (uint64_t[]){3},
               1);
  model_insert(m, 3, (double[]){8, 8, 8}); /* evicts 2, then 1 */
  m->live[2] = m->live[1] = 0;
  check_live(m);
  chime__table_destroy(m->t);
  /* max_heap: the highest after the update. */
  model_open(m, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_MAX_HEAP, 0, 1);
  model_insert(m, 4, (double[]){9, 1, 2, 3});
  model_mutate(m, (uint64_t[]){1, 3}, (double[]){0, 7}, 2, NULL, 0);
  model_insert(m, 2, (double[]){0, 0}); /* evicts 3, then 4 */
  m->live[3] = m->live[4] = 0;
  check_live(m);
  chime__table_destroy(m->t);
  /* prioritized: only the one item left with a weight can leave. */
  model_open(m, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_PRIORITIZED, 0, 1);
  model_insert(m, 4, (double[]){1, 1, 1, 1});
  model_mutate(m, (uint64_t[]){1, 2, 4}, (double[]){0, 0, 0}, 3, NULL, 0);
  model_insert(m, 1, (double[]){0}); /* evicts 3 */
  m->live[3] = 0;
  check_live(m);
  chime__table_destroy(m->t);
  /* fifo: the oldest left after the deletes. */
  model_open(m, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_FIFO, 0, 1);
  model_insert(m, 4, NULL);
  model_mutate(m, NULL, NULL, 0, (uint64_t[]){1, 3}, 2);
  model_insert(m, 3, NULL); /* evicts 2 */
  m->live[2] = 0;
  check_live(m);
  chime__table_destroy(m->t);
  /* lifo: the newest left after the deletes. */
  model_open(m, 4, CHIME__SELECTOR_UNIFORM, CHIME__SELECTOR_LIFO, 0, 1);
  model_insert(m, 4, NULL);
  model_mutate(m, NULL, NULL, 0, (uint64_t[]){4}, 1);
  /* 5 fills the place 4 left; 6 finds the table full and, the newest of
   * all, is the one that leaves (Reverb's rule). */
  model_insert(m, 2, NULL);
  m->live[6] = 0;
  check_live(m);
  chime__table_destroy(m->t);
  free(m);
}

/* A request with one bad priority changes nothing, not even its good
 * updates or its deletes; a table emptied by deletes makes samplers
 * wait. */
static void test_refused_changes_nothing(void **state) {
  (void)state;
  model_t *m = malloc(sizeof(*m));
  chime__table_mutated_t r;
  uint64_t want[MAXKEYS];
  assert_non_null(m);
  model_open(m, 8, CHIME__SELECTOR_MIN_HEAP, 0, 1, 2.0);
  model_insert(m, 4, (double[]){4, 3, 2, 1});
  const double bad[] = {NAN, INFINITY, -1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    double p[2] = {0, bad[i]};
    assert_int_equal(chime__table_mutate(m->t, (uint64_t[]){1, 2}, p, 2,
                                         (uint64_t[]){3}, 1, &r),
                     CHIME_EINVAL);
  }
  drain_exact(m, heap_order(m, 0, want), want);
  chime__table_destroy(m->t);
  /* prioritized, exponent 2: 1e200^2 is infinite. */
  model_open(m, 8, CHIME__SELECTOR_PRIORITIZED, 0, 0, 2.0);
  model_insert(m, 3, (double[]){1, 0, 0});
  assert_int_equal(chime__table_mutate(m->t, (uint64_t[]){2, 1},
                                       (double[]){1, 1e200}, 2, NULL, 0, &r),
                   CHIME_EINVAL);
  check_draws(m, 0, 2560); /* still only key 1 */
  /* Every item deleted: a sampler waits for items again. */
  model_mutate(m, NULL, NULL, 0, (uint64_t[]){1, 2, 3}, 3);
  slot_t s;
  chime__table_waiter_t w = {0};
  slot_init(&s, m->t, 1);
  assert_int_equal(chime__table_try_sample(m->t, &s.lay, &s.ws, &w),
                   CHIME_EBUSY);
  chime__table_unwait(m->t, &w);
  free(s.mem);
  chime__table_destroy(m->t);
  free(m);
}

/* Deletes and updates while another thread samples: a row whose item is
 * deleted while a sampler copies it is not reused before the copy ends,
 * so no sample is torn (every word of a row is its key) and every sample
 * is of a key inserted. Each selector that keeps its items. */
#define BIG_WORDS 4096

typedef struct {
  chime__table_t *t;
  atomic_int stop;
  atomic_uint_fast64_t batches;
  uint64_t torn, bad_key;
  atomic_uint_fast64_t inserted;
} churn_t;

static void *sampler_main(void *arg) {
  churn_t *c = arg;
  slot_t s;
  if (slot_make(&s, c->t, 4) != 0)
    return NULL; /* no batches: the churn runs out of rounds and fails */
  while (chime__table_sample(c->t, &s.lay, &s.ws, &c->stop) == 0) {
    uint64_t top = atomic_load(&c->inserted);
    atomic_fetch_add(&c->batches, 1);
    for (uint32_t j = 0; j < 4; j++) {
      const uint64_t *x =
          (const uint64_t *)s.ws.leaf[0] + (size_t)j * BIG_WORDS;
      for (int w = 0; w < BIG_WORDS; w++)
        c->torn += x[w] != s.ws.info[j].key;
      c->bad_key += s.ws.info[j].key == 0 || s.ws.info[j].key > top;
    }
  }
  slot_fini(&s);
  return NULL;
}

static void check_churn(chime__selector_kind_t sampler) {
  chime__table_config_t tc;
  churn_t c;
  memset(&c, 0, sizeof(c));
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "churn");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u64[4096]"), 0);
  tc.capacity = 8;
  tc.min_size = 1;
  tc.sampler = sampler;
  tc.priority_exponent = 1.0;
  tc.seed = 3;
  assert_int_equal(chime__table_create(&c.t, &tc), 0);
  uint64_t *row = malloc(BIG_WORDS * sizeof(uint64_t));
  assert_non_null(row);
  uint64_t next = 1, seed = 5;
  pthread_t th;
  /* At least 2000 rounds, and on until the sampler has taken 300 batches
   * (it may get a CPU late on a loaded machine). */
  for (int i = 0; i < 2000 || atomic_load(&c.batches) < 300; i++) {
    assert_true(i < 1000000);
    /* Keep 4 to 8 items: insert one, then delete or re-prioritise a
     * random recent key (often the one just drawn). */
    uint64_t k;
    for (int w = 0; w < BIG_WORDS; w++)
      row[w] = next;
    atomic_store(&c.inserted, next);
    double prio = (double)(1 + chime__rng_next(&seed) % 7);
    assert_int_equal(chime__table_insert(c.t, (const uint8_t *)row, 1, &prio,
                                         &k, NULL, NULL),
                     0);
    assert_int_equal(k, next);
    next++;
    if (i == 0)
      assert_int_equal(pthread_create(&th, NULL, sampler_main, &c), 0);
    /* One of the last 8 keys (0 early on: never issued, unknown; a key
     * below 0 would be another shard's, which is refused). */
    uint64_t back = chime__rng_next(&seed) % 8;
    uint64_t victim = back < next ? next - 1 - back : 0;
    double np = (double)(chime__rng_next(&seed) % 5);
    chime__table_mutated_t r;
    if (chime__rng_next(&seed) % 3)
      assert_int_equal(chime__table_mutate(c.t, NULL, NULL, 0, &victim, 1, &r),
                       0);
    else
      assert_int_equal(chime__table_mutate(c.t, &victim, &np, 1, NULL, 0, &r),
                       0);
  }
  atomic_store(&c.stop, 1);
  chime__table_wake(c.t);
  pthread_join(th, NULL);
  printf("%llu batches sampled during the churn\n",
         (unsigned long long)atomic_load(&c.batches));
  assert_int_equal(c.torn, 0);
  assert_int_equal(c.bad_key, 0);
  free(row);
  chime__table_destroy(c.t);
}

static void test_deletes_while_sampling(void **state) {
  (void)state;
  check_churn(CHIME__SELECTOR_UNIFORM);
  check_churn(CHIME__SELECTOR_PRIORITIZED);
  check_churn(CHIME__SELECTOR_LIFO);
  check_churn(CHIME__SELECTOR_MAX_HEAP);
}

/* Issue 20: a maximal MutatePriorities (1,048,576 entries) held the
 * table's lock for 0.76 s, and every insert waited for all of it. It is
 * applied in slices: at the first break (the hook, the lock held) an
 * insert starts and queues for the lock; the mutation must let it in
 * before its next slice, whose first entry updates the new item's key.
 * Deterministic: the hook waits for the insert to queue, and the
 * mutation waits for it to take the lock (glibc's mutexes are not fair:
 * without that wait the mutation takes the lock straight back). */
typedef struct {
  chime__table_t *t;
  atomic_int go, queued_seen;
  int breaks;
  int rc;
  uint64_t key;
} slices_t;

static void nap_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

static void slice_hook(void *arg) {
  slices_t *a = arg;
  if (a->breaks++ != 0)
    return;
  atomic_store(&a->go, 1);
  /* Until the insert waits for the lock this hook holds (10 s: a bound
   * for a liveness check, not a speed). */
  for (int i = 0; i < 100000 && chime__table_lock_waiters(a->t) == 0; i++)
    nap_us(100);
  atomic_store(&a->queued_seen, chime__table_lock_waiters(a->t) > 0);
}

static void *slice_insert_main(void *arg) {
  slices_t *a = arg;
  uint64_t x = 51;
  while (!atomic_load(&a->go))
    nap_us(100);
  a->rc = chime__table_insert(a->t, (const uint8_t *)&x, 1, NULL, &a->key, NULL,
                              NULL);
  return NULL;
}

static void test_large_mutation_in_slices(void **state) {
  (void)state;
  model_t *m = malloc(sizeof(*m));
  assert_non_null(m);
  model_open(m, 64, CHIME__SELECTOR_PRIORITIZED, 0, 0, 1.0);
  model_insert(m, 50, NULL);
  size_t n = (size_t)1 << 20;
  uint64_t *keys = malloc(n * sizeof(*keys));
  double *prio = malloc(n * sizeof(*prio));
  assert_non_null(keys);
  assert_non_null(prio);
  for (size_t i = 0; i < n; i++) {
    keys[i] = 1 + i % 50;
    prio[i] = (double)(1 + i % 7);
  }
  /* The insert's key, the first entry after the first break: the insert
   * must have gone in at that break, not just at some later one. */
  keys[CHIME__TABLE_MUTATE_SLICE] = 51;
  slices_t a = {.t = m->t};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, slice_insert_main, &a), 0);
  chime__table_set_mutate_hook(m->t, slice_hook, &a);
  chime__table_mutated_t r;
  int rc = chime__table_mutate(m->t, keys, prio, n, NULL, 0, &r);
  atomic_store(&a.go, 1); /* the hook never ran: let the insert end */
  pthread_join(th, NULL);
  chime__table_set_mutate_hook(m->t, NULL, NULL);
  assert_int_equal(rc, 0);
  assert_int_equal(a.rc, 0);
  assert_int_equal(a.key, 51);
  if (r.unknown != 0)
    fail_msg("the insert did not go in at the first break (%u unknown)",
             r.unknown);
  assert_int_equal(a.breaks, (int)((n - 1) / CHIME__TABLE_MUTATE_SLICE));
  assert_true(atomic_load(&a.queued_seen));
  assert_int_equal(r.updated, n);
  /* And the item is still there. */
  chime__table_mutated_t r2;
  uint64_t k51 = 51;
  assert_int_equal(chime__table_mutate(m->t, NULL, NULL, 0, &k51, 1, &r2), 0);
  assert_int_equal(r2.deleted, 1);
  /* A slice's worth goes whole; one entry more breaks once, updates and
   * deletes counted together. */
  slices_t b = {.t = m->t, .breaks = 1}; /* past the first: only counts */
  chime__table_set_mutate_hook(m->t, slice_hook, &b);
  assert_int_equal(chime__table_mutate(m->t, keys, prio,
                                       CHIME__TABLE_MUTATE_SLICE, NULL, 0, &r),
                   0);
  assert_int_equal(b.breaks, 1);
  assert_int_equal(chime__table_mutate(m->t, keys, prio,
                                       CHIME__TABLE_MUTATE_SLICE - 1, keys, 2,
                                       &r),
                   0);
  assert_int_equal(b.breaks, 2);
  chime__table_set_mutate_hook(m->t, NULL, NULL);
  free(keys);
  free(prio);
  chime__table_destroy(m->t);
  free(m);
}

/* A key whose shard bits are not the table's is an update sent to the
 * wrong server: the whole request is refused (CHIME_EINVAL) and nothing
 * changes, updates and deletes alike, wherever in the request it is;
 * chime__table_check_keys names it. A key of the table's own shard that
 * is not in the table is unknown, as ever. Shard 0 (unsharded) refuses
 * other shards' keys too. */
static void test_foreign_shard_refused(void **state) {
  (void)state;
  const uint32_t shards[] = {3, 0};
  for (size_t i = 0; i < sizeof(shards) / sizeof(shards[0]); i++) {
    uint32_t me = shards[i], other = me == 3 ? 4 : 1;
    chime__table_config_t tc;
    chime__table_t *t;
    chime__table_mutated_t r;
    memset(&tc, 0, sizeof(tc));
    snprintf(tc.name, sizeof(tc.name), "m");
    assert_int_equal(chime_spec_parse(&tc.spec, "k:u64[]"), 0);
    tc.capacity = 8;
    tc.min_size = 1;
    tc.sampler = CHIME__SELECTOR_MAX_HEAP;
    tc.shard = me;
    assert_int_equal(chime__table_create(&t, &tc), 0);
    uint64_t data[4] = {1, 2, 3, 4}, first;
    double prio[4] = {4, 3, 2, 1};
    assert_int_equal(chime__table_insert(t, (const uint8_t *)data, 4, prio,
                                         &first, NULL, NULL),
                     0);
    assert_true(first == chime__key_make(me, 1));
    uint64_t k1 = chime__key_make(me, 1), k4 = chime__key_make(me, 4);
    uint64_t theirs = chime__key_make(other, 4); /* "4" of another shard */
    uint64_t bad = 0;
    uint64_t upd[3] = {k4, theirs, k1};
    double np[3] = {100, 100, 0.5};
    assert_int_equal(chime__table_check_keys(t, upd, 3, &bad), CHIME_EINVAL);
    assert_true(bad == theirs);
    assert_int_equal(chime__table_mutate(t, upd, np, 3, NULL, 0, &r),
                     CHIME_EINVAL);
    assert_int_equal(chime__table_mutate(t, &k4, np, 1, &theirs, 1, &r),
                     CHIME_EINVAL);
    uint64_t dels[2] = {k1, theirs};
    assert_int_equal(chime__table_mutate(t, NULL, NULL, 0, dels, 2, &r),
                     CHIME_EINVAL);
    /* Nothing changed: all four in, the max-heap order the inserted one. */
    chime__table_stats_t st;
    chime__table_get_stats(t, &st);
    assert_int_equal(st.size, 4);
    slot_t s;
    slot_init(&s, t, 1);
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    assert_true(s.ws.info[0].key == k1);
    assert_true(s.ws.info[0].priority == 4);
    free(s.mem);
    /* This shard's key that is not in: unknown, not refused. */
    uint64_t gone[2] = {chime__key_make(me, 99), k4};
    double two[2] = {7, 7};
    assert_int_equal(chime__table_check_keys(t, gone, 2, &bad), 0);
    assert_int_equal(chime__table_mutate(t, gone, two, 2, NULL, 0, &r), 0);
    assert_int_equal(r.unknown, 1);
    assert_int_equal(r.updated, 1);
    chime__table_destroy(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prioritized_after_mutate),
      cmocka_unit_test(test_uniform_after_deletes),
      cmocka_unit_test(test_heaps_after_mutate),
      cmocka_unit_test(test_fifo_lifo_after_deletes),
      cmocka_unit_test(test_removers_after_mutate),
      cmocka_unit_test(test_refused_changes_nothing),
      cmocka_unit_test(test_foreign_shard_refused),
      cmocka_unit_test(test_deletes_while_sampling),
      cmocka_unit_test(test_large_mutation_in_slices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
