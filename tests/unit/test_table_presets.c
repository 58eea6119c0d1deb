/* Reverb's Table.queue and Table.stack as chime table configs
 * (docs/replay.md, Reverb's names), at the table: each item sampled once,
 * in fifo or lifo order, and an insert into `size` unsampled items waits
 * (the queue by its fifo sampler, the stack by its rate limiter). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "replay/table.h"
#include "table_slot.h"

#define SIZE 4

static chime__table_t *preset(int stack) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), stack ? "stack" : "queue");
  assert_int_equal(chime_spec_parse(&tc.spec, "k:u64[]"), 0);
  tc.capacity = SIZE;
  tc.min_size = 1;
  tc.seed = 1;
  if (stack) {
    tc.sampler = CHIME__SELECTOR_LIFO;
    tc.max_times_sampled = 1;
    tc.samples_per_insert = 1;
    tc.error_buffer = SIZE - 1;
  } else {
    tc.sampler = CHIME__SELECTOR_FIFO;
  }
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* One item without waiting: 0 or CHIME_EBUSY. */
static int try_insert(chime__table_t *t, uint64_t key) {
  chime__span_t sp = {(const uint8_t *)&key, sizeof(key)};
  uint64_t first;
  int rc =
      chime__table_try_insert_spans(t, &sp, 1, 1, NULL, NULL, &first, NULL);
  if (rc == 0)
    assert_int_equal(first, key);
  return rc;
}

/* One sample without waiting: its key, or 0 when the table makes it
 * wait. */
static uint64_t try_sample(chime__table_t *t) {
  slot_t s;
  chime__table_waiter_t w = {0};
  slot_init(&s, t, 1);
  uint64_t key = 0;
  int rc = chime__table_try_sample(t, &s.lay, &s.ws, &w);
  if (rc == 0) {
    key = s.ws.info[0].key;
    assert_int_equal(*(const uint64_t *)s.ws.leaf[0], key);
  } else {
    assert_int_equal(rc, CHIME_EBUSY);
    chime__table_unwait(t, &w);
  }
  slot_fini(&s);
  return key;
}

static void check_preset(int stack) {
  chime__table_t *t = preset(stack);
  chime__table_stats_t st;
  assert_int_equal(try_sample(t), 0); /* empty: a sampler waits */
  for (uint64_t k = 1; k <= SIZE; k++)
    assert_int_equal(try_insert(t, k), 0);
  /* size items unsampled: the next insert waits, nothing evicted. */
  assert_int_equal(try_insert(t, SIZE + 1), CHIME_EBUSY);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, SIZE);
  assert_int_equal(st.left, 0);
  assert_int_equal(try_sample(t), stack ? SIZE : 1);
  assert_int_equal(try_insert(t, SIZE + 1), 0);
  assert_int_equal(try_insert(t, SIZE + 2), CHIME_EBUSY);
  /* Drained in order, each item once; then the sampler waits again. */
  const uint64_t want[2][SIZE] = {{2, 3, 4, 5}, {5, 3, 2, 1}};
  for (int i = 0; i < SIZE; i++)
    assert_int_equal(try_sample(t), want[stack][i]);
  assert_int_equal(try_sample(t), 0);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.left, SIZE + 1);
  assert_int_equal(st.left_times_sampled, SIZE + 1);
  chime__table_destroy(t);
}

static void test_queue(void **state) {
  (void)state;
  check_preset(0);
}

static void test_stack(void **state) {
  (void)state;
  check_preset(1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queue),
      cmocka_unit_test(test_stack),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
