/* Specs as they travel in chime.v1 messages (Leaf: name, dtype by name,
 * shape): GetInfo's tables, Opened's layout, the spec a writer believes in
 * its first InsertRequest. */
#ifndef CHIME_WIRE_LEAF_H
#define CHIME_WIRE_LEAF_H

#include <stddef.h>

#include "chime.pb-c.h"
#include "chime/spec.h"

/* Leaf messages pointing into spec (no copy; valid while spec is):
 * leaves[i] and ptrs[i] = &leaves[i] for each of spec->nleaves. */
void chime__leaf_msgs(const chime_spec_t *spec, Chime__V1__Leaf *leaves,
                      Chime__V1__Leaf **ptrs);

/* One Leaf as a chime_leaf_t, the name cut to fit (callers that care compare
 * the message's own name). CHIME_EINVAL for an unknown dtype or more than
 * CHIME_MAX_DIMS dims; *out is then zeroed but for the name. */
int chime__leaf_from_msg(chime_leaf_t *out, const Chime__V1__Leaf *m);

/* A whole spec from a peer, strictly: 1..CHIME_MAX_LEAVES leaves, names that
 * fit, known dtypes, then chime_spec_validate(). CHIME_EINVAL with a sentence
 * in err. */
int chime__spec_from_leaves(chime_spec_t *spec, Chime__V1__Leaf *const *leaves,
                            size_t n, char *err, size_t errlen);

#endif
