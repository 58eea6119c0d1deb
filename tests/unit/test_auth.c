/* Bearer tokens and roles alone (src/server/auth.c): what each role may
 * call, a missing, malformed or unknown token refused with a sentence that
 * names the method and never the token, tokens that differ only in their
 * length or last byte told apart, and no tokens meaning no checks. The
 * metadata is built here as gRPC hands it to the server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "chime/errors.h"
#include "server/auth.h"
#include "wire/method.h"

#define ACTOR_TOKEN "actor-secret-0123456789"
#define LEARNER_TOKEN "learner-secret-abcdef"
#define ADMIN_TOKEN "admin-secret-XYZ"

static chime__config_t cfg; /* large: not on the stack */

static void add_token(const char *tok, chime__role_t role) {
  chime__token_config_t *t = &cfg.tokens[cfg.ntokens++];
  snprintf(t->token, sizeof(t->token), "%s", tok);
  t->len = (uint32_t)strlen(tok);
  t->role = role;
}

static int setup(void **state) {
  (void)state;
  memset(&cfg, 0, sizeof(cfg));
  add_token(ACTOR_TOKEN, CHIME__ROLE_ACTOR);
  add_token(LEARNER_TOKEN, CHIME__ROLE_LEARNER);
  add_token(ADMIN_TOKEN, CHIME__ROLE_ADMIN);
  return 0;
}

/* Metadata of up to 4 entries, key/value pairs from a NULL-ended list. */
typedef struct {
  grpc_metadata md[4];
  grpc_metadata_array a;
} md_t;

static const grpc_metadata_array *md_make(md_t *m, ...) {
  va_list ap;
  memset(m, 0, sizeof(*m));
  va_start(ap, m);
  for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
    const char *v = va_arg(ap, const char *);
    assert_true(m->a.count < 4);
    m->md[m->a.count].key = grpc_slice_from_static_string(k);
    m->md[m->a.count].value = grpc_slice_from_static_string(v);
    m->a.count++;
  }
  va_end(ap);
  m->a.metadata = m->md;
  m->a.capacity = 4;
  return &m->a;
}

static int check(int method, const char *value, char *err, size_t len) {
  md_t m;
  return chime__auth_check(
      &cfg, method, md_make(&m, "authorization", value, (const char *)NULL),
      err, len);
}

/* What the config's comment promises (config.h): actor: Insert and
 * GetInfo; learner: Subscribe, MutatePriorities and GetInfo; admin:
 * everything; an unknown method (CHIME__M_COUNT) passes any valid token,
 * to be answered UNIMPLEMENTED. */
static void test_roles(void **state) {
  (void)state;
  static const struct {
    const char *token;
    const char *role;
    int all; /* every method */
    int allowed[CHIME__M_COUNT + 1];
  } rows[] = {
      {ACTOR_TOKEN,
       "actor",
       0,
       {[CHIME__M_GETINFO] = 1, [CHIME__M_INSERT] = 1, [CHIME__M_COUNT] = 1}},
      {LEARNER_TOKEN,
       "learner",
       0,
       {[CHIME__M_GETINFO] = 1,
        [CHIME__M_SUBSCRIBE] = 1,
        [CHIME__M_MUTATE] = 1,
        [CHIME__M_SET_VERSION] = 1,
        [CHIME__M_COUNT] = 1}},
      {ADMIN_TOKEN, "admin", 1, {0}},
  };
  static const char *const names[CHIME__M_COUNT] = {
      [CHIME__M_GETINFO] = "GetInfo",
      [CHIME__M_STATS] = "Stats",
      [CHIME__M_INSERT] = "Insert",
      [CHIME__M_SUBSCRIBE] = "Subscribe",
      [CHIME__M_MUTATE] = "MutatePriorities",
      [CHIME__M_CHECKPOINT] = "Checkpoint",
      [CHIME__M_SET_VERSION] = "SetVersion",
      [CHIME__M_EXPORT] = "Export", /* admin only */
  };
  for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
    char bearer[128];
    snprintf(bearer, sizeof(bearer), "Bearer %s", rows[r].token);
    for (int m = 0; m <= CHIME__M_COUNT; m++) {
      char err[256] = "";
      if (m == CHIME__M_HEALTH)
        continue; /* an open method: the call machinery never asks */
      int rc = check(m, bearer, err, sizeof(err));
      if (rows[r].all || rows[r].allowed[m]) {
        if (rc != 0)
          fail_msg("%s refused method %d: %s", rows[r].role, m, err);
        continue;
      }
      if (rc != CHIME_EPERM)
        fail_msg("%s on method %d: %d, not CHIME_EPERM", rows[r].role, m, rc);
      char want[128];
      snprintf(want, sizeof(want), "%s: role '%s' may not call it", names[m],
               rows[r].role);
      assert_string_equal(err, want);
    }
  }
}

/* No header, another scheme, an empty token: "no token", the same as
 * nothing at all. */
