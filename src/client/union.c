/* A sharded client's stream: a sub-stream per shard, read as one table
 * (union.h). Everything here runs on the learner's thread, inside its
 * calls: the union holds no lock and no thread. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/fork.h"
#include "client/shards.h"
#include "client/stream.h"
#include "client/union.h"
#include "common/spec.h"

/* Masses are asked of every shard this often (GetInfo, answered while
 * next() goes on); each batch taken also tells its shard's mass. */
#define INFO_EVERY_MS 100
/* A shard without a sub-stream (never reached, or its stream ended) is
 * opened again at most this often, and only once its channel is ready, so
 * next() never waits for a shard that does not answer. */
#define REOPEN_EVERY_MS 1000
/* Merging: how long one sub-stream's ring is waited on before the others
 * are looked at again (nothing is ready anywhere, the learner waits). */
#define MERGE_SLICE_MS 2
/* At most how many batches of a sub-stream of `slots` slots were sampled
 * before a moment and taken after it: the server's ring, the batches in
 * flight (stream mode: prefetch <= slots) and the local ring. */
#define STALE_BATCHES(slots) (3 * (uint64_t)(slots))
/* Weighed, while no shard has mass: how long to sleep between looks at the
 * masses that GetInfo brings. */
#define EMPTY_SLICE_MS 5

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
 * weighed table, the copy of its sample info with union probabilities. */
typedef struct {
  int used;
  uint32_t sub;
  uint64_t seq;       /* the union's, as next() gave it */
  uint64_t inner_seq; /* the sub-stream's */
  const chime_sample_info_t *inner_info;
  chime_sample_info_t *copy; /* batch_size records, kept for reuse */
} lent_t;

struct chime__union_s {
  chime__shards_t *set;
  char sampler[16];
  int weighed;     /* uniform or prioritized: a batch's shard drawn by mass */
  int prioritized; /* weights are priority^exponent (else 1) */
  double exponent;
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
  /* Counters of sub-streams closed since, for stats (and next()'s waits
   * for masses, in closed_wait_ns). */
  uint64_t closed_received, closed_credits, closed_wait_ns;

  int64_t info_ms; /* masses last asked for, shards last looked at */
  int last_end;    /* the last sub-stream's end, for when all ended */
  char end_why[CHIME__ERRLEN];
  char fallback[CHIME__ERRLEN];
  int has_fallback;
};

/* splitmix64: the draws need only to be independent of the data. */
static double rand_unit(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

static int live(const sub_t *sb) {
  return sb->s != NULL && !sb->ended;
}

static int any_live(const chime__union_t *u) {
  for (uint32_t i = 0; i < u->nsubs; i++)
    if (live(&u->subs[i]))
      return 1;
  return 0;
}

static const char *addr_of(const chime__union_t *u, uint32_t i) {
  return chime__shards_at(u->set, i)->addr;
}

/* Whether a shard's channel is connected, without waiting: one that is not
 * is asked to connect, and looked at again later. */
static int channel_ready(chime_client_t *c) {
  chime__gate_enter();
  grpc_connectivity_state st =
      grpc_channel_check_connectivity_state(c->channel, 1);
  chime__gate_leave();
  return st == GRPC_CHANNEL_READY;
}

/* The first shard's table sets what every other shard's must be. */
static int check_table(chime_stream_t *s, uint32_t i,
                       const chime_table_info_t *ti, char *err, size_t errlen) {
  chime__union_t *u = s->uni;
  uint32_t at;
  if (!u->have_table) {
    snprintf(u->sampler, sizeof(u->sampler), "%s", ti->sampler);
    u->prioritized = strcmp(ti->sampler, "prioritized") == 0;
    u->weighed = u->prioritized || strcmp(ti->sampler, "uniform") == 0;
    u->exponent = ti->priority_exponent;
    u->min_size = (double)ti->min_size;
    u->spec = ti->spec;
    u->have_table = 1;
    return 0;
  }
  if (strcmp(u->sampler, ti->sampler) != 0 ||
      (u->prioritized && u->exponent != ti->priority_exponent) ||
      chime__spec_diff(&u->spec, &ti->spec, &at) != CHIME__SPEC_SAME)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "shard %s: table '%s' differs from the same table on "
                       "the other shards (spec, sampler or "
                       "priority_exponent): a sharded table must be "
                       "configured alike on every shard",
                       addr_of(u, i), s->table);
  return 0;
}

