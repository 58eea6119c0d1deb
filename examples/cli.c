#include "cli.h"

#include <errno.h>
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
