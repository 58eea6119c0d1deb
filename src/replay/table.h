/* A replay table: preallocated leaf-major storage, a sampler and a remover
 * (fifo, lifo, uniform, prioritized, min_heap, max_heap), items that leave
 * after max_times_sampled samples, blocking inserts (fifo sampler, full)
 * and blocking samples (below min_size). docs/replay.md. */
#ifndef CHIME_SERVER_TABLE_H
#define CHIME_SERVER_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chime/stats.h"
#include "ring/producer.h"
#include "common/span.h"
#include "replay/table_config.h"
#include "replay/dedupe.h"
#include "replay/sumtree.h"
#include "replay/steps.h"

typedef struct chime__table_s chime__table_t;

/* A table's stats: the fields of CHIME_TABLE_STATS_FIELDS
 * (chime/stats.h says what each counts), which the server reports
 * as they are, and what only the engine keeps. */
typedef struct {
#define CHIME__TABLE_STATS_FIELD(type, name, kind, unit, help) type name;
  CHIME_TABLE_STATS_FIELDS(CHIME__TABLE_STATS_FIELD)
#undef CHIME__TABLE_STATS_FIELD
  /* A sequence table's windows not made for want of a row. */
  uint64_t windows_dropped;
  /* What the sampler draws against (the selector's mass): an item's
   * sampling probability is its weight / mass. GetInfo's TableInfo.mass. */
  double mass;
  /* The rate limiter refuses the next sample although the table holds
   * min_size items: only inserts open it again. TableInfo.sample_blocked. */
  int sample_blocked;
  /* Ragged leaves: the bytes of their rows the table holds (the lengths
   * used, nothing padded), and what the allocator holds for them (each
   * allocation's usable size and its header): stored vs used. */
  uint64_t ragged_bytes, ragged_alloc_bytes;
  /* Compressed leaves, each (spec order): its index, level, and bytes
   * as inserted and as kept (its u32 stored size per item included), and
   * values kept raw so far (raw_bytes and stored_bytes summed over them,
   * and the plain leaves, are the table's). */
  uint32_t nzleaves;
  struct {
    uint32_t leaf;
    uint32_t level;
    uint64_t raw_bytes, stored_bytes, stored_raw;
  } zleaf[CHIME_MAX_LEAVES];
} chime__table_stats_t;

int chime__table_create(chime__table_t **out, const chime__table_config_t *cfg);
void chime__table_destroy(chime__table_t *t);
/* What a table of this config holds once full: every leaf's samples and
 * the per-item bookkeeping (key, insert time, priority, times sampled),
 * each array 64-byte aligned. UINT64_MAX on overflow. It maps as many rows
 * again (spares), touched only while rows are pinned beyond the capacity. */
uint64_t chime__table_bytes(const chime__table_config_t *cfg);

const chime__table_config_t *chime__table_config(const chime__table_t *t);
/* Bytes of one inserted sample: a step's for a sequence table. */
uint64_t chime__table_sample_bytes(const chime__table_t *t);
/* The spec of one item in a batch: the config's, or for a sequence table
 * each leaf as [sequence_length, *shape] and, when it pads, mask: u8[T]. */
const chime_spec_t *chime__table_item_spec(const chime__table_t *t);
void chime__table_get_stats(chime__table_t *t, chime__table_stats_t *out);
/* A config's compressed leaves as text, "obs:3,frames:5" (leaf:level in
 * spec order; "" for none), for GetInfo and chimectl. 0, or CHIME_EINVAL
 * when len is too short (buf then holds "" ). */
int chime__table_compress_text(const chime__table_config_t *cfg, char *buf,
                               size_t len);

