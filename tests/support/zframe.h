/* Atari-like frames for the compressed-leaf tests (test_table_zstd,
 * test_table_zseq): 84x84 u8, a flat background and three rectangles that
 * move with k (what such observations look like to a compressor), or
 * noise (which does not compress). */
#ifndef CHIME_TESTS_ZFRAME_H
#define CHIME_TESTS_ZFRAME_H

#include <stdint.h>
#include <string.h>

#define FRAME (84 * 84)

static inline void frame(uint8_t *f, uint32_t k, int noise) {
  uint64_t x = k * 0x9e3779b97f4a7c15u + 1;
  for (int i = 0; i < FRAME; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f[i] = noise ? (uint8_t)x : 40;
  }
  for (int r = 0; !noise && r < 3; r++) {
    int y0 = (int)((k * (r + 1) * 3 + r * 20) % 70),
        x0 = (int)((k * 2 + r * 25) % 74);
    for (int y = y0; y < y0 + 10 + r * 3 && y < 84; y++)
      memset(f + y * 84 + x0, 100 + r * 50, 10);
  }
}

#endif