static void test_no_token(void **state) {
  (void)state;
  char err[256];
  md_t m;
  assert_int_equal(chime__auth_check(&cfg, CHIME__M_INSERT,
                                     md_make(&m, (const char *)NULL), err,
                                     sizeof(err)),
                   CHIME_EAUTH);
  assert_string_equal(
      err, "Insert: no token (send 'authorization: Bearer <token>')");
  const char *bad[] = {"Basic " ACTOR_TOKEN,
                       "bearer " ACTOR_TOKEN,
                       "Bearer",
                       "Bearer ",
                       ACTOR_TOKEN,
                       ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    assert_int_equal(check(CHIME__M_GETINFO, bad[i], err, sizeof(err)),
                     CHIME_EAUTH);
    assert_non_null(strstr(err, "GetInfo: no token"));
  }
  /* Other keys, and keys that only start or end like it, are not it. */
  assert_int_equal(
      chime__auth_check(&cfg, CHIME__M_GETINFO,
                        md_make(&m, "authorizatio", "Bearer " ADMIN_TOKEN,
                                "authorization-x", "Bearer " ADMIN_TOKEN,
                                "user-agent", "Bearer " ADMIN_TOKEN,
                                (const char *)NULL),
                        err, sizeof(err)),
      CHIME_EAUTH);
  /* ... and are passed over to find it. */
  assert_int_equal(
      chime__auth_check(&cfg, CHIME__M_STATS,
                        md_make(&m, "user-agent", "grpc-c/29", "authorization",
                                "Bearer " ADMIN_TOKEN, (const char *)NULL),
                        err, sizeof(err)),
      0);
}

/* A token that is not configured, however close to one, is unknown; the
 * sentence never repeats what was sent. */
static void test_unknown_token(void **state) {
  (void)state;
  const char *bad[] = {
      "Bearer actor-secret-012345678",   /* one byte short */
      "Bearer actor-secret-01234567890", /* one byte more */
      "Bearer actor-secret-012345678X",  /* the last byte differs */
      "Bearer Actor-secret-0123456789",  /* the first byte differs */
      "Bearer  actor-secret-0123456789", /* a space more */
      "Bearer zq",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char err[256] = "";
    int rc = check(CHIME__M_GETINFO, bad[i], err, sizeof(err));
    if (rc != CHIME_EAUTH)
      fail_msg("'%s' got %d, not CHIME_EAUTH", bad[i], rc);
    assert_string_equal(
        err, "GetInfo: unknown token (send 'authorization: Bearer <token>')");
    assert_null(strstr(err, bad[i] + strlen("Bearer ")));
  }
}

/* Only the first authorization entry counts: a second cannot add a role
 * to a refused first one. */
static void test_first_header_counts(void **state) {
  (void)state;
  char err[256];
  md_t m;
  assert_int_equal(
      chime__auth_check(&cfg, CHIME__M_CHECKPOINT,
                        md_make(&m, "authorization", "Bearer bad",
                                "authorization", "Bearer " ADMIN_TOKEN,
                                (const char *)NULL),
                        err, sizeof(err)),
      CHIME_EAUTH);
  assert_int_equal(
      chime__auth_check(&cfg, CHIME__M_CHECKPOINT,
                        md_make(&m, "authorization", "Bearer " ACTOR_TOKEN,
                                "authorization", "Bearer " ADMIN_TOKEN,
                                (const char *)NULL),
                        err, sizeof(err)),
      CHIME_EPERM);
}

/* Without tokens every call passes, whatever it carries. */
static void test_no_tokens_configured(void **state) {
  (void)state;
  char err[64] = "untouched";
  md_t m;
  uint32_t n = cfg.ntokens;
  cfg.ntokens = 0;
  for (int meth = 0; meth <= CHIME__M_COUNT; meth++) {
    assert_int_equal(check(meth, "Bearer nonsense", err, sizeof(err)), 0);
    assert_int_equal(chime__auth_check(&cfg, meth,
                                       md_make(&m, (const char *)NULL), err,
                                       sizeof(err)),
                     0);
  }
  assert_string_equal(err, "untouched");
  cfg.ntokens = n;
}

/* A short buffer gets a cut, terminated sentence. */
static void test_short_err(void **state) {
  (void)state;
  char err[8];
  memset(err, 'x', sizeof(err));
  assert_int_equal(check(CHIME__M_INSERT, "Bearer nope", err, sizeof(err)),
                   CHIME_EAUTH);
  assert_string_equal(err, "Insert:");
}

static void test_role_names(void **state) {
  (void)state;
  assert_string_equal(chime__role_name(CHIME__ROLE_ACTOR), "actor");
  assert_string_equal(chime__role_name(CHIME__ROLE_LEARNER), "learner");
  assert_string_equal(chime__role_name(CHIME__ROLE_ADMIN), "admin");
  assert_string_equal(chime__role_name((chime__role_t)0), "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_roles, setup),
      cmocka_unit_test_setup(test_no_token, setup),
      cmocka_unit_test_setup(test_unknown_token, setup),
      cmocka_unit_test_setup(test_first_header_counts, setup),
      cmocka_unit_test_setup(test_no_tokens_configured, setup),
      cmocka_unit_test_setup(test_short_err, setup),
      cmocka_unit_test(test_role_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