/* Inserts `count` samples (sample-major, sample_bytes each) with keys
 * *first_key .. *first_key + count - 1, all or nothing: samplers see all of
 * them or none. priorities may be NULL (all 1.0); CHIME_EINVAL for one a
 * heap cannot order (NaN) or a prioritized table cannot weigh (negative,
 * infinite, or over CHIME__SUMTREE_MAX_VALUE once raised to the exponent:
 * chime__table_check_priorities says which). A table with a fifo
 * sampler waits until all count samples fit (CHIME_EINVAL when count exceeds
 * its capacity); in any other, each sample that finds the table full makes
 * its remover pick one item to leave among the table's and the sample
 * itself, as Reverb does (a picked sample takes its key and counts as
 * inserted and left, but never goes in). Returns CHIME_ESHUTDOWN, having
 * inserted nothing (items it evicted while waiting for a pinned row stay
 * evicted), when it would have to wait while *abort is non-zero or
 * once the table is closed. CHIME_EOVERFLOW, inserting nothing, when the
 * keys would run past the table's shard's last count (2^48 - 1,
 * common/key.h; a sequence table's step keys or window keys): keys never
 * wrap into another shard's.
 * dq (NULL, or writer 0: none) names the request's writer and seq: one the
 * table inserted before is not inserted again; it returns 0 with its
 * original *first_key and dq->resent set. One it cannot tell about is
 * CHIME_EEXIST, a different count for a known one CHIME_EINVAL, a writer
 * not remembered CHIME_EFORGOTTEN or CHIME_ERESOURCE (dedupe.h); all set
 * dq->refused. The check and the insert are one critical
 * section, so no two copies of a request both go in. */
int chime__table_insert(chime__table_t *t, const uint8_t *data, uint32_t count,
                        const double *priorities, uint64_t *first_key,
                        const atomic_int *abort, chime__dedupe_req_t *dq);
/* The same with the samples' bytes in pieces (a message's slices), read in
 * order: count * sample_bytes bytes in all, else CHIME_EINVAL. A table with
 * ragged leaves takes their lengths (lengths[j * nragged + k]: sample j's
 * k-th ragged leaf, chime__spec_ragged_bytes) and each sample's bytes at
 * them; a length past its bound or unlike the one it shares is
 * CHIME_EINVAL, nothing inserted. lengths NULL for a table without. */
int chime__table_insert_spans(chime__table_t *t, const chime__span_t *spans,
                              size_t nspans, uint32_t count,
                              const uint32_t *lengths, const double *priorities,
                              uint64_t *first_key, const atomic_int *abort,
                              chime__dedupe_req_t *dq);
/* The same without waiting: CHIME_EBUSY, having inserted nothing, when a
 * fifo table lacks room for all count samples. */
int chime__table_try_insert_spans(chime__table_t *t, const chime__span_t *spans,
                                  size_t nspans, uint32_t count,
                                  const uint32_t *lengths,
                                  const double *priorities, uint64_t *first_key,
                                  chime__dedupe_req_t *dq);

/* An insert's policy versions (docs/replay.md): n 0, every sample's is 0;
 * n 1, every sample's is v[0]; else one per sample (n == count, else
 * CHIME_EINVAL). */
typedef struct {
  const uint64_t *v;
  size_t n;
} chime__table_versions_t;
/* chime__table_insert_spans (nowait 0) or _try_insert_spans (1) with
 * versions (NULL: all 0). The newest version known rises to the
 * request's highest; with max_staleness, items it leaves too far behind
 * leave, and a sample that is itself too far behind takes its key and
 * counts as inserted and as left (removed_stale) but never goes in. */
int chime__table_insert_versioned(chime__table_t *t, const chime__span_t *spans,
                                  size_t nspans, uint32_t count,
                                  const uint32_t *lengths,
                                  const double *priorities,
                                  const chime__table_versions_t *versions,
                                  uint64_t *first_key, const atomic_int *abort,
                                  chime__dedupe_req_t *dq, int nowait);

/* A request's compressed leaves sent as the table stores them
 * (docs/protocol.md, "Compressed leaves"): the n leaves leaves[k]
 * (increasing leaf indices, each one the table compresses) come stored,
 * sizes[j * n + k] bytes of sample j each, in their places among the
 * sample's leaves: one zstd frame of exactly the leaf's bytes, or at the
 * leaf's own size the leaf raw. why (whylen bytes, may be NULL) gets a
 * refusal's sentence, naming the sample and the leaf. */
