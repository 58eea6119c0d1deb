/* Samples into a table through a real writer, as the e2e tests fill their
 * tables: the pattern samples of examples/pattern.h (seed, i), so that a
 * learner can check every byte it is given, or (a table of u64 samples)
 * counting numbers. No CMocka here: the calls return codes, so a thread
 * or a forked child may call them too. */
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

/* Appends the pattern samples (seed, 0) .. (seed, n - 1) of spec to an
 * open writer and flushes; the writer stays open (its acked count is the
 * caller's to check). 0, or the first failing call's code. */
int chime__append_pattern(chime_writer_t *w, const chime_spec_t *spec,
                          uint64_t seed, uint64_t n);

/* Appends the 8-byte samples first .. first + n - 1 (each its own
 * value) to table, each with priority prio(x) (prio NULL: 1.0), flushes
 * and closes the writer: 0 when all n were acked, else as
 * chime__write_pattern. */
int chime__write_counter(chime_client_t *c, const char *table, uint64_t first,
                         uint64_t n, double (*prio)(uint64_t x));

#endif
