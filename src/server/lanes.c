/* Lanes: a stream-mode learner reads one stream over several connections
 * (Open.connections), each a Subscribe call of its own on its own TCP
 * connection, so that one flow in loss recovery holds back only the
 * batches dealt to it. The first call Opens the stream as ever and keeps
 * its credits; each other call's first request is a Join naming the
 * stream by its id and its resume token (the secret Opened gave only to
 * that learner) and a lane, 1..connections-1, each once. The sender deals
 * whole batches to the joined lanes (sender.c); the learner puts them back
 * in seq order. A lane's call that ends before the stream does is a lost
 * connection: the stream is lost and its learner resumes it whole.
 * The other end: src/client/lanes.c (one basename, two ends). */
#include "server/lanes.h"

#include <inttypes.h>

#include "common/errfmt.h"
#include "server/stream.h"

void chime__call_lost(chime__call_t *c, const char *why) {
  chime__call_cancel(c, GRPC_STATUS_UNAVAILABLE, why);
}

void chime__lanes_end(chime__sender_t *x) {
  chime__call_t *calls[CHIME__LANES_MAX];
  uint32_t n = chime__sender_take_lanes(x, calls);
  for (uint32_t i = 0; i < n; i++) {
    chime__call_finish(calls[i], CHIME_OK, "the stream ended");
    chime__call_unref(calls[i]);
  }
}

chime__stream_t *chime__stream_join(chime_server_t *srv, chime__call_t *call,
                                    const Chime__V1__Join *join, int *code,
                                    char *err, size_t errlen) {
  /* Which of id, table and token was wrong is not said: a stranger
   * learns nothing of the streams there are. */
  chime__stream_t *s =
      join == NULL ? NULL
                   : chime__stream_named(srv, join->stream_id, join->table,
                                         join->resume_token.data,
                                         join->resume_token.len);
  if (s == NULL) {
    *code = chime__fail(err, errlen, CHIME_ENOTFOUND,
                        "Join: no open stream-mode stream with that id, "
                        "table and token");
    return NULL;
  }
  int rc =
      s->ops->join != NULL ? s->ops->join(s, join->lane, call) : CHIME_ENOTSUP;
  if (rc == 0)
    return s;
  if (rc == CHIME_EINVAL)
    chime__fail(err, errlen, rc,
                "Join: lane %" PRIu32 " is out of range (the stream's Open "
                "asked for fewer connections)",
                join->lane);
  else if (rc == CHIME_EEXIST)
    chime__fail(err, errlen, rc, "Join: lane %" PRIu32 " has joined already",
                join->lane);
  else
    chime__fail(err, errlen, rc, "Join: the stream has ended");
  *code = rc;
  chime__stream_unref(s);
  return NULL;
}

void chime__stream_lane_lost(chime__stream_t *s) {
  chime__call_t *call = chime__stream_call(s);
  chime__stream_lost(s);
  if (call != NULL) {
    chime__call_lost(call, "a connection of the stream was lost");
    chime__call_unref(call);
  }
}