typedef struct {
  const uint32_t *leaves;
  size_t n;
  const uint32_t *sizes;
  char *why;
  size_t whylen;
  /* A group table's (docs/replay.md, "Admission filters"): room for
   * count bytes, or NULL; group j's byte becomes the filter reason
   * (chime__filter_kind_t) that dropped it, 0 when it went in (set once
   * the groups passed their checks). */
  uint8_t *drop;
} chime__table_stored_t;
/* chime__table_insert_versioned with leaves sent stored (st NULL, or n 0:
 * every leaf raw). Each stored leaf is checked before the table's lock and
 * copied as it is (never compressed again): a stored size past its leaf,
 * bytes that are not one whole zstd frame declaring and decompressing to
 * exactly the leaf's bytes (a bomb is refused by its declared size, before
 * anything is written or allocated for it), a leaf the table keeps raw, or
 * a sequence table is CHIME_EINVAL with st->why filled, nothing inserted. */
int chime__table_insert_stored(chime__table_t *t, const chime__span_t *spans,
                               size_t nspans, uint32_t count,
                               const uint32_t *lengths,
                               const double *priorities,
                               const chime__table_versions_t *versions,
                               uint64_t *first_key, const atomic_int *abort,
                               chime__dedupe_req_t *dq, int nowait,
                               const chime__table_stored_t *st);

/* An Insert call carries writer for the first time (its request seq) /
 * the call ended: chime__dedupe_bind() / _unbind() under the table's lock
 * (dedupe.h: a bound writer is never forgotten). owner: whose places it
 * counts against (chime__dedupe_bind_as; 0: nobody's). On CHIME_ERESOURCE,
 * *over_share (when not NULL) says whether the writer was kept out of
 * places owed to other owners rather than finding none at all. */
int chime__table_writer_bind(chime__table_t *t, uint64_t writer, uint64_t seq,
                             uint32_t owner, int *over_share);
void chime__table_writer_unbind(chime__table_t *t, uint64_t writer, int closed);
/* Durable key reservations, so that a restored table never issues a key
 * again (docs/operations.md, Checkpoints): before the table issues a key
 * whose count is `reserved` or more (item or step key), it calls
 * fn(ctx, t, upto) under its lock with upto well past what it needs
 * (CHIME__KEY_RESERVE_AHEAD more); fn makes sure a restore will start
 * keys at upto or later (chimed: an fsynced file) and returns 0, or an
 * error the insert fails with, nothing of it inserted. fn NULL: keys are
 * issued freely (the default). */
#define CHIME__KEY_RESERVE_AHEAD (UINT64_C(1) << 20)
typedef int (*chime__table_reserve_fn)(void *ctx, const chime__table_t *t,
                                       uint64_t upto);
void chime__table_set_key_reserve(chime__table_t *t, chime__table_reserve_fn fn,
                                  void *ctx, uint64_t reserved);
/* Key counts the table issues next, item keys and (a sequence table) step
 * keys: at least `count` from now on (a restore: what the old process may
 * have issued). Never lowers them. */
void chime__table_keys_from(chime__table_t *t, uint64_t count);
/* The count of the table's next key (the larger of item and step keys). */
uint64_t chime__table_key_pos(chime__table_t *t);

/* Whether the table was restored from a checkpoint: it remembers no writer
 * from before, and refuses unknown writers past their first request
 * (dedupe.h, chime__dedupe_restored). */
int chime__table_writers_restored(chime__table_t *t);

/* A learner's policy version (docs/replay.md, "Policy versions"): the
 * newest version the table knows rises to it (a lower one changes
 * nothing: it only rises), and with max_staleness the items it leaves
 * too far behind leave at once. *newest (may be NULL): the newest known
 * after. */
int chime__table_set_version(chime__table_t *t, uint64_t version,
                             uint64_t *newest);

/* Fills the batch_size samples of a ring slot (leaf-major, layout from the
 * ring) once the table holds min_size items (and batch_size items when
 * sampling removes them: fifo, max_times_sampled; so a batch never runs dry
 * halfway). Samples are drawn one by one: an item that reaches
 * max_times_sampled leaves before the next draw. Returns
 * CHIME_ESHUTDOWN when *stop becomes non-zero or the table closes. */
