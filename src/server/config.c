/* chimed's configuration file (JSON, read with jansson). Every key is known:
 * a typo must fail loudly rather than silently keep a default. */
#include "server/config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "chime/errors.h"
#include "common/key.h"
#include "replay/sumtree.h"
#include "replay/table.h"
#include "replay/zleaf.h"
#include "wire/insert.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return CHIME_EINVAL;
}

#define SELECTOR_LIST                                                          \
  "\"fifo\", \"lifo\", \"uniform\", \"prioritized\", \"min_heap\" or "         \
  "\"max_heap\""

static int get_u64(json_t *v, const char *key, uint64_t *out, char *err,
                   size_t errlen);

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
  /* gRPC's default: a writer's next requests wait in its buffers (insert
   * throughput); off bounds a burst's memory (docs/operations.md). */
  cfg->bdp_probe = 1;
  cfg->keepalive_time_ms = CHIME_KEEPALIVE_TIME_MS;
  cfg->keepalive_timeout_ms = CHIME_KEEPALIVE_TIMEOUT_MS;
  cfg->checkpoint.keep = 3;
}

/* A key that takes an integer in lo..hi. */
static int get_range(json_t *v, const char *kw, uint64_t lo, uint64_t hi,
                     uint32_t *out, char *err, size_t errlen) {
  uint64_t x = 0;
  if (get_u64(v, kw, &x, err, errlen) != 0)
    return CHIME_EINVAL;
  if (x < lo || x > hi)
    return fail(err, errlen, "%s: must be %llu..%llu", kw,
                (unsigned long long)lo, (unsigned long long)hi);
  *out = (uint32_t)x;
  return 0;
}

/* Checks one table after its fields are read; `where` names it. */
static int table_check(const chime__table_config_t *t, const char *where,
                       char *err, size_t errlen) {
  uint64_t sb = chime_spec_sample_bytes(&t->spec);
  if (t->capacity == 0)
    return fail(err, errlen, "%s: capacity must be at least 1", where);
  if (sb == 0 || t->capacity > CHIME__MAX_TABLE_BYTES / sb)
    return fail(err, errlen,
                "%s: capacity %llu of %llu-byte samples exceeds %llu bytes",
                where, (unsigned long long)t->capacity, (unsigned long long)sb,
                (unsigned long long)CHIME__MAX_TABLE_BYTES);
  if (t->capacity > CHIME__MAX_TABLE_ITEMS)
    return fail(err, errlen, "%s: capacity %llu exceeds %llu items", where,
                (unsigned long long)t->capacity,
                (unsigned long long)CHIME__MAX_TABLE_ITEMS);
  if (t->min_size > t->capacity)
    return fail(err, errlen, "%s: min_size %llu exceeds capacity %llu", where,
                (unsigned long long)t->min_size,
                (unsigned long long)t->capacity);
  /* A sequence table's windows overlap and leave with their oldest
   * steps' block: far fewer than capacity_steps are alive at once. */
  uint64_t most = chime__table_max_items(t);
  if (t->sequence_length > 0 && t->min_size > most)
    return fail(err, errlen,
                "%s: min_size %llu exceeds the %llu windows the table can "
                "hold at once (capacity_steps %llu, sequence_length %u, "
                "stride %u, episode_end \"%s\"): sampling would wait for "
                "ever; lower min_size or raise capacity_steps",
                where, (unsigned long long)t->min_size,
                (unsigned long long)most, (unsigned long long)t->capacity_steps,
                t->sequence_length, t->stride, t->episode_pad ? "pad" : "drop");
  return 0;
}

/* A sequence table's keys; its capacity (in items) becomes capacity_steps:
 * a step starts at most one window. */
