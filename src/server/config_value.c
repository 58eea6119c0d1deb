/* One JSON value of chimed's config (config_value.h). */
#include "server/config_value.h"

#include <stdarg.h>
#include <stdio.h>

#include "chime/errors.h"

int chime__cfg_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return CHIME_EINVAL;
}

int chime__cfg_u64(json_t *v, const char *kw, uint64_t *out, char *err,
                   size_t errlen) {
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return chime__cfg_fail(err, errlen, "%s: expected a non-negative integer",
                           kw);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

int chime__cfg_range(json_t *v, const char *kw, uint64_t lo, uint64_t hi,
                     uint32_t *out, char *err, size_t errlen) {
  uint64_t x = 0;
  if (chime__cfg_u64(v, kw, &x, err, errlen) != 0)
    return CHIME_EINVAL;
  if (x < lo || x > hi)
    return chime__cfg_fail(err, errlen, "%s: must be %llu..%llu", kw,
                           (unsigned long long)lo, (unsigned long long)hi);
  *out = (uint32_t)x;
  return 0;
}
