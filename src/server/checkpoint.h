/* Checkpoints: the tables written to disk while they keep serving, and read
 * back at start (docs/operations.md, Checkpoints).
 *
 * The directory protocol: a checkpoint is written into DIR/.tmp-ckpt-N,
 * one file per table and a MANIFEST, every file fsynced; the directory is
 * fsynced, renamed to DIR/ckpt-N (N: one more than the highest there, at
 * least 16 digits, zero-padded; CHIME_EOVERFLOW past 2^64 - 1) and DIR
 * fsynced; then DONE (the MANIFEST's CRC-32C) is written
 * and fsynced last. A checkpoint without DONE is never loaded and is
 * removed by the next one; only the newest `keep` complete ones stay.
 *
 * A table file's format (both directions) is src/replay/ckpt_format.h's;
 * the MANIFEST lists each file with its size and CRC-32C. Restore checks every
 * file's CRC against its trailer and the manifest before it reads any, so a
 * flipped byte is refused naming the file. Restore reads regular files only:
 * anything else in a file's place (a FIFO, a device) is refused without
 * blocking. */
#ifndef CHIME_SERVER_CHECKPOINT_H
#define CHIME_SERVER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "server/config.h"
#include "replay/ckpt_format.h"
#include "replay/table.h"

typedef struct {
  char path[CHIME__MAX_PATH + 64]; /* DIR/ckpt-N */
  uint32_t tables;
  uint64_t items;
  uint64_t bytes;       /* of the table files */
  uint64_t pause_ns;    /* the longest hold of one table's lock */
  uint64_t duration_ns; /* the whole checkpoint, DONE included */
} chime__ckpt_result_t;

/* Writes a checkpoint of the tables into dir (created if missing) and
 * keeps the newest keep (>= 1). Inserts and samples go on meanwhile: each
 * table is held only for its view (chime__table_view); a sequence
 * table's appends that would reuse a block not yet written wait for it.
 * CHIME_ESYS with err naming the path and the system error. */
int chime__checkpoint_write(chime__table_t *const *tables, uint32_t ntables,
                            const char *dir, uint32_t keep,
                            chime__ckpt_result_t *out, char *err,
                            size_t errlen);

/* The newest complete checkpoint in dir into path: CHIME_ENOTFOUND when
 * there is none. */
int chime__checkpoint_latest(const char *dir, char *path, size_t len);

/* Loads the checkpoint at path into freshly created, unused tables: all
 * files are verified first (DONE, MANIFEST, every table file's size and
 * CRC-32C), then each checkpoint table goes into the config's table of
 * its name, whose spec must be the same leaf for leaf. Config tables
 * absent from the checkpoint stay empty. CHIME_ECORRUPT naming the file,
 * CHIME_EINVAL naming the table and leaf (spec, a table the config lacks,
 * more items than it can hold) or the sequence setting that differs,
 * CHIME_ENOTSUP for a sequence table in a version 1 checkpoint (which
 * held no steps), CHIME_ENOTFOUND without DONE; *items gets the items
 * loaded. A sequence table's episodes that were open are over: their
 * complete windows come back, their tails make none. */
int chime__checkpoint_restore(chime__table_t *const *tables, uint32_t ntables,
                              const char *path, uint64_t *items, char *err,
                              size_t errlen);

/* chime__checkpoint_load_table (one table file's bytes, the fuzz target's
 * way in) is declared in replay/ckpt_format.h, included above. */

#endif
