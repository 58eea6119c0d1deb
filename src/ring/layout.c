/* Where each leaf array and the sample info sit inside one slot.
 *
 * The same function runs on the producer (to size the segment) and on the
 * consumer (to check a header it must not trust), so it is pure, deterministic
 * and overflow-checked at every step. */
#include <stdio.h>
#include <string.h>

#include "common/detail.h"
#include "common/errfmt.h"
#include "common/spec.h"
#include "ring/layout.h"
#include "ring/ring_internal.h"

int chime__align_up(uint64_t v, uint64_t align, uint64_t *out) {
  uint64_t r;
  if (__builtin_add_overflow(v, align - 1, &r))
    return CHIME_EOVERFLOW;
  *out = r & ~(align - 1);
  return 0;
}

int chime__ring_layout(chime_ring_layout_t *out, const chime_spec_t *spec,
                       uint32_t batch_size, uint32_t slots, char *err,
                       size_t errlen) {
  chime_ring_layout_t l;
  uint64_t off = 0, info_bytes;
  int rc;

  if (out == NULL)
    return CHIME_EINVAL;
  memset(out, 0, sizeof(*out));
  memset(&l, 0, sizeof(l));
  rc = chime__spec_validate(spec, err, errlen);
  if (rc != 0)
    return rc;
  if (batch_size == 0 || batch_size > CHIME_RING_MAX_BATCH) {
    chime__errf(err, errlen, "batch size %u out of range 1..%u", batch_size,
                CHIME_RING_MAX_BATCH);
    return CHIME_EINVAL;
  }
  /* One slot could never be leased (at most slots - 1 leases). */
  if (slots < 2 || slots > CHIME_RING_MAX_SLOTS) {
    chime__errf(err, errlen, "slot count %u out of range 2..%u", slots,
                CHIME_RING_MAX_SLOTS);
    return CHIME_EINVAL;
  }
  l.slots = slots;
  l.batch_size = batch_size;
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    uint64_t bytes;
    if (__builtin_mul_overflow(chime_leaf_bytes(&spec->leaves[i]),
                               (uint64_t)batch_size, &bytes) ||
        chime__align_up(off, CHIME_RING_ALIGN, &off) != 0 ||
        bytes > CHIME_RING_MAX_BYTES) {
      chime__errf(err, errlen, "leaf '%s': batch of %u overflows the ring size",
                  spec->leaves[i].name, batch_size);
      return CHIME_EOVERFLOW;
    }
    l.leaf_offset[i] = off;
    l.leaf_bytes[i] = bytes;
    off += bytes; /* both terms <= 2^40 after the checks above */
  }
  /* Ragged leaves' offsets after every leaf's values: a fixed spec's slot
   * is laid out as before ragged leaves were. */
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    if (!spec->leaves[i].ragged)
      continue;
    if (chime__align_up(off, CHIME_RING_ALIGN, &off) != 0)
      return CHIME_EOVERFLOW; /* off <= 2^46 here: cannot happen */
    l.offsets_offset[i] = off;
    off += ((uint64_t)batch_size + 1) * sizeof(int64_t);
  }
  info_bytes = (uint64_t)batch_size * sizeof(chime_sample_info_t);
  if (chime__align_up(off, CHIME_RING_ALIGN, &off) != 0 ||
      __builtin_add_overflow(off, info_bytes, &l.slot_bytes) ||
      chime__align_up(l.slot_bytes, CHIME_RING_PAGE, &l.slot_bytes) != 0 ||
      __builtin_mul_overflow(l.slot_bytes, (uint64_t)slots, &l.data_bytes) ||
      l.data_bytes > CHIME_RING_MAX_BYTES) {
    chime__errf(err, errlen, "ring of %u slots x batch %u exceeds %llu bytes",
                slots, batch_size, (unsigned long long)CHIME_RING_MAX_BYTES);
    return CHIME_EOVERFLOW;
  }
  l.info_offset = off;
  *out = l;
  return 0;
}

int chime_ring_layout_compute(chime_ring_layout_t *out,
                              const chime_spec_t *spec, uint32_t batch_size,
                              uint32_t slots) {
  char err[512] = "";
  int rc = chime__ring_layout(out, spec, batch_size, slots, err, sizeof(err));
  return rc == 0 ? 0 : chime__detail(rc, err);
}
