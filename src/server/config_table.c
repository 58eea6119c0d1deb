/* A table of chimed's config (docs/operations.md, "Table keys"): its keys
 * as data (a name and a reader each, in keys[] below: parsing, the
 * unknown-key message and test_config's check of the docs all come from
 * there), then the checks of the table as a whole once every key is read. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chime/chime.h"
#include "chime/errors.h"
#include "replay/sumtree.h"
#include "replay/table.h"
#include "replay/zleaf.h"
#include "server/config_group.h"
#include "server/config_table.h"
#include "server/config_value.h"
#include "wire/insert_limits.h"
#include "common/spec.h"

#define SELECTOR_LIST                                                          \
  "\"fifo\", \"lifo\", \"uniform\", \"prioritized\", \"min_heap\" or "         \
  "\"max_heap\""

/* Reads key kw's value v into t. */
typedef int (*read_fn)(chime__table_config_t *t, json_t *v, const char *kw,
                       char *err, size_t errlen);

static int r_spec(chime__table_config_t *t, json_t *v, const char *kw,
                  char *err, size_t errlen) {
  char perr[256];
  if (!json_is_string(v))
    return chime__cfg_fail(err, errlen, "%s: expected a string", kw);
  if (chime__spec_parse(&t->spec, json_string_value(v), perr, sizeof(perr)))
    return chime__cfg_fail(err, errlen, "%s: bad spec: %s", kw, perr);
  return 0;
}

static int r_capacity(chime__table_config_t *t, json_t *v, const char *kw,
                      char *err, size_t errlen) {
  return chime__cfg_u64(v, kw, &t->capacity, err, errlen);
}

static int r_min_size(chime__table_config_t *t, json_t *v, const char *kw,
                      char *err, size_t errlen) {
  if (chime__cfg_u64(v, kw, &t->min_size, err, errlen) != 0)
    return CHIME_EINVAL;
  /* As Reverb's limiters: a batch needs an item to draw from. */
  if (t->min_size == 0)
    return chime__cfg_fail(
        err, errlen,
        "%s: must be at least 1 (sampling waits for this many "
        "items, and a batch needs one to draw from)",
        kw);
  return 0;
}

static int selector(json_t *v, const char *kw, chime__selector_kind_t *out,
                    char *err, size_t errlen) {
  *out =
      chime__selector_kind_parse(json_is_string(v) ? json_string_value(v) : "");
  return *out == 0
             ? chime__cfg_fail(err, errlen, "%s: expected " SELECTOR_LIST, kw)
             : 0;
}

static int r_sampler(chime__table_config_t *t, json_t *v, const char *kw,
                     char *err, size_t errlen) {
  return selector(v, kw, &t->sampler, err, errlen);
}

static int r_remover(chime__table_config_t *t, json_t *v, const char *kw,
                     char *err, size_t errlen) {
  return selector(v, kw, &t->remover, err, errlen);
}

static int r_priority_exponent(chime__table_config_t *t, json_t *v,
                               const char *kw, char *err, size_t errlen) {
  if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
      json_number_value(v) > 1e6)
    return chime__cfg_fail(err, errlen, "%s: expected a number in 0..1e6", kw);
  t->priority_exponent = json_number_value(v);
  return 0;
}

/* A rate limiter's number in 0..1e9 (above 0 when positive is set). */
static int ratio(json_t *v, const char *kw, int positive, double *out,
                 char *err, size_t errlen) {
  double x = json_is_number(v) ? json_number_value(v) : -1;
  if (!(x >= 0) || x > 1e9 || (positive && x == 0))
    return chime__cfg_fail(err, errlen, "%s: expected a number in %s..1e9", kw,
                           positive ? "(0" : "0");
  *out = x;
  return 0;
}

static int r_samples_per_insert(chime__table_config_t *t, json_t *v,
                                const char *kw, char *err, size_t errlen) {
  return ratio(v, kw, 1, &t->samples_per_insert, err, errlen);
}

static int r_error_buffer(chime__table_config_t *t, json_t *v, const char *kw,
                          char *err, size_t errlen) {
  return ratio(v, kw, 0, &t->error_buffer, err, errlen);
}