/* Opens member i's sub-stream. *dup: the member is a server another
 * sub-stream reads already (one chimed under two addresses), and is left
 * alone. */
static int open_sub(chime_stream_t *s, uint32_t i, int *dup, char *err,
                    size_t errlen) {
  chime__union_t *u = s->uni;
  chime__member_t *m = chime__shards_at(u->set, i);
  sub_t *sb = &u->subs[i];
  chime_table_info_t ti;
  chime_server_info_t *si = NULL;
  char why[CHIME__ERRLEN];
  *dup = 0;
  int64_t asked = chime__now_ms();
  int rc = chime__table_lookup(m->client, s->table, &ti, &si, why, sizeof(why));
  if (rc)
    return chime__fail(err, errlen, rc, "shard %s: %s", m->addr, why);
  uint64_t instance = si->instance;
  chime_server_info_free(si);
  for (uint32_t j = 0; j < u->nsubs && instance != 0; j++)
    if (j != i && u->subs[j].s != NULL && u->subs[j].instance == instance) {
      *dup = 1;
      return 0;
    }
  if ((rc = check_table(s, i, &ti, err, errlen)) != 0)
    return rc;
  if ((rc = chime_stream_open(&sb->s, m->client, s->table, &s->opts)) != 0)
    return chime__fail(err, errlen, rc, "shard %s: %s", m->addr,
                       chime_last_error());
  sb->instance = instance;
  sb->ended = 0;
  sb->lent = 0;
  /* A server older than GetInfo's mass reports 0; a uniform table's mass
   * is its size either way. */
  sb->mass = u->prioritized ? ti.mass : (double)ti.size;
  sb->size = (double)ti.size;
  sb->mass_ms = asked;
  sb->blocked = 0;
  /* Every batch of the new sub-stream is drawn after that lookup. */
  sb->taken = sb->fresh_after = 0;
  const char *fb = chime_stream_fallback_reason(sb->s);
  if (fb != NULL && !u->has_fallback) {
    snprintf(u->fallback, sizeof(u->fallback), "shard %.200s: %s", m->addr, fb);
    u->has_fallback = 1;
  }
  return 0;
}

/* Gives up sub-stream i's GetInfo in flight (cancelled, collected). */
static void info_drop(sub_t *sb) {
  if (sb->info_busy)
    chime__rpc_reset(&sb->info);
  sb->info_busy = 0;
}

static void close_sub(chime_stream_t *s, uint32_t i) {
  chime__union_t *u = s->uni;
  sub_t *sb = &u->subs[i];
  if (sb->s == NULL)
    return;
  chime_stream_local_stats_t st;
  if (chime_stream_get_stats(sb->s, &st) == 0) {
    u->closed_received += st.received_bytes;
    u->closed_credits += st.credits;
    u->closed_wait_ns += st.consumer_wait_ns;
  }
  info_drop(sb);
  chime_stream_close(sb->s);
  sb->s = NULL;
  sb->ended = 0;
  sb->lent = 0;
  sb->mass = sb->size = 0;
  sb->mass_ms = 0;
  sb->blocked = 0;
  sb->instance = 0;
}

/* Sub-stream i ended (its server gone, shutting down, or broke the
 * protocol; rc and the calling thread's detail say which): no more of its
 * batches are drawn, and it is closed once the learner gave back the ones
 * it holds (they stay readable until then). The target is resolved again:
 * its server may have moved. */
static void sub_end(chime_stream_t *s, uint32_t i, int rc) {
  chime__union_t *u = s->uni;
  sub_t *sb = &u->subs[i];
  u->last_end = rc;
  snprintf(u->end_why, sizeof(u->end_why), "shard %.200s: %s", addr_of(u, i),
           chime_last_error());
  sb->ended = 1;
  sb->retry_ms = chime__now_ms() + REOPEN_EVERY_MS;
  if (u->chosen == (int)i)
    u->chosen = -1;
  if (sb->lent == 0)
    close_sub(s, i);
  chime__shards_refresh(u->set, 1);
}

