/* chime-bench shards: one replay service over 4 chimed (shards 1..4, from
 * the same build, on 127.0.0.1) against the same work done on the shards
 * one by one, as ratios measured in one run (issue 22's targets,
 * docs/benchmarks.md "shards"):
 *
 *   learner  one learner process on the sharded target "a,b,c,d" (shm; each
 *            batch whole from one shard drawn by mass) against 4 learner
 *            processes at once, one per shard: samples per second, the one
 *            against the 4's sum. Every learner reads every byte of every
 *            batch (--touch line) and releases it. Target >= 0.9.
 *   cpu      the sharded learner's process CPU per sample against one
 *            learner on an unsharded chimed whose table holds as many
 *            items as the 4 shards together (the same replay in one
 *            table; the same spec, batch size, ring and reading). Target
 *            <= 1.1.
 *   writers  N writer threads on one sharded client (they bind to the
 *            shards evenly) against N writers bound to the shards directly
 *            (writer i on shard i mod 4's one-server client): samples
 *            acked per second, all writers together, the same samples
 *            each. Target >= 0.95.
 *
 * Each round runs every case once, per batch size (64 and 1024), in an
 * order that turns with the round, so a noisy neighbour hits a case and
 * its baseline alike; a figure is the median over --runs rounds, a ratio
 * the median of the per-round ratios. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "chime/chime.h"
#include "fanout.h"
#include "learn.h"
#include "measure.h"
#include "spawn.h"

#define NSHARDS 4
#define MAX_RUNS 15
#define MAX_WRITERS 32
#define NBATCH 2
#define SLOTS 8
#define LEARN_TABLE "learn"
#define INSERT_TABLE "ingest"
#define INSERT_BYTES 256
#define INSERT_CAPACITY 65536

static const uint32_t batch_sizes[NBATCH] = {64, 1024};

typedef struct {
  int json, runs;
  double seconds; /* each learner phase's window */
  /* the learn table's items, the shards' summed and the unsharded
   * chimed's, as their Stats said after the prefill: both sides of the
   * cpu case sample the same replay */
  uint64_t sharded_items, unsharded_items;
  uint32_t sample_bytes;   /* the learn table's */
  uint64_t capacity;       /* the learn table's, per shard */
  int writers;             /* N */
  uint64_t writer_samples; /* each writer's, per run */
  chime__bench_touch_t touch;
} opts_t;

/* One round's figures, per batch size for the learner cases. */
typedef struct {
  /* the sharded learner alone, 4 learners one per shard, one on the
   * unsharded chimed */
  double sh_sps, dir_sps, one_sps;
  double sh_gbps;
  double sh_cores, dir_cores;         /* the learners' CPU per window second */
  double sh_srv_cores, dir_srv_cores; /* the chimeds' summed */
  double sh_ns, one_ns;               /* learner CPU ns per sample */
  double sh_all_ns, one_all_ns;       /* the same with the chimeds' CPU */
} learn_round_t;

typedef struct {
  double sh_sps, dir_sps, one_sps;
  int even; /* the sharded writers' samples spread evenly over the shards */
} write_round_t;

/* d[0..NSHARDS): the shards; d[WHOLE]: the unsharded chimed, its learn
 * table as big as theirs together (the cpu case's baseline). */
#define WHOLE NSHARDS

typedef struct {
  chime__bench_child_t d[NSHARDS + 1];
  int started;
  char target[NSHARDS * 280];
  chime_client_t *direct[NSHARDS + 1];
} shards_t;

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

/* ---------------------------------------------------------------- chimeds */

