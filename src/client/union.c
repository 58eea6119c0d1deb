/* A sharded client's stream, a sub-stream per shard read as one table
 * (union.h): its opening and closing, the learner's version passed to
 * every sub-stream, and what it reports (mode, fallback, stats). next()
 * and release() are union_draw.c's, the sub-streams union_sub.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "client/fork.h"
#include "client/union.h"
#include "client/union_sub.h"

chime_mode_t chime__union_mode(const chime_stream_t *s) {
  const chime__union_t *u = s->uni;
  chime_mode_t mode = CHIME_MODE_AUTO;
  int first = 1;
  for (uint32_t i = 0; i < u->nsubs; i++) {
    if (u->subs[i].s == NULL)
      continue;
    chime_mode_t m = chime__single_mode(u->subs[i].s);
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
  out->dropped_stale = u->closed_dropped;
  out->shard_asides = u->asides;
  for (uint32_t i = 0; i < u->nsubs; i++) {
    chime_stream_local_stats_t st;
    if (u->subs[i].s == NULL || chime__single_stats(u->subs[i].s, &st))
      continue;
    out->shards_aside += live(&u->subs[i]) && u->subs[i].aside;
    out->dropped_stale += st.dropped_stale;
    out->received_bytes += st.received_bytes;
    out->credits += st.credits;
    out->consumer_wait_ns += st.consumer_wait_ns;
    out->pinned_bytes += st.pinned_bytes;
    out->device_bytes += st.device_bytes;
    out->device_copies += st.device_copies;
    if (st.device_max_slots_held > out->device_max_slots_held)
      out->device_max_slots_held = st.device_max_slots_held;
    if (st.slots > out->slots)
      out->slots = st.slots;
    if (st.rtt_ns > out->rtt_ns)
      out->rtt_ns = st.rtt_ns;
    if (st.window_bytes > out->window_bytes)
      out->window_bytes = st.window_bytes;
  }
  return 0;
}

int chime__union_set_version(chime_stream_t *s, uint64_t version) {
  chime__union_t *u = s->uni;
  /* Each sub-stream reports it to its shard and drops its own batches
   * drawn before it, as a one-server stream does; a shard without one
   * now (down, or ended) gets it when its sub-stream opens again, at
   * open. An ended sub-stream's ECLOSED is next()'s to find. */
  if (version > s->opts.version)
    s->opts.version = version;
  for (uint32_t i = 0; i < u->nsubs; i++) {
    sub_t *sb = &u->subs[i];
    if (!live(sb))
      continue;
    int rc = chime__single_set_version(sb->s, s->opts.version);
    if (rc != 0 && rc != CHIME_ECLOSED)
      return rc;
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
    /* A shard set aside answers nothing: its close would only wait out
     * CLOSE_WAIT_MS (its items come back when it retires the cancelled
     * stream, once it runs again). */
    if (sb->s && sb->aside)
      sb->s->close_now = 1;
    chime__single_close(sb->s);
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
    rc = chime__union_open_sub(s, i, &dup, why, sizeof(why));
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
