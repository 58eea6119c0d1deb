/* A group table's rules on an insert (docs/replay.md, "Groups" and
 * "Admission filters"): each group of a request checked whole (its
 * samples' lengths against its leaves' rows), then its filters, before
 * the table's lock. A group a filter drops takes its key and counts as
 * inserted and as left, as a sample too stale on arrival does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"
#include "replay/table_internal.h"

/* Value i of n of dtype at p, as a double (a filter's leaf: an integer,
 * bool, f32 or f64; config_group.c refuses the others). */
static double value_at(chime_dtype_t dt, const uint8_t *p, uint32_t i) {
  switch (dt) {
#define AT(T)                                                                  \
  do {                                                                         \
    T v;                                                                       \
    memcpy(&v, p + (size_t)i * sizeof(T), sizeof(T));                          \
    return (double)v;                                                          \
  } while (0)
  case CHIME_DTYPE_U8:
  case CHIME_DTYPE_BOOL:
    AT(uint8_t);
  case CHIME_DTYPE_I8:
    AT(int8_t);
  case CHIME_DTYPE_U16:
    AT(uint16_t);
  case CHIME_DTYPE_I16:
    AT(int16_t);
  case CHIME_DTYPE_U32:
    AT(uint32_t);
  case CHIME_DTYPE_I32:
    AT(int32_t);
  case CHIME_DTYPE_U64:
    AT(uint64_t);
  case CHIME_DTYPE_I64:
    AT(int64_t);
  case CHIME_DTYPE_F32:
    AT(float);
  case CHIME_DTYPE_F64:
    AT(double);
#undef AT
  default:
    return NAN;
  }
}

/* Whether filter f drops the group whose n values of its leaf are at p. */
static int filter_drops(const chime__group_filter_t *f, chime_dtype_t dt,
                        const uint8_t *p, uint32_t n) {
  if (f->kind == CHIME__FILTER_ZERO_VARIANCE) {
    size_t sz = chime_dtype_size(dt);
    /* All equal: bytewise for integers; floats by value (0.0 == -0.0). */
    if (dt != CHIME_DTYPE_F32 && dt != CHIME_DTYPE_F64) {
      for (uint32_t j = 1; j < n; j++)
        if (memcmp(p, p + (size_t)j * sz, sz) != 0)
          return 0;
      return 1;
    }
    double v0 = value_at(dt, p, 0);
    for (uint32_t j = 1; j < n; j++)
      if (value_at(dt, p, j) != v0)
        return 0;
    return 1;
  }
  double sum = 0;
  for (uint32_t j = 0; j < n; j++)
    sum += value_at(dt, p, j);
  double mean = sum / n;
  return !(mean >= f->min && mean <= f->max); /* NaN: outside */
}

/* The reason filter k gives (the wire's: InsertAck.dropped_reasons). */
static uint8_t reason_of(const chime__group_filter_t *f) {
  return (uint8_t)f->kind;
}

int chime__tbl_group_in(chime__table_t *t, uint8_t *const *bufs, uint32_t count,
                        const uint32_t *lengths, char *why, size_t whylen,
                        uint8_t **drop) {
  const chime__table_config_t *c = &t->cfg;
  uint8_t *d = NULL;
  *drop = NULL;
  for (uint32_t j = 0; j < count; j++) {
    const uint32_t *len = lengths + (size_t)j * t->nrag;
    char err[256];
    if (chime__group_check(&c->spec, c->group_max, bufs[j], len, j, err,
                           sizeof(err)) != 0) {
      if (why != NULL && whylen > 0)
        snprintf(why, whylen, "%s", err);
      free(d);
      return CHIME_EINVAL;
    }
    for (uint32_t k = 0; k < c->nfilters; k++) {
      const chime__group_filter_t *f = &c->filters[k];
      uint64_t at = 0; /* the leaf's rows in the group's buffer */
      for (uint32_t l = 0; l < f->leaf; l++)
        at += (uint64_t)len[t->rk[l]] * t->rrow[l];
      if (!filter_drops(f, c->spec.leaves[f->leaf].dtype, bufs[j] + at, len[0]))
        continue;
      if (d == NULL && (d = calloc(count, 1)) == NULL)
        return CHIME_ENOMEM;
      d[j] = reason_of(f);
      break;
    }
  }
  *drop = d;
  return 0;
}
