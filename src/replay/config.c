/* Selector names as a table's configuration spells them. */
#include "replay/config.h"

#include <stddef.h>
#include <string.h>

static const char *const selector_names[] = {
    [CHIME__SAMPLER_FIFO] = "fifo",
    [CHIME__SAMPLER_UNIFORM] = "uniform",
    [CHIME__SAMPLER_LIFO] = "lifo",
    [CHIME__SAMPLER_PRIORITIZED] = "prioritized",
    [CHIME__SAMPLER_MIN_HEAP] = "min_heap",
    [CHIME__SAMPLER_MAX_HEAP] = "max_heap",
};
#define NSELECTORS (sizeof(selector_names) / sizeof(selector_names[0]))
const char *chime__sampler_name(chime__sampler_t s) {
  if ((size_t)s < NSELECTORS && selector_names[s] != NULL)
    return selector_names[s];
  return "unknown";
}

chime__sampler_t chime__sampler_parse(const char *s) {
  for (size_t i = 0; i < NSELECTORS; i++)
    if (selector_names[i] != NULL && strcmp(s, selector_names[i]) == 0)
      return (chime__sampler_t)i;
  return 0;
}
