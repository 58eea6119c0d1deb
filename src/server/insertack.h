/* Internal: Insert's ack of a request that went in (insertack.c), with a
 * group table's dropped groups (docs/replay.md, "Admission filters"). */
#ifndef CHIME_SERVER_INSERTACK_H
#define CHIME_SERVER_INSERTACK_H

#include <stdint.h>

#include "server/call.h"

/* A call's room for one request's filter reasons (a byte per group). */
typedef struct {
  uint8_t *r;
  uint32_t cap;
} chime__insert_drops_t;

/* d's room for count groups, zeroed: the table's chime__table_stored_t
 * drop, or NULL when the table has no filters (or no memory: then the
 * insert goes on, and its ack says nothing was dropped). */
uint8_t *chime__insert_drops_for(chime__insert_drops_t *d, uint32_t count,
                                 int filters);
void chime__insert_drops_free(chime__insert_drops_t *d);
/* Sends the ack of request id (count samples from first_key); drop, when
 * not NULL, each group's filter reason (0: it went in). */
void chime__insert_send_ack(chime__call_t *c, uint64_t id, uint32_t count,
                            uint64_t first_key, const uint8_t *drop);

#endif
