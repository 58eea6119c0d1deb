/* Staleness weighting of a prioritized table (src/replay/selector_stale.c;
 * docs/replay.md, "Staleness weighting"): every sample's probability in
 * its info is exactly p^a / (s + 1) / Z over the live items, as items come,
 * change priority, leave and the newest version rises; the draws fit those
 * probabilities (chi-square), both when most draws are taken by the
 * rejection from the sum tree and when the items are so stale that most
 * fall back to the walk over the versions; the table's mass is Z; other
 * samplers and sequence tables refuse it. */
#include <math.h>
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
#include "replay/table.h"
#include "table_slot.h"

#define SB 9 /* "a:u32[2], b:u8[]" */
#define EXP 0.7
#define MAXN 64

static chime__table_t *stable(uint64_t max_staleness, uint64_t seed) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2], b:u8[]", NULL, 0), 0);
  tc.capacity = MAXN;
  tc.sampler = CHIME__SAMPLER_PRIORITIZED;
  tc.min_size = 1;
  tc.priority_exponent = EXP;
  tc.max_staleness = max_staleness;
  tc.staleness_weight = CHIME__STALE_WEIGHT_INVERSE;
  tc.seed = seed;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* What the test knows of each key (count 1..n): priority, version, live. */
typedef struct {
  uint32_t n;
  double prio[MAXN + 1];
  uint64_t ver[MAXN + 1];
  int live[MAXN + 1];
  uint64_t newest;
} model_t;

static void insert(chime__table_t *t, model_t *m, const double *prio,
                   const uint64_t *ver, uint32_t n) {
  uint8_t buf[MAXN * SB] = {0};
  uint64_t key;
  chime__span_t sp = {buf, (size_t)n * SB};
  chime__table_versions_t v = {ver, n};
  assert_true(m->n + n <= MAXN);
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, n, NULL, prio, &v,
                                                 &key, NULL, NULL, 0),
                   0);
  for (uint32_t j = 0; j < n; j++) {
    uint32_t k = m->n + 1 + j;
    m->prio[k] = prio[j];
    m->ver[k] = ver[j];
    m->live[k] = 1;
    if (ver[j] > m->newest)
      m->newest = ver[j];
  }
  m->n += n;
}

static double weight(const model_t *m, uint32_t k) {
  return pow(m->prio[k], EXP) / (double)(m->newest - m->ver[k] + 1);
}

static double z_of(const model_t *m) {
  double z = 0;
  for (uint32_t k = 1; k <= m->n; k++)
    if (m->live[k])
      z += weight(m, k);
  return z;
}

/* A batch of 32: each sample's info against the model, exactly (up to
 * rounding), and the table's mass is Z. */
static void check_batch(chime__table_t *t, const model_t *m) {
  slot_t s;
  chime__table_stats_t st;
  double z = z_of(m);
  chime__table_get_stats(t, &st);
  assert_true(fabs(st.mass - z) <= 1e-12 * z);
  slot_init(&s, t, 32);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 32; j++) {
    const chime_sample_info_t *in = &s.ws.info[j];
    uint32_t k = (uint32_t)chime__key_count(in->key);
    assert_true(k >= 1 && k <= m->n && m->live[k]);
    assert_int_equal(in->version, m->ver[k]);
    assert_int_equal(in->staleness, m->newest - m->ver[k]);
    double want = weight(m, k) / z;
    if (!(fabs(in->probability - want) <= 1e-12 * want))
      fail_msg("key %u: probability %.17g, p^a / (s + 1) / Z is %.17g", k,
               in->probability, want);
  }
  slot_fini(&s);
}

