/* The sampler pool alone (src/server/fill_pool.c), with jobs of the test's
 * own: steps run until DONE and done() once, never two steps of one job at
 * a time; a job that waits for items runs again only when kicked, one
 * kicked while its step runs runs again (no lost wake-up), one waiting on a
 * futex word runs when the word moves (also past the 127 words futex_waitv
 * takes, and when it moved before the job parked), one waiting for a time
 * not before it; chime__pool_run runs a waiting or queued job on the
 * caller's thread and leaves one a worker has to that worker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "server/fill_pool.h"

/* Every wait in this file ends within this: liveness, not speed. */
#define LIVENESS_NS (30ull * 1000000000ull)

typedef struct tjob_s tjob_t;
typedef chime__fill_t (*script_t)(tjob_t *t, chime__fill_wait_t *w);

struct tjob_s {
  chime__fill_job_t job; /* first: the pool hands it back */
  script_t script;
  int param;             /* the script's own number */
  atomic_int calls;      /* fill steps run */
  atomic_int inside;     /* steps running now */
  atomic_int overlap;    /* steps that found another running */
  atomic_int done;       /* done() calls */
  atomic_int after_done; /* steps run after DONE */
  atomic_int waits;      /* steps that returned a wait */
  atomic_int items;      /* what WAIT_ITEMS scripts take */
  _Atomic uint32_t bell; /* what WAIT_SLOT scripts watch */
  atomic_ullong wake_ns; /* WAIT_UNTIL scripts: the deadline they gave */
  atomic_ullong ran_ns;  /* when the last step started */
  atomic_int on_caller;  /* steps run on the test's thread */
  sem_t gate, in_step;   /* blocking scripts: hold a step inside fill */
};

/* Steps and done() tell the test through one cond. */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static pthread_t test_thread;

static void event(void) {
  pthread_mutex_lock(&ev_mu);
  pthread_cond_broadcast(&ev_cond);
  pthread_mutex_unlock(&ev_mu);
}

/* Waits until pred(arg) holds; fails after LIVENESS_NS. */
static void await(int (*pred)(void *), void *arg) {
  uint64_t t0 = chime__now_ns();
  pthread_mutex_lock(&ev_mu);
  while (!pred(arg)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&ev_cond, &ev_mu, &ts);
    if (chime__now_ns() - t0 > LIVENESS_NS) {
      pthread_mutex_unlock(&ev_mu);
      fail_msg("waited 30 s for a job");
    }
  }
  pthread_mutex_unlock(&ev_mu);
}

static int is_done(void *arg) {
  return atomic_load(&((tjob_t *)arg)->done) > 0;
}

static int is_waiting(void *arg) {
  return atomic_load(&((tjob_t *)arg)->waits) > 0;
}

static chime__fill_t tfill(chime__fill_job_t *j, chime__fill_wait_t *w) {
  tjob_t *t = (tjob_t *)j;
  if (atomic_fetch_add(&t->inside, 1) != 0)
    atomic_fetch_add(&t->overlap, 1);
  if (atomic_load(&t->done))
    atomic_fetch_add(&t->after_done, 1);
  atomic_store(&t->ran_ns, chime__now_ns());
  if (pthread_equal(pthread_self(), test_thread))
    atomic_fetch_add(&t->on_caller, 1);
  atomic_fetch_add(&t->calls, 1);
  chime__fill_t r = t->script(t, w);
  if (r != CHIME__FILL_AGAIN && r != CHIME__FILL_DONE)
    atomic_fetch_add(&t->waits, 1);
  atomic_fetch_sub(&t->inside, 1);
  event();
  return r;
}

static void tdone(chime__fill_job_t *j) {
  tjob_t *t = (tjob_t *)j;
  atomic_fetch_add(&t->done, 1);
  event();
}

static tjob_t *tjob(script_t script, int param) {
  tjob_t *t = calloc(1, sizeof(*t));
  assert_non_null(t);
  t->job.fill = tfill;
  t->job.done = tdone;
  t->script = script;
  t->param = param;
  sem_init(&t->gate, 0, 0);
  sem_init(&t->in_step, 0, 0);
  return t;
}

static void tjob_free(tjob_t *t) {
  sem_destroy(&t->gate);
  sem_destroy(&t->in_step);
  free(t);
}

/* What holds for every job once the pool is gone: done() once, never two
 * steps at a time, none after DONE. */
static void tjob_check_free(tjob_t *t) {
  assert_int_equal(atomic_load(&t->done), 1);
  assert_int_equal(atomic_load(&t->overlap), 0);
  assert_int_equal(atomic_load(&t->after_done), 0);
  tjob_free(t);
}

