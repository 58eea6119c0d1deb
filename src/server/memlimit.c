/* How much memory chimed may fill (memlimit.h): physical memory or the
 * cgroup limit, read from /proc and /sys. */
#include "server/memlimit.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A number in a cgroup file; "max" (v2) and v1's huge "unlimited" values
 * read as no limit. */
static uint64_t read_limit(const char *path) {
  char buf[64];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return UINT64_MAX;
  char *got = fgets(buf, sizeof(buf), f);
  fclose(f);
  if (got == NULL || buf[0] < '0' || buf[0] > '9')
    return UINT64_MAX;
  return strtoull(buf, NULL, 10);
}

/* The cgroup path of this process for a v1 controller ("memory") or v2
 * (controller NULL: the "0::" line). */
static int own_cgroup(const char *controller, char *out, size_t len) {
  char line[512];
  int found = 0;
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f == NULL)
    return 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':');
    char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
    if (c2 == NULL)
      continue;
    *c2 = '\0';
    if (controller == NULL ? strcmp(line, "0") == 0 && c1 + 1 == c2
                           : strcmp(c1 + 1, controller) == 0) {
      snprintf(out, len, "%s", c2 + 1);
      found = 1;
    }
  }
  fclose(f);
  return found;
}

static void consider(uint64_t *lim, char *what, size_t whatlen,
                     const char *path) {
  uint64_t v = read_limit(path);
  if (v < *lim) {
    *lim = v;
    snprintf(what, whatlen, "the cgroup limit (%s)", path);
  }
}

uint64_t chime__memory_limit(char *what, size_t whatlen) {
  uint64_t lim = UINT64_MAX;
  char cg[256], path[400];
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  snprintf(what, whatlen, "nothing (no limit found)");
  if (pages > 0 && psz > 0) {
    lim = (uint64_t)pages * (uint64_t)psz;
    snprintf(what, whatlen, "physical memory");
  }
  if (own_cgroup(NULL, cg, sizeof(cg)) && strcmp(cg, "/") != 0) {
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", cg);
    consider(&lim, what, whatlen, path);
  }
  consider(&lim, what, whatlen, "/sys/fs/cgroup/memory.max");
  if (own_cgroup("memory", cg, sizeof(cg)) && strcmp(cg, "/") != 0) {
    snprintf(path, sizeof(path),
             "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", cg);
    consider(&lim, what, whatlen, path);
  }
  consider(&lim, what, whatlen, "/sys/fs/cgroup/memory/memory.limit_in_bytes");
  return lim;
}
