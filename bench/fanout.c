/* chime-bench service --learners N (see fanout.h). */
#include "fanout.h"

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chime/chime.h"
#include "measure.h"
#include "spawn.h"

#define MAX_LEARNERS 32
/* the actor's own warm-up before its window opens */
#define ACTOR_WARM_S 0.3

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

/* ------------------------------------------------------------------ actor */

/* One writer inserting as fast as it can; it notes the acked count when it
 * sees the window open and when it sees it close. */
typedef struct {
  const char *addr, *table;
  uint32_t sample_bytes;
  atomic_int phase; /* 0 warm-up, 1 window open, 2 closed */
  double t0, t1;
  /* the actor thread's own seconds running and runnable but not running */
  double cpu0, cpu1, runq0, runq1;
  uint64_t a0, a1;
  int rc;
  char why[256];
  pthread_t th;
} actor_t;

/* This thread's seconds on a CPU and waiting on a run queue, from
 * /proc/thread-self/schedstat (0 if it cannot be read). */
static void thread_sched_s(double *cpu, double *runq) {
  unsigned long long run = 0, wait = 0;
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  *cpu = *runq = 0;
  if (f == NULL)
    return;
  if (fscanf(f, "%llu %llu", &run, &wait) == 2) {
    *cpu = (double)run * 1e-9;
    *runq = (double)wait * 1e-9;
  }
  fclose(f);
}

static void *actor_thread(void *arg) {
  actor_t *a = arg;
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  uint8_t *sample = calloc(1, a->sample_bytes);
  int seen = 0;
  a->rc = CHIME_ENOMEM;
  if (sample == NULL)
    goto out;
  if ((a->rc = chime_client_create(&c, a->addr, NULL)) != 0 ||
      (a->rc = chime_writer_open(&w, c, a->table, NULL)) != 0)
    goto out;
  for (uint64_t i = 0;; i++) {
    /* a message is 256 samples: look at the clock about once per message */
    if ((i & 255) == 0) {
      int ph = atomic_load(&a->phase);
      if (ph >= 1 && !seen) {
        a->t0 = chime__bench_now_s();
        thread_sched_s(&a->cpu0, &a->runq0);
        a->a0 = chime_writer_acked(w);
        seen = 1;
      }
      if (ph >= 2) {
        a->t1 = chime__bench_now_s();
        thread_sched_s(&a->cpu1, &a->runq1);
        a->a1 = chime_writer_acked(w);
        break;
      }
    }
    memcpy(sample, &i, sizeof(i));
    if ((a->rc = chime_writer_append(w, sample, a->sample_bytes, 1.0)) != 0)
      goto out;
  }
  a->rc = chime_writer_flush(w);
out:
  if (a->rc != 0)
    snprintf(a->why, sizeof(a->why), "actor: %s",
             sample == NULL ? chime_strerror(a->rc) : chime_last_error());
  int closed = chime_writer_close(w); /* flushed above: a->rc says */
  (void)closed;
  chime_client_destroy(c);
  free(sample);
  return NULL;
}

static int actor_start(actor_t *a, const chime__bench_fanout_opts_t *o) {
  memset(a, 0, sizeof(*a));
  a->addr = o->addr;
  a->table = o->ingest_table;
  a->sample_bytes = o->ingest_sample_bytes;
  atomic_init(&a->phase, 0);
  return pthread_create(&a->th, NULL, actor_thread, a) == 0 ? 0 : CHIME_ESYS;
}

/* Joins the actor; its samples acked per second of its window, and its
 * seconds running and runnable per second of it (cores, runq may be NULL). */
static int actor_join(actor_t *a, double *per_s, double *cores, double *runq,
                      char *why, size_t whylen) {
  atomic_store(&a->phase, 2);
  pthread_join(a->th, NULL);
  if (a->rc != 0) {
    snprintf(why, whylen, "%s", a->why);
    return a->rc;
  }
  *per_s = a->t1 > a->t0 ? (double)(a->a1 - a->a0) / (a->t1 - a->t0) : 0;
  double dt = a->t1 - a->t0;
  if (cores != NULL)
    *cores = dt > 0 ? (a->cpu1 - a->cpu0) / dt : 0;
  if (runq != NULL)
    *runq = dt > 0 ? (a->runq1 - a->runq0) / dt : 0;
  return 0;
}

