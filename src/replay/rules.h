/* Internal: what a table asks of the streams and requests that reach it,
 * as the replay engine sees them (rules.c). The service reads a request
 * off the wire and calls these before anything is made or inserted; the
 * sentences in err are the client's. */
#ifndef CHIME_REPLAY_RULES_H
#define CHIME_REPLAY_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "replay/table.h"

/* A stream's batches of batch_size items on a table of config tc: 0, or
 * CHIME_EINVAL when a batch could wait for ever. Sampling that takes items
 * out (max_times_sampled) waits for batch_size of them at once, more than
 * the table ever holds (chime__table_max_items); with a rate limiter as
 * well, inserts stop at min_size, before a batch's worth is in. */
int chime__rules_stream(const chime__table_config_t *tc, uint32_t batch_size,
                        char *err, size_t errlen);

/* What a writer's request says of its samples, past its bytes (those are
 * the service's insertcheck.c). */
typedef struct {
  uint32_t count;           /* samples */
  uint64_t writer_id;       /* 0: none */
  uint64_t id;              /* the writer's request number */
  int end_episode;          /* the writer's episode ends (sequence tables) */
  size_t n_versions;        /* none, one for all, or one per sample */
  const double *priorities; /* n_priorities: none, or one per sample */
  size_t n_priorities;
} chime__insert_shape_t;

/* A request of shape q into table t: 0, or CHIME_EINVAL with the first
 * rule it breaks, "insert into '<table>': ..." in err: a sequence table's
 * writer id and priorities, end_episode for a plain table, a fifo table's
 * capacity (a request goes in whole), the counts of versions and
 * priorities, each priority's value (finite, at least 0, and one t's
 * selectors can weigh: chime__table_check_priorities), and a writer's
 * request numbered from 1. */
int chime__rules_insert(const chime__table_t *t, const chime__insert_shape_t *q,
                        char *err, size_t errlen);

#endif
