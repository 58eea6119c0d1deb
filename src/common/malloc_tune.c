/* glibc malloc thresholds (malloc_tune.h). */
#include "common/malloc_tune.h"

#include <stdlib.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

void chime__malloc_tune(void) {
#ifdef __GLIBC__
  if (getenv("GLIBC_TUNABLES") != NULL)
    return;
  /* Both: setting one turns off glibc's dynamic adjustment of the other. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}
