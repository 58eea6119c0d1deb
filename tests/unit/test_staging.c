/* The staging budget alone (src/server/staging.c), with calls of the
 * test's own behind its call ops: bytes charged only while they fit (one
 * request always, when nothing is staged), Insert calls parked once another
 * request like the largest would not fit, read again oldest first when
 * bytes go back, parked behind others even when there is room, let go when
 * they end; references balanced; the staged memory mapped on its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "chime/errors.h"
#include "server/staging.h"

/* A call as staging sees it: references and reads asked for. */
typedef struct fcall_s {
  atomic_int refs;
  atomic_int reads;
  atomic_int order;     /* the read's place among all reads (1, 2, ...) */
  struct fcall_s *then; /* offered to `then_g` when this one is read */
} fcall_t;

static atomic_int reads_total;
static chime__staging_t *then_g;

#define CALL(f) ((chime__call_t *)(f))

static void f_ref(chime__call_t *c) {
  atomic_fetch_add(&((fcall_t *)c)->refs, 1);
}

static void f_unref(chime__call_t *c) {
  assert_true(atomic_fetch_sub(&((fcall_t *)c)->refs, 1) > 0);
}

static void f_recv(chime__call_t *c) {
  fcall_t *f = (fcall_t *)c;
  atomic_fetch_add(&f->reads, 1);
  atomic_store(&f->order, atomic_fetch_add(&reads_total, 1) + 1);
  /* A read's completion offering the call's next request, as the
   * completion-queue thread does, while staging is still reading others. */
  fcall_t *next = f->then;
  f->then = NULL;
  if (next != NULL)
    chime__staging_recv(then_g, CALL(next));
}

static const chime__staging_calls_t fcalls = {
    .ref = f_ref, .unref = f_unref, .recv = f_recv};

static int setup(void **state) {
  (void)state;
  atomic_store(&reads_total, 0);
  return 0;
}

static void stats(chime__staging_t *g, uint64_t bytes, uint32_t parked,
                  uint64_t parked_total) {
  chime__staging_stats_t st;
  chime__staging_get_stats(g, &st);
  assert_int_equal(st.bytes, bytes);
  assert_int_equal(st.parked, parked);
  assert_int_equal(st.parked_total, parked_total);
}

static void test_charge(void **state) {
  (void)state;
  chime__staging_t g;
  chime__staging_init(&g, 1000, &fcalls);
  chime__staging_stats_t st;
  chime__staging_get_stats(&g, &st);
  assert_int_equal(st.budget, 1000);
  assert_int_equal(chime__staging_charge(&g, 600), 0);
  assert_int_equal(chime__staging_charge(&g, 400), 0); /* to the byte */
  assert_int_equal(chime__staging_charge(&g, 1), CHIME_ERESOURCE);
  stats(&g, 1000, 0, 0); /* a refusal charges nothing */
  chime__staging_release(&g, 1000);
  /* With nothing staged one request passes whatever its size, or a
   * request larger than the budget would be refused for ever. */
  assert_int_equal(chime__staging_charge(&g, 5000), 0);
  assert_int_equal(chime__staging_charge(&g, 1), CHIME_ERESOURCE);
  stats(&g, 5000, 0, 0);
  chime__staging_release(&g, 5000);
  assert_int_equal(chime__staging_charge(&g, 700), 0);
  /* No wrap: a request near 2^64 never fits beside staged bytes. */
  assert_int_equal(chime__staging_charge(&g, UINT64_MAX - 100),
                   CHIME_ERESOURCE);
  /* Giving back more than is staged leaves 0, not a wrapped count. */
  chime__staging_release(&g, 900);
  stats(&g, 0, 0, 0);
  chime__staging_fini(&g);
}