static int r_max_times_sampled(chime__table_config_t *t, json_t *v,
                               const char *kw, char *err, size_t errlen) {
  if (chime__cfg_u64(v, kw, &t->max_times_sampled, err, errlen) != 0)
    return CHIME_EINVAL;
  if (t->max_times_sampled > UINT32_MAX)
    return chime__cfg_fail(err, errlen, "%s: must be 0..%u (0: no limit)", kw,
                           UINT32_MAX);
  return 0;
}

static int r_capacity_steps(chime__table_config_t *t, json_t *v, const char *kw,
                            char *err, size_t errlen) {
  return chime__cfg_u64(v, kw, &t->capacity_steps, err, errlen);
}

static int r_sequence_length(chime__table_config_t *t, json_t *v,
                             const char *kw, char *err, size_t errlen) {
  return chime__cfg_range(v, kw, 1, CHIME__MAX_SEQUENCE_LENGTH,
                          &t->sequence_length, err, errlen);
}

static int r_stride(chime__table_config_t *t, json_t *v, const char *kw,
                    char *err, size_t errlen) {
  return chime__cfg_range(v, kw, 1, CHIME__MAX_SEQUENCE_LENGTH, &t->stride, err,
                          errlen);
}

static int r_episode_end(chime__table_config_t *t, json_t *v, const char *kw,
                         char *err, size_t errlen) {
  const char *e = json_is_string(v) ? json_string_value(v) : "";
  if (strcmp(e, "pad") != 0 && strcmp(e, "drop") != 0)
    return chime__cfg_fail(err, errlen, "%s: expected \"drop\" or \"pad\"", kw);
  t->episode_pad = e[0] == 'p';
  return 0;
}

static int r_initial_priority(chime__table_config_t *t, json_t *v,
                              const char *kw, char *err, size_t errlen) {
  if (json_is_string(v) && strcmp(json_string_value(v), "max") == 0)
    t->initial_priority_max = 1;
  else if (json_is_number(v) && json_number_value(v) >= 0 &&
           json_number_value(v) <= 1e300)
    t->initial_priority = json_number_value(v);
  else
    return chime__cfg_fail(err, errlen, "%s: expected \"max\" or a number >= 0",
                           kw);
  return 0;
}

static int r_max_writers(chime__table_config_t *t, json_t *v, const char *kw,
                         char *err, size_t errlen) {
  return chime__cfg_range(v, kw, 1, CHIME__INSERT_MAX_WRITERS, &t->max_writers,
                          err, errlen);
}

static int r_writer_idle_ms(chime__table_config_t *t, json_t *v, const char *kw,
                            char *err, size_t errlen) {
  return chime__cfg_range(v, kw, 0, 86400000, &t->writer_idle_ms, err, errlen);
}

static int r_writer_token_reserve(chime__table_config_t *t, json_t *v,
                                  const char *kw, char *err, size_t errlen) {
  return chime__cfg_range(v, kw, 0, 100, &t->writer_token_reserve, err, errlen);
}

static int r_max_staleness(chime__table_config_t *t, json_t *v, const char *kw,
                           char *err, size_t errlen) {
  return chime__cfg_u64(v, kw, &t->max_staleness, err, errlen);
}

static int r_staleness_weight(chime__table_config_t *t, json_t *v,
                              const char *kw, char *err, size_t errlen) {
  const char *w = json_is_string(v) ? json_string_value(v) : "";
  if (strcmp(w, "none") != 0 && strcmp(w, "inverse") != 0)
    return chime__cfg_fail(err, errlen, "%s: expected \"none\" or \"inverse\"",
                           kw);
  t->staleness_weight = w[0] == 'i' ? CHIME__STALE_WEIGHT_INVERSE : 0;
  return 0;
}

static int r_pace_batch(chime__table_config_t *t, json_t *v, const char *kw,
                        char *err, size_t errlen) {
  return chime__cfg_u64(v, kw, &t->pace_batch, err, errlen);
}