static int shards_start(shards_t *s, const opts_t *o, char *why,
                        size_t whylen) {
  int rc = 0;
  size_t len = 0;
  memset(s, 0, sizeof(*s));
  for (int k = 0; k <= WHOLE; k++) {
    char config[1024];
    /* learn: full before any stream opens (min_size = capacity), never
     * written during a window; ingest: only written (min_size above what
     * it holds), the oldest item evicted when full so writers never wait
     * for room. */
    snprintf(config, sizeof(config),
             "{\"shard\": %d, \"tables\": [\n"
             " {\"name\": \"" LEARN_TABLE "\", \"spec\": \"x:u8[%u]\", "
             "\"capacity\": %" PRIu64 ", \"min_size\": %" PRIu64
             ", \"sampler\": \"uniform\"},\n"
             " {\"name\": \"" INSERT_TABLE "\", \"spec\": \"x:u8[%d]\", "
             "\"capacity\": %d, \"min_size\": %d, "
             "\"sampler\": \"uniform\"}]}\n",
             k + 1, o->sample_bytes, o->capacity, o->capacity, INSERT_BYTES,
             INSERT_CAPACITY, INSERT_CAPACITY);
    if (k == WHOLE) /* the union's items in one table, no ingest */
      snprintf(config, sizeof(config),
               "{\"tables\": [\n"
               " {\"name\": \"" LEARN_TABLE "\", \"spec\": \"x:u8[%u]\", "
               "\"capacity\": %" PRIu64 ", \"min_size\": %" PRIu64
               ", \"sampler\": \"uniform\"}]}\n",
               o->sample_bytes, NSHARDS * o->capacity, NSHARDS * o->capacity);
    if ((rc = chime__bench_chimed_start(&s->d[k], config)) != 0) {
      snprintf(why, whylen, "%s %d: chimed did not start",
               k == WHOLE ? "unsharded" : "shard", k + 1);
      return rc;
    }
    s->started++;
    if (k < NSHARDS)
      len += (size_t)snprintf(s->target + len, sizeof(s->target) - len, "%s%s",
                              k ? "," : "", s->d[k].addr);
    if ((rc = chime_client_create(&s->direct[k], s->d[k].addr, NULL)) != 0) {
      snprintf(why, whylen, "shard %d: client: %s", k + 1, chime_strerror(rc));
      return rc;
    }
  }
  return 0;
}

/* Stops each chimed in turn, with one SIGTERM each (a second one, once
 * chimed closed its signal handles at the end of its teardown, ends it by
 * the signal, which counts as a failed run). */
static int shards_stop(shards_t *s, int rc) {
  for (int k = 0; k <= WHOLE; k++) {
    chime_client_destroy(s->direct[k]);
    s->direct[k] = NULL;
  }
  for (int k = 0; k < s->started; k++)
    rc = chime__bench_chimed_stop(&s->d[k], rc, "chime-bench shards",
                                  " at shutdown");
  s->started = 0;
  return rc;
}

/* Table `table`'s items on chimed k, from its Stats (0: no such table). */
static int table_size(const shards_t *s, int k, const char *table,
                      uint64_t *size) {
  chime_stats_t *st = NULL;
  int rc = chime_client_stats(s->direct[k], &st);
  if (rc != 0)
    return rc;
  *size = 0;
  for (uint32_t t = 0; t < st->ntables; t++)
    if (strcmp(st->tables[t].name, table) == 0)
      *size = st->tables[t].size;
  chime_stats_free(st);
  return 0;
}

/* Fills shard k's table to n items of `bytes`. The learn table is full
 * before any stream opens; the ingest table is filled once so that its
 * rows are in memory before the first timed writer (a first fill pays a
 * page fault per 4 KiB, which would count against whichever phase came
 * first). */
