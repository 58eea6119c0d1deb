/* Sum tree: totals against a naive array after many random sets (exact with
 * integer values, and bit for bit a fresh build's with real ones: no
 * drift), find's boundaries, every slot's range hit exactly at sizes on
 * either side of each level, empty slots never returned, one non-empty
 * slot and none, the empirical distribution of many seeded draws
 * (chi-square), sizes 1, 2 and others that are not powers of the fan-out,
 * and a rough ns/op figure. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/sumtree.h"
#include "rng.h"
#include "common/clock.h"

static double rng_unit(uint64_t *s) { /* [0, 1) */
  return (double)(chime__rng_next(s) >> 11) * 0x1p-53;
}

static const uint64_t sizes[] = {1, 2, 3, 7, 8, 9, 15, 17, 64, 100, 1000, 1025};

static void test_integer_sums_exact(void **state) {
  (void)state;
  uint64_t seed = 1;
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    uint64_t n = sizes[si];
    chime__sumtree_t *t;
    assert_int_equal(chime__sumtree_create(&t, n), 0);
    double *ref = calloc(n, sizeof(double));
    assert_non_null(ref);
    for (int op = 0; op < 20000; op++) {
      uint64_t s = chime__rng_next(&seed) % n;
      /* Integers (a quarter of them 0) keep every sum exact. */
      double v = (double)(chime__rng_next(&seed) % 4 == 0
                              ? 0
                              : chime__rng_next(&seed) % 1000);
      assert_int_equal(chime__sumtree_set(t, s, v), 0);
      ref[s] = v;
      if (op % 97 == 0 || op == 19999) {
        double sum = 0;
        for (uint64_t i = 0; i < n; i++) {
          sum += ref[i];
          assert_true(chime__sumtree_get(t, i) == ref[i]);
        }
        assert_true(chime__sumtree_total(t) == sum);
      }
    }
    free(ref);
    chime__sumtree_destroy(t);
  }
}

/* After 10^6 random real-valued sets the tree equals, bit for bit, one built
 * from scratch from the final values, and the naive total within 1e-12. */
static void test_real_sums_no_drift(void **state) {
  (void)state;
  uint64_t n = 1000, seed = 2;
  chime__sumtree_t *t, *fresh;
  assert_int_equal(chime__sumtree_create(&t, n), 0);
  assert_int_equal(chime__sumtree_create(&fresh, n), 0);
  double *ref = calloc(n, sizeof(double));
  assert_non_null(ref);
  for (int op = 0; op < 1000000; op++) {
    uint64_t s = chime__rng_next(&seed) % n;
    /* Values over many magnitudes, the worst case for a delta update. */
    double v =
        rng_unit(&seed) * pow(10, (double)(chime__rng_next(&seed) % 12) - 6);
    assert_int_equal(chime__sumtree_set(t, s, v), 0);
    ref[s] = v;
  }
  long double sum = 0;
  for (uint64_t i = 0; i < n; i++) {
    assert_int_equal(chime__sumtree_set(fresh, i, ref[i]), 0);
    sum += ref[i];
  }
  assert_true(chime__sumtree_total(t) == chime__sumtree_total(fresh));
  assert_true(fabsl(chime__sumtree_total(t) - sum) <= 1e-12L * sum);
  for (int k = 0; k < 10000; k++) {
    double p = rng_unit(&seed) * chime__sumtree_total(t);
    uint64_t a, b;
    assert_int_equal(chime__sumtree_find(t, p, &a), 0);
    assert_int_equal(chime__sumtree_find(fresh, p, &b), 0);
    assert_true(a == b);
  }
  free(ref);
  chime__sumtree_destroy(t);
  chime__sumtree_destroy(fresh);
}

static uint64_t find(const chime__sumtree_t *t, double p) {
  uint64_t s = UINT64_MAX;
  assert_int_equal(chime__sumtree_find(t, p, &s), 0);
  return s;
}

/* Sizes on either side of each level of the tree (8 children a node: a
 * level more at 9, 65, 513, 4097, 32769 slots). */
