/* Stream mode, the learner's end: the transport that fills a local ring from
 * the server's chunks and pays for them with credits. Each chunk's bytes go
 * straight from gRPC's slices into a slot of the local ring (one copy, no
 * protobuf-c unpack; a batch with ragged leaves where its offsets, sent first
 * and checked, say: ring/extents.h); each release the learner makes goes back
 * as a credit naming the batch. The other end: server/mode_stream.c. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/stream.h"
#include "replay/ztail.h"
#include "wire/chunk.h"
#include "wire/credit.h"
#include "ring/layout.h"

void chime__remote_set_spec(chime__remote_t *r, const chime_spec_t *spec) {
  r->spec = spec;
  if (r->wire == NULL)
    r->wlay = *chime_ring_layout(r->ring);
  r->tail = chime__slot_tail(&r->wlay, spec);
  r->ztail = 0; /* chime__remote_wire_alloc sets it */
}

/* Where a batch's bytes land: the local slot, or the server's slot's
 * image when leaves travel as frames (frames.c unpacks it). */
static uint8_t *landing(const chime__remote_t *r) {
  return r->wire != NULL ? r->wire : r->w.base;
}

/* A message's payload, read in order across its slices. */
typedef struct {
  const grpc_slice_buffer *sb;
  size_t i;    /* slice */
  size_t skip; /* bytes of it already read */
} payload_t;

static void payload_read(payload_t *pl, uint8_t *dst, uint64_t n) {
  while (n > 0) {
    const grpc_slice *sl = &pl->sb->slices[pl->i];
    size_t have = GRPC_SLICE_LENGTH(*sl) - pl->skip;
    size_t k = have < n ? have : (size_t)n;
    memcpy(dst, GRPC_SLICE_START_PTR(*sl) + pl->skip, k);
    dst += k;
    n -= k;
    pl->skip += k;
    if (pl->skip == GRPC_SLICE_LENGTH(*sl)) {
      pl->i++;
      pl->skip = 0;
    }
  }
}

int chime__remote_wire_alloc(chime__remote_t *r, const chime_spec_t *wspec) {
  uint64_t n = r->send_bytes - chime__slot_tail(&r->wlay, wspec);
  size_t bytes = (size_t)((r->wlay.slot_bytes + 2 * n + 63) / 64 * 64);
  r->wire = aligned_alloc(64, bytes);
  if (r->wire == NULL)
    return CHIME_ENOMEM;
  memset(r->wire, 0, bytes);
  r->zbuf = r->wire + r->wlay.slot_bytes;
  chime__remote_set_spec(r, wspec);
  r->ztail = n;
  return 0;
}

/* Takes from pl the head (*at < CHIME__ZTAIL_HEAD) and stored bytes of a
 * packed tail; once all are in, unpacks them into the tail's place.
 * *at and *left advance past what was taken. */
static int take_packed(chime__remote_t *r, uint64_t *at, uint64_t *left,
                       payload_t *pl, char *err, size_t errlen) {
  if (*at < CHIME__ZTAIL_HEAD) {
    uint64_t n =
        *left < CHIME__ZTAIL_HEAD - *at ? *left : CHIME__ZTAIL_HEAD - *at;
    payload_read(pl, r->zhead + *at, n);
    *at += n;
    *left -= n;
    if (*at < CHIME__ZTAIL_HEAD)
      return 0;
    size_t stored = 0;
    if (chime__ztail_stored(r->zhead, (size_t)r->ztail, &stored) != 0 ||
        CHIME__ZTAIL_HEAD + stored > r->total)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: batch %" PRIu64 ": its packed tail says "
                         "%zu stored bytes, not 1..%" PRIu64 " of %" PRIu64,
                         r->seq, stored, r->ztail, r->total);
    r->head = CHIME__ZTAIL_HEAD + stored;
  }
  uint64_t n = *left < r->head - *at ? *left : r->head - *at;
  payload_read(pl, r->zbuf + (*at - CHIME__ZTAIL_HEAD), n);
  *at += n;
  *left -= n;
  if (*at < r->head)
    return 0;
  size_t ninfo = (size_t)r->wlay.batch_size * sizeof(chime_sample_info_t);
  int rc = chime__ztail_unpack(landing(r) + r->tail, (size_t)r->ztail, ninfo,
                               r->zbuf, (size_t)(r->head - CHIME__ZTAIL_HEAD),
                               r->zbuf + r->ztail);
  if (rc != 0)
    return chime__fail(
        err, errlen, CHIME_EPROTO, "stream: batch %" PRIu64 ": %s", r->seq,
        rc == CHIME_ENOMEM ? "out of memory to unpack its tail"
                           : "its packed tail is no frame of the tail");
  return 0;
}

