/* shm mode (streammode.h): the learner maps the ring itself. The open
 * issues a handoff token for it; nothing is sampled until the handoff
 * passed the ring's memfd (items sampled into a ring nobody maps would be
 * lost), and a token that expires unused ends the stream. The learner's
 * releases ring the ring's futex word, which the pool's watcher sleeps on
 * (and its takes, when it asked for a ready limit). Its learner's
 * Credits mean nothing here: the ring's counters say what it took and
 * released. The other end: client/mode_shm.c. */
#include <stdio.h>

#include "common/clock.h"
#include "common/errfmt.h"
#include "server/handoff.h"
#include "server/stream.h"
#include "wire/credit.h"

/* A table whose sampling takes items out (fifo, max_times_sampled) gets
 * them back from a learner that ends holding batches: from the batch's
 * rows, pinned in the table from sample until chimed sees the slot
 * released, and the counts each draw gave (pin_times), never from the
 * ring, which the learner maps writable (docs/ring.md, "What the producer
 * trusts"). 8 bytes per sample of each slot, and rows: an item that left
 * keeps its row until then (spare rows stand in for inserts). */
static int shm_init(chime__stream_t *s, const Chime__V1__Open *open) {
  s->ready_bytes = open->ready_bytes;
  if (chime__table_config(s->table)->max_times_sampled != 0)
    return chime__stream_pins_init(s, open, 1);
  return 0;
}

static int shm_expose(chime__stream_t *s, char *err, size_t errlen) {
  chime_server_t *srv = s->srv;
  /* The learner's limit on batches sampled ahead of its next() (docs/
   * protocol.md, Open): it reads what was written recently, still in
   * cache. */
  int rc = chime__ring_set_ready_max(
      s->ring, chime__ready_max(s->ready_bytes, s->send_bytes));
  if (rc != 0)
    return chime__fail(err, errlen, rc, "ready_bytes: %s", chime_strerror(rc));
  rc = chime__handoff_issue(srv->handoff, s, srv->cfg.handoff_expires_ms,
                            s->token, &s->token_deadline_ns);
  if (rc != 0)
    return chime__fail(err, errlen, rc, "cannot issue a handoff token: %s",
                       chime_strerror(rc));
  return 0;
}

static int shm_handoff(chime__stream_t *s, Chime__V1__Handoff *ho,
                       uint8_t nonce[CHIME__HANDOFF_NONCE_BYTES]) {
  chime_server_t *srv = s->srv;
  chime_ring_nonce(s->ring, nonce);
  ho->socket_path = (char *)chime__handoff_path(srv->handoff);
  ho->token.data = s->token;
  ho->token.len = sizeof(s->token);
  ho->expires_ms = srv->cfg.handoff_expires_ms;
  ho->nonce.data = nonce;
  ho->nonce.len = CHIME__HANDOFF_NONCE_BYTES;
  return 1;
}

/* A token that expired unused ends its stream: nobody can attach any more,
 * and the ring would hold its budget until the call ends. 0 when the token
 * was taken instead (the handoff is under way and decides). */
static int expire_unused(chime__stream_t *s) {
  chime_server_t *srv = s->srv;
  if (!chime__handoff_revoke(srv->handoff, s))
    return 0;
  pthread_mutex_lock(&srv->mu);
  chime__call_t *call = s->call;
  if (call != NULL)
    chime__call_ref(call);
  pthread_mutex_unlock(&srv->mu);
  chime__stream_close(s);
  if (call != NULL) {
    chime__call_finish(call, CHIME_ETIMEDOUT,
                       "handoff token expired unused after %u ms",
                       (unsigned)srv->cfg.handoff_expires_ms);
    chime__call_unref(call);
  }
  return 1;
}

