/* Internal: the bytes of a slot a batch uses (stream mode sends these and
 * nothing else). A fixed-shape batch uses its slot's whole prefix up to
 * the end of its info; a batch with ragged leaves uses only each ragged
 * leaf's packed rows, which its offsets say, so the offsets and the info
 * come first: a receiver learns from them where the rest goes. Computed by
 * one function the sender, the receiver and chime-bench share, so the two
 * ends of the wire cannot disagree on the order (docs/protocol.md, "With
 * ragged leaves"). */
#ifndef CHIME_RING_EXTENTS_H
#define CHIME_RING_EXTENTS_H

#include <stddef.h>
#include <stdint.h>

#include "chime/ring.h"

typedef struct {
  uint64_t off; /* from the slot's start */
  uint64_t len;
} chime__extent_t;

/* At most the tail and one extent per leaf. */
#define CHIME__EXTENTS_MAX (CHIME_MAX_LEAVES + 1)

typedef struct {
  uint32_t n;
  uint64_t total; /* the extents' bytes summed: what a batch sends */
  chime__extent_t e[CHIME__EXTENTS_MAX];
} chime__extents_t;

/* The bytes of a slot a batch carries whatever its lengths: up to the end
 * of its info (stream mode's send_bytes). */
uint64_t chime__slot_send_bytes(const chime_ring_layout_t *lay);

/* Where a batch's tail starts: the first ragged leaf's offsets, then the
 * others' and the info, up to chime__slot_send_bytes(). 0 for a spec
 * without ragged leaves (its batches are the whole prefix). */
uint64_t chime__slot_tail(const chime_ring_layout_t *lay,
                          const chime_spec_t *spec);

/* A ragged leaf's count + 1 offsets as a peer wrote them (the one check
 * of them, at both ends of the wire and at the device end): offsets[0] ==
 * 0, none decreasing, no sample longer than bound rows. The rows they
 * hold, or -1 with a message in err naming the leaf and the sample. Reads
 * them with memcpy (any alignment). */
int64_t chime__offsets_rows(const int64_t *offsets, uint32_t count,
                            uint64_t bound, const char *leaf, char *err,
                            size_t errlen);

/* The extents of the slot at base that its batch uses, in the order they
 * are sent: for a spec with ragged leaves the tail first, then each leaf's
 * values in spec order (a fixed leaf whole, a ragged leaf offsets[B] rows,
 * none when empty); for a fixed spec one extent, the whole prefix. Reads
 * and checks the offsets (a peer's bytes: offsets[0] == 0, none
 * decreasing, no sample past its bound, a leaf that shares a length with
 * the same offsets as the leaf it shares): CHIME_EPROTO with a message
 * naming the leaf and sample otherwise, or 0. */
int chime__slot_extents(const chime_ring_layout_t *lay,
                        const chime_spec_t *spec, const uint8_t *base,
                        chime__extents_t *out, char *err, size_t errlen);
/* chime__slot_extents from offsets elsewhere: offsets[i] is ragged leaf
 * i's batch_size + 1 offsets (NULL for a fixed leaf). A reader of memory
 * a peer can write copies the offsets out first and passes the copy, so
 * what was checked is what it then uses. */
int chime__slot_extents_of(const chime_ring_layout_t *lay,
                           const chime_spec_t *spec,
                           const int64_t *const offsets[],
                           chime__extents_t *out, char *err, size_t errlen);

#endif
