/* Internal: the CUDA runtime found by the dlopen ladder, and page-locking of
 * address ranges with rollback. The public entry points are chime_ring_pin()
 * and chime_ring_pinned_bytes() in chime/ring.h. */
#ifndef CHIME_PIN_H
#define CHIME_PIN_H

#include <stddef.h>
#include <stdint.h>

#include "chime/ring.h"

/* chime_ring_pin, its whole report in err (err may be NULL; room for
 * CHIME__PIN_ERRLEN bytes holds it all). */
int chime__ring_pin(chime_ring_t *ring, char *err, size_t errlen);

/* Loads the CUDA runtime (ladder in docs/pinning.md) once per process and
 * initialises it with cudaFree(NULL). Returns 0, or CHIME_ECUDA with err
 * naming every rung tried, in order, and the CUDA error by name and number.
 * Later calls return the first call's result. chimed calls this at start when
 * pinning is on, so a misconfigured host fails before serving. */
int chime__cuda_require(char *err, size_t errlen);

/* Registers [base, base + len) for each range, all or nothing: on failure
 * every range already registered is unregistered again. */
typedef struct {
  void *base;
  size_t len;
} chime__range_t;
int chime__pin_ranges(const chime__range_t *ranges, size_t n, int read_only,
                      char *err, size_t errlen);
void chime__unpin_ranges(const chime__range_t *ranges, size_t n);

/* "cudaErrorMemoryAllocation (2)" out of a report from the calls above (or
 * chime_ring_pin), or the chime error's name when it names no CUDA error:
 * the part of a pinning failure that may go to a remote client. */
const char *chime__pin_error_name(const char *report, int rc, char *buf,
                                  size_t len);

#endif
