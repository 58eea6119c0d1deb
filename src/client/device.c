/* The device end of a stream: copies ahead of the learner into a pool of
 * device buffers on a CUDA stream of its own, and the lifetimes of slots and
 * buffers around those copies (device.h). */
#include "client/device.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/detail.h"
#include "ring/cudart.h"
#include "ring/extents.h"
#include "ring/pin.h"

enum { BUF_FREE, BUF_QUEUED, BUF_LENT };

typedef struct {
  void *dptr;    /* the slot's leaf arrays (buf_bytes) */
  void *copy_ev; /* recorded after the latest copy into dptr */
  /* Streams the learner ordered after this lending's copy (wait), and the
   * events recorded on them at its release: the next copy into dptr waits
   * for rel_ev[0 .. nrel). Events are made on first use and kept. */
  void *waiter[CHIME__DEVICE_MAX_WAITERS];
  void *rel_ev[CHIME__DEVICE_MAX_WAITERS];
  uint32_t nwaiters, nrel;
  int state;
  int holds_slot; /* `slot` is held until copy_ev completes */
  int retired;    /* a release point could not be recorded: never reused */
  uint32_t slot;
  uint64_t seq;
  uint32_t count;
  int failed; /* its copy failed (CUDA error): next reports and drops it */
  chime_sample_info_t *info; /* a host copy of the batch's records */
  int64_t *offs; /* ragged leaves: a host copy of each's count + 1 offsets */
} dbuf_t;

struct chime__device_s {
  /* Every call holds it, but next lets go while it waits (for the ring, or
   * for a copy to end), so a wait from another thread is not held up. */
  pthread_mutex_t mu;
  const chime__cudart_t *rt;
  chime_ring_t *ring;
  chime_spec_t spec;
  chime_ring_layout_t layout;
  /* A buffer's bytes: the leaf arrays (info_offset); with ragged leaves
   * the slot up to its info's end, whose parts a batch uses are copied
   * (ring/extents.h: offsets and info first, then each leaf's rows). */
  uint64_t buf_bytes;
  uint32_t nrag;
  chime__device_opts_t o;
  chime__device_source_t src;
  void *stream;
  void *reg_base; /* what this device end registered, or NULL */
  size_t reg_len;
  unsigned int reg_flags;
  dbuf_t *bufs; /* cap of them; nbufs allocated, in order */
  uint32_t nbufs, cap;
  uint32_t *queue; /* buffers copied or copying, not yet lent, seq order */
  uint32_t qhead, qlen;
  uint32_t held; /* buffers with holds_slot */
  uint32_t lent;
  /* A copy that failed where no call could report it (started ahead after
   * a batch was lent, or seen at a release): the next next() does. */
  int deferred;
  char deferred_why[512];
  chime__device_stats_t st;
};

/* Keeps a CUDA failure, or a batch dropped for offsets that do not hold,
 * for the next call to report (the detail set with it is the calling
 * thread's, about to be lost). */
static void defer(chime__device_t *d, int rc) {
  if ((rc != CHIME_ECUDA && rc != CHIME_EPROTO) || d->deferred)
    return;
  d->deferred = rc;
  snprintf(d->deferred_why, sizeof d->deferred_why, "%s", chime_last_error());
}

static const char *ename(const chime__device_t *d, int e, char *buf,
                         size_t len) {
  return chime__cuda_error_name(d->rt, e, buf, len);
}

/* A CUDA call failed: CHIME_ECUDA with the call and the error by name. */
static int cuda_fail(const chime__device_t *d, int e, const char *call,
                     const char *what) {
  char nb[32];
  return chime__detailf(CHIME_ECUDA,
                        "device stream on device %d: %s: %s (%d) from %s",
                        d->o.device, what, ename(d, e, nb, sizeof nb), e, call);
}

/* The learner's thread may use another device: chime's own calls that
 * make things (buffers, events, the stream) run on the stream's, and the
 * thread's own comes back after. */
static int enter_device(const chime__device_t *d, int *prev) {
  int e = d->rt->get_device(prev);
  if (e != CHIME__CUDA_SUCCESS)
    return e;
  return *prev == d->o.device ? 0 : d->rt->set_device(d->o.device);
}

