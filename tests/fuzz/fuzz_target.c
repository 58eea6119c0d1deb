/* libFuzzer target: client target strings (src/client/target.c), the
 * text a user gives chime_client_create and every tool.
 *
 * Input: the target text (a NUL is added; bytes after a NUL of its own are
 * not part of it). Names are parsed, never resolved (no DNS in a fuzz run).
 *
 * Beyond "no crash": the result is 0 or CHIME_EINVAL with a non-empty,
 * terminated message; an accepted target has 1..max addresses (none yet
 * for dns:), each non-empty; a one-server target is its text unchanged;
 * a list never holds a dns: element; a dns: target has a name and a port
 * of digits in 1..65535. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "client/target.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  chime__target_t t;
  char err[256];
  memset(err, 'x', sizeof(err));
  int rc = chime__target_parse(text, MAX, &t, err, sizeof(err));
  if (rc != 0) {
    FUZZ_CHECK(rc == CHIME_EINVAL);
    FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
    FUZZ_CHECK(t.n == 0 && t.addrs == NULL);
    free(text);
    return 0;
  }
  if (t.dns) {
    FUZZ_CHECK(t.sharded && t.n == 0);
    FUZZ_CHECK(t.host[0] != '\0' && t.port[0] != '\0');
    long port = 0;
    for (const char *c = t.port; *c; c++) {
      FUZZ_CHECK(*c >= '0' && *c <= '9');
      port = port > 65535 ? port : port * 10 + (*c - '0');
    }
    FUZZ_CHECK(port >= 1 && port <= 65535);
  } else {
    FUZZ_CHECK(t.n >= 1 && t.n <= MAX);
    if (!t.sharded)
      FUZZ_CHECK(t.n == 1 && strcmp(t.addrs[0], text) == 0);
    for (uint32_t i = 0; i < t.n; i++) {
      FUZZ_CHECK(t.addrs[i][0] != '\0');
      FUZZ_CHECK(strchr(t.addrs[i], ',') == NULL || !t.sharded);
      FUZZ_CHECK(strncmp(t.addrs[i], "dns:", 4) != 0 || !t.sharded);
    }
  }
  chime__target_free(&t);
  free(text);
  return 0;
}