/* param steps of AGAIN, then DONE. */
static chime__fill_t s_count(tjob_t *t, chime__fill_wait_t *w) {
  (void)w;
  return atomic_load(&t->calls) < t->param ? CHIME__FILL_AGAIN
                                           : CHIME__FILL_DONE;
}

/* One item ends the job; none: WAIT_ITEMS. With param 1 the first step
 * looks for the item, then is held at the gate before it answers: what a
 * step that found nothing does while an item and its kick arrive. */
static chime__fill_t s_one_item(tjob_t *t, chime__fill_wait_t *w) {
  (void)w;
  int found = atomic_load(&t->items) > 0;
  if (t->param == 1 && atomic_load(&t->calls) == 1) {
    sem_post(&t->in_step);
    sem_wait(&t->gate);
  }
  return found ? CHIME__FILL_DONE : CHIME__FILL_WAIT_ITEMS;
}

/* WAIT_SLOT on the job's bell until it moved from what the first step
 * read; param 1: the first step hands in a value already stale. */
static chime__fill_t s_bell(tjob_t *t, chime__fill_wait_t *w) {
  uint32_t now = atomic_load(&t->bell);
  if (now != 0 || (t->param == 1 && atomic_load(&t->calls) > 1))
    return CHIME__FILL_DONE;
  w->bell = (uint32_t *)&t->bell;
  w->bell_val = t->param == 1 ? now + 7 : now;
  return CHIME__FILL_WAIT_SLOT;
}

/* WAIT_UNTIL param ms from the first step (param -1: until 0, a kick
 * only), then DONE. */
static chime__fill_t s_until(tjob_t *t, chime__fill_wait_t *w) {
  if (atomic_load(&t->calls) > 1)
    return CHIME__FILL_DONE;
  uint64_t at =
      t->param < 0 ? 0 : chime__now_ns() + (uint64_t)t->param * 1000000u;
  atomic_store(&t->wake_ns, at);
  w->until_ns = at;
  return CHIME__FILL_WAIT_UNTIL;
}

static int setup(void **state) {
  (void)state;
  test_thread = pthread_self();
  return 0;
}

static void test_workers(void **state) {
  (void)state;
  chime__pool_t *p;
  assert_int_equal(chime__pool_create(&p, 0), 0); /* at least one */
  assert_int_equal(chime__pool_workers(p), 1);
  chime__pool_destroy(p);
  assert_int_equal(chime__pool_create(&p, 1000), 0); /* at most 64 */
  assert_int_equal(chime__pool_workers(p), 64);
  chime__pool_destroy(p);
  chime__pool_destroy(NULL);
  /* Kicks and runs before a pool exists (a server never started). */
  tjob_t *t = tjob(s_count, 1);
  chime__pool_kick(NULL, &t->job);
  assert_int_equal(chime__pool_run(NULL, &t->job), 0);
  assert_int_equal(atomic_load(&t->calls), 0);
  tjob_free(t);
}

/* Many jobs on two workers: every step runs, done() once each, never two
 * steps of a job at once, nothing after DONE. */
static void test_steps_until_done(void **state) {
  (void)state;
  enum { N = 40 };
  chime__pool_t *p;
  tjob_t *t[N];
  assert_int_equal(chime__pool_create(&p, 2), 0);
  for (int i = 0; i < N; i++) {
    t[i] = tjob(s_count, 1 + i * 7);
    chime__pool_add(p, &t[i]->job);
  }
  for (int i = 0; i < N; i++) {
    await(is_done, t[i]);
    assert_int_equal(atomic_load(&t[i]->calls), 1 + i * 7);
    assert_int_equal(atomic_load(&t[i]->on_caller), 0);
  }
  chime__pool_destroy(p);
  for (int i = 0; i < N; i++)
    tjob_check_free(t[i]);
}

/* A job waiting for items runs again when kicked, and only then: two
 * steps in all, the wait and the one that found the item. */
static void test_wait_items_until_kick(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_one_item, 0);
  assert_int_equal(chime__pool_create(&p, 2), 0);
  chime__pool_add(p, &t->job);
  await(is_waiting, t);
  atomic_store(&t->items, 1);
  chime__pool_kick(p, &t->job);
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);
  /* A kick after DONE runs nothing. */
  chime__pool_kick(p, &t->job);
  assert_int_equal(chime__pool_run(p, &t->job), 0);
  chime__pool_destroy(p);
  assert_int_equal(atomic_load(&t->calls), 2);
  tjob_check_free(t);
}

