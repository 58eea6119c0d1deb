/* A sequence table's step store: episode steps in blocks of K steps, the
 * oldest block evicted first, and the windows of sequence_length steps the
 * episodes complete (docs/sequences.md).
 *
 * Each step is stored once, leaf-major (one array per leaf, indexed by a
 * step slot = block * K + offset). Each writer appends into its own
 * current block (its lane: a new episode goes on where the last ended), so
 * an episode's steps are contiguous within a block, and a lane's blocks
 * are linked oldest to newest. Blocks are
 * taken round a ring, so the oldest block is always the next one reused:
 * the steps that leave are the oldest. A window of T consecutive steps is
 * then at most T / K + 2 contiguous runs.
 *
 * A step starts at most one window, so a block lists the items starting in
 * it: evicting the block makes exactly those items leave (items that start
 * earlier in the same episode were in older blocks, gone already; items
 * that start later only cover later, newer steps).
 *
 * Not thread-safe: the table calls it under its lock. */
#ifndef CHIME_SERVER_STEPS_H
#define CHIME_SERVER_STEPS_H

#include <stdint.h>

#include "chime/spec.h"
#include "replay/table_bytes.h"

typedef struct chime__steps_s chime__steps_t;

#define CHIME__STEPS_NONE UINT32_MAX

/* A window that became complete (or, padded, at an episode's end). */
typedef struct {
  uint64_t episode; /* episode id, from 1 */
  uint32_t slot;    /* step slot of its first step */
  uint32_t first;   /* index of its first step in the episode */
  uint32_t len;     /* valid steps: sequence_length unless padded */
} chime__window_t;

typedef struct {
  /* A window became an item: returns the item id to list with its first
   * step (CHIME__STEPS_NONE: none was made). */
  uint32_t (*window)(void *ctx, const chime__window_t *w);
  /* The block holding item's first step leaves: the item must leave. */
  void (*evict)(void *ctx, uint32_t item);
  void *ctx;
} chime__steps_cb_t;

typedef struct {
  uint64_t capacity_steps;
  uint32_t sequence_length, stride; /* 1 <= stride <= sequence_length */
  int pad;               /* an uncovered tail makes one padded window */
  uint32_t max_episodes; /* lanes (writers); the least recently used goes */
  /* Per leaf, nonzero: the leaf is kept compressed (zleaf.h), each step's
   * compressed leaves in one allocation of their own handed to append;
   * NULL: none is. Only which leaves are read (the table compresses). */
  const uint8_t *compress;
  /* The store's mapped part (chime__steps_map_bytes bytes, 64-byte
   * aligned) in the table's file (table_file.h), the caller's to unmap;
   * NULL: anonymous memory of the store's own. reopen: it holds the
   * store of a process before (killed or not), opened as it was
   * (chime__steps_create says how); else it is zeros. */
  void *mem;
  int reopen;
  /* With mem: each step's compressed leaves in an extent of this bytes
   * file (table_bytes.h; after chime__tbl_bytes_reserve for them), where
   * the extents are in the mapped part; zfile says so before it is open
   * (chime__steps_map_bytes). NULL / 0: malloc'd. */
  int zfile;
  chime__tbl_bytes_t *bytes;
} chime__steps_config_t;

typedef struct {
  uint64_t steps;              /* stored now */
  uint64_t episodes;           /* open now */
  uint64_t bytes;              /* of step storage (leaves only) */
  uint64_t episodes_abandoned; /* ended because too many were open */
  uint64_t steps_evicted;
  /* Compressed leaves of the steps stored: their bytes raw, as stored
   * (the sizes included), and the leaves kept raw (did not shrink). */
  uint64_t z_raw, z_stored, z_kept_raw;
} chime__steps_stats_t;

/* Steps per block: 32, or up to 256 so a block holds 32 KiB of small
 * steps; fewer for small stores so that there are at least 16 blocks. */
uint32_t chime__steps_block(uint64_t capacity_steps, uint64_t step_bytes);
/* Bytes a store of this spec and config maps (leaves and bookkeeping),
 * UINT64_MAX on overflow. */
uint64_t chime__steps_bytes(const chime_spec_t *spec,
                            const chime__steps_config_t *cfg);

/* The most windows a store of this spec and config can hold at once: with
 * pad, one per step slot (episodes of one step each make a padded window
 * each); else those of one episode filling every block, T steps long
 * every stride steps: (slots - T) / stride + 1, 0 when T exceeds the
 * slots. (Episodes pay T - stride steps each, so one is the most.) */
uint64_t chime__steps_max_windows(const chime_spec_t *spec,
                                  const chime__steps_config_t *cfg);

