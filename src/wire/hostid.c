/* This host's identity (see hostid.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/hostid.h"

void chime__host_identity(char *boot_id, size_t boot_len, char *host,
                          size_t host_len) {
  boot_id[0] = '\0';
  host[0] = '\0';
  /* Lets one machine play "another host" in tests of the auto fallback. */
  const char *forced = getenv("CHIME_BOOT_ID");
  if (forced && *forced) {
    snprintf(boot_id, boot_len, "%s", forced);
  } else {
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
      if (!fgets(boot_id, (int)boot_len, f))
        boot_id[0] = '\0';
      fclose(f);
    }
  }
  boot_id[strcspn(boot_id, " \r\n\t")] = '\0';
  if (gethostname(host, host_len) != 0)
    host[0] = '\0';
  host[host_len - 1] = '\0';
}
