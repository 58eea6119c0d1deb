/* Stream mode's chunks and credits (sender.h). s->mu (here x->mu) guards
 * the ring's consumer side; send_mu keeps batches, and their chunks, in
 * sequence on the call. */
#include "server/sender.h"

#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "chime/errors.h"
#include "wire/chunk.h"

/* One batch sent: its chunks' slices point into its bytes (the slot, the
 * table's rows), and the slot is released when gRPC drops the last of them
 * and, for a held batch, the learner released it too (one reference each). */
struct chime__sent_s {
  chime__sender_t *x;
  uint32_t slot;
  uint64_t seq;
  uint32_t lane;      /* where its chunks went */
  uint64_t total;     /* its bytes, counted in x->queued[lane] */
  atomic_uint slices; /* held by gRPC (and by us while chunking) */
  atomic_uint refs;
  chime__sent_t *next; /* the held list */
};

int chime__sender_init(chime__sender_t *x, chime_ring_t *ring,
                       uint64_t send_bytes, uint32_t credits,
                       uint32_t max_credits, int hold, size_t max_spans,
                       chime__stream_t *owner,
                       const chime__sender_owner_t *ops) {
  x->ring = ring;
  x->send_bytes = send_bytes;
  x->credits = credits;
  x->max_credits = max_credits;
  x->hold = hold;
  x->owner = owner;
  x->ops = ops;
  x->unheld = 0;
  x->held_head = x->held_tail = NULL;
  x->call = NULL;
  x->beat_batches = x->beat_ns = 0;
  x->nlanes = 1;
  for (uint32_t i = 0; i < CHIME__LANES_MAX; i++) {
    x->lane[i] = NULL;
    atomic_init(&x->queued[i], 0);
  }
  atomic_init(&x->stopped, 0);
  atomic_init(&x->awaiting, 0);
  atomic_init(&x->batches, 0);
  atomic_init(&x->bytes, 0);
  pthread_mutex_init(&x->mu, NULL);
  pthread_mutex_init(&x->send_mu, NULL);
  x->max_spans = max_spans;
  x->span_buf = malloc(max_spans * sizeof(chime__span_t));
  x->slice_buf = malloc((max_spans + 1) * sizeof(grpc_slice));
  return x->span_buf != NULL && x->slice_buf != NULL ? 0 : CHIME_ENOMEM;
}

void chime__sender_fini(chime__sender_t *x) {
  pthread_mutex_destroy(&x->mu);
  pthread_mutex_destroy(&x->send_mu);
  free(x->span_buf);
  free(x->slice_buf);
}

static void sent_put(chime__sent_t *b, unsigned n) {
  if (atomic_fetch_sub(&b->refs, n) != n)
    return;
  chime__sender_t *x = b->x;
  pthread_mutex_lock(&x->mu);
  /* Cannot fail: the slot is this sender's. Wakes the sampler if it waits. */
  int rc = chime_ring_release(x->ring, b->slot);
  (void)rc;
  pthread_mutex_unlock(&x->mu);
  free(b);
  x->ops->slot_freed(x->owner);
  x->ops->unref(x->owner);
}

/* gRPC let go of a slice: once of all of a batch's, its bytes are no
 * longer queued on its lane. */
static void slices_put(chime__sent_t *b) {
  if (atomic_fetch_sub(&b->slices, 1) == 1)
    atomic_fetch_sub(&b->x->queued[b->lane], b->total);
}

static void slice_done(void *ud) {
  slices_put(ud);
  sent_put(ud, 1);
}

/* One chunk of b: its header and a slice per span of its bytes, each
 * holding a reference to b. NULL when the spans do not fit. */
static grpc_byte_buffer *chunk(chime__sender_t *x, chime__sent_t *b,
                               uint64_t total, uint64_t off, uint64_t len) {
  size_t n =
      x->ops->spans(x->owner, b->slot, off, len, x->span_buf, x->max_spans);
  if (n == 0)
    return NULL;
  grpc_slice *sl = x->slice_buf;
  uint8_t hdr[CHIME_CHUNK_HEADER_MAX];
  size_t hl = chime__chunk_header_encode(hdr, b->seq, off, total, len);
  sl[0] = grpc_slice_from_copied_buffer((const char *)hdr, hl);
  atomic_fetch_add(&b->refs, (unsigned)n);
  atomic_fetch_add(&b->slices, (unsigned)n);
  for (size_t i = 0; i < n; i++)
    sl[i + 1] = grpc_slice_new_with_user_data(
        (void *)x->span_buf[i].p, x->span_buf[i].len, slice_done, b);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, n + 1);
  for (size_t i = 0; i <= n; i++)
    grpc_slice_unref(sl[i]);
  return bb;
}

