/* Compressed leaves: zstd with one compression and one decompression
 * context per thread (zleaf.h). A context is about a megabyte at level 3
 * and costs more to make than a leaf costs to compress, so each thread
 * keeps its own (inserts compress outside the table's lock, samplers
 * decompress outside it, several at once); a thread's go when it ends. */
#include "replay/zleaf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "chime/errors.h"

static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static pthread_key_t ckey, dkey;
static int keys_ok;

static void cctx_free(void *p) {
  ZSTD_freeCCtx(p);
}
static void dctx_free(void *p) {
  ZSTD_freeDCtx(p);
}

static void make_keys(void) {
  keys_ok = pthread_key_create(&ckey, cctx_free) == 0 &&
            pthread_key_create(&dkey, dctx_free) == 0;
}

static ZSTD_CCtx *thread_cctx(void) {
  pthread_once(&keys_once, make_keys);
  if (!keys_ok)
    return NULL;
  ZSTD_CCtx *c = pthread_getspecific(ckey);
  if (c == NULL && (c = ZSTD_createCCtx()) != NULL &&
      pthread_setspecific(ckey, c) != 0) {
    ZSTD_freeCCtx(c);
    c = NULL;
  }
  return c;
}

static ZSTD_DCtx *thread_dctx(void) {
  pthread_once(&keys_once, make_keys);
  if (!keys_ok)
    return NULL;
  ZSTD_DCtx *d = pthread_getspecific(dkey);
  if (d == NULL && (d = ZSTD_createDCtx()) != NULL &&
      pthread_setspecific(dkey, d) != 0) {
    ZSTD_freeDCtx(d);
    d = NULL;
  }
  return d;
}

int chime__zleaf_compress(uint8_t *dst, const uint8_t *src, size_t n, int level,
                          size_t *out) {
  ZSTD_CCtx *c = thread_cctx();
  if (c == NULL)
    return CHIME_ENOMEM;
  return chime__zleaf_compress_with(c, dst, src, n, level, out);
}

int chime__zleaf_compress_with(ZSTD_CCtx *c, uint8_t *dst, const uint8_t *src,
                               size_t n, int level, size_t *out) {
  *out = n;
  if (n < 2)
    return 0;
  /* Room for a frame smaller than the leaf only: one that would not fit
   * is an error, and the leaf is stored raw (the level's work is the
   * same either way; zstd stops once the frame cannot fit). */
  size_t k = ZSTD_compressCCtx(c, dst, n - 1, src, n, level);
  if (!ZSTD_isError(k) && k < n)
    *out = k;
  return 0;
}

