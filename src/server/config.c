/* chimed's configuration file (JSON, read with jansson). Every key is known:
 * a typo must fail loudly rather than silently keep a default. */
#include "server/config.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "chime/errors.h"
#include "common/key.h"
#include "replay/table.h"
#include "server/config_table.h"
#include "server/config_value.h"
#include "wire/insert_limits.h"

static void config_base(chime__config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->listen, sizeof(cfg->listen), "%s", CHIME__DEFAULT_LISTEN);
  snprintf(cfg->handoff_socket, sizeof(cfg->handoff_socket), "@auto");
  cfg->handoff_expires_ms = CHIME__DEFAULT_EXPIRES_MS;
  cfg->stream_ring_bytes = CHIME__DEFAULT_STREAM_RING_BYTES;
  cfg->total_ring_bytes = CHIME__DEFAULT_TOTAL_RING_BYTES;
  cfg->staged_insert_bytes = CHIME__DEFAULT_STAGED_INSERT_BYTES;
  cfg->max_connections = CHIME__DEFAULT_MAX_CONNECTIONS;
  cfg->max_calls_per_connection = CHIME__DEFAULT_MAX_CALLS_PER_CONNECTION;
  cfg->max_calls = CHIME__DEFAULT_MAX_CALLS;
  cfg->handshake_timeout_ms = CHIME__DEFAULT_HANDSHAKE_TIMEOUT_MS;
  cfg->tcp_rto_max_ms = CHIME__DEFAULT_TCP_RTO_MAX_MS;
  /* gRPC's default: a writer's next requests wait in its buffers (insert
   * throughput); off bounds a burst's memory (docs/operations.md). */
  cfg->bdp_probe = 1;
  cfg->keepalive_time_ms = CHIME_KEEPALIVE_TIME_MS;
  cfg->keepalive_timeout_ms = CHIME_KEEPALIVE_TIMEOUT_MS;
  cfg->checkpoint.keep = 3;
}

static int parse_budgets(chime__config_t *cfg, json_t *obj, char *err,
                         size_t errlen) {
  const char *key;
  json_t *v;
  if (!json_is_object(obj))
    return chime__cfg_fail(err, errlen, "'budgets': expected an object");
  json_object_foreach(obj, key, v) {
    uint64_t *dst;
    if (strcmp(key, "stream_ring_bytes") == 0)
      dst = &cfg->stream_ring_bytes;
    else if (strcmp(key, "total_ring_bytes") == 0)
      dst = &cfg->total_ring_bytes;
    else if (strcmp(key, "staged_insert_bytes") == 0)
      dst = &cfg->staged_insert_bytes;
    else
      return chime__cfg_fail(
          err, errlen,
          "'budgets.%s': unknown key (known: stream_ring_bytes, "
          "total_ring_bytes, staged_insert_bytes)",
          key);
    char kw[96];
    snprintf(kw, sizeof(kw), "'budgets.%s'", key);
    if (chime__cfg_u64(v, kw, dst, err, errlen) != 0)
      return CHIME_EINVAL;
    if (*dst == 0)
      return chime__cfg_fail(err, errlen, "%s: must be at least 1", kw);
  }
  return 0;
}

/* A token file: one token of 1..CHIME__TOKEN_MAX printable, non-space
 * bytes; a trailing newline (and spaces) are dropped. The token itself
 * never appears in an error. */
static int read_token(chime__token_config_t *t, const char *path,
                      const char *kw, char *err, size_t errlen) {
  char buf[CHIME__TOKEN_MAX + 64];
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return chime__cfg_fail(err, errlen, "%s: cannot read '%s': %s", kw, path,
                           strerror(errno));
  size_t n = fread(buf, 1, sizeof(buf), f);
  int more = fgetc(f) != EOF;
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                   buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (more || n > CHIME__TOKEN_MAX)
    return chime__cfg_fail(err, errlen,
                           "%s: the token in '%s' is longer than %d bytes", kw,
                           path, CHIME__TOKEN_MAX);
  if (n == 0)
    return chime__cfg_fail(err, errlen, "%s: '%s' holds no token", kw, path);
  for (size_t i = 0; i < n; i++)
    if (buf[i] <= ' ' || buf[i] > '~')
      return chime__cfg_fail(
          err, errlen,
          "%s: the token in '%s' has a space or a control or "
          "non-ASCII byte at offset %zu",
          kw, path, i);
  memcpy(t->token, buf, n);
  t->token[n] = '\0';
  t->len = (uint32_t)n;
  return 0;
}