static void leave_device(const chime__device_t *d, int prev) {
  if (prev != d->o.device)
    (void)d->rt->set_device(prev);
}

/* --------------------------------------------------------------- opening */

/* One registration of every slot: read-only when the device can (the
 * learner's shm mapping is PROT_READ), else without. Skipped when
 * pin_host_memory registered the slots already (a second registration of
 * the same pages is refused). */
static int register_ring(chime__device_t *d, char *err, size_t errlen) {
  const chime__cudart_t *rt = d->rt;
  char nb[32];
  int ro = 0;
  if (chime_ring_pinned_bytes(d->ring) > 0)
    return 0;
  d->reg_flags =
      CHIME__CUDA_HOST_REGISTER_PORTABLE | CHIME__CUDA_HOST_REGISTER_MAPPED;
  if (rt->device_get_attribute(&ro, CHIME__CUDA_ATTR_HOST_REGISTER_READ_ONLY,
                               d->o.device) == CHIME__CUDA_SUCCESS &&
      ro)
    d->reg_flags |= CHIME__CUDA_HOST_REGISTER_READ_ONLY;
  void *base = chime_ring_slot_base(d->ring, 0);
  size_t len = (size_t)d->layout.data_bytes;
  int e = rt->host_register(base, len, d->reg_flags);
  if (e != CHIME__CUDA_SUCCESS) {
    snprintf(err, errlen,
             "device stream: page-locking the ring failed: %s (%d) from "
             "cudaHostRegister(%zu bytes, portable|mapped%s) in %s",
             chime__cuda_error_name(rt, e, nb, sizeof nb), e, len,
             (d->reg_flags & CHIME__CUDA_HOST_REGISTER_READ_ONLY) ? "|read-only"
                                                                  : "",
             rt->path);
    return CHIME_ECUDA;
  }
  d->reg_base = base;
  d->reg_len = len;
  d->st.registered = len;
  return 0;
}

int chime__device_open(chime__device_t **out, chime_ring_t *ring,
                       const chime_spec_t *spec,
                       const chime__device_opts_t *opts,
                       const chime__device_source_t *src, char *err,
                       size_t errlen) {
  chime__device_t *d = NULL;
  char nb[32];
  int rc = 0, e, prev = 0, entered = 0, count = 0;
  *out = NULL;
  if (!ring || !spec || !opts || !src || opts->device < 0 ||
      opts->prefetch == 0 || opts->max_lent == 0) {
    snprintf(err, errlen, "device stream: bad arguments");
    return CHIME_EINVAL;
  }
  rc = chime__cuda_require(err, errlen);
  if (rc)
    return rc;
  const chime__cudart_t *rt = chime__cudart();
  const char *missing = chime__cudart_device_missing(rt);
  if (missing) {
    snprintf(err, errlen,
             "device stream: the CUDA runtime %s has no %s (device streams "
             "need CUDA 11.1 or later)",
             rt->path, missing);
    return CHIME_ECUDA;
  }
  e = rt->get_device_count(&count);
  if (e == CHIME__CUDA_SUCCESS && opts->device >= count) {
    snprintf(err, errlen,
             "device stream: no CUDA device %d (cudaGetDeviceCount: %d)",
             opts->device, count);
    return CHIME_ECUDA;
  }
  d = calloc(1, sizeof(*d));
  if (!d) {
    snprintf(err, errlen, "out of memory");
    return CHIME_ENOMEM;
  }
  pthread_mutex_init(&d->mu, NULL);
  d->rt = rt;
  d->ring = ring;
  d->spec = *spec;
  d->layout = *chime_ring_layout(ring);
  d->nrag = chime_spec_ragged(spec);
  d->buf_bytes =
      d->nrag ? chime__slot_send_bytes(&d->layout) : d->layout.info_offset;
  d->o = *opts;
  d->src = *src;
  d->cap = opts->max_lent + opts->prefetch;
  d->bufs = calloc(d->cap, sizeof(*d->bufs));
  d->queue = calloc(d->cap, sizeof(*d->queue));
  if (!d->bufs || !d->queue) {
    snprintf(err, errlen, "out of memory");
    rc = CHIME_ENOMEM;
    goto cleanup;
  }
  e = enter_device(d, &prev);
  if (e != CHIME__CUDA_SUCCESS) {
    snprintf(err, errlen, "device stream: cudaSetDevice(%d): %s (%d)",
             opts->device, ename(d, e, nb, sizeof nb), e);
    rc = CHIME_ECUDA;
    goto cleanup;
  }
  entered = 1;
  e = rt->stream_create_with_flags(&d->stream, CHIME__CUDA_STREAM_NON_BLOCKING);
  if (e != CHIME__CUDA_SUCCESS) {
    d->stream = NULL;
    snprintf(err, errlen,
             "device stream: cudaStreamCreateWithFlags on device %d: %s (%d)",
             opts->device, ename(d, e, nb, sizeof nb), e);
    rc = CHIME_ECUDA;
    goto cleanup;
  }
  rc = register_ring(d, err, errlen);

cleanup:
  if (entered)
    leave_device(d, prev);
  if (rc) {
    chime__device_close(d);
    return rc;
  }
  *out = d;
  return 0;
}