static int r_data_dir(chime__table_config_t *t, json_t *v, const char *kw,
                      char *err, size_t errlen) {
  /* Room left for the file's name (NAME.table) behind it. */
  size_t most = CHIME__MAX_DATA_DIR - CHIME_MAX_NAME - 16;
  if (!json_is_string(v) || json_string_value(v)[0] == '\0' ||
      strlen(json_string_value(v)) > most)
    return chime__cfg_fail(
        err, errlen, "%s: expected a directory path (1-%zu bytes)", kw, most);
  snprintf(t->data_dir, sizeof(t->data_dir), "%s", json_string_value(v));
  return 0;
}

/* The keys, in the order the unknown-key message names them. NULL reader:
 * read elsewhere (name first, compress once the spec is known, group_max
 * and filters after it: config_group.c). */
enum {
  K_NAME,
  K_SPEC,
  K_CAPACITY,
  K_SAMPLER,
  K_REMOVER,
  K_PRIORITY_EXPONENT,
  K_MAX_TIMES_SAMPLED,
  K_MIN_SIZE,
  K_SAMPLES_PER_INSERT,
  K_ERROR_BUFFER,
  K_CAPACITY_STEPS,
  K_SEQUENCE_LENGTH,
  K_STRIDE,
  K_EPISODE_END,
  K_INITIAL_PRIORITY,
  K_MAX_WRITERS,
  K_WRITER_IDLE_MS,
  K_WRITER_TOKEN_RESERVE,
  K_MAX_STALENESS,
  K_STALENESS_WEIGHT,
  K_COMPRESS,
  K_DATA_DIR,
  K_GROUP_MAX,
  K_FILTERS,
  K_PACE_BATCH,
  K_VERSION_LEAF,
  NKEYS
};

static const struct {
  const char *name;
  read_fn read;
} keys[NKEYS] = {
    [K_NAME] = {"name", NULL},
    [K_SPEC] = {"spec", r_spec},
    [K_CAPACITY] = {"capacity", r_capacity},
    [K_SAMPLER] = {"sampler", r_sampler},
    [K_REMOVER] = {"remover", r_remover},
    [K_PRIORITY_EXPONENT] = {"priority_exponent", r_priority_exponent},
    [K_MAX_TIMES_SAMPLED] = {"max_times_sampled", r_max_times_sampled},
    [K_MIN_SIZE] = {"min_size", r_min_size},
    [K_SAMPLES_PER_INSERT] = {"samples_per_insert", r_samples_per_insert},
    [K_ERROR_BUFFER] = {"error_buffer", r_error_buffer},
    [K_CAPACITY_STEPS] = {"capacity_steps", r_capacity_steps},
    [K_SEQUENCE_LENGTH] = {"sequence_length", r_sequence_length},
    [K_STRIDE] = {"stride", r_stride},
    [K_EPISODE_END] = {"episode_end", r_episode_end},
    [K_INITIAL_PRIORITY] = {"initial_priority", r_initial_priority},
    [K_MAX_WRITERS] = {"max_writers", r_max_writers},
    [K_WRITER_IDLE_MS] = {"writer_idle_ms", r_writer_idle_ms},
    [K_WRITER_TOKEN_RESERVE] = {"writer_token_reserve", r_writer_token_reserve},
    [K_MAX_STALENESS] = {"max_staleness", r_max_staleness},
    [K_STALENESS_WEIGHT] = {"staleness_weight", r_staleness_weight},
    [K_COMPRESS] = {"compress", NULL},
    [K_DATA_DIR] = {"data_dir", r_data_dir},
    [K_GROUP_MAX] = {"group_max", NULL},
    [K_FILTERS] = {"filters", NULL},
    [K_PACE_BATCH] = {"pace_batch", r_pace_batch},
    [K_VERSION_LEAF] = {"version_leaf", NULL},
};

#define SEEN(k) (seen & (UINT32_C(1) << (k)))

const char *chime__config_table_key(uint32_t i) {
  return i < NKEYS ? keys[i].name : NULL;
}

static int key_index(const char *name) {
  for (int i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].name, name) == 0)
      return i;
  return -1;
}

