/* Samples into a table through a real writer (writes.h). */
#include "writes.h"

#include <stdlib.h>

#include "pattern.h"

int chime__write_pattern(chime_client_t *c, const char *table,
                         const chime_spec_t *spec, uint64_t seed, uint64_t n,
                         const chime_writer_opts_t *opts) {
  uint64_t bytes = chime_spec_sample_bytes(spec);
  uint8_t *sample = malloc(bytes ? bytes : 1);
  chime_writer_t *w = NULL;
  if (sample == NULL)
    return CHIME_ENOMEM;
  int rc = chime_writer_open(&w, c, table, opts);
  for (uint64_t i = 0; rc == 0 && i < n; i++) {
    chime__pattern_fill(spec, chime__pattern_id(seed, i), sample);
    rc = chime_writer_append(w, sample, bytes, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(w);
  if (rc == 0 && chime_writer_acked(w) != n)
    rc = CHIME_EPROTO;
  int closed = w != NULL ? chime_writer_close(w) : 0;
  free(sample);
  return rc != 0 ? rc : closed;
}
