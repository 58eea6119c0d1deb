/* Internal: the ring's shared-memory format, the bytes another process
 * reads. It is its own: fixed-width fields with static asserts on every
 * size and offset, and no public struct inside, so changing a public type
 * (chime_spec_t, chime_ring_layout_t) cannot change the format unnoticed;
 * the producer converts to these types at create and the consumer from
 * them at attach (segment.c). Any change here bumps CHIME_RING_VERSION.
 * docs/ring.md describes the format byte by byte. */
#ifndef CHIME_RING_FORMAT_H
#define CHIME_RING_FORMAT_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chime/spec.h"

/* "CHIMERNG" as a little-endian u64. */
#define CHIME_RING_MAGIC UINT64_C(0x474E52454D494843)
/* 3: chime_sample_info_t grew to 64 bytes. 4: the header holds only the
 * format's own types (before, it embedded chime_spec_t and
 * chime_ring_layout_t), and states the sample info record's size. 5: ragged
 * leaves (the dtype word's flag bits; a slot's offsets arrays). 6: the
 * record grew to 80 bytes (an item's policy version and staleness). */
#define CHIME_RING_VERSION 6u

/* Alignment of each leaf array inside a slot, and of slots. The slot page is
 * fixed (not the host's page size) so a slot's layout is the same on every
 * host; regions of the segment are aligned to the host's page size. */
#define CHIME_RING_ALIGN 64u
#define CHIME_RING_PAGE 4096u
#define CHIME_RING_CACHELINE 64u

/* The format's own limits; the public CHIME_MAX_* may not exceed them. */
#define CHIME__RING_FMT_LEAVES 64u
#define CHIME__RING_FMT_DIMS 8u
#define CHIME__RING_FMT_NAME 64u /* bytes, the NUL included */

/* --- segment format (see docs/ring.md) ---
 *
 *   [ header | producer words | publish queue ]   region 0, producer writes
 *   [ consumer words | release counters ]        region 1, consumer writes
 *   [ slot 0 | slot 1 | ... ]                     region 2, producer writes
 *
 * Each region starts on a host page. The consumer maps everything read-only
 * except region 1. All integers are the host's (little-endian on every
 * platform chime builds for); both sides are on one host. */

/* A leaf's dtype word: the CHIME_DTYPE_* value in its low byte, bit 8 set
 * for a ragged leaf, bits 16..23 its `shares` (1 + the index of the leaf
 * whose length it has), the rest zero. */
#define CHIME__RING_FMT_DTYPE_MASK 0xffu
#define CHIME__RING_FMT_RAGGED 0x100u
#define CHIME__RING_FMT_SHARES_SHIFT 16
#define CHIME__RING_FMT_DTYPE_RESERVED 0xff00fe00u

/* One leaf of the spec. */
typedef struct {
  char name[CHIME__RING_FMT_NAME];      /* NUL-terminated, zero after */
  uint32_t dtype;                       /* dtype word, see above */
  uint32_t ndim;                        /* 0..CHIME__RING_FMT_DIMS */
  uint64_t shape[CHIME__RING_FMT_DIMS]; /* 0 past ndim */
} chime__ring_fmt_leaf_t;

/* Written once by chime__ring_create(), read-only afterwards. Every byte is
 * determined by the spec, batch size, slot count, host page size and nonce,
 * and a consumer compares all of them with what it recomputes. */
typedef struct {
  /* magic and version stay at 0 and 8 in every version, so that a reader
   * can always say which version it was handed. */
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes; /* sizeof(chime__ring_header_t) */
  uint64_t total_bytes;  /* size of the memfd */
  uint64_t prod_offset;  /* chime__ring_prod_t, inside region 0 */
  uint64_t queue_offset; /* chime__ring_pubent_t[slots], inside region 0 */
  uint64_t ctrl_offset;  /* region 1 */
  uint64_t ctrl_bytes;
  uint64_t data_offset; /* region 2 */
  uint64_t data_bytes;  /* slots * slot_bytes */
  uint64_t page_size;   /* the host page size the regions are aligned to */
  uint8_t nonce[16];
  /* Where things are inside a slot (chime_ring_layout()). */
  uint32_t slots;
  uint32_t batch_size;
  uint64_t slot_bytes;
  uint64_t info_offset;       /* batch_size sample info records */
  uint32_t info_record_bytes; /* sizeof(chime_sample_info_t) */
  uint32_t nleaves;
  uint64_t leaf_offset[CHIME__RING_FMT_LEAVES];          /* 0 past nleaves */
  uint64_t leaf_bytes[CHIME__RING_FMT_LEAVES];           /* 0 past nleaves */
  chime__ring_fmt_leaf_t leaves[CHIME__RING_FMT_LEAVES]; /* zero past */
} chime__ring_header_t;