/* "auth": {"tokens": [{"file": "...", "role": "actor|learner|admin"}]} */
static int parse_auth(chime__config_t *cfg, json_t *obj, char *err,
                      size_t errlen) {
  const char *key;
  json_t *v;
  if (!json_is_object(obj))
    return chime__cfg_fail(err, errlen, "'auth': expected an object");
  json_object_foreach(obj, key, v) {
    if (strcmp(key, "tokens") != 0)
      return chime__cfg_fail(err, errlen,
                             "'auth.%s': unknown key (known: tokens)", key);
    if (!json_is_array(v) || json_array_size(v) == 0)
      return chime__cfg_fail(
          err, errlen,
          "'auth.tokens': expected a non-empty array of {\"file\", "
          "\"role\"}");
    if (json_array_size(v) > CHIME__MAX_TOKENS)
      return chime__cfg_fail(err, errlen, "'auth.tokens': at most %d tokens",
                             CHIME__MAX_TOKENS);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
      char kw[64];
      snprintf(kw, sizeof(kw), "'auth.tokens[%zu]'", i);
      json_t *file = json_object_get(e, "file");
      json_t *role = json_object_get(e, "role");
      if (!json_is_object(e) || !json_is_string(file) ||
          !json_is_string(role) || json_object_size(e) != 2)
        return chime__cfg_fail(err, errlen,
                               "%s: expected {\"file\": PATH, \"role\": "
                               "\"actor\"|\"learner\"|\"admin\"}",
                               kw);
      chime__token_config_t *t = &cfg->tokens[cfg->ntokens];
      const char *r = json_string_value(role);
      t->role = strcmp(r, "actor") == 0     ? CHIME__ROLE_ACTOR
                : strcmp(r, "learner") == 0 ? CHIME__ROLE_LEARNER
                : strcmp(r, "admin") == 0   ? CHIME__ROLE_ADMIN
                                            : 0;
      if (t->role == 0)
        return chime__cfg_fail(
            err, errlen, "%s.role: '%.32s' (known: actor, learner, admin)", kw,
            r);
      if (read_token(t, json_string_value(file), kw, err, errlen) != 0)
        return CHIME_EINVAL;
      for (uint32_t k = 0; k < cfg->ntokens; k++)
        if (cfg->tokens[k].len == t->len &&
            memcmp(cfg->tokens[k].token, t->token, t->len) == 0)
          return chime__cfg_fail(
              err, errlen, "%s: the same token as auth.tokens[%u]", kw, k);
      cfg->ntokens++;
    }
  }
  return 0;
}

/* "tls": {"cert": PATH, "key": PATH, "client_ca": PATH}. The files are
 * read when the server starts listening; here they must at least open, so
 * a typo is a config error naming the key. */
static int parse_tls(chime__config_t *cfg, json_t *obj, char *err,
                     size_t errlen) {
  const char *key;
  json_t *v;
  if (!json_is_object(obj))
    return chime__cfg_fail(err, errlen, "'tls': expected an object");
  json_object_foreach(obj, key, v) {
    char *dst;
    if (strcmp(key, "cert") == 0)
      dst = cfg->tls.cert;
    else if (strcmp(key, "key") == 0)
      dst = cfg->tls.key;
    else if (strcmp(key, "client_ca") == 0)
      dst = cfg->tls.client_ca;
    else
      return chime__cfg_fail(
          err, errlen, "'tls.%.64s': unknown key (known: cert, key, client_ca)",
          key);
    if (!json_is_string(v) || json_string_value(v)[0] == '\0' ||
        strlen(json_string_value(v)) >= CHIME__MAX_PATH)
      return chime__cfg_fail(err, errlen,
                             "'tls.%s': expected a file path (1-%d bytes)", key,
                             CHIME__MAX_PATH - 1);
    const char *path = json_string_value(v);
    FILE *f = fopen(path, "re");
    if (f == NULL)
      return chime__cfg_fail(err, errlen, "'tls.%s': cannot read '%s': %s", key,
                             path, strerror(errno));
    fclose(f);
    snprintf(dst, CHIME__MAX_PATH, "%s", path);
  }
  if (cfg->tls.cert[0] == '\0' || cfg->tls.key[0] == '\0')
    return chime__cfg_fail(
        err, errlen,
        "'tls': needs both 'cert' and 'key' (the server's certificate "
        "chain and its private key, PEM)");
  return 0;
}

