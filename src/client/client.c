/* The one-server client: one gRPC channel and the unary calls on it
 * (GetInfo, Stats, MutatePriorities, Checkpoint), as the internal calls
 * (internal.h, chime__conn_*) that the public ones (client_api.c) and the
 * sharded layer (shards.c, fanout.c) use; and the public calls that need
 * no dispatch (frees, mode names). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "client/fork.h"
#include "client/internal.h"
#include "common/detail.h"
#include "common/keepalive.h"
#include "common/pem.h"
#include "wire/grpcref.h"

/* The channel's credentials: TLS from opts' files, or insecure. */
static int make_creds(const chime_client_opts_t *opts,
                      grpc_channel_credentials **out) {
  char *ca = NULL, *cert = NULL, *key = NULL;
  int rc = 0;
  *out = NULL;
  if (opts->tls_ca == NULL && opts->tls_cert == NULL) {
    *out = grpc_insecure_credentials_create();
    return *out != NULL ? 0 : CHIME_ENOMEM;
  }
  /* There is no client yet to keep why on: CHIME_EINVAL says it. */
  char why[256];
  if ((opts->tls_ca != NULL &&
       (rc = chime__pem_read(opts->tls_ca, &ca, why, sizeof(why))) != 0) ||
      (opts->tls_cert != NULL &&
       (rc = chime__pem_read(opts->tls_cert, &cert, why, sizeof(why))) != 0) ||
      (opts->tls_key != NULL &&
       (rc = chime__pem_read(opts->tls_key, &key, why, sizeof(why))) != 0))
    goto out;
  grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
  *out = grpc_ssl_credentials_create_ex(ca, cert != NULL ? &pair : NULL, NULL,
                                        NULL);
  if (*out == NULL)
    rc = CHIME_EINVAL;
out:
  chime__pem_free(ca);
  chime__pem_free(cert);
  chime__pem_free(key);
  return rc;
}

/* opts kept in c, strings copied (none when out of memory: a lane's
 * client then fails to make the same connection, and says so). */
static void keep_opts(chime_client_t *c, const chime_client_opts_t *opts) {
  c->kept = *opts;
  const char **str[] = {&c->kept.token, &c->kept.tls_ca, &c->kept.tls_cert,
                        &c->kept.tls_key, &c->kept.tls_server_name};
  for (size_t i = 0; i < sizeof(str) / sizeof(str[0]); i++)
    *str[i] = *str[i] != NULL ? strdup(*str[i]) : NULL;
}

int chime__conn_create(chime_client_t **out, const char *address,
                       const chime_client_opts_t *opts, int channel) {
  chime_client_opts_t def = CHIME_CLIENT_OPTS_INIT;
  char err[512] = "";
  *out = NULL;
  chime_client_t *c = calloc(1, sizeof(*c));
  if (!c || !(c->address = strdup(address))) {
    free(c);
    return chime__detail(CHIME_ENOMEM, "client: out of memory");
  }
  pthread_mutex_init(&c->seen_mu, NULL);
  c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : def.timeout_ms;
  c->max_message_bytes = opts->max_message_bytes;
  c->pid = (int)getpid();

  int rc = chime__fork_grpc_init(err, sizeof(err));
  if (rc != 0) {
    free(c->address);
    free(c);
    return chime__detail(rc, err);
  }
  c->fork_gen = chime__fork_gen();
  if (!channel) {
    *out = c;
    return 0;
  }
  chime__gate_enter();
  grpc_channel_credentials *creds;
  rc = make_creds(opts, &creds);
  if (rc != 0) {
    free(c->address);
    free(c);
    int drain = chime__grpc_release();
    chime__gate_leave();
    if (drain)
      chime__grpc_drain();
    return chime__detail(rc, rc == CHIME_EINVAL
                                 ? "client: a TLS file (tls_ca, tls_cert or "
                                   "tls_key) cannot be read or holds no PEM "
                                   "block"
                                 : "client: out of memory");
  }
  c->keepalive_time_ms =
      opts->keepalive_time_ms >= 0
          ? (opts->keepalive_time_ms > 0 ? opts->keepalive_time_ms
                                         : CHIME_KEEPALIVE_TIME_MS)
          : 0;
  c->keepalive_timeout_ms = opts->keepalive_timeout_ms > 0
                                ? opts->keepalive_timeout_ms
                                : CHIME_KEEPALIVE_TIMEOUT_MS;
  c->creds = creds; /* kept: a stream that resumes makes channels too */
  if (opts->tls_server_name != NULL)
    c->tls_server_name = strdup(opts->tls_server_name);
  c->channel = chime__channel_new(c);
  if (opts->token) {
    char value[8 + 256];
    int n = snprintf(value, sizeof(value), "Bearer %s", opts->token);
    c->auth.key = grpc_slice_from_static_string("authorization");
    c->auth.value = grpc_slice_from_copied_buffer(value, (size_t)n);
    c->nmd = 1;
    memset(value, 0, sizeof(value));
  }
  chime__gate_leave();
  keep_opts(c, opts);
  *out = c;
  return 0;
}

