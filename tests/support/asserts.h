/* The e2e tests' checks of what a server or the library said: text that
 * must hold a phrase, Stats and a table's entry in it or in GetInfo, a
 * chimed that stopped cleanly. CMocka: a failed
 * check fails the test (this file is linked into tests only, never into
 * chime-bench; harness.h is the CMocka-free half). */
#ifndef CHIME_TESTS_ASSERTS_H
#define CHIME_TESTS_ASSERTS_H

#include "chime/chime.h"
#include "harness.h"

/* Fails the test, quoting both, unless needle is in hay. */
void chime__assert_contains(const char *hay, const char *needle);

/* Destroys c, then stops d (chime__chimed_stop_client); fails the test
 * unless chimed exited 0 by itself after SIGTERM. */
void chime__stop_clean(chime__chimed_t *d, chime_client_t *c);

/* c's Stats now (chime_stats_free it); fails the test when the call
 * fails. */
chime_stats_t *chime__stats(chime_client_t *c);

/* table's entry in st; fails the test when st has none. */
const chime_table_stats_t *chime__stats_table(const chime_stats_t *st,
                                              const char *table);

/* table's entry in info (GetInfo); fails the test when info has none. */
const chime_table_info_t *chime__info_table(const chime_server_info_t *info,
                                            const char *table);

/* table's entry in c's Stats, now (a copy: the struct holds no pointer);
 * fails the test when Stats fails or has no such table. */
chime_table_stats_t chime__table_stats(chime_client_t *c, const char *table);

#endif