/* "checkpoint": {"dir": PATH, "interval_s": 0, "keep": 3}. */
static int parse_checkpoint(chime__config_t *cfg, json_t *obj, char *err,
                            size_t errlen) {
  const char *key;
  json_t *v;
  int rc = 0;
  if (!json_is_object(obj))
    return chime__cfg_fail(err, errlen, "'checkpoint': expected an object");
  json_object_foreach(obj, key, v) {
    if (strcmp(key, "dir") == 0) {
      if (!json_is_string(v) || json_string_value(v)[0] == '\0' ||
          strlen(json_string_value(v)) >= CHIME__MAX_PATH)
        return chime__cfg_fail(
            err, errlen,
            "'checkpoint.dir': expected a directory path (1-%d bytes)",
            CHIME__MAX_PATH - 1);
      snprintf(cfg->checkpoint.dir, CHIME__MAX_PATH, "%s",
               json_string_value(v));
    } else if (strcmp(key, "interval_s") == 0) {
      rc = chime__cfg_range(v, "'checkpoint.interval_s'", 0, 31536000,
                            &cfg->checkpoint.interval_s, err, errlen);
    } else if (strcmp(key, "keep") == 0) {
      rc = chime__cfg_range(v, "'checkpoint.keep'", 1, 1000,
                            &cfg->checkpoint.keep, err, errlen);
    } else {
      return chime__cfg_fail(
          err, errlen,
          "'checkpoint.%.64s': unknown key (known: dir, interval_s, "
          "keep)",
          key);
    }
    if (rc != 0)
      return rc;
  }
  if (cfg->checkpoint.dir[0] == '\0')
    return chime__cfg_fail(err, errlen, "'checkpoint': needs 'dir'");
  return 0;
}

static int parse_uids(chime__config_t *cfg, json_t *arr, char *err,
                      size_t errlen) {
  size_t i;
  json_t *v;
  if (!json_is_array(arr))
    return chime__cfg_fail(err, errlen,
                           "'allowed_uids': expected an array of uids");
  if (json_array_size(arr) > CHIME__MAX_UIDS)
    return chime__cfg_fail(err, errlen, "'allowed_uids': more than %d entries",
                           CHIME__MAX_UIDS);
  json_array_foreach(arr, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 0xfffffffe)
      return chime__cfg_fail(err, errlen, "'allowed_uids[%zu]': expected a uid",
                             i);
    cfg->allowed_uids[cfg->nuids++] = (uint32_t)json_integer_value(v);
  }
  return 0;
}

static int parse_string(char *dst, size_t cap, json_t *v, const char *key,
                        char *err, size_t errlen) {
  if (!json_is_string(v))
    return chime__cfg_fail(err, errlen, "'%s': expected a string", key);
  const char *s = json_string_value(v);
  if (s[0] == '\0' || strlen(s) >= cap)
    return chime__cfg_fail(err, errlen, "'%s': must be 1-%zu characters", key,
                           cap - 1);
  snprintf(dst, cap, "%s", s);
  return 0;
}

/* "shard": which shard this server is, 1..CHIME__KEY_MAX_SHARD. */
static int parse_shard(chime__config_t *cfg, json_t *v, char *err,
                       size_t errlen) {
  if (!json_is_integer(v) || json_integer_value(v) < 1 ||
      json_integer_value(v) > CHIME__KEY_MAX_SHARD)
    return chime__cfg_fail(err, errlen, CHIME__SHARD_RANGE_ERROR, "'shard'");
  cfg->shard = (uint32_t)json_integer_value(v);
  return 0;
}

/* 0 (the kernel's backoff) or 1000..120000, the kernel's own range for
 * TCP_RTO_MAX_MS. */
static int parse_rto_max(chime__config_t *cfg, json_t *v, char *err,
                         size_t errlen) {
  json_int_t ms = json_is_integer(v) ? json_integer_value(v) : -1;
  if (ms != 0 && (ms < 1000 || ms > 120000))
    return chime__cfg_fail(err, errlen, "%s",
                           "'tcp_rto_max_ms' must be 0 (the kernel's) or "
                           "1000..120000");
  cfg->tcp_rto_max_ms = (uint32_t)ms;
  return 0;
}

