/* stream mode (streammode.h): the server sends each batch over the
 * Subscribe call. A batch's rows stay pinned in the table and are sent from
 * there (only runs shorter than SEND_COPY_BELOW bytes are copied into the
 * slot, where a slice per row would cost more than the copy); the slot
 * holds the sample info. Slots are freed in this process, by the sender,
 * so the fill job is kicked directly rather than through the ring's futex
 * word; a Credit or a completed send fills what is free on the thread that
 * learned of it (refill). A batch with ragged leaves sends only the bytes
 * it uses, its offsets and info first (ring/extents.h): batch_spans maps
 * those onto the slot. The other end: client/mode_stream.c. */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "replay/ztail.h"
#include "ring/extents.h"
#include "server/lanes.h"
#include "server/sender.h"
#include "server/stream.h"
#include "wire/chunk.h"
#include "wire/credit.h"
#include "ring/layout.h"

#define SEND_COPY_BELOW 4096u

/* What only stream mode has (s->send; shm mode has none of it). */
struct chime__stream_send_s {
  chime__sender_t sender; /* chunks, credits, held batches */
  /* with ragged leaves: the bytes each slot's batch sends
   * (ring/extents.h), set when it is sampled; NULL for a fixed spec */
  chime__extents_t *extents; /* [slots] */
  /* with leaves the client decompresses (unframe): each slot's tail as it
   * travels, packed (replay/ztail.h; ztail_bound bytes a slot,
   * ztail_len[slot] of them used), packed with ztail_scratch by the fill
   * job (one at a time); NULL otherwise */
  uint8_t *ztail;
  uint64_t ztail_bound;
  size_t *ztail_len;
  uint8_t *ztail_scratch;
  atomic_int free_slots; /* free in the ring (the fill job's hint) */
  int kick_at;           /* free_slots that wake the fill job */
};

/* The fill job is kicked only once kick_at slots are free, so a worker
 * wakes once for a few batches instead of once for each (a wake-up costs
 * both threads tens of microseconds here); the batches still published
 * keep the sender busy meanwhile. */
static void slot_freed(chime__stream_t *s) {
  chime__stream_send_t *x = s->send;
  /* A send in flight comes back through send_sent, which fills what is
   * free then, on its own thread (refill). Seen in the other order (flag
   * cleared, then free_slots read there): one of the two acts. */
  if (atomic_fetch_add(&x->free_slots, 1) + 1 >= x->kick_at &&
      !chime__sender_awaiting(&x->sender))
    chime__pool_kick(s->srv->sampler, &s->job);
}

static size_t slot_spans(chime__stream_t *s, uint32_t slot, uint64_t off,
                         uint64_t len, chime__span_t *out, size_t max) {
  return chime__table_spans(s->table, &s->lay, &s->pins[slot],
                            chime_ring_slot_base(s->ring, slot),
                            SEND_COPY_BELOW, off, len, out, max);
}

/* A batch with ragged leaves sends its extents back to back (the offsets
 * and info first, then each leaf's used bytes): bytes [off, off + len) of
 * that are the spans of the slot bytes they stand for. A framed batch's
 * first extent, the tail, goes packed (ztail) instead. */
static size_t batch_spans(chime__stream_t *s, uint32_t slot, uint64_t off,
                          uint64_t len, chime__span_t *out, size_t max) {
  const chime__stream_send_t *sd = s->send;
  if (sd->extents == NULL)
    return slot_spans(s, slot, off, len, out, max);
  const chime__extents_t *x = &sd->extents[slot];
  size_t n = 0;
  uint64_t at = 0, end = off + len;
  for (uint32_t i = 0; i < x->n && at < end; i++) {
    int packed = i == 0 && sd->ztail != NULL;
    uint64_t elen = packed ? sd->ztail_len[slot] : x->e[i].len;
    uint64_t from = off > at ? off : at;
    uint64_t to = at + elen < end ? at + elen : end;
    if (from < to && packed) {
      if (n == max)
        return 0;
      out[n].p = sd->ztail + slot * sd->ztail_bound + (from - at);
      out[n++].len = (size_t)(to - from);
    } else if (from < to) {
      size_t k = slot_spans(s, slot, x->e[i].off + (from - at), to - from,
                            out + n, max - n);
      if (k == 0)
        return 0;
      n += k;
    }
    at += elen;
  }
  return n;
}

/* A fixed spec's batches all send the slot's prefix, as they always did. */
static uint64_t batch_bytes(chime__stream_t *s, uint32_t slot) {
  const chime__stream_send_t *sd = s->send;
  if (sd->extents == NULL)
    return s->send_bytes;
  const chime__extents_t *x = &sd->extents[slot];
  if (sd->ztail == NULL || x->total == 0)
    return x->total;
  return x->total - x->e[0].len + sd->ztail_len[slot];
}

