/* Compressed leaves on the client (docs/replay.md, "Compressed leaves"):
 * the leaves a learner keeps as stored (opts.keep_compressed, asked for in
 * Open), the spec the server says its ring holds checked against the
 * learner's (common/spec.h chime__spec_framed), and, in stream mode, a
 * batch whose compressed leaves travelled as their stored bytes unpacked
 * into the local slot: each frame checked and decompressed (its declared
 * size the leaf's before a byte is written, zleaf.h), the other leaves,
 * offsets and info copied. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client/stream.h"
#include "common/spec.h"
#include "replay/zleaf.h"
#include "ring/layout.h"

int chime__frames_keep_copy(chime_stream_t *s, const char *text, char *err,
                            size_t errlen) {
  s->keep_text[0] = 0;
  s->opts.keep_compressed = NULL;
  if (text == NULL || text[0] == 0)
    return 0;
  if (strlen(text) >= sizeof(s->keep_text))
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "keep_compressed: longer than %zu bytes",
                       sizeof(s->keep_text) - 1);
  memcpy(s->keep_text, text, strlen(text) + 1);
  s->opts.keep_compressed = s->keep_text;
  return 0;
}

int chime__frames_keep_names(const chime_stream_t *s, chime__keep_t *k,
                             char *err, size_t errlen) {
  k->n = 0;
  for (const char *p = s->keep_text; *p != 0;) {
    const char *e = strchr(p, ',');
    size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
    if (len == 0 || len >= CHIME_MAX_NAME || k->n == CHIME_MAX_LEAVES)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "keep_compressed: '%.200s': expected leaf names "
                         "separated by commas",
                         s->keep_text);
    memcpy(k->names[k->n], p, len);
    k->names[k->n][len] = 0;
    k->ptrs[k->n] = k->names[k->n];
    k->n++;
    p += len + (e != NULL);
  }
  return 0;
}

static uint32_t leaf_index(const chime_spec_t *spec, const char *name) {
  uint32_t i = 0;
  while (i < spec->nleaves && strcmp(spec->leaves[i].name, name) != 0)
    i++;
  return i;
}

/* Whether the server's spec holds leaf i as stored bytes: a ragged u8
 * leaf, sharing nothing. */
static int stored_form(const chime_leaf_t *l) {
  return l->ragged && !l->shares && l->dtype == CHIME_DTYPE_U8 && l->ndim == 1;
}

int chime__frames_opened(chime_stream_t *s, const Chime__V1__Layout *l,
                         char *err, size_t errlen) {
  chime_spec_t raw = s->spec;
  memset(s->unframe, 0, sizeof(s->unframe));
  s->nframed = 0;
  s->framed_steps = l->framed_steps;
  for (size_t k = 0; k < l->n_framed; k++) {
    chime_leaf_t leaf;
    const char *name = l->framed[k]->name ? l->framed[k]->name : "";
    uint32_t i = leaf_index(&s->spec, name);
    if (chime__leaf_from_msg(&leaf, l->framed[k]) != 0 ||
        i == s->spec.nleaves || s->unframe[i] || leaf.ragged)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "Opened: framed leaf %zu is no leaf of the spec", k);
    raw.leaves[i] = leaf;
    s->unframe[i] = 1;
    s->nframed++;
  }
  /* The server's spec must be the learner's with those leaves framed. */
  chime_spec_t chk;
  char a[4096], b[4096];
  if (s->nframed > 0 &&
      (chime__spec_framed_steps(&chk, &raw, s->unframe, s->framed_steps) != 0 ||
       chime_spec_format(&chk, a, sizeof(a)) != 0 ||
       chime_spec_format(&s->spec, b, sizeof(b)) != 0 || strcmp(a, b) != 0))
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Opened: framed leaves unlike the spec's stored form");
  chime__keep_t keep;
  int rc = chime__frames_keep_names(s, &keep, err, errlen);
  for (uint32_t k = 0; rc == 0 && k < keep.n; k++) {
    uint32_t i = leaf_index(&s->spec, keep.names[k]);
    if (i == s->spec.nleaves || s->unframe[i] ||
        !stored_form(&s->spec.leaves[i]))
      rc = chime__fail(err, errlen, CHIME_ENOTSUP,
                       "keep_compressed: the server sends leaf '%s' "
                       "decompressed (a server before 1.0?)",
                       keep.names[k]);
  }
  if (rc != 0 || s->nframed == 0)
    return rc;
  char why[256];
  s->wire_spec = s->spec;
  s->spec = raw;
  rc = chime__ring_layout(&s->layout, &s->spec, s->opts.batch_size,
                          s->opts.slots, why, sizeof(why));
  if (rc != 0)
    return chime__fail(err, errlen, CHIME_EPROTO, "Opened: layout: %s", why);
  return 0;
}

