/* fifo: the oldest item first, as a sampler and as a remover. */
#include "replay/selector.h"
#include "replay/table_internal.h"

static uint32_t pick(chime__table_t *t, double *prob) {
  *prob = 1.0;
  return t->oldest;
}

/* The table holds an item at least, so the new one is never the oldest. */
static uint32_t victim(chime__table_t *t, double prio, double w) {
  (void)prio;
  (void)w;
  return t->oldest;
}

const chime__selector_t chime__selector_fifo = {
    .id = CHIME__SELECTOR_FIFO,
    .name = "fifo",
    .pick = pick,
    .victim = victim,
};
