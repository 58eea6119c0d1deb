/* Insert's exactly-once window: what a table remembers of each writer
 * (replay/dedupe.h), and so what a resending writer may keep in flight
 * (client/writer.c); docs/protocol.md, Insert. */
#ifndef CHIME_COMMON_INSERT_WINDOW_H
#define CHIME_COMMON_INSERT_WINDOW_H

/* Insert requests the server remembers per writer (writer_id) and table: a
 * request resent within the last this many a writer inserted is acked again
 * from memory, an older one refused. So a writer that resends keeps at most
 * this many requests in flight. */
#define CHIME__INSERT_WINDOW 32
/* Writers remembered per table by default (the table key max_writers);
 * docs/protocol.md, "Which writers the server remembers". */
#define CHIME__INSERT_WRITERS 4096
#define CHIME__INSERT_MAX_WRITERS 65536 /* max_writers at most */
/* How long a writer no open call carries is remembered for sure, by
 * default (the table key writer_idle_ms): a writer that lost its connection
 * resends within this. */
#define CHIME__INSERT_WRITER_IDLE_MS 60000
/* Percent of a table's writer places kept, by default, for the actor tokens
 * that hold fewer than their share (the table key writer_token_reserve;
 * replay/dedupe.h): with 2 actor tokens, 25% each, so one token's holder
 * can fill at most 75% while the other holds none. */
#define CHIME__INSERT_WRITER_TOKEN_RESERVE 50

#endif
