/* A replay table's configuration and the limits it is checked against: what
 * the engine needs to build a table, whoever reads it from where (chimed's
 * JSON file is parsed into it by server/config.c). */
#ifndef CHIME_REPLAY_CONFIG_H
#define CHIME_REPLAY_CONFIG_H

#include <stdint.h>

#include "chime/spec.h"
#include "replay/steps.h"

/* A selector: how a table's sampler picks an item, and how its remover
 * picks the item that leaves when a full table needs room (Reverb's
 * selectors; docs/replay.md). */
typedef enum {
  CHIME__SELECTOR_FIFO = 1,
  CHIME__SELECTOR_UNIFORM = 2,
  CHIME__SELECTOR_LIFO = 3,
  CHIME__SELECTOR_PRIORITIZED = 4, /* priority^exponent / sum */
  CHIME__SELECTOR_MIN_HEAP = 5,    /* lowest priority first */
  CHIME__SELECTOR_MAX_HEAP = 6,    /* highest priority first */
} chime__selector_kind_t;

/* A prioritized table's weight by staleness s (the newest version known
 * minus the item's): an item is drawn with probability priority^exponent
 * x w(s) / their sum (docs/replay.md, "Staleness weighting"). */
typedef enum {
  CHIME__STALE_WEIGHT_NONE = 0,
  CHIME__STALE_WEIGHT_INVERSE = 1, /* 1 / (s + 1), TorchRL's */
} chime__stale_weight_t;

/* Rows are 32-bit indexes with one value kept for "none". */
#define CHIME__MAX_TABLE_ITEMS UINT64_C(0xfffffffe)
/* Step slots too, rounded up to whole blocks of up to 32 steps. */
#define CHIME__MAX_TABLE_STEPS UINT64_C(0xffffff00)
#define CHIME__MAX_SEQUENCE_LENGTH 65536u
#define CHIME__MAX_DATA_DIR 1024u

/* A group table's admission filter (docs/replay.md, "Admission
 * filters"): a group is dropped at insert when its samples' values of a
 * fixed scalar leaf all equal (ZERO_VARIANCE: DAPO's dynamic sampling,
 * no signal in the group) or their mean lies outside [min, max]
 * (MEAN_OUTSIDE). The reasons are part of the wire (InsertAck). */
typedef enum {
  CHIME__FILTER_ZERO_VARIANCE = 1,
  CHIME__FILTER_MEAN_OUTSIDE = 2,
} chime__filter_kind_t;
#define CHIME__MAX_FILTERS 8
typedef struct {
  chime__filter_kind_t kind;
  uint32_t leaf; /* its index in the table's (stored) spec */
  double min, max;
} chime__group_filter_t;