static int ended_code(int rc) {
  return rc == CHIME_EDISCONNECTED || rc == CHIME_ESHUTDOWN ||
         rc == CHIME_EPROTO;
}

/* --- masses --- */

static void info_start(chime__union_t *u, uint32_t i) {
  sub_t *sb = &u->subs[i];
  if (!sb->info_made) {
    if (chime__rpc_init(&sb->info) != 0) {
      chime__rpc_destroy(&sb->info);
      return;
    }
    sb->info_made = 1;
  }
  Chime__V1__GetInfoRequest req = CHIME__V1__GET_INFO_REQUEST__INIT;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (bb == NULL)
    return;
  chime_client_t *c = chime__shards_at(u->set, i)->client;
  sb->info_sent_ms = chime__now_ms();
  sb->info_busy = 1;
  if (chime__rpc_start(&sb->info, c, CHIME__M_GETINFO,
                       chime__deadline_ms(c->timeout_ms), CHIME__RPC_LAST,
                       bb) != 0 ||
      chime__rpc_recv(&sb->info) != 0)
    info_drop(sb);
}

/* Takes sub-stream i's GetInfo answer if it came: its table's mass, unless
 * a batch told a newer one meanwhile. */
static void info_poll(chime_stream_t *s, uint32_t i) {
  chime__union_t *u = s->uni;
  sub_t *sb = &u->subs[i];
  while (chime__rpc_busy(&sb->info)) {
    chime__rpc_op_t op;
    int ok;
    if (chime__rpc_next(&sb->info, gpr_inf_past(GPR_CLOCK_MONOTONIC), &op,
                        &ok) == CHIME_ETIMEDOUT)
      return;
  }
  if (chime__rpc_result(&sb->info, NULL, 0) == 0 && sb->info.recv_bb) {
    Chime__V1__GetInfoResponse *r = (Chime__V1__GetInfoResponse *)chime__unpack(
        &chime__v1__get_info_response__descriptor, sb->info.recv_bb);
    for (size_t t = 0; r != NULL && t < r->n_tables; t++) {
      const Chime__V1__TableInfo *ti = r->tables[t];
      if (ti->name == NULL || strcmp(ti->name, s->table) != 0)
        continue;
      if (sb->info_sent_ms >= sb->mass_ms && ti->mass >= 0) {
        sb->mass = u->prioritized ? ti->mass : (double)ti->size;
        sb->size = (double)ti->size;
        sb->mass_ms = sb->info_sent_ms;
        sb->fresh_after = sb->taken + STALE_BATCHES(s->opts.slots);
      }
      sb->blocked = ti->sample_blocked;
      break;
    }
    if (r != NULL)
      protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  sb->info_busy = 0;
  chime__rpc_reset(&sb->info);
}

/* A batch's first item tells its shard's mass when it was drawn: weight /
 * probability (and its table size), unless it may have been drawn before
 * the last GetInfo answer (prefetched: a shard drawn rarely hands out
 * batches sampled long ago). */
static void learn_mass(chime__union_t *u, sub_t *sb,
                       const chime_sample_info_t *first) {
  if (++sb->taken <= sb->fresh_after || !(first->probability > 0))
    return;
  double w = u->prioritized ? pow(first->priority, u->exponent) : 1.0;
  sb->mass = w / first->probability;
  sb->size = (double)first->table_size;
  sb->mass_ms = chime__now_ms();
}

/* Opens sub-streams for members that have none: new ones (a dns: target
 * resolved to more addresses) and those whose stream ended, once their
 * channel is ready again. force: now, whatever retry_ms says. */
static void reopen(chime_stream_t *s, int64_t now, int force) {
  chime__union_t *u = s->uni;
  chime__shards_refresh(u->set, force);
  u->nsubs = chime__shards_count(u->set);
  for (uint32_t i = 0; i < u->nsubs; i++) {
    sub_t *sb = &u->subs[i];
    chime__member_t *m = chime__shards_at(u->set, i);
    if (sb->s != NULL || atomic_load(&m->gone) ||
        (!force && now < sb->retry_ms) || !channel_ready(m->client))
      continue;
    char why[CHIME__ERRLEN];
    int dup;
    if (open_sub(s, i, &dup, why, sizeof(why)) != 0 || dup)
      sb->retry_ms = now + REOPEN_EVERY_MS;
  }
}

/* next()'s bookkeeping: GetInfo answers taken, masses asked for, shards
 * without a sub-stream looked at, every INFO_EVERY_MS (force: now). */
static void refresh(chime_stream_t *s, int force) {
  chime__union_t *u = s->uni;
  for (uint32_t i = 0; i < u->nsubs; i++)
    if (u->subs[i].info_busy)
      info_poll(s, i);
  int64_t now = chime__now_ms();
  if (!force && now - u->info_ms < INFO_EVERY_MS)
    return;
  u->info_ms = now;
  for (uint32_t i = 0; i < u->nsubs && u->weighed; i++)
    if (live(&u->subs[i]) && !u->subs[i].info_busy)
      info_start(u, i);
  reopen(s, now, force);
}

/* --- next --- */

/* What shard sb weighs in a draw: its mass (or its size, by_size), 0 while
 * it holds fewer than min_size items: its sampler waits then, and a draw
 * that chose it would hold the learner back while other shards could
 * deliver. So does a shard whose rate limiter blocks, unless all_blocked
 * (every shard's does: the learner waits for one, as on one table). */
static double weight_of(const chime__union_t *u, const sub_t *sb, int by_size,
                        int all_blocked) {
  if (!live(sb) || sb->size < u->min_size || (sb->blocked && !all_blocked))
    return 0;
  return by_size ? sb->size : sb->mass;
}

/* Whether some shard other than `but` can deliver: live, with weight, and
 * its rate limiter open. */
static int other_open(const chime__union_t *u, uint32_t but) {
  for (uint32_t i = 0; i < u->nsubs; i++)
    if (i != but && (weight_of(u, &u->subs[i], 0, 0) > 0 ||
                     weight_of(u, &u->subs[i], 1, 0) > 0))
      return 1;
  return 0;
}

/* Draws the shard of the next batch, by mass (by size while no shard has
 * mass), among the shards whose rate limiter is open (among all while
 * none is). CHIME_ETIMEDOUT when none has either: nothing to draw from
 * yet. */
static int draw(chime__union_t *u) {
  double total = 0;
  int by_size = 0, all_blocked = 0;
  for (int pass = 0; pass < 4 && !(total > 0); pass++) {
    /* open shards by mass, by size; then every shard by mass, by size */
    by_size = pass % 2;
    all_blocked = pass / 2;
    total = 0;
    for (uint32_t i = 0; i < u->nsubs; i++)
      total += weight_of(u, &u->subs[i], by_size, all_blocked);
  }
  if (!(total > 0))
    return CHIME_ETIMEDOUT;
  double x = rand_unit(&u->rng) * total, acc = 0;
  int pick = -1;
  for (uint32_t i = 0; i < u->nsubs; i++) {
    double w = weight_of(u, &u->subs[i], by_size, all_blocked);
    if (!(w > 0))
      continue;
    pick = (int)i; /* the last with weight, should rounding leave x past */
    acc += w;
    if (x < acc)
      break;
  }
  u->chosen = pick;
  u->chosen_w = weight_of(u, &u->subs[pick], by_size, all_blocked);
  u->chosen_total = total;
  u->chosen_ms = chime__now_ms();
  u->by_size = by_size;
  u->all_blocked = all_blocked;
  return 0;
}

static int all_ended(chime_stream_t *s) {
  chime__union_t *u = s->uni;
  int rc = u->last_end ? u->last_end : CHIME_EUNAVAILABLE;
  return chime__detailf(rc,
                        "sharded stream on '%s': no shard's stream is open "
                        "(the last to end: %s)",
                        s->table, u->end_why[0] ? u->end_why : "none opened");
}

static int timed_out(chime_stream_t *s, int timeout_ms) {
  return chime__detailf(CHIME_ETIMEDOUT,
                        "sharded stream on '%s': no batch within %d ms",
                        s->table, timeout_ms);
}

static int64_t left_ms(int64_t end) {
  if (end < 0)
    return INT64_MAX;
  int64_t left = end - chime__now_ms();
  return left > 0 ? left : 0;
}

static int slice(int64_t left, int most) {
  return left < most ? (int)left : most;
}

/* Weighed: the drawn shard's next batch, waited for in slices so that
 * masses keep coming in; a drawn shard that ends, or whose table emptied,
 * is drawn again. */
static int next_weighed(chime_stream_t *s, chime_batch_t *out, uint32_t *at,
                        int64_t end, int timeout_ms) {
  chime__union_t *u = s->uni;
  for (;;) {
    /* A drawn shard that ended is drawn again; so is one whose rate
     * limiter blocks while another shard's is open: its batch may never
     * come (its writers done, and the others' waiting for samples). */
    if (u->chosen >= 0 &&
        (!live(&u->subs[u->chosen]) ||
         (u->subs[u->chosen].blocked && other_open(u, (uint32_t)u->chosen))))
      u->chosen = -1;
    if (u->chosen < 0 && draw(u) != 0) {
      if (!any_live(u)) {
        refresh(s, 1);
        if (!any_live(u))
          return all_ended(s);
        continue;
      }
      int64_t left = left_ms(end);
      if (left == 0)
        return timed_out(s, timeout_ms);
      struct timespec ts = {0, (long)slice(left, EMPTY_SLICE_MS) * 1000000L};
      uint64_t t0 = chime__now_ns();
      nanosleep(&ts, NULL);
      u->closed_wait_ns += chime__now_ns() - t0;
      refresh(s, 0);
      continue;
    }
    uint32_t i = (uint32_t)u->chosen;
    sub_t *sb = &u->subs[i];
    int rc = chime_stream_next(sb->s, out, slice(left_ms(end), INFO_EVERY_MS));
    if (rc == 0) {
      *at = i;
      return 0;
    }
    if (ended_code(rc)) {
      sub_end(s, i, rc);
      continue;
    }
    if (rc != CHIME_ETIMEDOUT)
      return rc;
    if (left_ms(end) == 0)
      return timed_out(s, timeout_ms);
    refresh(s, 0);
    /* Its table emptied (below min_size) since the draw: it cannot
     * deliver. */
    if (sb->mass_ms > u->chosen_ms &&
        !(weight_of(u, sb, u->by_size, u->all_blocked) > 0))
      u->chosen = -1;
  }
}

/* Merging: the first sub-stream with a batch ready, looking from after the
 * last one that delivered; else waits on each in turn for a short slice. */
static int next_merged(chime_stream_t *s, chime_batch_t *out, uint32_t *at,
                       int64_t end, int timeout_ms) {
  chime__union_t *u = s->uni;
  for (;;) {
    uint32_t n = u->nsubs;
    int any = 0;
    for (uint32_t k = 0; k < n; k++) {
      uint32_t i = (u->rr + k) % n;
      if (!live(&u->subs[i]))
        continue;
      any = 1;
      int rc = chime__stream_take(u->subs[i].s, out, 0);
      if (rc == 0) {
        u->rr = i + 1;
        *at = i;
        return 0;
      }
      if (ended_code(rc))
        sub_end(s, i, rc);
      else if (rc != CHIME_ETIMEDOUT)
        return rc;
    }
    if (!any) {
      refresh(s, 1);
      if (!any_live(u))
        return all_ended(s);
      continue;
    }
    int64_t left = left_ms(end);
    if (left == 0)
      return timed_out(s, timeout_ms);
    for (uint32_t k = 0; k < n; k++) {
      uint32_t i = (u->wait_at + k) % n;
      if (!live(&u->subs[i]))
        continue;
      u->wait_at = i + 1;
      int rc =
          chime__stream_take(u->subs[i].s, out, slice(left, MERGE_SLICE_MS));
      if (rc == 0) {
        u->rr = i + 1;
        *at = i;
        return 0;
      }
      if (ended_code(rc))
        sub_end(s, i, rc);
      else if (rc != CHIME_ETIMEDOUT)
        return rc;
      break;
    }
    refresh(s, 0);
  }
}

/* Lends the batch sub-stream i gave (in out) as the union's. */
static void lend(chime_stream_t *s, uint32_t i, chime_batch_t *out) {
  chime__union_t *u = s->uni;
  sub_t *sb = &u->subs[i];
  lent_t *e = NULL;
  for (uint32_t k = 0; k < s->opts.slots - 1 && e == NULL; k++)
    if (!u->lent[k].used)
      e = &u->lent[k];
  /* next() refused at slots - 1 held: there is always one free. */
  e->used = 1;
  e->sub = i;
  e->inner_seq = out->seq;
  e->inner_info = out->info;
  e->seq = u->seq++;
  out->seq = e->seq;
  if (u->weighed) {
    /* The union probability: the shard's times the draw's chance of the
     * shard, the very m_i / M drawn with, so importance weights are exact
     * whatever the masses' age. The ring's info is read-only (shm): a
     * copy, 64 bytes per sample. */
    double share = u->chosen_w / u->chosen_total;
    memcpy(e->copy, out->info, (size_t)out->count * sizeof(*e->copy));
    for (uint32_t j = 0; j < out->count; j++)
      e->copy[j].probability *= share;
    if (out->count > 0)
      learn_mass(u, sb, &out->info[0]);
    out->info = e->copy;
    u->chosen = -1;
  }
  u->nlent++;
  if (u->nlent > u->max_lent)
    u->max_lent = u->nlent;
  sb->lent++;
  u->batches++;
  for (uint32_t l = 0; l < out->nleaves; l++)
    u->bytes += out->leaf[l].bytes;
}

int chime__union_next(chime_stream_t *s, chime_batch_t *out, int timeout_ms) {
  chime__union_t *u = s->uni;
  if (u->nlent >= s->opts.slots - 1)
    return chime__detailf(CHIME_EBUSY,
                          "sharded stream on '%s': %" PRIu32
                          " batches held, all a stream of %" PRIu32
                          " slots lends: release one first",
                          s->table, u->nlent, s->opts.slots);
  int64_t end = timeout_ms < 0 ? -1 : chime__now_ms() + timeout_ms;
  uint32_t at = 0;
  refresh(s, 0);
  int rc = u->weighed ? next_weighed(s, out, &at, end, timeout_ms)
                      : next_merged(s, out, &at, end, timeout_ms);
  if (rc)
    return rc;
  lend(s, at, out);
  return 0;
}

int chime__union_release(chime_stream_t *s, const chime_batch_t *batch) {
  chime__union_t *u = s->uni;
  lent_t *e = NULL;
  for (uint32_t k = 0; k < s->opts.slots - 1 && e == NULL; k++) {
    lent_t *c = &u->lent[k];
    if (c->used && c->seq == batch->seq &&
        (u->weighed ? c->copy : c->inner_info) == batch->info)
      e = c;
  }
  if (e == NULL)
    return chime__detailf(CHIME_EINVAL,
                          "sharded stream on '%s': batch %" PRIu64
                          " is not lent by this stream now (given back "
                          "already, or not from its next())",
                          s->table, batch->seq);
  sub_t *sb = &u->subs[e->sub];
  chime_batch_t inner;
  inner.seq = e->inner_seq;
  inner.info = e->inner_info;
  int rc = chime_stream_release(sb->s, &inner);
  /* An ended sub-stream's batch is given back all the same: its ring
   * goes with the sub-stream. */
  if (rc != 0 && !sb->ended)
    return rc;
  e->used = 0;
  u->nlent--;
  sb->lent--;
  if (sb->ended && sb->lent == 0)
    close_sub(s, e->sub);
  return 0;
}

chime_mode_t chime__union_mode(const chime_stream_t *s) {
  const chime__union_t *u = s->uni;
  chime_mode_t mode = CHIME_MODE_AUTO;
  int first = 1;
  for (uint32_t i = 0; i < u->nsubs; i++) {
    if (u->subs[i].s == NULL)
      continue;
    chime_mode_t m = chime_stream_mode(u->subs[i].s);
    if (!first && m != mode)
      return CHIME_MODE_AUTO;
    mode = m;
    first = 0;
  }
  return mode;
}

const char *chime__union_fallback_reason(const chime_stream_t *s) {
  return s->uni->has_fallback ? s->uni->fallback : NULL;
}

int chime__union_stats(const chime_stream_t *s,
                       chime_stream_local_stats_t *out) {
  const chime__union_t *u = s->uni;
  memset(out, 0, sizeof(*out));
  out->mode = chime__union_mode(s);
  out->batches = u->batches;
  out->bytes = u->bytes;
  out->leases = u->nlent;
  out->max_leases = u->max_lent;
  out->received_bytes = u->closed_received;
  out->credits = u->closed_credits;
  out->consumer_wait_ns = u->closed_wait_ns;
  for (uint32_t i = 0; i < u->nsubs; i++) {
    chime_stream_local_stats_t st;
    if (u->subs[i].s == NULL || chime_stream_get_stats(u->subs[i].s, &st))
      continue;
    out->received_bytes += st.received_bytes;
    out->credits += st.credits;
    out->consumer_wait_ns += st.consumer_wait_ns;
    out->pinned_bytes += st.pinned_bytes;
  }
  return 0;
}

void chime__union_close(chime_stream_t *s) {
  chime__union_t *u = s->uni;
  if (u == NULL)
    return;
  /* A child of fork() touches no gRPC object of the parent's (fork.h); the
   * sub-streams see to their own. */
  int child = s->fork_gen != chime__fork_gen();
  for (uint32_t i = 0; i < u->nsubs; i++) {
    sub_t *sb = &u->subs[i];
    if (sb->info_made && !child)
      chime__rpc_destroy(&sb->info);
    chime_stream_close(sb->s);
  }
  for (uint32_t k = 0; u->lent != NULL && k < s->opts.slots - 1; k++)
    free(u->lent[k].copy);
  free(u->lent);
  free(u);
  s->uni = NULL;
}

int chime__union_open(chime_stream_t *s, char *err, size_t errlen) {
  chime__union_t *u = calloc(1, sizeof(*u));
  if (u == NULL)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  s->uni = u;
  u->set = s->client->set;
  u->chosen = -1;
  if (getrandom(&u->rng, sizeof(u->rng), 0) != (ssize_t)sizeof(u->rng))
    u->rng = (uint64_t)chime__now_ns() ^ (uint64_t)getpid();
  int rc = 0, opened = 0;
  char first[CHIME__ERRLEN] = "";
  int first_rc = 0;
  u->lent = calloc(s->opts.slots - 1, sizeof(*u->lent));
  if (u->lent == NULL) {
    rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  chime__shards_refresh(u->set, 0);
  u->nsubs = chime__shards_count(u->set);
  u->info_ms = chime__now_ms();
  for (uint32_t i = 0; i < u->nsubs; i++) {
    sub_t *sb = &u->subs[i];
    char why[CHIME__ERRLEN];
    int dup;
    if (atomic_load(&chime__shards_at(u->set, i)->gone))
      continue;
    rc = open_sub(s, i, &dup, why, sizeof(why));
    if (rc == 0) {
      opened += !dup;
      continue;
    }
    /* A shard that cannot be reached now may be later; one that answers
     * and refuses is a mistake to report now. */
    if (rc != CHIME_EUNAVAILABLE && rc != CHIME_EDISCONNECTED &&
        rc != CHIME_ETIMEDOUT) {
      chime__fail(err, errlen, rc, "%s", why);
      goto cleanup;
    }
    if (first_rc == 0) {
      first_rc = rc;
      snprintf(first, sizeof(first), "%s", why);
    }
    sb->retry_ms = u->info_ms + REOPEN_EVERY_MS;
    rc = 0;
  }
  if (opened == 0) {
    rc = first_rc ? first_rc : CHIME_EUNAVAILABLE;
    chime__fail(err, errlen, rc,
                "sharded stream on '%s': no shard could be opened (%s)",
                s->table, first[0] ? first : "the target names none now");
    goto cleanup;
  }
  if (u->weighed)
    for (uint32_t k = 0; k < s->opts.slots - 1; k++)
      if ((u->lent[k].copy = calloc(s->opts.batch_size,
                                    sizeof(chime_sample_info_t))) == NULL) {
        rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
        goto cleanup;
      }

cleanup:
  if (rc)
    chime__union_close(s);
  return rc;
}
