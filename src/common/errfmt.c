/* Error texts into a caller's buffer, and peers' strings made printable
 * (errfmt.h). */
#include "common/errfmt.h"

#include <stdio.h>
#include <string.h>

void chime__verrf(char *err, size_t len, const char *fmt, va_list ap) {
  if (err == NULL || len == 0)
    return;
  vsnprintf(err, len, fmt, ap);
}

int chime__fail(char *err, size_t len, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  chime__verrf(err, len, fmt, ap);
  va_end(ap);
  return code;
}

const char *chime__printable(char *out, size_t outlen, const char *in,
                             size_t max) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0, i = 0;
  if (out == NULL || outlen == 0)
    return out;
  if (in == NULL)
    in = "";
  for (; in[i] != '\0' && i < max; i++) {
    unsigned char c = (unsigned char)in[i];
    char esc[4];
    size_t n = 0;
    if (c == '\\') {
      esc[n++] = '\\';
      esc[n++] = '\\';
    } else if (c >= 0x20 && c < 0x7f) {
      esc[n++] = (char)c;
    } else {
      esc[n++] = '\\';
      esc[n++] = 'x';
      esc[n++] = hex[c >> 4];
      esc[n++] = hex[c & 15];
    }
    if (o + n >= outlen)
      break;
    memcpy(out + o, esc, n);
    o += n;
  }
  if (in[i] != '\0' && o + 3 < outlen) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
  return out;
}

void chime__errf(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  chime__verrf(err, len, fmt, ap);
  va_end(ap);
}