/* ----------------------------------------------------------------- slots */

static void give_slot(chime__device_t *d, dbuf_t *b) {
  if (!b->holds_slot)
    return;
  (void)d->src.release(d->src.arg, b->slot); /* a slot it holds: cannot fail */
  b->holds_slot = 0;
  d->held--;
}

/* Gives back the slot of every copy whose event completed. A copy whose
 * event reports an error (a lost device) gives its slot back too: the
 * device will not read it any more. 0, or CHIME_ECUDA for the first such
 * error (the batch is marked failed; next reports it). */
static int reap(chime__device_t *d) {
  int rc = 0;
  for (uint32_t i = 0; i < d->nbufs && d->held > 0; i++) {
    dbuf_t *b = &d->bufs[i];
    if (!b->holds_slot)
      continue;
    int e = d->rt->event_query(b->copy_ev);
    if (e == CHIME__CUDA_ERROR_NOT_READY)
      continue;
    give_slot(d, b);
    if (e != CHIME__CUDA_SUCCESS) {
      b->failed = e;
      if (rc == 0) {
        char what[96];
        snprintf(what, sizeof what,
                 "the copy of batch %" PRIu64 " failed (its slot was given "
                 "back)",
                 b->seq);
        rc = cuda_fail(d, e, "cudaEventQuery", what);
      }
    }
  }
  return rc;
}

/* ---------------------------------------------------------------- copies */

static void buf_free_cuda(chime__device_t *d, dbuf_t *b) {
  if (b->dptr)
    (void)d->rt->cuda_free(b->dptr);
  if (b->copy_ev)
    (void)d->rt->event_destroy(b->copy_ev);
  for (uint32_t k = 0; k < CHIME__DEVICE_MAX_WAITERS; k++)
    if (b->rel_ev[k])
      (void)d->rt->event_destroy(b->rel_ev[k]);
  free(b->info);
  free(b->offs);
  memset(b, 0, sizeof(*b));
}

static int reusable(const dbuf_t *b) {
  return b->state == BUF_FREE && !b->holds_slot && !b->retired;
}

/* A buffer a copy may go into now: a free one no learner's stream may still
 * read, else a new one while the pool has room, else a free one whose
 * release points the copy will wait for (a copy queued behind the
 * learner's work holds up the copies after it). NULL when none. On a CUDA
 * error, *rc is set. */
static dbuf_t *take_buffer(chime__device_t *d, int *rc) {
  *rc = 0;
  for (uint32_t i = 0; i < d->nbufs; i++)
    if (reusable(&d->bufs[i]) && d->bufs[i].nrel == 0)
      return &d->bufs[i];
  if (d->nbufs == d->cap) {
    for (uint32_t i = 0; i < d->nbufs; i++)
      if (reusable(&d->bufs[i]))
        return &d->bufs[i];
    return NULL;
  }
  dbuf_t *b = &d->bufs[d->nbufs];
  int prev = 0, e = enter_device(d, &prev);
  const char *call = "cudaSetDevice";
  if (e == CHIME__CUDA_SUCCESS) {
    call = "cudaMalloc";
    e = d->rt->malloc_(&b->dptr, (size_t)d->buf_bytes);
    if (e == CHIME__CUDA_SUCCESS) {
      call = "cudaEventCreateWithFlags";
      e = d->rt->event_create_with_flags(&b->copy_ev,
                                         CHIME__CUDA_EVENT_DISABLE_TIMING);
    }
    leave_device(d, prev);
  }
  if (e != CHIME__CUDA_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "a buffer of %" PRIu64 " bytes", d->buf_bytes);
    buf_free_cuda(d, b);
    *rc = cuda_fail(d, e, call, what);
    return NULL;
  }
  b->info = malloc((size_t)d->layout.batch_size * sizeof(*b->info));
  if (d->nrag)
    b->offs =
        malloc((size_t)d->nrag * (d->layout.batch_size + 1) * sizeof(*b->offs));
  if (!b->info || (d->nrag && !b->offs)) {
    buf_free_cuda(d, b);
    *rc = chime__detail(CHIME_ENOMEM, "device stream: out of memory");
    return NULL;
  }
  d->nbufs++;
  d->st.buffers = d->nbufs;
  d->st.device_bytes += d->buf_bytes;
  return b;
}

