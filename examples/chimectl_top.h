/* chimectl top: a live view of a target's tables and streams, rates from
 * the difference of two Stats snapshots (examples/chimectl_top.c). */
#ifndef CHIME_EXAMPLES_CHIMECTL_TOP_H
#define CHIME_EXAMPLES_CHIMECTL_TOP_H

#include <stdint.h>

typedef struct chime_client_s chime_client_t;

typedef struct {
  uint64_t iterations;  /* frames to print, then exit; 0: until q or a signal */
  uint64_t interval_ms; /* between snapshots */
} chime__top_opts_t;
#define CHIME__TOP_OPTS_INIT                                                   \
  { .iterations = 0, .interval_ms = 1000 }
/* The bounds of --interval-ms: a Stats call per interval, and a view that
 * still moves. */
#define CHIME__TOP_MIN_INTERVAL_MS 100
#define CHIME__TOP_MAX_INTERVAL_MS 3600000

/* Runs top on c (one server, or a sharded client: its Stats sum the
 * shards, under a row per shard from each shard's own Stats). The view is live
 * (screen cleared each frame, q quits, the terminal restored on every way out,
 * signals included) when iterations is 0 and stdout is a terminal; else it
 * prints plain frames one after another. Returns the exit status: 0; 2 after a
 * "chimectl: top TARGET:
 * ..." line when nothing answered the first snapshot (the target is wrong
 * or down); 1 when a later one failed in an --iterations run (its
 * frame says why). */
int chime__top_run(chime_client_t *c, const char *target,
                   const chime__top_opts_t *o);

#endif