static const uint64_t level_sizes[] = {1,   7,   8,   9,    63,   64,   65,
                                       511, 512, 513, 4095, 4096, 4097, 32769};

/* With integer values every sum and every subtraction of a descent is
 * exact, so find must hit each slot's range exactly: its first and last
 * integer, for every non-empty slot, after many random sets. That checks
 * every level's sums and the descent through each, at every size. */
static void test_every_boundary_exact(void **state) {
  (void)state;
  uint64_t seed = 6;
  for (size_t si = 0; si < sizeof(level_sizes) / sizeof(level_sizes[0]); si++) {
    uint64_t n = level_sizes[si];
    chime__sumtree_t *t;
    assert_int_equal(chime__sumtree_create(&t, n), 0);
    double *ref = calloc(n, sizeof(double));
    assert_non_null(ref);
    for (uint64_t op = 0; op < 4 * n + 100; op++) {
      uint64_t s = chime__rng_next(&seed) % n;
      /* Half the sets 0: empty slots and empty groups between the rest. */
      double v = chime__rng_next(&seed) % 2
                     ? 0
                     : (double)(1 + chime__rng_next(&seed) % 50);
      assert_int_equal(chime__sumtree_set(t, s, v), 0);
      ref[s] = v;
    }
    ref[n - 1] = 0; /* an empty tail: a prefix at the total must skip it */
    assert_int_equal(chime__sumtree_set(t, n - 1, 0), 0);
    double cum = 0;
    uint64_t lastnz = UINT64_MAX;
    for (uint64_t i = 0; i < n; i++) {
      if (ref[i] == 0)
        continue;
      assert_int_equal(find(t, cum), i);
      assert_int_equal(find(t, cum + ref[i] - 1), i);
      assert_int_equal(find(t, cum + ref[i] - 0.5), i);
      cum += ref[i];
      lastnz = i;
    }
    assert_true(chime__sumtree_total(t) == cum);
    if (lastnz == UINT64_MAX) {
      uint64_t s;
      assert_int_equal(chime__sumtree_find(t, 0, &s), CHIME_ENOTFOUND);
    } else {
      assert_int_equal(find(t, cum), lastnz);
      assert_int_equal(find(t, 2 * cum + 1), lastnz);
    }
    free(ref);
    chime__sumtree_destroy(t);
  }
}

/* find_many gives what find gives, prefix by prefix: random prefixes,
 * the ends, past the total, negative and NaN, in batches of every length
 * up to 70 (not multiples of how many it runs together). */
static void test_find_many_as_find(void **state) {
  (void)state;
  uint64_t seed = 8;
  double prefix[70];
  uint64_t got[70];
  for (size_t si = 0; si < sizeof(level_sizes) / sizeof(level_sizes[0]); si++) {
    uint64_t n = level_sizes[si];
    chime__sumtree_t *t;
    assert_int_equal(chime__sumtree_create(&t, n), 0);
    uint64_t s = 77;
    assert_int_equal(chime__sumtree_find_many(t, prefix, 3, &s),
                     CHIME_ENOTFOUND);
    assert_int_equal(s, 77);
    for (uint64_t i = 0; i < n; i++)
      assert_int_equal(
          chime__sumtree_set(t, i,
                             chime__rng_next(&seed) % 3 ? 0 : rng_unit(&seed)),
          0);
    assert_int_equal(chime__sumtree_set(t, n / 2, 0.5), 0);
    double total = chime__sumtree_total(t);
    for (size_t len = 0; len <= 70; len++) {
      for (size_t j = 0; j < len; j++) {
        uint64_t r = chime__rng_next(&seed) % 8;
        prefix[j] = r == 0   ? total
                    : r == 1 ? nextafter(total, 0)
                    : r == 2 ? 2 * total
                    : r == 3 ? (j % 2 ? -1 : NAN)
                             : rng_unit(&seed) * total;
      }
      assert_int_equal(chime__sumtree_find_many(t, prefix, len, got), 0);
      for (size_t j = 0; j < len; j++)
        assert_int_equal(got[j], find(t, prefix[j]));
    }
    chime__sumtree_destroy(t);
  }
}

