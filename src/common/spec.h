/* Internal: spec helpers beyond the public ones in chime/spec.h (spec.c). */
#ifndef CHIME_COMMON_SPEC_H
#define CHIME_COMMON_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "chime/spec.h"

/* chime_spec_parse and chime_spec_validate with the sentence in err
 * (err may be NULL) instead of the thread's detail: for the library's own
 * callers, which put it in a message of their own. */
CHIME_NODISCARD int chime__spec_parse(chime_spec_t *spec, const char *text,
                                      char *err, size_t errlen);
CHIME_NODISCARD int chime__spec_validate(const chime_spec_t *spec, char *err,
                                         size_t errlen);

/* A leaf's type for an error text: its dtype and shape, "f32[84,84]"
 * ("f32[]" for a scalar), cut to fit len. */
void chime__leaf_type_text(const chime_leaf_t *l, char *buf, size_t len);

/* Where spec a first parts from spec b, leaf by leaf, and how. */
typedef enum {
  CHIME__SPEC_SAME,   /* every leaf alike */
  CHIME__SPEC_ONLY_A, /* a has leaf *at and b ends before it */
  CHIME__SPEC_ONLY_B, /* b has leaf *at and a ends before it */
  CHIME__SPEC_NAME,   /* leaf *at is named otherwise */
  CHIME__SPEC_TYPE,   /* leaf *at has another dtype or shape */
} chime__spec_diff_t;
chime__spec_diff_t chime__spec_diff(const chime_spec_t *a,
                                    const chime_spec_t *b, uint32_t *at);

/* The bytes of count samples of spec (a ragged spec's samples at their
 * lengths: lengths[j * chime_spec_ragged(spec) + k] is sample j's k-th
 * ragged leaf's, leaves in spec order; NULL for a spec with none) in
 * *bytes; CHIME_EINVAL with a sentence in err when a length passes its
 * leaf's bound or differs from the length it shares ("leaf 'logprobs':
 * sample 3 has 5 rows, 'tokens' 7: they share a length"). */
int chime__spec_ragged_bytes(const chime_spec_t *spec, uint32_t count,
                             const uint32_t *lengths, uint64_t *bytes,
                             char *err, size_t errlen);

/* The spec of a ring whose leaves framed[i] (set) hold each sample's
 * stored bytes (docs/replay.md, "Compressed leaves"): each such leaf
 * becomes a ragged u8 leaf bounded by its raw bytes ("obs:u8[<=7056]"; a
 * stored leaf is never larger), the others stay. Both ends of a stream
 * use it: the server to make its ring, the client to check the spec the
 * server said (docs/protocol.md, stream mode). CHIME_EINVAL when a framed
 * leaf is ragged or too large for a bound. */
int chime__spec_framed(chime_spec_t *out, const chime_spec_t *in,
                       const uint8_t framed[CHIME_MAX_LEAVES]);

/* The same for a sequence table's windows (steps: its sequence_length T,
 * every framed leaf's first dimension): a window's stored bytes are T u32
 * stored sizes, then its steps' stored bytes, so its bound is the raw
 * leaf's bytes and 4 bytes a step. steps 0: chime__spec_framed. */
int chime__spec_framed_steps(chime_spec_t *out, const chime_spec_t *in,
                             const uint8_t framed[CHIME_MAX_LEAVES],
                             uint32_t steps);

/* A group of n samples against group_max gmax (its index: group): 0, or
 * CHIME_EINVAL with a sentence in err (empty, or past gmax). */
int chime__group_count_check(uint32_t gmax, uint32_t n, uint32_t group,
                             char *err, size_t errlen);
/* One group of a group table (chime_spec_group; its stored spec stored,
 * group_max gmax): rows are its ragged rows as stored (the group leaf's
 * first), lengths its stored leaves' lengths (every leaf is ragged there).
 * Checks the group holds 1..gmax samples and that each ragged leaf's
 * column of the group leaf holds lengths within the leaf's bound (equal to
 * the length it shares) summing to the leaf's rows: 0, or CHIME_EINVAL
 * with a sentence naming the group (its index: group) in err. */
int chime__group_check(const chime_spec_t *stored, uint32_t gmax,
                       const uint8_t *rows, const uint32_t *lengths,
                       uint32_t group, char *err, size_t errlen);

#endif