/* Not full: a call is read at once, and not held. */
static void test_recv_with_room(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t a = {0};
  chime__staging_init(&g, 1000, &fcalls);
  chime__staging_recv(&g, CALL(&a));
  assert_int_equal(a.reads, 1);
  assert_int_equal(a.refs, 0);
  assert_int_equal(chime__staging_charge(&g, 300), 0);
  chime__staging_recv(&g, CALL(&a)); /* 300 more still fit */
  assert_int_equal(a.reads, 2);
  stats(&g, 300, 0, 0);
  chime__staging_release(&g, 300);
  chime__staging_fini(&g);
}

/* Full means another request like the largest so far would not fit: a
 * call is then parked (held, not read) and read, oldest first, once the
 * bytes go back; a call that comes while others are parked parks behind
 * them even if there is room, so none is passed over for good. */
static void test_park_and_read_in_order(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t c[4];
  memset(c, 0, sizeof(c));
  chime__staging_init(&g, 1000, &fcalls);
  assert_int_equal(chime__staging_charge(&g, 400), 0);
  assert_int_equal(chime__staging_charge(&g, 400), 0);
  /* 200 left, the largest was 400: full. */
  chime__staging_recv(&g, CALL(&c[0]));
  chime__staging_recv(&g, CALL(&c[1]));
  chime__staging_recv(&g, CALL(&c[2]));
  for (int i = 0; i < 3; i++) {
    assert_int_equal(c[i].reads, 0);
    assert_int_equal(c[i].refs, 1);
  }
  stats(&g, 800, 3, 3);
  /* 600 left, room for a 400: every parked call is read, oldest first,
   * its reference dropped once read. */
  chime__staging_release(&g, 400);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(c[i].reads, 1);
    assert_int_equal(c[i].order, i + 1);
    assert_int_equal(c[i].refs, 0);
  }
  stats(&g, 400, 0, 3);
  chime__staging_release(&g, 400);
  chime__staging_fini(&g);
}

static void test_park_behind_parked(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t c[2], late = {0};
  memset(c, 0, sizeof(c));
  chime__staging_init(&g, 1000, &fcalls);
  then_g = &g;
  assert_int_equal(chime__staging_charge(&g, 1000), 0);
  chime__staging_recv(&g, CALL(&c[0]));
  chime__staging_recv(&g, CALL(&c[1]));
  /* c[0]'s read brings `late` while c[1] is still parked and there is
   * room: late goes behind c[1], not before it. */
  c[0].then = &late;
  chime__staging_release(&g, 1000);
  assert_int_equal(c[0].order, 1);
  assert_int_equal(c[1].order, 2);
  assert_int_equal(late.order, 3);
  assert_int_equal(late.reads, 1);
  assert_int_equal(late.refs, 0);
  stats(&g, 0, 0, 3);
  /* A small request fits beside a large one, but another like the
   * largest would not: a call waits until that much is back. */
  assert_int_equal(chime__staging_charge(&g, 900), 0);
  assert_int_equal(chime__staging_charge(&g, 50), 0);
  fcall_t d = {0};
  chime__staging_recv(&g, CALL(&d));
  chime__staging_release(&g, 50); /* 900 staged: still full */
  assert_int_equal(d.reads, 0);
  chime__staging_release(&g, 900);
  assert_int_equal(d.reads, 1);
  chime__staging_fini(&g);
}

/* The largest request counts from when staging was last empty: once a
 * request over the budget (staged alone) is gone, a small one no longer
 * makes every other call park. */
static void test_largest_forgotten_when_empty(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t a = {0}, b = {0};
  chime__staging_init(&g, 1000, &fcalls);
  assert_int_equal(chime__staging_charge(&g, 3000), 0); /* alone: taken */
  chime__staging_recv(&g, CALL(&a));
  assert_int_equal(a.reads, 0); /* parked */
  chime__staging_release(&g, 3000);
  assert_int_equal(a.reads, 1);
  assert_int_equal(chime__staging_charge(&g, 100), 0);
  chime__staging_recv(&g, CALL(&b)); /* 900 left: room for another 100 */
  assert_int_equal(b.reads, 1);
  assert_int_equal(b.refs, 0);
  chime__staging_release(&g, 100);
  chime__staging_fini(&g);
}

