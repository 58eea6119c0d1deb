/* The stream registry alone (src/server/registry.c): the per-stream and
 * total ring budgets, the cap on streams counted (draining ones too), the
 * list GetInfo, Stats and stop walk, and the wait for the count to reach
 * zero that destroy makes. Streams are plain nodes with an owner pointer
 * here, as the registry knows them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/clock.h"
#include "server/registry.h"

#define MiB (1ull << 20)

static void test_stream_budget(void **state) {
  (void)state;
  chime__registry_t r;
  char err[256] = "";
  chime__registry_init(&r, 8 * MiB, 64 * MiB);
  assert_int_equal(chime__registry_check(&r, 8 * MiB, err, sizeof(err)), 0);
  assert_string_equal(err, "");
  assert_int_equal(chime__registry_check(&r, 8 * MiB + 1, err, sizeof(err)),
                   CHIME_ERESOURCE);
  /* The client is told what it asked for and what one stream may have. */
  assert_non_null(strstr(err, "8388609"));
  assert_non_null(strstr(err, "per-stream budget is 8388608"));
  /* check charges nothing and counts nothing. */
  assert_int_equal(chime__registry_count(&r), 0);
  assert_int_equal(chime__registry_ring_bytes(&r), 0);
  /* The budgets read from the config replace the ones at init. */
  chime__registry_set_budgets(&r, 16 * MiB, 64 * MiB);
  assert_int_equal(chime__registry_check(&r, 8 * MiB + 1, err, sizeof(err)), 0);
  chime__registry_fini(&r);
}

static void test_total_budget(void **state) {
  (void)state;
  chime__registry_t r;
  char err[256] = "";
  chime__registry_init(&r, 64 * MiB, 10 * MiB);
  assert_int_equal(chime__registry_enter(&r, 4 * MiB, err, sizeof(err)), 0);
  assert_int_equal(chime__registry_enter(&r, 6 * MiB, err, sizeof(err)), 0);
  assert_int_equal(chime__registry_ring_bytes(&r), 10 * MiB);
  /* Full: the next stream is refused, with what is left, and charged
   * nothing; it is counted until its exit, like every entered stream. */
  assert_int_equal(chime__registry_enter(&r, 1, err, sizeof(err)),
                   CHIME_ERESOURCE);
  assert_non_null(strstr(err, "0 of the total budget of 10485760"));
  assert_int_equal(chime__registry_ring_bytes(&r), 10 * MiB);
  assert_int_equal(chime__registry_count(&r), 3);
  chime__registry_exit(&r);
  assert_int_equal(chime__registry_count(&r), 2);
  /* A stream's exit does not give its ring back: its last hold does
   * (a learner may hold the pages after the stream is gone). */
  chime__registry_exit(&r);
  assert_int_equal(chime__registry_ring_bytes(&r), 10 * MiB);
  assert_int_equal(chime__registry_enter(&r, 4 * MiB, err, sizeof(err)),
                   CHIME_ERESOURCE);
  chime__registry_exit(&r);
  chime__registry_uncharge(&r, 4 * MiB);
  assert_int_equal(chime__registry_ring_bytes(&r), 6 * MiB);
  assert_int_equal(chime__registry_enter(&r, 4 * MiB, err, sizeof(err)), 0);
  assert_int_equal(chime__registry_ring_bytes(&r), 10 * MiB);
  chime__registry_exit(&r);
  chime__registry_exit(&r);
  chime__registry_uncharge(&r, 4 * MiB);
  chime__registry_uncharge(&r, 6 * MiB);
  assert_int_equal(chime__registry_count(&r), 0);
  assert_int_equal(chime__registry_ring_bytes(&r), 0);
  chime__registry_fini(&r);
}

/* At most CHIME__MAX_STREAMS counted at once, draining ones included; a
 * refused one still counts until its exit, so a flood of opens cannot
 * slip past the cap between a refusal and its clean-up. */
static void test_stream_cap(void **state) {
  (void)state;
  chime__registry_t r;
  char err[256] = "";
  chime__registry_init(&r, 1, 1);
  for (int i = 0; i < CHIME__MAX_STREAMS; i++)
    assert_int_equal(chime__registry_enter(&r, 0, err, sizeof(err)), 0);
  assert_int_equal(chime__registry_enter(&r, 0, err, sizeof(err)),
                   CHIME_ERESOURCE);
  char want[64];
  snprintf(want, sizeof(want), "at most %d at once", CHIME__MAX_STREAMS);
  assert_non_null(strstr(err, want));
  assert_int_equal(chime__registry_count(&r), CHIME__MAX_STREAMS + 1);
  chime__registry_exit(&r); /* the refused one */
  assert_int_equal(chime__registry_enter(&r, 0, err, sizeof(err)),
                   CHIME_ERESOURCE);
  chime__registry_exit(&r);
  chime__registry_exit(&r); /* one that was open */
  assert_int_equal(chime__registry_enter(&r, 0, err, sizeof(err)), 0);
  for (int i = 0; i < CHIME__MAX_STREAMS; i++)
    chime__registry_exit(&r);
  assert_int_equal(chime__registry_count(&r), 0);
  chime__registry_fini(&r);
}

/* Owners seen by a walk, newest first: the ids of the streams behind
 * them (each owner is an int holding its stream's id). */
