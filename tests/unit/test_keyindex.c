/* Key index: many random inserts, lookups and removes against a naive
 * reference (keys drawn from a small pool so they collide, are re-inserted
 * and removed often, 0 and UINT64_MAX among them; sequential keys as a
 * table makes them; keys the hash crowds together), full and tiny maps, long
 * churn at full load (no tombstones to pile up), and a rough ns/op figure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/keyindex.h"
#include "rng.h"
#include "common/clock.h"

typedef struct {
  uint64_t key;
  int in;
  uint32_t row;
} ref_t;

/* pool[] is the reference: every key the test may use, in or not. */
static void run_random(uint64_t max_items, ref_t *pool, size_t npool, int ops,
                       uint64_t seed) {
  chime__keyindex_t *k;
  assert_int_equal(chime__keyindex_create(&k, max_items), 0);
  uint64_t count = 0;
  for (int op = 0; op < ops; op++) {
    ref_t *r = &pool[chime__rng_next(&seed) % npool];
    uint32_t row = (uint32_t)chime__rng_next(&seed), got = 0;
    switch (chime__rng_next(&seed) % 3) {
    case 0: {
      int rc = chime__keyindex_insert(k, r->key, row);
      if (r->in) {
        assert_int_equal(rc, CHIME_EEXIST);
      } else if (count == max_items) {
        assert_int_equal(rc, CHIME_ERESOURCE);
      } else {
        assert_int_equal(rc, 0);
        r->in = 1;
        r->row = row;
        count++;
      }
      break;
    }
    case 1:
      assert_int_equal(chime__keyindex_remove(k, r->key, &got),
                       r->in ? 0 : CHIME_ENOTFOUND);
      if (r->in) {
        assert_int_equal(got, r->row);
        r->in = 0;
        count--;
      }
      break;
    default:
      break;
    }
    assert_int_equal(chime__keyindex_count(k), count);
    assert_int_equal(chime__keyindex_lookup(k, r->key, &got),
                     r->in ? 0 : CHIME_ENOTFOUND);
    if (r->in)
      assert_int_equal(got, r->row);
    /* Now and then, every key: a shift that lost one shows here. */
    if (op % 4099 == 0) {
      for (size_t i = 0; i < npool; i++) {
        assert_int_equal(chime__keyindex_lookup(k, pool[i].key, &got),
                         pool[i].in ? 0 : CHIME_ENOTFOUND);
        if (pool[i].in)
          assert_int_equal(got, pool[i].row);
      }
    }
  }
  for (size_t i = 0; i < npool; i++) {
    if (pool[i].in)
      assert_int_equal(chime__keyindex_remove(k, pool[i].key, NULL), 0);
    pool[i].in = 0;
  }
  assert_int_equal(chime__keyindex_count(k), 0);
  chime__keyindex_destroy(k);
}

static void test_random_keys(void **state) {
  (void)state;
  uint64_t seed = 1;
  const size_t npool = 3000;
  ref_t *pool = calloc(npool, sizeof(*pool));
  assert_non_null(pool);
  for (size_t i = 0; i < npool; i++)
    pool[i].key = chime__rng_next(&seed);
  pool[0].key = 0;
  pool[1].key = UINT64_MAX;
  pool[2].key = 1;
  /* Room for all, for half (ERESOURCE often), for a handful. */
  run_random(npool, pool, npool, 300000, 2);
  run_random(npool / 2, pool, npool, 300000, 3);
  run_random(7, pool, 20, 50000, 4);
  run_random(1, pool, 3, 10000, 5);
  free(pool);
}

/* Sequential keys, as a table hands them out, including around 0, and a
 * shard's (its id in the top bits). Then keys the multiplicative hash
 * puts close together: multiples of a large Fibonacci number land a few
 * buckets apart (k * F_n / phi is within 1 / phi^n of an integer), so
 * they share long runs; every answer stays right, only slower. */
static void test_sequential_keys(void **state) {
  (void)state;
  const size_t npool = 2000;
  ref_t *pool = calloc(npool, sizeof(*pool));
  assert_non_null(pool);
  for (size_t i = 0; i < npool; i++)
    pool[i].key = (uint64_t)i - 1000; /* UINT64_MAX - 999 .. 999 */
  run_random(1500, pool, npool, 300000, 6);
  for (size_t i = 0; i < npool; i++)
    pool[i].key = (UINT64_C(3) << 48) + i;
  run_random(1500, pool, npool, 200000, 9);
  for (size_t i = 0; i < npool; i++)
    pool[i].key = (uint64_t)(i + 1) * UINT64_C(1346269); /* F_31 */
  run_random(1500, pool, npool, 200000, 8);
  free(pool);
}

