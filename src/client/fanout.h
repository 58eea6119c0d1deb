/* Internal to the client: the calls of a sharded client that go to every
 * shard (shards.h) and come back as one answer: info and stats summed over
 * the shards, MutatePriorities split by each key's shard, a checkpoint of
 * every shard. chime_client_info and friends call these for a sharded
 * client (client_api.c); each shard is asked through the one-server calls
 * (chime__conn_*, internal.h), never the public ones. Their contracts are
 * the public calls' (chime.h). */
#ifndef CHIME_CLIENT_FANOUT_H
#define CHIME_CLIENT_FANOUT_H

#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"

int chime__fanout_info(chime_client_t *client, chime_server_info_t **out);
int chime__fanout_stats(chime_client_t *client, chime_stats_t **out);
int chime__fanout_mutate(chime_client_t *client, const char *table,
                         const uint64_t *keys, const double *priorities,
                         size_t n, const uint64_t *deletes, size_t ndeletes,
                         chime_mutate_result_t *out);
int chime__fanout_checkpoint(chime_client_t *client,
                             chime_checkpoint_result_t *out);

#endif