/* A ragged batch's bytes [c->offset, + data_len): the tail goes where the
 * slot keeps it (a framed batch's packed: take_packed); once all of it is
 * in, its offsets (checked) say where each leaf's bytes go (extents.h),
 * and the total they add up to must be the one the chunks said. */
static int place_ragged(chime__remote_t *r, const chime__chunk_t *c,
                        payload_t *pl, char *err, size_t errlen) {
  uint8_t *base = landing(r);
  uint64_t tail_len = r->send_bytes - r->tail;
  uint64_t at = c->offset, left = c->data_len;
  if (r->ztail == 0) {
    r->head = tail_len;
    if (at < tail_len) {
      uint64_t n = left < tail_len - at ? left : tail_len - at;
      payload_read(pl, base + r->tail + at, n);
      at += n;
      left -= n;
    }
  } else if (r->head == 0 || at < r->head) {
    int rc = take_packed(r, &at, &left, pl, err, errlen);
    if (rc != 0)
      return rc;
  }
  if (r->head == 0 || at < r->head)
    return 0;
  if (!r->have_extents) {
    char why[160];
    if (chime__slot_extents(&r->wlay, r->spec, base, &r->ext, why,
                            sizeof(why)) != 0)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: batch %" PRIu64 ": %s", r->seq, why);
    if (r->ext.total - tail_len + r->head != r->total)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: batch %" PRIu64 " says %" PRIu64
                         " bytes, its offsets say %" PRIu64,
                         r->seq, r->total, r->ext.total - tail_len + r->head);
    r->have_extents = 1;
  }
  /* The rest as if the tail had come raw: at + left <= total, so every
   * byte lands in an extent past the tail. */
  at = at - r->head + tail_len;
  uint64_t from = 0;
  for (uint32_t i = 0; i < r->ext.n && left > 0; i++) {
    uint64_t len = r->ext.e[i].len;
    if (at < from + len) {
      uint64_t n = left < from + len - at ? left : from + len - at;
      payload_read(pl, base + r->ext.e[i].off + (at - from), n);
      at += n;
      left -= n;
    }
    from += len;
  }
  return 0;
}

