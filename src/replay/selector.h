/* A selector as an ops table: how a table's sampler picks the item a batch
 * takes, and how its remover picks the item that leaves a full table
 * (Reverb's selectors; docs/replay.md). One file per selector
 * (selector_*.c), one entry per selector in selector.c's table; the table
 * keeps its live rows in the indexes the selectors it was given need. */
#ifndef CHIME_REPLAY_SELECTOR_H
#define CHIME_REPLAY_SELECTOR_H

#include <stdint.h>

#include "replay/table_config.h"

typedef struct chime__table_s chime__table_t;

/* The indexes a selector reads, kept by the table for every live row. The
 * age list (oldest, newest) and the key index are always kept. */
enum {
  CHIME__SEL_DENSE = 1u << 0,    /* t->dense: the live rows, no order */
  CHIME__SEL_SUM = 1u << 1,      /* t->sum: weight(priority) by row */
  CHIME__SEL_MIN_HEAP = 1u << 2, /* t->hmin: by priority, lowest on top */
  CHIME__SEL_MAX_HEAP = 1u << 3, /* t->hmax: by priority, highest on top */
};

/* Every member is called with the table's lock held and the table holding
 * at least one item; none may change the table but for its random state
 * (chime__tbl_rand), so that the same seed makes the same draws. */
typedef struct {
  chime__selector_kind_t id; /* the config's value */
  const char *name;          /* as the config spells it */
  unsigned needs; /* CHIME__SEL_*: the indexes pick and victim read */
  /* Whether the rows it picks are spread at random over the table (so a
   * table larger than the caches misses on each): copies prefetch then. */
  int random;
  /* The live row a sampler takes, and in *prob the probability it had of
   * being taken. MUST return a live row. */
  uint32_t (*pick)(chime__table_t *t, double *prob);
  /* As a remover, the item that leaves a full table: the pick among the
   * table's items and the one coming in (of priority prio and, with
   * CHIME__SEL_SUM, weight w), Reverb's rule. NONE (UINT32_MAX): the new
   * one, which then never goes in. Else MUST return a live row. */
  uint32_t (*victim)(chime__table_t *t, double prio, double w);
  /* Optional (NULL: each draw by pick, one after another): whether a batch
   * is drawn now draws_ahead at a time, and n <= CHIME__TBL_DRAW_CHUNK such
   * draws. draw_many MUST give what n calls of pick would, from the same
   * random numbers in the same order; it is called only when draws_ahead
   * said yes under the same hold of the lock, and when no draw changes the
   * table (no max_times_sampled). */
  int (*draws_ahead)(const chime__table_t *t);
  void (*draw_many)(chime__table_t *t, uint64_t n, uint32_t *row, double *prob);
  /* Optional (NULL: the item count, every item weighing 1): what pick's
   * draws weigh against now, so that an item's probability is its weight /
   * mass; a sharded learner weighs shards by it (docs/protocol.md,
   * GetInfo). Called also on an empty table (then 0). */
  double (*mass)(const chime__table_t *t);
} chime__selector_t;

extern const chime__selector_t chime__selector_fifo;
extern const chime__selector_t chime__selector_lifo;
extern const chime__selector_t chime__selector_uniform;
extern const chime__selector_t chime__selector_prioritized;
extern const chime__selector_t chime__selector_min_heap;
extern const chime__selector_t chime__selector_max_heap;

/* The selector with this config value, or NULL. */
const chime__selector_t *chime__selector(chime__selector_kind_t id);

#endif
