/* Samples into a table through a real writer, as the e2e tests fill their
 * tables: the pattern samples of examples/pattern.h (seed, i), so that a
 * learner can check every byte it is given. */
#ifndef CHIME_TESTS_WRITES_H
#define CHIME_TESTS_WRITES_H

#include <stdint.h>

#include "chime/chime.h"

/* Appends the pattern samples (seed, 0) .. (seed, n - 1) of spec to
 * table (opts NULL: the defaults), flushes, and closes the writer; 0 when
 * all n were acked, else the first failing call's code (its detail in
 * chime_last_error()), or CHIME_EPROTO when fewer were acked. */
int chime__write_pattern(chime_client_t *c, const char *table,
                         const chime_spec_t *spec, uint64_t seed, uint64_t n,
                         const chime_writer_opts_t *opts);

#endif
