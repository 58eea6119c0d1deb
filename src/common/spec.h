/* Internal: spec helpers beyond the public ones in chime/spec.h (spec.c). */
#ifndef CHIME_COMMON_SPEC_H
#define CHIME_COMMON_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "chime/spec.h"

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

#endif