int chime__conn_again(chime_client_t **out, const chime_client_t *like) {
  return chime__conn_create(out, like->address, &like->kept, 1);
}

void chime__conn_destroy(chime_client_t *client) {
  if (!client)
    return;
  /* In a child of fork() the channel is the parent's: gRPC there closed
   * its fds; this copy is left alone. */
  int own = client->fork_gen == chime__fork_gen();
  if (own) {
    chime__gate_enter();
    if (client->channel)
      grpc_channel_destroy(client->channel);
    if (client->nmd)
      grpc_slice_unref(client->auth.value);
    if (client->creds)
      grpc_channel_credentials_release(client->creds);
  }
  free(client->address);
  free(client->tls_server_name);
  free(client->seen_tables);
  free((char *)client->kept.token);
  free((char *)client->kept.tls_ca);
  free((char *)client->kept.tls_cert);
  free((char *)client->kept.tls_key);
  free((char *)client->kept.tls_server_name);
  pthread_mutex_destroy(&client->seen_mu);
  free(client);
  if (own) {
    /* The channel may still be torn down on gRPC's threads: the last
     * client waits for that (wire/grpcref.h), so that a program may
     * return from main() right after. */
    int drain = chime__grpc_release();
    chime__gate_leave();
    if (drain)
      chime__grpc_drain();
  }
}

int chime__client_inherited(chime_client_t *client) {
  char err[512];
  int rc = chime__fork_check(client->fork_gen, client->pid, "client", err,
                             sizeof(err));
  return rc ? chime__detail(rc, err) : 0;
}

int chime__unary_begin(chime_client_t *client, int method,
                       const ProtobufCMessage *req, chime__unary_t *u) {
  const char *path = chime__method_path[method];
  memset(u, 0, sizeof(*u));
  u->method = method;
  int rc = chime__fork_check(client->fork_gen, client->pid, "client", u->err,
                             sizeof(u->err));
  if (rc)
    return u->rc = rc;
  u->made = 1;
  rc = chime__rpc_init(&u->r);
  grpc_byte_buffer *send = chime__pack(req);
  if (rc || !send) {
    chime__bb_free(send);
    return u->rc = chime__fail(u->err, sizeof(u->err), CHIME_ENOMEM,
                               "%s: cannot start call", path);
  }
  if (chime__rpc_start(&u->r, client, method,
                       chime__deadline_ms(client->timeout_ms), CHIME__RPC_LAST,
                       send) ||
      chime__rpc_recv(&u->r))
    return u->rc = chime__fail(u->err, sizeof(u->err), CHIME_EPROTO,
                               "%s: start_batch failed", path);
  return 0;
}

