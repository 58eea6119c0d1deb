/* The emulated link's arithmetic (bench/link/linkq.h): delay, rate, the
 * bounded queue, loss and down, on a clock the test moves. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "link/linkq.h"

#define MS UINT64_C(1000000)

/* No rate: a packet arrives exactly the delay after it was offered. */
static void test_delay_only(void **state) {
  (void)state;
  chime__linkq_t q;
  chime__linkq_init(&q, 5 * MS, 0, 1 << 20, 0, 1);
  assert_int_equal(chime__linkq_offer(&q, 100 * MS, 1500), 105 * MS);
  assert_int_equal(chime__linkq_offer(&q, 100 * MS, 65000), 105 * MS);
  assert_int_equal(q.sent, 2);
  assert_int_equal(q.sent_bytes, 66500);
}

/* At 8 Mbit/s a 1,000-byte packet takes 1 ms on the wire; packets
 * offered together leave one after another. */
static void test_rate_serializes(void **state) {
  (void)state;
  chime__linkq_t q;
  chime__linkq_init(&q, 10 * MS, 8000000, 1 << 20, 0, 1);
  for (int i = 1; i <= 5; i++)
    assert_int_equal(chime__linkq_offer(&q, 0 + 1, 1000),
                     1 + (uint64_t)i * MS + 10 * MS);
  /* once the wire is idle again, no wait */
  assert_int_equal(chime__linkq_offer(&q, 100 * MS, 1000), 111 * MS);
}

/* The queue holds queue_bytes not yet sent (the packet on the wire
 * included); past that a packet is dropped (tail drop), and the queue
 * frees as it drains. */
static void test_queue_tail_drop(void **state) {
  (void)state;
  chime__linkq_t q;
  chime__linkq_init(&q, 0, 8000000, 3000, 0, 1);
  int sent = 0;
  for (int i = 0; i < 10; i++)
    sent += chime__linkq_offer(&q, 1, 1000) != 0;
  assert_int_equal(sent, 3); /* one on the wire, two waiting */
  assert_int_equal(q.tail_dropped, 7);
  /* 2 ms later two have left: room for two more */
  sent = 0;
  for (int i = 0; i < 5; i++)
    sent += chime__linkq_offer(&q, 1 + 2 * MS, 1000) != 0;
  assert_int_equal(sent, 2);
}

/* Loss 0.01 over 10^5 packets: within 5 sigma of 1,000 lost. */
static void test_loss_rate(void **state) {
  (void)state;
  chime__linkq_t q;
  chime__linkq_init(&q, 0, 0, 1 << 20, 0.01, 42);
  for (int i = 0; i < 100000; i++)
    chime__linkq_offer(&q, 1, 100);
  assert_in_range(q.lost, 1000 - 160, 1000 + 160);
  assert_int_equal(q.lost + q.sent, 100000);
}

/* Even loss, every 1000th: exactly the 1000th, 2000th, ... lost, the
 * random stream unused (a loss probability set beside it is ignored). */
static void test_loss_every(void **state) {
  (void)state;
  chime__linkq_t q;
  chime__linkq_init(&q, MS, 0, 1 << 20, 0.5, 42);
  q.every = 1000;
  for (int i = 1; i <= 10500; i++) {
    uint64_t at = chime__linkq_offer(&q, 1, 100);
    assert_true(i % 1000 == 0 ? at == 0 : at == 1 + MS);
  }
  assert_int_equal(q.lost, 10);
  assert_int_equal(q.sent, 10490);
  /* packets dropped while down do not move the count */
  q.down = 1;
  chime__linkq_offer(&q, 1, 100);
  q.down = 0;
  for (int i = 0; i < 499; i++)
    assert_int_not_equal(chime__linkq_offer(&q, 1, 100), 0);
  assert_int_equal(chime__linkq_offer(&q, 1, 100), 0);
}

/* Down: every packet dropped and counted; up again: delivered. */
static void test_down(void **state) {
  (void)state;
  chime__linkq_t q;
  chime__linkq_init(&q, MS, 0, 1 << 20, 0, 1);
  q.down = 1;
  assert_int_equal(chime__linkq_offer(&q, 1, 100), 0);
  assert_int_equal(q.down_dropped, 1);
  q.down = 0;
  assert_int_equal(chime__linkq_offer(&q, 1, 100), 1 + MS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_delay_only),
      cmocka_unit_test(test_rate_serializes),
      cmocka_unit_test(test_queue_tail_drop),
      cmocka_unit_test(test_loss_rate),
      cmocka_unit_test(test_loss_every),
      cmocka_unit_test(test_down),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
