/* Indexed heap: many random pushes, removes, updates and pops against a
 * naive scan (min and max orders, keys drawn from a few values so ties are
 * common, and equal keys first in first out), error codes, and a rough
 * ns/op figure. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/heap.h"
#include "rng.h"
#include "common/clock.h"

/* The reference: per slot in?, key, and the stamp of its last push/update. */
typedef struct {
  int in;
  double key;
  uint64_t seq;
} ref_t;

/* The slot a naive scan puts on top: best key, then the earliest stamp. */
static int ref_top(const ref_t *r, uint32_t n, int max, uint32_t *slot) {
  int found = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!r[i].in)
      continue;
    if (found) {
      const ref_t *b = &r[*slot];
      int better = max ? r[i].key > b->key : r[i].key < b->key;
      if (!(better || (r[i].key == b->key && r[i].seq < b->seq)))
        continue;
    }
    *slot = i;
    found = 1;
  }
  return found;
}

static void run_random(chime__heap_order_t order, uint32_t n, int key_values,
                       uint64_t seed) {
  chime__heap_t *h;
  assert_int_equal(chime__heap_create(&h, n, order), 0);
  ref_t *r = calloc(n, sizeof(*r));
  assert_non_null(r);
  uint64_t seq = 0, size = 0;
  for (int op = 0; op < 200000; op++) {
    uint32_t s = (uint32_t)(chime__rng_next(&seed) % n);
    /* Few distinct keys: ties everywhere; a few infinities too. */
    double key = (double)(chime__rng_next(&seed) % (uint64_t)key_values) - 3;
    if (chime__rng_next(&seed) % 64 == 0)
      key = chime__rng_next(&seed) % 2 ? INFINITY : -INFINITY;
    switch (chime__rng_next(&seed) % 4) {
    case 0:
      if (r[s].in) {
        assert_int_equal(chime__heap_push(h, s, key), CHIME_EEXIST);
      } else {
        assert_int_equal(chime__heap_push(h, s, key), 0);
        r[s] = (ref_t){1, key, seq++};
        size++;
      }
      break;
    case 1:
      assert_int_equal(chime__heap_remove(h, s), r[s].in ? 0 : CHIME_ENOTFOUND);
      if (r[s].in)
        size--;
      r[s].in = 0;
      break;
    case 2:
      assert_int_equal(chime__heap_update(h, s, key),
                       r[s].in ? 0 : CHIME_ENOTFOUND);
      if (r[s].in)
        r[s] = (ref_t){1, key, seq++};
      break;
    default: { /* pop */
      uint32_t top;
      double k;
      if (chime__heap_top(h, &top, &k) == 0) {
        assert_int_equal(chime__heap_remove(h, top), 0);
        r[top].in = 0;
        size--;
      }
      break;
    }
    }
    assert_int_equal(chime__heap_size(h), size);
    assert_int_equal(chime__heap_contains(h, s), r[s].in);
    if (r[s].in) {
      double k;
      assert_int_equal(chime__heap_key(h, s, &k), 0);
      assert_true(k == r[s].key);
    }
    uint32_t want = 0, got = 0;
    double gk = 0;
    int any = ref_top(r, n, order == CHIME__HEAP_MAX, &want);
    assert_int_equal(chime__heap_top(h, &got, &gk), any ? 0 : CHIME_ENOTFOUND);
    if (any) {
      assert_int_equal(got, want);
      assert_true(gk == r[want].key);
    }
  }
  /* Drained by pops, the order is the reference's. */
  while (size > 0) {
    uint32_t want = 0, got = 0;
    assert_true(ref_top(r, n, order == CHIME__HEAP_MAX, &want));
    assert_int_equal(chime__heap_top(h, &got, NULL), 0);
    assert_int_equal(got, want);
    assert_int_equal(chime__heap_remove(h, got), 0);
    r[got].in = 0;
    size--;
  }
  assert_int_equal(chime__heap_size(h), 0);
  free(r);
  chime__heap_destroy(h);
}

