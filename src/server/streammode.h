/* Internal: what differs between a stream's two modes, as one table of
 * functions per mode (nng's transport habit, as the client's
 * src/client/stream.h): shm (mode_shm.c: the learner maps the ring, handed
 * over by the handoff socket) and stream (mode_stream.c: the server sends
 * each batch over the call, from the table's pinned rows). stream.c runs a
 * stream's life and calls these at the points where the modes part; it
 * never names a mode. The Subscribe handler picks the table from the Open
 * request's mode (subscribe.c). Every member is called with no lock
 * of the server's or the stream's held; a member marked optional may be
 * NULL, meaning the mode has nothing to do there (as the client's
 * src/client/stream.h). */
#ifndef CHIME_SERVER_STREAMMODE_H
#define CHIME_SERVER_STREAMMODE_H

#include <stddef.h>
#include <stdint.h>

#include "chime.pb-c.h"
#include "ring/producer.h"
#include "server/call.h"
#include "server/fill_pool.h"
#include "wire/handoff_bytes.h"

typedef struct chime__stream_s chime__stream_t;

typedef struct {
  int mode;             /* CHIME_MODE_SHM or CHIME_MODE_STREAM */
  Chime__V1__Mode wire; /* as Opened and Stats name it */
  /* Before the stream is counted and before its ring exists: the mode's
   * own state for `open` (stream mode: its sender, credits, spans and
   * held batches). 0 or CHIME_ENOMEM; what it made goes in fini, whether
   * it failed or not. */
  int (*init)(chime__stream_t *s, const Chime__V1__Open *open);
  /* Optional. The last step of a successful open, once the ring is made:
   * nothing fails after it. shm: issues the handoff token sent in Opened;
   * stream: its sender takes the ring. 0, or a CHIME_E code with err meant
   * for the client. */
  int (*expose)(chime__stream_t *s, char *err, size_t errlen);
  /* Optional. Opened's handoff part, pointing into s and nonce (which
   * must outlive the message): 1 when filled (shm: socket path, token,
   * expiry, the ring's nonce), 0 when there is none. */
  int (*handoff)(chime__stream_t *s, Chime__V1__Handoff *ho,
                 uint8_t nonce[CHIME__HANDOFF_NONCE_BYTES]);
  /* Optional. The Subscribe call is the stream's: batches may go to it. */
  void (*start)(chime__stream_t *s, chime__call_t *call);
  /* Optional (NULL: filling always may go on). At the head of each fill
   * step: CHIME__FILL_AGAIN when filling may go on; else what the step returns
   * (w set), CHIME__FILL_DONE to end the stream. shm: nothing is sampled before
   * the learner holds the ring. */
  chime__fill_t (*gate)(chime__stream_t *s, chime__fill_wait_t *w);
  /* Takes a free slot (chime__ring_try_acquire's codes); shm arms w's bell
   * when there is none, stream mode is kicked by its sender instead. */
  int (*acquire)(chime__stream_t *s, chime__ring_wslot_t *ws,
                 chime__fill_wait_t *w);
  /* Samples a batch into the acquired slot (chime__table_try_sample's
   * codes: CHIME_EBUSY waits on s->twait). */
  int (*sample)(chime__stream_t *s, chime__ring_wslot_t *ws);
  /* sample found too few items (the slot went back unfilled): how the
   * step waits, CHIME__FILL_WAIT_ITEMS (the table kicks) unless the mode
   * must also hear of something else (w set). Optional: WAIT_ITEMS. */
  chime__fill_t (*wait_items)(chime__stream_t *s, chime__fill_wait_t *w);
  /* The slot acquired goes back unfilled. */
  void (*abandon)(chime__stream_t *s, uint32_t slot);
  /* Optional. The slot was published (the sender may send it). */
  void (*published)(chime__stream_t *s);
  /* Optional. A Credit: n more batches; released the seqs the learner
   * let go (shm: the ring's counters say that, and Credits mean
   * nothing). */
  void (*credit)(chime__stream_t *s, uint32_t n, const uint64_t *released,
                 size_t nreleased);
  /* Optional. The call sent what it had (completion queue's thread, the
   * call's on_sent): shm has nothing to send after it. */
  void (*sent)(chime__stream_t *s);
  /* Batches and bytes delivered so far, for Stats; rs is the ring's. */
  void (*counts)(chime__stream_t *s, const chime_ring_stats_t *rs,
                 uint64_t *batches, uint64_t *bytes);
  /* Optional. What the learner did not finish went back to the table
   * (the stream retires): nothing it holds stays held. */
  void (*retired)(chime__stream_t *s);
  /* Optional (NULL: the mode has no lanes). call joins the stream as
   * lane (docs/protocol.md, "Lanes"): chime__sender_join's codes. */
  int (*join)(chime__stream_t *s, uint32_t lane, chime__call_t *call);
  /* Optional. The stream closed: nobody may reach its ring any more. */
  void (*close)(chime__stream_t *s);
  /* The last reference went, before the ring is destroyed: what init
   * made goes. */
  void (*fini)(chime__stream_t *s);
} chime__stream_mode_ops_t;

extern const chime__stream_mode_ops_t chime__stream_mode_shm;
extern const chime__stream_mode_ops_t chime__stream_mode_send;

#endif
