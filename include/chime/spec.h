/* chime specs: what a sample is (its leaves: names, dtypes, shapes), the
 * record that comes with each sampled one, and the limits of a batch.
 *
 * Every chime program needs these, learner and actor alike: chime/chime.h
 * (the client API) and chime/ring.h (direct ring use) both include this
 * header, and neither needs the other.
 */
#ifndef CHIME_SPEC_H
#define CHIME_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "chime/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHIME_MAX_LEAVES 64
#define CHIME_MAX_DIMS 8
#define CHIME_MAX_NAME 64 /* bytes including the terminating NUL */

/* Leaf element types. Values are part of the wire and ring format. */
#define CHIME_DTYPE_MAP(X)                                                     \
  X(U8, 1, "u8", 1)                                                            \
  X(I8, 2, "i8", 1)                                                            \
  X(U16, 3, "u16", 2)                                                          \
  X(I16, 4, "i16", 2)                                                          \
  X(U32, 5, "u32", 4)                                                          \
  X(I32, 6, "i32", 4)                                                          \
  X(U64, 7, "u64", 8)                                                          \
  X(I64, 8, "i64", 8)                                                          \
  X(F16, 9, "f16", 2)                                                          \
  X(BF16, 10, "bf16", 2)                                                       \
  X(F32, 11, "f32", 4)                                                         \
  X(F64, 12, "f64", 8)                                                         \
  X(BOOL, 13, "bool", 1)

typedef enum {
  CHIME_DTYPE_INVALID = 0,
#define CHIME__DTYPE_ENUM(name, value, str, size) CHIME_DTYPE_##name = value,
  CHIME_DTYPE_MAP(CHIME__DTYPE_ENUM)
#undef CHIME__DTYPE_ENUM
} chime_dtype_t;

/* One leaf: a named array per sample. A scalar has ndim 0.
 *
 * A ragged leaf (ragged 1, written "tokens:i32[<=8192]") has a first
 * dimension that varies per sample from 0 up to shape[0], its bound; the
 * other dimensions are fixed ("frames:u8[<=64,84,84]": up to 64 rows of
 * 84x84). A sample carries each ragged leaf's length, a table stores only
 * the rows used, and a batch delivers the values packed back to back with
 * count + 1 offsets (chime_batch_offsets). shares: 1 + the index of an
 * earlier ragged leaf whose length this one always has ("logprobs:f32[<=8192
 * ~tokens]"), checked at insert; 0 for none. A leaf's fixed size
 * (chime_leaf_bytes) is its bound's. */
typedef struct {
  char name[CHIME_MAX_NAME];
  chime_dtype_t dtype;
  uint32_t ndim;
  uint64_t shape[CHIME_MAX_DIMS];
  uint32_t ragged;
  uint32_t shares;
} chime_leaf_t;

/* An ordered list of leaves. A sample's bytes are its leaves' bytes in order.
 */
typedef struct {
  uint32_t nleaves;
  chime_leaf_t leaves[CHIME_MAX_LEAVES];
} chime_spec_t;

/* Parses "obs:f32[64], action:i32[], reward:f32[]" (also "f32[84,84]",
 * "reward:f32" for a scalar, and ragged leaves: "tokens:i32[<=8192]",
 * "logprobs:f32[<=8192 ~tokens]" for one that shares tokens' length).
 * CHIME_EINVAL, chime_last_error() naming the offending leaf. */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_parse(chime_spec_t *spec,
                                                  const char *text);
/* Writes the canonical text form of spec into buf ("obs:f32[64],..."). */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_format(const chime_spec_t *spec,
                                                   char *buf, size_t len);
/* Checks names (non-empty, unique, [A-Za-z0-9_./-]), dtypes, dims (each > 0),
 * that every size fits in 64 bits, and ragged leaves (at least one dim; a
 * shared length names an earlier ragged leaf of the same bound that shares
 * none itself). CHIME_EINVAL, chime_last_error() naming the leaf. */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_validate(const chime_spec_t *spec);
/* Bytes of one sample of leaf i / of the whole spec (0 if invalid); a
 * ragged leaf counts at its bound. */
