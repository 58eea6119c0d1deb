/* Internal to the client: a sharded client's next() and release()
 * (union_draw.c), reached from stream.c as union.h's calls are; their
 * contracts are the public calls' (chime.h), on the learner's thread. */
#ifndef CHIME_CLIENT_UNION_DRAW_H
#define CHIME_CLIENT_UNION_DRAW_H

#include "chime/chime.h"

int chime__union_next(chime_stream_t *s, chime_batch_t *out, int timeout_ms);
int chime__union_release(chime_stream_t *s, const chime_batch_t *batch);
int chime__union_wait(chime_stream_t *s, const chime_batch_t *batch,
                      void *cuda_stream);

#endif
