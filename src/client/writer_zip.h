/* Internal to the client: a writer's compressed leaves (writer_zip.c). The
 * leaves its table keeps compressed are compressed by the writer, one zstd
 * context per writer, when a batch becomes a request, and sent stored
 * (docs/protocol.md, "Compressed leaves"): chimed checks each frame and
 * keeps it as it came. */
#ifndef CHIME_CLIENT_WRITER_ZIP_H
#define CHIME_CLIENT_WRITER_ZIP_H

#include <stddef.h>

#include "client/writer_call.h"

/* Sets w up to compress the leaves ti (the table as the writer writes it)
 * keeps compressed, when `on` and ti is a plain table that has some;
 * batches are at most data_bytes. 0, or CHIME_ENOMEM / CHIME_EPROTO (a
 * TableInfo.compress this client cannot read) with err filled. */
int chime__writer_zip_open(chime_writer_t *w, const chime_table_info_t *ti,
                           int on, size_t data_bytes, char *err, size_t errlen);
/* The queued batch as req's data with its leaves stored: packed into
 * w->zdata, stored_leaves and stored set. Nothing when w compresses none. */
void chime__writer_zip_pack(chime_writer_t *w, Chime__V1__InsertRequest *req);
void chime__writer_zip_close(chime_writer_t *w);
/* Whether tables a and b (two shards' GetInfo) compress the same leaves of
 * their (alike) specs, levels aside: 1 or 0. A writer's stored leaves must
 * be leaves every shard it may move to compresses. */
int chime__writer_zip_alike(const chime_table_info_t *a,
                            const chime_table_info_t *b);

#endif
