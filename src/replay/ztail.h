/* Stream mode's packed tail (docs/protocol.md, stream mode, "A framed
 * batch's tail"): in a batch whose compressed leaves travel as frames,
 * the slot's tail (each ragged leaf's offsets, then the sample info) goes
 * as one zstd frame at level 1, after a transform that makes it compress:
 * the offsets' int64 words delta-coded in order, and the info records
 * turned into columns (each of their ten 64-bit fields for the batch's
 * samples, back to back), each column delta-coded (wrapping). On the wire:
 * a u32 little-endian stored size, then that many bytes: the transformed
 * tail as a frame, or as it is when no frame is smaller (stored size ==
 * the tail's). The receiver decompresses it into the tail (a frame that
 * declares and makes exactly the tail's bytes, checked before a byte is
 * written) and undoes the transform; the offsets are then checked as any
 * ragged batch's (ring/extents.h). Both ends and chime-bench storage use
 * these. */
#ifndef CHIME_REPLAY_ZTAIL_H
#define CHIME_REPLAY_ZTAIL_H

#include <stddef.h>
#include <stdint.h>

/* Bytes before the stored tail: its stored size. */
#define CHIME__ZTAIL_HEAD 4u

/* The most a packed tail of n bytes takes on the wire. */
static inline uint64_t chime__ztail_bound(uint64_t n) {
  return CHIME__ZTAIL_HEAD + n;
}

/* Packs the tail at src (n bytes, its last ninfo the sample info records)
 * into dst (chime__ztail_bound(n) bytes), with scratch of n bytes: *out
 * the bytes written (head and stored tail). 0 or CHIME_ENOMEM (no zstd
 * context). */
int chime__ztail_pack(uint8_t *dst, const uint8_t *src, size_t n, size_t ninfo,
                      uint8_t *scratch, size_t *out);

/* The stored size a packed tail of a tail of n bytes states in its head
 * (CHIME__ZTAIL_HEAD bytes at head) in *stored: 0, or CHIME_EPROTO when it
 * is 0 or more than n. */
int chime__ztail_stored(const uint8_t *head, size_t n, size_t *stored);

/* The tail (n bytes at dst, its last ninfo the info records) from its
 * stored bytes (stored at src, checked by chime__ztail_stored), with
 * scratch of n bytes. 0, CHIME_ECORRUPT (no frame of exactly n bytes:
 * nothing past dst + n written) or CHIME_ENOMEM. */
int chime__ztail_unpack(uint8_t *dst, size_t n, size_t ninfo,
                        const uint8_t *src, size_t stored, uint8_t *scratch);

#endif