/* Producer-written words, on their own cache lines. */
typedef struct {
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint64_t pub; /* batches published */
  _Atomic uint32_t shutdown;                           /* sticky */
  _Atomic uint32_t generation;                         /* bumped by reclaim */
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint32_t waiting; /* in acquire() */
  _Atomic uint64_t wait_ns;
} chime__ring_prod_t;

/* A bit of the producer's `waiting` word: "and wake me when you take a
 * batch". Set only by a producer with a ready limit (chime__ring_set_
 * ready_max), whose consumer asked for one and so knows the bit; the rest
 * of the word is the free slots that wake it, as before. */
#define CHIME__RING_WAKE_ON_TAKE 0x80000000u

/* One publish: which slot holds batch `seq`. Entry seq % slots. */
typedef struct {
  _Atomic uint64_t seq;
  _Atomic uint32_t slot;
  uint32_t pad;
} chime__ring_pubent_t;

/* Consumer-written words. The producer writes here only to ring a bell and to
 * reclaim a dead consumer's leases; it never indexes with these values. */
typedef struct {
  /* Futex words. cons_bell: rung by publish, shutdown, disconnect.
   * prod_bell: rung by release and shutdown. */
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint32_t cons_bell;
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint32_t prod_bell;
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint64_t taken; /* cursor */
  _Atomic uint32_t waiting;                              /* in next() */
  _Atomic uint32_t leases;
  _Atomic uint32_t max_leases;
  _Atomic uint32_t pad;
  _Atomic uint64_t released;
  _Atomic uint64_t wait_ns;
  /* followed by _Atomic uint32_t release_count[slots] on its own line */
} chime__ring_ctrl_t;

#define CHIME__RING_RELCOUNT_OFFSET                                            \
  ((sizeof(chime__ring_ctrl_t) + CHIME_RING_CACHELINE - 1) &                   \
   ~(size_t)(CHIME_RING_CACHELINE - 1))

/* --- the format pinned: a change that moves a byte fails the build --- */