static const chime__sender_owner_t send_owner = {
    .ref = chime__stream_ref,
    .unref = chime__stream_unref,
    .slot_freed = slot_freed,
    .spans = batch_spans,
    .batch_bytes = batch_bytes,
    .call_ref = chime__call_ref,
    .call_send = chime__call_send,
    .call_sending = chime__call_sending,
    .call_lost = chime__call_lost,
};

/* Whether the client decompresses leaves (frames.c): its batches' tails
 * then travel packed (docs/protocol.md, stream mode). */
static int framed_tail(const chime__stream_t *s) {
  for (uint32_t l = 0; l < s->spec.nleaves; l++)
    if (s->unframe[l])
      return 1;
  return 0;
}

/* The ring's layout, as chime_ring_create will make it: the tail's
 * bytes for the packed tails' room. */
static int ztail_init(chime__stream_t *s, const Chime__V1__Open *open) {
  chime__stream_send_t *x = s->send;
  chime_ring_layout_t lay;
  if (chime__ring_layout(&lay, &s->spec, open->batch_size, open->slots, NULL,
                         0) != 0)
    return CHIME_EINVAL;
  uint64_t n = chime__slot_send_bytes(&lay) - chime__slot_tail(&lay, &s->spec);
  x->ztail_bound = chime__ztail_bound(n);
  x->ztail = malloc((size_t)(x->ztail_bound * open->slots));
  x->ztail_len = calloc(open->slots, sizeof(*x->ztail_len));
  x->ztail_scratch = malloc((size_t)n);
  return x->ztail && x->ztail_len && x->ztail_scratch ? 0 : CHIME_ENOMEM;
}

/* The slot's tail packed (ztail.h) for its batch to send: 0, or a
 * batch not sent (no zstd context). */
static int ztail_pack(chime__stream_t *s, uint32_t slot, const uint8_t *base) {
  chime__stream_send_t *x = s->send;
  uint64_t tail = chime__slot_tail(&s->lay, &s->spec);
  size_t n = (size_t)(s->send_bytes - tail);
  return chime__ztail_pack(x->ztail + slot * x->ztail_bound, base + tail, n,
                           (size_t)s->lay.batch_size *
                               sizeof(chime_sample_info_t),
                           x->ztail_scratch, &x->ztail_len[slot]);
}

static int send_init(chime__stream_t *s, const Chime__V1__Open *open) {
  /* A batch that takes items out (fifo, max_times_sampled) is the
   * learner's until it says it released it: then a learner that dies
   * holding batches loses no item (give_back). */
  const chime_spec_t *spec = &s->spec;
  chime__stream_send_t *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return CHIME_ENOMEM;
  s->send = x;
  int ragged = chime_spec_ragged(spec) > 0;
  size_t max_spans =
      2 * CHIME__CHUNK_BYTES / SEND_COPY_BELOW + 2 * (size_t)spec->nleaves + 4;
  /* A chunk over several extents (one per leaf and the tail): a call of
   * chime__table_spans each, each with its own constant. */
  if (ragged)
    max_spans += (size_t)spec->nleaves * (2 * (size_t)spec->nleaves + 4);
  int held = chime__table_config(s->table)->max_times_sampled != 0;
  /* Its ring and bytes are set once the ring exists (send_expose). */
  int rc = chime__sender_init(
      &x->sender, NULL, 0, chime__credits_initial(open->prefetch, open->slots),
      chime__credits_max(open->slots), held, max_spans, s, &send_owner);
  if (ragged && rc == 0) {
    x->extents = calloc(open->slots, sizeof(*x->extents));
    if (x->extents == NULL)
      rc = CHIME_ENOMEM;
  }
  if (rc == 0 && framed_tail(s))
    rc = ztail_init(s, open);
  chime__sender_set_lanes(&x->sender, open->connections);
  atomic_init(&x->free_slots, (int)open->slots);
  /* A third of what the sender may lend, at least 1: with the default
   * slots (8, 7 lent) a wake fills 2 or more, and 5 stay published or
   * sent meanwhile. */
  x->kick_at = (open->slots - 1) / 3 > 1 ? (open->slots - 1) / 3 : 1;
  if (chime__stream_pins_init(s, open, held) != 0 || rc != 0)
    return CHIME_ENOMEM;
  return 0;
}

/* The ring exists: its batches may go. */
static int send_expose(chime__stream_t *s, char *err, size_t errlen) {
  (void)err, (void)errlen;
  s->send->sender.ring = s->ring;
  s->send->sender.send_bytes = s->send_bytes;
  return 0;
}

static void send_start(chime__stream_t *s, chime__call_t *call) {
  chime__sender_start(&s->send->sender, call);
}

/* No release needs to ring the ring's bell: the sender kicks the job when
 * slots come back (slot_freed). */
static int send_acquire(chime__stream_t *s, chime__ring_wslot_t *ws,
                        chime__fill_wait_t *w) {
  (void)w;
  int rc = chime__ring_try_acquire(s->ring, ws, NULL, NULL);
  if (rc == 0)
    atomic_fetch_sub(&s->send->free_slots, 1);
  return rc;
}