/* Bytes of the store's mapped part: its header, the raw leaves and the
 * per-block and per-step records; UINT64_MAX on overflow. */
uint64_t chime__steps_map_bytes(const chime_spec_t *spec,
                                const chime__steps_config_t *cfg);

/* With cfg->reopen: the blocks in use, their steps and the links between
 * a lane's blocks are taken as the mapping holds them (no lane is open:
 * episodes that were open are over, as after a restore); a link whose
 * ends disagree (a process killed while taking a block) is cut. No step
 * starts an item until chime__steps_relist. CHIME_ECORRUPT for a header
 * or block out of range. */
int chime__steps_create(chime__steps_t **out, const chime_spec_t *spec,
                        const chime__steps_config_t *cfg,
                        const chime__steps_cb_t *cb);
void chime__steps_destroy(chime__steps_t *s); /* NULL-safe */

/* The lane of writer, a new one when it has none (when max_episodes lanes
 * exist one is dropped: the least recently used with no open episode, else
 * the least recently used, whose open episode is abandoned without a padded
 * window). Its next append opens an episode
 * when none is open. Returns a handle valid until the next call. */
uint32_t chime__steps_lane(chime__steps_t *s, uint64_t writer);
/* Appends one step of policy version `version` (its writer's) to lane
 * ep's open episode (a new one if none is open):
 * read(ctx, dst, n) is called once per
 * leaf, in spec order, to write its n bytes at dst (dst NULL: a
 * compressed leaf, its n bytes skipped). z: the step's compressed leaves
 * (zleaf.h: sizes, then stored bytes, in spec order; malloc'd), taken;
 * NULL without compressed leaves. Evicts the oldest
 * block when every block is taken (cb->evict for its items), then makes
 * the window the step completes (cb->window). */
void chime__steps_append(chime__steps_t *s, uint32_t ep, uint64_t version,
                         void (*read)(void *ctx, uint8_t *dst, uint64_t n),
                         void *ctx, uint8_t *z);
/* In a store whose compressed steps are in a bytes file: room for n
 * steps' compressed leaves z (NULL entries: none) before they are
 * appended, so a full disk refuses the insert with nothing stored. 0, or
 * the bytes file's error (CHIME_ERESOURCE, the thread's detail). */
int chime__steps_z_reserve(chime__steps_t *s, uint8_t *const *z, uint32_t n);
/* Ends lane ep's open episode: with pad, an uncovered tail (or a short
 * episode) makes one padded window. The lane's next episode goes on in
 * the same block. */
void chime__steps_end(chime__steps_t *s, uint32_t ep);
/* An item left by other means (sampled out, deleted): its first step no
 * longer lists it. */
void chime__steps_forget(chime__steps_t *s, uint32_t slot);
/* The slot of step `first` of episode `episode` while it is stored and
 * starts no item (a window that left, to come back: given back), else
 * CHIME__STEPS_NONE. */
uint32_t chime__steps_find(const chime__steps_t *s, uint64_t episode,
                           uint32_t first);
/* The item starting at slot again (a window found with chime__steps_find
 * came back). */
void chime__steps_relist(chime__steps_t *s, uint32_t slot, uint32_t item);

/* Whether count more steps of lane ep can go in now: the blocks they
 * would take (the oldest, when every block holds steps) are not pinned. */
int chime__steps_room(const chime__steps_t *s, uint32_t ep, uint32_t count);

/* Pins the block of a window's first step (its item is live): no append
 * reuses it until chime__steps_unpin (an append that would, waits:
 * chime__steps_room). Blocks are reused oldest first, so the window's
 * later, newer blocks are safe too. */
void chime__steps_pin(chime__steps_t *s, uint32_t slot);
void chime__steps_unpin(chime__steps_t *s, uint32_t slot);
/* Copies a pinned window's len steps from slot into dst[l] for each leaf
 * l (sequence_length steps long), then zeros up to sequence_length steps.
 * A compressed leaf's steps are decompressed each at its place (a frame
 * that does not say the leaf's size is never written: zeros there).
 * Needs no lock: it reads only the window's steps and the links between
 * its full blocks, which no append changes while the first is pinned.
 * A leaf whose dst[l] is NULL is left out (chime__steps_copy_stored). */
void chime__steps_copy(const chime__steps_t *s, uint32_t slot, uint32_t len,
                       uint8_t *const *dst);
/* A pinned window's compressed leaf l as its steps are stored, for a
 * stream-mode learner that decompresses them (docs/protocol.md, stream
 * mode, "A window's frames"): at dst, sequence_length u32 little-endian
 * stored sizes (0 for the steps past len: padding), then the len steps'
 * stored bytes back to back. The bytes written (at most the leaf's
 * bytes and 4 a step). Needs no lock, as chime__steps_copy. */
