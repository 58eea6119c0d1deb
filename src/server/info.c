/* GetInfo and Stats (unary): snapshots taken under the server lock from
 * counters that are cheap to read, so polling every second costs nothing. */
#include <stdlib.h>
#include <string.h>

#include "server/info.h"
#include "server/stream.h"
#include "wire/leaf.h"

typedef struct {
  Chime__V1__TableInfo info;
  Chime__V1__Leaf leaves[CHIME_MAX_LEAVES];
  Chime__V1__Leaf *lp[CHIME_MAX_LEAVES];
  char text[4096];
  Chime__V1__Leaf sleaves[CHIME_MAX_LEAVES]; /* a sequence table's step */
  Chime__V1__Leaf *slp[CHIME_MAX_LEAVES];
  char stext[4096];
  char compress[4096];
  Chime__V1__LeafBytes lb[CHIME_MAX_LEAVES];
  Chime__V1__LeafBytes *lbp[CHIME_MAX_LEAVES];
} table_msg_t;

/* A table's compressed leaves, each its LeafBytes (lb and lbp have room
 * for CHIME_MAX_LEAVES; the names point into spec): how many. */
static size_t leaf_bytes_msgs(const chime__table_stats_t *st,
                              const chime_spec_t *spec,
                              Chime__V1__LeafBytes *lb,
                              Chime__V1__LeafBytes **lbp) {
  for (uint32_t k = 0; k < st->nzleaves; k++) {
    Chime__V1__LeafBytes init = CHIME__V1__LEAF_BYTES__INIT;
    lb[k] = init;
    lb[k].leaf = (char *)spec->leaves[st->zleaf[k].leaf].name;
    lb[k].raw_bytes = st->zleaf[k].raw_bytes;
    lb[k].stored_bytes = st->zleaf[k].stored_bytes;
    lb[k].stored_raw = st->zleaf[k].stored_raw;
    lb[k].level = st->zleaf[k].level;
    lbp[k] = &lb[k];
  }
  return st->nzleaves;
}

/* The requests carry nothing, but a call without one, or with bytes that do
 * not parse as the request message, is refused rather than answered as if
 * it had asked. */
