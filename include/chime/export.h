/* Export: a table's items read without sampling them, as a snapshot the
 * server takes at one instant (docs/datasets.md). Included by chime.h. */
#ifndef CHIME_EXPORT_H
#define CHIME_EXPORT_H

#include <stdint.h>

#include "chime/errors.h"
#include "chime/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chime_client_s chime_client_t;

/* One piece of an export (chime_client_export). */
typedef struct {
  uint32_t shard;           /* which shard's snapshot (0 unsharded) */
  const chime_spec_t *spec; /* the table's spec (a sample's leaves) */
  uint64_t total;           /* items in this shard's snapshot */
  /* count samples (0 in the first call of each shard, which announces
   * spec and total), each chime_spec_sample_bytes(spec) bytes, leaves in
   * spec order (compressed leaves decompressed), oldest first, with their
   * keys and priorities. Valid during the call only. */
  uint32_t count;
  const uint8_t *data;
  const uint64_t *keys;
  const double *priorities;
} chime_export_chunk_t;

/* Returns 0 to go on; anything else stops the export, which returns it. */
typedef int (*chime_export_fn)(void *ctx, const chime_export_chunk_t *chunk);

/* Reads table's items without sampling them (docs/datasets.md): the
 * server takes a snapshot at one instant (the items then in the table,
 * each whole; inserts and samples go on meanwhile and do not show in it)
 * and streams it, oldest first; fn sees it chunk by chunk (about 1 MiB
 * each), the first call per shard announcing spec and total. The server
 * sends the next chunk only once this end took the last, so a slow fn
 * slows the export, not the server's memory. A sharded client exports
 * each shard's snapshot in turn, each taken at its own instant (no
 * instant is common to all shards). Plain tables with fixed leaves: a
 * sequence or ragged table is CHIME_ENOTSUP. Admin role when tokens are
 * configured. CHIME_ENOTFOUND for an unknown table, CHIME_ETIMEDOUT when
 * no chunk came within the client's timeout_ms, CHIME_EPROTO for a
 * stream that breaks its contract (counts that do not add up). Thread-
 * safe; fn runs on the calling thread. */
CHIME_EXTERN CHIME_NODISCARD int chime_client_export(chime_client_t *client,
                                                     const char *table,
                                                     chime_export_fn fn,
                                                     void *ctx);

#ifdef __cplusplus
}
#endif

#endif