/* --------------------------------------------------------------- learners */

int chime__bench_learner_spawn(chime__bench_child_t *c, const char *addr,
                               const char *table, const char *mode,
                               uint32_t batch_size, uint32_t slots,
                               uint64_t warmup, double seconds,
                               chime__bench_touch_t touch) {
  char self[PATH_MAX], bs[16], sl[16], warm[24], secs[32];
  if (chime__bench_self(self, sizeof(self)) == NULL)
    return CHIME_ESYS;
  snprintf(bs, sizeof(bs), "%u", batch_size);
  snprintf(sl, sizeof(sl), "%u", slots);
  snprintf(warm, sizeof(warm), "%" PRIu64, warmup);
  snprintf(secs, sizeof(secs), "%.6f", seconds);
  const char *argv[] = {self,
                        "service",
                        "--learner",
                        addr,
                        table,
                        mode,
                        bs,
                        sl,
                        warm,
                        secs,
                        chime__bench_touch_name(touch),
                        NULL};
  memset(c, 0, sizeof(*c));
  return chime__bench_spawn(c, argv, "ready", 60000);
}

int chime__bench_learner_result(chime__bench_child_t *c, int timeout_ms,
                                chime__bench_learner_result_t *r) {
  char line[256];
  unsigned long long bytes, batches;
  int rc =
      chime__bench_child_line(c, "result ", timeout_ms, line, sizeof(line));
  if (rc != 0)
    return rc;
  if (sscanf(line, "%llu %llu %lf %lf %lf", &bytes, &batches, &r->t0, &r->t1,
             &r->cpu_s) != 5)
    return CHIME_EPROTO;
  r->bytes = bytes;
  r->batches = batches;
  return 0;
}

static int learner_spawn(chime__bench_child_t *c,
                         const chime__bench_fanout_opts_t *o,
                         const char *mode) {
  return chime__bench_learner_spawn(c, o->addr, o->table, mode, o->batch_size,
                                    o->slots, o->warmup, o->seconds, o->touch);
}

int chime__bench_fanout(const chime__bench_fanout_opts_t *o,
                        chime__bench_fanout_result_t *res, char *why,
                        size_t whylen) {
  chime__bench_child_t kids[MAX_LEARNERS];
  int is_stream[MAX_LEARNERS];
  int nkids = 0, have_actor = 0;
  int both = strcmp(o->modes, "both") == 0;
  int want = both ? 2 * o->learners : o->learners;
  actor_t actor;
  int rc = 0;
  double ignored;
  char scratch[256];

  memset(res, 0, sizeof(*res));
  if (o->learners < 1 || want > MAX_LEARNERS ||
      (!both && strcmp(o->modes, "shm") != 0 &&
       strcmp(o->modes, "stream") != 0))
    return CHIME_EINVAL;

  /* the actor alone, for the same length of window */
  if ((rc = actor_start(&actor, o)) != 0)
    goto out;
  sleep_s(ACTOR_WARM_S);
  atomic_store(&actor.phase, 1);
  sleep_s(o->seconds);
  if ((rc =
           actor_join(&actor, &res->ingest_alone_per_s, &res->actor_alone_cores,
                      &res->actor_alone_runq, why, whylen)) != 0)
    goto out;
  /* after the actor's table has its insert thread, before any stream */
  res->threads_before = chime__bench_threads(o->chimed);

  for (int i = 0; i < want; i++) {
    is_stream[i] = both ? i % 2 : strcmp(o->modes, "stream") == 0;
    if ((rc = learner_spawn(&kids[i], o, is_stream[i] ? "stream" : "shm")) !=
        0) {
      snprintf(why, whylen, "learner %d did not get ready: %s", i,
               chime_strerror(rc));
      goto out;
    }
    nkids++;
  }
  if ((rc = actor_start(&actor, o)) != 0)
    goto out;
  have_actor = 1;
  sleep_s(ACTOR_WARM_S);

  double cpu0 = chime__bench_cpu_s(o->chimed);
  double t0 = chime__bench_now_s();
  for (int i = 0; i < nkids; i++)
    kill(kids[i].proc.pid, SIGUSR1);
  atomic_store(&actor.phase, 1);
  res->threads_max = chime__bench_threads(o->chimed);
  while (chime__bench_now_s() < t0 + o->seconds) {
    sleep_s(0.01);
    int t = chime__bench_threads(o->chimed);
    if (t > res->threads_max)
      res->threads_max = t;
  }
  atomic_store(&actor.phase, 2);
  res->chimed_cores =
      (chime__bench_cpu_s(o->chimed) - cpu0) / (chime__bench_now_s() - t0);
  have_actor = 0;
  if ((rc = actor_join(&actor, &res->ingest_per_s, &res->actor_cores,
                       &res->actor_runq, why, whylen)) != 0)
    goto out;

  for (int i = 0; i < nkids; i++) {
    chime__bench_learner_result_t lr;
    rc = chime__bench_learner_result(&kids[i], 60000, &lr);
    if (rc != 0) {
      snprintf(why, whylen, "learner %d gave no result: %s", i,
               chime_strerror(rc));
      goto out;
    }
    double gbps = lr.t1 > lr.t0 ? (double)lr.bytes / (lr.t1 - lr.t0) / 1e9 : 0;
    res->gbps += gbps;
    *(is_stream[i] ? &res->stream_gbps : &res->shm_gbps) += gbps;
    res->learners_cores += lr.t1 > lr.t0 ? lr.cpu_s / (lr.t1 - lr.t0) : 0;
  }
out:
  if (have_actor)
    (void)actor_join(&actor, &ignored, NULL, NULL, scratch, sizeof(scratch));
  /* a learner that printed its result is done; one that did not is ended */
  for (int i = 0; i < nkids; i++)
    (void)chime__bench_child_stop(&kids[i], 5000);
  return rc;
}