static int need_request(chime__call_t *c, const ProtobufCMessageDescriptor *d) {
  ProtobufCMessage *m;
  grpc_byte_buffer *bb = chime__call_payload(c);
  if (bb == NULL) {
    chime__call_finish(c, CHIME_EINVAL, "missing request");
    return -1;
  }
  int rc = chime__msg_unpack(d, bb, &m);
  if (rc != 0) {
    chime__call_finish(c, CHIME_EINVAL, "%s %s",
                       rc == CHIME_EPROTO ? "unreadable" : "malformed",
                       d->short_name);
    return -1;
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}

/* One message and one pointer a live stream, taken under the registry's
 * lock so that the count holds while they are filled; at least one each, since
 * calloc(0) may give NULL, which would read as out of memory. */
typedef struct {
  void *msgs;
  void **ptrs;
} per_stream_t;

static int alloc_per_stream(const chime_server_t *srv, size_t msg_size,
                            per_stream_t *ps) {
  uint32_t n = chime__registry_listed(&srv->streams);
  ps->msgs = calloc(n ? n : 1, msg_size);
  ps->ptrs = calloc(n ? n : 1, sizeof(*ps->ptrs));
  if (ps->msgs == NULL || ps->ptrs == NULL)
    return CHIME_ENOMEM;
  return 0;
}

/* The call's one answer. */
static void answer(chime__call_t *c, grpc_byte_buffer *bb) {
  chime__call_send(c, bb);
  chime__call_finish(c, CHIME_OK, "%s", "");
}

/* A sequence table's part of its TableInfo: its steps' spec and the
 * windows it makes of them. */
static void sequence_info(table_msg_t *m, const chime__table_config_t *tc,
                          uint64_t step_bytes) {
  chime__leaf_msgs(&tc->spec, m->sleaves, m->slp);
  m->info.n_step_spec = tc->spec.nleaves;
  m->info.step_spec = m->slp;
  if (chime_spec_format(&tc->spec, m->stext, sizeof(m->stext)) != 0)
    m->stext[0] = '\0';
  m->info.step_spec_text = m->stext;
  m->info.step_bytes = step_bytes;
  m->info.capacity_steps = tc->capacity_steps;
  m->info.sequence_length = tc->sequence_length;
  m->info.stride = tc->stride;
  m->info.episode_end = tc->episode_pad ? "pad" : "drop";
  m->info.initial_priority_max = tc->initial_priority_max != 0;
  m->info.initial_priority = tc->initial_priority;
}

static void info_on_start(chime__call_t *c) {
  chime_server_t *srv = chime__call_server(c);
  table_msg_t *tm = NULL;
  Chime__V1__TableInfo **tp = NULL;
  Chime__V1__RingInfo *rings = NULL;
  Chime__V1__RingInfo **rp = NULL;
  if (need_request(c, &chime__v1__get_info_request__descriptor) != 0)
    return;
  Chime__V1__GetInfoResponse r = CHIME__V1__GET_INFO_RESPONSE__INIT;
  tm = calloc(srv->ntables, sizeof(*tm));
  tp = calloc(srv->ntables, sizeof(*tp));
  if (tm == NULL || tp == NULL)
    goto oom;
  r.version = (char *)CHIME_VERSION_STRING;
  r.boot_id = srv->boot_id;
  r.hostname = srv->hostname;
  r.shard = srv->cfg.shard;
  r.instance = srv->instance;
  r.pin_host_memory = srv->cfg.pin_host_memory != 0;
  for (uint32_t i = 0; i < srv->ntables; i++) {
    const chime__table_config_t *tc = chime__table_config(srv->tables[i]);
    chime__table_stats_t ts;
    chime__table_get_stats(srv->tables[i], &ts);
    Chime__V1__TableInfo init = CHIME__V1__TABLE_INFO__INIT;
    tm[i].info = init;
    tm[i].info.name = (char *)tc->name;
    /* What one item of a batch is: a sequence table's windows. */
    const chime_spec_t *is = chime__table_item_spec(srv->tables[i]);
    chime__leaf_msgs(is, tm[i].leaves, tm[i].lp);
    tm[i].info.n_spec = is->nleaves;
    tm[i].info.spec = tm[i].lp;
    if (chime_spec_format(is, tm[i].text, sizeof(tm[i].text)) != 0)
      tm[i].text[0] = '\0'; /* no truncated spec text */
    tm[i].info.spec_text = tm[i].text;
    if (tc->sequence_length > 0)
      sequence_info(&tm[i], tc, chime__table_sample_bytes(srv->tables[i]));
    tm[i].info.capacity = tc->capacity;
    tm[i].info.size = ts.size;
    tm[i].info.mass = ts.mass; /* the same snapshot as size */
    tm[i].info.sample_blocked = ts.sample_blocked != 0;
    tm[i].info.sampler = (char *)chime__selector_kind_name(tc->sampler);
    tm[i].info.remover = (char *)chime__selector_kind_name(tc->remover);
    tm[i].info.priority_exponent = tc->priority_exponent;
    tm[i].info.max_times_sampled = tc->max_times_sampled;
    tm[i].info.max_staleness = tc->max_staleness;
    tm[i].info.newest_version = ts.newest_version;
    tm[i].info.staleness_weight =
        tc->staleness_weight == CHIME__STALE_WEIGHT_INVERSE ? "inverse"
                                                            : "none";
    (void)chime__table_compress_text(tc, tm[i].compress,
                                     sizeof(tm[i].compress));
    tm[i].info.compress = tm[i].compress;
    tm[i].info.n_leaf_bytes = leaf_bytes_msgs(
        &ts, chime__table_item_spec(srv->tables[i]), tm[i].lb, tm[i].lbp);
    tm[i].info.leaf_bytes = tm[i].lbp;
    tm[i].info.data_dir = (char *)tc->data_dir;
    tm[i].info.disk_bytes = ts.disk_bytes;
    tm[i].info.pace_batch = tc->pace_batch;
    tm[i].info.version_leaf =
        tc->version_leaf != 0
            ? (char *)tc->spec.leaves[tc->version_leaf - 1].name
            : "";
    tm[i].info.samples_per_insert = tc->samples_per_insert;
    tm[i].info.error_buffer = tc->error_buffer;
    tm[i].info.min_size = tc->min_size;
    tm[i].info.sample_bytes = chime_spec_sample_bytes(is);
    tp[i] = &tm[i].info;
  }
  r.n_tables = srv->ntables;
  r.tables = tp;

  chime__registry_lock(&srv->streams);
  per_stream_t ps;
  int rc = alloc_per_stream(srv, sizeof(*rings), &ps);
  rings = ps.msgs;
  rp = (Chime__V1__RingInfo **)ps.ptrs;
  if (rc != 0) {
    chime__registry_unlock(&srv->streams);
    goto oom;
  }
  uint32_t n = 0;
  chime__registry_node_t *it;
  for (chime__stream_t *s = chime__registry_first(&srv->streams, &it);
       s != NULL; s = chime__registry_next(&it)) {
    Chime__V1__RingInfo init = CHIME__V1__RING_INFO__INIT;
    rings[n] = init;
    rings[n].stream_id = s->id;
    rings[n].table = s->table_name;
    rings[n].bytes = s->ring_bytes;
    rings[n].pinned = s->pinned_bytes > 0;
    rings[n].pinned_bytes = s->pinned_bytes;
    r.pinned_bytes += s->pinned_bytes;
    rp[n] = &rings[n];
    n++;
  }
  r.n_rings = n;
  r.rings = rp;
  /* Packed under the registry's lock: the strings point into live streams. */
  grpc_byte_buffer *bb = chime__msg_pack(&r.base);
  chime__registry_unlock(&srv->streams);
  answer(c, bb);
  goto out;
oom:
  chime__call_finish(c, CHIME_ENOMEM, "out of memory");
out:
  free(tm);
  free(tp);
  free(rings);
  free(rp);
}

/* The stats lists (chime/stats.h) as the server fills them: a
 * table's from its snapshot, a stream's and the server's from the structs
 * below. Each field goes to the message's field of the same name, which
 * must be of the same size. */
#define FIELD(type, name, kind, unit, help) type name;
#define TO_MSG(type, name, kind, unit, help)                                   \
  _Static_assert(sizeof(m->name) == sizeof(type), #name " differs on the "     \
                                                        "wire");               \
  m->name = st->name;

typedef struct {
  CHIME_STREAM_STATS_FIELDS(FIELD)
} stream_counts_t;

typedef struct {
  CHIME_SERVER_STATS_FIELDS(FIELD)
} server_counts_t;

static void table_to_msg(Chime__V1__TableStats *m,
                         const chime__table_stats_t *st) {
  CHIME_TABLE_STATS_FIELDS(TO_MSG)
}

static void stream_to_msg(Chime__V1__StreamStats *m,
                          const stream_counts_t *st) {
  CHIME_STREAM_STATS_FIELDS(TO_MSG)
}

static void server_to_msg(Chime__V1__StatsResponse *m,
                          const server_counts_t *st) {
  CHIME_SERVER_STATS_FIELDS(TO_MSG)
}

/* Under the registry's lock. */
static void stream_counts(chime__stream_t *s, stream_counts_t *out) {
  chime_ring_stats_t rs;
  memset(out, 0, sizeof(*out));
  chime_ring_stats(s->ring, &rs);
  s->ops->counts(s, &rs, &out->batches, &out->bytes);
  out->leases = rs.leases;
  out->max_leases = rs.max_leases;
  out->producer_wait_ns = rs.producer_wait_ns;
  out->consumer_wait_ns = rs.consumer_wait_ns;
  out->ring_bytes = s->ring_bytes;
  out->pinned = s->pinned_bytes > 0;
}

int chime__stats_snap(chime_server_t *srv, chime__stats_snap_t *snap) {
  Chime__V1__StatsResponse init = CHIME__V1__STATS_RESPONSE__INIT;
  server_counts_t server;
  memset(&server, 0, sizeof(server));
  memset(snap, 0, sizeof(*snap));
  snap->r = init;
  Chime__V1__StatsResponse *r = &snap->r;
  snap->ts = calloc(srv->ntables, sizeof(*snap->ts));
  snap->tp = calloc(srv->ntables, sizeof(*snap->tp));
  snap->lb = calloc((size_t)srv->ntables * CHIME_MAX_LEAVES, sizeof(*snap->lb));
  snap->lbp =
      calloc((size_t)srv->ntables * CHIME_MAX_LEAVES, sizeof(*snap->lbp));
  if (snap->ts == NULL || snap->tp == NULL || snap->lb == NULL ||
      snap->lbp == NULL)
    goto oom;
  for (uint32_t i = 0; i < srv->ntables; i++) {
    chime__table_stats_t st;
    Chime__V1__TableStats tinit = CHIME__V1__TABLE_STATS__INIT;
    Chime__V1__TableStats *t = &snap->ts[i];
    chime__table_get_stats(srv->tables[i], &st);
    *t = tinit;
    t->name = (char *)chime__table_config(srv->tables[i])->name;
    table_to_msg(t, &st);
    t->n_leaf_bytes =
        leaf_bytes_msgs(&st, chime__table_item_spec(srv->tables[i]),
                        snap->lb + (size_t)i * CHIME_MAX_LEAVES,
                        snap->lbp + (size_t)i * CHIME_MAX_LEAVES);
    t->leaf_bytes = snap->lbp + (size_t)i * CHIME_MAX_LEAVES;
    snap->tp[i] = t;
  }
  r->n_tables = srv->ntables;
  r->tables = snap->tp;
  pthread_mutex_lock(&srv->mu); /* checkpoint stats */
  chime__registry_lock(&srv->streams);
  per_stream_t ps;
  int rc = alloc_per_stream(srv, sizeof(*snap->ss), &ps);
  snap->ss = ps.msgs;
  snap->sp = (Chime__V1__StreamStats **)ps.ptrs;
  if (rc != 0) {
    chime__registry_unlock(&srv->streams);
    pthread_mutex_unlock(&srv->mu);
    goto oom;
  }
  uint32_t n = 0;
  chime__registry_node_t *it;
  for (chime__stream_t *s = chime__registry_first(&srv->streams, &it);
       s != NULL; s = chime__registry_next(&it)) {
    Chime__V1__StreamStats sinit = CHIME__V1__STREAM_STATS__INIT;
    Chime__V1__StreamStats *o = &snap->ss[n];
    stream_counts_t st;
    stream_counts(s, &st);
    *o = sinit;
    o->stream_id = s->id;
    o->table = s->table_name;
    o->mode = s->ops->wire;
    stream_to_msg(o, &st);
    server.pinned_bytes += s->pinned_bytes;
    snap->sp[n] = o;
    n++;
  }
  r->n_streams = n;
  r->streams = snap->sp;
  server.ring_bytes_total = chime__registry_ring_bytes(&srv->streams);
  chime__staging_stats_t gs;
  chime__staging_get_stats(&srv->staging, &gs);
  server.staged_insert_bytes = gs.bytes;
  server.staged_insert_budget = gs.budget;
  server.insert_calls_parked = (uint32_t)gs.parked;
  server.staged_insert_reserved = gs.reserved;
  server.insert_reads_reserved = (uint32_t)gs.reads;
  server.staged_insert_peak = gs.peak;
  server_to_msg(r, &server);
  r->checkpoints = srv->ckpt_stats.written;
  r->checkpoint_failures = srv->ckpt_stats.failed;
  r->checkpoint_last_unix_ns = srv->ckpt_stats.last_unix_ns;
  r->checkpoint_last_duration_ns = srv->ckpt_stats.last_duration_ns;
  r->checkpoint_last_pause_ns = srv->ckpt_stats.last_pause_ns;
  return 0;
oom:
  free(snap->lb);
  free(snap->lbp);
  free(snap->ts);
  free(snap->tp);
  free(snap->ss);
  free(snap->sp);
  return CHIME_ENOMEM;
}

void chime__stats_snap_done(chime_server_t *srv, chime__stats_snap_t *snap) {
  chime__registry_unlock(&srv->streams);
  pthread_mutex_unlock(&srv->mu);
  free(snap->lb);
  free(snap->lbp);
  free(snap->ts);
  free(snap->tp);
  free(snap->ss);
  free(snap->sp);
}

static void stats_on_start(chime__call_t *c) {
  chime__stats_snap_t snap;
  chime_server_t *srv = chime__call_server(c);
  if (need_request(c, &chime__v1__stats_request__descriptor) != 0)
    return;
  if (chime__stats_snap(srv, &snap) != 0) {
    chime__call_finish(c, CHIME_ENOMEM, "out of memory");
    return;
  }
  grpc_byte_buffer *bb = chime__msg_pack(&snap.r.base);
  chime__stats_snap_done(srv, &snap);
  answer(c, bb);
}

static void unary_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

const chime__call_vt_t chime__info_vt = {
    .on_start = info_on_start,
    .on_message = unary_on_message,
    .on_stop = NULL,
};

const chime__call_vt_t chime__stats_vt = {
    .on_start = stats_on_start,
    .on_message = unary_on_message,
    .on_stop = NULL,
};
