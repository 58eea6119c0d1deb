/* The handoff socket's bytes (server: src/server/handoff.c, client:
 * src/client/handoff.c). The client sends the magic and the 16-byte token
 * from Opened.handoff; the server answers a 4-byte little-endian int32: 0
 * with the ring's fd attached by SCM_RIGHTS, or a negative CHIME_E code (no
 * fd); then closes. A uid not allowed is answered CHIME_EPERM as it is
 * accepted, before it sends. Anything else: closed without an answer. */
#ifndef CHIME_WIRE_HANDOFF_H
#define CHIME_WIRE_HANDOFF_H

#include <stdint.h>

#define CHIME__HANDOFF_MAGIC "CHIMEHO1"
#define CHIME__HANDOFF_MAGIC_BYTES 8
#define CHIME__HANDOFF_TOKEN_BYTES 16
#define CHIME__HANDOFF_REQUEST_BYTES                                           \
  (CHIME__HANDOFF_MAGIC_BYTES + CHIME__HANDOFF_TOKEN_BYTES)
#define CHIME__HANDOFF_STATUS_BYTES 4
/* Opened.handoff.nonce: the ring header's nonce the client checks. */
#define CHIME__HANDOFF_NONCE_BYTES 16

_Static_assert(sizeof(CHIME__HANDOFF_MAGIC) - 1 == CHIME__HANDOFF_MAGIC_BYTES,
               "handoff magic length");

/* The answer's status, both ends: an int32, little-endian. */
static inline void
chime__handoff_status_put(uint8_t b[CHIME__HANDOFF_STATUS_BYTES],
                          int32_t status) {
  uint32_t u = (uint32_t)status;
  b[0] = (uint8_t)u;
  b[1] = (uint8_t)(u >> 8);
  b[2] = (uint8_t)(u >> 16);
  b[3] = (uint8_t)(u >> 24);
}

static inline int32_t
chime__handoff_status_get(const uint8_t b[CHIME__HANDOFF_STATUS_BYTES]) {
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                   (uint32_t)b[3] << 24);
}

#endif