/* What of the slot batch v uses, into *x: the leaf arrays whole without
 * ragged leaves; with them the parts its offsets say. The offsets are
 * copied into b->offs first and the copy is checked (they are the
 * producer's, in memory it can still write): the extents copied to the
 * device and the shapes lend() gives come from the checked copy.
 * CHIME_EPROTO when they do not hold. */
static int batch_extents(chime__device_t *d, const chime_ring_view_t *v,
                         dbuf_t *b, chime__extents_t *x) {
  if (d->nrag == 0) {
    x->n = 1;
    x->e[0].off = 0;
    x->e[0].len = d->layout.info_offset;
    x->total = x->e[0].len;
    return 0;
  }
  char why[256];
  const int64_t *copy[CHIME_MAX_LEAVES] = {NULL};
  uint32_t r = 0;
  for (uint32_t i = 0; i < d->spec.nleaves; i++) {
    if (!d->spec.leaves[i].ragged)
      continue;
    int64_t *to = b->offs + (size_t)r++ * (v->count + 1);
    memcpy(to, v->offsets[i], (size_t)(v->count + 1) * sizeof(*b->offs));
    copy[i] = to;
  }
  if (chime__slot_extents_of(&d->layout, &d->spec, copy, x, why, sizeof why))
    return chime__detailf(CHIME_EPROTO,
                          "device stream: batch %" PRIu64 " dropped: %s",
                          v->seq, why);
  return 0;
}

/* Queues the copies of x's parts of the slot at `from` into b. A failure
 * after some were queued waits for those (they read the slot) before the
 * caller gives the slot back. */
static int queue_copies(chime__device_t *d, dbuf_t *b, const uint8_t *from,
                        const chime__extents_t *x, uint64_t seq) {
  for (uint32_t k = 0; k < x->n; k++) {
    int e = d->rt->memcpy_async((uint8_t *)b->dptr + x->e[k].off,
                                from + x->e[k].off, (size_t)x->e[k].len,
                                CHIME__CUDA_MEMCPY_HOST_TO_DEVICE, d->stream);
    if (e != CHIME__CUDA_SUCCESS) {
      char what[128];
      if (k > 0)
        (void)d->rt->stream_synchronize(d->stream);
      snprintf(what, sizeof what,
               "the copy of batch %" PRIu64 " (%" PRIu64 " bytes) failed to "
               "start; the batch is dropped",
               seq, x->total);
      return cuda_fail(d, e, "cudaMemcpyAsync", what);
    }
  }
  return 0;
}

/* Starts the copy of the ring's batch v into a buffer (one there must be:
 * can_start). On failure the slot goes back at once. */