int chime__remote_chunk(chime__remote_t *r, grpc_byte_buffer *bb, char *err,
                        size_t errlen) {
  if (bb->type != GRPC_BB_RAW || bb->data.raw.compression != GRPC_COMPRESS_NONE)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: compressed message not expected");
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  size_t msg_len = sb->length;

  /* The header may straddle slices: gather it first. */
  uint8_t hdr[CHIME_CHUNK_HEADER_MAX];
  size_t have = 0;
  for (size_t i = 0; i < sb->count && have < sizeof(hdr); i++) {
    size_t n = GRPC_SLICE_LENGTH(sb->slices[i]);
    if (n > sizeof(hdr) - have)
      n = sizeof(hdr) - have;
    memcpy(hdr + have, GRPC_SLICE_START_PTR(sb->slices[i]), n);
    have += n;
  }
  chime__chunk_t c;
  int rc = chime__chunk_parse(hdr, have, msg_len, &c);
  if (rc == CHIME_ENOTFOUND)
    return rc;
  if (rc)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: malformed chunk (%zu bytes)", msg_len);
  /* A fixed spec's batch is the slot's prefix; a ragged one's its tail at
   * least, the prefix at most, the same in every chunk. */
  /* A packed tail (ztail) takes its head and a byte at least, and its
   * head more at most. */
  uint64_t least = r->ztail ? CHIME__ZTAIL_HEAD + 1 : r->send_bytes - r->tail;
  uint64_t most = r->send_bytes + (r->ztail ? CHIME__ZTAIL_HEAD : 0);
  if (r->tail == 0 ? c.total != r->send_bytes
                   : c.total < least || c.total > most ||
                         (r->active && c.total != r->total))
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: chunk of batch %" PRIu64 " says %" PRIu64
                       " bytes per batch, the layout says %s%" PRIu64,
                       c.seq, c.total, r->tail == 0 ? "" : "at most ", most);
  if (!r->active) {
    if (c.offset != 0)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: batch %" PRIu64 " starts at offset %" PRIu64
                         ", not 0",
                         c.seq, c.offset);
    /* Over lanes the credits are the stream's (lanes.c). */
    chime__remote_t *m = r->lanes ? chime__lanes_remote(r->lanes) : r;
    uint64_t started = atomic_fetch_add(&m->started, 1);
    if (started >= atomic_load(&m->granted)) {
      atomic_fetch_sub(&m->started, 1); /* not started: the stream ends */
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "stream: server sent batch %" PRIu64
                         " beyond the %" PRIu64 " credits given",
                         c.seq, started);
    }
    /* Credits keep a slot free; waiting only happens on a ring that reuses
     * slots in order, and chime_stream_close() shuts the ring to end it. */
    rc = r->lanes ? chime__lanes_acquire(r->lanes, &r->w)
                  : chime__ring_acquire(r->ring, &r->w, -1);
    if (rc)
      return chime__fail(err, errlen, rc, "stream: local ring: %s",
                         chime_strerror(rc));
    r->active = 1;
    r->seq = c.seq;
    r->received = 0;
    r->total = c.total;
    r->have_extents = 0;
    r->head = 0;
  } else if (c.seq != r->seq || c.offset != r->received) {
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "stream: expected batch %" PRIu64 " at offset %" PRIu64
                       ", got batch %" PRIu64 " at offset %" PRIu64,
                       r->seq, r->received, c.seq, c.offset);
  }

  payload_t pl = {sb, 0, 0};
  for (size_t skip = c.header_len; skip > 0;) { /* past the header */
    size_t n = GRPC_SLICE_LENGTH(sb->slices[pl.i]);
    if (skip < n) {
      pl.skip = skip;
      break;
    }
    skip -= n;
    pl.i++;
  }
  if (r->tail == 0) {
    payload_read(&pl, landing(r) + c.offset, c.data_len);
  } else {
    rc = place_ragged(r, &c, &pl, err, errlen);
    if (rc)
      return rc;
  }
  r->received += c.data_len;
  atomic_fetch_add_explicit(r->lanes ? &chime__lanes_remote(r->lanes)->bytes
                                     : &r->bytes,
                            c.data_len, memory_order_relaxed);
  if (r->received == r->total) {
    uint64_t seq;
    if (r->wire != NULL &&
        (rc = chime__frames_unpack(r, r->w.base, err, errlen)) != 0)
      return rc; /* the slot is abandoned with the stream */
    r->active = 0;
    if (r->lanes != NULL)
      return chime__lanes_publish(r->lanes, r->w.slot, r->seq, err, errlen);
    r->slot_seq[r->w.slot] = r->seq;
    rc = chime__ring_publish(r->ring, r->w.slot, &seq);
    if (rc)
      return chime__fail(err, errlen, rc, "stream: local ring publish: %s",
                         chime_strerror(rc));
    r->batches++;
  }
  return 0;
}

void chime__remote_abandon(chime__remote_t *r) {
  if (r->active && r->lanes != NULL)
    chime__lanes_abandon(r->lanes, r->w.slot);
  else if (r->active)
    chime__ring_abandon(r->ring, r->w.slot);
  r->active = 0;
}

/* --- the transport --- */

/* Batches the server may still send: credits given, not yet used. */
static uint64_t owed(const chime__remote_t *r) {
  return atomic_load(&r->granted) - atomic_load(&r->started);
}

/* Caller holds s->lock. Releases are gathered into one Credit of
 * credit_batch: each message costs a write here and a read, a completion and
 * a wakeup in the server. Fewer are sent at once only when the server owes
 * nothing, so a learner holding batches while it waits for the next one is
 * never left without. */
