/* Specs as they travel in chime.v1 messages, and table lookup by GetInfo. */
#include <stdio.h>
#include <string.h>

#include "client/internal.h"

int chime__spec_from_leaves(chime_spec_t *spec, Chime__V1__Leaf *const *leaves,
                            size_t n, char *err, size_t errlen) {
  memset(spec, 0, sizeof(*spec));
  if (n == 0)
    return chime__fail(err, errlen, CHIME_EINVAL, "spec has no leaves");
  if (n > CHIME_MAX_LEAVES)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "spec has %zu leaves, at most %d allowed", n,
                       CHIME_MAX_LEAVES);
  for (size_t i = 0; i < n; i++) {
    const Chime__V1__Leaf *l = leaves[i];
    chime_leaf_t *o = &spec->leaves[i];
    const char *name = l->name ? l->name : "";
    if (strlen(name) >= CHIME_MAX_NAME)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "leaf %zu: name longer than %d bytes", i,
                         CHIME_MAX_NAME - 1);
    memcpy(o->name, name, strlen(name) + 1);
    o->dtype = chime_dtype_from_name(l->dtype ? l->dtype : "");
    if (o->dtype == CHIME_DTYPE_INVALID)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "leaf '%s': unknown dtype '%.16s'", o->name,
                         l->dtype ? l->dtype : "");
    if (l->n_shape > CHIME_MAX_DIMS)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "leaf '%s': %zu dims, at most %d allowed", o->name,
                         l->n_shape, CHIME_MAX_DIMS);
    o->ndim = (uint32_t)l->n_shape;
    for (size_t d = 0; d < l->n_shape; d++)
      o->shape[d] = l->shape[d];
  }
  spec->nleaves = (uint32_t)n;
  return chime_spec_validate(spec, err, errlen);
}

int chime__table_lookup(chime_client_t *client, const char *table,
                        chime_table_info_t *out, chime_server_info_t **info,
                        char *err, size_t errlen) {
  chime_server_info_t *si = NULL;
  int rc = chime_client_info(client, &si);
  if (rc) {
    chime__fail(err, errlen, rc, "%s", chime_client_last_error(client));
    goto cleanup;
  }
  rc = CHIME_ENOTFOUND;
  for (uint32_t i = 0; i < si->ntables; i++) {
    if (strcmp(si->tables[i].name, table) == 0) {
      *out = si->tables[i];
      rc = 0;
      break;
    }
  }
  if (rc)
    chime__fail(err, errlen, rc, "table '%s' not found", table);

cleanup:
  if (info && rc == 0)
    *info = si;
  else
    chime_server_info_free(si);
  return rc;
}
