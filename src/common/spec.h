/* Internal: spec helpers beyond the public ones in chime/spec.h (spec.c). */
#ifndef CHIME_COMMON_SPEC_H
#define CHIME_COMMON_SPEC_H

#include <stddef.h>

#include "chime/spec.h"

/* A leaf's type for an error text: its dtype and shape, "f32[84,84]"
 * ("f32[]" for a scalar), cut to fit len. */
void chime__leaf_type_text(const chime_leaf_t *l, char *buf, size_t len);

#endif