static int send_sample(chime__stream_t *s, chime__ring_wslot_t *ws) {
  chime__stream_send_t *x = s->send;
  /* The slot came back: its last batch is sent and released. */
  chime__table_unpin(s->table, &s->pins[ws->slot]);
  int rc = chime__table_try_sample_pinned(
      s->table, &s->lay, ws, &s->pins[ws->slot], SEND_COPY_BELOW, &s->twait);
  if (rc != 0 || x->extents == NULL)
    return rc;
  /* Read by the sender once the slot is published (the ring's release
   * store orders it). Our own offsets: refused only by a bug, and then
   * the batch is not sent (batch_bytes 0) rather than sent wrong. */
  char err[160];
  if (chime__slot_extents(&s->lay, &s->spec, (const uint8_t *)ws->base,
                          &x->extents[ws->slot], err, sizeof(err)) != 0) {
    chime__log(CHIME_LOG_ERROR, "table '%s': batch not sent: %s", s->table_name,
               err);
    x->extents[ws->slot].total = 0;
  } else if (x->ztail != NULL &&
             ztail_pack(s, ws->slot, (const uint8_t *)ws->base) != 0) {
    chime__log(CHIME_LOG_ERROR, "table '%s': batch not sent: out of memory",
               s->table_name);
    x->extents[ws->slot].total = 0;
  }
  return 0;
}

static void send_abandon(chime__stream_t *s, uint32_t slot) {
  chime__ring_abandon(s->ring, slot);
  atomic_fetch_add(&s->send->free_slots, 1);
}

static void send_published(chime__stream_t *s) {
  chime__sender_published(&s->send->sender);
}

/* On the thread that just learned the call can go on (a send completed,
 * credits came): fills the slots that are free here and now instead of
 * waking a worker for them, then sends what is ready. Slots free as gRPC
 * lets go of a batch's bytes, mostly on this thread, so in steady state
 * one thread samples, sends and completes each batch. */
static void refill(chime__stream_t *s) {
  if (atomic_load(&s->send->free_slots) > 0 &&
      chime__pool_run(s->srv->sampler, &s->job))
    chime__sender_send_ready(&s->send->sender);
}

static void send_credit(chime__stream_t *s, uint32_t n,
                        const uint64_t *released, size_t nreleased) {
  chime__sender_credit(&s->send->sender, n, released, nreleased);
  refill(s);
}

/* The call's sends completed (its on_sent): what is free is filled here,
 * then the next batches go. */
static void send_sent(chime__stream_t *s) {
  chime__sender_sent(&s->send->sender);
  refill(s);
}

static void send_counts(chime__stream_t *s, const chime_ring_stats_t *rs,
                        uint64_t *batches, uint64_t *bytes) {
  (void)rs;
  *batches = atomic_load(&s->send->sender.batches);
  *bytes = atomic_load(&s->send->sender.bytes);
}

/* What the learner held is back in the table: no batch stays held. */
static void send_retired(chime__stream_t *s) {
  chime__sender_unhold_all(&s->send->sender);
}

static int send_join(chime__stream_t *s, uint32_t lane, chime__call_t *call) {
  return chime__sender_join(&s->send->sender, lane, call);
}

/* Sends no more: the sender's reference to the call goes, and the lanes
 * end (lanes.c). */
static void send_close(chime__stream_t *s) {
  chime__call_t *call = chime__sender_stop(&s->send->sender);
  if (call != NULL)
    chime__call_unref(call);
  chime__lanes_end(&s->send->sender);
}

/* No slice points into the table any more: the last rows go. */
static void send_fini(chime__stream_t *s) {
  chime__stream_send_t *x = s->send;
  chime__stream_pins_fini(s);
  if (x == NULL)
    return;
  chime__sender_fini(&x->sender);
  free(x->extents);
  free(x->ztail);
  free(x->ztail_len);
  free(x->ztail_scratch);
  free(x);
  s->send = NULL;
}

void chime__stream_beat(chime__stream_t *s, uint64_t now_ns) {
  if (s->send != NULL)
    chime__sender_beat(&s->send->sender, now_ns,
                       (uint64_t)atomic_load(&s->heartbeat_ms) * 1000000u);
}

const chime__stream_mode_ops_t chime__stream_mode_send = {
    .mode = CHIME_MODE_STREAM,
    .wire = CHIME__V1__MODE__MODE_STREAM,
    .init = send_init,
    .expose = send_expose,
    .start = send_start,
    .acquire = send_acquire,
    .sample = send_sample,
    .abandon = send_abandon,
    .published = send_published,
    .credit = send_credit,
    .sent = send_sent,
    .counts = send_counts,
    .join = send_join,
    .retired = send_retired,
    .close = send_close,
    .fini = send_fini,
};