/* One non-empty slot anywhere in a tree of several levels: every prefix
 * finds it; emptied, nothing is found; and a tree emptied after being
 * full finds nothing either (no sum left over). */
static void test_single_and_all_zero(void **state) {
  (void)state;
  const uint64_t n = 4097;
  chime__sumtree_t *t;
  uint64_t s;
  assert_int_equal(chime__sumtree_create(&t, n), 0);
  const uint64_t at[] = {0, 1, 7, 8, 63, 64, 511, 512, 4095, 4096};
  for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
    assert_int_equal(chime__sumtree_set(t, at[i], 1e-300), 0);
    double total = chime__sumtree_total(t);
    assert_true(total == 1e-300);
    const double p[] = {0, total / 2, total, 1, -1, NAN, INFINITY};
    for (size_t k = 0; k < sizeof(p) / sizeof(p[0]); k++)
      assert_int_equal(find(t, p[k]), at[i]);
    assert_int_equal(chime__sumtree_set(t, at[i], 0), 0);
    assert_true(chime__sumtree_total(t) == 0);
    assert_int_equal(chime__sumtree_find(t, 0, &s), CHIME_ENOTFOUND);
  }
  for (uint64_t i = 0; i < n; i++)
    assert_int_equal(chime__sumtree_set(t, i, 0.1 * (double)(i % 13)), 0);
  assert_true(chime__sumtree_total(t) > 0);
  for (uint64_t i = n; i-- > 0;)
    assert_int_equal(chime__sumtree_set(t, i, 0), 0);
  assert_true(chime__sumtree_total(t) == 0);
  assert_int_equal(chime__sumtree_find(t, 0, &s), CHIME_ENOTFOUND);
  chime__sumtree_destroy(t);
}

static void test_find_boundaries(void **state) {
  (void)state;
  chime__sumtree_t *t;
  uint64_t s;
  /* Spread over two blocks and two tree levels: slots 0, 1, 3, 9, 10. */
  assert_int_equal(chime__sumtree_create(&t, 11), 0);
  assert_int_equal(chime__sumtree_find(t, 0, &s), CHIME_ENOTFOUND);
  const double v[11] = {0, 1, 2, 0, 0, 0, 0, 0, 0, 3, 0};
  for (uint64_t i = 0; i < 11; i++)
    assert_int_equal(chime__sumtree_set(t, i, v[i]), 0);
  assert_true(chime__sumtree_total(t) == 6);
  assert_int_equal(find(t, 0), 1); /* leading empty slot skipped */
  assert_int_equal(find(t, nextafter(1, 0)), 1);
  assert_int_equal(find(t, 1), 2);
  assert_int_equal(find(t, nextafter(3, 0)), 2);
  assert_int_equal(find(t, 3), 9); /* the empty slots between skipped */
  assert_int_equal(find(t, nextafter(6, 0)), 9);
  assert_int_equal(find(t, 6), 9); /* at the total: the last non-empty */
  assert_int_equal(find(t, 1e300), 9);
  assert_int_equal(find(t, INFINITY), 9);
  assert_int_equal(find(t, -1), 1);
  assert_int_equal(find(t, NAN), 1);
  /* Bad input changes nothing. */
  assert_int_equal(chime__sumtree_set(t, 11, 1), CHIME_EINVAL);
  assert_int_equal(chime__sumtree_set(t, 0, -1), CHIME_EINVAL);
  assert_int_equal(chime__sumtree_set(t, 0, NAN), CHIME_EINVAL);
  assert_int_equal(chime__sumtree_set(t, 0, INFINITY), CHIME_EINVAL);
  assert_int_equal(chime__sumtree_set(t, 0, 1.5e308), 0);
  assert_int_equal(chime__sumtree_set(t, 10, 1.5e308), CHIME_EOVERFLOW);
  assert_true(chime__sumtree_get(t, 10) == 0);
  assert_int_equal(chime__sumtree_set(t, 0, 0), 0);
  assert_true(chime__sumtree_total(t) == 6);
  /* Emptied again: nothing to find. */
  for (uint64_t i = 0; i < 11; i++)
    assert_int_equal(chime__sumtree_set(t, i, 0), 0);
  assert_int_equal(chime__sumtree_find(t, 0, &s), CHIME_ENOTFOUND);
  chime__sumtree_destroy(t);
  assert_int_equal(chime__sumtree_create(&t, 0), CHIME_EINVAL);
  assert_null(t);
}

