/* Learners handed a ring, watched on the handoff's libuv loop thread. A
 * learner keeps the ring's pages alive whatever chimed does (its mapping
 * or fd), so the ring's budget charge stays with it (a hold on the
 * stream): a pidfd watch ends the stream when the learner process dies and
 * drops the hold then; once the stream is over, a sweep (at once, then
 * after 5 ms, backing off to once a second) drops it as soon as the ring is
 * neither in flight to the learner (unread on the handoff connection) nor
 * among its open fds or mappings in /proc. A /proc chimed may not read counts
 * as holding. */
#ifndef CHIME_SERVER_LIVENESS_H
#define CHIME_SERVER_LIVENESS_H

#include <sys/types.h>
#include <uv.h>

#include "server/streamops.h"

typedef struct chime__liveness_s chime__liveness_t;

/* Streams are reached through ops only (streamops.h). */
int chime__liveness_create(chime__liveness_t **out, uv_loop_t *loop,
                           const chime__stream_ops_t *ops);
/* Loop thread. Takes a stream reference and one of its holds; sock is our
 * end of the handoff connection while the fd may be unread (or -1). */
void chime__liveness_watch(chime__liveness_t *lv, chime__stream_t *s, pid_t pid,
                           int sock);
/* Loop thread: streams may have ended. */
void chime__liveness_check(chime__liveness_t *lv);
/* Loop thread: drops every watch and closes the handles (before the loop's
 * last run). */
void chime__liveness_close(chime__liveness_t *lv);
/* Once the loop has ended (NULL-safe). */
void chime__liveness_free(chime__liveness_t *lv);

#endif
