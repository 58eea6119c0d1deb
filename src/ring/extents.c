/* The bytes of a slot a batch uses, in the order stream mode sends them
 * (extents.h). */
#include "ring/extents.h"

#include <inttypes.h>
#include <string.h>

#include "chime/errors.h"
#include "common/errfmt.h"

uint64_t chime__slot_send_bytes(const chime_ring_layout_t *lay) {
  return lay->info_offset +
         (uint64_t)lay->batch_size * sizeof(chime_sample_info_t);
}

uint64_t chime__slot_tail(const chime_ring_layout_t *lay,
                          const chime_spec_t *spec) {
  /* Ragged leaves' offsets lie in spec order (chime_ring_layout). */
  for (uint32_t i = 0; i < spec->nleaves; i++)
    if (spec->leaves[i].ragged)
      return lay->offsets_offset[i];
  return 0;
}

static void put(chime__extents_t *out, uint64_t off, uint64_t len) {
  if (len == 0)
    return;
  out->e[out->n++] = (chime__extent_t){off, len};
  out->total += len;
}

int64_t chime__offsets_rows(const int64_t *offsets, uint32_t count,
                            uint64_t bound, const char *leaf, char *err,
                            size_t errlen) {
  int64_t offs[2];
  const uint8_t *o = (const uint8_t *)offsets;
  memcpy(&offs[0], o, sizeof(int64_t));
  if (offs[0] != 0) {
    chime__errf(err, errlen, "leaf '%s': offsets[0] is %" PRId64 ", not 0",
                leaf, offs[0]);
    return -1;
  }
  /* The slot's offsets are 64-aligned int64 (chime_ring_layout), but a
   * peer's: memcpy keeps the read defined whatever they hold. */
  for (uint32_t j = 0; j < count; j++) {
    memcpy(&offs[1], o + (size_t)(j + 1) * sizeof(int64_t), sizeof(int64_t));
    if (offs[1] < offs[0] || (uint64_t)(offs[1] - offs[0]) > bound) {
      chime__errf(err, errlen,
                  "leaf '%s': sample %u has offsets %" PRId64 "..%" PRId64
                  ", not 0..%" PRIu64 " rows",
                  leaf, j, offs[0], offs[1], bound);
      return -1;
    }
    offs[0] = offs[1];
  }
  return offs[0];
}

/* The rows leaf i's offsets (at offs[i]) say the batch holds, or -1 (a
 * message in err) when they cannot be trusted. */
static int64_t leaf_rows(const chime_ring_layout_t *lay,
                         const chime_spec_t *spec,
                         const int64_t *const offsets[], uint32_t i, char *err,
                         size_t errlen) {
  const chime_leaf_t *lf = &spec->leaves[i];
  uint32_t B = lay->batch_size;
  int64_t rows =
      chime__offsets_rows(offsets[i], B, lf->shape[0], lf->name, err, errlen);
  if (rows >= 0 && lf->shares != 0 &&
      memcmp(offsets[i], offsets[lf->shares - 1],
             ((size_t)B + 1) * sizeof(int64_t)) != 0) {
    chime__errf(err, errlen,
                "leaf '%s': offsets unlike those of '%s', whose length it "
                "shares",
                lf->name, spec->leaves[lf->shares - 1].name);
    return -1;
  }
  return rows;
}

int chime__slot_extents(const chime_ring_layout_t *lay,
                        const chime_spec_t *spec, const uint8_t *base,
                        chime__extents_t *out, char *err, size_t errlen) {
  const int64_t *offsets[CHIME_MAX_LEAVES] = {NULL};
  for (uint32_t i = 0; i < spec->nleaves; i++)
    if (spec->leaves[i].ragged)
      offsets[i] = (const int64_t *)(base + lay->offsets_offset[i]);
  return chime__slot_extents_of(lay, spec, offsets, out, err, errlen);
}

int chime__slot_extents_of(const chime_ring_layout_t *lay,
                           const chime_spec_t *spec,
                           const int64_t *const offsets[],
                           chime__extents_t *out, char *err, size_t errlen) {
  uint64_t send = chime__slot_send_bytes(lay);
  uint64_t tail = chime__slot_tail(lay, spec);
  out->n = 0;
  out->total = 0;
  if (tail == 0) {
    put(out, 0, send);
    return 0;
  }
  put(out, tail, send - tail);
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    uint64_t len = lay->leaf_bytes[i];
    if (spec->leaves[i].ragged) {
      int64_t rows = leaf_rows(lay, spec, offsets, i, err, errlen);
      if (rows < 0)
        return CHIME_EPROTO;
      /* rows <= B x bound: within the leaf's region, no overflow. */
      len = (uint64_t)rows * chime_leaf_row_bytes(&spec->leaves[i]);
    }
    put(out, lay->leaf_offset[i], len);
  }
  return 0;
}
