/* Staleness weighting of a prioritized table (src/replay/selector_stale.c;
 * docs/replay.md, "Staleness weighting"): every sample's probability in
 * its info is exactly p^a / (s + 1) / Z over the live items, as items come,
 * change priority, leave and the newest version rises; the draws fit those
 * probabilities (chi-square), both when most draws are taken by the
 * rejection from the sum tree and when the items are so stale that most
 * fall back to the walk over the versions; the table's mass is Z; other
 * samplers and sequence tables refuse it. Z and each version's weight stay
 * exact however the priorities move: a version whose items all went to 0
 * is never drawn from (it was, and chimed crashed), items of 1 and 1e-300
 * still count once an item of 1e298 beside them leaves or changes, and
 * draws after such churn fit P (chi-square at p = 0.001). A selector
 * that gives no row never makes the table index with it. */
#include <float.h>
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
#include "replay/table_internal.h"
#include "table_slot.h"

#define SB 9 /* "a:u32[2], b:u8[]" */
#define EXP 0.7
#define MAXN 64

static chime__table_t *stable_a(uint64_t max_staleness, uint64_t seed,
                                double a) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2], b:u8[]"), 0);
  tc.capacity = MAXN;
  tc.sampler = CHIME__SELECTOR_PRIORITIZED;
  tc.min_size = 1;
  tc.priority_exponent = a;
  tc.max_staleness = max_staleness;
  tc.staleness_weight = CHIME__STALE_WEIGHT_INVERSE;
  tc.seed = seed;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

static chime__table_t *stable(uint64_t max_staleness, uint64_t seed) {
  return stable_a(max_staleness, seed, EXP);
}

/* What the test knows of each key (count 1..n): priority, version, live. */
typedef struct {
  uint32_t n;
  double prio[MAXN + 1];
  uint64_t ver[MAXN + 1];
  int live[MAXN + 1];
  uint64_t newest;
  double a;  /* the table's priority exponent; 0: EXP */
  int scale; /* weights x 2^scale: subnormal ones would not be exact */
} model_t;

