/* A sharded client's sub-streams, one per shard, and the GetInfo calls that
 * bring the shards' masses (union_sub.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/fork.h"
#include "client/union_sub.h"
#include "common/spec.h"

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
    u->stale_inverse = strcmp(ti->staleness_weight, "inverse") == 0;
    u->min_size = (double)ti->min_size;
    u->spec = ti->spec;
    u->have_table = 1;
    return 0;
  }
  if (strcmp(u->sampler, ti->sampler) != 0 ||
      (u->prioritized && u->exponent != ti->priority_exponent) ||
      u->stale_inverse != (strcmp(ti->staleness_weight, "inverse") == 0) ||
      chime__spec_diff(&u->spec, &ti->spec, &at) != CHIME__SPEC_SAME)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "shard %s: table '%s' differs from the same table on "
                       "the other shards (spec, sampler, priority_exponent "
                       "or staleness_weight): a sharded table must be "
                       "configured alike on every shard",
                       addr_of(u, i), s->table);
  return 0;
}

/* Opens member i's sub-stream. *dup: the member is a server another
 * sub-stream reads already (one chimed under two addresses), and is left
 * alone. */
int chime__union_open_sub(chime_stream_t *s, uint32_t i, int *dup, char *err,
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
  /* The learner's options, its ready_bytes too. None by default: a limit
   * per shard made the learner wait for its drawn shard more than fresher
   * batches saved (docs/scaling.md). */
  chime_stream_opts_t o = s->opts;
  /* A shard whose connection is lost is the union's to re-open (here),
   * not its sub-stream's to resume: one policy per stream. */
  o.reconnect_timeout_ms = -1;
  if ((rc = chime__single_open(&sb->s, m->client, s->table, &o)) != 0)
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
  sb->answer_ms = asked;
  sb->aside = 0;
  sb->blocked = 0;
  /* Every batch of the new sub-stream is drawn after that lookup. */
  sb->taken = sb->fresh_after = 0;
  const char *fb = chime__single_fallback_reason(sb->s);
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

void chime__union_close_sub(chime_stream_t *s, uint32_t i) {
  chime__union_t *u = s->uni;
  sub_t *sb = &u->subs[i];
  if (sb->s == NULL)
    return;
  chime_stream_local_stats_t st;
  if (chime__single_stats(sb->s, &st) == 0) {
    u->closed_received += st.received_bytes;
    u->closed_credits += st.credits;
    u->closed_wait_ns += st.consumer_wait_ns;
    u->closed_dropped += st.dropped_stale;
  }
  info_drop(sb);
  chime__single_close(sb->s);
  sb->s = NULL;
  sb->ended = 0;
  sb->lent = 0;
  sb->mass = sb->size = 0;
  sb->mass_ms = 0;
  sb->blocked = 0;
  sb->aside = 0;
  sb->instance = 0;
}

/* Sub-stream i ended (its server gone, shutting down, or broke the
 * protocol; rc and the calling thread's detail say which): no more of its
 * batches are drawn, and it is closed once the learner gave back the ones
 * it holds (they stay readable until then). The target is resolved again:
 * its server may have moved. */
void chime__union_sub_end(chime_stream_t *s, uint32_t i, int rc) {
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
    chime__union_close_sub(s, i);
  chime__shards_refresh(u->set, 1);
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
    /* It answers: a shard set aside is drawn again. */
    sb->answer_ms = chime__now_ms();
    sb->aside = 0;
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
    if (chime__union_open_sub(s, i, &dup, why, sizeof(why)) != 0 || dup)
      sb->retry_ms = now + REOPEN_EVERY_MS;
  }
}

/* next()'s bookkeeping: GetInfo answers taken, masses asked for, shards
 * without a sub-stream looked at, every INFO_EVERY_MS (force: now). */
void chime__union_refresh(chime_stream_t *s, int force) {
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
