/* A group table's keys (config_group.c; docs/replay.md, "Groups"). */
#ifndef CHIME_SERVER_CONFIG_GROUP_H
#define CHIME_SERVER_CONFIG_GROUP_H

#include <jansson.h>
#include <stddef.h>

#include "replay/table_config.h"

/* group_max and filters (either NULL when absent) of table t, read after
 * every other key (t's spec is the sample spec then): makes t a group
 * table (its spec the stored one, chime_spec_group) with its filters. 0,
 * or CHIME_EINVAL with a sentence naming the table (where) and the key. */
int chime__config_group(chime__table_config_t *t, json_t *group_max,
                        json_t *filters, const char *where, char *err,
                        size_t errlen);

#endif
