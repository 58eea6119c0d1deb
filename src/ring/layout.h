/* Internal: a ring's layout (layout.c) with the reason for a refusal in a
 * buffer of the caller's, for the library's own callers that put it in a
 * message of their own; the public chime_ring_layout_compute() puts it in
 * chime_last_error() instead. */
#ifndef CHIME_RING_LAYOUT_H
#define CHIME_RING_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "chime/ring.h"

/* chime_ring_layout_compute, its sentence in err (err may be NULL). */
CHIME_NODISCARD int chime__ring_layout(chime_ring_layout_t *out,
                                       const chime_spec_t *spec,
                                       uint32_t batch_size, uint32_t slots,
                                       char *err, size_t errlen);

#endif