CHIME_EXTERN uint64_t chime_leaf_bytes(const chime_leaf_t *leaf);
CHIME_EXTERN uint64_t chime_spec_sample_bytes(const chime_spec_t *spec);
/* Bytes of one row of a leaf's first dimension: a ragged leaf's sample of
 * length n holds n * this (the dtype's size for a one-dim leaf). 0 if
 * invalid or a scalar. */
CHIME_EXTERN uint64_t chime_leaf_row_bytes(const chime_leaf_t *leaf);
/* The number of ragged leaves in spec (a table whose spec has any takes a
 * length per ragged leaf with every sample). */
CHIME_EXTERN uint32_t chime_spec_ragged(const chime_spec_t *spec);
/* Groups (docs/replay.md, "Groups"): a group table's item is 1 up to
 * group_max samples of a sample spec, written, sampled, evicted and
 * checkpointed as one. It is stored as an item of a derived spec, its
 * "stored" spec (what GetInfo and a stream's ring show): a first leaf
 * CHIME_GROUP_LEAF, u32[<=group_max, C], one row per sample holding its
 * lengths of the sample spec's C ragged leaves (C = 1 and a 0 when it has
 * none); each fixed leaf x:T[s] as x:T[<=group_max, s] sharing the group
 * leaf's length (a row per sample); each ragged leaf t:T[<=N, r] as
 * t:T[<=group_max * N, r] (the samples' rows back to back). */
#define CHIME_GROUP_LEAF "__group"
#define CHIME_GROUP_MAX 65536u
/* The stored spec of groups of up to group_max (1..CHIME_GROUP_MAX)
 * samples of in into out. CHIME_EINVAL with a sentence in err for a bad
 * spec or bound, a leaf named "__...", or one too large once grouped. */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_group(chime_spec_t *out,
                                                  const chime_spec_t *in,
                                                  uint32_t group_max, char *err,
                                                  size_t errlen);
/* A stored spec's group_max, 0 when it is not a group table's. */
CHIME_EXTERN uint32_t chime_spec_group_max(const chime_spec_t *spec);
/* The sample spec of a group table's stored spec into out: 0, or
 * CHIME_EINVAL when stored is not a group table's. */
CHIME_EXTERN CHIME_NODISCARD int
chime_spec_group_samples(chime_spec_t *out, const chime_spec_t *stored);
CHIME_EXTERN const char *chime_dtype_name(chime_dtype_t dtype);
CHIME_EXTERN size_t chime_dtype_size(chime_dtype_t dtype); /* 0 if unknown */
CHIME_EXTERN chime_dtype_t chime_dtype_from_name(const char *name);

/* Per-sample information, one record per sample of a batch (the batch's
 * `info`), stored after the leaf arrays of a ring slot: 80 bytes,
 * little-endian, no padding. The record is read in place from the ring, so
 * its size and field offsets are part of the ring format (src/ring/format.h
 * pins them) and of the stream Layout (info_record_bytes). probability is exact
 * under the table's sampler at the moment of the draw, priority and table_size
 * are the item's priority and the number of items in the table then. For a
 * sequence table's item (a window of steps of one episode), episode_id
 * (from 1), first_step (its first step's index in the episode) and length
 * (valid steps: sequence_length unless padded); all 0 for a plain table.
 * version is the policy version its writer gave the item (0: none given),
 * staleness how many versions it was behind the newest version the table
 * knew at the draw (docs/replay.md, "Policy versions"). */
typedef struct {
  uint64_t key;
  double probability;
  uint32_t times_sampled;
  uint32_t reserved;
  uint64_t insert_time_ns; /* CLOCK_REALTIME at insert */
  double priority;
  uint64_t table_size;
  uint64_t episode_id;
  uint32_t first_step;
  uint32_t length;
  uint64_t version;
  uint64_t staleness;
} chime_sample_info_t;

/* A stream's batches (and the ring behind them): batch_size
 * 1..CHIME_RING_MAX_BATCH samples, slots 2..CHIME_RING_MAX_SLOTS. */
#define CHIME_RING_MAX_SLOTS 4096u
#define CHIME_RING_MAX_BATCH (1u << 24)

#ifdef __cplusplus
}
#endif
#endif