static int unknown_key(const char *kw, char *err, size_t errlen) {
  char known[1024];
  size_t at = 0;
  for (int i = 0; i < NKEYS && at < sizeof(known); i++)
    at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%s",
                           i ? ", " : "", keys[i].name);
  return chime__cfg_fail(err, errlen, "%s: unknown key (known: %s)", kw, known);
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
    return chime__cfg_fail(
        err, errlen,
        "%s: 'compress': expected an object of leaf name: zstd level", where);
  json_object_foreach(v, leaf, lv) {
    uint32_t i = 0;
    while (i < t->spec.nleaves && strcmp(t->spec.leaves[i].name, leaf) != 0)
      i++;
    if (i == t->spec.nleaves)
      return chime__cfg_fail(err, errlen,
                             "%s: 'compress': no leaf '%.64s' in the spec",
                             where, leaf);
    if (chime_leaf_bytes(&t->spec.leaves[i]) >= UINT32_MAX)
      return chime__cfg_fail(
          err, errlen,
          "%s: 'compress': leaf '%s' is 4 GiB or more, too large to "
          "compress",
          where, leaf);
    if (!json_is_integer(lv) ||
        json_integer_value(lv) < CHIME__ZLEAF_MIN_LEVEL ||
        json_integer_value(lv) > CHIME__ZLEAF_MAX_LEVEL)
      return chime__cfg_fail(
          err, errlen,
          "%s: 'compress': leaf '%s': expected a zstd level %d..%d", where,
          leaf, CHIME__ZLEAF_MIN_LEVEL, CHIME__ZLEAF_MAX_LEVEL);
    t->compress[i] = (uint8_t)json_integer_value(lv);
  }
  return 0;
}

