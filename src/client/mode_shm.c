/* shm mode, the learner's end: present the handoff token Opened carries,
 * map the server's ring, and release slots straight into it. The other
 * end: server/mode_shm.c. */
#include <unistd.h>

#include "client/stream.h"
#include "ring/layout.h"
#include "wire/handoff_bytes.h"

static void shm_fill_open(const chime_stream_t *s, Chime__V1__Open *open) {
  open->mode = CHIME__V1__MODE__MODE_SHM;
  open->prefetch = 0;
  open->ready_bytes = s->opts.ready_bytes;
}

static int shm_setup(chime_stream_t *s, const Chime__V1__Opened *op,
                     int *attach_failed, char *err, size_t errlen) {
  const Chime__V1__Handoff *h = op->handoff;
  int fd = -1;
  *attach_failed = 1;
  if (!h || h->nonce.len != CHIME__HANDOFF_NONCE_BYTES)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Opened: shm mode without a valid handoff");
  int rc = chime__handoff_fetch(h->socket_path, h->token.data, h->token.len,
                                s->opts.open_timeout_ms, &fd, err, errlen);
  if (rc)
    return rc;
  rc = chime_ring_attach(&s->ring, fd, h->nonce.data);
  close(fd);
  if (rc)
    return chime__fail(err, errlen, rc, "ring attach: %s: %s",
                       chime_strerror(rc), chime_last_error());
  const chime_ring_layout_t *got = chime_ring_layout(s->ring);
  if (got->slot_bytes != s->layout.slot_bytes ||
      got->slots != s->layout.slots ||
      got->info_offset != s->layout.info_offset)
    return chime__fail(err, errlen, CHIME_ECORRUPT,
                       "ring attach: mapped ring does not match Opened");
  *attach_failed = 0;
  return 0;
}

static int shm_release(chime_stream_t *s, uint32_t slot) {
  return chime_ring_release(s->ring, slot);
}

const chime__transport_t chime__shm_transport = {
    .mode = CHIME_MODE_SHM,
    .fill_open = shm_fill_open,
    .setup = shm_setup,
    .release = shm_release,
};