/* The kick that comes while the step that will say "wait" runs is not
 * lost: the job runs again at once. */
static void test_kick_while_running(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_one_item, 1);
  assert_int_equal(chime__pool_create(&p, 1), 0);
  chime__pool_add(p, &t->job);
  sem_wait(&t->in_step); /* step 1 is inside fill, items still 0 */
  atomic_store(&t->items, 1);
  chime__pool_kick(p, &t->job);
  sem_post(&t->gate); /* step 1 returns WAIT_ITEMS */
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);
  chime__pool_destroy(p);
  tjob_check_free(t);
}

/* pool_run while a worker runs the job: 0, nothing run here, and the job
 * runs again on the worker (the run counts as a kick). */
static void test_run_while_worker_has_it(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_one_item, 1);
  assert_int_equal(chime__pool_create(&p, 1), 0);
  chime__pool_add(p, &t->job);
  sem_wait(&t->in_step);
  atomic_store(&t->items, 1);
  assert_int_equal(chime__pool_run(p, &t->job), 0);
  sem_post(&t->gate);
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);
  assert_int_equal(atomic_load(&t->on_caller), 0);
  chime__pool_destroy(p);
  tjob_check_free(t);
}

/* pool_run on a waiting job runs its steps here, on the caller's thread,
 * done() included; on a queued one (the only worker busy) too. */
static void test_run_on_caller(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_one_item, 0);
  assert_int_equal(chime__pool_create(&p, 1), 0);
  chime__pool_add(p, &t->job);
  await(is_waiting, t);
  atomic_store(&t->items, 1);
  /* Parked (IDLE) or, if the test came first, still RUNNING: only the
   * first runs here. Either way the job ends. */
  int ran = chime__pool_run(p, &t->job);
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);
  assert_int_equal(atomic_load(&t->on_caller), ran);

  /* Queued: the one worker is held inside another job's step. */
  tjob_t *busy = tjob(s_one_item, 1);
  chime__pool_add(p, &busy->job);
  sem_wait(&busy->in_step);
  tjob_t *q = tjob(s_count, 3);
  chime__pool_add(p, &q->job);
  assert_int_equal(chime__pool_run(p, &q->job), 1);
  assert_int_equal(atomic_load(&q->done), 1); /* done() ran here too */
  assert_int_equal(atomic_load(&q->calls), 3);
  assert_int_equal(atomic_load(&q->on_caller), 3);
  atomic_store(&busy->items, 1);
  sem_post(&busy->gate); /* its step found nothing: it waits for a kick */
  await(is_waiting, busy);
  chime__pool_kick(p, &busy->job);
  await(is_done, busy);
  chime__pool_destroy(p);
  tjob_check_free(t);
  tjob_check_free(busy);
  tjob_check_free(q);
}

static void ring_bell(_Atomic uint32_t *bell, int wake) {
  atomic_fetch_add(bell, 1);
  if (wake) /* shared (not private) futex, as a learner's release rings */
    syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* WAIT_SLOT: the watcher puts the job back when its word moves and is
 * woken; a word that moved before the job parked needs no wake. */
static void test_wait_slot(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_bell, 0);
  assert_int_equal(chime__pool_create(&p, 2), 0);
  chime__pool_add(p, &t->job);
  await(is_waiting, t);
  ring_bell(&t->bell, 1);
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);

  tjob_t *stale = tjob(s_bell, 1);
  chime__pool_add(p, &stale->job);
  await(is_done, stale);
  assert_int_equal(atomic_load(&stale->calls), 2);
  chime__pool_destroy(p);
  tjob_check_free(t);
  tjob_check_free(stale);
}

/* More rings waiting than futex_waitv takes (127 beside the watcher's
 * own word): the watcher also looks at every word each millisecond, so
 * the words it does not sleep on still bring their jobs back. One worker
 * parks the jobs in the order they were added, and the watcher sleeps on
 * the newest 127: the oldest 50 are past them, and their words move with
 * no wake (a wake would end the watcher's sleep whatever the words). */
