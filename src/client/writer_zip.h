/* Internal to the client: a writer's compressed leaves (writer_zip.c). The
 * leaves its table keeps compressed are compressed by the writer, one zstd
 * context per writer, as each sample is appended, and sent stored
 * (docs/protocol.md, "Compressed leaves"): chimed checks each frame and
 * keeps it as it came. */
#ifndef CHIME_CLIENT_WRITER_ZIP_H
#define CHIME_CLIENT_WRITER_ZIP_H

#include <stddef.h>

#include "client/writer_call.h"

/* Sets w up to compress the leaves ti (the table as the writer writes it:
 * a sequence table's steps) keeps compressed, ragged ones at each
 * sample's length, when `on` and ti has some (and says them in a form
 * this client reads; else w sends raw); batches are at most data_bytes.
 * 0, or CHIME_ENOMEM with err filled. */
int chime__writer_zip_open(chime_writer_t *w, const chime_table_info_t *ti,
                           int on, size_t data_bytes, char *err, size_t errlen);
/* Appends sample j of the batch to the request being built (w->zdata,
 * w->zused; its stored sizes j-th in w->zsizes): leaf l is n[l] bytes at
 * leaf[l], those w compresses compressed. Only when w->nz > 0; the
 * caller then counts the sample queued. */
void chime__writer_zip_put(chime_writer_t *w, uint32_t j,
                           const uint8_t *const leaf[], const size_t n[]);
/* The same for a sample of the table's fixed leaves, sample_bytes at
 * sample in spec order. */
void chime__writer_zip_put_flat(chime_writer_t *w, uint32_t j,
                                const uint8_t *sample);
/* The queued samples as req's data with their stored leaves (data,
 * stored_leaves, stored), and a new request begun. Nothing when w
 * compresses none. */
void chime__writer_zip_req(chime_writer_t *w, Chime__V1__InsertRequest *req);
void chime__writer_zip_close(chime_writer_t *w);
/* Whether tables a and b (two shards' GetInfo) compress the same leaves of
 * their (alike) specs, levels aside: 1 or 0. A writer's stored leaves must
 * be leaves every shard it may move to compresses. */
int chime__writer_zip_alike(const chime_table_info_t *a,
                            const chime_table_info_t *b);

#endif