int chime__unary_end(chime_client_t *client, chime__unary_t *u,
                     const ProtobufCMessageDescriptor *resp_desc,
                     ProtobufCMessage **resp, char *err, size_t errlen) {
  const char *path = chime__method_path[u->method];
  int rc = u->rc;
  *resp = NULL;
  if (rc) {
    chime__fail(err, errlen, rc, "%s", u->err);
    goto cleanup;
  }
  /* The call's own deadline bounds this wait. */
  while (chime__rpc_busy(&u->r)) {
    chime__rpc_op_t op;
    int ok;
    chime__rpc_next(&u->r, gpr_inf_future(GPR_CLOCK_MONOTONIC), &op, &ok);
  }
  char text[CHIME__ERRLEN];
  rc = chime__rpc_result(&u->r, text, sizeof(text));
  if (rc != CHIME_EUNAVAILABLE && rc != CHIME_ETIMEDOUT)
    atomic_store(&client->reached, 1);
  if (rc == CHIME_EUNAVAILABLE && atomic_load(&client->reached)) {
    /* As a stream or writer reports it: the server this client talked to
     * is gone (its connection is down), e.g. stopped with its owner. */
    chime__gate_enter();
    grpc_connectivity_state st =
        grpc_channel_check_connectivity_state(client->channel, 0);
    chime__gate_leave();
    if (st != GRPC_CHANNEL_READY) {
      chime__fail(err, errlen, CHIME_EDISCONNECTED,
                  "%s: the server is gone (connection lost): %s", path,
                  text[0] ? text : chime_strerror(rc));
      rc = CHIME_EDISCONNECTED;
      goto cleanup;
    }
  }
  if (rc) {
    chime__fail(err, errlen, rc, "%s: %s", path,
                text[0] ? text : chime_strerror(rc));
    goto cleanup;
  }
  if (!u->r.recv_bb) {
    rc =
        chime__fail(err, errlen, CHIME_EPROTO, "%s: no response message", path);
    goto cleanup;
  }
  *resp = chime__unpack(resp_desc, u->r.recv_bb);
  if (!*resp)
    rc = chime__fail(err, errlen, CHIME_EPROTO, "%s: malformed response", path);

cleanup:
  if (u->made)
    chime__rpc_destroy(&u->r);
  u->made = 0;
  return rc;
}

static int unary_once(chime_client_t *client, int method,
                      const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc,
                      ProtobufCMessage **resp, char *err, size_t errlen) {
  chime__unary_t u;
  chime__unary_begin(client, method, req, &u);
  return chime__unary_end(client, &u, resp_desc, resp, err, errlen);
}

/* A connection that sat idle can be closed under a call just sent on it:
 * the server's keepalive drops a peer that did not answer its ping in time,
 * and an idle client answers only when something polls its connection. The
 * call then fails with "Socket closed" though the server is up. GetInfo and
 * Stats only read, so they are sent once more on a new connection; the
 * answer to that one stands (a server that is really gone refuses it at
 * once). The other methods change state and are never sent twice. */
static int unary_retries(int method) {
  return method == CHIME__M_GETINFO || method == CHIME__M_STATS;
}

int chime__unary(chime_client_t *client, int method,
                 const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc,
                 ProtobufCMessage **resp, char *err, size_t errlen) {
  int rc = unary_once(client, method, req, resp_desc, resp, err, errlen);
  if ((rc == CHIME_EUNAVAILABLE || rc == CHIME_EDISCONNECTED) &&
      unary_retries(method) && atomic_load(&client->reached))
    rc = unary_once(client, method, req, resp_desc, resp, err, errlen);
  return rc;
}

static void copy_str(char *dst, size_t len, const char *src) {
  snprintf(dst, len, "%s", src ? src : "");
}

/* GetInfo and Stats take an empty request; each is retried once as
 * chime__unary retries it. */
static int empty_begin(chime_client_t *client, int method, chime__unary_t *u) {
  Chime__V1__GetInfoRequest info = CHIME__V1__GET_INFO_REQUEST__INIT;
  Chime__V1__StatsRequest stats = CHIME__V1__STATS_REQUEST__INIT;
  return chime__unary_begin(
      client, method, method == CHIME__M_GETINFO ? &info.base : &stats.base, u);
}

static int empty_end(chime_client_t *client, chime__unary_t *u,
                     const ProtobufCMessageDescriptor *desc,
                     ProtobufCMessage **m, char *err, size_t errlen) {
  int method = u->method;
  int rc = chime__unary_end(client, u, desc, m, err, errlen);
  if ((rc == CHIME_EUNAVAILABLE || rc == CHIME_EDISCONNECTED) &&
      unary_retries(method) && atomic_load(&client->reached)) {
    chime__unary_t again;
    empty_begin(client, method, &again);
    rc = chime__unary_end(client, &again, desc, m, err, errlen);
  }
  return rc;
}

