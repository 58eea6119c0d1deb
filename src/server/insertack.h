/* Internal: Insert's ack of a request that went in (insertack.c), with a
 * group table's dropped groups (docs/replay.md, "Admission filters"). */
#ifndef CHIME_SERVER_INSERTACK_H
#define CHIME_SERVER_INSERTACK_H

#include <stdatomic.h>
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
/* A call's heartbeats (docs/protocol.md, "Heartbeats"): the interval
 * its writer asked for (InsertRequest.heartbeat_ms; 0: none), and when
 * the call last sent anything (an ack or a heartbeat), CLOCK_MONOTONIC ns. */
typedef struct {
  atomic_uint ms;
  atomic_uint_fast64_t sent_ns;
} chime__insert_beat_t;

/* Sends the ack of request id (count samples from first_key); drop, when
 * not NULL, each group's filter reason (0: it went in). The ack says the
 * call's heartbeat interval, and counts as heard for beat. */
void chime__insert_send_ack(chime__call_t *c, uint64_t id, uint32_t count,
                            uint64_t first_key, const uint8_t *drop,
                            chime__insert_beat_t *beat);
/* The beat thread's look at an Insert call (server/beat.c): a heartbeat
 * when its writer asked for them and the call sent nothing for an
 * interval, never behind a send in flight. chimed reads one request at a
 * time and cannot tell an idle writer from one whose next request is
 * still arriving (a large one on a slow link), so every call that asked
 * hears them, acks pending or not. */
void chime__insert_beat(chime__call_t *c, chime__insert_beat_t *beat,
                        uint64_t now_ns);

#endif
