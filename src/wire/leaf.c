/* Spec <-> Leaf messages (see leaf.h). */
#include <string.h>

#include "common/errfmt.h"
#include "wire/leaf.h"
#include "common/spec.h"

void chime__leaf_msgs(const chime_spec_t *spec, Chime__V1__Leaf *leaves,
                      Chime__V1__Leaf **ptrs) {
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    const chime_leaf_t *l = &spec->leaves[i];
    Chime__V1__Leaf init = CHIME__V1__LEAF__INIT;
    leaves[i] = init;
    leaves[i].name = (char *)l->name;
    leaves[i].dtype = (char *)chime_dtype_name(l->dtype);
    leaves[i].n_shape = l->ndim;
    leaves[i].shape = (uint64_t *)l->shape;
    leaves[i].ragged = l->ragged != 0;
    leaves[i].shares = l->shares;
    ptrs[i] = &leaves[i];
  }
}

int chime__leaf_from_msg(chime_leaf_t *out, const Chime__V1__Leaf *m) {
  const char *name = m->name ? m->name : "";
  size_t n = strnlen(name, sizeof(out->name) - 1);
  memset(out, 0, sizeof(*out));
  memcpy(out->name, name, n);
  out->dtype = chime_dtype_from_name(m->dtype ? m->dtype : "");
  if (out->dtype == CHIME_DTYPE_INVALID || m->n_shape > CHIME_MAX_DIMS) {
    out->dtype = CHIME_DTYPE_INVALID;
    return CHIME_EINVAL;
  }
  out->ndim = (uint32_t)m->n_shape;
  for (size_t d = 0; d < m->n_shape; d++)
    out->shape[d] = m->shape[d];
  out->ragged = m->ragged ? 1 : 0;
  out->shares = m->shares; /* chime_spec_validate checks it */
  return 0;
}

int chime__spec_from_leaves(chime_spec_t *spec, Chime__V1__Leaf *const *leaves,
                            size_t n, char *err, size_t errlen) {
  memset(spec, 0, sizeof(*spec));
  if (n == 0) {
    chime__errf(err, errlen, "spec has no leaves");
    return CHIME_EINVAL;
  }
  if (n > CHIME_MAX_LEAVES) {
    chime__errf(err, errlen, "spec has %zu leaves, at most %d allowed", n,
                CHIME_MAX_LEAVES);
    return CHIME_EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    const Chime__V1__Leaf *l = leaves[i];
    chime_leaf_t *o = &spec->leaves[i];
    if (strlen(l->name ? l->name : "") >= CHIME_MAX_NAME) {
      chime__errf(err, errlen, "leaf %zu: name longer than %d bytes", i,
                  CHIME_MAX_NAME - 1);
      return CHIME_EINVAL;
    }
    if (chime__leaf_from_msg(o, l) != 0) {
      if (chime_dtype_from_name(l->dtype ? l->dtype : "") ==
          CHIME_DTYPE_INVALID)
        chime__errf(err, errlen, "leaf '%s': unknown dtype '%.16s'", o->name,
                    l->dtype ? l->dtype : "");
      else
        chime__errf(err, errlen, "leaf '%s': %zu dims, at most %d allowed",
                    o->name, l->n_shape, CHIME_MAX_DIMS);
      return CHIME_EINVAL;
    }
  }
  spec->nleaves = (uint32_t)n;
  return chime__spec_validate(spec, err, errlen);
}
