/* A rate limiter as an ops table: whether an insert may go in and whether
 * a batch may be taken now, from the table's counts. A new limiter is its
 * file and the entry chime__table_create picks it by. */
#ifndef CHIME_REPLAY_LIMITER_H
#define CHIME_REPLAY_LIMITER_H

typedef struct chime__table_s chime__table_t;

/* Both members are called with the table's lock held, read the table's
 * config and counts (count, inserts, samples) and change nothing; the
 * table asks again after every change of those counts, so an answer may
 * turn from no to yes only through them. */
typedef struct {
  const char *name;
  /* One more item may go in. */
  int (*allows_insert)(const chime__table_t *t);
  /* One more sample may be taken (the table holds items enough). */
  int (*allows_sample)(const chime__table_t *t);
} chime__limiter_t;

/* Reverb's SampleToInsertRatio (samples_per_insert 0: min_size only). */
extern const chime__limiter_t chime__limiter_ratio;

#endif
