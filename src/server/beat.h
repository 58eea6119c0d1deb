/* Stream mode's heartbeats (docs/protocol.md, "Heartbeats"): one thread
 * of the server looks at every stream whose learner asked for them
 * (Open.heartbeat_ms) about twice an interval, and each that has credits
 * and sent nothing for an interval gets a Heartbeat (sender_beat.c). A
 * learner that expects a batch and hears nothing at all then knows its
 * connection stalled (client/stall.c) instead of waiting on it. */
#ifndef CHIME_SERVER_BEAT_H
#define CHIME_SERVER_BEAT_H

#include "server/state.h"

typedef struct chime__beat_s chime__beat_t;

/* Starts the thread over srv's streams: CHIME_ENOMEM, CHIME_ESYS. */
int chime__beat_start(chime__beat_t **out, chime_server_t *srv);
/* Stops and joins it, frees it; NULL-safe. */
void chime__beat_stop(chime__beat_t *b);

#endif
