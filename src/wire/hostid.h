/* Host identity: GetInfo reports the server's, Open carries the client's,
 * and two processes are on one host when both the boot id and the hostname
 * match (that is what makes shm possible). */
#ifndef CHIME_WIRE_HOSTID_H
#define CHIME_WIRE_HOSTID_H

#include <stddef.h>

#define CHIME__BOOT_ID_LEN 64
#define CHIME__HOSTNAME_LEN 256

/* boot_id from /proc/sys/kernel/random/boot_id, trimmed (or $CHIME_BOOT_ID,
 * for tests that need "another host" on one machine), and gethostname().
 * Either is "" when unknown. */
void chime__host_identity(char *boot_id, size_t boot_len, char *host,
                          size_t host_len);

#endif
