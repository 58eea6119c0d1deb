/* Internal: Insert calls, applied by one worker thread per table in
 * arrival order (insert.c). */
#ifndef CHIME_SERVER_INSERT_H
#define CHIME_SERVER_INSERT_H

#include "server/insertack.h"
#include "server/state.h"

int chime__inserter_create(chime__inserter_t **out, chime_server_t *srv,
                           chime__table_t *t);
void chime__inserter_destroy(chime__inserter_t *w);
/* An Insert call's heartbeats (insertack.h), NULL for any other call or
 * one not started; valid while the caller holds a reference to c. */
chime__insert_beat_t *chime__insert_beat_of(chime__call_t *c);

#endif