static int sequence_check(chime__table_config_t *t, const char *where,
                          int have_cap, int have_steps, int have_remover,
                          char *err, size_t errlen) {
  if (have_cap)
    return fail(err, errlen,
                "%s: 'capacity': a sequence table is sized by capacity_steps",
                where);
  if (!have_steps || t->sequence_length == 0)
    return fail(err, errlen,
                "%s: a sequence table needs both 'capacity_steps' and "
                "'sequence_length'",
                where);
  if (t->capacity_steps == 0 || t->capacity_steps > CHIME__MAX_TABLE_STEPS)
    return fail(err, errlen, "%s: 'capacity_steps': must be 1..%llu", where,
                (unsigned long long)CHIME__MAX_TABLE_STEPS);
  if (t->stride == 0)
    t->stride = t->sequence_length;
  if (t->stride > t->sequence_length)
    return fail(err, errlen,
                "%s: 'stride' %u exceeds sequence_length %u (steps between "
                "windows would belong to no item)",
                where, t->stride, t->sequence_length);
  if (have_remover)
    return fail(err, errlen,
                "%s: 'remover': a sequence table's items leave with their "
                "oldest steps (capacity_steps), no remover picks them",
                where);
  for (uint32_t i = 0; i < t->spec.nleaves; i++) {
    if (t->spec.leaves[i].ragged)
      return fail(err, errlen,
                  "%s: leaf '%s' is ragged: sequences keep fixed-shape steps "
                  "(a ragged leaf is for plain tables)",
                  where, t->spec.leaves[i].name);
    if (t->spec.leaves[i].ndim >= CHIME_MAX_DIMS)
      return fail(err, errlen,
                  "%s: leaf '%s' has %u dimensions; a batch prepends the "
                  "sequence's, at most %d in all",
                  where, t->spec.leaves[i].name, t->spec.leaves[i].ndim,
                  CHIME_MAX_DIMS);
    if (t->episode_pad && strcmp(t->spec.leaves[i].name, "mask") == 0)
      return fail(err, errlen,
                  "%s: leaf 'mask': episode_end \"pad\" adds a leaf of that "
                  "name",
                  where);
  }
  if (t->episode_pad && t->spec.nleaves >= CHIME_MAX_LEAVES)
    return fail(err, errlen,
                "%s: episode_end \"pad\" adds a mask leaf: at most %d leaves",
                where, CHIME_MAX_LEAVES - 1);
  t->capacity = t->capacity_steps;
  return 0;
}

static int name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= CHIME_MAX_NAME)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
      return 0;
  }
  return 1;
}

