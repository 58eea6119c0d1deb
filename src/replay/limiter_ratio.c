/* The sample-to-insert ratio limiter (Reverb's SampleToInsertRatio). */
#include "replay/limiter.h"
#include "replay/table_internal.h"

/* The rate limiter (samples_per_insert, Reverb's SampleToInsertRatio and
 * its RateLimiter's rules): samples - samples_per_insert * inserts stays
 * within error_buffer of its value at min_size. Reverb counts inserts,
 * samples and deletes, every item that leaves (sampled out, evicted,
 * deleted) a delete, so that inserts - deletes is the table's size:
 * t->count here (an item given back is un-deleted, and counts again).
 * An insert goes in while the table, with one more item, holds at most
 * min_size (until the min size is reached, or removals brought the table
 * back below it, inserts are free: else a table that sampling emptied
 * below min_size would wait for ever, the sampler for items and the
 * insert for samples), or else while one more item keeps the difference
 * under the top of the window; a batch may be taken while the table holds
 * min_size items and one more sample keeps it over the bottom. A request
 * or a batch can pass the window by itself, less one item. Checked under
 * the table lock. */
static int allows_insert(const chime__table_t *t) {
  double spi = t->cfg.samples_per_insert;
  if (spi == 0 || t->count < t->cfg.min_size)
    return 1;
  double top = spi * (double)t->cfg.min_size + t->cfg.error_buffer;
  return (double)(t->inserts + 1) * spi - (double)t->samples <= top;
}

static int allows_sample(const chime__table_t *t) {
  double spi = t->cfg.samples_per_insert;
  if (spi == 0)
    return 1;
  if (t->count < t->cfg.min_size)
    return 0;
  double bottom = spi * (double)t->cfg.min_size - t->cfg.error_buffer;
  return (double)t->inserts * spi - (double)(t->samples + 1) >= bottom;
}

const chime__limiter_t chime__limiter_ratio = {
    .name = "sample_to_insert_ratio",
    .allows_insert = allows_insert,
    .allows_sample = allows_sample,
};
