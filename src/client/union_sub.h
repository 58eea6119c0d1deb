/* Internal to the client: the state of a sharded client's stream (union.h)
 * and its sub-streams, one per shard (union_sub.c): opening one on a
 * shard, closing it, ending it when its server goes, and the GetInfo calls
 * that bring each shard's mass. union_draw.c decides which sub-stream each
 * batch comes from; union.c opens and closes the whole. Everything runs on
 * the learner's thread, inside its calls: the union holds no lock and no
 * thread. */
#ifndef CHIME_CLIENT_UNION_SUB_H
#define CHIME_CLIENT_UNION_SUB_H

#include <stddef.h>
#include <stdint.h>

#include "client/shards.h"
#include "client/stream.h"

/* Masses are asked of every shard this often (GetInfo, answered while
 * next() goes on); each batch taken also tells its shard's mass. */
#define INFO_EVERY_MS 100
/* A shard without a sub-stream (never reached, or its stream ended) is
 * opened again at most this often, and only once its channel is ready, so
 * next() never waits for a shard that does not answer. */
#define REOPEN_EVERY_MS 1000
/* A drawn shard that has delivered nothing for this long, and answered no
 * GetInfo for as long, is set aside: out of the draw, as a dead one, until
 * it answers again (a shard stopped by SIGSTOP, a GC pause or a partition
 * without a reset holds the learner back no longer). A shard that answers
 * but delivers slowly (its rate limiter, a slow link) stays in the draw:
 * setting it aside would bias what the learner sees. */
#define ASIDE_MS 1000
/* At most how many batches of a sub-stream of `slots` slots were sampled
 * before a moment and taken after it: the server's ring, the batches in
 * flight (stream mode: prefetch <= slots) and the local ring. */
#define STALE_BATCHES(slots) (3 * (uint64_t)(slots))

typedef struct chime__union_s chime__union_t;

typedef struct {
  chime_stream_t *s; /* the shard's sub-stream; NULL while none is open */
  int ended;         /* s ended: closed once none of its batches is lent */
  uint32_t lent;     /* its batches the learner holds */
  int64_t retry_ms;  /* no open before this */
  uint64_t instance; /* its server's (GetInfo); 0: unknown */
  /* What its sampler draws against, as last learned and when (0: never):
   * the mass, and the size (the union draws by size while no shard has
   * mass: a prioritized table whose every weight is 0 draws uniformly). */
  double mass, size;
  int64_t mass_ms;
  /* The last GetInfo answer said its rate limiter refuses samples (only
   * inserts into it open it again): not drawn while another shard can
   * deliver, since waiting for it could wait for good (its writers done,
   * the other shards' writers waiting for samples). */
  int blocked;
  /* Set aside (ASIDE_MS) until a GetInfo answer comes; answer_ms: the
   * last answer (or the open), CLOCK_MONOTONIC ms. */
  int aside;
  int64_t answer_ms;
  chime__rpc_t info; /* GetInfo for the mass, answered while next() goes on */
  int info_made;     /* info's queue exists */
  int info_busy;     /* a GetInfo is in flight */
  int64_t info_sent_ms;
  /* Batches taken from s, and the first whose sampling surely followed the
   * last GetInfo answer (s's ring and what is in flight to it hold at most
   * STALE_BATCHES(slots) batches sampled before): only such a batch's
   * mass is newer than the answer's. */
  uint64_t taken, fresh_after;
} sub_t;

/* A batch the learner holds: which sub-stream lent it and how, and, for a
 * weighed table, the copy of its sample info with union probabilities
 * (unless the draw's share was 1: the sub-stream's own info then). */
typedef struct {
  int used;
  uint32_t sub;
  uint64_t seq;       /* the union's, as next() gave it */
  uint64_t inner_seq; /* the sub-stream's */
  const chime_sample_info_t *inner_info;
  chime_sample_info_t *copy;           /* batch_size records, kept for reuse */
  const chime_sample_info_t *out_info; /* as next() gave it: copy or inner */
} lent_t;

struct chime__union_s {
  chime__shards_t *set;
  char sampler[16];
  int weighed;     /* uniform or prioritized: a batch's shard drawn by mass */
  int prioritized; /* weights are priority^exponent (else 1) */
  double exponent;
  int stale_inverse; /* ... divided by staleness + 1 (staleness_weight) */
  double min_size;   /* a shard holding fewer items cannot sample */
  chime_spec_t spec; /* every shard's table has it */
  int have_table;    /* sampler, exponent and spec known (first shard) */

  uint32_t nsubs; /* members seen so far (subs[] index = member index) */
  sub_t subs[CHIME__MAX_SHARDS];

  /* The draw in force (weighed): kept until that shard delivers, so a
   * shard that answers slower is not drawn less often. */
  int chosen; /* -1: none */
  double chosen_w, chosen_total;
  int64_t chosen_ms;
  int by_size;     /* the draw weighed sizes: no shard had mass */
  int all_blocked; /* the draw was among blocked shards: none was open */
  uint64_t rng;

  uint32_t rr;      /* merging: where the next look starts */
  uint32_t wait_at; /* merging: the sub-stream waited on next */

  lent_t *lent; /* slots - 1 entries: as many as a stream lends */
  uint32_t nlent, max_lent;
  uint64_t seq, batches, bytes;
  uint64_t asides; /* shards set aside so far (stats) */
  /* Counters of sub-streams closed since, for stats (and next()'s waits
   * for masses, in closed_wait_ns). */
  uint64_t closed_received, closed_credits, closed_wait_ns, closed_dropped;

  int64_t info_ms; /* masses last asked for, shards last looked at */
  int last_end;    /* the last sub-stream's end, for when all ended */
  char end_why[CHIME__ERRLEN];
  char fallback[CHIME__ERRLEN];
  int has_fallback;
};

static inline int live(const sub_t *sb) {
  return sb->s != NULL && !sb->ended;
}

static inline int any_live(const chime__union_t *u) {
  for (uint32_t i = 0; i < u->nsubs; i++)
    if (live(&u->subs[i]))
      return 1;
  return 0;
}

static inline const char *addr_of(const chime__union_t *u, uint32_t i) {
  return chime__shards_at(u->set, i)->addr;
}

static inline int ended_code(int rc) {
  return rc == CHIME_EDISCONNECTED || rc == CHIME_ESHUTDOWN ||
         rc == CHIME_EPROTO;
}

/* Opens member i's sub-stream. *dup: the member is a server another
 * sub-stream reads already (one chimed under two addresses), and is left
 * alone. */
int chime__union_open_sub(chime_stream_t *s, uint32_t i, int *dup, char *err,
                          size_t errlen);
/* Closes sub-stream i (its counters kept for stats); nothing when none. */
void chime__union_close_sub(chime_stream_t *s, uint32_t i);
/* Sub-stream i ended with rc: none of its batches drawn any more, closed
 * once the learner gave back those it holds; the target resolved again. */
void chime__union_sub_end(chime_stream_t *s, uint32_t i, int rc);
/* next()'s bookkeeping: GetInfo answers taken, masses asked for, shards
 * without a sub-stream looked at, every INFO_EVERY_MS (force: now). */
void chime__union_refresh(chime_stream_t *s, int force);

#endif