static int start_copy(chime__device_t *d, const chime_ring_view_t *v) {
  const chime__cudart_t *rt = d->rt;
  int rc = 0, e;
  chime__extents_t x;
  dbuf_t *b = take_buffer(d, &rc);
  if (b && (rc = batch_extents(d, v, b, &x)) != 0)
    b = NULL;
  if (!b) {
    (void)d->src.release(d->src.arg, v->slot);
    return rc ? rc
              : chime__detail(CHIME_EBUSY, "device stream: no free buffer");
  }
  memcpy(b->info, v->info, (size_t)v->count * sizeof(*b->info));
  b->seq = v->seq;
  b->count = v->count;
  b->failed = 0;
  /* The learner's streams first pass their release points of this buffer's
   * previous batch: ordered on the device, no host wait. */
  for (uint32_t k = 0; k < b->nrel; k++) {
    e = rt->stream_wait_event(d->stream, b->rel_ev[k], 0);
    if (e != CHIME__CUDA_SUCCESS) {
      (void)d->src.release(d->src.arg, v->slot);
      return cuda_fail(d, e, "cudaStreamWaitEvent",
                       "ordering a copy after the learner's stream");
    }
  }
  b->nrel = 0;
  rc = queue_copies(d, b, chime_ring_slot_base(d->ring, v->slot), &x, v->seq);
  if (rc) {
    (void)d->src.release(d->src.arg, v->slot);
    return rc;
  }
  e = rt->event_record(b->copy_ev, d->stream);
  if (e != CHIME__CUDA_SUCCESS) {
    /* The copy is queued with nothing to say when it ends: the slot waits
     * for the whole stream (a failure path only). */
    (void)rt->stream_synchronize(d->stream);
    (void)d->src.release(d->src.arg, v->slot);
    return cuda_fail(d, e, "cudaEventRecord", "marking a copy's end");
  }
  b->slot = v->slot;
  b->holds_slot = 1;
  b->state = BUF_QUEUED;
  d->held++;
  if (d->held > d->st.max_slots_held)
    d->st.max_slots_held = d->held;
  d->queue[(d->qhead + d->qlen) % d->cap] = (uint32_t)(b - d->bufs);
  d->qlen++;
  d->st.copies++;
  return 0;
}

/* Room for one more copy: under the prefetch, in slots held and in batches
 * copied ahead, and a buffer to copy into. */
static int can_start(const chime__device_t *d) {
  if (d->held >= d->o.prefetch || d->qlen >= d->o.prefetch)
    return 0;
  if (d->nbufs < d->cap)
    return 1;
  for (uint32_t i = 0; i < d->nbufs; i++)
    if (reusable(&d->bufs[i]))
      return 1;
  return 0;
}

/* Starts copies of the batches the ring has now, up to the prefetch. */
static int fill(chime__device_t *d) {
  while (can_start(d)) {
    chime_ring_view_t v;
    int rc = d->src.next(d->src.arg, &v, 0);
    if (rc == CHIME_ETIMEDOUT)
      return 0;
    if (rc)
      return rc;
    rc = start_copy(d, &v);
    if (rc)
      return rc;
  }
  return 0;
}

/* Waits until a copy may start (a held copy completes), polling its
 * events: the learner is more than `prefetch` batches ahead of the device.
 * 0, CHIME_ETIMEDOUT at end_ms (< 0: never), or a reap error. */
static int wait_room(chime__device_t *d, int64_t end_ms) {
  long pause_ns = 20000;
  for (;;) {
    int rc = reap(d);
    if (rc || can_start(d))
      return rc;
    int64_t left = end_ms < 0 ? INT64_MAX : end_ms - chime__now_ms();
    if (left <= 0)
      return CHIME_ETIMEDOUT;
    struct timespec ts = {0, pause_ns};
    if (left < 1000 && (int64_t)pause_ns > left * 1000000)
      ts.tv_nsec = (long)(left * 1000000);
    pthread_mutex_unlock(&d->mu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&d->mu);
    if (pause_ns < 1000000)
      pause_ns *= 2;
  }
}

static void lend(chime__device_t *d, dbuf_t *b, chime_batch_t *out) {
  b->state = BUF_LENT;
  b->nwaiters = 0;
  d->lent++;
  out->seq = b->seq;
  out->count = b->count;
  out->nleaves = d->spec.nleaves;
  out->info = b->info;
  out->groups = NULL; /* group tables: host streams only (stream.c) */
  uint32_t r = 0;
  for (uint32_t i = 0; i < d->spec.nleaves; i++) {
    const chime_leaf_t *l = &d->spec.leaves[i];
    chime_batch_leaf_t *o = &out->leaf[i];
    o->name = l->name;
    o->dtype = l->dtype;
    o->data = (const char *)b->dptr + d->layout.leaf_offset[i];
    o->offsets = NULL;
    if (l->ragged) {
      /* [total, *rest] on the device; the offsets a host copy */
      const int64_t *offs = b->offs + (size_t)r++ * (b->count + 1);
      o->ndim = l->ndim;
      o->shape[0] = (uint64_t)offs[b->count];
      for (uint32_t k = 1; k < l->ndim; k++)
        o->shape[k] = l->shape[k];
      o->bytes = o->shape[0] * chime_leaf_row_bytes(l);
      o->offsets = offs;
      continue;
    }
    o->ndim = l->ndim + 1;
    o->shape[0] = b->count;
    for (uint32_t k = 0; k < l->ndim; k++)
      o->shape[k + 1] = l->shape[k];
    o->bytes = (uint64_t)b->count * chime_leaf_bytes(l);
  }
}

