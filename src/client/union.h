/* Internal to the client: the stream of a sharded client (union.c), the
 * union of its shards' tables read as one table.
 *
 * One sub-stream per live shard, each an ordinary stream on the shard's own
 * one-server client (shm for a shard on this host, stream mode for the
 * others, as the caller's options say). For a uniform or prioritized table
 * each batch comes whole from one shard, shard i drawn with probability
 * mass_i / sum(mass) (what its sampler draws against: GetInfo's mass, and
 * weight / probability of each batch's first item), and every item's
 * probability is rewritten as its probability in the union: the shard's
 * times mass_i / sum(mass), in a copy of the batch's sample info the union
 * owns until release (a draw whose shard holds all the mass, share 1,
 * lends the sub-stream's info as it is: no copy). fifo, lifo and the heaps have
 * no masses: a batch from whichever sub-stream has one ready, round robin. A
 * shard whose sub-stream ends is skipped and opened again once it answers; a
 * shard new to the set gets a sub-stream. No thread of its own: masses are
 * asked for every INFO_EVERY_MS inside next(), without waiting for the answers.
 *
 * stream.c reaches these (and union_draw.h's next and release) through
 * one `if (s->uni)` in each public stream call; their contracts are the
 * public calls' (chime.h), on the learner's thread. The files: union.c
 * opens and closes the whole, union_draw.c draws and lends batches,
 * union_sub.c keeps the sub-streams (union_sub.h holds the state).
 * docs/scaling.md, "Sampling over shards", says what it costs. */
#ifndef CHIME_CLIENT_UNION_H
#define CHIME_CLIENT_UNION_H

#include <stddef.h>

#include "chime/chime.h"

/* Opens the union for s (s->client sharded; s->table, s->opts with defaults
 * filled in and checked): a sub-stream on every shard that can be reached,
 * s->uni set. A shard that cannot be reached now is tried again from
 * next(); one that refuses (no such table, a different spec or sampler, a
 * bad option) fails the open, as does reaching none. On failure s->uni is
 * NULL and nothing is left open; err says why. */
int chime__union_open(chime_stream_t *s, char *err, size_t errlen);
/* The sub-streams' mode when they all have one; CHIME_MODE_AUTO when they
 * differ (shm for some shards, stream for others) or none is open. */
chime_mode_t chime__union_mode(const chime_stream_t *s);
/* The first sub-stream's reason for falling back, naming its shard. */
const char *chime__union_fallback_reason(const chime_stream_t *s);
int chime__union_stats(const chime_stream_t *s,
                       chime_stream_local_stats_t *out);
/* chime_stream_set_version for the union: on every open sub-stream (each
 * tells its shard and drops its batches that the version leaves stale),
 * and at the open of every sub-stream opened later. */
int chime__union_set_version(chime_stream_t *s, uint64_t version);
/* Closes every sub-stream and frees s->uni (NULL after). In a child of
 * fork() only this process's memory goes (fork.h). */
void chime__union_close(chime_stream_t *s);

#endif
