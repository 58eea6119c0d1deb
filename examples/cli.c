#include "cli.h"

#include "chime/chime.h"

#include <errno.h>
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

int chime__cli_client(const char *prog, const char *addr,
                      const char *token_file, chime_client_t **out) {
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  char token[300];
  if (token_file != NULL) {
    if (read_token(prog, token_file, token, sizeof(token)) != 0)
      return 2;
    o.token = token;
  }
  int rc = chime_client_create(out, addr, &o);
  memset(token, 0, sizeof(token));
  return rc;
}