static void test_exact_probability(void **state) {
  (void)state;
  chime__table_t *t = stable(0, 3);
  model_t m = {0};
  double prio[12];
  uint64_t ver[12];
  for (uint32_t j = 0; j < 12; j++) {
    prio[j] = 0.25 + j * 0.5;
    ver[j] = (j * 7) % 6; /* versions 0..5, out of order */
  }
  insert(t, &m, prio, ver, 12);
  check_batch(t, &m);
  /* A learner moves on: every item's staleness changes at once. */
  assert_int_equal(chime__table_set_version(t, 9, NULL), 0);
  m.newest = 9;
  check_batch(t, &m);
  /* New priorities and deletes. */
  uint64_t keys[3] = {chime__key_make(0, 2), chime__key_make(0, 5),
                      chime__key_make(0, 11)};
  double np[3] = {7.0, 0.01, 3.0};
  uint64_t del[2] = {chime__key_make(0, 1), chime__key_make(0, 12)};
  chime__table_mutated_t mu;
  assert_int_equal(chime__table_mutate(t, keys, np, 3, del, 2, &mu), 0);
  assert_int_equal(mu.updated, 3);
  assert_int_equal(mu.deleted, 2);
  m.prio[2] = 7.0;
  m.prio[5] = 0.01;
  m.prio[11] = 3.0;
  m.live[1] = m.live[12] = 0;
  check_batch(t, &m);
  /* Items of a newer version than any (staleness 0). */
  double p2[2] = {1.0, 2.0};
  uint64_t v2[2] = {12, 12};
  insert(t, &m, p2, v2, 2);
  check_batch(t, &m);
  chime__table_destroy(t);
}

/* draws samples in batches of 100; the counts against the model's
 * probabilities: chi-square below df + 5 sd (p ~ 1e-6 for a correct
 * sampler; the seed is fixed, so the figure is the same every run). */
static void check_distribution(chime__table_t *t, const model_t *m,
                               const char *what) {
  enum { DRAWS = 200000, B = 100 };
  uint64_t count[MAXN + 1] = {0};
  slot_t s;
  slot_init(&s, t, B);
  for (int d = 0; d < DRAWS / B; d++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < B; j++)
      count[chime__key_count(s.ws.info[j].key)]++;
  }
  slot_fini(&s);
  double z = z_of(m), chi2 = 0;
  int df = -1;
  for (uint32_t k = 1; k <= m->n; k++) {
    if (!m->live[k]) { /* gone: never drawn */
      assert_int_equal(count[k], 0);
      continue;
    }
    double e = DRAWS * weight(m, k) / z;
    chi2 += ((double)count[k] - e) * ((double)count[k] - e) / e;
    df++;
  }
  printf("staleness weighting, %s: chi-square %.1f, %d degrees of freedom\n",
         what, chi2, df);
  assert_true(chi2 < df + 5 * sqrt(2.0 * df));
}

static void test_distribution(void **state) {
  (void)state;
  double prio[16];
  uint64_t ver[16];
  for (uint32_t j = 0; j < 16; j++)
    prio[j] = 1.0 + (double)((j * 5) % 7);
  /* Staleness 0..15: most draws kept by the rejection. */
  chime__table_t *t = stable(0, 5);
  model_t m = {0};
  for (uint32_t j = 0; j < 16; j++)
    ver[j] = j;
  insert(t, &m, prio, ver, 16);
  check_distribution(t, &m, "staleness 0..15");
  chime__table_destroy(t);
  /* Staleness 300..1800: 64 tries mostly fail, the walk draws. */
  t = stable(0, 6);
  memset(&m, 0, sizeof(m));
  for (uint32_t j = 0; j < 16; j++)
    ver[j] = 100 * (j % 16);
  insert(t, &m, prio, ver, 16);
  assert_int_equal(chime__table_set_version(t, 1800, NULL), 0);
  m.newest = 1800;
  check_distribution(t, &m, "staleness 300..1800 (the walk)");
  check_batch(t, &m);
  chime__table_destroy(t);
  /* With a gate: what it removes leaves Z too. */
  t = stable(3, 7);
  memset(&m, 0, sizeof(m));
  for (uint32_t j = 0; j < 16; j++)
    ver[j] = j % 8;
  insert(t, &m, prio, ver, 16);
  for (uint32_t k = 1; k <= m.n; k++)
    m.live[k] = m.ver[k] + 3 >= 7;
  check_batch(t, &m);
  check_distribution(t, &m, "max_staleness 3");
  chime__table_destroy(t);
}

/* Only a plain prioritized table takes it. */
static void test_refused(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2]", NULL, 0), 0);
  tc.capacity = 8;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.staleness_weight = CHIME__STALE_WEIGHT_INVERSE;
  tc.sampler = CHIME__SAMPLER_UNIFORM;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
  tc.sampler = CHIME__SAMPLER_PRIORITIZED;
  tc.capacity = 0;
  tc.capacity_steps = 64;
  tc.sequence_length = 4;
  tc.stride = 4;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_probability),
      cmocka_unit_test(test_distribution),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