/* Sizes 1 and 2 and the ends of every size. */
static void test_small_and_odd_sizes(void **state) {
  (void)state;
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    uint64_t n = sizes[si];
    chime__sumtree_t *t;
    assert_int_equal(chime__sumtree_create(&t, n), 0);
    assert_int_equal(chime__sumtree_slots(t), n);
    assert_int_equal(chime__sumtree_set(t, n - 1, 0.5), 0);
    assert_int_equal(find(t, 0), n - 1);
    assert_int_equal(find(t, 0.5), n - 1);
    assert_int_equal(chime__sumtree_set(t, 0, 0.25), 0);
    if (n > 1) {
      assert_int_equal(find(t, 0.2), 0);
      assert_int_equal(find(t, 0.25), n - 1);
    }
    assert_int_equal(chime__sumtree_set(t, n, 1), CHIME_EINVAL);
    chime__sumtree_destroy(t);
  }
}

/* Many tiny values beside huge ones, drawn anywhere including exactly at
 * the total and the last ulp below it: never an empty slot. */
static void test_zero_slots_never_returned(void **state) {
  (void)state;
  uint64_t n = 1000, seed = 3;
  chime__sumtree_t *t;
  assert_int_equal(chime__sumtree_create(&t, n), 0);
  for (int op = 0; op < 200000; op++) {
    uint64_t s = chime__rng_next(&seed) % n;
    uint64_t r = chime__rng_next(&seed) % 8;
    double v = r < 5 ? 0 : r == 5 ? 1e-300 : r == 6 ? 1e300 : rng_unit(&seed);
    assert_int_equal(chime__sumtree_set(t, s, v), 0);
    double total = chime__sumtree_total(t);
    if (total == 0)
      continue;
    double p[4] = {rng_unit(&seed) * total, total, nextafter(total, 0),
                   rng_unit(&seed) * 1e-290};
    for (int k = 0; k < 4; k++)
      assert_true(chime__sumtree_get(t, find(t, p[k])) > 0);
  }
  chime__sumtree_destroy(t);
}

/* 10^6 seeded draws over 1000 slots of random integer weights (a fifth of
 * them 0): a zero-weight slot is never drawn and the counts fit the weights:
 * chi-square below df + 5 sd (sd = sqrt(2 df)), p ~ 1e-6 for a correct
 * sampler. The seed is fixed, so the figure is the same every run. */
static void check_distribution(uint64_t n, uint64_t seed) {
  uint64_t draws = 1000000;
  chime__sumtree_t *t;
  assert_int_equal(chime__sumtree_create(&t, n), 0);
  double *w = calloc(n, sizeof(double));
  uint64_t *count = calloc(n, sizeof(uint64_t));
  assert_non_null(w);
  assert_non_null(count);
  for (uint64_t i = 0; i < n; i++) {
    w[i] = chime__rng_next(&seed) % 5 == 0
               ? 0
               : (double)(1 + chime__rng_next(&seed) % 100);
    assert_int_equal(chime__sumtree_set(t, i, w[i]), 0);
  }
  double total = chime__sumtree_total(t);
  for (uint64_t d = 0; d < draws; d++)
    count[find(t, rng_unit(&seed) * total)]++;
  double chi2 = 0;
  int df = -1;
  for (uint64_t i = 0; i < n; i++) {
    if (w[i] == 0) {
      assert_int_equal(count[i], 0);
      continue;
    }
    double e = (double)draws * w[i] / total;
    chi2 += ((double)count[i] - e) * ((double)count[i] - e) / e;
    df++;
  }
  printf("sumtree, %" PRIu64 " slots: chi-square %.1f, %d degrees of "
         "freedom\n",
         n, chi2, df);
  assert_true(df > (int)(n * 7 / 10));
  assert_true(chi2 < df + 5 * sqrt(2.0 * df));
  free(w);
  free(count);
  chime__sumtree_destroy(t);
}