/* What info says of its server, for later calls that must not wait on
 * it (internal.h, seen). Out of memory keeps the last tables. */
static void remember(chime_client_t *client, const chime_server_info_t *info) {
  chime_table_info_t *t =
      info->ntables ? malloc(info->ntables * sizeof(*t)) : NULL;
  if (t || info->ntables == 0) {
    if (t)
      memcpy(t, info->tables, info->ntables * sizeof(*t));
    pthread_mutex_lock(&client->seen_mu);
    free(client->seen_tables);
    client->seen_tables = t;
    client->seen_ntables = info->ntables;
    pthread_mutex_unlock(&client->seen_mu);
  }
  atomic_store(&client->seen_shard, info->shard);
  atomic_store(&client->seen_instance, info->instance);
  atomic_store(&client->seen, 1);
}

int chime__conn_seen_table(chime_client_t *client, const char *table,
                           chime_table_info_t *out) {
  if (!atomic_load(&client->seen))
    return CHIME_EUNAVAILABLE;
  int rc = CHIME_ENOTFOUND;
  pthread_mutex_lock(&client->seen_mu);
  for (uint32_t i = 0; i < client->seen_ntables && rc; i++)
    if (strcmp(client->seen_tables[i].name, table) == 0) {
      *out = client->seen_tables[i];
      rc = 0;
    }
  pthread_mutex_unlock(&client->seen_mu);
  return rc;
}

int chime__conn_info_begin(chime_client_t *client, chime__unary_t *u) {
  return empty_begin(client, CHIME__M_GETINFO, u);
}

/* A table's compressed leaves' bytes (GetInfo's and Stats'): at most
 * CHIME_MAX_LEAVES of them, names cut to fit. How many. */
static uint32_t leaf_bytes_from_msgs(chime_leaf_bytes_t *o,
                                     Chime__V1__LeafBytes *const *m, size_t n) {
  uint32_t k = 0;
  for (; k < n && k < CHIME_MAX_LEAVES; k++) {
    snprintf(o[k].leaf, sizeof(o[k].leaf), "%s", m[k]->leaf ? m[k]->leaf : "");
    o[k].level = m[k]->level;
    o[k].raw_bytes = m[k]->raw_bytes;
    o[k].stored_bytes = m[k]->stored_bytes;
    o[k].stored_raw = m[k]->stored_raw;
  }
  return k;
}

int chime__conn_info(chime_client_t *client, chime_server_info_t **out) {
  chime__unary_t u;
  chime__conn_info_begin(client, &u);
  return chime__conn_info_end(client, &u, out);
}