int chime__config_name_ok(const char *s) {
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

/* Sizes and min_size once every key is read; `where` names the table. */
static int table_check(const chime__table_config_t *t, const char *where,
                       char *err, size_t errlen) {
  uint64_t sb = chime_spec_sample_bytes(&t->spec);
  if (t->capacity == 0)
    return chime__cfg_fail(err, errlen, "%s: capacity must be at least 1",
                           where);
  if (sb == 0 || t->capacity > CHIME__MAX_TABLE_BYTES / sb)
    return chime__cfg_fail(
        err, errlen,
        "%s: capacity %llu of %llu-byte samples exceeds %llu bytes", where,
        (unsigned long long)t->capacity, (unsigned long long)sb,
        (unsigned long long)CHIME__MAX_TABLE_BYTES);
  if (t->capacity > CHIME__MAX_TABLE_ITEMS)
    return chime__cfg_fail(err, errlen, "%s: capacity %llu exceeds %llu items",
                           where, (unsigned long long)t->capacity,
                           (unsigned long long)CHIME__MAX_TABLE_ITEMS);
  if (t->min_size > t->capacity)
    return chime__cfg_fail(
        err, errlen, "%s: min_size %llu exceeds capacity %llu", where,
        (unsigned long long)t->min_size, (unsigned long long)t->capacity);
  /* A sequence table's windows overlap and leave with their oldest
   * steps' block: far fewer than capacity_steps are alive at once. */
  uint64_t most = chime__table_max_items(t);
  if (t->sequence_length > 0 && t->min_size > most)
    return chime__cfg_fail(
        err, errlen,
        "%s: min_size %llu exceeds the %llu windows the table can "
        "hold at once (capacity_steps %llu, sequence_length %u, "
        "stride %u, episode_end \"%s\"): sampling would wait for "
        "ever; lower min_size or raise capacity_steps",
        where, (unsigned long long)t->min_size, (unsigned long long)most,
        (unsigned long long)t->capacity_steps, t->sequence_length, t->stride,
        t->episode_pad ? "pad" : "drop");
  return 0;
}

/* A sequence table's keys; its capacity (in items) becomes capacity_steps:
 * a step starts at most one window. */
static int sequence_check(chime__table_config_t *t, const char *where,
                          uint32_t seen, char *err, size_t errlen) {
  if (SEEN(K_CAPACITY))
    return chime__cfg_fail(
        err, errlen,
        "%s: 'capacity': a sequence table is sized by capacity_steps", where);
  if (!SEEN(K_CAPACITY_STEPS) || t->sequence_length == 0)
    return chime__cfg_fail(
        err, errlen,
        "%s: a sequence table needs both 'capacity_steps' and "
        "'sequence_length'",
        where);
  if (t->capacity_steps == 0 || t->capacity_steps > CHIME__MAX_TABLE_STEPS)
    return chime__cfg_fail(err, errlen, "%s: 'capacity_steps': must be 1..%llu",
                           where, (unsigned long long)CHIME__MAX_TABLE_STEPS);
  if (t->stride == 0)
    t->stride = t->sequence_length;
  if (t->stride > t->sequence_length)
    return chime__cfg_fail(
        err, errlen,
        "%s: 'stride' %u exceeds sequence_length %u (steps between "
        "windows would belong to no item)",
        where, t->stride, t->sequence_length);
  if (SEEN(K_REMOVER))
    return chime__cfg_fail(
        err, errlen,
        "%s: 'remover': a sequence table's items leave with their "
        "oldest steps (capacity_steps), no remover picks them",
        where);
  for (uint32_t i = 0; i < t->spec.nleaves; i++) {
    if (t->spec.leaves[i].ragged)
      return chime__cfg_fail(
          err, errlen,
          "%s: leaf '%s' is ragged: sequences keep fixed-shape steps "
          "(a ragged leaf is for plain tables)",
          where, t->spec.leaves[i].name);
    if (t->spec.leaves[i].ndim >= CHIME_MAX_DIMS)
      return chime__cfg_fail(
          err, errlen,
          "%s: leaf '%s' has %u dimensions; a batch prepends the "
          "sequence's, at most %d in all",
          where, t->spec.leaves[i].name, t->spec.leaves[i].ndim,
          CHIME_MAX_DIMS);
    if (t->episode_pad && strcmp(t->spec.leaves[i].name, "mask") == 0)
      return chime__cfg_fail(
          err, errlen,
          "%s: leaf 'mask': episode_end \"pad\" adds a leaf of that "
          "name",
          where);
  }
  if (t->episode_pad && t->spec.nleaves >= CHIME_MAX_LEAVES)
    return chime__cfg_fail(
        err, errlen,
        "%s: episode_end \"pad\" adds a mask leaf: at most %d leaves", where,
        CHIME_MAX_LEAVES - 1);
  t->capacity = t->capacity_steps;
  return 0;
}

/* The plain or sequence kind, and keys that only one kind takes. */
static int kind_check(chime__table_config_t *t, const char *where,
                      uint32_t seen, char *err, size_t errlen) {
  if (t->sequence_length > 0 || SEEN(K_CAPACITY_STEPS)) {
    int rc = sequence_check(t, where, seen, err, errlen);
    if (rc != 0)
      return rc;
  } else if (SEEN(K_STRIDE) || SEEN(K_EPISODE_END) ||
             SEEN(K_INITIAL_PRIORITY)) {
    return chime__cfg_fail(
        err, errlen,
        "%s: 'stride', 'episode_end' and 'initial_priority' are for "
        "sequence tables (set sequence_length and capacity_steps)",
        where);
  }
  if (!SEEN(K_CAPACITY) && t->sequence_length == 0)
    return chime__cfg_fail(err, errlen, "%s: 'capacity' is required", where);
  if (t->staleness_weight != 0 &&
      (t->sampler != CHIME__SELECTOR_PRIORITIZED || t->sequence_length > 0))
    return chime__cfg_fail(
        err, errlen,
        "%s: 'staleness_weight': it weighs a prioritized sampler's "
        "draws, in plain tables only",
        where);
  return 0;
}

/* The selectors and the rate limiter, which constrain each other. */
static int sampling_check(chime__table_config_t *t, const char *where,
                          uint32_t seen, char *err, size_t errlen) {
  /* A fifo sampler's full table makes inserts wait for samples to make
   * room (a queue): it removes nothing itself, and needs a limit. */
  if (t->sampler == CHIME__SELECTOR_FIFO) {
    if (SEEN(K_REMOVER) && t->remover != CHIME__SELECTOR_FIFO)
      return chime__cfg_fail(
          err, errlen,
          "%s: 'remover': a fifo sampler's full table makes inserts "
          "wait, it removes nothing (leave remover out)",
          where);
    if (SEEN(K_MAX_TIMES_SAMPLED) && t->max_times_sampled == 0)
      return chime__cfg_fail(
          err, errlen,
          "%s: 'max_times_sampled': a fifo sampler needs a limit (its "
          "full table waits for samples to make room; 1 is a queue)",
          where);
    if (!SEEN(K_MAX_TIMES_SAMPLED))
      t->max_times_sampled = 1;
  }
  if (SEEN(K_ERROR_BUFFER) && !SEEN(K_SAMPLES_PER_INSERT))
    return chime__cfg_fail(err, errlen,
                           "%s: 'error_buffer': only a rate limit uses it (set "
                           "samples_per_insert)",
                           where);
  /* As Reverb: a window narrower than max(1, samples_per_insert) can leave
   * an insert and a sample each waiting for the other for ever. Absent, it
   * is that smallest safe width. */
  double least = t->samples_per_insert > 1.0 ? t->samples_per_insert : 1.0;
  if (SEEN(K_SAMPLES_PER_INSERT) && !SEEN(K_ERROR_BUFFER))
    t->error_buffer = least;
  if (SEEN(K_SAMPLES_PER_INSERT) && t->error_buffer < least)
    return chime__cfg_fail(
        err, errlen,
        "%s: 'error_buffer': %g is below max(1, samples_per_insert) "
        "= %g: inserts and samples could wait for each other for "
        "ever",
        where, t->error_buffer, least);
  if (chime__fifo_ratio_stalls(t))
    return chime__cfg_fail(
        err, errlen,
        "%s: 'samples_per_insert' %g is below 'max_times_sampled' "
        "%llu of a fifo sampler: every item is sampled %llu times "
        "before it leaves and a full fifo table makes inserts wait "
        "for room, so once it fills, inserts would wait for room and "
        "samples for the ratio for ever (set samples_per_insert >= "
        "max_times_sampled)",
        where, t->samples_per_insert, (unsigned long long)t->max_times_sampled,
        (unsigned long long)t->max_times_sampled);
  /* A window's priority weighs in the sum tree like any: it must stay
   * within what every item may weigh. */
  if (t->sequence_length > 0 && !t->initial_priority_max &&
      t->sampler == CHIME__SELECTOR_PRIORITIZED &&
      !(pow(t->initial_priority, t->priority_exponent) <=
        CHIME__SUMTREE_MAX_VALUE))
    return chime__cfg_fail(
        err, errlen,
        "%s: 'initial_priority': %g^%g exceeds %g, the most an item "
        "may weigh in a prioritized table",
        where, t->initial_priority, t->priority_exponent,
        CHIME__SUMTREE_MAX_VALUE);
  if (SEEN(K_PRIORITY_EXPONENT) && t->sampler != CHIME__SELECTOR_PRIORITIZED &&
      t->remover != CHIME__SELECTOR_PRIORITIZED)
    return chime__cfg_fail(
        err, errlen,
        "%s: 'priority_exponent': only a prioritized sampler or "
        "remover uses it",
        where);
  return 0;
}

/* "version_leaf" (read once the spec is known) and "pace_batch": per-token
 * versions and pacing (docs/replay.md), plain tables only. */
static int versions_check(chime__table_config_t *t, json_t *vleaf,
                          const char *where, char *err, size_t errlen) {
  if (t->pace_batch != 0 && (t->max_staleness == 0 || t->sequence_length > 0))
    return chime__cfg_fail(
        err, errlen,
        "%s: 'pace_batch': pacing holds producers within max_staleness of "
        "the learner: it needs max_staleness (1 or more), in a plain table",
        where);
  if (vleaf == NULL)
    return 0;
  const char *n = json_is_string(vleaf) ? json_string_value(vleaf) : NULL;
  uint32_t i = 0;
  while (n != NULL && i < t->spec.nleaves && strcmp(t->spec.leaves[i].name, n))
    i++;
  if (n == NULL || i == t->spec.nleaves)
    return chime__cfg_fail(err, errlen,
                           "%s: 'version_leaf': expected the name of a leaf "
                           "of the spec%s%.64s%s",
                           where, n ? " (no leaf '" : "", n ? n : "",
                           n ? "')" : "");
  const chime_leaf_t *l = &t->spec.leaves[i];
  chime_dtype_t d = l->dtype;
  int integer = d >= CHIME_DTYPE_U8 && d <= CHIME_DTYPE_I64;
  if (!l->ragged || l->ndim != 1 || !integer || t->compress[i] != 0 ||
      t->sequence_length > 0)
    return chime__cfg_fail(
        err, errlen,
        "%s: 'version_leaf': leaf '%s' must be ragged, one-dimensional, of "
        "an integer dtype (u64: \"%s:u64[<=N]\") and not compressed, in a "
        "plain table: a version per token",
        where, l->name, l->name);
  t->version_leaf = i + 1;
  return 0;
}

static void table_defaults(chime__table_config_t *t) {
  t->min_size = 1;
  t->initial_priority = 1.0;
  t->sampler = CHIME__SELECTOR_FIFO;
  t->remover = CHIME__SELECTOR_FIFO;
  t->priority_exponent = 1.0;
  t->max_writers = CHIME__INSERT_WRITERS;
  t->writer_idle_ms = CHIME__INSERT_WRITER_IDLE_MS;
  t->writer_token_reserve = CHIME__INSERT_WRITER_TOKEN_RESERVE;
}

int chime__config_table_parse(chime__table_config_t *t, json_t *obj,
                              uint32_t index, char *err, size_t errlen) {
  char where[CHIME_MAX_NAME + 32];
  snprintf(where, sizeof(where), "tables[%u]", index);
  if (!json_is_object(obj))
    return chime__cfg_fail(err, errlen, "%s: expected an object", where);
  json_t *name = json_object_get(obj, "name");
  if (!json_is_string(name))
    return chime__cfg_fail(err, errlen, "%s: 'name' (a string) is required",
                           where);
  if (!chime__config_name_ok(json_string_value(name)))
    return chime__cfg_fail(
        err, errlen,
        "%s: name '%.64s' must be 1-63 characters of [A-Za-z0-9_.-]", where,
        json_string_value(name));
  snprintf(t->name, sizeof(t->name), "%s", json_string_value(name));
  snprintf(where, sizeof(where), "table '%s'", t->name);
  table_defaults(t);

  uint32_t seen = 0;
  const char *key;
  json_t *v, *compress = NULL, *group_max = NULL, *filters = NULL;
  json_t *vleaf = NULL;
  json_object_foreach(obj, key, v) {
    char kw[CHIME_MAX_NAME + 64];
    snprintf(kw, sizeof(kw), "%s: '%s'", where, key);
    int k = key_index(key);
    if (k < 0)
      return unknown_key(kw, err, errlen);
    seen |= UINT32_C(1) << k;
    if (k == K_COMPRESS)
      compress = v; /* read once the spec is known */
    else if (k == K_GROUP_MAX)
      group_max = v;
    else if (k == K_FILTERS)
      filters = v;
    else if (k == K_VERSION_LEAF)
      vleaf = v; /* likewise */
    else if (keys[k].read != NULL && keys[k].read(t, v, kw, err, errlen) != 0)
      return CHIME_EINVAL;
  }
  if (!SEEN(K_SPEC))
    return chime__cfg_fail(err, errlen, "%s: 'spec' is required", where);
  if (compress != NULL && parse_compress(t, compress, where, err, errlen) != 0)
    return CHIME_EINVAL;
  if (chime__config_group(t, group_max, filters, where, err, errlen) != 0)
    return CHIME_EINVAL;
  int rc = kind_check(t, where, seen, err, errlen);
  if (rc == 0)
    rc = sampling_check(t, where, seen, err, errlen);
  if (rc == 0)
    rc = versions_check(t, vleaf, where, err, errlen);
  return rc != 0 ? rc : table_check(t, where, err, errlen);
}
