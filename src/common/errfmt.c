#include "common/errfmt.h"

#include <stdio.h>

void chime__verrf(char *err, size_t len, const char *fmt, va_list ap) {
  if (err == NULL || len == 0)
    return;
  vsnprintf(err, len, fmt, ap);
}

void chime__errf(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  chime__verrf(err, len, fmt, ap);
  va_end(ap);
}