int chime__table_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                        chime__ring_wslot_t *slot, const atomic_int *stop);

/* A sampler to tell when a table that lacked items may have enough. */
typedef struct chime__table_waiter_s {
  void (*fn)(struct chime__table_waiter_s *w);
  struct chime__table_waiter_s *next;
  int queued;          /* on the table's list (table lock) */
  int rate;            /* it waits for the rate limiter, not for items */
  uint64_t rate_since; /* when it began to (table lock), 0: it does not */
} chime__table_waiter_t;

/* chime__table_sample without waiting: CHIME_EBUSY when the table lacks
 * items, with w queued to be called once (without the table's lock, from
 * the thread that added items or closed the table) when that may have
 * changed. CHIME_ESHUTDOWN once the table is closed. */
int chime__table_try_sample(chime__table_t *t, const chime_ring_layout_t *lay,
                            chime__ring_wslot_t *slot,
                            chime__table_waiter_t *w);
/* Takes w off the table's list if it is queued. */
void chime__table_unwait(chime__table_t *t, chime__table_waiter_t *w);

/* 0, or CHIME_EINVAL with the first of prio[0, n) this table's selectors
 * cannot use and why in err: NaN (a heap, a sum tree), negative or
 * infinite, or (a sum tree) priority^exponent over
 * CHIME__SUMTREE_MAX_VALUE, the most an item may weigh so that the sum
 * over every row stays finite. */
int chime__table_check_priorities(const chime__table_t *t, const double *prio,
                                  size_t n, char *err, size_t errlen);

typedef struct {
  uint32_t updated, deleted, unknown;
} chime__table_mutated_t;

/* Entries (updates, then deletes) a mutation applies per hold of the
 * table's lock: about a millisecond's worth. */
#define CHIME__TABLE_MUTATE_SLICE 1024u

/* 0, or CHIME_EINVAL with the first of keys[0, n) that another shard
 * issued (its shard bits, common/key.h, are not the table's shard) in
 * *bad: no key of this table's could be that item's. */
int chime__table_check_keys(const chime__table_t *t, const uint64_t *keys,
                            size_t n, uint64_t *bad);

/* MutatePriorities: new priorities for the live items with keys (nupdates
 * of each), then deletes. Keys of this table's shard that are not live
 * (never inserted, gone, or in a batch given back) are counted as unknown.
 * CHIME_EINVAL, changing nothing, for a key of another shard
 * (chime__table_check_keys: an update sent to the wrong server is an
 * error, never a silent no-op), or a priority that is NaN, infinite or
 * negative, or whose priority^exponent is over CHIME__SUMTREE_MAX_VALUE (a
 * prioritized table). Applied in slices of CHIME__TABLE_MUTATE_SLICE entries,
 * the lock let go between two (a thread that queued for it meanwhile goes
 * first), so inserts and samples wait for a slice, not the whole mutation: a
 * batch sampled meanwhile may see the first slices' changes and not the
 * rest's, and a key an insert or another mutation adds or removes
 * meanwhile counts as what it is when its entry's turn comes. */
int chime__table_mutate(chime__table_t *t, const uint64_t *keys,
                        const double *priorities, size_t nupdates,
                        const uint64_t *deletes, size_t ndeletes,
                        chime__table_mutated_t *out);
/* Tests: fn(arg) runs at each break between a mutation's slices, the
 * table's lock held (it must not call into t); NULL: none. And how many
 * threads wait for the table's lock now. */
void chime__table_set_mutate_hook(chime__table_t *t, void (*fn)(void *),
                                  void *arg);
unsigned chime__table_lock_waiters(const chime__table_t *t);

/* The rows of one batch sampled without copying them all (stream mode,
 * which sends them from the table's memory): they stay pinned, so never
 * overwritten, until chime__table_unpin. rows holds batch_size entries
 * (the caller's); n and given_back are the table's, under its lock. */