static int get_u64(json_t *v, const char *key, uint64_t *out, char *err,
                   size_t errlen) {
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return fail(err, errlen, "%s: expected a non-negative integer", key);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

/* "compress": {"leaf": level, ...} (docs/replay.md, "Compressed
 * leaves"), read once the spec is known: each a leaf of a plain table's
 * items (ragged ones too: compressed at their length) or a sequence
 * table's steps, at a zstd level 1..22. */
static int parse_compress(chime__table_config_t *t, json_t *v,
                          const char *where, char *err, size_t errlen) {
  const char *leaf;
  json_t *lv;
  if (!json_is_object(v))
    return fail(err, errlen,
                "%s: 'compress': expected an object of leaf name: zstd level",
                where);
  json_object_foreach(v, leaf, lv) {
    uint32_t i = 0;
    while (i < t->spec.nleaves && strcmp(t->spec.leaves[i].name, leaf) != 0)
      i++;
    if (i == t->spec.nleaves)
      return fail(err, errlen, "%s: 'compress': no leaf '%.64s' in the spec",
                  where, leaf);
    if (chime_leaf_bytes(&t->spec.leaves[i]) >= UINT32_MAX)
      return fail(err, errlen,
                  "%s: 'compress': leaf '%s' is 4 GiB or more, too large to "
                  "compress",
                  where, leaf);
    if (!json_is_integer(lv) ||
        json_integer_value(lv) < CHIME__ZLEAF_MIN_LEVEL ||
        json_integer_value(lv) > CHIME__ZLEAF_MAX_LEVEL)
      return fail(err, errlen,
                  "%s: 'compress': leaf '%s': expected a zstd level %d..%d",
                  where, leaf, CHIME__ZLEAF_MIN_LEVEL, CHIME__ZLEAF_MAX_LEVEL);
    t->compress[i] = (uint8_t)json_integer_value(lv);
  }
  return 0;
}

static int parse_table(chime__table_config_t *t, json_t *obj, uint32_t index,
                       char *err, size_t errlen) {
  char where[CHIME_MAX_NAME + 32];
  snprintf(where, sizeof(where), "tables[%u]", index);
  if (!json_is_object(obj))
    return fail(err, errlen, "%s: expected an object", where);
  json_t *name = json_object_get(obj, "name");
  if (!json_is_string(name))
    return fail(err, errlen, "%s: 'name' (a string) is required", where);
  if (!name_ok(json_string_value(name)))
    return fail(err, errlen,
                "%s: name '%.64s' must be 1-63 characters of [A-Za-z0-9_.-]",
                where, json_string_value(name));
  snprintf(t->name, sizeof(t->name), "%s", json_string_value(name));
  snprintf(where, sizeof(where), "table '%s'", t->name);

  int have_spec = 0, have_cap = 0, have_remover = 0, have_exp = 0, have_mts = 0;
  int have_spi = 0, have_buf = 0, have_steps = 0, seq_keys = 0;
  t->min_size = 1;
  t->initial_priority = 1.0;
  t->sampler = CHIME__SAMPLER_FIFO;
  t->remover = CHIME__SAMPLER_FIFO;
  t->priority_exponent = 1.0;
  t->max_writers = CHIME__INSERT_WRITERS;
  t->writer_idle_ms = CHIME__INSERT_WRITER_IDLE_MS;
  t->writer_token_reserve = CHIME__INSERT_WRITER_TOKEN_RESERVE;
  const char *key;
  json_t *v, *compress = NULL;
  json_object_foreach(obj, key, v) {
    char kw[CHIME_MAX_NAME + 64];
    snprintf(kw, sizeof(kw), "%s: '%s'", where, key);
    if (strcmp(key, "name") == 0)
      continue;
    if (strcmp(key, "spec") == 0) {
      char perr[256];
      if (!json_is_string(v))
        return fail(err, errlen, "%s: expected a string", kw);
      if (chime_spec_parse(&t->spec, json_string_value(v), perr,
                           sizeof(perr)) != 0)
        return fail(err, errlen, "%s: bad spec: %s", where, perr);
      have_spec = 1;
    } else if (strcmp(key, "capacity") == 0) {
      if (get_u64(v, kw, &t->capacity, err, errlen) != 0)
        return CHIME_EINVAL;
      have_cap = 1;
    } else if (strcmp(key, "min_size") == 0) {
      if (get_u64(v, kw, &t->min_size, err, errlen) != 0)
        return CHIME_EINVAL;
      /* As Reverb's limiters: a batch needs an item to draw from. */
      if (t->min_size == 0)
        return fail(err, errlen,
                    "%s: must be at least 1 (sampling waits for this many "
                    "items, and a batch needs one to draw from)",
                    kw);
    } else if (strcmp(key, "sampler") == 0 || strcmp(key, "remover") == 0) {
      chime__sampler_t sel =
          chime__sampler_parse(json_is_string(v) ? json_string_value(v) : "");
      if (sel == 0)
        return fail(err, errlen, "%s: expected " SELECTOR_LIST, kw);
      if (key[0] == 's') {
        t->sampler = sel;
      } else {
        t->remover = sel;
        have_remover = 1;
      }
    } else if (strcmp(key, "priority_exponent") == 0) {
      if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
          json_number_value(v) > 1e6)
        return fail(err, errlen, "%s: expected a number in 0..1e6", kw);
      t->priority_exponent = json_number_value(v);
      have_exp = 1;
    } else if (strcmp(key, "samples_per_insert") == 0 ||
               strcmp(key, "error_buffer") == 0) {
      double x = json_is_number(v) ? json_number_value(v) : -1;
      int spi = key[0] == 's';
      if (!(x >= 0) || x > 1e9 || (spi && x == 0))
        return fail(err, errlen, "%s: expected a number in %s..1e9", kw,
                    spi ? "(0" : "0");
      if (spi) {
        t->samples_per_insert = x;
        have_spi = 1;
      } else {
        t->error_buffer = x;
        have_buf = 1;
      }
    } else if (strcmp(key, "max_times_sampled") == 0) {
      if (get_u64(v, kw, &t->max_times_sampled, err, errlen) != 0)
        return CHIME_EINVAL;
      if (t->max_times_sampled > UINT32_MAX)
        return fail(err, errlen, "%s: must be 0..%u (0: no limit)", kw,
                    UINT32_MAX);
      have_mts = 1;
    } else if (strcmp(key, "capacity_steps") == 0) {
      if (get_u64(v, kw, &t->capacity_steps, err, errlen) != 0)
        return CHIME_EINVAL;
      have_steps = 1;
    } else if (strcmp(key, "sequence_length") == 0 ||
               strcmp(key, "stride") == 0) {
      uint64_t x = 0;
      if (get_u64(v, kw, &x, err, errlen) != 0)
        return CHIME_EINVAL;
      if (x == 0 || x > CHIME__MAX_SEQUENCE_LENGTH)
        return fail(err, errlen, "%s: must be 1..%u", kw,
                    CHIME__MAX_SEQUENCE_LENGTH);
      if (key[1] == 'e')
        t->sequence_length = (uint32_t)x;
      else
        t->stride = (uint32_t)x;
      seq_keys |= key[1] == 'e' ? 0 : 1;
    } else if (strcmp(key, "episode_end") == 0) {
      const char *e = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(e, "pad") != 0 && strcmp(e, "drop") != 0)
        return fail(err, errlen, "%s: expected \"drop\" or \"pad\"", kw);
      t->episode_pad = e[0] == 'p';
      seq_keys |= 2;
    } else if (strcmp(key, "initial_priority") == 0) {
      if (json_is_string(v) && strcmp(json_string_value(v), "max") == 0) {
        t->initial_priority_max = 1;
      } else if (json_is_number(v) && json_number_value(v) >= 0 &&
                 json_number_value(v) <= 1e300) {
        t->initial_priority = json_number_value(v);
      } else {
        return fail(err, errlen, "%s: expected \"max\" or a number >= 0", kw);
      }
      seq_keys |= 4;
    } else if (strcmp(key, "max_writers") == 0) {
      if (get_range(v, kw, 1, CHIME__INSERT_MAX_WRITERS, &t->max_writers, err,
                    errlen) != 0)
        return CHIME_EINVAL;
    } else if (strcmp(key, "writer_idle_ms") == 0) {
      if (get_range(v, kw, 0, 86400000, &t->writer_idle_ms, err, errlen) != 0)
        return CHIME_EINVAL;
    } else if (strcmp(key, "writer_token_reserve") == 0) {
      if (get_range(v, kw, 0, 100, &t->writer_token_reserve, err, errlen) != 0)
        return CHIME_EINVAL;
    } else if (strcmp(key, "max_staleness") == 0) {
      if (get_u64(v, kw, &t->max_staleness, err, errlen) != 0)
        return CHIME_EINVAL;
    } else if (strcmp(key, "staleness_weight") == 0) {
      const char *w = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(w, "none") != 0 && strcmp(w, "inverse") != 0)
        return fail(err, errlen, "%s: expected \"none\" or \"inverse\"", kw);
      t->staleness_weight = w[0] == 'i' ? CHIME__STALE_WEIGHT_INVERSE : 0;
    } else if (strcmp(key, "compress") == 0) {
      compress = v; /* read once the spec is known */
    } else if (strcmp(key, "data_dir") == 0) {
      /* Room left for the file's name (NAME.table) behind it. */
      size_t most = CHIME__MAX_DATA_DIR - CHIME_MAX_NAME - 16;
      if (!json_is_string(v) || json_string_value(v)[0] == '\0' ||
          strlen(json_string_value(v)) > most)
        return fail(err, errlen, "%s: expected a directory path (1-%zu bytes)",
                    kw, most);
      snprintf(t->data_dir, sizeof(t->data_dir), "%s", json_string_value(v));
    } else {
      return fail(err, errlen,
                  "%s: unknown key (known: name, spec, capacity, sampler, "
                  "remover, priority_exponent, max_times_sampled, min_size, "
                  "samples_per_insert, error_buffer, capacity_steps, "
                  "sequence_length, stride, episode_end, initial_priority, "
                  "max_writers, writer_idle_ms, writer_token_reserve, "
                  "max_staleness, staleness_weight, compress, data_dir)",
                  kw);
    }
  }
  if (!have_spec)
    return fail(err, errlen, "%s: 'spec' is required", where);
  if (compress != NULL && parse_compress(t, compress, where, err, errlen) != 0)
    return CHIME_EINVAL;
  if (t->sequence_length > 0 || have_steps) {
    int rc = sequence_check(t, where, have_cap, have_steps, have_remover, err,
                            errlen);
    if (rc != 0)
      return rc;
  } else if (seq_keys != 0) {
    return fail(err, errlen,
                "%s: 'stride', 'episode_end' and 'initial_priority' are for "
                "sequence tables (set sequence_length and capacity_steps)",
                where);
  }
  if (!have_cap && t->sequence_length == 0)
    return fail(err, errlen, "%s: 'capacity' is required", where);
  if (t->data_dir[0] != '\0' && t->sequence_length > 0)
    return fail(err, errlen,
                "%s: 'data_dir': sequence tables are not kept in files yet "
                "(docs/operations.md, Tables in files)",
                where);
  if (t->staleness_weight != 0 &&
      (t->sampler != CHIME__SAMPLER_PRIORITIZED || t->sequence_length > 0))
    return fail(err, errlen,
                "%s: 'staleness_weight': it weighs a prioritized sampler's "
                "draws, in plain tables only",
                where);
  /* A fifo sampler's full table makes inserts wait for samples to make
   * room (a queue): it removes nothing itself, and needs a limit. */
  if (t->sampler == CHIME__SAMPLER_FIFO) {
    if (have_remover && t->remover != CHIME__SAMPLER_FIFO)
      return fail(err, errlen,
                  "%s: 'remover': a fifo sampler's full table makes inserts "
                  "wait, it removes nothing (leave remover out)",
                  where);
    if (have_mts && t->max_times_sampled == 0)
      return fail(err, errlen,
                  "%s: 'max_times_sampled': a fifo sampler needs a limit (its "
                  "full table waits for samples to make room; 1 is a queue)",
                  where);
    if (!have_mts)
      t->max_times_sampled = 1;
  }
  if (have_buf && !have_spi)
    return fail(err, errlen,
                "%s: 'error_buffer': only a rate limit uses it (set "
                "samples_per_insert)",
                where);
  /* As Reverb: a window narrower than max(1, samples_per_insert) can leave
   * an insert and a sample each waiting for the other for ever. Absent, it
   * is that smallest safe width. */
  double least = t->samples_per_insert > 1.0 ? t->samples_per_insert : 1.0;
  if (have_spi && !have_buf)
    t->error_buffer = least;
  if (have_spi && t->error_buffer < least)
    return fail(err, errlen,
                "%s: 'error_buffer': %g is below max(1, samples_per_insert) "
                "= %g: inserts and samples could wait for each other for "
                "ever",
                where, t->error_buffer, least);
  if (chime__fifo_ratio_stalls(t))
    return fail(err, errlen,
                "%s: 'samples_per_insert' %g is below 'max_times_sampled' "
                "%llu of a fifo sampler: every item is sampled %llu times "
                "before it leaves and a full fifo table makes inserts wait "
                "for room, so once it fills, inserts would wait for room and "
                "samples for the ratio for ever (set samples_per_insert >= "
                "max_times_sampled)",
                where, t->samples_per_insert,
                (unsigned long long)t->max_times_sampled,
                (unsigned long long)t->max_times_sampled);
  /* A window's priority weighs in the sum tree like any: it must stay
   * within what every item may weigh. */
  if (t->sequence_length > 0 && !t->initial_priority_max &&
      t->sampler == CHIME__SAMPLER_PRIORITIZED &&
      !(pow(t->initial_priority, t->priority_exponent) <=
        CHIME__SUMTREE_MAX_VALUE))
    return fail(err, errlen,
                "%s: 'initial_priority': %g^%g exceeds %g, the most an item "
                "may weigh in a prioritized table",
                where, t->initial_priority, t->priority_exponent,
                CHIME__SUMTREE_MAX_VALUE);
  if (have_exp && t->sampler != CHIME__SAMPLER_PRIORITIZED &&
      t->remover != CHIME__SAMPLER_PRIORITIZED)
    return fail(err, errlen,
                "%s: 'priority_exponent': only a prioritized sampler or "
                "remover uses it",
                where);
  return table_check(t, where, err, errlen);
}

