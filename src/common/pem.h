/* Internal: a PEM file read whole, as gRPC's TLS credentials take it (the
 * client's options, chimed's tls config). */
#ifndef CHIME_COMMON_PEM_H
#define CHIME_COMMON_PEM_H

#include <stddef.h>

/* Most bytes of one PEM file: a long certificate chain fits many times. */
#define CHIME__PEM_MAX (1u << 20)

/* *out: the file's text, NUL-terminated (free it with chime__pem_free).
 * CHIME_EINVAL, with why saying so, when it cannot be read ("cannot read
 * 'path': ..."), is over CHIME__PEM_MAX or holds no PEM block ("'path'
 * holds no PEM block": a DER or empty file would only fail at the first
 * handshake, far from where it was named). */
int chime__pem_read(const char *path, char **out, char *why, size_t whylen);
/* Wipes and frees: a private key does not outlive its use. NULL-safe. */
void chime__pem_free(char *pem);

#endif