static chime__fill_t shm_gate(chime__stream_t *s, chime__fill_wait_t *w) {
  pthread_mutex_lock(&s->mu);
  int attached = s->attached;
  pthread_mutex_unlock(&s->mu);
  if (attached)
    return CHIME__FILL_AGAIN;
  int live = chime__handoff_pending(s->srv->handoff, s);
  /* A token taken but not yet answered: the handoff decides and kicks. */
  w->until_ns = live ? s->token_deadline_ns : 0;
  if (live && chime__now_ns() >= s->token_deadline_ns && expire_unused(s))
    return CHIME__FILL_DONE;
  return CHIME__FILL_WAIT_UNTIL;
}

static int shm_acquire(chime__stream_t *s, chime__ring_wslot_t *ws,
                       chime__fill_wait_t *w) {
  return chime__ring_try_acquire(s->ring, ws, &w->bell, &w->bell_val);
}

/* The rows of batches seen released go (the slot being filled is free:
 * its last batch was released). */
static void unpin_released(chime__stream_t *s, uint32_t filling) {
  for (uint32_t i = 0; i < s->lay.slots; i++)
    if (s->pins[i].n > 0 && (i == filling || chime__ring_released(s->ring, i)))
      chime__table_unpin(s->table, &s->pins[i]);
}

static int shm_sample(chime__stream_t *s, chime__ring_wslot_t *ws) {
  if (s->pins == NULL)
    return chime__table_try_sample(s->table, &s->lay, ws, &s->twait);
  unpin_released(s, ws->slot);
  /* Everything copied into the slot (copy_min: no run is left in the
   * table), the rows pinned for give back. */
  return chime__table_try_sample_pinned(
      s->table, &s->lay, ws, &s->pins[ws->slot], UINT64_MAX, &s->twait);
}

/* Waiting for items with rows pinned for batches not yet seen released:
 * those rows may be what an insert waits for (a small table's rows all
 * pinned), and the learner's release does not kick the job as the table
 * does. So its next release rings the ring's bell too; the table still
 * kicks when items come. A release seen meanwhile: another step. */
static chime__fill_t shm_wait_items(chime__stream_t *s, chime__fill_wait_t *w) {
  if (s->pins == NULL)
    return CHIME__FILL_WAIT_ITEMS;
  int pinned = 0;
  for (uint32_t i = 0; i < s->lay.slots && !pinned; i++)
    pinned = s->pins[i].n > 0;
  if (!pinned || chime__ring_arm_bell(s->ring, &w->bell, &w->bell_val) != 0)
    return CHIME__FILL_WAIT_ITEMS;
  for (uint32_t i = 0; i < s->lay.slots; i++)
    if (s->pins[i].n > 0 && chime__ring_released(s->ring, i))
      return CHIME__FILL_AGAIN; /* unpinned by the next step */
  return CHIME__FILL_WAIT_SLOT;
}

static void shm_abandon(chime__stream_t *s, uint32_t slot) {
  chime__ring_abandon(s->ring, slot);
}

static void shm_counts(chime__stream_t *s, const chime_ring_stats_t *rs,
                       uint64_t *batches, uint64_t *bytes) {
  *batches = rs->published;
  *bytes = rs->published * s->send_bytes;
}

static void shm_close(chime__stream_t *s) {
  chime_server_t *srv = s->srv;
  if (srv->handoff != NULL) {
    chime__handoff_revoke(srv->handoff, s); /* nobody may attach any more */
    chime__handoff_notify(srv->handoff);
  }
}

static void shm_fini(chime__stream_t *s) {
  chime__stream_pins_fini(s);
}

const chime__stream_mode_ops_t chime__stream_mode_shm = {
    .mode = CHIME_MODE_SHM,
    .wire = CHIME__V1__MODE__MODE_SHM,
    .init = shm_init,
    .expose = shm_expose,
    .handoff = shm_handoff,
    .gate = shm_gate,
    .acquire = shm_acquire,
    .sample = shm_sample,
    .wait_items = shm_wait_items,
    .abandon = shm_abandon,
    .counts = shm_counts,
    .close = shm_close,
    .fini = shm_fini,
};