int chime__conn_info_end(chime_client_t *client, chime__unary_t *u,
                         chime_server_info_t **out) {
  *out = NULL;
  char err[CHIME__ERRLEN] = "";
  ProtobufCMessage *m = NULL;
  chime_server_info_t *info = NULL;
  int rc = empty_end(client, u, &chime__v1__get_info_response__descriptor, &m,
                     err, sizeof(err));
  if (rc)
    goto cleanup;
  Chime__V1__GetInfoResponse *r = (Chime__V1__GetInfoResponse *)m;
  info = calloc(1, sizeof(*info));
  if (!info ||
      (r->n_tables &&
       !(info->tables = calloc(r->n_tables, sizeof(*info->tables)))) ||
      (r->n_rings &&
       !(info->rings = calloc(r->n_rings, sizeof(*info->rings))))) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  copy_str(info->version, sizeof(info->version), r->version);
  copy_str(info->boot_id, sizeof(info->boot_id), r->boot_id);
  copy_str(info->hostname, sizeof(info->hostname), r->hostname);
  info->shard = r->shard;
  info->instance = r->instance;

  info->pin_host_memory = r->pin_host_memory;
  info->pinned_bytes = r->pinned_bytes;
  for (size_t i = 0; i < r->n_tables; i++) {
    const Chime__V1__TableInfo *t = r->tables[i];
    chime_table_info_t *o = &info->tables[i];
    char leaf_err[256];
    copy_str(o->name, sizeof(o->name), t->name);
    if (chime__spec_from_leaves(&o->spec, t->spec, t->n_spec, leaf_err,
                                sizeof(leaf_err))) {
      rc = chime__fail(err, sizeof(err), CHIME_EPROTO,
                       "GetInfo: table '%s' has a bad spec: %s", o->name,
                       leaf_err);
      goto cleanup;
    }
    o->capacity = t->capacity;
    o->size = t->size;
    o->mass = t->mass;
    o->min_size = t->min_size;
    o->sample_bytes = t->sample_bytes;
    copy_str(o->sampler, sizeof(o->sampler), t->sampler);
    copy_str(o->remover, sizeof(o->remover), t->remover);
    o->priority_exponent = t->priority_exponent;
    o->max_times_sampled = t->max_times_sampled;
    o->max_staleness = t->max_staleness;
    o->newest_version = t->newest_version;
    copy_str(o->staleness_weight, sizeof(o->staleness_weight),
             t->staleness_weight[0] ? t->staleness_weight : "none");
    copy_str(o->compress, sizeof(o->compress),
             t->compress != NULL ? t->compress : "");
    copy_str(o->data_dir, sizeof(o->data_dir),
             t->data_dir != NULL ? t->data_dir : "");
    o->disk_bytes = t->disk_bytes;
    o->pace_batch = t->pace_batch;
    copy_str(o->version_leaf, sizeof(o->version_leaf),
             t->version_leaf != NULL ? t->version_leaf : "");
    o->nleaf_bytes =
        leaf_bytes_from_msgs(o->leaf_bytes, t->leaf_bytes, t->n_leaf_bytes);
    o->samples_per_insert = t->samples_per_insert;
    o->error_buffer = t->error_buffer;
    if (t->sequence_length > 0 &&
        chime__spec_from_leaves(&o->step_spec, t->step_spec, t->n_step_spec,
                                leaf_err, sizeof(leaf_err))) {
      rc = chime__fail(err, sizeof(err), CHIME_EPROTO,
                       "GetInfo: table '%s' has a bad step spec: %s", o->name,
                       leaf_err);
      goto cleanup;
    }
    o->step_bytes = t->step_bytes;
    o->capacity_steps = t->capacity_steps;
    o->sequence_length = t->sequence_length;
    o->stride = t->stride;
    copy_str(o->episode_end, sizeof(o->episode_end), t->episode_end);
    o->initial_priority_max = t->initial_priority_max;
    o->initial_priority = t->initial_priority;
    info->ntables++;
  }
  for (size_t i = 0; i < r->n_rings; i++) {
    const Chime__V1__RingInfo *g = r->rings[i];
    chime_ring_info_t *o = &info->rings[i];
    o->stream_id = g->stream_id;
    copy_str(o->table, sizeof(o->table), g->table);
    o->bytes = g->bytes;
    o->pinned_bytes = g->pinned_bytes;
    info->nrings++;
  }
  remember(client, info);
  *out = info;
  info = NULL;

cleanup:
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  chime_server_info_free(info);
  if (rc)
    chime__detail(rc, err);
  return rc;
}

int chime__table_lookup(chime_client_t *client, const char *table,
                        chime_table_info_t *out, chime_server_info_t **info,
                        char *err, size_t errlen) {
  chime_server_info_t *si = NULL;
  int rc = chime__conn_info(client, &si);
  if (rc) {
    chime__fail(err, errlen, rc, "%s", chime_last_error());
    goto cleanup;
  }
  rc = CHIME_ENOTFOUND;
  for (uint32_t i = 0; i < si->ntables; i++) {
    if (strcmp(si->tables[i].name, table) == 0) {
      *out = si->tables[i];
      rc = 0;
      break;
    }
  }
  if (rc)
    chime__fail(err, errlen, rc, "table '%s' not found", table);

cleanup:
  if (info && rc == 0)
    *info = si;
  else
    chime_server_info_free(si);
  return rc;
}

