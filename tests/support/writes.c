/* Samples into a table through a real writer (writes.h). */
#include "writes.h"

#include <stdlib.h>

#include "pattern.h"

int chime__append_pattern(chime_writer_t *w, const chime_spec_t *spec,
                          uint64_t seed, uint64_t n) {
  uint64_t bytes = chime_spec_sample_bytes(spec);
  uint8_t *sample = malloc(bytes ? bytes : 1);
  int rc = sample != NULL ? 0 : CHIME_ENOMEM;
  for (uint64_t i = 0; rc == 0 && i < n; i++) {
    chime__pattern_fill(spec, chime__pattern_id(seed, i), sample);
    rc = chime_writer_append(w, sample, bytes, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(w);
  free(sample);
  return rc;
}

/* Flushes, checks that want were acked, closes; rc: what came before. */
static int close_acked(chime_writer_t *w, int rc, uint64_t want) {
  if (rc == 0)
    rc = chime_writer_flush(w);
  if (rc == 0 && chime_writer_acked(w) != want)
    rc = CHIME_EPROTO;
  int closed = w != NULL ? chime_writer_close(w) : 0;
  return rc != 0 ? rc : closed;
}

int chime__write_pattern(chime_client_t *c, const char *table,
                         const chime_spec_t *spec, uint64_t seed, uint64_t n,
                         const chime_writer_opts_t *opts) {
  chime_writer_t *w = NULL;
  int rc = chime_writer_open(&w, c, table, opts);
  if (rc == 0)
    rc = chime__append_pattern(w, spec, seed, n);
  return close_acked(w, rc, n);
}

int chime__write_counter(chime_client_t *c, const char *table, uint64_t first,
                         uint64_t n, double (*prio)(uint64_t x)) {
  chime_writer_t *w = NULL;
  int rc = chime_writer_open(&w, c, table, NULL);
  for (uint64_t x = first; rc == 0 && x < first + n; x++)
    rc = chime_writer_append(w, &x, sizeof x, prio != NULL ? prio(x) : 1.0);
  return close_acked(w, rc, n);
}
