/* Internal: the ring's segment format, the ring object, and hooks for the
 * pinning code (src/ring/pin.c). Nothing here is public API. */
#ifndef CHIME_RING_INTERNAL_H
#define CHIME_RING_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chime/ring.h"
#include "ring/producer.h"

/* Alignment of each leaf array inside a slot, and of slots. The slot page is
 * fixed (not the host's page size) so a slot's layout is the same on every
 * host; regions of the segment are aligned to the host's page size. */
#define CHIME_RING_ALIGN 64u
#define CHIME_RING_PAGE 4096u
#define CHIME_RING_CACHELINE 64u

/* "CHIMERNG" as a little-endian u64. */
#define CHIME_RING_MAGIC UINT64_C(0x474E52454D494843)
#define CHIME_RING_VERSION 3u /* 3: chime_sample_info_t grew to 64 bytes */

/* Rounds v up to a power-of-two align. CHIME_EOVERFLOW if it wraps. */
int chime__align_up(uint64_t v, uint64_t align, uint64_t *out);

/* Host page size, at least CHIME_RING_PAGE. */
uint64_t chime__page_size(void);

/* --- segment format (see docs/ring.md) ---
 *
 *   [ header | producer words | publish queue ]   region 0, producer writes
 *   [ consumer words | release counters ]        region 1, consumer writes
 *   [ slot 0 | slot 1 | ... ]                     region 2, producer writes
 *
 * Each region starts on a host page. The consumer maps everything read-only
 * except region 1. */

/* Written once by chime__ring_create(), read-only afterwards. */
typedef struct {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes; /* sizeof(chime__ring_header_t) */
  uint64_t total_bytes;  /* size of the memfd */
  uint64_t prod_offset;  /* chime__ring_prod_t, inside region 0 */
  uint64_t queue_offset; /* chime__ring_pubent_t[slots], inside region 0 */
  uint64_t ctrl_offset;  /* region 1 */
  uint64_t ctrl_bytes;
  uint64_t data_offset; /* region 2 */
  uint64_t data_bytes;
  uint64_t page_size; /* the host page size the regions are aligned to */
  uint8_t nonce[16];
  chime_ring_layout_t layout;
  chime_spec_t spec;
} chime__ring_header_t;

/* Producer-written words, on their own cache lines. */
typedef struct {
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint64_t pub; /* batches published */
  _Atomic uint32_t shutdown;                           /* sticky */
  _Atomic uint32_t generation;                         /* bumped by reclaim */
  _Alignas(CHIME_RING_CACHELINE) _Atomic uint32_t waiting; /* in acquire() */
  _Atomic uint64_t wait_ns;
} chime__ring_prod_t;

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

/* Offsets and sizes of the three regions for a layout; what the consumer
 * recomputes and compares against the header. */
typedef struct {
  uint64_t prod_offset, queue_offset;
  uint64_t ctrl_offset, ctrl_bytes;
  uint64_t data_offset, data_bytes;
  uint64_t total_bytes;
} chime__ring_regions_t;

int chime__ring_regions(const chime_ring_layout_t *layout, uint64_t page_size,
                        chime__ring_regions_t *out);

/* --- segment: memfd, seals, mapping, header validation (segment.c) --- */

typedef struct {
  int fd;
  uint8_t *base; /* whole mapping */
  size_t len;
  chime__ring_header_t *hdr; /* read-only for a consumer */
  chime__ring_prod_t *prod;
  chime__ring_pubent_t *queue;
  chime__ring_ctrl_t *ctrl;
  _Atomic uint32_t *relcount;
  uint8_t *data;
} chime__segment_t;

/* Creates, sizes, seals and maps a memfd and writes the header. */
int chime__segment_create(chime__segment_t *seg, const chime_spec_t *spec,
                          const chime_ring_layout_t *layout,
                          const chime__ring_regions_t *regions,
                          uint64_t page_size);
/* Validates the header of fd and maps it as a consumer. On success *spec and
 * *layout are the validated copies the consumer must use. */
int chime__segment_attach(chime__segment_t *seg, int fd,
                          const uint8_t nonce[16], chime_spec_t *spec,
                          chime_ring_layout_t *layout);
void chime__segment_close(chime__segment_t *seg);
/* chime_ring_last_error()'s thread-local text: cleared as create and attach
 * begin, set by chime__ring_fail(), which returns rc. */
void chime__ring_clear_error(void);
int chime__ring_fail(int rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* --- hooks for pin.c --- */

/* chime_ring_destroy() calls fn(arg) before it unmaps. */
void chime__ring_set_unpin(chime_ring_t *ring, void (*fn)(void *arg),
                           void *arg);
/* The arg given to chime__ring_set_unpin(), NULL when none was set. */
void *chime__ring_unpin_arg(const chime_ring_t *ring);
/* 1 for a handle from chime_ring_attach(), 0 for chime__ring_create(). */
int chime__ring_is_consumer(const chime_ring_t *ring);
/* The data region (all slots) of this side's mapping. */
void *chime__ring_data(const chime_ring_t *ring, size_t *len);

#endif