static int next_locked(chime__device_t *d, chime_batch_t *out, int timeout_ms) {
  int64_t end_ms = timeout_ms < 0 ? -1 : chime__now_ms() + timeout_ms;
  if (d->lent >= d->o.max_lent)
    return chime__detailf(CHIME_EBUSY,
                          "device stream: %" PRIu32
                          " batches held, all it lends: release one first",
                          d->lent);
  if (d->deferred) {
    int rc = d->deferred;
    d->deferred = 0;
    return chime__detail(rc, d->deferred_why);
  }
  int rc = reap(d);
  if (rc == 0)
    rc = fill(d);
  if (rc)
    return rc; /* the detail is set; what is copied ahead stays queued */
  while (rc == 0 && d->qlen == 0) {
    /* Nothing copied ahead: wait for room, then for the ring's next. */
    rc = wait_room(d, end_ms);
    if (rc)
      break;
    chime_ring_view_t v;
    int left = end_ms < 0 ? -1 : (int)(end_ms - chime__now_ms());
    pthread_mutex_unlock(&d->mu);
    rc = d->src.next(d->src.arg, &v, left < 0 && end_ms >= 0 ? 0 : left);
    pthread_mutex_lock(&d->mu);
    if (rc == 0)
      rc = start_copy(d, &v);
  }
  if (rc == CHIME_ETIMEDOUT)
    return chime__detailf(rc, "device stream: no batch within %d ms",
                          timeout_ms);
  if (rc)
    return rc; /* the detail is set */
  dbuf_t *b = &d->bufs[d->queue[d->qhead]];
  d->qhead = (d->qhead + 1) % d->cap;
  d->qlen--;
  if (b->failed) {
    char what[96];
    int e = b->failed;
    b->failed = 0;
    b->state = BUF_FREE;
    snprintf(what, sizeof what,
             "the copy of batch %" PRIu64 " failed; the batch is dropped",
             b->seq);
    return cuda_fail(d, e, "cudaEventQuery", what);
  }
  lend(d, b, out);
  /* The next copies start now, while the learner computes. A failed copy
   * is the next call's to report; the ring's errors it meets again. */
  defer(d, fill(d));
  return 0;
}

