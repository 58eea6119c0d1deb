/* Page-locking with cudaHostRegister, all or nothing: a failed call leaves
 * nothing registered, so "pinned" is never half true. */
#include "ring/pin.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "chime/ring.h"
#include "common/detail.h"
#include "common/errfmt.h"
#include "ring/cudart.h"
#include "ring/ring_internal.h"

/* What a pinned ring holds until chime_ring_destroy() calls unpin_hook(). */
typedef struct {
  uint64_t bytes;
  size_t n;
  chime__range_t ranges[];
} pin_state_t;

static const char *flags_str(int read_only) {
  return read_only ? "portable|read-only" : "portable";
}

int chime__pin_ranges(const chime__range_t *ranges, size_t n, int read_only,
                      char *err, size_t errlen) {
  const chime__cudart_t *rt;
  unsigned int flags = CHIME__CUDA_HOST_REGISTER_PORTABLE;
  char nbuf[32], ubuf[32];
  size_t i = 0, j, bad_unreg = 0;
  int rc, e = 0, ue = 0;

  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (n > 0 && ranges == NULL)
    return CHIME_EINVAL;
  for (j = 0; j < n; j++) {
    if (ranges[j].base == NULL || ranges[j].len == 0) {
      if (err != NULL)
        snprintf(err, errlen, "page-locking failed: range %zu is empty", j);
      return CHIME_EINVAL;
    }
  }
  rc = chime__cuda_require(err, errlen);
  if (rc != 0)
    goto cleanup;
  rt = chime__cudart();
  if (read_only)
    flags |= CHIME__CUDA_HOST_REGISTER_READ_ONLY;

  for (i = 0; i < n; i++) {
    e = rt->host_register(ranges[i].base, ranges[i].len, flags);
    if (e != CHIME__CUDA_SUCCESS)
      break;
  }
  if (i == n)
    goto cleanup;

  /* Roll back exactly what this call registered, newest first. */
  for (j = i; j-- > 0;) {
    int u = rt->host_unregister(ranges[j].base);

    if (u != CHIME__CUDA_SUCCESS) {
      bad_unreg++;
      ue = u;
    }
  }
  rc = CHIME_ECUDA;
  if (err == NULL)
    goto cleanup;
  snprintf(err, errlen,
           "page-locking failed: %s (%d) from cudaHostRegister(%zu bytes, %s) "
           "for range %zu of %zu in %s; the %zu range(s) registered before it "
           "were unregistered%s%s%s; ladder: %s",
           chime__cuda_error_name(rt, e, nbuf, sizeof nbuf), e, ranges[i].len,
           flags_str(read_only), i + 1, n, rt->path, i,
           bad_unreg ? " (cudaHostUnregister failed for some: " : "",
           bad_unreg ? chime__cuda_error_name(rt, ue, ubuf, sizeof ubuf) : "",
           bad_unreg ? ")" : "", chime__cudart_ladder_report());
cleanup:
  return rc;
}

void chime__unpin_ranges(const chime__range_t *ranges, size_t n) {
  const chime__cudart_t *rt = chime__cudart();
  size_t i;

  if (rt == NULL || n == 0)
    return;
  /* A copy this process queued from these pages may still be running;
   * unregistering under it is undefined, so wait for the device first. */
  if (rt->device_synchronize != NULL)
    (void)rt->device_synchronize();
  for (i = n; i-- > 0;)
    (void)rt->host_unregister(ranges[i].base);
}

static void unpin_hook(void *arg) {
  pin_state_t *st = arg;

  chime__unpin_ranges(st->ranges, st->n);
  free(st);
}

int chime__ring_pin(chime_ring_t *ring, char *err, size_t errlen) {
  const chime_ring_layout_t *layout;
  pin_state_t *st = NULL;
  uint32_t i;
  int rc;

  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (ring == NULL)
    return CHIME_EINVAL;
  if (chime__ring_unpin_arg(ring) != NULL)
    return 0;
  layout = chime_ring_layout(ring);
  st = calloc(1, sizeof *st + layout->slots * sizeof st->ranges[0]);
  if (st == NULL) {
    rc = CHIME_ENOMEM;
    goto cleanup;
  }
  /* One registration per slot: a copy never spans slots, and the GPU check
   * can ask the runtime about each slot on its own. */
  for (i = 0; i < layout->slots; i++) {
    st->ranges[i].base = chime_ring_slot_base(ring, i);
    st->ranges[i].len = (size_t)layout->slot_bytes;
  }
  st->n = layout->slots;
  st->bytes = (uint64_t)layout->slots * layout->slot_bytes;
  /* A consumer maps the slots PROT_READ; without the read-only flag the
   * driver would ask for writable pages and refuse them. */
  rc = chime__pin_ranges(st->ranges, st->n, chime__ring_is_consumer(ring), err,
                         errlen);
  if (rc != 0)
    goto cleanup;
  chime__ring_set_unpin(ring, unpin_hook, st);
  st = NULL;
cleanup:
  free(st);
  return rc;
}

uint64_t chime_ring_pinned_bytes(const chime_ring_t *ring) {
  const pin_state_t *st = chime__ring_unpin_arg(ring);

  return st == NULL ? 0 : st->bytes;
}

/* "cudaErrorMemoryAllocation (2)" out of a pinning report, or the chime
 * error's name when the report holds no CUDA error. */
const char *chime__pin_error_name(const char *report, int rc, char *buf,
                                  size_t len) {
  const char *p = strstr(report, "cudaError");
  size_t n = 0;
  if (p == NULL || len < 2) {
    snprintf(buf, len, "%s", chime_err_name(rc));
    return buf;
  }
  while (n + 1 < len && (isalnum((unsigned char)p[n]) || p[n] == '_'))
    n++;
  const char *q = p + n;
  if (q[0] == ' ' && q[1] == '(') {
    size_t m = 2;
    if (q[m] == '-')
      m++;
    while (isdigit((unsigned char)q[m]))
      m++;
    if (q[m] == ')' && n + m + 2 <= len)
      n += m + 1;
  }
  snprintf(buf, len, "%.*s", (int)n, p);
  return buf;
}

int chime_ring_pin(chime_ring_t *ring) {
  char *err = malloc(CHIME__PIN_ERRLEN);
  if (err == NULL)
    return chime__detail(CHIME_ENOMEM, "ring pin: out of memory");
  err[0] = '\0';
  int rc = chime__ring_pin(ring, err, CHIME__PIN_ERRLEN);
  if (rc != 0)
    chime__detail(rc, err);
  free(err);
  return rc;
}
