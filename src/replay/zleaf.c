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
    if (lf->ragged) {
      at += (uint64_t)lens[k++] * chime_leaf_row_bytes(lf);
      continue;
    }
    if (!zmask[l]) {
      at += chime_leaf_bytes(lf);
      continue;
    }
    if (at > left || left - at < 4) {
      snprintf(why, whylen, "cut short");
      return -1;
    }
    const uint8_t *q = p + at;
    uint32_t st = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                  (uint32_t)q[3] << 24;
    if (st > chime_leaf_bytes(lf)) {
      snprintf(why, whylen,
               "compressed leaf '%s' says %u stored bytes, more than its %llu",
               lf->name, st, (unsigned long long)chime_leaf_bytes(lf));
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