typedef struct {
  uint32_t *rows;
  /* Each sample's times sampled as drawn (batch_size entries, the
   * caller's; NULL when the batch is never given back): what give back
   * reads instead of the slot's info, which a learner may have written. */
  uint32_t *times;
  uint32_t n; /* rows pinned now; 0: none */
  int given_back;
} chime__table_pins_t;

/* chime__table_try_sample keeping the rows pinned in pins (which must hold
 * none): of each leaf, only runs of consecutive rows shorter than copy_min
 * bytes are copied into the slot; the rest is read from the table
 * (chime__table_spans). The info is filled either way. */
int chime__table_try_sample_pinned(chime__table_t *t,
                                   const chime_ring_layout_t *lay,
                                   chime__ring_wslot_t *slot,
                                   chime__table_pins_t *pins, uint64_t copy_min,
                                   chime__table_waiter_t *w);
/* Lets the rows go (idempotent: pins->n becomes 0). */
void chime__table_unpin(chime__table_t *t, chime__table_pins_t *pins);
/* The bytes [off, off + len) of a batch sampled with pins into the slot at
 * slot_base, as they would be in the slot: spans of table rows (runs of
 * copy_min bytes or more), of the slot (copied runs, the info) and of
 * zeros (padding between leaves), touching spans merged. Writes at most
 * max; returns how many, 0 when max is too small. Lock-free: the rows are
 * pinned. 2 * len / copy_min + 2 * nleaves + 4 spans always suffice. */
size_t chime__table_spans(const chime__table_t *t,
                          const chime_ring_layout_t *lay,
                          const chime__table_pins_t *pins,
                          const uint8_t *slot_base, uint64_t copy_min,
                          uint64_t off, uint64_t len, chime__span_t *out,
                          size_t max);
/* A batch sampled with pins (pins->times set) that its learner never
 * finished: the items it took out of the table (fifo, max_times_sampled)
 * come back from its pinned rows as the oldest, with their bytes, keys,
 * priorities, versions and insert times (a window: its episode, first
 * step and length) and their times sampled as before the batch (an item
 * the batch drew more than once: as before its first draw), in the
 * batch's order (so give a learner's batches back newest first). A fifo
 * table samples them before its own; they count against the capacity
 * meanwhile. What took nothing out (a uniform table's samples), items now
 * too far behind the newest version (counted removed_stale) and windows
 * whose steps left meanwhile stay gone: their rows are freed at the
 * unpin. Nothing is read from the slot, which a learner may have written
 * (shm). Once per pinning: a second call, one after chime__table_unpin,
 * or one on pins without times does nothing. */
void chime__table_give_back_pinned(chime__table_t *t,
                                   const chime_ring_layout_t *lay,
                                   chime__table_pins_t *pins);

/* Wakes every waiter so it re-reads its abort/stop flag. */
void chime__table_wake(chime__table_t *t);
/* Makes every current and future wait return CHIME_ESHUTDOWN. */
void chime__table_close(chime__table_t *t);

/* --- checkpoints (ckpt_format.c) --- */

/* A consistent view of a table's items, taken in one short hold of its
 * lock: the items oldest first with their bookkeeping copied out, and
 * their rows pinned, so their bytes stay as they were (no insert reuses a
 * pinned row; spare rows stand in) while a checkpoint writes them without
 * the lock. The counts are the table's at that instant. A sequence
 * table's view also has each window's first step, episode, index and
 * length, and the step store's blocks, pinned (steps.h): an insert that
 * would reuse one waits until the checkpoint let it go, oldest first. Its
 * arrays (16 bytes an item, 16 a block) are one private mapping, given
 * back to the system at release. */
