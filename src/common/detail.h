/* The calling thread's error detail, behind chime_last_error(): every
 * failing public call writes one sentence here before it returns, from the
 * thread that made the call (a stream's or writer's own failures are kept
 * on the object and written here by the call that reports them). Built
 * with the ring so that every part of the library can use it. */
#ifndef CHIME_COMMON_DETAIL_H
#define CHIME_COMMON_DETAIL_H

#include <stdarg.h>

#include "chime/ring.h"
#include "common/errfmt.h" /* CHIME__PRINTF */

/* Room for one detail: as much as any error text (common/errfmt.h: a
 * pinning error behind a short prefix). Longer text is cut. */
#define CHIME__DETAIL_LEN CHIME__ERRLEN

/* Sets the calling thread's detail to text, or to chime_strerror(code) when
 * text is NULL or empty (a failure never leaves the previous one's
 * sentence behind). Returns code, so that a failure reads
 * `return chime__detail(rc, err)`. */
int chime__detail(int code, const char *text);
/* The same with a format. */
int chime__detailf(int code, const char *fmt, ...) CHIME__PRINTF(2, 3);

#endif
