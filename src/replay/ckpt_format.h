/* A checkpoint's table file: one table's bytes, written from its view and
 * read back into a table. Only the file's format lives here (no files
 * named, no directories, no fsync): src/server/checkpoint.c owns the
 * directory a checkpoint goes into (names, MANIFEST, DONE, keep) and
 * hands this an open file to fill, or a file's bytes to read.
 *
 * The format: "CHIMECKT", version, kind, the shard that wrote it (version
 * 3; 0 in older files: an unsharded server's), name, spec (text), the counts,
 * the newest policy version the table knew (version 4), the writers'
 * exactly-once windows (version 6, ckpt_writers.h), the items oldest
 * first (key, insert time, priority, times sampled, policy version (version
 * 4), ragged leaves' lengths (version 5), the sample's bytes, ragged leaves
 * at their lengths), and the CRC-32C of all that; little-endian. A
 * sequence table's file (version 2) has, after the counts, its settings and
 * step counters, its windows oldest first (key, insert time, priority, times
 * sampled, first step, episode, index, length) and the step store's
 * blocks oldest first (steps, lane links, each step's episode, index and
 * (version 5) policy version, the steps' bytes leaf by leaf). */
#ifndef CHIME_REPLAY_CKPT_FORMAT_H
#define CHIME_REPLAY_CKPT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "replay/table.h"

/* 2: sequence tables' steps and windows (a version 1 file holds a
 * sequence table's name and spec only); plain tables' files are the same
 * in both, and version 1 ones still load. 3: the shard that wrote the
 * file (its keys carry it, common/key.h); older files are shard 0's. The
 * MANIFEST carries the version too. 4: policy versions, the newest the
 * table knew (after the sample bytes) and a plain table's items' (after
 * times sampled); older files load with every item's version 0. 5: ragged
 * leaves (docs/replay.md): a plain table's item has, after its version,
 * one u32 length per ragged leaf, and its bytes hold each ragged leaf at
 * its length (no padding to the bound); a table without ragged leaves
 * writes the same records as in version 4. A ragged spec in an older file
 * is corrupt (none was ever written), and so is a length past its bound,
 * unlike the one it shares, or taking more bytes than the file holds.
 * Also in 5: a sequence table's steps each carry their policy version
 * (after episode and index; a window's is its first step's), 0 when
 * loaded from an older file.
 * 6: compressed leaves (docs/replay.md): after the newest version, a u32
 * count and each compressed leaf's index (u32, rising); in an item's
 * bytes a compressed leaf is its u32 stored size (at most the leaf's
 * bytes, a ragged one's at the item's length; equal: kept raw) and its
 * stored bytes, as the table keeps them (never recompressed); a sequence
 * table's compressed step leaves likewise, in a block each leaf's steps
 * one after another as its u32 stored size and stored bytes
 * (ckpt_seq.c). A file without compressed leaves holds the same records
 * as version 5. Also in 6, after the compressed leaves: the writers'
 * windows (ckpt_writers.h): the requests each writer the table
 * remembered had inserted, copied in the view's hold of the lock, so a
 * resend after a restore is acked again instead of inserted twice; an
 * older file restores as before (no writer remembered, each unknown
 * writer refused past its first request), a window that does not hang
 * together is corrupt.
 * 7: pacing (docs/replay.md, "Pacing producers"): after the writers'
 * windows, a u64, the samples written ahead of the learner's progress, so
 * the bound on producers holds across a restore; older files load it as
 * 0. */
#define CHIME__CKPT_VERSION 7u
#define CHIME__CKPT_MIN_VERSION 1u
/* The writer's buffer: chime__checkpoint_write_table wants this many
 * bytes at buf. */
#define CHIME__CKPT_WBUF (1u << 20)

/* What a table file holds, for the MANIFEST and the checkpoint's figures. */
typedef struct {
  uint64_t bytes, items;
  uint32_t crc;      /* the file's CRC-32C (its trailer) */
  uint64_t pause_ns; /* the view's hold of the table's lock */
} chime__ckpt_file_t;

/* Writes table t's file into fd (opened for writing, empty) through buf
 * (CHIME__CKPT_WBUF bytes): the view taken (the pause), the bytes written
 * from the pinned rows (a sequence table's: from its pinned blocks, each
 * let go once written), the view released. fd is neither fsynced nor
 * closed. fname names the file in errors: CHIME_ESYS for a failed write,
 * CHIME_EINVAL for a spec too long, the view's error. */
int chime__checkpoint_write_table(chime__table_t *t, int fd, uint8_t *buf,
                                  const char *fname, chime__ckpt_file_t *out,
                                  char *err, size_t errlen);

/* One table file's bytes: verified (magic, CRC-32C, version, header,
 * sizes) and, when tables is not NULL, loaded into the table of its name,
 * whose spec must be the same leaf for leaf (and a sequence table's
 * settings the same), and whose shard the one that wrote the file: keys
 * name the shard that holds their item, so a checkpoint goes back into
 * the shard that wrote it only (an unsharded server's, shard 0, included).
 * fname names the file in errors: CHIME_ECORRUPT (a key of another shard
 * than the file's, too), CHIME_EINVAL (a table the config lacks, a spec,
 * setting or shard that differs, more items than the table holds),
 * CHIME_ENOTSUP (a sequence table in a version 1 file); a ragged item's
 * lengths are checked against the file's spec (bound, shared length, bytes
 * left) before any item goes in. *items gets the
 * items loaded. */
int chime__checkpoint_load_table(const uint8_t *p, size_t n,
                                 chime__table_t *const *tables,
                                 uint32_t ntables, const char *fname,
                                 uint64_t *items, char *err, size_t errlen);

/* A table file's magic and CRC-32C (its last 4 bytes, over the rest):
 * 0 and the CRC in *crc, or CHIME_ECORRUPT naming fname. */
int chime__checkpoint_check_crc(const uint8_t *p, size_t n, const char *fname,
                                uint32_t *crc, char *err, size_t errlen);
/* chime__checkpoint_load_table of a file whose CRC the caller checked
 * (chime__checkpoint_check_crc): a restore reads each file's bytes for
 * its CRC once, not once per pass. */
int chime__checkpoint_load_checked(const uint8_t *p, size_t n,
                                   chime__table_t *const *tables,
                                   uint32_t ntables, const char *fname,
                                   uint64_t *items, char *err, size_t errlen);

#endif