static void test_wait_slot_overflow(void **state) {
  (void)state;
  enum { N = 200, OLD = 50 };
  chime__pool_t *p;
  tjob_t *t[N];
  assert_int_equal(chime__pool_create(&p, 1), 0);
  for (int i = 0; i < N; i++) {
    t[i] = tjob(s_bell, 0);
    chime__pool_add(p, &t[i]->job);
  }
  /* Done once the worker parked every job before it. */
  tjob_t *last = tjob(s_count, 1);
  chime__pool_add(p, &last->job);
  await(is_done, last);
  for (int i = 0; i < N; i++)
    assert_int_equal(atomic_load(&t[i]->waits), 1);
  for (int i = 0; i < OLD; i++)
    ring_bell(&t[i]->bell, 0);
  for (int i = 0; i < OLD; i++)
    await(is_done, t[i]);
  for (int i = OLD; i < N; i++) {
    assert_int_equal(atomic_load(&t[i]->done), 0);
    ring_bell(&t[i]->bell, 1);
  }
  for (int i = OLD; i < N; i++)
    await(is_done, t[i]);
  chime__pool_destroy(p);
  for (int i = 0; i < N; i++)
    tjob_check_free(t[i]);
  tjob_check_free(last);
}

/* WAIT_UNTIL: the job runs again once its time came, not before; until 0
 * waits for a kick alone. */
static void test_wait_until(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_until, 50);
  assert_int_equal(chime__pool_create(&p, 2), 0);
  chime__pool_add(p, &t->job);
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);
  assert_true(atomic_load(&t->ran_ns) >= atomic_load(&t->wake_ns));

  tjob_t *k = tjob(s_until, -1);
  chime__pool_add(p, &k->job);
  await(is_waiting, k);
  chime__pool_kick(p, &k->job);
  await(is_done, k);
  assert_int_equal(atomic_load(&k->calls), 2);
  chime__pool_destroy(p);
  tjob_check_free(t);
  tjob_check_free(k);
}

/* A kick before the job is added does nothing; add runs it. */
static void test_kick_before_add(void **state) {
  (void)state;
  chime__pool_t *p;
  tjob_t *t = tjob(s_count, 2);
  assert_int_equal(chime__pool_create(&p, 2), 0);
  chime__pool_kick(p, &t->job);
  assert_int_equal(chime__pool_run(p, &t->job), 0);
  assert_int_equal(atomic_load(&t->calls), 0);
  chime__pool_add(p, &t->job);
  await(is_done, t);
  assert_int_equal(atomic_load(&t->calls), 2);
  chime__pool_destroy(p);
  tjob_check_free(t);
}

/* Kicks from several threads on jobs that wait for items: each item is
 * taken once and every job ends (a lost wake-up would leave one waiting
 * with items). */
typedef struct {
  chime__pool_t *p;
  tjob_t **t;
  int n, rounds;
} kicker_t;

static void *kicker_main(void *arg) {
  kicker_t *k = arg;
  for (int r = 0; r < k->rounds; r++)
    for (int i = 0; i < k->n; i++) {
      atomic_fetch_add(&k->t[i]->items, 1);
      chime__pool_kick(k->p, &k->t[i]->job);
    }
  return NULL;
}

static chime__fill_t s_drain(tjob_t *t, chime__fill_wait_t *w) {
  (void)w;
  int n = atomic_load(&t->items);
  while (n > 0 && !atomic_compare_exchange_weak(&t->items, &n, n - 1))
    ;
  if (n > 0 && ++t->param == 2 * 500) /* both kickers' rounds */
    return CHIME__FILL_DONE;
  return n > 0 ? CHIME__FILL_AGAIN : CHIME__FILL_WAIT_ITEMS;
}

static void test_kicks_from_threads(void **state) {
  (void)state;
  enum { N = 8 };
  chime__pool_t *p;
  tjob_t *t[N];
  pthread_t th[2];
  assert_int_equal(chime__pool_create(&p, 2), 0);
  for (int i = 0; i < N; i++) {
    t[i] = tjob(s_drain, 0);
    chime__pool_add(p, &t[i]->job);
  }
  kicker_t k = {p, t, N, 500};
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, kicker_main, &k), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) {
    await(is_done, t[i]);
    assert_int_equal(atomic_load(&t[i]->items), 0);
  }
  chime__pool_destroy(p);
  for (int i = 0; i < N; i++)
    tjob_check_free(t[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_workers),
      cmocka_unit_test(test_steps_until_done),
      cmocka_unit_test(test_wait_items_until_kick),
      cmocka_unit_test(test_kick_while_running),
      cmocka_unit_test(test_run_while_worker_has_it),
      cmocka_unit_test(test_run_on_caller),
      cmocka_unit_test(test_wait_slot),
      cmocka_unit_test(test_wait_slot_overflow),
      cmocka_unit_test(test_wait_until),
      cmocka_unit_test(test_kick_before_add),
      cmocka_unit_test(test_kicks_from_threads),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
