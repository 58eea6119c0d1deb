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
/* How the tools connect: --token-file FILE, --tls-ca FILE, --tls-cert FILE,
 * --tls-key FILE (each NULL when not given). */
typedef struct {
  const char *token_file;
  const char *tls_ca;
  const char *tls_cert;
  const char *tls_key;
  int timeout_ms; /* per unary call; 0: the client's default (5 s) */
} chime__cli_conn_t;
#define CHIME__CLI_CONN_USAGE                                                  \
  "[--token-file FILE] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]"
/* What --server / TARGET may be, for the tools' --help: the string goes to
 * chime_client_create as given. */
#define CHIME__CLI_TARGET_HELP                                                 \
  "TARGET: one chimed (host:port, unix:/path) or its shards: a comma list,\n"  \
  "ipv4:/ipv6: lists or dns:///name:port (docs/scaling.md).\n"
/* 1 when opt is one of the options above and takes value (value may be
 * NULL: then it is incomplete, and this returns 0 so the caller reports
 * it), else 0. */
int chime__cli_conn_option(chime__cli_conn_t *conn, const char *opt,
                           const char *value);
/* The client for ADDR with conn's token and TLS files: 0; 2 after a
 * "PROG: ..." line when a file cannot be used (a command-line mistake);
 * else the CHIME_E code of chime_client_create(). */
typedef struct chime_client_s chime_client_t;
int chime__cli_client(const char *prog, const char *addr,
                      const chime__cli_conn_t *conn, chime_client_t **out);
/* Monotonic seconds, for throughput figures. */
double chime__cli_now_s(void);

#endif
