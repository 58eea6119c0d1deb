/* Small command-line helpers shared by chime-actor, chime-learner and
 * chimectl. */
#ifndef CHIME_EXAMPLES_CLI_H
#define CHIME_EXAMPLES_CLI_H

#include <stdint.h>
#include <stdio.h>

/* A decimal option value in [0, max]: 0, or -1 for an empty, negative,
 * malformed or too large one (strtoull alone would wrap "-1" around). */
int chime__cli_parse_u64(const char *s, uint64_t max, uint64_t *out);
/* Both report a command-line mistake on stderr as "PROG: ..." and return the
 * exit status for it, 2. An option the tool does not know, or one missing its
 * value, is followed by the usage. */
int chime__cli_unknown_option(const char *prog, const char *opt,
                              void (*usage)(FILE *));
int chime__cli_bad_value(const char *prog, const char *opt, const char *value);
/* The client for ADDR, sending the bearer token read from token_file (NULL:
 * none; a trailing newline dropped): 0; 2 after a "PROG: ..." line when the
 * token file cannot be used (a command-line mistake); else the CHIME_E code
 * of chime_client_create(). */
typedef struct chime_client_s chime_client_t;
int chime__cli_client(const char *prog, const char *addr,
                      const char *token_file, chime_client_t **out);
/* Monotonic seconds, for throughput figures. */
double chime__cli_now_s(void);

#endif
