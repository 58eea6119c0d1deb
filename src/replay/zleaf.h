/* Compressed leaves (docs/replay.md, "Compressed leaves"): a table keeps
 * the leaves its config names compressed with zstd, per item, in one
 * allocation of their own (as ragged rows are kept): one u32 stored size
 * per compressed leaf, then each leaf's stored bytes in spec order (a
 * ragged leaf's at the item's length: its bytes are then that many rows).
 * A leaf whose frame would not be smaller than the leaf is stored raw: its
 * stored size is then the leaf's own size (a frame is always smaller), so
 * noise costs 4 bytes a leaf over raw. A sequence table's steps keep
 * theirs the same way, one allocation a step (steps.c). Contexts are per
 * thread (inserts compress before the table's lock, samplers decompress
 * without it). */
#ifndef CHIME_REPLAY_ZLEAF_H
#define CHIME_REPLAY_ZLEAF_H

#include <stddef.h>
#include <stdint.h>

#include "chime/spec.h"

/* The zstd levels a config may name (zstd's 1 to 22; 0 is no compression
 * in chime's config, zstd's "default" would be surprising there). */
#define CHIME__ZLEAF_MIN_LEVEL 1
#define CHIME__ZLEAF_MAX_LEVEL 22

/* Compresses src (n bytes) at level into dst (room for n - 1 bytes at
 * most is used): the frame's size, or n when it would not be smaller (the
 * caller stores src as it is). CHIME_ENOMEM when no context can be made. */
int chime__zleaf_compress(uint8_t *dst, const uint8_t *src, size_t n, int level,
                          size_t *out);

/* The same with the caller's context (a writer's own: client/writer.c),
 * so that writers and chimed make a stored leaf alike. */
struct ZSTD_CCtx_s;
int chime__zleaf_compress_with(struct ZSTD_CCtx_s *c, uint8_t *dst,
                               const uint8_t *src, size_t n, int level,
                               size_t *out);

/* A table's compressed leaves as GetInfo's TableInfo.compress says them
 * ("obs:3,frames:5", chime__table_compress_text) into levels[l] for each
 * leaf l of spec (0: kept raw). A name not in spec, a level outside
 * CHIME__ZLEAF_MIN_LEVEL..MAX or text that is not that form:
 * CHIME_EPROTO (levels then all 0). */
int chime__zleaf_levels(const chime_spec_t *spec, const char *text,
                        uint8_t levels[CHIME_MAX_LEAVES]);

/* Decompresses a stored leaf (stored bytes at src) into dst of exactly n
 * bytes: a copy when stored == n, else a frame that must decompress to
 * exactly n bytes (its declared size checked before anything is written).
 * 0, or CHIME_ECORRUPT (dst then holds zeros), CHIME_ENOMEM. */
int chime__zleaf_decompress(uint8_t *dst, size_t n, const uint8_t *src,
                            size_t stored);

/* Whether stored bytes at src are a leaf of n bytes: stored <= n and, when
 * smaller, one whole zstd frame declaring n bytes that decompresses to
 * them (into scratch, n bytes). 0 or CHIME_ECORRUPT (CHIME_ENOMEM). */
int chime__zleaf_check(const uint8_t *src, size_t stored, size_t n,
                       uint8_t *scratch);

/* A checkpoint record's leaves (version 6) whose spec has compressed
 * leaves (zmask[l] set): the bytes they take from p (left there), each
 * compressed leaf as its u32 stored size (at most the leaf's bytes) and
 * those bytes (a ragged one: at most its bytes at its length), ragged
 * leaves at lens. 0 and *bytes, or -1 with why. */
int chime__zleaf_record_bytes(const uint8_t *p, uint64_t left,
                              const chime_spec_t *spec, const uint32_t *lens,
                              const uint8_t *zmask, uint64_t *bytes, char *why,
                              size_t whylen);

/* A sequence checkpoint block's leaves (version 6) from p (left bytes
 * there), bn steps: per leaf in spec order, a raw one's bn steps (bn times
 * its bytes), a compressed one's (zmask[l]) bn steps each as its u32
 * stored size (at most the leaf's bytes) and those bytes. *bytes: what
 * they take. With leaf not NULL, also loaded: leaf[l] points at a raw
 * leaf's steps, and z[o] gets step o's compressed leaves in an allocation
 * of their own (sizes, then stored bytes), each one checked to be a leaf
 * of its size (chime__zleaf_check), z NULL for a spec with none.
 * 0; -1 with why filled (nothing left in z); CHIME_ENOMEM. */
int chime__zleaf_block(const uint8_t *p, uint64_t left,
                       const chime_spec_t *spec, const uint8_t *zmask,
                       uint32_t bn, const uint8_t **leaf, uint8_t **z,
                       uint64_t *bytes, char *why, size_t whylen);

/* A row's allocation: the k-th compressed leaf's stored size, and where
 * its bytes start. */
static inline uint32_t chime__zleaf_size(const uint8_t *buf, uint32_t k) {
  uint32_t s;
  __builtin_memcpy(&s, buf + 4 * (size_t)k, 4);
  return s;
}

static inline const uint8_t *chime__zleaf_at(const uint8_t *buf, uint32_t nz,
                                             uint32_t k) {
  size_t at = 4 * (size_t)nz;
  for (uint32_t i = 0; i < k; i++)
    at += chime__zleaf_size(buf, i);
  return buf + at;
}

/* Bytes of a row's allocation: the sizes and the stored bytes. */
static inline uint64_t chime__zleaf_total(const uint8_t *buf, uint32_t nz) {
  uint64_t at = 4 * (uint64_t)nz;
  for (uint32_t i = 0; i < nz; i++)
    at += chime__zleaf_size(buf, i);
  return at;
}

#endif