static void send_credit_locked(chime_stream_t *s) {
  chime__remote_t *r = &s->remote;
  /* Closing, a resumable stream says so in a last Credit (with or without
   * releases): without it the server takes its end for a lost call. */
  int resumable = s->opts.reconnect_timeout_ms > 0;
  int bye = r->closing && resumable && !r->bye_sent;
  if (chime__rpc_pending(&s->rpc, CHIME__RPC_SEND) || s->ended ||
      s->half_closed || (r->credit_pending == 0 && !bye))
    return;
  if (r->credit_pending < r->credit_batch && owed(r) > 0 && !r->closing)
    return;
  Chime__V1__Credit credit = CHIME__V1__CREDIT__INIT;
  credit.batches = r->credit_pending;
  credit.n_released =
      r->credit_pending < s->layout.slots ? r->credit_pending : s->layout.slots;
  credit.released = r->released;
  credit.closing = r->closing && resumable;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT;
  req.credit = &credit;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (!bb)
    return; /* retried on the next release */
  /* Counted before the server can act on it (the receive thread checks). */
  int was_owed = owed(r) > 0;
  atomic_fetch_add(&r->granted, r->credit_pending);
  if (chime__rpc_send(&s->rpc, bb)) {
    atomic_fetch_sub(&r->granted, r->credit_pending);
    return;
  }
  r->credit_pending = 0;
  r->bye_sent |= credit.closing;
  chime__stall_expect(s, was_owed);
}

static void send_credit(chime_stream_t *s) {
  pthread_mutex_lock(&s->lock);
  send_credit_locked(s);
  pthread_mutex_unlock(&s->lock);
}

static void remote_fill_open(const chime_stream_t *s, Chime__V1__Open *open) {
  const chime__remote_t *r = &s->remote;
  open->mode = CHIME__V1__MODE__MODE_STREAM;
  open->prefetch = s->prefetch;
  /* frames.c decompresses; over lanes the server does (a lane's batch
   * lands in its slot, with no wire image of its own). */
  open->frames = s->opts.connections <= 1;
  open->connections = s->opts.connections;
  open->resumable = s->opts.reconnect_timeout_ms > 0;
  /* Silence then means a stalled connection (stall.c), resumed. */
  open->heartbeat_ms = open->resumable ? CHIME__HEARTBEAT_MS : 0;
  if (atomic_load(&s->resuming) && r->token_len > 0) {
    open->prefetch = r->resume_prefetch;
    open->resume_stream = s->stream_id;
    open->resume_token.data = (uint8_t *)r->token;
    open->resume_token.len = r->token_len;
    open->resume_received = r->resume_seqs;
    open->n_resume_received = r->nresume;
  }
}

/* The Opened's resume token, kept for a resuming Open. */
static void keep_token(chime__remote_t *r, const Chime__V1__Opened *op) {
  r->token_len =
      op->resume_token.len == sizeof(r->token) ? sizeof(r->token) : 0;
  if (r->token_len > 0)
    memcpy(r->token, op->resume_token.data, r->token_len);
}