typedef struct {
  uint64_t count; /* items */
  uint32_t *rows; /* pinned, oldest first */
  double *prio;
  uint32_t *times;
  uint64_t next_key, inserts, samples, left, left_times, rng;
  uint64_t newest_version; /* the newest policy version the table knew */
  uint64_t pace_ahead;     /* samples ahead of the learner (pacing) */
  uint64_t pause_ns;       /* how long the lock was held for the view */
  uint64_t unpinned;       /* items [0, unpinned) already let go */
  /* A sequence table's (zero for a plain one). */
  chime__steps_view_t steps;
  double max_prio;
  uint64_t step_key, windows_dropped;
  /* The writers' windows (dedupe.h) as they were in the same hold: the
   * requests they remember are those whose items went in before it. */
  chime__dedupe_copy_t writers;
  void *map;
  size_t map_len;
} chime__table_view_t;

/* Fills *v (CHIME_ENOMEM). Release with chime__table_view_release.
 * While it is held, a plain table's insert that would take a spare row
 * while rows the view holds are dead waits for them to be let go
 * (chime__table_view_unpin), so the holder must not insert into t. */
int chime__table_view(chime__table_t *t, chime__table_view_t *v);
/* Lets a sequence table's view's blocks [0, upto) go (positions, oldest
 * first), once their steps are written: inserts waiting to reuse them go
 * on. */
void chime__table_view_unpin_steps(chime__table_t *t, chime__table_view_t *v,
                                   uint32_t upto);
/* What the view's item i's row holds besides: written only when a row is
 * filled, and a pinned row is never filled, so these are not copied under
 * the lock but read here, while item i is pinned (before an unpin that
 * lets it go). A sequence table's window: its first step's slot, episode,
 * index and length (0 for a plain table); its policy version. */
typedef struct {
  uint64_t key, itime, episode, version;
  uint32_t slot, first, len;
} chime__table_view_item_t;
void chime__table_view_item(const chime__table_t *t,
                            const chime__table_view_t *v, uint64_t i,
                            chime__table_view_item_t *out);
/* Leaf l's bytes of the view's item i: stable until the release. */
const uint8_t *chime__table_view_leaf(const chime__table_t *t,
                                      const chime__table_view_t *v, uint64_t i,
                                      uint32_t l);
/* A ragged table's item i (view pinned): its ragged leaves' lengths in
 * *lengths (chime_spec_ragged of them, spec order) and their rows back to
 * back, only those used (NULL when every length is 0); NULL and *lengths
 * NULL for a table without ragged leaves. Stable until the release. */
/* Item i's compressed leaf l (chime__table_compressed): its stored bytes
 * as the table keeps them (a zstd frame, or the leaf raw when *stored is
 * the leaf's size). */
const uint8_t *chime__table_view_z(const chime__table_t *t,
                                   const chime__table_view_t *v, uint64_t i,
                                   uint32_t l, uint32_t *stored);
/* Item i's sample as an insert carries it (leaves in spec order, each at
 * its leaf's bytes; compressed leaves decompressed) into dst, of
 * chime__table_sample_bytes(t) bytes: an export (docs/datasets.md). A
 * plain table without ragged leaves (else CHIME_ENOTSUP); CHIME_ECORRUPT
 * for a stored leaf that does not decompress (never: inserts check). */
int chime__table_view_sample(const chime__table_t *t,
                             const chime__table_view_t *v, uint64_t i,
                             uint8_t *dst);
/* Whether t keeps item leaf l compressed (docs/replay.md, "Compressed
 * leaves"; a sequence table: its steps' leaf l). */
int chime__table_compressed(const chime__table_t *t, uint32_t l);
const uint8_t *chime__table_view_ragged(const chime__table_t *t,
                                        const chime__table_view_t *v,
                                        uint64_t i, const uint32_t **lengths);
/* Unpins the rows (a bounded number per lock hold) and frees *v. */
void chime__table_view_release(chime__table_t *t, chime__table_view_t *v);
/* Lets the rows of items [0, upto) go early, once their bytes are written:
 * the items leave oldest first, like the view's order, so a checkpoint
 * that does this as it goes holds few rows whose items left, and inserts
 * during it take few spare rows. Their bytes may change afterwards. */
void chime__table_view_unpin(chime__table_t *t, chime__table_view_t *v,
                             uint64_t upto);