static void test_min_random(void **state) {
  (void)state;
  run_random(CHIME__HEAP_MIN, 1, 3, 1);
  run_random(CHIME__HEAP_MIN, 2, 3, 2);
  run_random(CHIME__HEAP_MIN, 37, 5, 3);
  run_random(CHIME__HEAP_MIN, 300, 1000000, 4);
}

static void test_max_random(void **state) {
  (void)state;
  run_random(CHIME__HEAP_MAX, 1, 3, 5);
  run_random(CHIME__HEAP_MAX, 2, 3, 6);
  run_random(CHIME__HEAP_MAX, 37, 5, 7);
  run_random(CHIME__HEAP_MAX, 300, 1000000, 8);
}

/* Equal keys come out first in first out; an update makes a slot the newest
 * of its key. */
static void test_ties_fifo(void **state) {
  (void)state;
  chime__heap_t *h;
  uint32_t s;
  assert_int_equal(chime__heap_create(&h, 8, CHIME__HEAP_MAX), 0);
  for (uint32_t i = 0; i < 5; i++)
    assert_int_equal(chime__heap_push(h, (i * 3) % 5, 1.0), 0); /* 0 3 1 4 2 */
  assert_int_equal(chime__heap_update(h, 3, 1.0), 0);           /* 0 1 4 2 3 */
  const uint32_t want[5] = {0, 1, 4, 2, 3};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(chime__heap_top(h, &s, NULL), 0);
    assert_int_equal(s, want[i]);
    assert_int_equal(chime__heap_remove(h, s), 0);
  }
  assert_int_equal(chime__heap_top(h, &s, NULL), CHIME_ENOTFOUND);
  assert_int_equal(chime__heap_push(h, 8, 1), CHIME_EINVAL);
  assert_int_equal(chime__heap_push(h, 0, NAN), CHIME_EINVAL);
  assert_int_equal(chime__heap_push(h, 0, 1), 0);
  assert_int_equal(chime__heap_update(h, 0, NAN), CHIME_EINVAL);
  assert_int_equal(chime__heap_remove(h, 9), CHIME_ENOTFOUND);
  chime__heap_destroy(h);
  assert_int_equal(chime__heap_create(&h, 0, CHIME__HEAP_MIN), CHIME_EINVAL);
  assert_null(h);
}

/* Figures only, no assertion on time. */
static void test_bench(void **state) {
  (void)state;
  uint32_t n = 1000000;
  uint64_t seed = 9;
  chime__heap_t *h;
  assert_int_equal(chime__heap_create(&h, n, CHIME__HEAP_MIN), 0);
  double t0 = chime__now_s();
  for (uint32_t i = 0; i < n; i++)
    assert_int_equal(chime__heap_push(h, i, (double)chime__rng_next(&seed)), 0);
  double t1 = chime__now_s();
  for (uint32_t i = 0; i < n; i++)
    assert_int_equal(chime__heap_update(h,
                                        (uint32_t)(chime__rng_next(&seed) % n),
                                        (double)chime__rng_next(&seed)),
                     0);
  double t2 = chime__now_s();
  for (uint32_t i = 0; i < n; i++) {
    uint32_t s;
    assert_int_equal(chime__heap_top(h, &s, NULL), 0);
    assert_int_equal(chime__heap_remove(h, s), 0);
  }
  double t3 = chime__now_s();
  printf("heap, 10^6 slots: push %.0f ns, update at random %.0f ns, "
         "pop %.0f ns\n",
         (t1 - t0) * 1e9 / n, (t2 - t1) * 1e9 / n, (t3 - t2) * 1e9 / n);
  chime__heap_destroy(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_min_random),
      cmocka_unit_test(test_max_random),
      cmocka_unit_test(test_ties_fifo),
      cmocka_unit_test(test_bench),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
