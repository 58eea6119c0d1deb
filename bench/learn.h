/* chime-bench's learner: what every service case's receiving side does with
 * a batch (read it, the same way in every case), and the chime learner loop
 * shared by the in-process cases and the learner processes of --learners. */
#ifndef CHIME_BENCH_LEARN_H
#define CHIME_BENCH_LEARN_H

#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"

/* How a learner reads a batch: one 8-byte word of every 64-byte line (the
 * default: every byte comes through the cache, as a learner that uses the
 * batch would bring it), or one word per 4 KiB page (proof that the pages
 * are mapped, without the read's cost). */
typedef enum {
  CHIME__BENCH_TOUCH_LINE,
  CHIME__BENCH_TOUCH_PAGE
} chime__bench_touch_t;

const char *chime__bench_touch_name(chime__bench_touch_t t);
/* 0, or CHIME_EINVAL for a name that is not "line" or "page". */
int chime__bench_touch_parse(const char *name, chime__bench_touch_t *out);
/* Reads p[0..len) as t says; returns a sum so the reads are not dropped. */
uint64_t chime__bench_touch(const void *p, uint64_t len,
                            chime__bench_touch_t t);

/* The options every bench with learner windows takes, parsed one way:
 * --json, --runs N (1..max_runs), --seconds S (0.05..600, each window) and
 * --touch line|page. */
typedef struct {
  int json, runs;
  double seconds;
  chime__bench_touch_t touch;
} chime__bench_learner_args_t;

/* Takes argv[*i] into a when it is one of those options (*i then moves past
 * its value): 1 taken, 0 not one of them, CHIME_EINVAL for a bad or
 * missing value. */
int chime__bench_learner_arg(chime__bench_learner_args_t *a, int argc,
                             char **argv, int *i, int max_runs);

typedef struct {
  const char *addr;
  const char *table;
  chime_mode_t mode;
  uint32_t batch_size, slots;
  uint32_t connections; /* stream mode's (0: 1) */
  uint64_t warmup;      /* batches read (touched) and released, not timed */
  uint64_t batches;     /* timed batches; 0: as many as fit in seconds */
  double seconds;
  chime__bench_touch_t touch;
  /* Called after the warm-up, just before the timed window opens, and
   * just after it closes (CPU snapshots, or waiting for a start signal);
   * either may be NULL. */
  void (*at_start)(void *arg);
  void (*at_end)(void *arg);
  void *arg;
} chime__bench_learn_opts_t;

typedef struct {
  uint64_t bytes, batches; /* in the timed window */
  double t0, t1;           /* chime__bench_now_s() at its ends */
  /* The stream's ring as opened and, in stream mode, the round trip it
   * measured and the bytes it keeps in flight (docs/remote.md). */
  uint32_t slots;
  uint64_t rtt_ns, window_bytes;
} chime__bench_learn_result_t;

/* The environment variable whose value, when set, is the learner's
 * chime_stream_opts_t.ready_bytes (a learner process inherits it). */
#define CHIME__BENCH_READY_BYTES_ENV "CHIME_BENCH_READY_BYTES"

/* Opens a stream of o->mode on o->table, skips o->warmup batches, then
 * reads batches as o->touch says and releases them; closes the stream. On
 * failure writes a reason into why. */
int chime__bench_learn(const chime__bench_learn_opts_t *o,
                       chime__bench_learn_result_t *res, char *why,
                       size_t whylen);

#endif
