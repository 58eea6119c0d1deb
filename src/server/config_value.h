/* Reading one JSON value of chimed's config (config.c, config_table.c):
 * the shapes keys share and their error sentences, so that every key of
 * a kind says the same thing when it is wrong. */
#ifndef CHIME_SERVER_CONFIG_VALUE_H
#define CHIME_SERVER_CONFIG_VALUE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* fmt into err: always CHIME_EINVAL. */
int chime__cfg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A non-negative integer; kw names the key in the error. */
int chime__cfg_u64(json_t *v, const char *kw, uint64_t *out, char *err,
                   size_t errlen);

/* An integer in lo..hi. */
int chime__cfg_range(json_t *v, const char *kw, uint64_t lo, uint64_t hi,
                     uint32_t *out, char *err, size_t errlen);

#endif
