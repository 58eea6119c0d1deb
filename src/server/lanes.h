/* A stream-mode stream read over several connections: the calls that
 * join it as lanes (docs/protocol.md, "Lanes"; lanes.c). The other end:
 * src/client/lanes.c (one basename, two ends). */
#ifndef CHIME_SERVER_LANES_H
#define CHIME_SERVER_LANES_H

#include <grpc/grpc.h>

#include "server/call.h"
#include "server/sender.h"

/* Ends the call at once as a lost connection does (UNAVAILABLE, no
 * chime error): its learner resumes the stream. */
void chime__call_lost(chime__call_t *c, const char *why);
/* The sender stopped: each joined lane's call ends (OK: the stream is
 * over, its first call says how) and its reference goes. */
void chime__lanes_end(chime__sender_t *x);

#endif
