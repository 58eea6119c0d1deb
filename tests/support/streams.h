/* Streams as the e2e tests open them: a table, a mode, a batch size and a
 * ring of slots, the rest of the options from a base. A failed open fails
 * the test (CMocka) with what the library said, so a test reads as what it
 * checks; a test that checks the failure itself calls chime_stream_open.
 * CMocka lives here and not in harness.c: chime-bench links the harness. */
#ifndef CHIME_TESTS_STREAMS_H
#define CHIME_TESTS_STREAMS_H

#include <stdint.h>

#include "chime/chime.h"

/* chime_stream_open of table on c with base's options (NULL: the
 * defaults) but mode, batch_size batch and, when slots is not 0, slots:
 * the stream, or the test fails with "open <table> (<mode>): <error name>:
 * <chime_last_error()>". */
chime_stream_t *chime__open_stream(chime_client_t *c, const char *table,
                                   chime_mode_t mode, uint32_t batch,
                                   uint32_t slots,
                                   const chime_stream_opts_t *base);

/* The same options, the open's code returned (0 with *s set): for callers
 * that may not fail a CMocka test where they run (a forked child). */
int chime__try_open_stream(chime_stream_t **s, chime_client_t *c,
                           const char *table, chime_mode_t mode, uint32_t batch,
                           uint32_t slots, const chime_stream_opts_t *base);

#endif