/* Caller holds send_mu. */
static void send_batch(chime__sender_t *x, const chime_ring_view_t *v) {
  uint64_t total = x->ops->batch_bytes != NULL
                       ? x->ops->batch_bytes(x->owner, v->slot)
                       : x->send_bytes;
  unsigned nchunks =
      (unsigned)((total + CHIME__CHUNK_BYTES - 1) / CHIME__CHUNK_BYTES);
  /* A small tail (say, the sample info after whole chunks) rides with the
   * last chunk rather than costing a message of its own. */
  if (nchunks > 1 && total - (uint64_t)(nchunks - 1) * CHIME__CHUNK_BYTES <=
                         CHIME__CHUNK_TAIL_BYTES)
    nchunks--;
  chime__sent_t *b = total != 0 ? malloc(sizeof(*b)) : NULL;
  if (b == NULL) {
    pthread_mutex_lock(&x->mu);
    int rc = chime_ring_release(x->ring, v->slot); /* cannot fail: held */
    (void)rc;
    pthread_mutex_unlock(&x->mu);
    /* Over lanes the learner hands batches on in seq order: one never
     * sent would stall it, so the stream resumes instead (what it held
     * goes back). Only a bug or no memory gets here. */
    if (x->nlanes > 1 && x->call != NULL && x->ops->call_lost != NULL)
      x->ops->call_lost(x->call, "a batch could not be sent");
    return;
  }
  b->x = x;
  b->slot = v->slot;
  b->seq = v->seq;
  b->next = NULL;
  b->total = total;
  chime__call_t *call = chime__sender_pick_lane(x, total, &b->lane);
  atomic_init(&b->slices, 1); /* ours until every chunk is made */
  atomic_init(&b->refs, 1);   /* ours until every chunk is made */
  x->ops->ref(x->owner);
  pthread_mutex_lock(&x->mu);
  if (x->hold && !x->unheld) {
    atomic_fetch_add(&b->refs, 1);
    if (x->held_tail != NULL)
      x->held_tail->next = b;
    else
      x->held_head = b;
    x->held_tail = b;
  }
  pthread_mutex_unlock(&x->mu);
  int ok = 1;
  atomic_store(&x->awaiting, 1);
  for (unsigned i = 0; ok && i < nchunks; i++) {
    uint64_t off = (uint64_t)i * CHIME__CHUNK_BYTES;
    uint64_t len = i + 1 == nchunks ? total - off : CHIME__CHUNK_BYTES;
    grpc_byte_buffer *bb = chunk(x, b, total, off, len);
    /* No chunk (cannot happen: max_spans bounds it), or the call is
     * finishing: the learner gets no more of this stream. */
    ok = bb != NULL && x->ops->call_send(call, bb) == 0;
  }
  if (ok) {
    atomic_fetch_add(&x->batches, 1);
    atomic_fetch_add(&x->bytes, total);
  }
  slices_put(b);
  sent_put(b, 1);
}

void chime__sender_send_ready(chime__sender_t *x) {
  pthread_mutex_lock(&x->send_mu);
  while (x->call != NULL && !atomic_load(&x->stopped)) {
    chime_ring_view_t v;
    pthread_mutex_lock(&x->mu);
    int rc = x->credits > 0 ? chime_ring_next(x->ring, &v, 0) : CHIME_EBUSY;
    if (rc == 0)
      x->credits--;
    pthread_mutex_unlock(&x->mu);
    if (rc != 0)
      break;
    send_batch(x, &v);
  }
  pthread_mutex_unlock(&x->send_mu);
}

void chime__sender_sent(chime__sender_t *x) {
  atomic_store(&x->awaiting, 0);
  chime__sender_send_ready(x);
}

int chime__sender_awaiting(chime__sender_t *x) {
  return atomic_load(&x->awaiting);
}

void chime__sender_published(chime__sender_t *x) {
  pthread_mutex_lock(&x->send_mu);
  int busy = x->call != NULL && chime__sender_lanes_busy(x);
  pthread_mutex_unlock(&x->send_mu);
  if (!busy)
    chime__sender_send_ready(x);
}

void chime__sender_start(chime__sender_t *x, chime__call_t *call) {
  pthread_mutex_lock(&x->send_mu);
  if (!atomic_load(&x->stopped)) {
    x->call = call;
    x->ops->call_ref(call);
  }
  pthread_mutex_unlock(&x->send_mu);
}

