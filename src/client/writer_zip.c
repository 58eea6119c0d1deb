/* A writer's compressed leaves (writer_zip.h). Each sample is compressed
 * as it is appended, straight from the caller's memory into the request
 * being built (the leaves it keeps raw copied beside): one pass over the
 * caller's frames, as libzstd alone would make, and no raw copy of them in
 * between. A leaf whose frame would not be smaller goes raw (its stored
 * size is the leaf's), as chimed keeps such a leaf. A ragged leaf is
 * compressed at the sample's length, a sequence table's steps as any
 * sample. */
#include "client/writer_zip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "common/detail.h"
#include "replay/zleaf.h"

int chime__writer_zip_open(chime_writer_t *w, const chime_table_info_t *ti,
                           int on, size_t data_bytes, char *err,
                           size_t errlen) {
  uint8_t lv[CHIME_MAX_LEAVES];
  w->nz = 0;
  if (!on || ti->compress[0] == '\0')
    return 0;
  /* Text this client cannot read (a later server's, say): raw samples,
   * which every server takes and compresses itself. */
  if (chime__zleaf_levels(&w->spec, ti->compress, lv) != 0)
    return 0;
  for (uint32_t l = 0; l < w->spec.nleaves; l++)
    if (lv[l] != 0) {
      w->zleaves[w->nz] = l;
      w->zlevel[w->nz++] = lv[l];
    }
  if (w->nz == 0)
    return 0;
  w->zc = ZSTD_createCCtx();
  w->zdata = malloc(data_bytes);
  w->zsizes = malloc((size_t)w->batch_cap * w->nz * sizeof(uint32_t));
  if (w->zc == NULL || w->zdata == NULL || w->zsizes == NULL)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  return 0;
}

void chime__writer_zip_put(chime_writer_t *w, uint32_t j,
                           const uint8_t *const leaf[], const size_t n[]) {
  uint8_t *dst = w->zdata + w->zused;
  uint32_t *sz = w->zsizes + (size_t)j * w->nz;
  for (uint32_t l = 0, k = 0; l < w->spec.nleaves; l++) {
    size_t st = n[l];
    if (k < w->nz && w->zleaves[k] == l) {
      /* Room for a frame smaller than the leaf only (zleaf.h); a context
       * zstd could not make leaves it raw. */
      if (w->zc == NULL || chime__zleaf_compress_with(w->zc, dst, leaf[l], n[l],
                                                      w->zlevel[k], &st) != 0)
        st = n[l];
      sz[k++] = (uint32_t)st;
    }
    if (st == n[l] && n[l] > 0)
      memcpy(dst, leaf[l], n[l]);
    dst += st;
  }
  w->zused = (size_t)(dst - w->zdata);
}

void chime__writer_zip_put_flat(chime_writer_t *w, uint32_t j,
                                const uint8_t *sample) {
  const uint8_t *leaf[CHIME_MAX_LEAVES];
  size_t n[CHIME_MAX_LEAVES];
  for (uint32_t l = 0; l < w->spec.nleaves; l++) {
    leaf[l] = sample;
    n[l] = (size_t)chime_leaf_bytes(&w->spec.leaves[l]);
    sample += n[l];
  }
  chime__writer_zip_put(w, j, leaf, n);
}

void chime__writer_zip_req(chime_writer_t *w, Chime__V1__InsertRequest *req) {
  if (w->nz == 0)
    return;
  req->data.data = w->zdata;
  req->data.len = w->zused;
  req->n_stored_leaves = w->nz;
  req->stored_leaves = w->zleaves;
  req->n_stored = (size_t)w->queued * w->nz;
  req->stored = w->zsizes;
  w->zused = 0;
}

void chime__writer_zip_close(chime_writer_t *w) {
  ZSTD_freeCCtx(w->zc);
  free(w->zdata);
  free(w->zsizes);
  w->zc = NULL;
  w->zdata = NULL;
  w->zsizes = NULL;
}

int chime__writer_zip_alike(const chime_table_info_t *a,
                            const chime_table_info_t *b) {
  uint8_t la[CHIME_MAX_LEAVES], lb[CHIME_MAX_LEAVES];
  const chime_spec_t *s = a->sequence_length ? &a->step_spec : &a->spec;
  if (strcmp(a->compress, b->compress) == 0)
    return 1;
  if (chime__zleaf_levels(s, a->compress, la) != 0 ||
      chime__zleaf_levels(s, b->compress, lb) != 0)
    return 0;
  for (uint32_t l = 0; l < s->nleaves; l++)
    if (!la[l] != !lb[l])
      return 0;
  return 1;
}

int chime_writer_compress(const chime_writer_t *writer, char *out, size_t len) {
  size_t at = 0;
  if (!writer || !out || len == 0)
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_compress: needs a writer and out");
  out[0] = '\0';
  for (uint32_t k = 0; k < writer->nz; k++) {
    int n = snprintf(out + at, len - at, "%s%s:%u", k > 0 ? "," : "",
                     writer->spec.leaves[writer->zleaves[k]].name,
                     writer->zlevel[k]);
    if (n < 0 || (size_t)n >= len - at) {
      out[0] = '\0';
      return chime__detail(CHIME_EINVAL, "chime_writer_compress: len too "
                                         "short");
    }
    at += (size_t)n;
  }
  return 0;
}