static void insert_modeled(chime__table_t *t, model_t *m, const double *prio,
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
  return ldexp(pow(m->prio[k], m->a > 0 ? m->a : EXP), m->scale) /
         ((double)(m->newest - m->ver[k]) + 1.0);
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
static void check_against_model(chime__table_t *t, const model_t *m) {
  slot_t s;
  chime__table_stats_t st;
  double z = z_of(m);
  chime__table_get_stats(t, &st);
  /* The mass is Z as a double: subnormal (a few bits) where Z is. */
  double got = ldexp(st.mass, m->scale);
  if (!(fabs(got - z) <= 1e-12 * z + ldexp(DBL_TRUE_MIN, m->scale)))
    fail_msg("mass %.17g, Z is %.17g", st.mass, ldexp(z, -m->scale));
  slot_init(&s, t, 32);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 32; j++) {
    const chime_sample_info_t *in = &s.ws.info[j];
    uint32_t k = (uint32_t)chime__key_count(in->key);
    assert_true(k >= 1 && k <= m->n && m->live[k]);
    assert_true(weight(m, k) > 0); /* an item of priority 0: never */
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
  insert_modeled(t, &m, prio, ver, 12);
  check_against_model(t, &m);
  /* A learner moves on: every item's staleness changes at once. */
  assert_int_equal(chime__table_set_version(t, 9, NULL), 0);
  m.newest = 9;
  check_against_model(t, &m);
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
  check_against_model(t, &m);
  /* Items of a newer version than any (staleness 0). */
  double p2[2] = {1.0, 2.0};
  uint64_t v2[2] = {12, 12};
  insert_modeled(t, &m, p2, v2, 2);
  check_against_model(t, &m);
  chime__table_destroy(t);
}

/* draws samples in batches of 100; the counts against the model's
 * probabilities: chi-square below df + 5 sd (p ~ 1e-6 for a correct
 * sampler; the seed is fixed, so the figure is the same every run). */
/* Chi-square's upper 0.001 point for df degrees of freedom
 * (Wilson-Hilferty: within a percent of the table's from df 2 up). */
static double chi2_p001(int df) {
  double c = 2.0 / (9.0 * df), x = 1.0 - c + 3.0902 * sqrt(c);
  return df * x * x * x;
}

/* p001: the bound is chi-square's 0.001 point, not df + 5 sd. */
static void check_distribution_at(chime__table_t *t, const model_t *m,
                                  const char *what, int p001) {
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
  double z = z_of(m), chi2 = 0, rare_e = 0;
  uint64_t rare_n = 0;
  int df = -1;
  for (uint32_t k = 1; k <= m->n; k++) {
    double e = m->live[k] ? DRAWS * weight(m, k) / z : 0.0;
    if (!(e > 0)) { /* gone, or priority 0: never drawn */
      assert_int_equal(count[k], 0);
      continue;
    }
    if (e < 5) { /* too rare for a cell of its own: pooled */
      rare_e += e;
      rare_n += count[k];
      continue;
    }
    chi2 += ((double)count[k] - e) * ((double)count[k] - e) / e;
    df++;
  }
  if (rare_e >= 5) {
    chi2 += ((double)rare_n - rare_e) * ((double)rare_n - rare_e) / rare_e;
    df++;
  } else if (rare_e < 1e-6) { /* items of 1e-300 and the like */
    assert_int_equal(rare_n, 0);
  }
  double bound = p001 ? chi2_p001(df) : df + 5 * sqrt(2.0 * df);
  printf("staleness weighting, %s: chi-square %.1f, %d degrees of freedom "
         "(bound %.1f)\n",
         what, chi2, df, bound);
  assert_true(chi2 < bound);
}

static void check_distribution(chime__table_t *t, const model_t *m,
                               const char *what) {
  check_distribution_at(t, m, what, 0);
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
  insert_modeled(t, &m, prio, ver, 16);
  check_distribution(t, &m, "staleness 0..15");
  chime__table_destroy(t);
  /* Staleness 300..1800: 64 tries mostly fail, the walk draws. */
  t = stable(0, 6);
  memset(&m, 0, sizeof(m));
  for (uint32_t j = 0; j < 16; j++)
    ver[j] = 100 * (j % 16);
  insert_modeled(t, &m, prio, ver, 16);
  assert_int_equal(chime__table_set_version(t, 1800, NULL), 0);
  m.newest = 1800;
  check_distribution(t, &m, "staleness 300..1800 (the walk)");
  check_against_model(t, &m);
  chime__table_destroy(t);
  /* With a gate: what it removes leaves Z too. */
  t = stable(3, 7);
  memset(&m, 0, sizeof(m));
  for (uint32_t j = 0; j < 16; j++)
    ver[j] = j % 8;
  insert_modeled(t, &m, prio, ver, 16);
  for (uint32_t k = 1; k <= m.n; k++)
    m.live[k] = m.ver[k] + 3 >= 7;
  check_against_model(t, &m);
  check_distribution(t, &m, "max_staleness 3");
  chime__table_destroy(t);
}

/* Sets key k's priority (one MutatePriorities update), in the model too. */
static void set_prio(chime__table_t *t, model_t *m, uint32_t k, double prio) {
  uint64_t key = chime__key_make(0, k);
  chime__table_mutated_t mu;
  assert_int_equal(chime__table_mutate(t, &key, &prio, 1, NULL, 0, &mu), 0);
  assert_int_equal(mu.updated, 1);
  m->prio[k] = prio;
}

static void delete_key(chime__table_t *t, model_t *m, uint32_t k) {
  uint64_t key = chime__key_make(0, k);
  chime__table_mutated_t mu;
  assert_int_equal(chime__table_mutate(t, NULL, NULL, 0, &key, 1, &mu), 0);
  assert_int_equal(mu.deleted, 1);
  m->live[k] = 0;
}

static void set_version(chime__table_t *t, model_t *m, uint64_t v) {
  assert_int_equal(chime__table_set_version(t, v, NULL), 0);
  m->newest = v;
}

/* A version whose items all went to priority 0 weighs exactly 0: a
 * running sum kept 0.1 + 0.2 - 0.1 - 0.2 = 2.8e-17 of it, the walk over
 * the versions (every draw, this stale) chose it, found no item with
 * weight and gave the table row NONE, and chimed crashed. */
static void test_zeroed_version(void **state) {
  (void)state;
  double prio[9] = {0.1, 0.2, 0.3, 0.7, 0.1, 0.2, 0.3, 0.7, 1e-15};
  uint64_t ver[9] = {1, 1, 1, 1, 2, 2, 2, 2, 3};
  for (int order = 0; order < 2; order++) {
    chime__table_t *t = stable_a(0, 11 + order, 1.0);
    model_t m = {.a = 1.0};
    insert_modeled(t, &m, prio, ver, 9);
    /* Every item of versions 1 and 2 to 0, in two orders. */
    for (uint32_t j = 0; j < 8; j++)
      set_prio(t, &m, order == 0 ? 1 + j : 8 - j, 0.0);
    for (int rise = 0; rise < 2; rise++) {
      /* At once, then after a learner's report made every draw walk. */
      if (rise)
        set_version(t, &m, 1000000000);
      chime__table_stats_t st;
      chime__table_get_stats(t, &st);
      assert_true(fabs(st.mass - z_of(&m)) <= 1e-12 * z_of(&m));
      slot_t s;
      slot_init(&s, t, 100);
      for (int d = 0; d < 20; d++) {
        assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
        for (uint32_t j = 0; j < 100; j++) {
          assert_int_equal(chime__key_count(s.ws.info[j].key), 9);
          assert_true(fabs(s.ws.info[j].probability - 1.0) <= 1e-12);
        }
      }
      slot_fini(&s);
    }
    chime__table_destroy(t);
  }
}

/* Items of 1 and 1e-300 beside one of 1e298 in a version still count once
 * it leaves or its priority falls: a running sum lost them (1e298 + 1 -
 * 1e298 is 0), so Z and each probability were off (1/2 and 1 for items
 * of true 1/3 and 2/3). Checked exactly, down to items of 1e-300 alone. */
static void test_huge_leaves(void **state) {
  (void)state;
  chime__table_t *t = stable_a(0, 13, 1.0);
  model_t m = {.a = 1.0};
  double prio[5] = {1e298, 1.0, 1e-300, 1.0, 1e-300};
  uint64_t ver[5] = {1, 1, 1, 2, 2};
  insert_modeled(t, &m, prio, ver, 5);
  check_against_model(t, &m);
  delete_key(t, &m, 1); /* Z is 1.5: 1/2 + 1, and 1e-300s */
  check_against_model(t, &m);
  /* Another 1e298, counted into Z afresh as the newest rises, then down
   * to 0.5. */
  double p2 = 1e298;
  uint64_t v2 = 1;
  insert_modeled(t, &m, &p2, &v2, 1);
  set_version(t, &m, 5);
  check_against_model(t, &m);
  set_prio(t, &m, 6, 0.5);
  check_against_model(t, &m);
  /* The 1s go and 0.5 goes to 0: items of 1e-300 are all that weigh. */
  delete_key(t, &m, 2);
  delete_key(t, &m, 4);
  set_prio(t, &m, 6, 0.0);
  check_against_model(t, &m);
  /* And a 1e298 that comes and goes among them. */
  insert_modeled(t, &m, &p2, &v2, 1);
  check_against_model(t, &m);
  delete_key(t, &m, 7);
  check_against_model(t, &m);
  chime__table_destroy(t);
}

/* Priorities that move across 600 orders of magnitude, to 0 and back,
 * and items that leave, in versions the newest leaves behind: then the
 * draws fit P by chi-square at p = 0.001, through the rejection and
 * through the walk. */
static void test_churn_distribution(void **state) {
  (void)state;
  chime__table_t *t = stable_a(0, 17, 1.0);
  model_t m = {.a = 1.0};
  double prio[24];
  uint64_t ver[24];
  for (uint32_t j = 0; j < 24; j++) {
    ver[j] = j % 4;
    prio[j] = j < 20 ? 1.0 + (double)((j * 5) % 7) : 1e298;
  }
  insert_modeled(t, &m, prio, ver,
                 24); /* keys 21..24: 1e298, one per version */
  set_version(t, &m, 3);
  delete_key(t, &m, 21);
  set_prio(t, &m, 22, 2.0);
  set_prio(t, &m, 23, 0.1);
  set_prio(t, &m, 23, 1e-300);
  for (uint32_t k = 1; k <= 3; k++) { /* up, down to 0 and back */
    set_prio(t, &m, k, 0.1 * k);
    set_prio(t, &m, k, 0.0);
  }
  set_prio(t, &m, 2, 3.0);
  set_prio(t, &m, 5, 1e298);
  set_version(t, &m, 6);
  delete_key(t, &m, 24);
  set_prio(t, &m, 5, 4.0);
  set_prio(t, &m, 6, 1e-300); /* never drawn, in practice */
  check_against_model(t, &m);
  check_distribution_at(t, &m, "after churn, staleness 3..6", 1);
  set_version(t, &m, 4000);
  check_against_model(t, &m);
  check_distribution_at(t, &m, "after churn, staleness 3997..4000 (walk)", 1);
  chime__table_destroy(t);
}

/* Items of priority 1e-300 at staleness 2^64 - 1 weigh 1e-300 / 2^64 =
 * 5.4e-320, a subnormal double with a few bits of precision: 20 alike
 * each said 0.0499989 for 0.05 (the weight and Z rounded apart). Z is
 * kept scaled (verindex.h), so each says 0.05 exactly, also for unequal
 * priorities and staleness, drawn as P says (chi-square: every draw
 * takes the walk here), and as an item of weight 1 comes and goes beside
 * them (Z goes from tiny to 1 and back). */
static void test_subnormal_weights(void **state) {
  (void)state;
  chime__table_t *t = stable_a(0, 23, 1.0);
  model_t m = {.a = 1.0, .scale = 200};
  double prio[20];
  uint64_t ver[20];
  for (uint32_t j = 0; j < 20; j++) {
    prio[j] = 1e-300;
    ver[j] = 0;
  }
  insert_modeled(t, &m, prio, ver, 20);
  set_version(t, &m, UINT64_MAX);
  slot_t s;
  slot_init(&s, t, 64);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 64; j++) {
    double p = s.ws.info[j].probability;
    if (!(fabs(p - 0.05) <= 1e-12 * 0.05))
      fail_msg("sample %u: probability %.17g, not 0.05", j, p);
    assert_int_equal(s.ws.info[j].staleness, UINT64_MAX);
  }
  slot_fini(&s);
  check_against_model(t, &m);
  /* An item of weight 1, newest: Z is 1 and then tiny again. */
  double one = 1.0;
  uint64_t vnew = UINT64_MAX;
  insert_modeled(t, &m, &one, &vnew, 1);
  check_against_model(t, &m);
  delete_key(t, &m, 21);
  check_against_model(t, &m);
  chime__table_destroy(t);

  /* Unequal: priorities 1e-300 .. 8e-300 at staleness 2^61 .. 2^63. */
  t = stable_a(0, 29, 1.0);
  memset(&m, 0, sizeof(m));
  m.a = 1.0;
  m.scale = 200;
  for (uint32_t j = 0; j < 12; j++) {
    prio[j] = 1e-300 * (double)(1 + j % 8);
    ver[j] = (uint64_t)(j % 3) << 61; /* 0, 2^61, 2^62 */
  }
  insert_modeled(t, &m, prio, ver, 12);
  set_version(t, &m, UINT64_C(1) << 63);
  check_against_model(t, &m);
  check_distribution_at(t, &m, "1e-300 at staleness 2^61..2^63 (the walk)", 1);
  set_prio(t, &m, 3, 5e-301);
  delete_key(t, &m, 4);
  check_against_model(t, &m);
  chime__table_destroy(t);
}