/* A parked call that ends is let go: its reference dropped, never read;
 * forgetting a call that is not parked does nothing. */
static void test_forget(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t c[3];
  memset(c, 0, sizeof(c));
  chime__staging_init(&g, 100, &fcalls);
  assert_int_equal(chime__staging_charge(&g, 100), 0);
  for (int i = 0; i < 3; i++)
    chime__staging_recv(&g, CALL(&c[i]));
  chime__staging_forget(&g, CALL(&c[1])); /* the middle */
  assert_int_equal(c[1].refs, 0);
  chime__staging_forget(&g, CALL(&c[2])); /* the tail */
  chime__staging_forget(&g, CALL(&c[2])); /* twice: nothing */
  stats(&g, 100, 1, 3);
  /* The tail was unlinked properly: a new call parks and is read. */
  fcall_t d = {0};
  chime__staging_recv(&g, CALL(&d));
  chime__staging_release(&g, 100);
  assert_int_equal(c[0].reads, 1);
  assert_int_equal(c[1].reads, 0);
  assert_int_equal(c[2].reads, 0);
  assert_int_equal(d.reads, 1);
  assert_true(c[0].order < d.order);
  for (int i = 0; i < 3; i++)
    assert_int_equal(c[i].refs, 0);
  assert_int_equal(d.refs, 0);
  stats(&g, 0, 0, 4);
  chime__staging_fini(&g);
}

/* fini drops the reference of every call still parked. */
static void test_fini_lets_go(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t c[2];
  memset(c, 0, sizeof(c));
  chime__staging_init(&g, 10, &fcalls);
  assert_int_equal(chime__staging_charge(&g, 10), 0);
  chime__staging_recv(&g, CALL(&c[0]));
  chime__staging_recv(&g, CALL(&c[1]));
  chime__staging_fini(&g);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c[i].refs, 0);
    assert_int_equal(c[i].reads, 0);
  }
}

/* Staged samples' memory: its own mapping, writable, 0 bytes allowed,
 * free NULL-safe. */
static void test_alloc(void **state) {
  (void)state;
  size_t n = (1u << 20) + 123;
  uint8_t *p = chime__staging_alloc(n);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 4096, 0); /* a mapping of its own */
  memset(p, 0x5a, n);
  assert_int_equal(p[n - 1], 0x5a);
  chime__staging_free(p, n);
  void *z = chime__staging_alloc(0);
  assert_non_null(z);
  chime__staging_free(z, 0);
  chime__staging_free(NULL, 10);
}

/* Threads charging, offering calls and giving back at once: every call
 * offered is read exactly once in the end, and every reference is
 * dropped. */
enum { THREADS = 4, ROUNDS = 2000 };
typedef struct {
  chime__staging_t *g;
  fcall_t *calls;
  int id;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t bytes = 100 + (uint64_t)((i * 37 + w->id * 11) % 400);
    fcall_t *c = &w->calls[i];
    chime__staging_recv(w->g, CALL(c));
    if (chime__staging_charge(w->g, bytes) == 0)
      chime__staging_release(w->g, bytes);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  chime__staging_t g;
  static fcall_t calls[THREADS][ROUNDS];
  pthread_t th[THREADS];
  worker_t w[THREADS];
  memset(calls, 0, sizeof(calls));
  chime__staging_init(&g, 1000, &fcalls);
  for (int t = 0; t < THREADS; t++) {
    w[t] = (worker_t){&g, calls[t], t};
    assert_int_equal(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++)
    pthread_join(th[t], NULL);
  /* Everything was given back: nothing can stay parked. */
  chime__staging_stats_t st;
  chime__staging_get_stats(&g, &st);
  assert_int_equal(st.bytes, 0);
  assert_int_equal(st.parked, 0);
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < ROUNDS; i++) {
      assert_int_equal(calls[t][i].reads, 1);
      assert_int_equal(calls[t][i].refs, 0);
    }
  chime__staging_fini(&g);
}

