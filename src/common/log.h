/* The library's log (chime_set_logger, chime/errors.h): one formatted
 * line to the installed hook, or nowhere. */
#ifndef CHIME_COMMON_LOG_H
#define CHIME_COMMON_LOG_H

#include "chime/errors.h"

/* Formats one line (printf, no newline; longer than 1 KiB is cut) and
 * gives it to the hook, if one is installed. */
void chime__log(chime_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