/* A selector that gives no row. */
static uint32_t no_row(chime__table_t *t, double *prob) {
  (void)t;
  *prob = 0;
  return UINT32_MAX;
}

/* A selector's NONE never indexes the table: the sampler draws again and
 * then uniformly, each sample a live item. */
static void test_no_row_picked(void **state) {
  (void)state;
  chime__table_t *t = stable_a(0, 19, 1.0);
  model_t m = {.a = 1.0};
  double prio[4] = {1, 2, 3, 4};
  uint64_t ver[4] = {0, 0, 1, 1};
  insert_modeled(t, &m, prio, ver, 4);
  chime__selector_t broken = *t->sel;
  broken.pick = no_row;
  broken.draws_ahead = NULL;
  t->sel = &broken;
  slot_t s;
  slot_init(&s, t, 16);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 16; j++) {
    uint64_t k = chime__key_count(s.ws.info[j].key);
    assert_true(k >= 1 && k <= 4);
    assert_true(s.ws.info[j].probability == 0.25); /* the uniform draw's */
  }
  slot_fini(&s);
  assert_int_equal(t->bad_picks, 16);
  chime__table_destroy(t);
}

/* Only a plain prioritized table takes it. */
static void test_refused(void **state) {
  (void)state;
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2]"), 0);
  tc.capacity = 8;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.staleness_weight = CHIME__STALE_WEIGHT_INVERSE;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  assert_int_equal(chime__table_create(&t, &tc), CHIME_EINVAL);
  tc.sampler = CHIME__SELECTOR_PRIORITIZED;
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
      cmocka_unit_test(test_zeroed_version),
      cmocka_unit_test(test_huge_leaves),
      cmocka_unit_test(test_churn_distribution),
      cmocka_unit_test(test_no_row_picked),
      cmocka_unit_test(test_subnormal_weights),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
