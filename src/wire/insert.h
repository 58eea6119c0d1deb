/* Insert's exactly-once window (docs/protocol.md, Insert): what the server
 * remembers and what a resending writer may therefore keep in flight. */
#ifndef CHIME_WIRE_INSERT_H
#define CHIME_WIRE_INSERT_H

/* Insert requests the server remembers per writer (writer_id) and table: a
 * request resent within the last this many a writer inserted is acked again
 * from memory, an older one refused. So a writer that resends keeps at most
 * this many requests in flight. */
#define CHIME__INSERT_WINDOW 32
/* Writers remembered per table; beyond it the least recently used is
 * forgotten (docs/protocol.md, Insert). */
#define CHIME__INSERT_WRITERS 4096

#endif