static void reserved(chime__staging_t *g, uint64_t bytes, uint64_t reads,
                     uint64_t peak) {
  chime__staging_stats_t st;
  chime__staging_get_stats(g, &st);
  assert_int_equal(st.reserved, bytes);
  assert_int_equal(st.reads, reads);
  assert_int_equal(st.peak, peak);
}

/* Issue 33: a read that may end staged reserves a request as large as
 * those read lately, and is asked for only while staged + reserved leave
 * room for it: of four new calls' reads (300 each, budget 1000) three are
 * asked for and the fourth parked, not read; a message staged turns its
 * reservation into staged bytes (never counted twice: the peak stays
 * within the budget); the parked read goes once there is room; a read
 * that need not reserve (not "always", nothing staged or reserved) is
 * read without; a call that ends gives its reservation back. Before, all
 * four were read at once, whatever the budget. */
static void test_reads_reserve(void **state) {
  (void)state;
  chime__staging_t g;
  fcall_t c[4] = {0}, e = {0};
  uint64_t slot[4] = {0}, es = 0;
  chime__staging_init(&g, 1000, &fcalls);
  chime__staging_seen(&g, 300);
  for (int i = 0; i < 4; i++)
    chime__staging_recv_reserved(&g, CALL(&c[i]), &slot[i], 1);
  assert_int_equal(c[0].reads + c[1].reads + c[2].reads, 3);
  assert_int_equal(c[3].reads, 0);
  assert_int_equal(slot[2], 300);
  assert_int_equal(slot[3], 0);
  reserved(&g, 900, 3, 900);
  stats(&g, 0, 1, 1);
  /* c[0]'s message arrives and is staged: its 300 change places. */
  uint64_t t = chime__staging_take(&g, &slot[0]);
  assert_int_equal(t, 300);
  assert_int_equal(chime__staging_charge_from(&g, 300, &t), 0);
  assert_int_equal(t, 0);
  chime__staging_unreserve_bytes(&g, t);
  reserved(&g, 600, 2, 900);
  assert_int_equal(c[3].reads, 0); /* 900 held: no room for 300 more */
  /* c[1]'s goes into the table: its reservation back, c[3] read. */
  chime__staging_unreserve_bytes(&g, chime__staging_take(&g, &slot[1]));
  assert_int_equal(c[3].reads, 1);
  assert_int_equal(slot[3], 300);
  reserved(&g, 600, 2, 900);
  stats(&g, 300, 0, 1);
  /* c[2]'s call ends before its message: given back. */
  chime__staging_unreserve(&g, &slot[2]);
  chime__staging_unreserve(&g, &slot[2]); /* twice: nothing more */
  reserved(&g, 300, 1, 900);
  chime__staging_unreserve(&g, &slot[3]);
  chime__staging_release(&g, 300);
  reserved(&g, 0, 0, 900);
  /* Nothing staged or reserved: a read of a call whose table has room
   * reserves nothing; a new call's does. */
  chime__staging_recv_reserved(&g, CALL(&e), &es, 0);
  assert_int_equal(e.reads, 1);
  assert_int_equal(es, 0);
  chime__staging_recv_reserved(&g, CALL(&e), &es, 1);
  assert_int_equal(es, 300);
  chime__staging_unreserve(&g, &es);
  for (int i = 0; i < 4; i++)
    assert_int_equal(c[i].refs, 0);
  chime__staging_fini(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_charge, setup),
      cmocka_unit_test_setup(test_recv_with_room, setup),
      cmocka_unit_test_setup(test_park_and_read_in_order, setup),
      cmocka_unit_test_setup(test_park_behind_parked, setup),
      cmocka_unit_test_setup(test_largest_forgotten_when_empty, setup),
      cmocka_unit_test_setup(test_forget, setup),
      cmocka_unit_test_setup(test_fini_lets_go, setup),
      cmocka_unit_test_setup(test_alloc, setup),
      cmocka_unit_test_setup(test_threads, setup),
      cmocka_unit_test_setup(test_reads_reserve, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
