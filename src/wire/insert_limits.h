/* Insert limits per call (docs/protocol.md, Insert); the exactly-once window
 * itself is common/insert_window.h, shared with the replay engine. */
#ifndef CHIME_WIRE_INSERT_H
#define CHIME_WIRE_INSERT_H

#include "common/insert_window.h"

/* Distinct writer_ids one Insert call may carry: a client cannot bring
 * thousands of new writers on one call (the C writer uses one per call). */
#define CHIME__INSERT_CALL_WRITERS 16

#endif