typedef struct {
  char name[CHIME_MAX_NAME];
  chime_spec_t spec;
  uint64_t capacity;
  uint64_t min_size;
  chime__selector_kind_t sampler;
  /* 0: fifo. A fifo sampler's full table makes inserts wait instead. */
  chime__selector_kind_t remover;
  double priority_exponent; /* prioritized sampler or remover only */
  /* An item leaves once sampled this many times; 0: never. 0 with a fifo
   * sampler means 1 (a queue, the fifo table's behaviour before the key). */
  uint64_t max_times_sampled;
  /* Rate limiter (Reverb's SampleToInsertRatio): samples per inserted
   * item, kept within error_buffer of samples_per_insert * inserts. 0: no
   * ratio limit (min_size still gates sampling). */
  double samples_per_insert;
  double error_buffer;
  uint64_t seed; /* the table's random draws; 0: from the clock (tests) */
  /* A sequence table (sequence_length > 0; docs/sequences.md): spec is one
   * step's, capacity_steps steps are stored once each, and an item is a
   * window of sequence_length consecutive steps of one episode, made every
   * stride steps. capacity is set to capacity_steps (a step starts at most
   * one window). */
  uint64_t capacity_steps;
  uint32_t sequence_length, stride;
  int episode_pad;          /* 1: pad (mask leaf), 0: drop short tails */
  int initial_priority_max; /* 1: the largest priority seen so far */
  double initial_priority;  /* else this one (default 1) */
  /* Insert's writer memory (replay/dedupe.h): writers remembered (0:
   * CHIME__INSERT_WRITERS), and how long one that no open call carries is
   * kept for sure (the config's default CHIME__INSERT_WRITER_IDLE_MS; 0:
   * not at all). */
  uint32_t max_writers;
  uint32_t writer_idle_ms;
  /* Owners' shares of those places (dedupe.h, chime__dedupe_set_owners):
   * writer_owners owners (chimed: its actor tokens; under 2: no shares)
   * are owed writer_token_reserve percent of max_writers between them. */
  uint32_t writer_owners;
  uint32_t writer_token_reserve;
  /* The shard whose keys the table issues (common/key.h): its keys are
   * chime__key_make(shard, 1), (shard, 2), ...; 0: an unsharded server's.
   * A key of another shard is refused by MutatePriorities and restore, and
   * a table that issued its last count refuses inserts (CHIME_EOVERFLOW).
   * chimed sets every table's from its own `shard`. */
  uint32_t shard;
  /* Policy versions (docs/replay.md): an item more than max_staleness
   * versions behind the newest version the table knows (its items' and
   * its learners') is never sampled and leaves; 0: no limit. A sequence
   * table's window has its oldest step's version. */
  uint64_t max_staleness;
  /* A plain prioritized table's staleness weighting; NONE: none. */
  chime__stale_weight_t staleness_weight;
  /* Pacing (replay/pace.c, docs/replay.md "Pacing producers"): the
   * samples a learner draws per version step; inserts wait while the
   * samples written ahead of the learner's progress would pass
   * (max_staleness - 1) of those batches. 0: off. Plain tables with
   * max_staleness only. */
  uint64_t pace_batch;
  /* Per-token versions: the index + 1 of a ragged integer leaf whose
   * minimum is each sample's version (the request's when it is empty);
   * 0: none. Plain tables, an uncompressed one-dimensional leaf. */
  uint32_t version_leaf;
  /* Compressed leaves (replay/zleaf.h): leaf i's zstd level, 0: stored
   * as it is. Fixed-shape leaves of plain tables only (for now). */
  uint8_t compress[CHIME_MAX_LEAVES];
  /* A table in files (replay/table_file.h): its storage in
   * data_dir/NAME.table, mapped, kept across restarts; "": in memory.
   * Plain tables of fixed-shape, uncompressed leaves only (for now). */
  char data_dir[CHIME__MAX_DATA_DIR];
  /* A group table (docs/replay.md, "Groups"): spec is the stored spec
   * (chime_spec_group) of groups of up to group_max samples; 0: a plain
   * or sequence table. Its filters drop groups at insert, in order. */
  uint32_t group_max;
  uint32_t nfilters;
  chime__group_filter_t filters[CHIME__MAX_FILTERS];
} chime__table_config_t;

/* A table's storage (capacity * sample bytes) is reserved up front. */
#define CHIME__MAX_TABLE_BYTES (UINT64_C(1) << 40)

/* Whether a plain fifo table's rate limit stalls for sure: its items leave
 * only after max_times_sampled samples each (0 means 1 for fifo) and its
 * full table makes inserts wait, so samples per insert can never stay
 * under that count for long. After the table fills, each item let in and
 * sampled out moves inserts * samples_per_insert - samples down by
 * max_times_sampled - samples_per_insert, until the sampler waits on the
 * ratio while the insert waits for room, both for ever, whatever the
 * capacity, min_size and error_buffer. At or above it no such wait
 * exists (docs/replay.md, Rate limiter). Sequence tables never wait for
 * room (their oldest steps leave). */
static inline int chime__fifo_ratio_stalls(const chime__table_config_t *cfg) {
  uint64_t mts = cfg->max_times_sampled != 0 ? cfg->max_times_sampled : 1;
  return cfg->sampler == CHIME__SELECTOR_FIFO && cfg->sequence_length == 0 &&
         cfg->samples_per_insert > 0 && cfg->samples_per_insert < (double)mts;
}

/* The most items a table of this config holds at once: its capacity, or
 * for a sequence table the windows its step store can hold at once
 * (chime__steps_max_windows; at most capacity_steps). A batch that needs
 * more (max_times_sampled: a whole batch of items), or a min_size above
 * it, would wait for ever. */
static inline uint64_t
chime__table_max_items(const chime__table_config_t *cfg) {
  if (cfg->sequence_length == 0)
    return cfg->capacity;
  chime__steps_config_t sc = {
      .capacity_steps = cfg->capacity_steps,
      .sequence_length = cfg->sequence_length,
      .stride = cfg->stride != 0 ? cfg->stride : cfg->sequence_length,
      .pad = cfg->episode_pad,
  };
  uint64_t w = chime__steps_max_windows(&cfg->spec, &sc);
  return w < cfg->capacity_steps ? w : cfg->capacity_steps;
}

const char *chime__selector_kind_name(chime__selector_kind_t s);
/* The selector named s (a config value), or 0. */
chime__selector_kind_t chime__selector_kind_parse(const char *s);

#endif
