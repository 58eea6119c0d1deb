/* A sharded client's writer and its shard: binding and failover
 * (writer_shard.h). */
#include <stdio.h>
#include <string.h>

#include "client/writer_shard.h"
#include "client/writer_zip.h"
#include "common/spec.h"

static int shard_down(int rc) {
  return rc == CHIME_EUNAVAILABLE || rc == CHIME_EDISCONNECTED ||
         rc == CHIME_ETIMEDOUT;
}

/* The table as a writer copies its samples: a sequence table's steps. */
static const chime_spec_t *written_spec(const chime_table_info_t *ti) {
  return ti->sequence_length ? &ti->step_spec : &ti->spec;
}

/* Whether the shard's table (ti) compresses every leaf the writer sends
 * stored (its requests in flight carry them so) and no other. */
static int stores_alike(const chime_writer_t *w, const chime_table_info_t *ti) {
  chime_table_info_t mine = *ti;
  if (w->nz == 0)
    return 1;
  if (chime_writer_compress(w, mine.compress, sizeof(mine.compress)) != 0)
    return 0;
  return chime__writer_zip_alike(&mine, ti);
}

/* The sentence for shard `addr` whose table differs from the writer's. */
static int differs(const char *addr, const char *table, char *err,
                   size_t errlen) {
  return chime__fail(err, errlen, CHIME_EINVAL,
                     "shard %s: table '%s' differs from the same table on "
                     "the other shards (spec or compressed leaves): a sharded "
                     "table must be "
                     "configured alike on every shard",
                     addr, table);
}

/* Every live shard but `member` and those found down (`down`) that answers
 * must hold the table with the spec of ti (the shard the writer bound
 * to): a writer checks its caller's samples against one spec, and a shard
 * configured otherwise is refused by name, as info() and stream() refuse
 * it. A shard whose GetInfo answered before (this client's streams and
 * writers ask it) is judged by that answer, with no call a hung server
 * could hold; one never seen is asked, and passed over if it does not
 * answer. */
static int check_alike(chime__shards_t *set, const char *table, uint32_t member,
                       const chime_table_info_t *ti, const uint8_t *down,
                       char *err, size_t errlen) {
  uint32_t n = chime__shards_count(set);
  for (uint32_t i = 0; i < n; i++) {
    chime__member_t *m = chime__shards_at(set, i);
    if (i == member || down[i] || atomic_load(&m->gone))
      continue;
    chime_table_info_t other;
    char why[CHIME__ERRLEN];
    uint32_t at;
    int rc = chime__conn_seen_table(m->client, table, &other);
    if (rc == CHIME_ENOTFOUND)
      snprintf(why, sizeof(why), "table '%s' not found", table);
    else if (rc)
      rc =
          chime__table_lookup(m->client, table, &other, NULL, why, sizeof(why));
    if (shard_down(rc))
      continue;
    if (rc)
      return chime__fail(err, errlen, rc, "shard %s: %s", m->addr, why);
    if (!other.sequence_length != !ti->sequence_length ||
        chime__spec_diff(written_spec(&other), written_spec(ti), &at) !=
            CHIME__SPEC_SAME ||
        !chime__writer_zip_alike(&other, ti))
      return differs(m->addr, table, err, errlen);
  }
  return 0;
}

/* Binds to a shard of set (chime__shards_pick: the live one with the
 * fewest of this client's writers, whose count it keeps; never a second
 * address of one server) that answers and has the table (in ti), never
 * `skip` (UINT32_MAX: none, a new writer's binding, which also checks
 * that the other shards that answer hold the table alike). A shard that
 * answers without the table fails it (the shards must be configured
 * alike); one that cannot be reached is passed over for the next. */
