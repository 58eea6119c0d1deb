/* min_heap and max_heap: the lowest (highest) priority first, of equal
 * priorities the older item; as a remover, the item coming in when it is
 * the extreme. */
#include "replay/heap.h"
#include "replay/selector.h"
#include "replay/table_internal.h"

static uint32_t pick_min(chime__table_t *t, double *prob) {
  uint32_t r = NONE;
  *prob = 1.0;
  if (chime__heap_top(t->hmin, &r, NULL) == 0)
    return r;
  return chime__selector_uniform.pick(t, prob); /* count >= 1: unreachable */
}

static uint32_t pick_max(chime__table_t *t, double *prob) {
  uint32_t r = NONE;
  *prob = 1.0;
  if (chime__heap_top(t->hmax, &r, NULL) == 0)
    return r;
  return chime__selector_uniform.pick(t, prob); /* count >= 1: unreachable */
}

static uint32_t victim_min(chime__table_t *t, double prio, double w) {
  (void)w;
  uint32_t r = NONE;
  double top = 0;
  if (chime__heap_top(t->hmin, &r, &top) != 0)
    return NONE; /* count >= 1: unreachable */
  return prio < top ? NONE : r;
}

static uint32_t victim_max(chime__table_t *t, double prio, double w) {
  (void)w;
  uint32_t r = NONE;
  double top = 0;
  if (chime__heap_top(t->hmax, &r, &top) != 0)
    return NONE;
  return prio > top ? NONE : r;
}

const chime__selector_t chime__selector_min_heap = {
    .id = CHIME__SELECTOR_MIN_HEAP,
    .name = "min_heap",
    .needs = CHIME__SEL_MIN_HEAP,
    .pick = pick_min,
    .victim = victim_min,
};

const chime__selector_t chime__selector_max_heap = {
    .id = CHIME__SELECTOR_MAX_HEAP,
    .name = "max_heap",
    .needs = CHIME__SEL_MAX_HEAP,
    .pick = pick_max,
    .victim = victim_max,
};