void chime_server_info_free(chime_server_info_t *info) {
  if (!info)
    return;
  free(info->tables);
  free(info->rings);
  free(info);
}

/* The stats lists (chime/stats.h) from the wire: each field from
 * the message's field of the same name, which must be of the same size. */
#define FROM_MSG(type, name, kind, unit, help)                                 \
  _Static_assert(sizeof(m->name) == sizeof(type), #name " differs on the "     \
                                                        "wire");               \
  o->name = m->name;

static void table_from_msg(chime_table_stats_t *o,
                           const Chime__V1__TableStats *m) {
  CHIME_TABLE_STATS_FIELDS(FROM_MSG)
  o->nleaf_bytes =
      leaf_bytes_from_msgs(o->leaf_bytes, m->leaf_bytes, m->n_leaf_bytes);
}

static void stream_from_msg(chime_stream_stats_t *o,
                            const Chime__V1__StreamStats *m) {
  CHIME_STREAM_STATS_FIELDS(FROM_MSG)
}

static void server_from_msg(chime_stats_t *o,
                            const Chime__V1__StatsResponse *m) {
  CHIME_SERVER_STATS_FIELDS(FROM_MSG)
}

int chime__conn_stats_begin(chime_client_t *client, chime__unary_t *u) {
  return empty_begin(client, CHIME__M_STATS, u);
}

int chime__conn_stats(chime_client_t *client, chime_stats_t **out) {
  chime__unary_t u;
  chime__conn_stats_begin(client, &u);
  return chime__conn_stats_end(client, &u, out);
}

int chime__conn_stats_end(chime_client_t *client, chime__unary_t *u,
                          chime_stats_t **out) {
  *out = NULL;
  char err[CHIME__ERRLEN] = "";
  ProtobufCMessage *m = NULL;
  chime_stats_t *st = NULL;
  int rc = empty_end(client, u, &chime__v1__stats_response__descriptor, &m, err,
                     sizeof(err));
  if (rc)
    goto cleanup;
  Chime__V1__StatsResponse *r = (Chime__V1__StatsResponse *)m;
  st = calloc(1, sizeof(*st));
  if (!st ||
      (r->n_tables &&
       !(st->tables = calloc(r->n_tables, sizeof(*st->tables)))) ||
      (r->n_streams &&
       !(st->streams = calloc(r->n_streams, sizeof(*st->streams))))) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  st->ntables = (uint32_t)r->n_tables;
  for (size_t i = 0; i < r->n_tables; i++) {
    const Chime__V1__TableStats *t = r->tables[i];
    chime_table_stats_t *o = &st->tables[i];
    copy_str(o->name, sizeof(o->name), t->name);
    table_from_msg(o, t);
  }
  st->nstreams = (uint32_t)r->n_streams;
  for (size_t i = 0; i < r->n_streams; i++) {
    const Chime__V1__StreamStats *s = r->streams[i];
    chime_stream_stats_t *o = &st->streams[i];
    o->stream_id = s->stream_id;
    copy_str(o->table, sizeof(o->table), s->table);
    o->mode = (int)s->mode;
    stream_from_msg(o, s);
  }
  server_from_msg(st, r);
  *out = st;
  st = NULL;

cleanup:
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  chime_stats_free(st);
  if (rc)
    chime__detail(rc, err);
  return rc;
}

void chime_stats_free(chime_stats_t *stats) {
  if (!stats)
    return;
  free(stats->tables);
  free(stats->streams);
  free(stats);
}

const char *chime_mode_name(chime_mode_t mode) {
  switch (mode) {
  case CHIME_MODE_AUTO:
    return "auto";
  case CHIME_MODE_SHM:
    return "shm";
  case CHIME_MODE_STREAM:
    return "stream";
  }
  return "unknown";
}

int chime__check_priorities(const char *table, const double *priorities,
                            size_t n, char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    double p = priorities[i];
    if (p != p || p < 0 || p > 1.79769313486231570815e308)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "MutatePriorities on '%s': priority %zu is %g: "
                         "priorities must be finite and at least 0",
                         table, i, p);
  }
  return 0;
}

