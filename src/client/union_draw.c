/* A sharded client's next() and release(): which shard each batch comes
 * from (for a weighed table drawn by mass, else merged as sub-streams
 * deliver), the union probabilities written into the batch's info, and
 * the lending and giving back of batches (union_draw.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/union_draw.h"
#include "client/union_sub.h"

/* Merging: how long one sub-stream's ring is waited on before the others
 * are looked at again (nothing is ready anywhere, the learner waits). */
#define MERGE_SLICE_MS 2
/* Weighed, while no shard has mass: how long to sleep between looks at the
 * masses that GetInfo brings. */
#define EMPTY_SLICE_MS 5

/* splitmix64: the draws need only to be independent of the data. */
static double rand_unit(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

/* A batch's first item tells its shard's mass when it was drawn: weight /
 * probability (and its table size), unless it may have been drawn before
 * the last GetInfo answer (prefetched: a shard drawn rarely hands out
 * batches sampled long ago). The weight is the sampler's: priority^a,
 * over staleness + 1 when the table weighs staleness (its staleness when
 * drawn, which the item's info holds). */
static void learn_mass(chime__union_t *u, sub_t *sb,
                       const chime_sample_info_t *first) {
  if (++sb->taken <= sb->fresh_after || !(first->probability > 0))
    return;
  double w = u->prioritized ? pow(first->priority, u->exponent) : 1.0;
  if (u->stale_inverse)
    w /= (double)first->staleness + 1.0;
  sb->mass = w / first->probability;
  sb->size = (double)first->table_size;
  sb->mass_ms = chime__now_ms();
}

/* --- next --- */

/* What shard sb weighs in a draw: its mass (or its size, by_size), 0 while
 * it holds fewer than min_size items: its sampler waits then, and a draw
 * that chose it would hold the learner back while other shards could
 * deliver. So does a shard whose rate limiter blocks, unless all_blocked
 * (every shard's does: the learner waits for one, as on one table). */
static double weight_of(const chime__union_t *u, const sub_t *sb, int by_size,
                        int all_blocked) {
  if (!live(sb) || sb->aside || sb->size < u->min_size ||
      (sb->blocked && !all_blocked))
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

/* Sets the drawn shard i aside when it has delivered nothing since the
 * draw and answered no GetInfo for ASIDE_MS: a hung server (stopped, or
 * cut off without a reset) that would hold the learner back for as long
 * as it hangs. Its mass leaves the draw, so the union's probabilities are
 * those of the shards that answer (docs/scaling.md); it is drawn again
 * once it answers. */
static int set_aside_if_hung(chime__union_t *u, uint32_t i) {
  sub_t *sb = &u->subs[i];
  int64_t now = chime__now_ms();
  if (now - u->chosen_ms < ASIDE_MS || now - sb->answer_ms < ASIDE_MS)
    return 0;
  sb->aside = 1;
  u->asides++;
  u->chosen = -1;
  return 1;
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
        chime__union_refresh(s, 1);
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
      chime__union_refresh(s, 0);
      continue;
    }
    uint32_t i = (uint32_t)u->chosen;
    sub_t *sb = &u->subs[i];
    int rc = chime__single_next(sb->s, out, slice(left_ms(end), INFO_EVERY_MS));
    if (rc == 0) {
      *at = i;
      return 0;
    }
    if (ended_code(rc)) {
      chime__union_sub_end(s, i, rc);
      continue;
    }
    if (rc != CHIME_ETIMEDOUT)
      return rc;
    chime__union_refresh(s, 0);
    if (set_aside_if_hung(u, i))
      continue; /* drawn again among the others, in this wait */
    if (left_ms(end) == 0)
      return timed_out(s, timeout_ms);
    /* Its table emptied (below min_size) since the draw: it cannot
     * deliver. */
    if (sb->mass_ms > u->chosen_ms &&
        !(weight_of(u, sb, u->by_size, u->all_blocked) > 0))
      u->chosen = -1;
  }
}

/* Merging: a batch from sub-stream i within wait_ms (0: only one ready
 * now). 0 with *at = i; CHIME_ETIMEDOUT when it has none (an ended one is
 * ended here and answers so too); else the error. */
