/* Bearer tokens and roles (auth.tokens in the config): every call presents
 * `authorization: Bearer <token>`; a missing or unknown token is
 * CHIME_EAUTH (UNAUTHENTICATED), a role without the method CHIME_EPERM
 * (PERMISSION_DENIED). Tokens are compared in constant time, against every
 * configured token, and never logged or echoed. With no tokens configured
 * every call is let through. The health check is never asked for one
 * (call.h, open): a probe has none, and it learns only whether the
 * server serves. */
#ifndef CHIME_SERVER_AUTH_H
#define CHIME_SERVER_AUTH_H

#include <stddef.h>

#include <grpc/grpc.h>

#include "server/config.h"

/* method: CHIME__M_* (CHIME__M_COUNT for a method chime does not know:
 * any valid token passes, the call then gets UNIMPLEMENTED). 0, or an error
 * code with a sentence in err that names the method and role, not the
 * token. */
int chime__auth_check(const chime__config_t *cfg, int method,
                      const grpc_metadata_array *md, char *err, size_t errlen);
const char *chime__role_name(chime__role_t role);
/* Whose writer places an Insert call's writers count against (replay's
 * chime__dedupe_set_owners): the actor tokens are owners 1..
 * chime__auth_owners() in config order; a call with any other token (admin),
 * or with no tokens configured, is owner 0, nobody's. The token is matched
 * in constant time, as by chime__auth_check. */
uint32_t chime__auth_owners(const chime__config_t *cfg);
uint32_t chime__auth_owner(const chime__config_t *cfg,
                           const grpc_metadata_array *md);

#endif
