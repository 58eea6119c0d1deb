/* uniform: every item alike, drawn from the dense array of live rows. */
#include "replay/selector.h"
#include "replay/table_internal.h"

static uint32_t pick(chime__table_t *t, double *prob) {
  *prob = 1.0 / (double)t->count;
  return t->dense[chime__tbl_rand(t) % t->count];
}

/* The new one with chance 1 / (size + 1). */
static uint32_t victim(chime__table_t *t, double prio, double w) {
  (void)prio;
  (void)w;
  uint64_t k = chime__tbl_rand(t) % (t->count + 1);
  return k == t->count ? NONE : t->dense[k];
}

/* Only where there are misses to overlap. */
static int draws_ahead(const chime__table_t *t) {
  return chime__tbl_scattered(t);
}

/* The dense entries asked for together, then each record as its row is
 * known (the batch's next read). */
static void draw_many(chime__table_t *t, uint64_t n, uint32_t *row,
                      double *prob) {
  for (uint64_t j = 0; j < n; j++) {
    row[j] = (uint32_t)(chime__tbl_rand(t) % t->count);
    __builtin_prefetch(&t->dense[row[j]]);
  }
  for (uint64_t j = 0; j < n; j++) {
    row[j] = t->dense[row[j]];
    prob[j] = 1.0 / (double)t->count;
    chime__tbl_prefetch_meta(t, row[j]); /* plan_batch's next read */
  }
}

const chime__selector_t chime__selector_uniform = {
    .id = CHIME__SELECTOR_UNIFORM,
    .name = "uniform",
    .needs = CHIME__SEL_DENSE,
    .random = 1,
    .pick = pick,
    .victim = victim,
    .draws_ahead = draws_ahead,
    .draw_many = draw_many,
};