static int remote_setup(chime_stream_t *s, const Chime__V1__Opened *op,
                        int *attach_failed, char *err, size_t errlen) {
  chime__remote_t *r = &s->remote;
  uint32_t slots = s->opts.slots;
  *attach_failed = 0;
  int rc = chime__ring_create(&s->ring, &s->spec, s->opts.batch_size, slots);
  if (rc)
    return chime__fail(err, errlen, rc, "local ring: %s: %s",
                       chime_strerror(rc), chime_last_error());
  r->ring = s->ring;
  r->send_bytes = s->send_bytes;
  if (s->nframed > 0) { /* batches land as the server's slot holds them */
    char why[256];
    rc = chime__ring_layout(&r->wlay, &s->wire_spec, s->opts.batch_size, slots,
                            why, sizeof(why));
    if (rc)
      return chime__fail(err, errlen, rc, "Opened: layout: %s", why);
    if (chime__remote_wire_alloc(r, &s->wire_spec) != 0)
      return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    r->unframe = s->unframe;
    r->steps = s->framed_steps;
  } else {
    chime__remote_set_spec(r, &s->spec);
  }
  r->slot_seq = malloc(slots * sizeof(uint64_t));
  r->released = calloc(slots, sizeof(uint64_t));
  r->recent = calloc(2 * (size_t)slots, sizeof(uint64_t));
  r->resume_seqs = calloc(3 * (size_t)slots, sizeof(uint64_t));
  if (!r->slot_seq || !r->released || !r->recent || !r->resume_seqs)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < slots; i++)
    r->slot_seq[i] = CHIME__SEQ_FREE;
  keep_token(r, op);
  uint32_t lent = chime__credits_initial(s->prefetch, slots);
  atomic_store(&r->granted, lent);
  r->credit_batch = lent / 2 > 1 ? lent / 2 : 1;
  if (s->opts.connections > 1 &&
      ((rc = chime__lanes_create(s, s->opts.connections, chime__remote_chunk,
                                 err, errlen)) != 0 ||
       (rc = chime__lanes_start(s, op->stream_id)) != 0))
    return rc == CHIME_ENOMEM || rc == CHIME_ESYS
               ? rc
               : chime__fail(err, errlen, rc, "stream: its connections: %s",
                             chime_strerror(rc));
  return 0;
}

static int remote_on_message(chime_stream_t *s, grpc_byte_buffer *bb, char *err,
                             size_t errlen) {
  chime__stall_heard(s);
  int rc = chime__remote_chunk(&s->remote, bb, err, errlen);
  return rc == CHIME_ESHUTDOWN ? 0 : rc; /* shut down: closing */
}

/* The local ring is this side's: nobody else tells its learner. */
static void remote_on_shutdown(chime_stream_t *s) {
  if (s->ring)
    chime__ring_shutdown(s->ring);
}

