/* libFuzzer target: chimed's JSON config (src/server/config.c, with the
 * spec parser it calls for every table).
 *
 * Input: the config text, as chimed reads it (a NUL is added at the end;
 * the bytes may hold NULs of their own: the text then ends there, as it
 * does for chimed).
 *
 * Files named by the config (auth.tokens[].file, tls.*) are not opened:
 * config.c is built for this target with its fopen renamed fuzz_fopen
 * (tests/fuzz/CMakeLists.txt), which opens a path "mem:BYTES" as a file
 * holding BYTES; any other path does not exist.
 * A run never touches the file system and the fuzzer reaches the token
 * reader with bytes of its choosing.
 *
 * Beyond "no crash": the result is 0 or CHIME_EINVAL; a refusal has a
 * non-empty, terminated message; an accepted config meets every limit
 * docs/operations.md gives for its keys, and parsing the same text again
 * gives the same bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "fuzz_common.h"
#include "server/config.h"
#include "server/config_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
FILE *fuzz_fopen(const char *path, const char *mode);

FILE *fuzz_fopen(const char *path, const char *mode) {
  (void)mode;
  if (strncmp(path, "mem:", 4) != 0 || path[4] == '\0') {
    errno = ENOENT;
    return NULL;
  }
  /* The path string outlives the FILE: config.c closes it before the JSON
   * value holding the path is freed. */
  return fmemopen((void *)(path + 4), strlen(path + 4), "r");
}

static void check_table(const chime__table_config_t *t) {
  FUZZ_CHECK(chime__config_name_ok(t->name));
  uint64_t sb = chime_spec_sample_bytes(&t->spec);
  FUZZ_CHECK(t->spec.nleaves >= 1 && t->spec.nleaves <= CHIME_MAX_LEAVES);
  FUZZ_CHECK(sb > 0);
  FUZZ_CHECK(t->capacity >= 1 && t->capacity <= CHIME__MAX_TABLE_ITEMS);
  FUZZ_CHECK(t->capacity <= CHIME__MAX_TABLE_BYTES / sb);
  FUZZ_CHECK(t->min_size <= t->capacity);
  FUZZ_CHECK(t->sampler >= CHIME__SELECTOR_FIFO &&
             t->sampler <= CHIME__SELECTOR_MAX_HEAP);
  FUZZ_CHECK(t->remover >= CHIME__SELECTOR_FIFO &&
             t->remover <= CHIME__SELECTOR_MAX_HEAP);
  if (t->sampler == CHIME__SELECTOR_FIFO)
    FUZZ_CHECK(t->remover == CHIME__SELECTOR_FIFO && t->max_times_sampled >= 1);
  FUZZ_CHECK(t->max_times_sampled <= UINT32_MAX);
  FUZZ_CHECK(t->priority_exponent >= 0 && t->priority_exponent <= 1e6);
  FUZZ_CHECK(t->samples_per_insert >= 0 && t->samples_per_insert <= 1e9);
  if (t->samples_per_insert > 0) {
    double least = t->samples_per_insert > 1.0 ? t->samples_per_insert : 1.0;
    FUZZ_CHECK(t->error_buffer >= least && t->error_buffer <= 1e9);
  } else {
    FUZZ_CHECK(t->error_buffer == 0);
  }
  /* A plain fifo table's items give max_times_sampled samples each and
   * its full table waits for room: a ratio below that stalls. */
  if (t->sampler == CHIME__SELECTOR_FIFO && t->sequence_length == 0 &&
      t->samples_per_insert > 0)
    FUZZ_CHECK(t->samples_per_insert >= (double)t->max_times_sampled);
}

static void check_config(const chime__config_t *c) {
  FUZZ_CHECK(memchr(c->listen, 0, sizeof(c->listen)) != NULL);
  FUZZ_CHECK(c->listen[0] != '\0');
  FUZZ_CHECK(memchr(c->handoff_socket, 0, sizeof(c->handoff_socket)) != NULL);
  FUZZ_CHECK(c->handoff_socket[0] != '\0');
  FUZZ_CHECK(c->handoff_expires_ms >= 1 && c->handoff_expires_ms <= 3600000);
  FUZZ_CHECK(c->max_connections >= 1 && c->max_connections <= 1000000);
  FUZZ_CHECK(c->handshake_timeout_ms >= 1 &&
             c->handshake_timeout_ms <= 3600000);
  FUZZ_CHECK(c->keepalive_time_ms <= 3600000);
  FUZZ_CHECK(c->keepalive_timeout_ms >= 1 &&
             c->keepalive_timeout_ms <= 3600000);
  FUZZ_CHECK(c->sampler_threads <= 64);
  FUZZ_CHECK(c->nuids <= CHIME__MAX_UIDS);
  FUZZ_CHECK(c->stream_ring_bytes >= 1 && c->total_ring_bytes >= 1 &&
             c->staged_insert_bytes >= 1);
  FUZZ_CHECK(c->stream_ring_bytes <= c->total_ring_bytes);
  FUZZ_CHECK(c->ntokens <= CHIME__MAX_TOKENS);
  for (uint32_t i = 0; i < c->ntokens; i++) {
    const chime__token_config_t *t = &c->tokens[i];
    FUZZ_CHECK(t->len >= 1 && t->len <= CHIME__TOKEN_MAX);
    FUZZ_CHECK(t->token[t->len] == '\0');
    for (uint32_t k = 0; k < t->len; k++)
      FUZZ_CHECK(t->token[k] > ' ' && t->token[k] <= '~');
    FUZZ_CHECK(t->role >= CHIME__ROLE_ACTOR && t->role <= CHIME__ROLE_ADMIN);
    for (uint32_t j = 0; j < i; j++)
      FUZZ_CHECK(c->tokens[j].len != t->len ||
                 memcmp(c->tokens[j].token, t->token, t->len) != 0);
  }
  /* TLS: off, or a certificate and its key (client_ca optional). */
  FUZZ_CHECK((c->tls.cert[0] == '\0') == (c->tls.key[0] == '\0'));
  FUZZ_CHECK(c->tls.client_ca[0] == '\0' || c->tls.cert[0] != '\0');
  FUZZ_CHECK(c->ntables >= 1 && c->ntables <= CHIME__MAX_TABLES);
  for (uint32_t i = 0; i < c->ntables; i++) {
    check_table(&c->tables[i]);
    for (uint32_t j = 0; j < i; j++)
      FUZZ_CHECK(strcmp(c->tables[i].name, c->tables[j].name) != 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static chime__config_t a, b; /* large: off the stack */
  char err[512];
  char *text = malloc(size + 1);
  FUZZ_CHECK(text != NULL);
  memcpy(text, data, size);
  text[size] = '\0';
  memset(err, 0x55, sizeof(err));
  int rc = chime__config_parse(&a, text, err, sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == CHIME_EINVAL);
  if (rc != 0) {
    FUZZ_CHECK(memchr(err, 0, sizeof(err)) != NULL && err[0] != '\0');
  } else {
    check_config(&a);
    FUZZ_CHECK(chime__config_parse(&b, text, err, sizeof(err)) == 0);
    FUZZ_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
  }
  free(text);
  return 0;
}
