/* Internal to the client: a sharded client's writer and its shard
 * (writer_shard.c): binding to the shard with the fewest of the client's
 * writers, and the failover to another when that shard stays unreachable
 * past reconnect_timeout_ms (writer.c's opening comment). */
#ifndef CHIME_CLIENT_WRITER_SHARD_H
#define CHIME_CLIENT_WRITER_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "client/writer_call.h"

/* Binds to a shard of set that answers and has the table (in ti), never
 * `skip` (UINT32_MAX: none); its count in the set is the caller's to give
 * back (chime__shards_unpick). */
int chime__writer_bind_shard(chime__shards_t *set, const char *table,
                             uint32_t skip, uint32_t *member,
                             chime_table_info_t *ti, char *err, size_t errlen);
/* Failover: moves w to another live shard with the same table, its
 * unacked requests to be sent there as a new writer's. 0, or
 * CHIME_EUNAVAILABLE (no shard to move to) or w's failure. */
int chime__writer_move_shard(chime_writer_t *w);

#endif
