/* A PEM file read whole (pem.h). */
#include "common/pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "common/errfmt.h"

int chime__pem_read(const char *path, char **out, char *why, size_t whylen) {
  char *buf = NULL;
  size_t n = 0;
  *out = NULL;
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return chime__fail(why, whylen, CHIME_EINVAL, "cannot read '%s': %s", path,
                       strerror(errno));
  buf = malloc(CHIME__PEM_MAX + 1);
  if (buf != NULL)
    n = fread(buf, 1, CHIME__PEM_MAX + 1, f);
  int bad = buf == NULL || ferror(f) || n > CHIME__PEM_MAX;
  fclose(f);
  if (bad) {
    const char *what = buf == NULL          ? "out of memory"
                       : n > CHIME__PEM_MAX ? "larger than 1 MiB"
                                            : "read error";
    free(buf);
    return chime__fail(why, whylen, CHIME_EINVAL, "cannot read '%s': %s", path,
                       what);
  }
  buf[n] = '\0';
  if (strstr(buf, "-----BEGIN ") == NULL) {
    free(buf);
    return chime__fail(why, whylen, CHIME_EINVAL, "'%s' holds no PEM block",
                       path);
  }
  *out = buf;
  return 0;
}

void chime__pem_free(char *pem) {
  if (pem == NULL)
    return;
  memset(pem, 0, strlen(pem));
  free(pem);
}
