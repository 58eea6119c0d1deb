/* The selectors a table may be given, by config value and by name: a new
 * selector is its file and one entry here. */
#include "replay/selector.h"

#include <stddef.h>
#include <string.h>

static const chime__selector_t *const selectors[] = {
    &chime__selector_fifo,     &chime__selector_uniform,
    &chime__selector_lifo,     &chime__selector_prioritized,
    &chime__selector_min_heap, &chime__selector_max_heap,
};
#define NSELECTORS (sizeof(selectors) / sizeof(selectors[0]))

const chime__selector_t *chime__selector(chime__selector_kind_t id) {
  for (size_t i = 0; i < NSELECTORS; i++)
    if (selectors[i]->id == id)
      return selectors[i];
  return NULL;
}

const char *chime__selector_kind_name(chime__selector_kind_t s) {
  const chime__selector_t *sel = chime__selector(s);
  return sel != NULL ? sel->name : "unknown";
}

chime__selector_kind_t chime__selector_kind_parse(const char *s) {
  for (size_t i = 0; i < NSELECTORS; i++)
    if (strcmp(s, selectors[i]->name) == 0)
      return selectors[i]->id;
  return 0;
}