/* A sample's stored bytes (k at src) into its leaf (n bytes at dst): one
 * stored leaf, or a sequence table's window of r->steps steps: their u32
 * stored sizes, then their stored bytes, each step decompressed at its
 * place (size 0: a padded step, zeros), the sizes adding up to k. 0 or
 * CHIME_ECORRUPT (CHIME_ENOMEM); nothing past the leaf is written. */
static int unpack_sample(const chime__remote_t *r, uint8_t *dst, size_t n,
                         const uint8_t *src, size_t k) {
  if (r->steps == 0)
    return chime__zleaf_decompress(dst, n, src, k);
  size_t lb = n / r->steps, at = 4 * (size_t)r->steps;
  if (k < at)
    return CHIME_ECORRUPT;
  for (uint32_t i = 0; i < r->steps; i++) {
    const uint8_t *q = src + 4 * (size_t)i;
    size_t s = (size_t)q[0] | (size_t)q[1] << 8 | (size_t)q[2] << 16 |
               (size_t)q[3] << 24;
    if (s > lb || s > k - at)
      return CHIME_ECORRUPT;
    int rc = s == 0 ? (memset(dst + i * lb, 0, lb), 0)
                    : chime__zleaf_decompress(dst + i * lb, lb, src + at, s);
    if (rc != 0)
      return rc;
    at += s;
  }
  return at == k ? 0 : CHIME_ECORRUPT;
}

int chime__frames_unpack(const chime__remote_t *r, uint8_t *dst, char *err,
                         size_t errlen) {
  const chime_ring_layout_t *wl = &r->wlay;
  const chime_ring_layout_t *ll = chime_ring_layout(r->ring);
  const chime_spec_t *ws = r->spec;
  const uint8_t *src = r->wire;
  uint32_t batch = wl->batch_size;
  for (uint32_t i = 0; i < ws->nleaves; i++) {
    const uint8_t *from = src + wl->leaf_offset[i];
    uint8_t *to = dst + ll->leaf_offset[i];
    if (wl->offsets_offset[i] == 0) {
      memcpy(to, from, wl->leaf_bytes[i]);
      continue;
    }
    /* Checked by chime__slot_extents before any leaf byte came in. */
    const int64_t *offs = (const int64_t *)(src + wl->offsets_offset[i]);
    if (!r->unframe[i]) { /* ragged, or kept as stored: rows and offsets */
      uint64_t rb = chime_leaf_bytes(&ws->leaves[i]) / ws->leaves[i].shape[0];
      memcpy(to, from, (size_t)offs[batch] * rb);
      memcpy(dst + ll->offsets_offset[i], offs, (batch + 1) * sizeof(*offs));
      continue;
    }
    /* The raw leaf's bytes: the bound but for a window's step sizes. */
    size_t n = (size_t)(ws->leaves[i].shape[0] - 4 * (uint64_t)r->steps);
    for (uint32_t j = 0; j < batch; j++) {
      int rc = unpack_sample(r, to + (size_t)j * n, n, from + offs[j],
                             (size_t)(offs[j + 1] - offs[j]));
      if (rc != 0)
        return chime__fail(err, errlen, CHIME_EPROTO,
                           "stream: batch %" PRIu64 ": leaf '%s': sample %u: "
                           "%s",
                           r->seq, ws->leaves[i].name, j,
                           rc == CHIME_ENOMEM
                               ? "out of memory to decompress it"
                               : "its stored bytes are no frame of the leaf");
    }
  }
  memcpy(dst + ll->info_offset, src + wl->info_offset,
         (size_t)batch * sizeof(chime_sample_info_t));
  return 0;
}
