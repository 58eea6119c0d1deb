/* Internal: the ring's regions and segment (its format is ring/format.h),
 * and hooks for the pinning code (src/ring/pin.c). Nothing here is public
 * API. */
#ifndef CHIME_RING_INTERNAL_H
#define CHIME_RING_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chime/ring.h"
#include "ring/format.h"
#include "ring/producer.h"

/* Rounds v up to a power-of-two align. CHIME_EOVERFLOW if it wraps. */
int chime__align_up(uint64_t v, uint64_t align, uint64_t *out);

/* Host page size, at least CHIME_RING_PAGE. */
uint64_t chime__page_size(void);

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

/* Creates, sizes, seals and maps a memfd and writes the header (spec is
 * valid, layout and regions computed from it). *canon gets the spec as the
 * header holds it, every unused byte zero: what the producer serves. */
int chime__segment_create(chime__segment_t *seg, const chime_spec_t *spec,
                          const chime_ring_layout_t *layout,
                          const chime__ring_regions_t *regions,
                          uint64_t page_size, chime_spec_t *canon);
/* Validates the header of fd and maps it as a consumer. On success *spec and
 * *layout are the validated copies the consumer must use, converted from
 * the format's types. */
int chime__segment_attach(chime__segment_t *seg, int fd,
                          const uint8_t nonce[16], chime_spec_t *spec,
                          chime_ring_layout_t *layout);
void chime__segment_close(chime__segment_t *seg);
/* Sets chime_last_error()'s text (the thread's detail) and returns rc. */
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