static int walk(chime__registry_t *r, uint64_t *ids, int max) {
  chime__registry_node_t *it;
  int n = 0;
  chime__registry_lock(r);
  for (int *o = chime__registry_first(r, &it); o != NULL;
       o = chime__registry_next(&it)) {
    assert_true(n < max);
    ids[n++] = (uint64_t)*o;
  }
  assert_int_equal(chime__registry_listed(r), n);
  chime__registry_unlock(r);
  return n;
}

static void test_list(void **state) {
  (void)state;
  chime__registry_t r;
  chime__registry_node_t node[4];
  int owner[4];
  uint64_t ids[8];
  chime__registry_init(&r, 1, 1);
  assert_int_equal(walk(&r, ids, 8), 0);
  memset(node, 0, sizeof(node));
  for (int i = 0; i < 4; i++) {
    uint64_t id = chime__registry_add(&r, &node[i], &owner[i]);
    assert_int_equal(id, (uint64_t)i + 1); /* ids count from 1 */
    owner[i] = (int)id;
  }
  assert_int_equal(walk(&r, ids, 8), 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(ids[i], 4 - i);
  /* Off the list from the middle, the head and the tail; a second remove,
   * and one of a node never listed, change nothing. */
  chime__registry_remove(&r, &node[1]);
  chime__registry_remove(&r, &node[3]);
  chime__registry_remove(&r, &node[3]);
  assert_int_equal(walk(&r, ids, 8), 2);
  assert_int_equal(ids[0], 3);
  assert_int_equal(ids[1], 1);
  chime__registry_remove(&r, &node[0]);
  assert_int_equal(walk(&r, ids, 8), 1);
  assert_int_equal(ids[0], 3);
  chime__registry_node_t stray;
  memset(&stray, 0, sizeof(stray));
  chime__registry_remove(&r, &stray);
  assert_int_equal(walk(&r, ids, 8), 1);
  /* A stream listed again gets a new id: ids are never reused. */
  assert_int_equal(chime__registry_add(&r, &node[0], &owner[0]), 5);
  owner[0] = 5;
  assert_int_equal(walk(&r, ids, 8), 2);
  assert_int_equal(ids[0], 5);
  assert_int_equal(ids[1], 3);
  chime__registry_remove(&r, &node[0]);
  chime__registry_remove(&r, &node[2]);
  assert_int_equal(walk(&r, ids, 8), 0);
  /* The list is not the count: listing counts nothing. */
  assert_int_equal(chime__registry_count(&r), 0);
  chime__registry_fini(&r);
}

static void test_wait_empty_at_once(void **state) {
  (void)state;
  chime__registry_t r;
  chime__registry_init(&r, 1, 1);
  assert_int_equal(chime__registry_wait_empty(&r, 60000), 0);
  chime__registry_fini(&r);
}

/* The wait lasts the milliseconds asked for, not only their whole
 * seconds: destroy waits 10 ms for streams still draining, and a wait of
 * none left their tables and the server unfreed for good. */
static void test_wait_empty_waits_ms(void **state) {
  (void)state;
  chime__registry_t r;
  char err[64];
  chime__registry_init(&r, 1, 1);
  assert_int_equal(chime__registry_enter(&r, 0, err, sizeof(err)), 0);
  uint64_t t0 = chime__now_ns();
  assert_int_equal(chime__registry_wait_empty(&r, 300), 1);
  uint64_t waited_ms = (chime__now_ns() - t0) / 1000000u;
  if (waited_ms < 300)
    fail_msg("wait_empty(300 ms) returned after %llu ms",
             (unsigned long long)waited_ms);
  chime__registry_exit(&r);
  chime__registry_fini(&r);
}

typedef struct {
  chime__registry_t *r;
  _Atomic pid_t tid;
  uint32_t left;
} waiter_t;

static void *wait_main(void *arg) {
  waiter_t *w = arg;
  atomic_store(&w->tid, (pid_t)syscall(SYS_gettid));
  w->left = chime__registry_wait_empty(w->r, 60000);
  return NULL;
}

/* Whether thread tid of this process is asleep ('S' in its stat). */
static int asleep(pid_t tid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* after the name, which may hold ')' */
  return p != NULL && p[1] == ' ' && p[2] == 'S';
}

/* An exit wakes a wait already asleep: it returns 0 long before its
 * timeout. The exit comes once the waiter sleeps: with nothing else taking
 * the registry's lock, it sleeps in the wait itself. */
static void test_wait_empty_woken(void **state) {
  (void)state;
  chime__registry_t r;
  char err[64];
  pthread_t th;
  waiter_t w = {.r = &r};
  chime__registry_init(&r, 1, 1);
  assert_int_equal(chime__registry_enter(&r, 0, err, sizeof(err)), 0);
  uint64_t t0 = chime__now_ns();
  assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
  while (atomic_load(&w.tid) == 0 || !asleep(atomic_load(&w.tid))) {
    assert_true(chime__now_ns() - t0 < 30000000000ull);
    sched_yield();
  }
  chime__registry_exit(&r);
  pthread_join(th, NULL);
  uint64_t waited_s = (chime__now_ns() - t0) / 1000000000u;
  assert_int_equal(w.left, 0);
  /* Generous: an exit that wakes no one costs the whole minute. */
  assert_true(waited_s < 30);
  chime__registry_fini(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_budget),
      cmocka_unit_test(test_total_budget),
      cmocka_unit_test(test_stream_cap),
      cmocka_unit_test(test_list),
      cmocka_unit_test(test_wait_empty_at_once),
      cmocka_unit_test(test_wait_empty_waits_ms),
      cmocka_unit_test(test_wait_empty_woken),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