int chime__writer_bind_shard(chime__shards_t *set, const char *table,
                             uint32_t skip, uint32_t *member,
                             chime_table_info_t *ti, char *err, size_t errlen) {
  uint8_t tried[CHIME__MAX_SHARDS] = {0}, down[CHIME__MAX_SHARDS] = {0};
  uint32_t i;
  int rc, last = CHIME_EUNAVAILABLE, any = 0;
  if (skip != UINT32_MAX)
    tried[skip] = 1;
  while ((rc = chime__shards_pick(set, tried, &i, any ? NULL : err,
                                  any ? 0 : errlen)) == 0) {
    chime__member_t *m = chime__shards_at(set, i);
    char why[CHIME__ERRLEN];
    tried[i] = 1;
    if (chime__shards_duplicate(set, i)) {
      /* A server named twice counts once, under its first address. */
      chime__shards_unpick(set, i);
      down[i] = 1; /* not another shard to compare with either */
      continue;
    }
    any = 1;
    rc = chime__table_lookup(m->client, table, ti, NULL, why, sizeof(why));
    if (rc == 0 && skip == UINT32_MAX)
      rc = check_alike(set, table, i, ti, down, why, sizeof(why));
    if (rc == 0) {
      *member = i;
      return 0;
    }
    chime__shards_unpick(set, i);
    if (rc == CHIME_EINVAL) /* another shard's table differs: named */
      return chime__fail(err, errlen, rc, "%s", why);
    last = chime__fail(err, errlen, rc, "shard %s: %s", m->addr, why);
    if (!shard_down(rc))
      return rc;
    down[i] = 1;
  }
  /* The last shard's failure when some were tried, else the pick's. */
  return any ? last : rc;
}

/* To a shard that never saw it the writer is a new writer: a fresh
 * writer_id, and its unacked requests numbered again from 1 in their
 * order. Resent under the old id and numbers, a request past the first
 * would be refused (CHIME_EFORGOTTEN) by a table that has ever forgotten
 * a writer or was restored (docs/protocol.md, Exactly once across
 * reconnects). */
static int renumber(chime_writer_t *w) {
  uint64_t id = chime__writer_new_id();
  for (uint32_t i = 0; i < w->inflight; i++) {
    struct inflight_s *f = fl_at(w, i);
    Chime__V1__InsertRequest *req = (Chime__V1__InsertRequest *)chime__unpack(
        &chime__v1__insert_request__descriptor, f->bb);
    if (!req)
      return CHIME_ENOMEM; /* our own bytes: only memory can fail */
    req->writer_id = id;
    req->id = i + 1;
    grpc_byte_buffer *bb = chime__pack(&req->base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (!bb)
      return CHIME_ENOMEM;
    chime__bb_free(f->bb);
    f->bb = bb;
  }
  w->writer_id = id;
  w->acked_id = 1;
  w->next_id = (uint64_t)w->inflight + 1;
  return 0;
}

/* Failover: the writer's shard stayed unreachable past the reconnect
 * timeout. The target is resolved again and the writer moves to the live
 * shard with the fewest of this client's writers that has the same table,
 * where every unacked request is sent again (on a new call, by reconnect),
 * as a new writer's: at least once, since the dead shard may have inserted
 * some of them before it went (docs/scaling.md, Writers and shards). */
int chime__writer_move_shard(chime_writer_t *w) {
  chime__shards_refresh(w->set, 1);
  uint32_t to, at;
  chime_table_info_t ti;
  char why[CHIME__ERRLEN];
  int rc = chime__writer_bind_shard(w->set, w->table, w->member, &to, &ti, why,
                                    sizeof(why));
  if (rc == 0 &&
      (!ti.sequence_length != !w->sequence ||
       chime__spec_diff(written_spec(&ti), &w->spec, &at) != CHIME__SPEC_SAME ||
       !stores_alike(w, &ti))) {
    chime__shards_unpick(w->set, to);
    rc =
        differs(chime__shards_at(w->set, to)->addr, w->table, why, sizeof(why));
  }
  if (rc == CHIME_EINVAL || rc == CHIME_ENOTFOUND) {
    /* A shard configured otherwise: said, never written to at another
     * spec, and not passed over as if it were down. */
    snprintf(w->err, sizeof(w->err), "insert into '%s': %.900s", w->table, why);
    return fail(w, rc);
  }
  if (rc)
    return CHIME_EUNAVAILABLE;
  /* The call on the dead shard is still waiting for its channel (a
   * resumed call waits for ready): cancelling it is no failure. */
  w->dropping = 1;
  chime__writer_drop_call(w);
  w->dropping = 0;
  chime__rpc_reset(&w->rpc);
  if (!w->failed && w->writer_id && renumber(w)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': out of memory",
             w->table);
    fail(w, CHIME_ENOMEM);
  }
  if (w->failed) {
    chime__shards_unpick(w->set, to);
    return w->failed;
  }
  chime__shards_unpick(w->set, w->member);
  w->member = to;
  w->client = chime__shards_at(w->set, to)->client;
  chime__writer_chan_drop(w); /* a connection to the dead shard */
  w->fresh = 0;
  w->moves++;
  /* The new shard issues keys of its own numbering. */
  w->min_key = 1;
  w->reconnect_deadline = chime__now_ms() + w->reconnect_timeout_ms;
  w->broken = 1;
  return 0;
}
