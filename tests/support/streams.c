/* Streams as the e2e tests open them (streams.h). */
#include "streams.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

int chime__try_open_stream(chime_stream_t **s, chime_client_t *c,
                           const char *table, chime_mode_t mode, uint32_t batch,
                           uint32_t slots, const chime_stream_opts_t *base) {
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  if (base != NULL)
    o = *base;
  o.mode = mode;
  o.batch_size = batch;
  if (slots != 0)
    o.slots = slots;
  *s = NULL;
  return chime_stream_open(s, c, table, &o);
}

chime_stream_t *chime__open_stream(chime_client_t *c, const char *table,
                                   chime_mode_t mode, uint32_t batch,
                                   uint32_t slots,
                                   const chime_stream_opts_t *base) {
  chime_stream_t *s = NULL;
  int rc = chime__try_open_stream(&s, c, table, mode, batch, slots, base);
  if (rc != 0)
    fail_msg("open %s (%s): %s: %s", table, chime_mode_name(mode),
             chime_err_name(rc), chime_last_error());
  return s;
}