/* The server's keys (docs/operations.md, the table under the example):
 * an integer in lo..hi, a bool, a string, or a reader of its own, at off
 * in chime__config_t. Parsing, the unknown-key message and test_config's
 * check of the docs come from here. */
typedef enum { V_RANGE, V_BOOL, V_STRING, V_READ } vkind_t;
typedef int (*server_read_fn)(chime__config_t *cfg, json_t *v, char *err,
                              size_t errlen);
typedef struct {
  const char *name;
  vkind_t kind;
  size_t off, cap; /* V_STRING: the field's size */
  uint64_t lo, hi; /* V_RANGE */
  server_read_fn read;
} server_key_t;

static int read_tables(chime__config_t *cfg, json_t *v, char *err,
                       size_t errlen);

#define RANGE(k, field, l, h)                                                  \
  { k, V_RANGE, offsetof(chime__config_t, field), 0, l, h, NULL }
#define STRING(k, field)                                                       \
  {                                                                            \
    k, V_STRING, offsetof(chime__config_t, field),                             \
        sizeof(((chime__config_t *)0)->field), 0, 0, NULL                      \
  }
#define BOOL(k, field)                                                         \
  { k, V_BOOL, offsetof(chime__config_t, field), 0, 0, 0, NULL }
#define READ(k, fn)                                                            \
  { k, V_READ, 0, 0, 0, 0, fn }

static const server_key_t server_keys[] = {
    STRING("listen", listen),
    STRING("metrics", metrics),
    STRING("handoff_socket", handoff_socket),
    RANGE("handoff_expires_ms", handoff_expires_ms, 1, 3600000),
    RANGE("max_connections", max_connections, 1, 1000000),
    RANGE("max_calls_per_connection", max_calls_per_connection, 1, 1000000),
    RANGE("max_calls", max_calls, 1, 10000000),
    RANGE("handshake_timeout_ms", handshake_timeout_ms, 1, 3600000),
    READ("tcp_rto_max_ms", parse_rto_max),
    RANGE("keepalive_time_ms", keepalive_time_ms, 0, 3600000),
    RANGE("keepalive_timeout_ms", keepalive_timeout_ms, 1, 3600000),
    RANGE("max_connection_age_ms", max_connection_age_ms, 0, INT32_MAX),
    /* 0 would cut every call the moment its connection ages: left out,
     * calls run their course. */
    RANGE("max_connection_age_grace_ms", max_connection_age_grace_ms, 1,
          INT32_MAX),
    RANGE("sampler_threads", sampler_threads, 1, 64),
    READ("shard", parse_shard),
    READ("allowed_uids", parse_uids),
    READ("auth", parse_auth),
    READ("tls", parse_tls),
    READ("checkpoint", parse_checkpoint),
    READ("budgets", parse_budgets),
    BOOL("bdp_probe", bdp_probe),
    BOOL("pin_host_memory", pin_host_memory),
    READ("tables", read_tables),
};
#define NSERVER_KEYS (sizeof(server_keys) / sizeof(server_keys[0]))

const char *chime__config_server_key(uint32_t i) {
  return i < NSERVER_KEYS ? server_keys[i].name : NULL;
}

static int read_tables(chime__config_t *cfg, json_t *v, char *err,
                       size_t errlen) {
  size_t i;
  json_t *t;
  if (!json_is_array(v) || json_array_size(v) == 0)
    return chime__cfg_fail(err, errlen, "'tables': expected a non-empty array");
  if (json_array_size(v) > CHIME__MAX_TABLES)
    return chime__cfg_fail(err, errlen, "'tables': more than %d tables",
                           CHIME__MAX_TABLES);
  json_array_foreach(v, i, t) {
    chime__table_config_t *tc = &cfg->tables[cfg->ntables];
    int rc = chime__config_table_parse(tc, t, (uint32_t)i, err, errlen);
    if (rc != 0)
      return rc;
    for (uint32_t j = 0; j < cfg->ntables; j++)
      if (strcmp(cfg->tables[j].name, tc->name) == 0)
        return chime__cfg_fail(err, errlen, "table '%s': declared twice",
                               tc->name);
    cfg->ntables++;
  }
  return 0;
}