/* ------------------------------------------------- a learner process */

typedef struct {
  int go;
  double cpu0, cpu1;
} learner_state_t;

static void learner_wait(void *arg) {
  learner_state_t *st = arg;
  sigset_t set;
  struct timespec limit = {120, 0};
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  printf("ready\n");
  fflush(stdout);
  st->go = sigtimedwait(&set, NULL, &limit) == SIGUSR1;
  st->cpu0 = chime__bench_cpu_s(0);
}

static void learner_done(void *arg) {
  learner_state_t *st = arg;
  st->cpu1 = chime__bench_cpu_s(0);
}

int chime__bench_learner_main(int argc, char **argv) {
  sigset_t set;
  learner_state_t st = {0, 0, 0};
  chime__bench_learn_opts_t lo = {
      .at_start = learner_wait, .at_end = learner_done, .arg = &st};
  chime__bench_learn_result_t lr;
  char why[512] = "";

  /* before any thread exists, so that every thread gRPC starts has it
   * blocked and sigtimedwait takes it */
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  if (argc != 9 ||
      (strcmp(argv[3], "shm") != 0 && strcmp(argv[3], "stream") != 0)) {
    fprintf(stderr, "chime-bench: --learner ADDR TABLE shm|stream "
                    "BATCH_SIZE SLOTS WARMUP SECONDS line|page\n");
    return 2;
  }
  lo.addr = argv[1];
  lo.table = argv[2];
  lo.mode = strcmp(argv[3], "shm") == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
  lo.batch_size = (uint32_t)strtoul(argv[4], NULL, 10);
  lo.slots = (uint32_t)strtoul(argv[5], NULL, 10);
  lo.warmup = strtoull(argv[6], NULL, 10);
  lo.seconds = atof(argv[7]);
  if (chime__bench_touch_parse(argv[8], &lo.touch) != 0)
    return 2;
  int rc = chime__bench_learn(&lo, &lr, why, sizeof(why));
  if (rc != 0 || !st.go) {
    fprintf(stderr, "chime-bench learner (%s): %s\n", argv[3],
            rc != 0 ? why : "no start signal");
    return 1;
  }
  printf("result %" PRIu64 " %" PRIu64 " %.9f %.9f %.6f\n", lr.bytes,
         lr.batches, lr.t0, lr.t1, st.cpu1 - st.cpu0);
  fflush(stdout);
  return 0;
}
