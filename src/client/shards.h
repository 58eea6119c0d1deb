/* Internal to the client: the shard set behind a client whose target names
 * many servers (target.h). One member per address, each a one-server
 * chime_client_t with a channel of its own; a member's shard (the number
 * its keys carry, chime_key_shard) is learned from its GetInfo the first
 * time it is needed. Members are only ever added (a dns: name that
 * resolves to a new address adds one; one that stops resolving is marked
 * gone and kept until the client is destroyed), so a member pointer and
 * an index stay valid for the client's life and readers take no lock.
 * Thread-safe. */
#ifndef CHIME_CLIENT_SHARDS_H
#define CHIME_CLIENT_SHARDS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"
#include "client/target.h"

/* The most shards one client follows (addresses, including gone ones). */
#define CHIME__MAX_SHARDS 256

typedef struct {
  chime_client_t *client; /* this shard's own one-server client */
  char *addr;             /* its one-server target */
  atomic_int known;       /* shard and instance learned from GetInfo */
  _Atomic uint32_t shard;
  _Atomic uint64_t instance; /* the server process (GetInfo.instance) */
  atomic_int gone;           /* no longer in the target's resolution */
  /* This client's writers bound to it (chime__shards_pick): what a new or
   * moving writer balances. */
  atomic_uint writers;
} chime__member_t;

typedef struct chime__shards_s chime__shards_t;

/* Makes the set for a parsed sharded target (taken over, also on failure)
 * and a member per address; a dns: target is resolved first (when it does
 * not resolve, the set starts empty and calls fail with CHIME_EUNAVAILABLE
 * until it does). opts as chime_client_create's, copied. */
int chime__shards_create(chime__shards_t **out, chime__target_t *target,
                         const chime_client_opts_t *opts, char *err,
                         size_t errlen);
void chime__shards_destroy(chime__shards_t *set); /* NULL-safe */

/* Members so far (gone ones included) and the i-th (i < count). */
uint32_t chime__shards_count(const chime__shards_t *set);
chime__member_t *chime__shards_at(chime__shards_t *set, uint32_t i);

/* A dns: target whose resolve interval passed since the last resolution
 * (or any time when force) is resolved again: new addresses become
 * members, addresses no longer there are marked gone (and back when they
 * return). A list target never changes. Errors keep the last resolution. */
void chime__shards_refresh(chime__shards_t *set, int force);

/* Learns member i's shard (GetInfo) unless known. */
int chime__shards_identify(chime__shards_t *set, uint32_t i, char *err,
                           size_t errlen);

/* Member i is a server an earlier live member already reaches by another
 * address (the same GetInfo instance: dns:///localhost gives 127.0.0.1
 * and ::1): calls over the shards skip it. Identifies both as needed; a
 * member that cannot be reached is no duplicate. */
int chime__shards_duplicate(chime__shards_t *set, uint32_t i);

/* The live member whose server is shard `shard`. CHIME_EINVAL with err
 * when no member is (after identifying every member and resolving again)
 * or when two are (shards must have distinct numbers). */
int chime__shards_owner(chime__shards_t *set, uint32_t shard, uint32_t *index,
                        char *err, size_t errlen);

/* A member for a writer to bind to: of the live members not in tried
 * (NULL, or CHIME__MAX_SHARDS flags by index), the one with the fewest of
 * this client's writers (ties: round robin from a random point per
 * process), whose count it takes; chime__shards_unpick gives it back (the
 * writer closed, moved, or could not use the member). So writers spread
 * evenly at open, and the writers of a shard that died spread over the
 * others. CHIME_EUNAVAILABLE when there is none. */
int chime__shards_pick(chime__shards_t *set, const uint8_t *tried,
                       uint32_t *index, char *err, size_t errlen);
void chime__shards_unpick(chime__shards_t *set, uint32_t index);

#endif
