/* A table of chimed's config (config_table.c): its keys and its checks. */
#ifndef CHIME_SERVER_CONFIG_TABLE_H
#define CHIME_SERVER_CONFIG_TABLE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "replay/table_config.h"

/* One table of the config (config_table.c): tables[index] as read from
 * obj, checked whole. 0 or CHIME_EINVAL with a sentence naming the table
 * and the key. */
int chime__config_table_parse(chime__table_config_t *t, json_t *obj,
                              uint32_t index, char *err, size_t errlen);
/* Whether s is a table's name: 1-63 characters of [A-Za-z0-9_.-]. */
int chime__config_name_ok(const char *s);
/* The i-th table key's name (docs/operations.md's "Table keys" lists the
 * same), NULL past the last. */
const char *chime__config_table_key(uint32_t i);

#endif