int chime__device_next(chime__device_t *d, chime_batch_t *out, int timeout_ms) {
  pthread_mutex_lock(&d->mu);
  int rc = next_locked(d, out, timeout_ms);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

/* ---------------------------------------------------------------- lending */

/* The buffer that lends batch now: *out, or CHIME_EINVAL saying why not. */
static int lent_buffer(chime__device_t *d, const chime_batch_t *batch,
                       dbuf_t **out) {
  for (uint32_t i = 0; i < d->nbufs; i++) {
    dbuf_t *b = &d->bufs[i];
    if (b->info == batch->info && b->state == BUF_LENT &&
        b->seq == batch->seq) {
      *out = b;
      return 0;
    }
  }
  return chime__detailf(CHIME_EINVAL,
                        "device stream: batch %" PRIu64
                        " is not lent now (given back already, or not "
                        "from this stream's next())",
                        batch->seq);
}

static int release_locked(chime__device_t *d, const chime_batch_t *batch) {
  dbuf_t *b = NULL;
  int rc = lent_buffer(d, batch, &b);
  if (rc)
    return rc;
  for (uint32_t k = 0; k < b->nwaiters; k++) {
    int e = CHIME__CUDA_SUCCESS;
    if (!b->rel_ev[k]) {
      int prev = 0;
      e = enter_device(d, &prev);
      if (e == CHIME__CUDA_SUCCESS) {
        e = d->rt->event_create_with_flags(&b->rel_ev[k],
                                           CHIME__CUDA_EVENT_DISABLE_TIMING);
        leave_device(d, prev);
      }
    }
    if (e == CHIME__CUDA_SUCCESS)
      e = d->rt->event_record(b->rel_ev[k], b->waiter[k]);
    if (e != CHIME__CUDA_SUCCESS && rc == 0) {
      /* Without its release point the buffer may still be read: it is
       * never used again (freed at close). */
      b->retired = 1;
      rc = cuda_fail(d, e, "cudaEventRecord",
                     "recording the release point on the learner's stream "
                     "(a stream of another device?); the batch is released");
    }
  }
  b->nrel = b->retired ? 0 : b->nwaiters;
  b->nwaiters = 0;
  b->state = BUF_FREE;
  d->lent--;
  /* Slots of finished copies go back early; a failed copy is next's. */
  int rrc = reap(d);
  if (rc == 0)
    defer(d, rrc);
  return rc;
}

int chime__device_release(chime__device_t *d, const chime_batch_t *batch) {
  pthread_mutex_lock(&d->mu);
  int rc = release_locked(d, batch);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

static int wait_locked(chime__device_t *d, const chime_batch_t *batch,
                       void *cuda_stream) {
  dbuf_t *b = NULL;
  int rc = lent_buffer(d, batch, &b);
  if (rc)
    return rc;
  uint32_t k = 0;
  while (k < b->nwaiters && b->waiter[k] != cuda_stream)
    k++;
  if (k == CHIME__DEVICE_MAX_WAITERS)
    return chime__detailf(CHIME_ERESOURCE,
                          "device stream: batch %" PRIu64
                          " already ordered %d CUDA streams after its copy, "
                          "all it can track",
                          batch->seq, CHIME__DEVICE_MAX_WAITERS);
  int e = d->rt->stream_wait_event(cuda_stream, b->copy_ev, 0);
  if (e != CHIME__CUDA_SUCCESS)
    return cuda_fail(d, e, "cudaStreamWaitEvent",
                     "ordering the learner's stream after a copy");
  if (k == b->nwaiters)
    b->waiter[b->nwaiters++] = cuda_stream;
  return 0;
}

int chime__device_wait(chime__device_t *d, const chime_batch_t *batch,
                       void *cuda_stream) {
  pthread_mutex_lock(&d->mu);
  int rc = wait_locked(d, batch, cuda_stream);
  pthread_mutex_unlock(&d->mu);
  return rc;
}

void chime__device_get_stats(chime__device_t *d, chime__device_stats_t *out) {
  pthread_mutex_lock(&d->mu);
  *out = d->st;
  out->slots_held = d->held;
  pthread_mutex_unlock(&d->mu);
}

/* ----------------------------------------------------------------- close */

void chime__device_close(chime__device_t *d) {
  if (!d)
    return;
  const chime__cudart_t *rt = d->rt;
  int prev = 0;
  int entered = rt && enter_device(d, &prev) == CHIME__CUDA_SUCCESS;
  /* Every copy ends before its slot goes back and the ring is unregistered;
   * the stream also waited for the release points its copies waited on. */
  if (d->stream)
    (void)rt->stream_synchronize(d->stream);
  for (uint32_t i = 0; i < d->nbufs; i++)
    give_slot(d, &d->bufs[i]);
  for (uint32_t i = 0; i < d->nbufs; i++) {
    dbuf_t *b = &d->bufs[i];
    /* The learner's streams may still read a buffer released last. */
    for (uint32_t k = 0; k < b->nrel; k++)
      (void)rt->event_synchronize(b->rel_ev[k]);
    buf_free_cuda(d, b);
  }
  if (d->stream)
    (void)rt->stream_destroy(d->stream);
  if (d->reg_base)
    (void)rt->host_unregister(d->reg_base);
  if (entered)
    leave_device(d, prev);
  chime__device_forget(d);
}

void chime__device_forget(chime__device_t *d) {
  if (!d)
    return;
  for (uint32_t i = 0; i < d->cap && d->bufs; i++)
    free(d->bufs[i].info);
  free(d->bufs);
  free(d->queue);
  pthread_mutex_destroy(&d->mu);
  free(d);
}