/* A map kept full while keys move through it, as a full table evicts its
 * oldest item for each new one: lookups stay right and a miss still ends
 * (with tombstones it would not, or would slow to a crawl). */
static void test_full_churn(void **state) {
  (void)state;
  const uint64_t n = 10000;
  chime__keyindex_t *k;
  uint32_t row;
  assert_int_equal(chime__keyindex_create(&k, n), 0);
  for (uint64_t key = 0; key < n; key++)
    assert_int_equal(chime__keyindex_insert(k, key, (uint32_t)key), 0);
  assert_int_equal(chime__keyindex_insert(k, n, 0), CHIME_ERESOURCE);
  for (uint64_t key = n; key < 50 * n; key++) {
    assert_int_equal(chime__keyindex_remove(k, key - n, &row), 0);
    assert_int_equal(row, (uint32_t)((key - n) % n));
    assert_int_equal(chime__keyindex_insert(k, key, (uint32_t)(key % n)), 0);
    assert_int_equal(chime__keyindex_lookup(k, key - n, &row), CHIME_ENOTFOUND);
  }
  for (uint64_t key = 49 * n; key < 50 * n; key++) {
    assert_int_equal(chime__keyindex_lookup(k, key, &row), 0);
    assert_int_equal(row, (uint32_t)(key % n));
  }
  assert_int_equal(chime__keyindex_count(k), n);
  chime__keyindex_destroy(k);
  assert_int_equal(chime__keyindex_create(&k, 0), CHIME_EINVAL);
  assert_null(k);
}

/* Figures only, no assertion on time. Sized for max keys: 2 x 10^6 as a
 * table of 10^6 sizes it (its spare rows), whose direct array holds a
 * fifo window of 10^6 keys; or 10^6, where half the live keys outlived
 * their slot and live in the hash table (a table's keys kept longer than
 * its capacity's worth of inserts: a remover other than fifo). */
static void bench(uint64_t max) {
  const uint64_t n = 1000000;
  uint64_t seed = 7, sum = 0;
  chime__keyindex_t *k;
  uint32_t row;
  assert_int_equal(chime__keyindex_create(&k, max), 0);
  double t0 = chime__now_s();
  for (uint64_t key = 1; key <= n; key++)
    assert_int_equal(chime__keyindex_insert(k, key, (uint32_t)key), 0);
  double t1 = chime__now_s();
  for (uint64_t i = 0; i < n; i++) {
    assert_int_equal(
        chime__keyindex_lookup(k, 1 + chime__rng_next(&seed) % n, &row), 0);
    sum += row;
  }
  double t2 = chime__now_s();
  for (uint64_t i = 0; i < n; i++)
    assert_int_equal(chime__keyindex_lookup(k, n + 1 + i, &row),
                     CHIME_ENOTFOUND);
  double t3 = chime__now_s();
  for (uint64_t key = 1; key <= n; key++) { /* full: evict one, add one */
    assert_int_equal(chime__keyindex_remove(k, key, NULL), 0);
    assert_int_equal(chime__keyindex_insert(k, key + n, (uint32_t)key), 0);
  }
  double t4 = chime__now_s();
  printf("keyindex, 10^6 items (max %llu): insert %.0f ns, hit %.0f ns, miss "
         "%.0f ns, "
         "remove+insert %.0f ns (%llu)\n",
         (unsigned long long)max, (t1 - t0) * 1e9 / (double)n,
         (t2 - t1) * 1e9 / (double)n, (t3 - t2) * 1e9 / (double)n,
         (t4 - t3) * 1e9 / (double)n, (unsigned long long)(sum & 1));
  chime__keyindex_destroy(k);
}

static void test_bench(void **state) {
  (void)state;
  bench(2000000);
  bench(1000000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_keys),
      cmocka_unit_test(test_sequential_keys),
      cmocka_unit_test(test_full_churn),
      cmocka_unit_test(test_bench),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
