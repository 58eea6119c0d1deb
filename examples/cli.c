#include "cli.h"

#include "chime/chime.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

int chime__cli_parse_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end;
  errno = 0;
  if (!s || *s == '-' || *s == '\0')
    return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max)
    return -1;
  *out = v;
  return 0;
}

int chime__cli_unknown_option(const char *prog, const char *opt,
                              void (*usage)(FILE *)) {
  fprintf(stderr, "%s: unknown or incomplete option '%s'\n", prog, opt);
  usage(stderr);
  return 2;
}

int chime__cli_bad_value(const char *prog, const char *opt, const char *value) {
  fprintf(stderr, "%s: bad value '%s' for %s\n", prog, value, opt);
  return 2;
}

double chime__cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int read_token(const char *prog, const char *path, char *buf,
                      size_t len) {
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    fprintf(stderr, "%s: --token-file %s: %s\n", prog, path, strerror(errno));
    return 2;
  }
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                   buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  buf[n] = '\0';
  if (n == 0) {
    fprintf(stderr, "%s: --token-file %s: no token in it\n", prog, path);
    return 2;
  }
  return 0;
}

int chime__cli_conn_option(chime__cli_conn_t *conn, const char *opt,
                           const char *value) {
  const char **dst = !strcmp(opt, "--token-file") ? &conn->token_file
                     : !strcmp(opt, "--tls-ca")   ? &conn->tls_ca
                     : !strcmp(opt, "--tls-cert") ? &conn->tls_cert
                     : !strcmp(opt, "--tls-key")  ? &conn->tls_key
                                                  : NULL;
  if (dst == NULL || value == NULL)
    return 0;
  *dst = value;
  return 1;
}

/* A PEM file the client library will read: said here, with its name,
 * rather than as a bare CHIME_EINVAL from chime_client_create. */
static int check_pem(const char *prog, const char *opt, const char *path) {
  char buf[4096];
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    fprintf(stderr, "%s: %s %s: %s\n", prog, opt, path, strerror(errno));
    return 2;
  }
  int found = 0;
  while (!found && fgets(buf, sizeof(buf), f) != NULL)
    found = strncmp(buf, "-----BEGIN ", 11) == 0;
  fclose(f);
  if (!found) {
    fprintf(stderr, "%s: %s %s: no PEM block in it\n", prog, opt, path);
    return 2;
  }
  return 0;
}

int chime__cli_client(const char *prog, const char *addr,
                      const chime__cli_conn_t *conn, chime_client_t **out) {
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  char token[300];
  if ((conn->tls_cert == NULL) != (conn->tls_key == NULL)) {
    fprintf(stderr, "%s: --tls-cert and --tls-key go together\n", prog);
    return 2;
  }
  if ((conn->tls_ca != NULL && check_pem(prog, "--tls-ca", conn->tls_ca)) ||
      (conn->tls_cert != NULL &&
       check_pem(prog, "--tls-cert", conn->tls_cert)) ||
      (conn->tls_key != NULL && check_pem(prog, "--tls-key", conn->tls_key)))
    return 2;
  o.tls_ca = conn->tls_ca;
  o.tls_cert = conn->tls_cert;
  o.tls_key = conn->tls_key;
  if (conn->timeout_ms > 0)
    o.timeout_ms = conn->timeout_ms;
  if (conn->token_file != NULL) {
    if (read_token(prog, conn->token_file, token, sizeof(token)) != 0)
      return 2;
    o.token = token;
  }
  int rc = chime_client_create(out, addr, &o);
  memset(token, 0, sizeof(token));
  return rc;
}