int chime__zleaf_levels(const chime_spec_t *spec, const char *text,
                        uint8_t levels[CHIME_MAX_LEAVES]) {
  memset(levels, 0, CHIME_MAX_LEAVES);
  for (const char *p = text; *p != '\0';) {
    const char *colon = strchr(p, ':');
    size_t len = colon != NULL ? (size_t)(colon - p) : 0;
    char *end = NULL;
    long lv = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    uint32_t l = 0;
    while (l < spec->nleaves && (strlen(spec->leaves[l].name) != len ||
                                 strncmp(spec->leaves[l].name, p, len) != 0))
      l++;
    if (l == spec->nleaves || end == colon + 1 || lv < CHIME__ZLEAF_MIN_LEVEL ||
        lv > CHIME__ZLEAF_MAX_LEVEL || (*end != ',' && *end != '\0')) {
      memset(levels, 0, CHIME_MAX_LEAVES);
      return CHIME_EPROTO;
    }
    levels[l] = (uint8_t)lv;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

int chime__zleaf_decompress(uint8_t *dst, size_t n, const uint8_t *src,
                            size_t stored) {
  if (stored == n) {
    memcpy(dst, src, n);
    return 0;
  }
  ZSTD_DCtx *d = thread_dctx();
  if (d == NULL)
    return CHIME_ENOMEM;
  /* A frame's declared size first: a frame that says more than the leaf
   * (a bomb) or nothing is refused before a byte is written. */
  unsigned long long want =
      stored < n ? ZSTD_getFrameContentSize(src, stored) : 0;
  size_t k = want == (unsigned long long)n
                 ? ZSTD_decompressDCtx(d, dst, n, src, stored)
                 : (size_t)-1;
  if (ZSTD_isError(k) || k != n) {
    memset(dst, 0, n);
    return CHIME_ECORRUPT;
  }
  return 0;
}

int chime__zleaf_check(const uint8_t *src, size_t stored, size_t n,
                       uint8_t *scratch) {
  if (stored > n)
    return CHIME_ECORRUPT;
  if (stored == n)
    return 0;
  /* One frame, exactly the stored bytes. */
  if (ZSTD_findFrameCompressedSize(src, stored) != stored)
    return CHIME_ECORRUPT;
  return chime__zleaf_decompress(scratch, n, src, stored);
}

/* A checkpoint record's leaves (version 6, ckpt_format.h) with compressed
 * leaves (zmask[l]: leaf l is one), from their start p (left bytes there): the
 * others at their sizes (ragged ones at lens), each compressed one its u32
 * stored size and that many bytes, at most the leaf's. 0 and *bytes, or -1 with
 * why filled. */
int chime__zleaf_record_bytes(const uint8_t *p, uint64_t left,
                              const chime_spec_t *spec, const uint32_t *lens,
                              const uint8_t *zmask, uint64_t *bytes, char *why,
                              size_t whylen) {
  uint64_t at = 0;
  for (uint32_t l = 0, k = 0; l < spec->nleaves; l++) {
    const chime_leaf_t *lf = &spec->leaves[l];
    /* A ragged leaf's bytes at its length (compressed: the most). */
    uint64_t lb = lf->ragged ? (uint64_t)lens[k++] * chime_leaf_row_bytes(lf)
                             : chime_leaf_bytes(lf);
    if (!zmask[l]) {
      at += lb;
      continue;
    }
    if (at > left || left - at < 4) {
      snprintf(why, whylen, "cut short");
      return -1;
    }
    const uint8_t *q = p + at;
    uint32_t st = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                  (uint32_t)q[3] << 24;
    if (st > lb) {
      snprintf(why, whylen,
               "compressed leaf '%s' says %u stored bytes, more than its %llu",
               lf->name, st, (unsigned long long)lb);
      return -1;
    }
    at += 4 + (uint64_t)st;
  }
  if (at > left) {
    snprintf(why, whylen,
             "its leaves take %llu bytes, more than the %llu left in the file",
             (unsigned long long)at, (unsigned long long)left);
    return -1;
  }
  *bytes = at;
  return 0;
}

static uint32_t rd32(const uint8_t *q) {
  return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
         (uint32_t)q[3] << 24;
}

/* The steps of a block's compressed leaves, each in an allocation of its
 * own, checked (chime__zleaf_block's second half): zat[k] is where the
 * k-th compressed leaf's steps start in p, walked already. */
static int block_load(const uint8_t *p, const chime_spec_t *spec,
                      const uint32_t *zl, uint32_t nz, const uint64_t *zat,
                      uint32_t bn, uint8_t **z, char *why, size_t whylen) {
  uint64_t at[CHIME_MAX_LEAVES], big = 0;
  for (uint32_t k = 0; k < nz; k++) {
    at[k] = zat[k];
    uint64_t lb = chime_leaf_bytes(&spec->leaves[zl[k]]);
    big = lb > big ? lb : big;
  }
  uint8_t *scratch = malloc((size_t)big);
  int rc = scratch == NULL ? CHIME_ENOMEM : 0;
  memset(z, 0, bn * sizeof(*z)); /* each its own, or NULL, on an error */
  for (uint32_t o = 0; rc == 0 && o < bn; o++) {
    uint64_t total = 4 * (uint64_t)nz;
    for (uint32_t k = 0; k < nz; k++)
      total += rd32(p + at[k]);
    if ((z[o] = malloc((size_t)total)) == NULL) {
      rc = CHIME_ENOMEM;
      break;
    }
    size_t put = 4 * (size_t)nz;
    for (uint32_t k = 0; rc == 0 && k < nz; k++) {
      uint32_t st = rd32(p + at[k]);
      size_t lb = (size_t)chime_leaf_bytes(&spec->leaves[zl[k]]);
      memcpy(z[o] + 4 * (size_t)k, &st, 4);
      memcpy(z[o] + put, p + at[k] + 4, st);
      if (chime__zleaf_check(z[o] + put, st, lb, scratch) != 0) {
        snprintf(why, whylen,
                 "step %u: compressed leaf '%s' (%u stored bytes) is not a "
                 "frame of its %zu bytes",
                 o, spec->leaves[zl[k]].name, st, lb);
        rc = -1;
      }
      put += st;
      at[k] += 4 + (uint64_t)st;
    }
  }
  free(scratch);
  if (rc != 0)
    for (uint32_t o = 0; o < bn; o++) {
      free(z[o]);
      z[o] = NULL;
    }
  return rc;
}

int chime__zleaf_block(const uint8_t *p, uint64_t left,
                       const chime_spec_t *spec, const uint8_t *zmask,
                       uint32_t bn, const uint8_t **leaf, uint8_t **z,
                       uint64_t *bytes, char *why, size_t whylen) {
  uint64_t at = 0, zat[CHIME_MAX_LEAVES];
  uint32_t zl[CHIME_MAX_LEAVES], nz = 0;
  for (uint32_t l = 0; l < spec->nleaves; l++) {
    const chime_leaf_t *lf = &spec->leaves[l];
    uint64_t lb = chime_leaf_bytes(lf);
    if (!zmask[l]) {
      uint64_t need;
      if (__builtin_mul_overflow((uint64_t)bn, lb, &need) || need > left - at) {
        snprintf(why, whylen, "leaf '%s' cut short", lf->name);
        return -1;
      }
      if (leaf != NULL)
        leaf[l] = p + at;
      at += (uint64_t)bn * lb;
      continue;
    }
    zat[nz] = at;
    zl[nz++] = l;
    for (uint32_t o = 0; o < bn; o++) {
      if (left - at < 4) {
        snprintf(why, whylen, "compressed leaf '%s' cut short", lf->name);
        return -1;
      }
      uint32_t st = rd32(p + at);
      if (st > lb || st > left - at - 4) {
        snprintf(why, whylen,
                 "step %u: compressed leaf '%s' says %u stored bytes, more "
                 "than its %llu or the file's",
                 o, lf->name, st, (unsigned long long)lb);
        return -1;
      }
      at += 4 + (uint64_t)st;
    }
  }
  *bytes = at;
  if (leaf == NULL || nz == 0)
    return 0;
  return block_load(p, spec, zl, nz, zat, bn, z, why, whylen);
}