static int read_server_key(chime__config_t *cfg, const server_key_t *k,
                           json_t *v, char *err, size_t errlen) {
  char kw[64];
  snprintf(kw, sizeof(kw), "'%s'", k->name);
  uint8_t *at = (uint8_t *)cfg + k->off;
  switch (k->kind) {
  case V_RANGE:
    return chime__cfg_range(v, kw, k->lo, k->hi, (uint32_t *)(void *)at, err,
                            errlen);
  case V_BOOL:
    if (!json_is_boolean(v))
      return chime__cfg_fail(err, errlen, "%s: expected true or false", kw);
    *(int *)(void *)at = json_is_true(v);
    return 0;
  case V_STRING:
    return parse_string((char *)at, k->cap, v, k->name, err, errlen);
  case V_READ:
    break;
  }
  return k->read(cfg, v, err, errlen);
}

static int unknown_server_key(const char *key, char *err, size_t errlen) {
  char known[1024];
  size_t at = 0;
  for (size_t i = 0; i < NSERVER_KEYS && at < sizeof(known); i++)
    at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%s",
                           i ? ", " : "", server_keys[i].name);
  return chime__cfg_fail(err, errlen, "'%s': unknown key (known: %s)", key,
                         known);
}

/* What one key cannot check alone, once all are read. */
static int server_check(const chime__config_t *cfg, json_t *root, char *err,
                        size_t errlen) {
  if (json_object_get(root, "tables") == NULL)
    return chime__cfg_fail(err, errlen, "'tables' is required");
  if (json_object_get(root, "max_connection_age_grace_ms") != NULL &&
      cfg->max_connection_age_ms == 0)
    return chime__cfg_fail(
        err, errlen,
        "'max_connection_age_grace_ms': only a connection age uses it "
        "(set max_connection_age_ms)");
  if (cfg->stream_ring_bytes > cfg->total_ring_bytes)
    return chime__cfg_fail(
        err, errlen,
        "'budgets': stream_ring_bytes %llu exceeds total_ring_bytes %llu",
        (unsigned long long)cfg->stream_ring_bytes,
        (unsigned long long)cfg->total_ring_bytes);
  return 0;
}

int chime__config_parse(chime__config_t *cfg, const char *text, char *err,
                        size_t errlen) {
  json_error_t jerr;
  int rc = 0;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  config_base(cfg);
  if (root == NULL)
    return chime__cfg_fail(err, errlen, "line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return chime__cfg_fail(err, errlen, "the config must be a JSON object");
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    size_t k = 0;
    while (k < NSERVER_KEYS && strcmp(server_keys[k].name, key) != 0)
      k++;
    rc = k == NSERVER_KEYS
             ? unknown_server_key(key, err, errlen)
             : read_server_key(cfg, &server_keys[k], v, err, errlen);
    if (rc != 0)
      break;
  }
  if (rc == 0)
    rc = server_check(cfg, root, err, errlen);
  json_decref(root);
  return rc;
}

int chime__config_default(chime__config_t *cfg, char *err, size_t errlen) {
  static const char json[] =
      "{\"tables\":[{\"name\":\"demo\","
      "\"spec\":\"obs:f32[64], action:i32[], reward:f32[]\","
      "\"capacity\":65536,\"sampler\":\"fifo\",\"min_size\":1}]}";
  return chime__config_parse(cfg, json, err, errlen);
}

int chime__config_load(chime__config_t *cfg, const char *path, char *err,
                       size_t errlen) {
  json_error_t jerr;
  int rc;
  char *text = NULL;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    rc = chime__cfg_fail(err, errlen, "%s: line %d column %d: %s", path,
                         jerr.line, jerr.column, jerr.text);
    goto out;
  }
  /* Re-serialised and parsed once, so files and strings share one parser. */
  text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (text == NULL) {
    rc = chime__cfg_fail(err, errlen, "%s: out of memory", path);
    goto out;
  }
  rc = chime__config_parse(cfg, text, err, errlen);
  if (rc != 0 && err != NULL && errlen > 0) {
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", err);
    snprintf(err, errlen, "%s: %s", path, tmp);
  }
out:
  free(text);
  json_decref(root);
  return rc;
}
