/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
 * checkpoint files: the SSE4.2 instruction where the CPU has it, else
 * slicing by 8 over tables. */
#ifndef CHIME_SERVER_CRC32C_H
#define CHIME_SERVER_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc (0 to start) over n bytes: crc32c(crc32c(0, a), b) is the
 * CRC of a followed by b. crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t chime__crc32c(uint32_t crc, const void *p, size_t n);

#endif