uint64_t chime__steps_copy_stored(const chime__steps_t *s, uint32_t slot,
                                  uint32_t len, uint32_t l, uint8_t *dst);

void chime__steps_get_stats(const chime__steps_t *s, chime__steps_stats_t *out);

/* --- checkpoints (ckpt_format.c, through the table's view) --- */

/* The blocks holding steps at one instant, oldest first: position i is
 * block block[i]; bn[i] steps were in it then, and its lane's links are
 * given as positions (CHIME__STEPS_NONE: none). The blocks are pinned
 * (chime__steps_view_take), so no append reuses them and their first
 * bn[i] steps stay as they were while a checkpoint writes them without
 * the lock; appends meanwhile only add steps after those, in new blocks
 * or in the free end of a lane's newest block. */
typedef struct {
  uint32_t k, nblocks;     /* the store's geometry */
  uint32_t oldest, nused;  /* block of position 0; positions */
  uint32_t *block, *bn;    /* nblocks entries each (the caller's) */
  uint32_t *bnext, *bprev; /* likewise */
  uint32_t unpinned;       /* positions [0, unpinned) let go */
  uint64_t next_episode, abandoned, evicted;
} chime__steps_view_t;

uint32_t chime__steps_nblocks(const chime__steps_t *s);
uint32_t chime__steps_k(const chime__steps_t *s);
/* Fills v (its four arrays the caller's, nblocks entries) and pins every
 * block holding steps; under the table's lock. */
void chime__steps_view_take(chime__steps_t *s, chime__steps_view_t *v);
/* Lets positions [v->unpinned, upto) go; under the table's lock. */
void chime__steps_view_unpin(chime__steps_t *s, chime__steps_view_t *v,
                             uint32_t upto);
/* Position pos's steps, stable while it is pinned: episode ids, indices
 * and policy versions (bn[pos] each), and leaf l's bytes (bn[pos] steps,
 * contiguous) in leaf[l]. */
void chime__steps_view_block(const chime__steps_t *s,
                             const chime__steps_view_t *v, uint32_t pos,
                             const uint64_t **ep, const uint32_t **idx,
                             const uint64_t **ver, const uint8_t **leaf);
/* Position pos's steps' compressed leaves (bn[pos] allocations, zleaf.h),
 * stable while it is pinned; NULL without compressed leaves. */
uint8_t *const *chime__steps_view_z(const chime__steps_t *s,
                                    const chime__steps_view_t *v, uint32_t pos);
/* The store's compressed leaves: their count and the k-th's index. */
uint32_t chime__steps_nz(const chime__steps_t *s);
uint32_t chime__steps_zleaf(const chime__steps_t *s, uint32_t k);
/* A step slot as a position-based slot (pos * k + offset), for a window's
 * first step. */
uint32_t chime__steps_view_slot(const chime__steps_view_t *v, uint32_t slot);

/* Restore into an empty store no one uses yet (the blocks become
 * positions 0 .. nused - 1, the oldest first; no lane is open: episodes
 * that were open are over, their complete windows kept):
 * begin, then each block in order, then finish, then the windows.
 * Each returns CHIME_EINVAL for what does not fit or hang together. */
int chime__steps_restore_begin(chime__steps_t *s, uint32_t nused);
/* leaf[l]: a raw leaf's bn steps; z: bn steps' compressed leaves (each
 * checked already, zleaf.h), taken on success (the caller's to free on
 * an error), NULL without compressed leaves. */
int chime__steps_restore_block(chime__steps_t *s, uint32_t pos, uint32_t bn,
                               uint32_t bnext, uint32_t bprev,
                               const uint64_t *ep, const uint32_t *idx,
                               const uint64_t *ver, const uint8_t *const *leaf,
                               uint8_t **z);
int chime__steps_restore_finish(chime__steps_t *s, uint64_t next_episode,
                                uint64_t abandoned, uint64_t evicted);
/* Whether a window of len steps of episode ep from index first can start
 * at slot (stored, contiguous along its lane, starting no item yet):
 * 0 or CHIME_EINVAL. The caller lists it with chime__steps_relist. */
int chime__steps_check_window(const chime__steps_t *s, uint32_t slot,
                              uint64_t ep, uint32_t first, uint32_t len);

/* The policy version of the step at slot (its writer's at the append;
 * a restored step's from the checkpoint, 0 from one before version 5). */
uint64_t chime__steps_version(const chime__steps_t *s, uint32_t slot);

#endif
