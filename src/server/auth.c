/* Tokens and roles (auth.h). */
#include "server/auth.h"

#include <stdio.h>
#include <string.h>

#include "chime/errors.h"
#include "wire/method.h"

#define BEARER "Bearer "

const char *chime__role_name(chime__role_t role) {
  switch (role) {
  case CHIME__ROLE_ACTOR:
    return "actor";
  case CHIME__ROLE_LEARNER:
    return "learner";
  case CHIME__ROLE_ADMIN:
    return "admin";
  }
  return "?";
}

static const char *method_name(int method) {
  static const char *const names[CHIME__M_COUNT] = {
      [CHIME__M_GETINFO] = "GetInfo",
      [CHIME__M_STATS] = "Stats",
      [CHIME__M_INSERT] = "Insert",
      [CHIME__M_SUBSCRIBE] = "Subscribe",
      [CHIME__M_MUTATE] = "MutatePriorities",
      [CHIME__M_CHECKPOINT] = "Checkpoint",
      [CHIME__M_SET_VERSION] = "SetVersion",
      [CHIME__M_EXPORT] = "Export",
      [CHIME__M_HEALTH] = "Health/Check",
  };
  return method >= 0 && method < CHIME__M_COUNT ? names[method] : "?";
}

static int role_allows(chime__role_t role, int method) {
  switch (role) {
  case CHIME__ROLE_ADMIN:
    return 1;
  case CHIME__ROLE_ACTOR:
    return method == CHIME__M_GETINFO || method == CHIME__M_INSERT ||
           method == CHIME__M_COUNT;
  case CHIME__ROLE_LEARNER:
    return method == CHIME__M_GETINFO || method == CHIME__M_SUBSCRIBE ||
           method == CHIME__M_MUTATE || method == CHIME__M_SET_VERSION ||
           method == CHIME__M_COUNT;
  }
  return 0;
}

/* Equal in time that depends on the lengths only, not on where bytes
 * differ. */
static int same(const uint8_t *a, size_t alen, const char *b, size_t blen) {
  uint8_t d = alen != blen;
  size_t n = alen < blen ? alen : blen;
  for (size_t i = 0; i < n; i++)
    d |= a[i] ^ (uint8_t)b[i];
  return d == 0;
}

/* The configured token the call presents, compared against every one so
 * the time says nothing about which (if any) matched; NULL if none.
 * *presented says whether the call presented one at all. */
static const chime__token_config_t *token_of(const chime__config_t *cfg,
                                             const grpc_metadata_array *md,
                                             int *presented) {
  const uint8_t *tok = NULL;
  size_t toklen = 0;
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key;
    const grpc_slice *v = &md->metadata[i].value;
    if (GRPC_SLICE_LENGTH(*k) != strlen("authorization") ||
        memcmp(GRPC_SLICE_START_PTR(*k), "authorization",
               strlen("authorization")) != 0)
      continue;
    size_t vl = GRPC_SLICE_LENGTH(*v);
    const uint8_t *vp = GRPC_SLICE_START_PTR(*v);
    if (vl > strlen(BEARER) && memcmp(vp, BEARER, strlen(BEARER)) == 0) {
      tok = vp + strlen(BEARER);
      toklen = vl - strlen(BEARER);
    }
    break;
  }
  const chime__token_config_t *found = NULL;
  for (uint32_t i = 0; i < cfg->ntokens; i++) {
    int eq = tok != NULL &&
             same(tok, toklen, cfg->tokens[i].token, cfg->tokens[i].len);
    if (eq && found == NULL)
      found = &cfg->tokens[i];
  }
  *presented = tok != NULL;
  return found;
}

int chime__auth_check(const chime__config_t *cfg, int method,
                      const grpc_metadata_array *md, char *err, size_t errlen) {
  if (cfg->ntokens == 0)
    return 0;
  int presented = 0;
  const chime__token_config_t *found = token_of(cfg, md, &presented);
  if (found == NULL) {
    snprintf(err, errlen, "%s: %s token (send 'authorization: Bearer <token>')",
             method_name(method), presented ? "unknown" : "no");
    return CHIME_EAUTH;
  }
  if (!role_allows(found->role, method)) {
    snprintf(err, errlen, "%s: role '%s' may not call it", method_name(method),
             chime__role_name(found->role));
    return CHIME_EPERM;
  }
  return 0;
}

uint32_t chime__auth_owners(const chime__config_t *cfg) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < cfg->ntokens; i++)
    n += cfg->tokens[i].role == CHIME__ROLE_ACTOR;
  return n;
}

uint32_t chime__auth_owner(const chime__config_t *cfg,
                           const grpc_metadata_array *md) {
  int presented = 0;
  const chime__token_config_t *found = token_of(cfg, md, &presented);
  if (found == NULL || found->role != CHIME__ROLE_ACTOR)
    return 0;
  uint32_t owner = 1;
  for (const chime__token_config_t *t = cfg->tokens; t != found; t++)
    owner += t->role == CHIME__ROLE_ACTOR;
  return owner;
}