static int prefill(shards_t *s, int k, const char *table, uint32_t bytes,
                   uint64_t n, char *why, size_t whylen) {
  chime_writer_t *w = NULL;
  uint8_t *sample = calloc(1, bytes);
  int rc = CHIME_ENOMEM;
  if (sample == NULL)
    goto out;
  if ((rc = chime_writer_open(&w, s->direct[k], table, NULL)) != 0)
    goto out;
  for (uint64_t i = 0; i < n && rc == 0; i++) {
    memcpy(sample, &i, sizeof(i));
    rc = chime_writer_append(w, sample, bytes, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(w);
out:
  if (rc != 0)
    snprintf(why, whylen, "prefill %s on %s %d: %s", table,
             k == WHOLE ? "the unsharded chimed" : "shard", k + 1,
             sample == NULL ? "out of memory" : chime_last_error());
  int closed = chime_writer_close(w);
  if (rc == 0)
    rc = closed;
  free(sample);
  return rc;
}

/* ---------------------------------------------------------------- learners */

/* The chimeds' CPU seconds summed (those of `which`, a bit per shard). */
static double chimeds_cpu(const shards_t *s, unsigned which) {
  double sum = 0;
  for (int k = 0; k <= WHOLE; k++)
    if (which & (1u << k))
      sum += chime__bench_cpu_s(s->d[k].proc.pid);
  return sum;
}

/* What one learner phase measured: the learners' summed samples per
 * second (each over its own window; the windows open within milliseconds
 * of each other), bytes per second, CPU seconds and samples; the chimeds'
 * CPU seconds and the phase's window length as the bench saw it. */
typedef struct {
  double sps, gbps, cpu_s, samples, srv_cpu_s, wall_s;
} phase_t;

/* addrs[0..n) each get a learner process; all start on one signal and
 * read for o->seconds. `which`: the chimeds whose CPU counts. */
static int learn_phase(const shards_t *s, const opts_t *o, uint32_t batch_size,
                       const char *const *addrs, int n, unsigned which,
                       phase_t *ph, char *why, size_t whylen) {
  chime__bench_child_t kids[NSHARDS];
  int nkids = 0, rc = 0;
  memset(ph, 0, sizeof(*ph));
  /* A sharded learner's warm-up reads every shard's ring through once on
   * average; the same count for every learner. */
  uint64_t warmup = (uint64_t)NSHARDS * SLOTS;
  for (int i = 0; i < n; i++) {
    if ((rc = chime__bench_learner_spawn(&kids[i], addrs[i], LEARN_TABLE, "shm",
                                         batch_size, SLOTS, warmup, o->seconds,
                                         o->touch)) != 0) {
      snprintf(why, whylen, "learner %d did not get ready: %s", i,
               chime_strerror(rc));
      goto out;
    }
    nkids++;
  }
  double srv0 = chimeds_cpu(s, which), t0 = chime__bench_now_s();
  for (int i = 0; i < nkids; i++)
    kill(kids[i].proc.pid, SIGUSR1);
  sleep_s(o->seconds);
  ph->srv_cpu_s = chimeds_cpu(s, which) - srv0;
  ph->wall_s = chime__bench_now_s() - t0;
  for (int i = 0; i < nkids; i++) {
    chime__bench_learner_result_t lr;
    if ((rc = chime__bench_learner_result(&kids[i], 60000, &lr)) != 0) {
      snprintf(why, whylen, "learner %d gave no result: %s", i,
               chime_strerror(rc));
      goto out;
    }
    double dt = lr.t1 - lr.t0, samples = (double)lr.batches * batch_size;
    if (!(dt > 0) || lr.batches == 0) {
      snprintf(why, whylen, "learner %d read no batch in its window", i);
      rc = CHIME_EPROTO;
      goto out;
    }
    ph->sps += samples / dt;
    ph->gbps += (double)lr.bytes / dt / 1e9;
    ph->cpu_s += lr.cpu_s;
    ph->samples += samples;
  }
out:
  for (int i = 0; i < nkids; i++)
    (void)chime__bench_child_stop(&kids[i], 5000);
  return rc;
}

enum { P_SHARDED, P_DIRECT, P_WHOLE, NPHASES };

static int learn_round(const shards_t *s, const opts_t *o, int r,
                       uint32_t batch_size, learn_round_t *lr, char *why,
                       size_t whylen) {
  const char *sharded[1] = {s->target};
  const char *whole[1] = {s->d[WHOLE].addr};
  const char *each[NSHARDS];
  for (int k = 0; k < NSHARDS; k++)
    each[k] = s->d[k].addr;
  phase_t ph[NPHASES];
  for (int j = 0; j < NPHASES; j++) {
    int p = (j + r) % NPHASES;
    int rc;
    switch (p) {
    case P_SHARDED:
      rc = learn_phase(s, o, batch_size, sharded, 1, (1u << NSHARDS) - 1,
                       &ph[p], why, whylen);
      break;
    case P_DIRECT:
      rc = learn_phase(s, o, batch_size, each, NSHARDS, (1u << NSHARDS) - 1,
                       &ph[p], why, whylen);
      break;
    default:
      rc = learn_phase(s, o, batch_size, whole, 1, 1u << WHOLE, &ph[p], why,
                       whylen);
      break;
    }
    if (rc != 0)
      return rc;
  }
  lr->sh_sps = ph[P_SHARDED].sps;
  lr->dir_sps = ph[P_DIRECT].sps;
  lr->one_sps = ph[P_WHOLE].sps;
  lr->sh_gbps = ph[P_SHARDED].gbps;
  lr->sh_cores = ph[P_SHARDED].cpu_s / ph[P_SHARDED].wall_s;
  lr->dir_cores = ph[P_DIRECT].cpu_s / ph[P_DIRECT].wall_s;
  lr->sh_srv_cores = ph[P_SHARDED].srv_cpu_s / ph[P_SHARDED].wall_s;
  lr->dir_srv_cores = ph[P_DIRECT].srv_cpu_s / ph[P_DIRECT].wall_s;
  lr->sh_ns = ph[P_SHARDED].cpu_s / ph[P_SHARDED].samples * 1e9;
  lr->one_ns = ph[P_WHOLE].cpu_s / ph[P_WHOLE].samples * 1e9;
  /* The chimeds' CPU over the bench's window, per sample the learners read
   * in theirs (both windows are o->seconds long). */
  lr->sh_all_ns = (ph[P_SHARDED].cpu_s + ph[P_SHARDED].srv_cpu_s) /
                  ph[P_SHARDED].samples * 1e9;
  lr->one_all_ns =
      (ph[P_WHOLE].cpu_s + ph[P_WHOLE].srv_cpu_s) / ph[P_WHOLE].samples * 1e9;
  return 0;
}

/* ---------------------------------------------------------------- writers */

typedef struct {
  chime_writer_t *w;
  uint64_t n;
  pthread_barrier_t *go;
  double t0, t1;
  int rc;
  char why[256];
  pthread_t th;
} wthread_t;

static void *writer_thread(void *arg) {
  wthread_t *t = arg;
  uint8_t sample[INSERT_BYTES] = {0};
  pthread_barrier_wait(t->go);
  t->t0 = chime__bench_now_s();
  t->rc = 0;
  for (uint64_t i = 0; i < t->n && t->rc == 0; i++) {
    memcpy(sample, &i, sizeof(i));
    t->rc = chime_writer_append(t->w, sample, sizeof(sample), 1.0);
  }
  if (t->rc == 0)
    t->rc = chime_writer_flush(t->w);
  t->t1 = chime__bench_now_s();
  if (t->rc == 0 && chime_writer_acked(t->w) != t->n) {
    snprintf(t->why, sizeof(t->why),
             "%" PRIu64 " of %" PRIu64 " samples acked after flush",
             chime_writer_acked(t->w), t->n);
    t->rc = CHIME_EPROTO;
  } else if (t->rc != 0) {
    snprintf(t->why, sizeof(t->why), "%s", chime_last_error());
  }
  return NULL;
}

/* Each shard's ingest inserts so far, in ins[]. */
static int ingest_counts(const shards_t *s, uint64_t ins[NSHARDS]) {
  for (int k = 0; k < NSHARDS; k++) {
    chime_stats_t *st = NULL;
    int rc = chime_client_stats(s->direct[k], &st);
    if (rc != 0)
      return rc;
    ins[k] = 0;
    for (uint32_t t = 0; t < st->ntables; t++)
      if (strcmp(st->tables[t].name, INSERT_TABLE) == 0)
        ins[k] = st->tables[t].inserts;
    chime_stats_free(st);
  }
  return 0;
}

/* n writers, each on clients[i % nclients], each appending `each` samples
 * at once after one barrier: all their samples over the time from the
 * first start to the last flush. *spread: each shard's share of them. */
static int write_phase(const shards_t *s, chime_client_t *const *clients,
                       int nclients, int n, uint64_t each, double *sps,
                       uint64_t spread[NSHARDS], char *why, size_t whylen) {
  wthread_t t[MAX_WRITERS];
  pthread_barrier_t go;
  int opened = 0, started = 0, rc = 0;
  uint64_t before[NSHARDS], after[NSHARDS];
  memset(t, 0, sizeof(t));
  if ((rc = ingest_counts(s, before)) != 0) {
    snprintf(why, whylen, "stats: %s", chime_last_error());
    return rc;
  }
  if (pthread_barrier_init(&go, NULL, (unsigned)n) != 0)
    return CHIME_ESYS;
  for (int i = 0; i < n; i++) {
    if ((rc = chime_writer_open(&t[i].w, clients[i % nclients], INSERT_TABLE,
                                NULL)) != 0) {
      snprintf(why, whylen, "writer %d: %s", i, chime_last_error());
      goto out;
    }
    opened++;
    t[i].n = each;
    t[i].go = &go;
  }
  for (int i = 0; i < n; i++) {
    if (pthread_create(&t[i].th, NULL, writer_thread, &t[i]) != 0) {
      /* the barrier would never open: no writer thread is started */
      rc = CHIME_ESYS;
      goto out;
    }
    started++;
  }
out:
  for (int i = 0; i < started; i++)
    pthread_join(t[i].th, NULL);
  double first = 0, last = 0;
  for (int i = 0; i < started && rc == 0; i++) {
    if (t[i].rc != 0) {
      rc = t[i].rc;
      snprintf(why, whylen, "writer %d: %s", i, t[i].why);
      break;
    }
    if (i == 0 || t[i].t0 < first)
      first = t[i].t0;
    if (i == 0 || t[i].t1 > last)
      last = t[i].t1;
  }
  for (int i = 0; i < opened; i++) {
    int closed = chime_writer_close(t[i].w);
    if (rc == 0 && closed != 0) {
      rc = closed;
      snprintf(why, whylen, "writer %d: close: %s", i, chime_strerror(rc));
    }
  }
  pthread_barrier_destroy(&go);
  if (rc == 0 && (rc = ingest_counts(s, after)) != 0)
    snprintf(why, whylen, "stats: %s", chime_last_error());
  if (rc == 0) {
    *sps = last > first ? (double)each * n / (last - first) : 0;
    for (int k = 0; k < NSHARDS; k++)
      spread[k] = after[k] - before[k];
  }
  return rc;
}

static int write_round(const shards_t *s, chime_client_t *sharded,
                       const opts_t *o, int r, write_round_t *wr, char *why,
                       size_t whylen) {
  uint64_t spread[NSHARDS], ignored[NSHARDS];
  int rc = 0;
  /* sharded first in even rounds, direct first in odd ones */
  for (int j = 0; j < 2 && rc == 0; j++) {
    if ((j + r) % 2 == 0)
      rc = write_phase(s, &sharded, 1, o->writers, o->writer_samples,
                       &wr->sh_sps, spread, why, whylen);
    else
      rc = write_phase(s, s->direct, NSHARDS, o->writers, o->writer_samples,
                       &wr->dir_sps, ignored, why, whylen);
  }
  /* one writer on one shard: a shard's own insert rate, for the model */
  if (rc == 0)
    rc = write_phase(s, s->direct, 1, 1, o->writer_samples, &wr->one_sps,
                     ignored, why, whylen);
  if (rc != 0)
    return rc;
  /* N writers spread over 4 shards: each shard gets N / 4 of them, or one
   * more, as the direct ones do (writer i on shard i mod 4). */
  uint64_t lo = spread[0], hi = spread[0];
  for (int k = 1; k < NSHARDS; k++) {
    lo = spread[k] < lo ? spread[k] : lo;
    hi = spread[k] > hi ? spread[k] : hi;
  }
  wr->even = hi - lo <= o->writer_samples;
  return 0;
}

/* ---------------------------------------------------------------- output */

/* ,"key":median,"key_min":lo,"key_max":hi over the runs (or as text). */
static void emit_stat(const opts_t *o, const char *key, const double *v,
                      int prec) {
  double q[MAX_RUNS], lo, hi;
  memcpy(q, v, sizeof(double) * (size_t)o->runs);
  chime__bench_range(q, o->runs, &lo, &hi);
  double med = chime__bench_median(q, o->runs);
  if (o->json)
    printf(",\"%s\":%.*f,\"%s_min\":%.*f,\"%s_max\":%.*f", key, prec, med, key,
           prec, lo, key, prec, hi);
  else
    printf("  %s %.*f [%.*f, %.*f]", key, prec, med, prec, lo, prec, hi);
}

static void emit_learn(const opts_t *o, int b, learn_round_t rs[][NBATCH]) {
  double v[10][MAX_RUNS];
  for (int r = 0; r < o->runs; r++) {
    const learn_round_t *l = &rs[r][b];
    v[8][r] = l->dir_srv_cores;
    /* samples per CPU second of learners and chimeds: what bounds the
     * rate where CPU is short, whatever share of it each side got */
    v[9][r] = (l->sh_sps / (l->sh_cores + l->sh_srv_cores)) /
              (l->dir_sps / (l->dir_cores + l->dir_srv_cores));
    v[0][r] = l->sh_sps / l->dir_sps;
    v[1][r] = l->sh_sps;
    v[2][r] = l->dir_sps;
    v[3][r] = l->one_sps;
    v[4][r] = l->sh_gbps;
    v[5][r] = l->sh_cores;
    v[6][r] = l->dir_cores;
    v[7][r] = l->sh_srv_cores;
  }
  if (o->json)
    printf("{\"bench\":\"shards\",\"case\":\"learner\",\"shards\":%d,"
           "\"batch_size\":%u,\"sample_bytes\":%u,\"slots\":%d,"
           "\"mode\":\"shm\",\"touch\":\"%s\",\"seconds\":%.3f,"
           "\"target\":0.9",
           NSHARDS, batch_sizes[b], o->sample_bytes, SLOTS,
           chime__bench_touch_name(o->touch), o->seconds);
  else
    printf("learner, batch %u: 1 on %d shards vs %d on 1 each\n ",
           batch_sizes[b], NSHARDS, NSHARDS);
  emit_stat(o, "ratio", v[0], 3);
  emit_stat(o, "sharded_samples_per_s", v[1], 0);
  emit_stat(o, "direct_samples_per_s", v[2], 0);
  emit_stat(o, "unsharded_samples_per_s", v[3], 0);
  if (!o->json)
    printf("\n ");
  emit_stat(o, "sharded_gbps", v[4], 3);
  emit_stat(o, "sharded_learner_cpu_cores", v[5], 2);
  emit_stat(o, "direct_learners_cpu_cores", v[6], 2);
  emit_stat(o, "sharded_chimed_cpu_cores", v[7], 2);
  emit_stat(o, "direct_chimed_cpu_cores", v[8], 2);
  emit_stat(o, "ratio_per_cpu", v[9], 3);
  if (o->json)
    printf(",\"runs\":%d}", o->runs);
  printf("\n");
  fflush(stdout);
}

static void emit_cpu(const opts_t *o, int b, learn_round_t rs[][NBATCH]) {
  double v[6][MAX_RUNS];
  for (int r = 0; r < o->runs; r++) {
    const learn_round_t *l = &rs[r][b];
    v[0][r] = l->sh_ns / l->one_ns;
    v[1][r] = l->sh_ns;
    v[2][r] = l->one_ns;
    v[3][r] = l->sh_all_ns / l->one_all_ns;
    v[4][r] = l->sh_all_ns;
    v[5][r] = l->one_all_ns;
  }
  if (o->json)
    printf("{\"bench\":\"shards\",\"case\":\"cpu\",\"shards\":%d,"
           "\"batch_size\":%u,\"sample_bytes\":%u,\"slots\":%d,"
           "\"mode\":\"shm\",\"touch\":\"%s\",\"seconds\":%.3f,"
           "\"sharded_items\":%" PRIu64 ",\"unsharded_items\":%" PRIu64
           ",\"target\":1.1",
           NSHARDS, batch_sizes[b], o->sample_bytes, SLOTS,
           chime__bench_touch_name(o->touch), o->seconds, o->sharded_items,
           o->unsharded_items);
  else
    printf("cpu, batch %u: learner CPU a sample, %d shards vs unsharded\n ",
           batch_sizes[b], NSHARDS);
  emit_stat(o, "cpu_ratio", v[0], 3);
  emit_stat(o, "sharded_cpu_ns_per_sample", v[1], 1);
  emit_stat(o, "unsharded_cpu_ns_per_sample", v[2], 1);
  if (!o->json)
    printf("\n ");
  emit_stat(o, "all_cpu_ratio", v[3], 3);
  emit_stat(o, "sharded_all_cpu_ns_per_sample", v[4], 1);
  emit_stat(o, "unsharded_all_cpu_ns_per_sample", v[5], 1);
  if (o->json)
    printf(",\"runs\":%d}", o->runs);
  printf("\n");
  fflush(stdout);
}

static void emit_write(const opts_t *o, const write_round_t *ws) {
  double v[4][MAX_RUNS];
  int even = 1;
  for (int r = 0; r < o->runs; r++) {
    v[0][r] = ws[r].sh_sps / ws[r].dir_sps;
    v[1][r] = ws[r].sh_sps;
    v[2][r] = ws[r].dir_sps;
    v[3][r] = ws[r].one_sps;
    even &= ws[r].even;
  }
  if (o->json)
    printf("{\"bench\":\"shards\",\"case\":\"writers\",\"shards\":%d,"
           "\"writers\":%d,\"sample_bytes\":%d,\"samples_per_writer\":%" PRIu64
           ",\"even\":%s,\"target\":0.95",
           NSHARDS, o->writers, INSERT_BYTES, o->writer_samples,
           even ? "true" : "false");
  else
    printf("writers: %d on a sharded client vs %d bound to the shards "
           "(%s spread)\n ",
           o->writers, o->writers, even ? "even" : "UNEVEN");
  emit_stat(o, "ratio", v[0], 3);
  emit_stat(o, "sharded_samples_per_s", v[1], 0);
  emit_stat(o, "direct_samples_per_s", v[2], 0);
  emit_stat(o, "one_writer_samples_per_s", v[3], 0);
  if (o->json)
    printf(",\"runs\":%d}", o->runs);
  printf("\n");
  fflush(stdout);
}

/* ---------------------------------------------------------------- driver */

static void usage(void) {
  fprintf(stderr,
          "usage: chime-bench shards [--json] [--runs N] [--smoke]\n"
          "                          [--seconds S] [--touch line|page]\n"
          "                          [--writers N] [--capacity ITEMS]\n"
          "                          [--ready-bytes B|off]\n"
          "  4 chimed (shards 1..4) and an unsharded one on 127.0.0.1; per\n"
          "  batch size (64, 1024) of 1 KiB samples: one learner over the 4\n"
          "  shards vs 4 learners on one shard each (samples/s), and the\n"
          "  sharded learner's CPU a sample vs one learner on the unsharded\n"
          "  chimed (its table as big as the 4 together); N writers (default\n"
          "  4) on a sharded client vs N bound to the shards directly\n"
          "  (256-byte samples/s). Medians of N runs (default 3); learner\n"
          "  windows of S seconds (default 2); each reads one word per\n"
          "  64-byte line (line, the default) or 4 KiB page; learn tables of\n"
          "  ITEMS 1 KiB items per shard (default 16384). --smoke: tiny\n"
          "  sizes, figures mean nothing. --ready-bytes: each learner's\n"
          "  ready_bytes, which a sharded one gives every shard (off or\n"
          "  the default: no limit)\n");
}

static int parse_opts(opts_t *o, int argc, char **argv) {
  int smoke = 0;
  uint64_t capacity = 0;
  /* runs and seconds 0: not given (--smoke's or the defaults then) */
  chime__bench_learner_args_t la = {.touch = CHIME__BENCH_TOUCH_LINE};
  *o = (opts_t){.runs = 3,
                .seconds = 2.0,
                .sample_bytes = 1024,
                .capacity = 16384,
                .writers = 4,
                .writer_samples = 500000};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int took = chime__bench_learner_arg(&la, argc, argv, &i, MAX_RUNS);
    if (took < 0)
      return took;
    if (took)
      continue;
    if (strcmp(a, "--smoke") == 0) {
      smoke = 1;
    } else if (strcmp(a, "--capacity") == 0 && i + 1 < argc) {
      capacity = strtoull(argv[++i], NULL, 10);
      if (capacity < 1024 || capacity > (UINT64_C(1) << 22))
        return CHIME_EINVAL;
    } else if (strcmp(a, "--ready-bytes") == 0 && i + 1 < argc) {
      /* The learners are processes of their own: they take it from the
       * environment they inherit. */
      const char *v = argv[++i];
      char buf[32];
      uint64_t rb =
          strcmp(v, "off") == 0 ? UINT64_MAX : (uint64_t)strtoull(v, NULL, 10);
      snprintf(buf, sizeof(buf), "%" PRIu64, rb);
      if (setenv(CHIME__BENCH_READY_BYTES_ENV, buf, 1) != 0)
        return CHIME_EINVAL;
    } else if (strcmp(a, "--writers") == 0 && i + 1 < argc) {
      o->writers = atoi(argv[++i]);
      if (o->writers < 1 || o->writers > MAX_WRITERS)
        return CHIME_EINVAL;
    } else {
      return CHIME_EINVAL;
    }
  }
  if (smoke) {
    o->runs = 1;
    o->seconds = 0.2;
    o->capacity = 2048;
    o->writer_samples = 2000;
  }
  o->json = la.json;
  o->touch = la.touch;
  if (la.runs > 0)
    o->runs = la.runs;
  if (capacity > 0)
    o->capacity = capacity;
  if (la.seconds > 0)
    o->seconds = la.seconds;
  return 0;
}

int chime__bench_shards(int argc, char **argv) {
  opts_t o;
  shards_t s;
  chime_client_t *sharded = NULL;
  static learn_round_t lrs[MAX_RUNS][NBATCH];
  static write_round_t wrs[MAX_RUNS];
  char why[512] = "";
  int rc = 0;

  if (parse_opts(&o, argc, argv) != 0) {
    usage();
    return 2;
  }
  if ((rc = shards_start(&s, &o, why, sizeof(why))) != 0)
    goto out;
  for (int k = 0; k < NSHARDS; k++)
    if ((rc = prefill(&s, k, LEARN_TABLE, o.sample_bytes, o.capacity, why,
                      sizeof(why))) != 0 ||
        (rc = prefill(&s, k, INSERT_TABLE, INSERT_BYTES, INSERT_CAPACITY, why,
                      sizeof(why))) != 0)
      goto out;
  if ((rc = prefill(&s, WHOLE, LEARN_TABLE, o.sample_bytes,
                    NSHARDS * o.capacity, why, sizeof(why))) != 0)
    goto out;
  for (int k = 0; k <= WHOLE; k++) {
    uint64_t n;
    if ((rc = table_size(&s, k, LEARN_TABLE, &n)) != 0) {
      snprintf(why, sizeof(why), "stats: %s", chime_last_error());
      goto out;
    }
    *(k == WHOLE ? &o.unsharded_items : &o.sharded_items) += n;
  }
  if ((rc = chime_client_create(&sharded, s.target, NULL)) != 0) {
    snprintf(why, sizeof(why), "sharded client: %s", chime_strerror(rc));
    goto out;
  }
  if (chime_client_nshards(sharded) != NSHARDS) {
    snprintf(why, sizeof(why), "the target %.300s gave %u shards, not %d",
             s.target, chime_client_nshards(sharded), NSHARDS);
    rc = CHIME_EPROTO;
    goto out;
  }
  for (int r = 0; r < o.runs; r++) {
    for (int b = 0; b < NBATCH; b++)
      if ((rc = learn_round(&s, &o, r, batch_sizes[b], &lrs[r][b], why,
                            sizeof(why))) != 0)
        goto out;
    if ((rc = write_round(&s, sharded, &o, r, &wrs[r], why, sizeof(why))) != 0)
      goto out;
  }
  for (int b = 0; b < NBATCH; b++)
    emit_learn(&o, b, lrs);
  for (int b = 0; b < NBATCH; b++)
    emit_cpu(&o, b, lrs);
  emit_write(&o, wrs);
out:
  if (rc != 0)
    fprintf(stderr, "chime-bench shards: %s\n",
            why[0] ? why : chime_strerror(rc));
  chime_client_destroy(sharded);
  rc = shards_stop(&s, rc);
  return rc == 0 ? 0 : 1;
}
