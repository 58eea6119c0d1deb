/* The public client calls (chime.h): the options checked once, then one
 * server's calls (client.c, chime__conn_*) or, for a target naming many
 * shards, the shard set (shards.c) and the calls on every shard
 * (fanout.c). Nothing below calls back up here. */
#include <stdlib.h>
#include <string.h>

#include "client/fanout.h"
#include "client/internal.h"
#include "client/shards.h"
#include "client/target.h"
#include "common/detail.h"

int chime_client_create(chime_client_t **out, const char *address,
                        const chime_client_opts_t *opts) {
  chime_client_opts_t def = CHIME_CLIENT_OPTS_INIT;
  if (!out || !address || !*address)
    return chime__detail(CHIME_EINVAL,
                         "chime_client_create: needs out and an address");
  *out = NULL;
  /* Zeros are defaults; a negative duration means something only where
   * its field says so (keepalive_time_ms: pings off). */
  chime_client_opts_t o = opts ? *opts : def;
  opts = &o;
  if (o.max_message_bytes == 0)
    o.max_message_bytes = def.max_message_bytes;
  if (o.timeout_ms == 0)
    o.timeout_ms = def.timeout_ms;
  if (o.max_message_bytes > INT32_MAX)
    return chime__detailf(CHIME_EINVAL,
                          "client: max_message_bytes must be at most %d",
                          INT32_MAX);
  if (o.timeout_ms < 0 || o.keepalive_timeout_ms < 0 ||
      o.resolve_interval_ms < 0)
    return chime__detail(CHIME_EINVAL,
                         "client: timeout_ms, keepalive_timeout_ms and "
                         "resolve_interval_ms are 0 (the default) or more");
  size_t toklen = opts->token ? strlen(opts->token) : 0;
  int bad_token = opts->token && (toklen == 0 || toklen > 256);
  for (size_t i = 0; i < toklen; i++)
    if (opts->token[i] <= ' ' || opts->token[i] > '~')
      bad_token = 1;
  if (bad_token)
    return chime__detail(CHIME_EINVAL, "client: the token must be 1..256 "
                                       "printable ASCII bytes, no spaces");
  if ((opts->tls_cert == NULL) != (opts->tls_key == NULL))
    return chime__detail(CHIME_EINVAL,
                         "client: tls_cert and tls_key go together");
  if (opts->tls_server_name != NULL &&
      (opts->tls_server_name[0] == '\0' ||
       (opts->tls_ca == NULL && opts->tls_cert == NULL)))
    return chime__detail(CHIME_EINVAL,
                         "client: tls_server_name must not be empty and "
                         "needs TLS (tls_ca or tls_cert)");
  chime__target_t target;
  char err[512] = "";
  int rc = chime__target_parse(address, CHIME__MAX_SHARDS, &target, err,
                               sizeof(err));
  if (rc)
    return chime__detail(rc, err);
  if (!target.sharded) {
    chime__target_free(&target);
    return chime__conn_create(out, address, opts, 1);
  }
  /* A sharded client's own object has no channel: its shards have. */
  chime_client_t *c;
  if ((rc = chime__conn_create(&c, address, opts, 0)) != 0) {
    chime__target_free(&target);
    return rc;
  }
  rc = chime__shards_create(&c->set, &target, opts, err, sizeof(err));
  if (rc) {
    chime_client_destroy(c);
    return chime__detail(rc, err);
  }
  *out = c;
  return 0;
}

void chime_client_destroy(chime_client_t *client) {
  if (!client)
    return;
  /* The shards' clients look after their own channels (and forks). */
  chime__shards_destroy(client->set);
  chime__conn_destroy(client);
}

int chime_client_info(chime_client_t *client, chime_server_info_t **out) {
  if (!client || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_client_info: needs a client and out");
  *out = NULL;
  return client->set ? chime__fanout_info(client, out)
                     : chime__conn_info(client, out);
}

int chime_client_stats(chime_client_t *client, chime_stats_t **out) {
  if (!client || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_client_stats: needs a client and out");
  *out = NULL;
  return client->set ? chime__fanout_stats(client, out)
                     : chime__conn_stats(client, out);
}

int chime_client_mutate_priorities(chime_client_t *client, const char *table,
                                   const uint64_t *keys,
                                   const double *priorities, size_t n,
                                   const uint64_t *deletes, size_t ndeletes,
                                   chime_mutate_result_t *out) {
  if (!client || !table || (n && (!keys || !priorities)) ||
      (ndeletes && !deletes))
    return chime__detail(CHIME_EINVAL,
                         "chime_client_mutate_priorities: needs a client, a "
                         "table, and keys, priorities and deletes for their "
                         "counts");
  return client->set ? chime__fanout_mutate(client, table, keys, priorities, n,
                                            deletes, ndeletes, out)
                     : chime__conn_mutate(client, table, keys, priorities, n,
                                          deletes, ndeletes, out);
}

int chime_client_checkpoint(chime_client_t *client,
                            chime_checkpoint_result_t *out) {
  if (!client)
    return chime__detail(CHIME_EINVAL, "chime_client_checkpoint: no client");
  return client->set ? chime__fanout_checkpoint(client, out)
                     : chime__conn_checkpoint(client, out);
}

int chime_client_set_version(chime_client_t *client, const char *table,
                             uint64_t version, uint64_t *newest) {
  if (!client || !table)
    return chime__detail(CHIME_EINVAL,
                         "chime_client_set_version: needs a client and table");
  return client->set ? chime__fanout_set_version(client, table, version, newest)
                     : chime__conn_set_version(client, table, version, newest);
}

uint32_t chime_client_nshards(chime_client_t *client) {
  if (!client)
    return 0;
  return client->set ? chime__shards_count(client->set) : 1;
}

chime_client_t *chime_client_shard(chime_client_t *client, uint32_t i) {
  if (!client || i >= chime_client_nshards(client))
    return NULL;
  return client->set ? chime__shards_at(client->set, i)->client : client;
}

const char *chime_client_shard_address(chime_client_t *client, uint32_t i) {
  if (!client || i >= chime_client_nshards(client))
    return NULL;
  return client->set ? chime__shards_at(client->set, i)->addr : client->address;
}