#define CHIME__FMT_AT(type, field, off)                                        \
  static_assert(offsetof(type, field) == (off),                                \
                #type "." #field " moved: bump CHIME_RING_VERSION")
#define CHIME__FMT_SIZE(type, size)                                            \
  static_assert(sizeof(type) == (size),                                        \
                #type " changed size: bump CHIME_RING_VERSION")

/* Both processes read and write these words: they must be plain lock-free
 * atomics of their own size, not a lock in one process's memory. */
static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
              "the ring needs lock-free 32- and 64-bit atomics");
static_assert(sizeof(_Atomic uint32_t) == 4 && sizeof(_Atomic uint64_t) == 8,
              "atomic words of the ring are plain words");

CHIME__FMT_SIZE(chime__ring_fmt_leaf_t, 136);
CHIME__FMT_AT(chime__ring_fmt_leaf_t, dtype, 64);
CHIME__FMT_AT(chime__ring_fmt_leaf_t, ndim, 68);
CHIME__FMT_AT(chime__ring_fmt_leaf_t, shape, 72);

CHIME__FMT_SIZE(chime__ring_header_t, 9856);
CHIME__FMT_AT(chime__ring_header_t, magic, 0);
CHIME__FMT_AT(chime__ring_header_t, version, 8);
CHIME__FMT_AT(chime__ring_header_t, header_bytes, 12);
CHIME__FMT_AT(chime__ring_header_t, total_bytes, 16);
CHIME__FMT_AT(chime__ring_header_t, prod_offset, 24);
CHIME__FMT_AT(chime__ring_header_t, queue_offset, 32);
CHIME__FMT_AT(chime__ring_header_t, ctrl_offset, 40);
CHIME__FMT_AT(chime__ring_header_t, ctrl_bytes, 48);
CHIME__FMT_AT(chime__ring_header_t, data_offset, 56);
CHIME__FMT_AT(chime__ring_header_t, data_bytes, 64);
CHIME__FMT_AT(chime__ring_header_t, page_size, 72);
CHIME__FMT_AT(chime__ring_header_t, nonce, 80);
CHIME__FMT_AT(chime__ring_header_t, slots, 96);
CHIME__FMT_AT(chime__ring_header_t, batch_size, 100);
CHIME__FMT_AT(chime__ring_header_t, slot_bytes, 104);
CHIME__FMT_AT(chime__ring_header_t, info_offset, 112);
CHIME__FMT_AT(chime__ring_header_t, info_record_bytes, 120);
CHIME__FMT_AT(chime__ring_header_t, nleaves, 124);
CHIME__FMT_AT(chime__ring_header_t, leaf_offset, 128);
CHIME__FMT_AT(chime__ring_header_t, leaf_bytes, 640);
CHIME__FMT_AT(chime__ring_header_t, leaves, 1152);

CHIME__FMT_SIZE(chime__ring_prod_t, 128);
CHIME__FMT_AT(chime__ring_prod_t, pub, 0);
CHIME__FMT_AT(chime__ring_prod_t, shutdown, 8);
CHIME__FMT_AT(chime__ring_prod_t, generation, 12);
CHIME__FMT_AT(chime__ring_prod_t, waiting, 64);
CHIME__FMT_AT(chime__ring_prod_t, wait_ns, 72);

CHIME__FMT_SIZE(chime__ring_pubent_t, 16);
CHIME__FMT_AT(chime__ring_pubent_t, seq, 0);
CHIME__FMT_AT(chime__ring_pubent_t, slot, 8);

CHIME__FMT_SIZE(chime__ring_ctrl_t, 192);
CHIME__FMT_AT(chime__ring_ctrl_t, cons_bell, 0);
CHIME__FMT_AT(chime__ring_ctrl_t, prod_bell, 64);
CHIME__FMT_AT(chime__ring_ctrl_t, taken, 128);
CHIME__FMT_AT(chime__ring_ctrl_t, waiting, 136);
CHIME__FMT_AT(chime__ring_ctrl_t, leases, 140);
CHIME__FMT_AT(chime__ring_ctrl_t, max_leases, 144);
CHIME__FMT_AT(chime__ring_ctrl_t, released, 152);
CHIME__FMT_AT(chime__ring_ctrl_t, wait_ns, 160);
static_assert(CHIME__RING_RELCOUNT_OFFSET == 192,
              "release counters moved: bump CHIME_RING_VERSION");

/* The sample info record is public (a batch's `info`) and read in place
 * from the slots, so it is part of the format too: changing it means a new
 * version, these asserts, and the stream Layout's info_record_bytes. */
CHIME__FMT_SIZE(chime_sample_info_t, 80);
CHIME__FMT_AT(chime_sample_info_t, key, 0);
CHIME__FMT_AT(chime_sample_info_t, probability, 8);
CHIME__FMT_AT(chime_sample_info_t, times_sampled, 16);
CHIME__FMT_AT(chime_sample_info_t, reserved, 20);
CHIME__FMT_AT(chime_sample_info_t, insert_time_ns, 24);
CHIME__FMT_AT(chime_sample_info_t, priority, 32);
CHIME__FMT_AT(chime_sample_info_t, table_size, 40);
CHIME__FMT_AT(chime_sample_info_t, episode_id, 48);
CHIME__FMT_AT(chime_sample_info_t, first_step, 56);
CHIME__FMT_AT(chime_sample_info_t, length, 60);
CHIME__FMT_AT(chime_sample_info_t, version, 64);
CHIME__FMT_AT(chime_sample_info_t, staleness, 72);

/* A spec the public types can hold must fit the format (the producer
 * converts at create); a consumer checks the other way at attach. */
static_assert(CHIME_MAX_LEAVES <= CHIME__RING_FMT_LEAVES &&
                  CHIME_MAX_DIMS <= CHIME__RING_FMT_DIMS &&
                  CHIME_MAX_NAME <= CHIME__RING_FMT_NAME,
              "the public spec limits outgrew the ring format");

#undef CHIME__FMT_AT
#undef CHIME__FMT_SIZE

#endif