chime__call_t *chime__sender_stop(chime__sender_t *x) {
  atomic_store(&x->stopped, 1);
  pthread_mutex_lock(&x->send_mu);
  chime__call_t *call = x->call;
  x->call = NULL;
  pthread_mutex_unlock(&x->send_mu);
  return call;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Unlinks the held batches that the sorted seqs name (each once; unknown
 * ones ignored) onto *done, in one pass: the held list is oldest first, its
 * seqs rising. Caller holds x->mu. */
static void unhold_sorted(chime__sender_t *x, const uint64_t *seqs, size_t n,
                          chime__sent_t **done) {
  chime__sent_t **pp = &x->held_head, *prev = NULL;
  size_t j = 0;
  while (*pp != NULL && j < n) {
    chime__sent_t *b = *pp;
    if (seqs[j] < b->seq) {
      j++;
    } else if (seqs[j] > b->seq) {
      prev = b;
      pp = &b->next;
    } else {
      *pp = b->next;
      if (x->held_tail == b)
        x->held_tail = prev;
      b->next = *done;
      *done = b;
      j++;
    }
  }
}

static void put_list(chime__sent_t *b) {
  while (b != NULL) {
    chime__sent_t *n = b->next;
    sent_put(b, 1);
    b = n;
  }
}

void chime__sender_credit(chime__sender_t *x, uint32_t n,
                          const uint64_t *released, size_t nreleased) {
  chime__sent_t *done = NULL;
  /* A learner holds at most the ring's slots (max_credits + 1): a Credit
   * naming more names some twice or not at all, and the rest are ignored,
   * so a hostile list costs one sort of at most a ring's slots. */
  size_t named = nreleased;
  if (named > (size_t)x->max_credits + 1)
    named = (size_t)x->max_credits + 1;
  /* A Credit names about half a ring's batches: on the stack, usually. */
  uint64_t few[64];
  uint64_t *seqs = named == 0 ? NULL
                   : named <= sizeof(few) / sizeof(few[0])
                       ? few
                       : malloc(named * sizeof(*seqs));
  if (seqs != NULL) {
    memcpy(seqs, released, named * sizeof(*seqs));
    qsort(seqs, named, sizeof(*seqs), cmp_u64);
  }
  pthread_mutex_lock(&x->mu);
  /* A client can't be owed more than the ring holds; cap, don't trust. */
  uint64_t c = (uint64_t)x->credits + n;
  x->credits = c > x->max_credits ? x->max_credits : (uint32_t)c;
  /* A lying learner can only give back its own batches early. */
  if (seqs != NULL) {
    unhold_sorted(x, seqs, named, &done);
  } else if (named == 0) {
    /* None named: credits cover the oldest held batches. */
    for (uint32_t i = 0; i < n && x->held_head != NULL; i++) {
      chime__sent_t *b = x->held_head;
      x->held_head = b->next;
      if (x->held_tail == b)
        x->held_tail = NULL;
      b->next = done;
      done = b;
    }
  } /* else out of memory: they stay held until the stream ends */
  pthread_mutex_unlock(&x->mu);
  if (seqs != few)
    free(seqs);
  put_list(done);
  chime__sender_send_ready(x);
}

void chime__sender_unhold_all(chime__sender_t *x) {
  pthread_mutex_lock(&x->mu);
  chime__sent_t *b = x->held_head;
  x->held_head = x->held_tail = NULL;
  x->unheld = 1;
  pthread_mutex_unlock(&x->mu);
  put_list(b);
}

/* --- lanes (docs/protocol.md, "Lanes") --- */

void chime__sender_set_lanes(chime__sender_t *x, uint32_t nlanes) {
  pthread_mutex_lock(&x->send_mu);
  x->nlanes = nlanes == 0                 ? 1
              : nlanes > CHIME__LANES_MAX ? CHIME__LANES_MAX
                                          : nlanes;
  pthread_mutex_unlock(&x->send_mu);
}

int chime__sender_join(chime__sender_t *x, uint32_t lane, chime__call_t *call) {
  int rc = 0;
  pthread_mutex_lock(&x->send_mu);
  if (lane == 0 || lane >= x->nlanes)
    rc = CHIME_EINVAL;
  else if (atomic_load(&x->stopped)) /* not yet started is fine */
    rc = CHIME_ECLOSED;
  else if (x->lane[lane] != NULL)
    rc = CHIME_EEXIST;
  if (rc == 0) {
    x->lane[lane] = call;
    x->ops->call_ref(call);
  }
  pthread_mutex_unlock(&x->send_mu);
  return rc;
}

uint32_t chime__sender_take_lanes(chime__sender_t *x, chime__call_t **out) {
  uint32_t n = 0;
  pthread_mutex_lock(&x->send_mu);
  for (uint32_t i = 1; i < CHIME__LANES_MAX; i++)
    if (x->lane[i] != NULL) {
      out[n++] = x->lane[i];
      x->lane[i] = NULL;
    }
  pthread_mutex_unlock(&x->send_mu);
  return n;
}

/* Fewest bytes queued, not turn by turn: a lane in loss recovery drains
 * slowly and so gets fewer batches, instead of stalling every nth. */
chime__call_t *chime__sender_pick_lane(chime__sender_t *x, uint64_t total,
                                       uint32_t *lane) {
  uint32_t best = 0;
  uint64_t least = atomic_load(&x->queued[0]);
  for (uint32_t i = 1; i < x->nlanes; i++) {
    uint64_t q = atomic_load(&x->queued[i]);
    if (x->lane[i] != NULL && q < least) {
      best = i;
      least = q;
    }
  }
  atomic_fetch_add(&x->queued[best], total);
  *lane = best;
  return best == 0 ? x->call : x->lane[best];
}

int chime__sender_lanes_busy(chime__sender_t *x) {
  if (!x->ops->call_sending(x->call))
    return 0;
  for (uint32_t i = 1; i < x->nlanes; i++)
    if (x->lane[i] != NULL && !x->ops->call_sending(x->lane[i]))
      return 0;
  return 1;
}