int chime__conn_mutate(chime_client_t *client, const char *table,
                       const uint64_t *keys, const double *priorities, size_t n,
                       const uint64_t *deletes, size_t ndeletes,
                       chime_mutate_result_t *out) {
  char err[CHIME__ERRLEN] = "";
  int rc = 0;
  ProtobufCMessage *m = NULL;
  Chime__V1__PriorityUpdate *ups = calloc(n ? n : 1, sizeof(*ups));
  Chime__V1__PriorityUpdate **upp = calloc(n ? n : 1, sizeof(*upp));
  if (!ups || !upp) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  if ((rc = chime__check_priorities(table, priorities, n, err, sizeof(err))) !=
      0)
    goto cleanup;
  for (size_t i = 0; i < n; i++) {
    double p = priorities[i];
    chime__v1__priority_update__init(&ups[i]);
    ups[i].key = keys[i];
    ups[i].priority = p;
    upp[i] = &ups[i];
  }
  Chime__V1__MutatePrioritiesRequest req =
      CHIME__V1__MUTATE_PRIORITIES_REQUEST__INIT;
  req.table = (char *)table;
  req.n_updates = n;
  req.updates = upp;
  req.n_deletes = ndeletes;
  req.deletes = (uint64_t *)deletes;
  rc = chime__unary(client, CHIME__M_MUTATE, &req.base,
                    &chime__v1__mutate_priorities_response__descriptor, &m, err,
                    sizeof(err));
  if (rc == 0 && out) {
    const Chime__V1__MutatePrioritiesResponse *r =
        (const Chime__V1__MutatePrioritiesResponse *)m;
    out->updated = r->updated;
    out->deleted = r->deleted;
    out->unknown = r->unknown;
  }
cleanup:
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  free(ups);
  free(upp);
  if (rc)
    chime__detail(rc, err);
  return rc;
}

int chime__conn_checkpoint(chime_client_t *client,
                           chime_checkpoint_result_t *out) {
  char err[CHIME__ERRLEN] = "";
  ProtobufCMessage *m = NULL;
  Chime__V1__CheckpointRequest req = CHIME__V1__CHECKPOINT_REQUEST__INIT;
  int rc = chime__unary(client, CHIME__M_CHECKPOINT, &req.base,
                        &chime__v1__checkpoint_response__descriptor, &m, err,
                        sizeof(err));
  if (rc == 0 && out) {
    const Chime__V1__CheckpointResponse *r =
        (const Chime__V1__CheckpointResponse *)m;
    memset(out, 0, sizeof(*out));
    snprintf(out->path, sizeof(out->path), "%s", r->path ? r->path : "");
    out->tables = r->tables;
    out->items = r->items;
    out->bytes = r->bytes;
    out->pause_ns = r->pause_ns;
    out->duration_ns = r->duration_ns;
  }
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  if (rc)
    chime__detail(rc, err);
  return rc;
}

int chime__conn_set_version_begin(chime_client_t *client, const char *table,
                                  uint64_t version, chime__unary_t *u) {
  Chime__V1__SetVersionRequest req = CHIME__V1__SET_VERSION_REQUEST__INIT;
  req.table = (char *)table;
  req.version = version;
  return chime__unary_begin(client, CHIME__M_SET_VERSION, &req.base, u);
}

int chime__conn_set_version_end(chime_client_t *client, chime__unary_t *u,
                                uint64_t *newest) {
  char err[CHIME__ERRLEN] = "";
  ProtobufCMessage *m = NULL;
  int rc =
      chime__unary_end(client, u, &chime__v1__set_version_response__descriptor,
                       &m, err, sizeof(err));
  if (rc == 0 && newest)
    *newest = ((const Chime__V1__SetVersionResponse *)m)->newest_version;
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  if (rc)
    chime__detail(rc, err);
  return rc;
}

int chime__conn_set_version(chime_client_t *client, const char *table,
                            uint64_t version, uint64_t *newest) {
  chime__unary_t u;
  chime__conn_set_version_begin(client, table, version, &u);
  return chime__conn_set_version_end(client, &u, newest);
}
