/* lifo: the newest item first; as a remover, the item coming in. */
#include "replay/selector.h"
#include "replay/table_internal.h"

static uint32_t pick(chime__table_t *t, double *prob) {
  *prob = 1.0;
  return t->newest;
}

static uint32_t victim(chime__table_t *t, double prio, double w) {
  (void)t;
  (void)prio;
  (void)w;
  return NONE; /* the new one is the newest */
}

const chime__selector_t chime__selector_lifo = {
    .id = CHIME__SELECTOR_LIFO,
    .name = "lifo",
    .pick = pick,
    .victim = victim,
};
