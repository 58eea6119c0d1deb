/* libFuzzer target: a compressed leaf's stored bytes as a checkpoint or a
 * peer may hand them over (src/replay/zleaf.c). The first two bytes name
 * the leaf's size n (1..65536), the rest are the stored bytes. Each call
 * either refuses (CHIME_ECORRUPT) or gives exactly n bytes, and never
 * writes past the leaf, whatever the frame declares (a bomb is bounded by
 * n before anything is written): a guard after the leaf stays as it was.
 * When the check accepts, the decompression agrees with it byte for byte;
 * what it gave compresses and comes back the same.
 *
 * Seeds (tests/fuzz/corpus/zleaf): zstd frames of patterned leaves, one
 * declaring more than its leaf, a raw leaf, noise. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "fuzz_common.h"
#include "replay/zleaf.h"

#define GUARD 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  size_t n = (size_t)(data[0] | (data[1] << 8)) + 1;
  const uint8_t *src = data + 2;
  size_t stored = size - 2;
  uint8_t *out = malloc(n + GUARD), *scratch = malloc(n);
  uint8_t *z = malloc(n), *back = malloc(n);
  FUZZ_CHECK(out && scratch && z && back);
  memset(out + n, 0xA5, GUARD);
  int rc = chime__zleaf_decompress(out, n, src, stored);
  FUZZ_CHECK(rc == 0 || rc == CHIME_ECORRUPT);
  for (size_t i = 0; i < GUARD; i++)
    FUZZ_CHECK(out[n + i] == 0xA5);
  int ck = stored <= n ? chime__zleaf_check(src, stored, n, scratch)
                       : CHIME_ECORRUPT;
  FUZZ_CHECK(ck == 0 || ck == CHIME_ECORRUPT);
  if (ck == 0) {
    /* What restore accepts, sampling decompresses alike. */
    FUZZ_CHECK(rc == 0);
    if (stored < n)
      FUZZ_CHECK(memcmp(out, scratch, n) == 0);
    size_t zn = 0;
    FUZZ_CHECK(chime__zleaf_compress(z, out, n, 1, &zn) == 0);
    FUZZ_CHECK(zn <= n);
    FUZZ_CHECK(chime__zleaf_decompress(back, n, zn == n ? out : z, zn) == 0);
    FUZZ_CHECK(memcmp(back, out, n) == 0);
  }
  free(out);
  free(scratch);
  free(z);
  free(back);
  return 0;
}