/* Restore, into a table no one uses yet: one item after the table's newest
 * (sample: its leaves' bytes in spec order), with its key, insert time,
 * priority and times sampled. CHIME_EINVAL for a priority the table cannot
 * order or weigh, or a key already live; CHIME_ENOMEM when every row is
 * taken. */
int chime__table_restore_item(chime__table_t *t, uint64_t key, uint64_t itime,
                              double prio, uint32_t times,
                              const uint8_t *sample);
/* The same with the item's policy version (the other: 0). */
int chime__table_restore_item_version(chime__table_t *t, uint64_t key,
                                      uint64_t itime, double prio,
                                      uint32_t times, uint64_t version,
                                      const uint8_t *sample);
/* The same for a table with ragged leaves: lengths (one per ragged leaf,
 * spec order; NULL for a table without) and sample's leaves in spec order,
 * each ragged one at its length. CHIME_EINVAL too for a length past its
 * bound or unlike the one it shares (nothing read past them). A table
 * with compressed leaves takes each of those as the checkpoint keeps it:
 * its u32 stored size (little-endian, at most the leaf's bytes) and its
 * stored bytes, kept as they are; CHIME_ECORRUPT for one that is not a
 * zstd frame of exactly the leaf's size (or the leaf raw). */
int chime__table_restore_item_ragged(chime__table_t *t, uint64_t key,
                                     uint64_t itime, double prio,
                                     uint32_t times, uint64_t version,
                                     const uint32_t *lengths,
                                     const uint8_t *sample);
/* After the items: the newest version the table knew; items it leaves
 * more than max_staleness behind leave (removed_stale). */
void chime__table_restore_version(chime__table_t *t, uint64_t newest);
/* The samples written ahead of the learner's progress (pacing, pace.c),
 * after chime__table_restore_version: the bound holds across a restore. */
void chime__table_restore_pace(chime__table_t *t, uint64_t ahead);
/* A sequence table's step store, to restore its blocks into (steps.h);
 * NULL for a plain table. */
chime__steps_t *chime__table_steps(chime__table_t *t);
/* A sequence table's window, after its blocks: an item after the table's
 * newest whose first step is at slot (a restored position's). CHIME_EINVAL
 * for a window the steps do not hold (chime__steps_check_window), a key
 * already live or a priority the table cannot use; CHIME_ENOMEM when every
 * row is taken. */
int chime__table_restore_window(chime__table_t *t, uint64_t key, uint64_t itime,
                                double prio, uint32_t times, uint32_t slot,
                                uint64_t episode, uint32_t first, uint32_t len);
/* And its counters: steps appended since start (the next step key), the
 * largest priority seen (initial_priority "max"), windows dropped. */
void chime__table_restore_seq_counts(chime__table_t *t, uint64_t step_key,
                                     double max_prio, uint64_t windows_dropped);
/* Spare rows (beyond the capacity) that were touched and are free again
 * give their pages back to the system (a stream's pins or items given
 * back make inserts take them for a while); a few holds of the lock,
 * scanning only the spare rows touched since the last call. */
void chime__table_trim_spares(chime__table_t *t);
/* Then the counters: the next key, the rate limiter's counts, the items
 * that left and their times sampled, the random state (0: kept). The
 * table is restored from then on: writers it does not know are refused
 * past their first request (chime__dedupe_restored). */
void chime__table_restore_counts(chime__table_t *t, uint64_t next_key,
                                 uint64_t inserts, uint64_t samples,
                                 uint64_t left, uint64_t left_times,
                                 uint64_t rng);
/* After the counts: the writers' windows a checkpoint kept (a view's
 * writers, read back), each idle from now, so that a request resent after
 * the restore whose items the checkpoint holds is acked with its first key
 * again, not inserted twice; an unknown writer is refused past its first
 * request only if c->forgot (or when the config's max_writers hold fewer
 * writers than c: the first ones are kept). 0, or dedupe_load's
 * CHIME_EEXIST, CHIME_EINVAL, CHIME_ENOMEM; *loaded: the writers put
 * back. */
int chime__table_restore_writers(chime__table_t *t,
                                 const chime__dedupe_copy_t *c,
                                 uint32_t *loaded);

#endif