static int parse_budgets(chime__config_t *cfg, json_t *obj, char *err,
                         size_t errlen) {
  const char *key;
  json_t *v;
  if (!json_is_object(obj))
    return fail(err, errlen, "'budgets': expected an object");
  json_object_foreach(obj, key, v) {
    uint64_t *dst;
    if (strcmp(key, "stream_ring_bytes") == 0)
      dst = &cfg->stream_ring_bytes;
    else if (strcmp(key, "total_ring_bytes") == 0)
      dst = &cfg->total_ring_bytes;
    else if (strcmp(key, "staged_insert_bytes") == 0)
      dst = &cfg->staged_insert_bytes;
    else
      return fail(err, errlen,
                  "'budgets.%s': unknown key (known: stream_ring_bytes, "
                  "total_ring_bytes, staged_insert_bytes)",
                  key);
    char kw[96];
    snprintf(kw, sizeof(kw), "'budgets.%s'", key);
    if (get_u64(v, kw, dst, err, errlen) != 0)
      return CHIME_EINVAL;
    if (*dst == 0)
      return fail(err, errlen, "%s: must be at least 1", kw);
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
    return fail(err, errlen, "%s: cannot read '%s': %s", kw, path,
                strerror(errno));
  size_t n = fread(buf, 1, sizeof(buf), f);
  int more = fgetc(f) != EOF;
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                   buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (more || n > CHIME__TOKEN_MAX)
    return fail(err, errlen, "%s: the token in '%s' is longer than %d bytes",
                kw, path, CHIME__TOKEN_MAX);
  if (n == 0)
    return fail(err, errlen, "%s: '%s' holds no token", kw, path);
  for (size_t i = 0; i < n; i++)
    if (buf[i] <= ' ' || buf[i] > '~')
      return fail(err, errlen,
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
    return fail(err, errlen, "'auth': expected an object");
  json_object_foreach(obj, key, v) {
    if (strcmp(key, "tokens") != 0)
      return fail(err, errlen, "'auth.%s': unknown key (known: tokens)", key);
    if (!json_is_array(v) || json_array_size(v) == 0)
      return fail(err, errlen,
                  "'auth.tokens': expected a non-empty array of {\"file\", "
                  "\"role\"}");
    if (json_array_size(v) > CHIME__MAX_TOKENS)
      return fail(err, errlen, "'auth.tokens': at most %d tokens",
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
        return fail(err, errlen,
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
        return fail(err, errlen,
                    "%s.role: '%.32s' (known: actor, learner, admin)", kw, r);
      if (read_token(t, json_string_value(file), kw, err, errlen) != 0)
        return CHIME_EINVAL;
      for (uint32_t k = 0; k < cfg->ntokens; k++)
        if (cfg->tokens[k].len == t->len &&
            memcmp(cfg->tokens[k].token, t->token, t->len) == 0)
          return fail(err, errlen, "%s: the same token as auth.tokens[%u]", kw,
                      k);
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
    return fail(err, errlen, "'tls': expected an object");
  json_object_foreach(obj, key, v) {
    char *dst;
    if (strcmp(key, "cert") == 0)
      dst = cfg->tls.cert;
    else if (strcmp(key, "key") == 0)
      dst = cfg->tls.key;
    else if (strcmp(key, "client_ca") == 0)
      dst = cfg->tls.client_ca;
    else
      return fail(err, errlen,
                  "'tls.%.64s': unknown key (known: cert, key, client_ca)",
                  key);
    if (!json_is_string(v) || json_string_value(v)[0] == '\0' ||
        strlen(json_string_value(v)) >= CHIME__MAX_PATH)
      return fail(err, errlen, "'tls.%s': expected a file path (1-%d bytes)",
                  key, CHIME__MAX_PATH - 1);
    const char *path = json_string_value(v);
    FILE *f = fopen(path, "re");
    if (f == NULL)
      return fail(err, errlen, "'tls.%s': cannot read '%s': %s", key, path,
                  strerror(errno));
    fclose(f);
    snprintf(dst, CHIME__MAX_PATH, "%s", path);
  }
  if (cfg->tls.cert[0] == '\0' || cfg->tls.key[0] == '\0')
    return fail(err, errlen,
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
    return fail(err, errlen, "'checkpoint': expected an object");
  json_object_foreach(obj, key, v) {
    if (strcmp(key, "dir") == 0) {
      if (!json_is_string(v) || json_string_value(v)[0] == '\0' ||
          strlen(json_string_value(v)) >= CHIME__MAX_PATH)
        return fail(err, errlen,
                    "'checkpoint.dir': expected a directory path (1-%d bytes)",
                    CHIME__MAX_PATH - 1);
      snprintf(cfg->checkpoint.dir, CHIME__MAX_PATH, "%s",
               json_string_value(v));
    } else if (strcmp(key, "interval_s") == 0) {
      rc = get_range(v, "'checkpoint.interval_s'", 0, 31536000,
                     &cfg->checkpoint.interval_s, err, errlen);
    } else if (strcmp(key, "keep") == 0) {
      rc = get_range(v, "'checkpoint.keep'", 1, 1000, &cfg->checkpoint.keep,
                     err, errlen);
    } else {
      return fail(err, errlen,
                  "'checkpoint.%.64s': unknown key (known: dir, interval_s, "
                  "keep)",
                  key);
    }
    if (rc != 0)
      return rc;
  }
  if (cfg->checkpoint.dir[0] == '\0')
    return fail(err, errlen, "'checkpoint': needs 'dir'");
  return 0;
}

static int parse_uids(chime__config_t *cfg, json_t *arr, char *err,
                      size_t errlen) {
  size_t i;
  json_t *v;
  if (!json_is_array(arr))
    return fail(err, errlen, "'allowed_uids': expected an array of uids");
  if (json_array_size(arr) > CHIME__MAX_UIDS)
    return fail(err, errlen, "'allowed_uids': more than %d entries",
                CHIME__MAX_UIDS);
  json_array_foreach(arr, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 0xfffffffe)
      return fail(err, errlen, "'allowed_uids[%zu]': expected a uid", i);
    cfg->allowed_uids[cfg->nuids++] = (uint32_t)json_integer_value(v);
  }
  return 0;
}

static int parse_string(char *dst, size_t cap, json_t *v, const char *key,
                        char *err, size_t errlen) {
  if (!json_is_string(v))
    return fail(err, errlen, "'%s': expected a string", key);
  const char *s = json_string_value(v);
  if (s[0] == '\0' || strlen(s) >= cap)
    return fail(err, errlen, "'%s': must be 1-%zu characters", key, cap - 1);
  snprintf(dst, cap, "%s", s);
  return 0;
}

/* "shard": which shard this server is, 1..CHIME__KEY_MAX_SHARD. */
static int parse_shard(chime__config_t *cfg, json_t *v, char *err,
                       size_t errlen) {
  if (!json_is_integer(v) || json_integer_value(v) < 1 ||
      json_integer_value(v) > CHIME__KEY_MAX_SHARD)
    return fail(err, errlen, CHIME__SHARD_RANGE_ERROR, "'shard'");
  cfg->shard = (uint32_t)json_integer_value(v);
  return 0;
}

int chime__config_parse(chime__config_t *cfg, const char *text, char *err,
                        size_t errlen) {
  json_error_t jerr;
  int rc = 0;
  int have_tables = 0, have_grace = 0;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  config_base(cfg);
  if (root == NULL) {
    rc = fail(err, errlen, "line %d column %d: %s", jerr.line, jerr.column,
              jerr.text);
    goto out;
  }
  if (!json_is_object(root)) {
    rc = fail(err, errlen, "the config must be a JSON object");
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "listen") == 0) {
      rc = parse_string(cfg->listen, sizeof(cfg->listen), v, key, err, errlen);
    } else if (strcmp(key, "metrics") == 0) {
      rc =
          parse_string(cfg->metrics, sizeof(cfg->metrics), v, key, err, errlen);
    } else if (strcmp(key, "handoff_socket") == 0) {
      rc = parse_string(cfg->handoff_socket, sizeof(cfg->handoff_socket), v,
                        key, err, errlen);
    } else if (strcmp(key, "handoff_expires_ms") == 0) {
      uint64_t ms = 0;
      rc = get_u64(v, "'handoff_expires_ms'", &ms, err, errlen);
      if (rc == 0 && (ms == 0 || ms > 3600000))
        rc = fail(err, errlen, "'handoff_expires_ms': must be 1..3600000");
      cfg->handoff_expires_ms = (uint32_t)ms;
    } else if (strcmp(key, "max_connections") == 0) {
      rc = get_range(v, "'max_connections'", 1, 1000000, &cfg->max_connections,
                     err, errlen);
    } else if (strcmp(key, "max_calls_per_connection") == 0) {
      rc = get_range(v, "'max_calls_per_connection'", 1, 1000000,
                     &cfg->max_calls_per_connection, err, errlen);
    } else if (strcmp(key, "max_calls") == 0) {
      rc = get_range(v, "'max_calls'", 1, 10000000, &cfg->max_calls, err,
                     errlen);
    } else if (strcmp(key, "sampler_threads") == 0) {
      rc = get_range(v, "'sampler_threads'", 1, 64, &cfg->sampler_threads, err,
                     errlen);
    } else if (strcmp(key, "keepalive_time_ms") == 0) {
      rc = get_range(v, "'keepalive_time_ms'", 0, 3600000,
                     &cfg->keepalive_time_ms, err, errlen);
    } else if (strcmp(key, "keepalive_timeout_ms") == 0) {
      rc = get_range(v, "'keepalive_timeout_ms'", 1, 3600000,
                     &cfg->keepalive_timeout_ms, err, errlen);
    } else if (strcmp(key, "max_connection_age_ms") == 0) {
      rc = get_range(v, "'max_connection_age_ms'", 0, INT32_MAX,
                     &cfg->max_connection_age_ms, err, errlen);
    } else if (strcmp(key, "max_connection_age_grace_ms") == 0) {
      /* 0 would cut every call the moment its connection ages: left out,
       * calls run their course. */
      rc = get_range(v, "'max_connection_age_grace_ms'", 1, INT32_MAX,
                     &cfg->max_connection_age_grace_ms, err, errlen);
      have_grace = 1;
    } else if (strcmp(key, "shard") == 0) {
      rc = parse_shard(cfg, v, err, errlen);
    } else if (strcmp(key, "handshake_timeout_ms") == 0) {
      rc = get_range(v, "'handshake_timeout_ms'", 1, 3600000,
                     &cfg->handshake_timeout_ms, err, errlen);
    } else if (strcmp(key, "allowed_uids") == 0) {
      rc = parse_uids(cfg, v, err, errlen);
    } else if (strcmp(key, "auth") == 0) {
      rc = parse_auth(cfg, v, err, errlen);
    } else if (strcmp(key, "tls") == 0) {
      rc = parse_tls(cfg, v, err, errlen);
    } else if (strcmp(key, "checkpoint") == 0) {
      rc = parse_checkpoint(cfg, v, err, errlen);
    } else if (strcmp(key, "budgets") == 0) {
      rc = parse_budgets(cfg, v, err, errlen);
    } else if (strcmp(key, "bdp_probe") == 0) {
      if (!json_is_boolean(v))
        rc = fail(err, errlen, "'bdp_probe': expected true or false");
      cfg->bdp_probe = json_is_true(v);
    } else if (strcmp(key, "pin_host_memory") == 0) {
      if (!json_is_boolean(v))
        rc = fail(err, errlen, "'pin_host_memory': expected true or false");
      cfg->pin_host_memory = json_is_true(v);
    } else if (strcmp(key, "tables") == 0) {
      size_t i;
      json_t *t;
      have_tables = 1;
      if (!json_is_array(v) || json_array_size(v) == 0) {
        rc = fail(err, errlen, "'tables': expected a non-empty array");
        goto out;
      }
      if (json_array_size(v) > CHIME__MAX_TABLES) {
        rc = fail(err, errlen, "'tables': more than %d tables",
                  CHIME__MAX_TABLES);
        goto out;
      }
      json_array_foreach(v, i, t) {
        chime__table_config_t *tc = &cfg->tables[cfg->ntables];
        rc = parse_table(tc, t, (uint32_t)i, err, errlen);
        if (rc != 0)
          goto out;
        for (uint32_t j = 0; j < cfg->ntables; j++) {
          if (strcmp(cfg->tables[j].name, tc->name) == 0) {
            rc = fail(err, errlen, "table '%s': declared twice", tc->name);
            goto out;
          }
        }
        cfg->ntables++;
      }
    } else {
      rc =
          fail(err, errlen,
               "'%s': unknown key (known: listen, metrics, handoff_socket, "
               "handoff_expires_ms, max_connections, max_calls_per_connection, "
               "max_calls, handshake_timeout_ms, "
               "keepalive_time_ms, keepalive_timeout_ms, "
               "max_connection_age_ms, max_connection_age_grace_ms, "
               "sampler_threads, shard, allowed_uids, auth, tls, checkpoint, "
               "budgets, bdp_probe, pin_host_memory, tables)",
               key);
    }
    if (rc != 0)
      goto out;
  }
  if (!have_tables) {
    rc = fail(err, errlen, "'tables' is required");
    goto out;
  }
  if (have_grace && cfg->max_connection_age_ms == 0) {
    rc = fail(err, errlen,
              "'max_connection_age_grace_ms': only a connection age uses it "
              "(set max_connection_age_ms)");
    goto out;
  }
  if (cfg->stream_ring_bytes > cfg->total_ring_bytes)
    rc = fail(err, errlen,
              "'budgets': stream_ring_bytes %llu exceeds total_ring_bytes %llu",
              (unsigned long long)cfg->stream_ring_bytes,
              (unsigned long long)cfg->total_ring_bytes);
out:
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
    rc = fail(err, errlen, "%s: line %d column %d: %s", path, jerr.line,
              jerr.column, jerr.text);
    goto out;
  }
  /* Re-serialised and parsed once, so files and strings share one parser. */
  text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (text == NULL) {
    rc = fail(err, errlen, "%s: out of memory", path);
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
