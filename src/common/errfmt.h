/* Formatting an error text into a caller's buffer: one helper for the specs,
 * the ring layout and the client, built with the ring so that it needs
 * nothing else. */
#ifndef CHIME_COMMON_ERRFMT_H
#define CHIME_COMMON_ERRFMT_H

#include <stdarg.h>
#include <stddef.h>

#include "chime/errors.h"

#if defined(__GNUC__)
#define CHIME__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CHIME__PRINTF(f, a)
#endif

/* Room for the longest error text chime writes: a page-locking failure
 * names every place the CUDA runtime was looked for (docs/pinning.md). */
#define CHIME__PIN_ERRLEN 16384

/* Room for an error's text on either end (a client's last error, the
 * details a server sends): the longest is a pinning error
 * (CHIME__PIN_ERRLEN, it lists the whole ladder) behind a prefix. */
#define CHIME__ERRLEN (CHIME__PIN_ERRLEN + 1024)

/* Writes nothing when err is NULL or len is 0: callers may pass no buffer
 * when they only want the code. */
void chime__errf(char *err, size_t len, const char *fmt, ...)
    CHIME__PRINTF(3, 4);
void chime__verrf(char *err, size_t len, const char *fmt, va_list ap)
    CHIME__PRINTF(3, 0);
/* chime__errf, returning code: failures read
 * `return chime__fail(err, len, CHIME_EINVAL, "...")`. */
int chime__fail(char *err, size_t len, int code, const char *fmt, ...)
    CHIME__PRINTF(4, 5);

/* A peer's string made safe to echo into a status detail or a log: bytes
 * outside printable ASCII become \xNN and a backslash \\ (so the text
 * cannot forge lines or terminal sequences, and stays valid UTF-8); past
 * `max` input bytes "..." marks the cut. Returns out. An out of
 * CHIME__PRINTABLE_LEN(max) bytes holds any result. */
#define CHIME__PRINTABLE_LEN(max) ((size_t)(max)*4 + 4)
const char *chime__printable(char *out, size_t outlen, const char *in,
                             size_t max);

#endif