static int remote_release(chime_stream_t *s, uint32_t slot) {
  chime__remote_t *r = &s->remote;
  uint32_t slots = s->layout.slots;
  if (slot >= slots)
    return chime_ring_release(s->ring, slot); /* its error */
  pthread_mutex_lock(&s->lock);
  /* The slot's server seq, read while the slot is still held (the receive
   * thread refills it only once released). */
  uint64_t seq = r->slot_seq[slot];
  r->slot_seq[slot] = CHIME__SEQ_FREE;
  int rc = chime_ring_release(s->ring, slot);
  if (rc) {
    r->slot_seq[slot] = seq;
    pthread_mutex_unlock(&s->lock);
    return rc;
  }
  if (seq != CHIME__SEQ_OLD) { /* a resuming Open names it */
    r->recent[r->recent_at] = seq;
    r->recent_at = (r->recent_at + 1) % (2 * slots);
    if (r->nrecent < 2 * slots)
      r->nrecent++;
  }
  if (r->debt > 0) {
    r->debt--;
  } else {
    /* At most slots held, so at most slots releases wait to be sent. */
    if (r->credit_pending < slots)
      r->released[r->credit_pending] = seq;
    r->credit_pending++;
  }
  send_credit_locked(s);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

/* The call was lost (resume.c; the caller drives the call, so no chunk
 * arrives): the half-filled batch goes, the batches the old call's server
 * may still hold that the learner received are named for the resuming
 * Open (the ones in the local ring, now OLD: their seqs mean nothing to
 * the new call, and the last releases, whose Credits may be lost), and
 * the new call lends what the ring has free. */
static void remote_resume_prepare(chime_stream_t *s) {
  chime__remote_t *r = &s->remote;
  uint32_t slots = s->layout.slots, held = 0, n = 0;
  chime__lanes_stop(s); /* what the lanes had not handed on goes back */
  chime__remote_abandon(r);
  pthread_mutex_lock(&s->lock);
  for (uint32_t i = 0; i < slots; i++) {
    uint64_t seq = r->slot_seq[i];
    if (seq == CHIME__SEQ_FREE)
      continue;
    held++;
    if (seq != CHIME__SEQ_OLD) {
      r->resume_seqs[n++] = seq;
      r->slot_seq[i] = CHIME__SEQ_OLD;
    }
  }
  for (uint32_t k = 0; k < r->nrecent; k++)
    r->resume_seqs[n++] = r->recent[k];
  r->nresume = n;
  r->resume_prefetch = held + 1 < slots ? slots - 1 - held : 1;
  pthread_mutex_unlock(&s->lock);
}

/* The new call answered: its credits start from what the Open lent
 * (resume_prefetch), squared with what the learner released since: the
 * rest of the free slots go as credits naming no batch of the new call,
 * or, had the Open lent more than is free, the next releases earn none. */
static void remote_resumed(chime_stream_t *s, const Chime__V1__Opened *op) {
  chime__remote_t *r = &s->remote;
  uint32_t slots = s->layout.slots, held = 0;
  pthread_mutex_lock(&s->lock);
  for (uint32_t i = 0; i < slots; i++)
    held += r->slot_seq[i] != CHIME__SEQ_FREE;
  uint32_t avail = held < slots ? slots - 1 - held : 0;
  uint32_t lent = r->resume_prefetch;
  r->credit_pending = avail > lent ? avail - lent : 0;
  for (uint32_t i = 0; i < r->credit_pending && i < slots; i++)
    r->released[i] = CHIME__SEQ_OLD;
  r->debt = lent > avail ? lent - avail : 0;
  atomic_store(&r->granted, lent);
  atomic_store(&r->started, 0);
  r->nrecent = r->recent_at = 0;
  r->nresume = 0;
  keep_token(r, op);
  s->resumes_late += !op->resumed;
  pthread_mutex_unlock(&s->lock);
  /* A lane that cannot join leaves its batches to the others. */
  (void)chime__lanes_start(s, op->stream_id);
}

static void remote_stats(const chime_stream_t *s,
                         chime_stream_local_stats_t *out) {
  out->received_bytes =
      atomic_load_explicit(&s->remote.bytes, memory_order_relaxed);
  out->credits = atomic_load(&s->remote.granted);
  out->rtt_ns = s->rtt_ns;
  out->resumes = s->resumes;
  out->resumes_late = s->resumes_late;
  out->stalls = atomic_load(&s->stalls);
  out->window_bytes =
      (uint64_t)chime__credits_initial(s->prefetch, s->layout.slots) *
      s->send_bytes;
}

/* A fifo batch stays the learner's until a Credit names it, and the server
 * gives back what was never named: at close the last releases go out at
 * once, before the client half-closes (stream.c). */
static int remote_flush_locked(chime_stream_t *s) {
  s->remote.closing = 1;
  send_credit_locked(s);
  return s->remote.credit_pending == 0 &&
         (s->remote.bye_sent || s->opts.reconnect_timeout_ms <= 0);
}

/* The call has ended (or close gave up waiting): the local ring is shut,
 * which unblocks the stream's thread if it waits for a slot. */
static void remote_close(chime_stream_t *s) {
  if (s->ring)
    chime__ring_shutdown(s->ring);
  chime__lanes_stop(s);
}

static void remote_fini(chime_stream_t *s) {
  chime__remote_t *r = &s->remote;
  chime__lanes_free(s);
  if (r->ring)
    chime__remote_abandon(r);
  r->ring = NULL;
  free(r->slot_seq);
  r->slot_seq = NULL;
  free(r->released);
  r->released = NULL;
  free(r->recent);
  r->recent = NULL;
  free(r->resume_seqs);
  r->resume_seqs = NULL;
  free(r->wire);
  r->wire = NULL;
  r->zbuf = NULL;
  r->ztail = 0;
  r->credit_pending = 0;
  r->closing = 0;
  r->bye_sent = 0;
  r->nrecent = r->recent_at = r->nresume = r->debt = 0;
}

const chime__transport_t chime__remote_transport = {
    .mode = CHIME_MODE_STREAM,
    .learner_drives = 1,
    .fill_open = remote_fill_open,
    .setup = remote_setup,
    .on_message = remote_on_message,
    .on_sent = send_credit,
    .on_shutdown = remote_on_shutdown,
    .before_wait = send_credit,
    .release = remote_release,
    .stats = remote_stats,
    .flush_locked = remote_flush_locked,
    .close = remote_close,
    .fini = remote_fini,
    .resume_prepare = remote_resume_prepare,
    .resumed = remote_resumed,
};