static int take_merged(chime_stream_t *s, uint32_t i, chime_batch_t *out,
                       uint32_t *at, int wait_ms) {
  chime__union_t *u = s->uni;
  int rc = chime__stream_take(u->subs[i].s, out, wait_ms);
  if (rc == 0) {
    u->rr = i + 1;
    *at = i;
    return 0;
  }
  if (ended_code(rc)) {
    chime__union_sub_end(s, i, rc);
    return CHIME_ETIMEDOUT;
  }
  return rc;
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
      int rc = take_merged(s, i, out, at, 0);
      if (rc != CHIME_ETIMEDOUT)
        return rc;
    }
    if (!any) {
      chime__union_refresh(s, 1);
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
      int rc = take_merged(s, i, out, at, slice(left, MERGE_SLICE_MS));
      if (rc != CHIME_ETIMEDOUT)
        return rc;
      break;
    }
    chime__union_refresh(s, 0);
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
     * copy, a record per sample, each copied and rewritten in one pass
     * (the ring's records are read once, cold as the batch is). A share
     * of 1 (one shard holds all the mass) leaves every probability as
     * the shard gave it: the ring's records then, as on one server. */
    double share = u->chosen_w / u->chosen_total;
    if (out->count > 0)
      learn_mass(u, sb, &out->info[0]);
    if (share != 1.0) {
      const chime_sample_info_t *in = out->info;
      chime_sample_info_t *cp = e->copy;
      for (uint32_t j = 0; j < out->count; j++) {
        cp[j] = in[j];
        cp[j].probability = in[j].probability * share;
      }
      out->info = cp;
    }
    u->chosen = -1;
  }
  e->out_info = out->info;
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
  chime__union_refresh(s, 0);
  int rc = u->weighed ? next_weighed(s, out, &at, end, timeout_ms)
                      : next_merged(s, out, &at, end, timeout_ms);
  if (rc)
    return rc;
  lend(s, at, out);
  return 0;
}

/* The lending of batch, or NULL with CHIME_EINVAL's detail set. */
static lent_t *lent_of(chime_stream_t *s, const chime_batch_t *batch) {
  chime__union_t *u = s->uni;
  for (uint32_t k = 0; k < s->opts.slots - 1; k++) {
    lent_t *c = &u->lent[k];
    if (c->used && c->seq == batch->seq && c->out_info == batch->info)
      return c;
  }
  chime__detailf(CHIME_EINVAL,
                 "sharded stream on '%s': batch %" PRIu64
                 " is not lent by this stream now (given back already, or "
                 "not from its next())",
                 s->table, batch->seq);
  return NULL;
}

/* The batch as its sub-stream lent it: its seq and info pointer, all the
 * sub-stream knows it by and reads (a chime_batch_t is some 7 KiB: not
 * cleared or copied whole on every release). */
static void inner_of(const lent_t *e, chime_batch_t *inner) {
  inner->seq = e->inner_seq;
  inner->info = e->inner_info;
}

int chime__union_wait(chime_stream_t *s, const chime_batch_t *batch,
                      void *cuda_stream) {
  lent_t *e = lent_of(s, batch);
  if (e == NULL)
    return CHIME_EINVAL;
  chime_batch_t inner;
  inner_of(e, &inner);
  return chime__single_wait(s->uni->subs[e->sub].s, &inner, cuda_stream);
}

int chime__union_release(chime_stream_t *s, const chime_batch_t *batch) {
  chime__union_t *u = s->uni;
  lent_t *e = lent_of(s, batch);
  if (e == NULL)
    return CHIME_EINVAL;
  sub_t *sb = &u->subs[e->sub];
  chime_batch_t inner;
  inner_of(e, &inner);
  int rc = chime__single_release(sb->s, &inner);
  /* An ended sub-stream's batch is given back all the same: its ring
   * goes with the sub-stream. */
  if (rc != 0 && !sb->ended)
    return rc;
  e->used = 0;
  u->nlent--;
  sb->lent--;
  if (sb->ended && sb->lent == 0)
    chime__union_close_sub(s, e->sub);
  return 0;
}
