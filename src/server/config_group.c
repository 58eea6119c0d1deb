/* A group table's keys (docs/replay.md, "Groups"): group_max makes the
 * table's spec the stored spec of groups of its samples, and filters
 * (read once that spec is known) name its fixed scalar leaves. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chime/errors.h"
#include "chime/spec.h"
#include "server/config_group.h"
#include "server/config_value.h"

/* The stored leaf of t's group spec named name that a filter may read (a
 * fixed scalar of the sample spec): its index, or -1 with err set. */
static int filter_leaf(const chime__table_config_t *t, const char *name,
                       const char *kw, char *err, size_t errlen) {
  for (uint32_t i = 1; i < t->spec.nleaves; i++) {
    const chime_leaf_t *l = &t->spec.leaves[i];
    if (strcmp(l->name, name) != 0)
      continue;
    if (l->shares != 1 || l->ndim != 1)
      return chime__cfg_fail(err, errlen,
                             "%s: leaf '%s' is not a scalar (a filter reads "
                             "one number per sample)",
                             kw, name),
             -1;
    if (l->dtype == CHIME_DTYPE_F16 || l->dtype == CHIME_DTYPE_BF16)
      return chime__cfg_fail(err, errlen,
                             "%s: leaf '%s' is %s: filters read integers, "
                             "bool, f32 or f64",
                             kw, name, chime_dtype_name(l->dtype)),
             -1;
    return (int)i;
  }
  return chime__cfg_fail(err, errlen, "%s: no leaf '%.64s' in the spec", kw,
                         name),
         -1;
}

static int bound(json_t *f, const char *key, double dflt, double *out,
                 const char *kw, char *err, size_t errlen) {
  json_t *v = json_object_get(f, key);
  *out = dflt;
  if (v == NULL)
    return 0;
  if (!json_is_number(v) || isnan(json_number_value(v)))
    return chime__cfg_fail(err, errlen, "%s: '%s': expected a number", kw, key);
  *out = json_number_value(v);
  return 0;
}

/* One filter object {"leaf": "reward", "drop": "zero_variance"} or
 * {"leaf": "reward", "drop": "mean_outside", "min": 0, "max": 1}. */
static int filter_read(const chime__table_config_t *t, json_t *f,
                       const char *kw, chime__group_filter_t *out, char *err,
                       size_t errlen) {
  const char *key;
  json_t *v;
  if (!json_is_object(f))
    return chime__cfg_fail(err, errlen,
                           "%s: expected an object {\"leaf\": ..., \"drop\": "
                           "\"zero_variance\" or \"mean_outside\"}",
                           kw);
  json_object_foreach(f, key, v) {
    if (strcmp(key, "leaf") != 0 && strcmp(key, "drop") != 0 &&
        strcmp(key, "min") != 0 && strcmp(key, "max") != 0)
      return chime__cfg_fail(
          err, errlen, "%s: unknown key '%s' (known: leaf, drop, min, max)", kw,
          key);
  }
  json_t *leaf = json_object_get(f, "leaf"), *drop = json_object_get(f, "drop");
  if (!json_is_string(leaf))
    return chime__cfg_fail(err, errlen, "%s: 'leaf' (a string) is required",
                           kw);
  int i = filter_leaf(t, json_string_value(leaf), kw, err, errlen);
  if (i < 0)
    return CHIME_EINVAL;
  out->leaf = (uint32_t)i;
  const char *d = json_is_string(drop) ? json_string_value(drop) : "";
  if (strcmp(d, "zero_variance") == 0) {
    out->kind = CHIME__FILTER_ZERO_VARIANCE;
    if (json_object_get(f, "min") != NULL || json_object_get(f, "max") != NULL)
      return chime__cfg_fail(
          err, errlen, "%s: 'min' and 'max' are for \"mean_outside\"", kw);
    return 0;
  }
  if (strcmp(d, "mean_outside") != 0)
    return chime__cfg_fail(
        err, errlen,
        "%s: 'drop': expected \"zero_variance\" or \"mean_outside\"", kw);
  out->kind = CHIME__FILTER_MEAN_OUTSIDE;
  if (json_object_get(f, "min") == NULL && json_object_get(f, "max") == NULL)
    return chime__cfg_fail(
        err, errlen, "%s: \"mean_outside\" needs 'min', 'max' or both", kw);
  if (bound(f, "min", -INFINITY, &out->min, kw, err, errlen) != 0 ||
      bound(f, "max", INFINITY, &out->max, kw, err, errlen) != 0)
    return CHIME_EINVAL;
  if (out->min > out->max)
    return chime__cfg_fail(err, errlen, "%s: 'min' %g is above 'max' %g", kw,
                           out->min, out->max);
  return 0;
}

int chime__config_group(chime__table_config_t *t, json_t *group_max,
                        json_t *filters, const char *where, char *err,
                        size_t errlen) {
  char kw[CHIME_MAX_NAME + 64], why[256];
  if (group_max == NULL) {
    if (filters != NULL)
      return chime__cfg_fail(err, errlen,
                             "%s: 'filters': they drop groups, and the table "
                             "has none (set group_max)",
                             where);
    return 0;
  }
  uint32_t g;
  snprintf(kw, sizeof(kw), "%s: 'group_max'", where);
  if (chime__cfg_range(group_max, kw, 1, CHIME_GROUP_MAX, &g, err, errlen) != 0)
    return CHIME_EINVAL;
  if (t->sequence_length > 0 || t->capacity_steps > 0)
    return chime__cfg_fail(err, errlen,
                           "%s: a sequence table's items are windows, not "
                           "groups",
                           kw);
  for (uint32_t i = 0; i < t->spec.nleaves; i++)
    if (t->compress[i] != 0)
      return chime__cfg_fail(err, errlen,
                             "%s: group tables keep their leaves raw "
                             "('compress' is not for them yet)",
                             kw);
  if (t->data_dir[0] != '\0')
    return chime__cfg_fail(err, errlen,
                           "%s: group tables are kept in memory ('data_dir' "
                           "is not for them yet)",
                           kw);
  chime_spec_t s;
  if (chime_spec_group(&s, &t->spec, g, why, sizeof(why)) != 0)
    return chime__cfg_fail(err, errlen, "%s: %s", kw, why);
  t->spec = s;
  t->group_max = g;
  if (filters == NULL)
    return 0;
  if (!json_is_array(filters) || json_array_size(filters) > CHIME__MAX_FILTERS)
    return chime__cfg_fail(err, errlen,
                           "%s: 'filters': expected an array of up to %d "
                           "filters",
                           where, CHIME__MAX_FILTERS);
  for (size_t k = 0; k < json_array_size(filters); k++) {
    snprintf(kw, sizeof(kw), "%s: 'filters'[%zu]", where, k);
    if (filter_read(t, json_array_get(filters, k), kw, &t->filters[k], err,
                    errlen) != 0)
      return CHIME_EINVAL;
  }
  t->nfilters = (uint32_t)json_array_size(filters);
  return 0;
}
