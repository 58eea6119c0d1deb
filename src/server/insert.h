/* Internal: Insert calls, applied by one worker thread per table in
 * arrival order (insert.c). */
#ifndef CHIME_SERVER_INSERT_H
#define CHIME_SERVER_INSERT_H

#include "server/state.h"

int chime__inserter_create(chime__inserter_t **out, chime_server_t *srv,
                           chime__table_t *t);
void chime__inserter_destroy(chime__inserter_t *w);

#endif