/* 1000 slots (four levels), and 4100 (five, the top one nearly empty). */
static void test_distribution(void **state) {
  (void)state;
  check_distribution(1000, 4);
  check_distribution(4100, 14);
}

/* Figures only, no assertion on time. */
static void test_bench(void **state) {
  (void)state;
  uint64_t n = 1000000, seed = 5;
  chime__sumtree_t *t;
  assert_int_equal(chime__sumtree_create(&t, n), 0);
  double t0 = chime__now_s();
  for (uint64_t i = 0; i < n; i++)
    assert_int_equal(chime__sumtree_set(t, i, 1 + rng_unit(&seed)), 0);
  double t1 = chime__now_s();
  for (uint64_t i = 0; i < n; i++)
    assert_int_equal(
        chime__sumtree_set(t, chime__rng_next(&seed) % n, 1 + rng_unit(&seed)),
        0);
  double t2 = chime__now_s();
  double total = chime__sumtree_total(t), acc = 0;
  for (uint64_t i = 0; i < n; i++)
    acc += (double)find(t, rng_unit(&seed) * total);
  double t3 = chime__now_s();
  double p[256];
  uint64_t got[256];
  for (uint64_t i = 0; i < n; i += 256) {
    for (int j = 0; j < 256; j++)
      p[j] = rng_unit(&seed) * total;
    assert_int_equal(chime__sumtree_find_many(t, p, 256, got), 0);
    acc += (double)got[0];
  }
  double t4 = chime__now_s();
  printf("sumtree, 10^6 slots: set in order %.0f ns, set at random %.0f ns, "
         "find %.0f ns, find_many %.0f ns a prefix (%g)\n",
         (t1 - t0) * 1e9 / (double)n, (t2 - t1) * 1e9 / (double)n,
         (t3 - t2) * 1e9 / (double)n, (t4 - t3) * 1e9 / (double)n,
         acc > 0 ? 1.0 : 0.0);
  chime__sumtree_destroy(t);
}

/* 10^8 slots, the largest table the issue asks for: created without
 * touching the memory, and its first and last slots found. */
static void test_large(void **state) {
  (void)state;
  const uint64_t n = 100000000;
  chime__sumtree_t *t;
  assert_int_equal(chime__sumtree_create(&t, n), 0);
  assert_int_equal(chime__sumtree_set(t, 0, 1), 0);
  assert_int_equal(chime__sumtree_set(t, n - 1, 2), 0);
  assert_int_equal(chime__sumtree_set(t, n, 2), CHIME_EINVAL);
  assert_true(chime__sumtree_total(t) == 3);
  assert_int_equal(find(t, 0.5), 0);
  assert_int_equal(find(t, 1), n - 1);
  assert_int_equal(find(t, 3), n - 1);
  chime__sumtree_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_integer_sums_exact),
      cmocka_unit_test(test_real_sums_no_drift),
      cmocka_unit_test(test_find_boundaries),
      cmocka_unit_test(test_every_boundary_exact),
      cmocka_unit_test(test_find_many_as_find),
      cmocka_unit_test(test_single_and_all_zero),
      cmocka_unit_test(test_small_and_odd_sizes),
      cmocka_unit_test(test_zero_slots_never_returned),
      cmocka_unit_test(test_distribution),
      cmocka_unit_test(test_large),
      cmocka_unit_test(test_bench),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
