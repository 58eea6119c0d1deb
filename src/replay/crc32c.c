/* CRC-32C (crc32c.h). */
#include "replay/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t tab[8][256];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int have_sse42;

static void init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
    tab[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int s = 1; s < 8; s++)
      tab[s][i] = (tab[s - 1][i] >> 8) ^ tab[0][tab[s - 1][i] & 0xff];
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t soft(uint32_t c, const uint8_t *p, size_t n) {
  while (n > 0 && ((uintptr_t)p & 7u) != 0) {
    c = (c >> 8) ^ tab[0][(c ^ *p++) & 0xff];
    n--;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= c; /* little-endian: the CRC's low byte meets the first byte */
    c = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^
        tab[4][(w >> 24) & 0xff] ^ tab[3][(w >> 32) & 0xff] ^
        tab[2][(w >> 40) & 0xff] ^ tab[1][(w >> 48) & 0xff] ^ tab[0][w >> 56];
  }
  while (n-- > 0)
    c = (c >> 8) ^ tab[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
hard(uint32_t c, const uint8_t *p, size_t n) {
  uint64_t c64 = c;
  while (n > 0 && ((uintptr_t)p & 7u) != 0) {
    c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
    n--;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
  }
  while (n-- > 0)
    c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
  return (uint32_t)c64;
}
#endif

uint32_t chime__crc32c(uint32_t crc, const void *p, size_t n) {
  pthread_once(&once, init);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (have_sse42)
    return ~hard(c, p, n);
#endif
  return ~soft(c, p, n);
}
