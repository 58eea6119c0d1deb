/* What chime-bench ragged shares with chime-bench groups (ragged.c): a
 * ring slot of a table's batch, the rollouts' long-tailed lengths, and
 * the options. */
#ifndef CHIME_BENCH_RAGGED_H
#define CHIME_BENCH_RAGGED_H

#include <stdint.h>

#include "replay/table.h"
#include "ring/producer.h"

typedef struct {
  chime_ring_layout_t lay;
  uint8_t *mem;
  chime__ring_wslot_t ws;
} chime__bench_slot_t;

/* A slot of a batch of t's items (aligned_alloc'd, touched): 0 or -1. */
int chime__bench_slot_make(chime__bench_slot_t *s, const chime__table_t *t,
                           uint32_t batch);
/* A rollout's length: 500 / sqrt(u) tokens, cut at 8,192 (mean ~1,000). */
uint32_t chime__bench_rollout_len(uint64_t *seed);

/* A uniform table's config of spec and items (seeded): 0 or -1. */
int chime__bench_uniform_config(chime__table_config_t *tc, const char *spec,
                                uint64_t items);

typedef struct {
  uint64_t items;
  uint32_t batch, rounds, group;
  int json;
} chime__bench_rag_opts_t;
/* --json, --items, --batch, --rounds (and with groups --group) into o: 0,
 * or -1 for anything else (the caller prints its usage). */
int chime__bench_rag_opts(int argc, char **argv, chime__bench_rag_opts_t *o,
                          int groups);

#endif
