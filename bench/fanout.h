/* chime-bench service --learners N: N shm and N stream learner processes
 * (this binary re-executed) read from one chimed at once for a fixed window
 * while an actor thread of the bench inserts small samples into another
 * table of the same chimed: aggregate GB/s, chimed's thread count while they
 * run, and whether inserts slow down behind the sampling. */
#ifndef CHIME_BENCH_FANOUT_H
#define CHIME_BENCH_FANOUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "learn.h"
#include "spawn.h"

typedef struct {
  const char *addr; /* chimed's */
  pid_t chimed;
  const char *table;        /* the learners sample this one */
  const char *ingest_table; /* the actor inserts into this one */
  uint32_t ingest_sample_bytes;
  int learners; /* N: N shm and N stream learners */
  /* "both" (N of each), "shm" or "stream" (N of that mode alone) */
  const char *modes;
  uint32_t batch_size, slots;
  uint64_t warmup; /* batches each learner reads before the window */
  double seconds;  /* the window */
  chime__bench_touch_t touch;
} chime__bench_fanout_opts_t;

typedef struct {
  /* sums of each learner's own bytes / its own window (the windows open
   * within milliseconds of each other and are equally long) */
  double gbps, shm_gbps, stream_gbps;
  /* chimed's Threads: after the actor's first window (its table's insert
   * thread started) and before the learners connect, and the largest
   * sampled every 10 ms in the window */
  int threads_before, threads_max;
  /* samples acked per second in the window, and in a window as long with
   * no learner just before (the same writer, the same table) */
  double ingest_per_s, ingest_alone_per_s;
  /* CPU seconds per second of window: chimed's, the learners' summed, and
   * the actor thread's during the window and alone */
  double chimed_cores, learners_cores, actor_cores, actor_alone_cores;
  /* the actor thread's seconds runnable but not on a CPU per second of
   * window, during and alone: the rest of its second (1 - cores - runq) it
   * slept, waiting for chimed's acks */
  double actor_runq, actor_alone_runq;
} chime__bench_fanout_result_t;

/* One fan-out phase. On failure writes a reason into why. */
int chime__bench_fanout(const chime__bench_fanout_opts_t *o,
                        chime__bench_fanout_result_t *res, char *why,
                        size_t whylen);

/* Starts one learner process (chime-bench service --learner, below) on
 * addr, one server or a sharded target, and waits for its "ready". */
int chime__bench_learner_spawn(chime__bench_child_t *c, const char *addr,
                               const char *table, const char *mode,
                               uint32_t batch_size, uint32_t slots,
                               uint64_t warmup, double seconds,
                               chime__bench_touch_t touch);

/* A learner process's "result" line: its window's bytes and batches, the
 * window's ends (chime__bench_now_s) and its process CPU seconds in it. */
typedef struct {
  uint64_t bytes, batches;
  double t0, t1, cpu_s;
} chime__bench_learner_result_t;

/* Reads c's "result" line, up to timeout_ms. */
int chime__bench_learner_result(chime__bench_child_t *c, int timeout_ms,
                                chime__bench_learner_result_t *r);

/* chime-bench service --learner ADDR TABLE MODE BATCH_SIZE SLOTS WARMUP
 * SECONDS TOUCH: one learner process of the phase. Prints "ready" after its
 * warm-up, waits for SIGUSR1, reads for SECONDS, and prints "result BYTES
 * BATCHES T0 T1 CPU_S". Returns the exit code. */
int chime__bench_learner_main(int argc, char **argv);

#endif
