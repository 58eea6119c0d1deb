/* Stream mode's packed tail (ztail.h): a transform that lines up what
 * repeats (offsets rise by about a frame's size; a batch's info records
 * share their probability, priority, table size, and keys and insert
 * times differ in their low bytes), then zstd level 1 with the thread's
 * context (zleaf.c). */
#include "replay/ztail.h"

#include <string.h>

#include "chime/errors.h"
#include "chime/spec.h"
#include "replay/zleaf.h"

#define WORDS_PER_INFO (sizeof(chime_sample_info_t) / sizeof(uint64_t))

static uint64_t rd(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static void wr(uint8_t *p, uint64_t v) {
  memcpy(p, &v, sizeof(v));
}

/* The offsets words delta-coded (any bytes past the last whole word as
 * they are), the records' fields as delta-coded columns. */
static void forward(uint8_t *dst, const uint8_t *src, size_t n, size_t ninfo) {
  size_t a = n - ninfo, words = a / 8,
         recs = ninfo / sizeof(chime_sample_info_t);
  uint64_t prev = 0;
  for (size_t i = 0; i < words; i++) {
    uint64_t v = rd(src + 8 * i);
    wr(dst + 8 * i, v - prev);
    prev = v;
  }
  memcpy(dst + 8 * words, src + 8 * words, a - 8 * words);
  const uint8_t *info = src + a;
  for (size_t c = 0; c < WORDS_PER_INFO; c++) {
    prev = 0;
    for (size_t j = 0; j < recs; j++) {
      uint64_t v = rd(info + j * sizeof(chime_sample_info_t) + 8 * c);
      wr(dst + a + 8 * (c * recs + j), v - prev);
      prev = v;
    }
  }
}

static void inverse(uint8_t *dst, const uint8_t *src, size_t n, size_t ninfo) {
  size_t a = n - ninfo, words = a / 8,
         recs = ninfo / sizeof(chime_sample_info_t);
  uint64_t sum = 0;
  for (size_t i = 0; i < words; i++) {
    sum += rd(src + 8 * i);
    wr(dst + 8 * i, sum);
  }
  memcpy(dst + 8 * words, src + 8 * words, a - 8 * words);
  uint8_t *info = dst + a;
  for (size_t c = 0; c < WORDS_PER_INFO; c++) {
    sum = 0;
    for (size_t j = 0; j < recs; j++) {
      sum += rd(src + a + 8 * (c * recs + j));
      wr(info + j * sizeof(chime_sample_info_t) + 8 * c, sum);
    }
  }
}

int chime__ztail_pack(uint8_t *dst, const uint8_t *src, size_t n, size_t ninfo,
                      uint8_t *scratch, size_t *out) {
  forward(scratch, src, n, ninfo);
  size_t k = n;
  int rc = chime__zleaf_compress(dst + CHIME__ZTAIL_HEAD, scratch, n, 1, &k);
  if (rc != 0)
    return rc;
  if (k == n)
    memcpy(dst + CHIME__ZTAIL_HEAD, scratch, n);
  uint32_t s = (uint32_t)k;
  uint8_t head[CHIME__ZTAIL_HEAD] = {(uint8_t)s, (uint8_t)(s >> 8),
                                     (uint8_t)(s >> 16), (uint8_t)(s >> 24)};
  memcpy(dst, head, sizeof(head));
  *out = CHIME__ZTAIL_HEAD + k;
  return 0;
}

int chime__ztail_stored(const uint8_t *head, size_t n, size_t *stored) {
  uint32_t s = (uint32_t)head[0] | (uint32_t)head[1] << 8 |
               (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
  *stored = s;
  return s == 0 || s > n ? CHIME_EPROTO : 0;
}

int chime__ztail_unpack(uint8_t *dst, size_t n, size_t ninfo,
                        const uint8_t *src, size_t stored, uint8_t *scratch) {
  int rc = chime__zleaf_decompress(scratch, n, src, stored);
  if (rc != 0)
    return rc;
  inverse(dst, scratch, n, ninfo);
  return 0;
}
