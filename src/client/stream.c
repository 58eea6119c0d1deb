/* Stream: a Subscribe call and the ring the learner reads. The transport
 * (stream.h) says how the ring is filled; here are the learner's calls
 * (next, release, stats, close), which are ring calls in every mode, and
 * the polling of the call on its own completion queue once the stream is
 * open: chunks and notices in, credits out, the final status.
 *
 * shm: the stream's thread polls. Stream mode (tp->learner_drives): a
 * learner whose ring is empty polls in next() itself, as a plain gRPC client
 * does, so a batch costs no wake-up of a second thread on its way in; the
 * stream's thread polls only once the learner has stayed out of next() for
 * DRIVE_IDLE_MS (it computes), so batches keep arriving meanwhile and the
 * connection's pings are answered, and in slices of DRIVE_IDLE_MS so a
 * learner back in next() takes over soon. drive_mu: whoever polls.
 * The other end of a stream of batches: src/server/stream.c (one basename, two
 * ends). */
#include <inttypes.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/fork.h"
#include "client/group_view.h"
#include "client/stream.h"
#include "ring/extents.h"
#include "wire/credit.h"
#include "ring/pin.h"

/* Cuts the learner off the ring: next then reports end_code, with end_why
 * as the learner's detail. The first end wins; code and text are set
 * together, under the lock, so a learner never reads one without the
 * other. Usually called on the stream's thread (the status, a protocol
 * error), whose own detail is nobody's business. */
void chime__stream_cut(chime_stream_t *s, int code, const char *why) {
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->end_code) == 0) {
    snprintf(s->end_why, sizeof(s->end_why), "%.*s",
             (int)sizeof(s->end_why) - 1, why ? why : chime_strerror(code));
    atomic_store(&s->end_code, code);
  }
  pthread_mutex_unlock(&s->lock);
  if (s->ring)
    chime_ring_set_disconnected(s->ring);
}

/* next() found the ring cut off (rc: CHIME_EDISCONNECTED or
 * CHIME_ESHUTDOWN): the end's own code and reason, as the calling thread's
 * detail. A server that shut its ring (shm) may do so before its status
 * arrives: then the ring's code says it. */
static int report_end(chime_stream_t *s, int rc) {
  pthread_mutex_lock(&s->lock);
  int end = atomic_load(&s->end_code);
  if (end != 0 && rc == CHIME_EDISCONNECTED)
    rc = end;
  if (end != 0)
    chime__detail(rc, s->end_why);
  else
    chime__detailf(rc, "stream %" PRIu64 " on '%s': %s", s->stream_id, s->table,
                   rc == CHIME_ESHUTDOWN ? "server shutting down"
                                         : "server disconnected");
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static void on_status(chime_stream_t *s) {
  char text[CHIME__ERRLEN], why[CHIME__ERRLEN + 64];
  int code = chime__rpc_result(&s->rpc, text, sizeof(text));
  pthread_mutex_lock(&s->lock);
  s->ended = 1;
  pthread_mutex_unlock(&s->lock);
  if (s->notice_shutdown || code == CHIME_ESHUTDOWN)
    code = CHIME_ESHUTDOWN;
  else if (code == 0 || code == CHIME_EUNAVAILABLE || atomic_load(&s->stalled))
    code = CHIME_EDISCONNECTED;
  if (code == CHIME_EDISCONNECTED && chime__resume_begin(s, code, text))
    return; /* the stream's thread opens it again (resume.c) */
  snprintf(why, sizeof(why), "stream %" PRIu64 " on '%s' ended: %.400s",
           s->stream_id, s->table, text[0] ? text : chime_strerror(code));
  /* The reason first: a learner woken by the shutdown reads it. */
  chime__stream_cut(s, code, why);
  if (code == CHIME_ESHUTDOWN && s->tp->on_shutdown)
    s->tp->on_shutdown(s);
}

static void protocol_error(chime_stream_t *s, const char *what) {
  chime__stream_cut(s, CHIME_EPROTO, what);
  chime__rpc_cancel(&s->rpc);
}

/* A message after Opened: the transport's (chunks), or a notice. */
static void on_message(chime_stream_t *s, grpc_byte_buffer *bb) {
  char err[CHIME__ERRLEN];
  if (s->tp->on_message) {
    int rc = s->tp->on_message(s, bb, err, sizeof(err));
    if (rc == 0)
      return;
    if (rc != CHIME_ENOTFOUND) {
      protocol_error(s, err);
      return;
    }
  }
  Chime__V1__SubscribeResponse *r =
      (Chime__V1__SubscribeResponse *)chime__unpack(
          &chime__v1__subscribe_response__descriptor, bb);
  if (r && r->kind_case == CHIME__V1__SUBSCRIBE_RESPONSE__KIND_HEARTBEAT) {
    /* heard (stall.c): nothing else to do */
  } else if (!r || r->kind_case != CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE) {
    snprintf(err, sizeof(err), "stream %" PRIu64 ": unexpected %s message",
             s->stream_id, r ? "non-notice" : "malformed");
    protocol_error(s, err);
  } else if (chime__notice_err(r->notice->error, r->notice->code) ==
             CHIME_ESHUTDOWN) {
    s->notice_shutdown = 1;
    if (s->tp->on_shutdown)
      s->tp->on_shutdown(s);
  }
  if (r)
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* Caller holds s->lock. The learner's version goes when the call's one
 * send is free (else once the send in flight completes: pump). */
static void send_version_locked(chime_stream_t *s) {
  if (!s->version_unsent || s->ended ||
      chime__rpc_pending(&s->rpc, CHIME__RPC_SEND))
    return;
  Chime__V1__VersionReport vr = CHIME__V1__VERSION_REPORT__INIT;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  vr.version = s->version;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_VERSION;
  req.version = &vr;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (bb != NULL && chime__rpc_send(&s->rpc, bb) == 0)
    s->version_unsent = 0; /* else tried again at the next completion */
}

/* Whether batch b, drawn before the learner's latest version, holds an
 * item now more than max_staleness behind it: next() drops it. */
static int stale_for_learner(chime_stream_t *s, const chime_batch_t *b) {
  uint64_t lim = s->max_staleness, v;
  if (lim == 0)
    return 0;
  pthread_mutex_lock(&s->lock);
  v = s->version;
  pthread_mutex_unlock(&s->lock);
  if (v <= lim)
    return 0;
  for (uint32_t j = 0; j < b->count; j++)
    if (b->info[j].version < v - lim)
      return 1;
  return 0;
}

/* Handles one completion. CHIME_ETIMEDOUT when none came by the deadline. */
static int pump(chime_stream_t *s, gpr_timespec deadline) {
  chime__rpc_op_t op;
  int ok;
  int rc = chime__rpc_next(&s->rpc, deadline, &op, &ok);
  if (rc)
    return rc;
  switch (op) {
  case CHIME__RPC_RECV:
    if (s->rpc.recv_bb) {
      /* Ask for the next message before copying this one, so gRPC assembles
       * it while this thread copies. */
      grpc_byte_buffer *bb = s->rpc.recv_bb;
      s->rpc.recv_bb = NULL;
      if (chime__rpc_recv(&s->rpc))
        protocol_error(s, "stream: cannot receive");
      on_message(s, bb);
      chime__bb_free(bb);
    } /* else the call is over; its status follows */
    break;
  case CHIME__RPC_STATUS:
    on_status(s);
    break;
  case CHIME__RPC_SEND:
    if (s->tp->on_sent)
      s->tp->on_sent(s);
    pthread_mutex_lock(&s->lock);
    send_version_locked(s);
    pthread_mutex_unlock(&s->lock);
    break;
  default:
    break;
  }
  return 0;
}

#define DRIVE_IDLE_MS 5

static gpr_timespec in_ms(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* The stream's thread: waits while the learner polls, or will soon. */
static void wait_learner_idle(chime_stream_t *s) {
  pthread_mutex_lock(&s->lock);
  while (!s->closing && !atomic_load(&s->resuming) &&
         (s->in_next || chime__now_ms() - s->left_ms < DRIVE_IDLE_MS)) {
    struct timespec ts = chime__clock_after_ms(CLOCK_REALTIME, DRIVE_IDLE_MS);
    pthread_cond_timedwait(&s->idle_cv, &s->lock, &ts);
  }
  pthread_mutex_unlock(&s->lock);
}

/* Whether the learner's next() polls the call. Not over lanes (lanes.c):
 * batches then come on the lanes' threads too, which a learner waiting on
 * the first call's queue would not see; the stream's thread pumps it. */
static int learner_drives(const chime_stream_t *s) {
  return s->tp->learner_drives && s->remote.lanes == NULL;
}

static void *stream_thread(void *arg) {
  pthread_setname_np(pthread_self(), "chime-stream");
  chime_stream_t *s = arg;
  char why[CHIME__ERRLEN];
  int rc;
  do {
    while (chime__rpc_busy(&s->rpc)) {
      if (!learner_drives(s)) {
        pump(s, gpr_inf_future(GPR_CLOCK_MONOTONIC));
        continue;
      }
      wait_learner_idle(s);
      pthread_mutex_lock(&s->drive_mu);
      pump(s, in_ms(DRIVE_IDLE_MS));
      chime__stall_check(s);
      pthread_mutex_unlock(&s->drive_mu);
    }
  } while ((rc = chime__stream_resume(s, why, sizeof(why))) == 0);
  if (rc != 1) /* a lost call not resumed: the stream is over */
    chime__stream_cut(s, rc, why);
  return NULL;
}

/* next() with an empty ring in stream mode: polls the call until a batch
 * is ready, the stream ends or timeout_ms (-1: none) passes; while the
 * stream's thread polls, waits on the ring in short slices instead. Out of
 * time (timeout 0 included) it still takes what completed already, so a
 * learner that only ever looks without waiting is served too. */
static int drive_next(chime_stream_t *s, chime_ring_view_t *v, int timeout_ms) {
  int64_t end = timeout_ms < 0 ? -1 : chime__now_ms() + timeout_ms;
  for (;;) {
    int rc = chime_ring_next(s->ring, v, 0);
    if (rc != CHIME_ETIMEDOUT)
      return rc;
    if (s->tp->before_wait)
      s->tp->before_wait(s);
    int64_t left = end < 0 ? INT64_MAX : end - chime__now_ms();
    /* The call is looked at under drive_mu: a resume replaces it. */
    int drive = learner_drives(s) && pthread_mutex_trylock(&s->drive_mu) == 0;
    if (drive && !chime__rpc_busy(&s->rpc)) {
      pthread_mutex_unlock(&s->drive_mu);
      drive = 0;
    }
    if (drive) {
      /* Woken in time to judge a silent call (stall.c). */
      int64_t stall = chime__stall_left_ms(s);
      int64_t wait = stall < left ? stall : left;
      gpr_timespec until = wait == INT64_MAX
                               ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                           : wait > 0 ? in_ms(wait)
                                      : gpr_inf_past(GPR_CLOCK_MONOTONIC);
      uint64_t t0 = chime__now_ns();
      rc = pump(s, until);
      chime__stall_check(s);
      pthread_mutex_unlock(&s->drive_mu);
      s->drive_wait_ns += chime__now_ns() - t0;
      if (rc == CHIME_ETIMEDOUT && left <= 0)
        return chime_ring_next(s->ring, v, 0); /* nothing more came */
      if (rc != 0 && rc != CHIME_ETIMEDOUT)
        return rc; /* the queue is shut: cannot happen while open */
      continue;
    }
    if (left <= 0)
      return CHIME_ETIMEDOUT;
    /* The call is over (the ring says why), or the stream's thread polls:
     * what it receives wakes this wait. */
    rc = chime_ring_next(s->ring, v,
                         left < DRIVE_IDLE_MS ? (int)left : DRIVE_IDLE_MS);
    if (rc != CHIME_ETIMEDOUT)
      return rc;
  }
}

static void set_in_next(chime_stream_t *s, int in) {
  pthread_mutex_lock(&s->lock);
  s->in_next = in;
  if (!in)
    s->left_ms = chime__now_ms();
  pthread_mutex_unlock(&s->lock);
}

/* Cancels the call, waits for its operations and frees it. */
static void call_teardown(chime_stream_t *s) {
  /* A resume replaces the call under drive_mu (and stops trying once
   * closing is set: close set it). */
  pthread_mutex_lock(&s->drive_mu);
  chime__rpc_cancel(&s->rpc);
  pthread_mutex_unlock(&s->drive_mu);
  if (s->thread_started)
    pthread_join(s->thread, NULL);
  s->thread_started = 0;
  while (chime__rpc_busy(&s->rpc))
    pump(s, gpr_inf_future(GPR_CLOCK_MONOTONIC));
  chime__rpc_destroy(&s->rpc);
}

/* A device stream's source (below). */
static int device_take(void *arg, chime_ring_view_t *v, int timeout_ms);
static int device_give(void *arg, uint32_t slot);

int chime__stream_new(chime_stream_t **out, chime_client_t *client,
                      const char *table, const chime_stream_opts_t *opts,
                      char *err, size_t errlen) {
  chime_stream_t *s = calloc(1, sizeof(*s));
  *out = NULL;
  if (!s)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  s->client = client;
  s->fork_gen = client->fork_gen;
  s->pid = client->pid;
  snprintf(s->table, sizeof(s->table), "%s", table);
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->drive_mu, NULL);
  pthread_cond_init(&s->idle_cv, NULL);
  s->opts = *opts;
  s->version = opts->version;
  int rc = chime__frames_keep_copy(s, opts->keep_compressed, err, errlen);
  if (rc != 0) {
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->drive_mu);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int chime__single_open(chime_stream_t **out, chime_client_t *client,
                       const char *table, const chime_stream_opts_t *opts) {
  const chime_stream_opts_t o = *opts;
  char err[CHIME__ERRLEN] = "";
  chime_stream_t *s = NULL;
  *out = NULL;
  int rc = chime__stream_new(&s, client, table, &o, err, sizeof(err));
  if (rc)
    goto cleanup;
  s->prefetch = chime__credits_initial(o.prefetch, o.slots);
  rc = chime__stream_attach(s, err, sizeof(err));
  if (rc)
    goto cleanup;
  const chime_ring_layout_t *lay = chime_ring_layout(s->ring);
  s->lent = calloc(lay->slots, sizeof(*s->lent));
  if (!s->lent || chime__group_view_new(&s->grp, &s->spec, lay->batch_size,
                                        lay->slots) != 0) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  if (s->grp != NULL && o.device >= 0) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOTSUP,
                     "table '%s' is a group table: device streams do not "
                     "serve groups yet (open a host stream)",
                     table);
    goto cleanup;
  }
  /* The call may have ended while it was opening: the status is read now
   * that the ring is there to be cut off. */
  if (!chime__rpc_pending(&s->rpc, CHIME__RPC_STATUS))
    on_status(s);

  if (o.pin_host_memory) {
    char why[CHIME__PIN_ERRLEN];
    rc = chime__ring_pin(s->ring, why, sizeof(why));
    if (rc) {
      chime__fail(err, sizeof(err), rc, "pin_host_memory: %s", why);
      goto cleanup;
    }
  }
  if (o.device >= 0) {
    const chime__device_opts_t dopts = {.device = o.device,
                                        .prefetch = o.device_prefetch,
                                        .max_lent = o.slots - 1};
    const chime__device_source_t src = {
        .next = device_take, .release = device_give, .arg = s};
    rc = chime__device_open(&s->dev, s->ring, &s->spec, &dopts, &src, err,
                            sizeof(err));
    if (rc)
      goto cleanup;
  }
  if (pthread_create(&s->thread, NULL, stream_thread, s) != 0) {
    rc = chime__fail(err, sizeof(err), CHIME_ESYS, "cannot start thread");
    goto cleanup;
  }
  s->thread_started = 1;
  *out = s;
  s = NULL;

cleanup:
  if (rc) {
    chime__detail(rc, err);
    chime__single_close(s);
  }
  return rc;
}

/* CHIME_ENOTSUP in a child of fork(): the ring, its leases and the call
 * are the parent's (fork.h). */
int chime__stream_inherited(const chime_stream_t *s) {
  if (s->fork_gen == chime__fork_gen())
    return 0;
  char err[512];
  int rc = chime__fork_check(s->fork_gen, s->pid, "stream", err, sizeof(err));
  return chime__detail(rc, err);
}

/* The ring's answer rc as the learner's: 0, or the code with the detail
 * set (why the stream ended, no batch in time, every slot lent). */
static int ring_answer(chime_stream_t *s, int rc, int timeout_ms) {
  if (rc == CHIME_EDISCONNECTED || rc == CHIME_ESHUTDOWN)
    return report_end(s, rc);
  if (rc == CHIME_ETIMEDOUT)
    return chime__detailf(rc,
                          "stream %" PRIu64 " on '%s': no batch within %d ms",
                          s->stream_id, s->table, timeout_ms);
  if (rc == CHIME_EBUSY)
    return chime__detailf(rc,
                          "stream %" PRIu64 " on '%s': %" PRIu32
                          " batches held, all a ring of %" PRIu32
                          " slots lends: release one first",
                          s->stream_id, s->table, s->layout.slots - 1,
                          s->layout.slots);
  if (rc)
    return chime__detailf(rc, "stream %" PRIu64 " on '%s': %s", s->stream_id,
                          s->table, chime_strerror(rc));
  return 0;
}

/* The ring's next batch, in every mode, with the detail of a failure set:
 * what next() returns on a host stream, and the device end's source. */
static int take_view(chime_stream_t *s, chime_ring_view_t *v, int timeout_ms) {
  int rc;
  const chime__transport_t *tp = s->tp;
  if (tp->learner_drives) {
    set_in_next(s, 1);
    rc = drive_next(s, v, timeout_ms);
    set_in_next(s, 0);
  } else {
    rc = chime_ring_next(s->ring, v, tp->before_wait ? 0 : timeout_ms);
    if (rc == CHIME_ETIMEDOUT && tp->before_wait) {
      /* About to wait: e.g. gathered credits go now if the server owes
       * nothing (a completing send re-checks, see pump). */
      tp->before_wait(s);
      rc = chime_ring_next(s->ring, v, timeout_ms);
    }
  }
  return ring_answer(s, rc, timeout_ms);
}

/* A ragged leaf's offsets as the producer wrote them, checked before
 * anyone indexes with them: from 0, never decreasing, within the slot's
 * room for count times the bound. The total in *total. */
/* The batch in view v, lent to the learner; CHIME_EPROTO (the slot given
 * back) when a ragged leaf's offsets do not hold. */
static int lend(chime_stream_t *s, const chime_ring_view_t *vp,
                chime_batch_t *out) {
  for (uint32_t i = 0; i < s->spec.nleaves; i++) {
    const chime_leaf_t *l = &s->spec.leaves[i];
    chime_batch_leaf_t *b = &out->leaf[i];
    b->name = l->name;
    b->dtype = l->dtype;
    b->ndim = l->ndim + (l->ragged ? 0 : 1);
    b->shape[0] = vp->count;
    b->offsets = NULL;
    if (l->ragged) {
      char why[256];
      int64_t rows =
          vp->offsets[i] == NULL
              ? -1
              : chime__offsets_rows(vp->offsets[i], vp->count, l->shape[0],
                                    l->name, why, sizeof(why));
      if (rows < 0) {
        (void)s->tp->release(s, vp->slot);
        return chime__detailf(CHIME_EPROTO, "batch %" PRIu64 ": %s", vp->seq,
                              vp->offsets[i] == NULL ? "no offsets" : why);
      }
      uint64_t total = (uint64_t)rows;
      b->shape[0] = total;
      for (uint32_t d = 1; d < l->ndim; d++)
        b->shape[d] = l->shape[d];
      b->offsets = vp->offsets[i];
      b->bytes = total * chime_leaf_row_bytes(l);
    } else {
      for (uint32_t d = 0; d < l->ndim; d++)
        b->shape[d + 1] = l->shape[d];
      b->bytes = (uint64_t)vp->count * chime_leaf_bytes(l);
    }
    b->data = vp->leaf[i];
    s->bytes += b->bytes;
  }
  out->seq = vp->seq;
  out->count = vp->count;
  out->nleaves = s->spec.nleaves;
  out->info = vp->info;
  out->groups = NULL;
  char why[256];
  if (s->grp != NULL &&
      chime__group_view_lend(s->grp, vp->slot, out, why, sizeof(why)) != 0) {
    (void)s->tp->release(s, vp->slot);
    return chime__detailf(CHIME_EPROTO, "batch %" PRIu64 ": %s", vp->seq, why);
  }
  s->lent[vp->slot] = vp->seq + 1;
  s->batches++;
  return 0;
}

const chime_batch_leaf_t *chime_batch_leaf(const chime_batch_t *batch,
                                           const char *name) {
  if (batch == NULL || name == NULL)
    return NULL;
  for (uint32_t i = 0; i < batch->nleaves && i < CHIME_MAX_LEAVES; i++)
    if (batch->leaf[i].name != NULL && strcmp(batch->leaf[i].name, name) == 0)
      return &batch->leaf[i];
  return NULL;
}

const int64_t *chime_batch_offsets(const chime_batch_t *batch,
                                   const char *name) {
  const chime_batch_leaf_t *l = chime_batch_leaf(batch, name);
  return l != NULL ? l->offsets : NULL;
}

/* The device end's source: the stream's ring, slots back through the
 * transport (stream mode: as credits). */
static int device_take(void *arg, chime_ring_view_t *v, int timeout_ms) {
  return take_view(arg, v, timeout_ms);
}

static int device_give(void *arg, uint32_t slot) {
  chime_stream_t *s = arg;
  return s->tp->release(s, slot);
}

static int device_next(chime_stream_t *s, chime_batch_t *out, int timeout_ms) {
  int rc = chime__device_next(s->dev, out, timeout_ms);
  if (rc == 0) {
    s->batches++;
    for (uint32_t i = 0; i < out->nleaves; i++)
      s->bytes += out->leaf[i].bytes;
  }
  return rc;
}

/* The next batch that take gives within the learner's window: one drawn
 * before the learner's latest version that holds an item now too stale
 * is released unseen, and the next one taken (waiting timeout_ms again). */
static int next_fresh(chime_stream_t *s, chime_batch_t *out, int timeout_ms,
                      int (*take)(chime_stream_t *, chime_ring_view_t *, int)) {
  for (;;) {
    chime_ring_view_t v;
    int rc = take(s, &v, timeout_ms);
    if (rc != 0)
      return rc;
    if ((rc = lend(s, &v, out)) != 0 || !stale_for_learner(s, out))
      return rc;
    s->dropped_stale++;
    if ((rc = chime__single_release(s, out)) != 0)
      return rc;
  }
}

int chime__single_next(chime_stream_t *s, chime_batch_t *out, int timeout_ms) {
  int rc = chime__stream_inherited(s);
  if (rc)
    return rc;
  if (s->dev)
    return device_next(s, out, timeout_ms);
  return next_fresh(s, out, timeout_ms, take_view);
}

int chime__single_set_version(chime_stream_t *s, uint64_t version) {
  int rc = chime__stream_inherited(s);
  if (rc)
    return rc;
  pthread_mutex_lock(&s->lock);
  /* Resuming: the version goes with the new call's Open. */
  int ended = s->ended && !atomic_load(&s->resuming);
  if (!ended && version > s->version) {
    s->version = version;
    s->version_unsent = 1;
    send_version_locked(s);
  }
  pthread_mutex_unlock(&s->lock);
  return ended ? chime__detailf(CHIME_ECLOSED,
                                "stream %" PRIu64 " on '%s' has ended",
                                s->stream_id, s->table)
               : 0;
}

/* The ring alone, never polling the call (chime__stream_take). */
static int ring_take(chime_stream_t *s, chime_ring_view_t *v, int timeout_ms) {
  int rc = chime_ring_next(s->ring, v, 0);
  if (rc == CHIME_ETIMEDOUT && s->tp->before_wait)
    s->tp->before_wait(s); /* e.g. gathered credits, as next() sends them */
  if (rc == CHIME_ETIMEDOUT && timeout_ms != 0)
    rc = chime_ring_next(s->ring, v, timeout_ms);
  return ring_answer(s, rc, timeout_ms);
}

int chime__stream_take(chime_stream_t *s, chime_batch_t *out, int timeout_ms) {
  if (s->dev) /* a batch copied to the device, as next() gives one */
    return device_next(s, out, timeout_ms);
  /* A sharded learner is owed the same window as next()'s. */
  return next_fresh(s, out, timeout_ms, ring_take);
}

int chime__single_stats(const chime_stream_t *s,
                        chime_stream_local_stats_t *out) {
  int rc =
      chime__stream_inherited(s); /* the ring's counters are the parent's */
  if (rc)
    return rc;
  chime_ring_stats_t rs;
  chime_ring_stats(s->ring, &rs);
  memset(out, 0, sizeof(*out));
  out->mode = s->mode;
  out->stream_id = s->stream_id;
  out->batches = s->batches;
  out->bytes = s->bytes;
  out->dropped_stale = s->dropped_stale;
  out->leases = rs.leases;
  out->max_leases = rs.max_leases;
  out->consumer_wait_ns = rs.consumer_wait_ns + s->drive_wait_ns;
  out->pinned_bytes = chime_ring_pinned_bytes(s->ring);
  out->slots = chime_ring_layout(s->ring)->slots;
  if (s->dev) {
    chime__device_stats_t ds;
    chime__device_get_stats(s->dev, &ds);
    out->pinned_bytes += ds.registered;
    out->device_bytes = ds.device_bytes;
    out->device_copies = ds.copies;
    out->device_max_slots_held = ds.max_slots_held;
  }
  if (s->tp->stats)
    s->tp->stats(s, out);
  return 0;
}

/* The ring slot that a batch next() lent lives in: a batch carries no slot
 * number, but its sample info lies at info_offset in its slot of this
 * stream's mapping, so the slot is one division away (O(1), in any order).
 * CHIME_EINVAL for a batch this stream did not lend (its info elsewhere,
 * or its slot lending another seq: given back already). */
static int lent_slot(const chime_stream_t *s, const chime_batch_t *b,
                     uint32_t *slot) {
  const chime_ring_layout_t *l = chime_ring_layout(s->ring);
  uintptr_t first = (uintptr_t)chime_ring_slot_base(s->ring, 0);
  uintptr_t at = (uintptr_t)b->info;
  if (first == 0 || at < first + l->info_offset)
    return CHIME_EINVAL;
  uint64_t off = (uint64_t)(at - first - l->info_offset);
  if (off % l->slot_bytes != 0 || off / l->slot_bytes >= l->slots)
    return CHIME_EINVAL;
  *slot = (uint32_t)(off / l->slot_bytes);
  return s->lent[*slot] == b->seq + 1 ? 0 : CHIME_EINVAL;
}

int chime__single_release(chime_stream_t *s, const chime_batch_t *batch) {
  int rc = chime__stream_inherited(s);
  if (rc)
    return rc;
  if (s->dev)
    return chime__device_release(s->dev, batch);
  uint32_t slot;
  if (lent_slot(s, batch, &slot) != 0)
    return chime__detailf(CHIME_EINVAL,
                          "stream %" PRIu64 " on '%s': batch %" PRIu64
                          " is not lent by this stream now (given back "
                          "already, or not from its next())",
                          s->stream_id, s->table, batch->seq);
  rc = s->tp->release(s, slot);
  if (rc)
    return chime__detailf(
        rc, "stream %" PRIu64 " on '%s': batch %" PRIu64 ": %s", s->stream_id,
        s->table, batch->seq, chime_strerror(rc));
  s->lent[slot] = 0;
  return 0;
}

int chime__single_wait(chime_stream_t *s, const chime_batch_t *batch,
                       void *cuda_stream) {
  int rc = chime__stream_inherited(s);
  if (rc)
    return rc;
  if (!s->dev)
    return chime__detailf(CHIME_EINVAL,
                          "stream %" PRIu64 " on '%s': not a device stream "
                          "(its batches are in host memory)",
                          s->stream_id, s->table);
  return chime__device_wait(s->dev, batch, cuda_stream);
}

chime_mode_t chime__single_mode(const chime_stream_t *s) {
  return s->mode;
}

const char *chime__single_fallback_reason(const chime_stream_t *s) {
  return s->has_fallback ? s->fallback : NULL;
}

/* In a child of fork(): the call, its thread and the ring's control words
 * are the parent's; only this process's mapping and memory go. A pinned
 * mapping stays (unpinning would call CUDA in a forked child). */
static void close_inherited(chime_stream_t *s) {
  chime__device_forget(s->dev); /* no CUDA call: the parent's device end */
  if (s->ring != NULL && chime_ring_pinned_bytes(s->ring) == 0)
    chime_ring_destroy(s->ring);
  free(s->lent);
  chime__group_view_free(s->grp);
  free(s->remote.slot_seq);
  free(s->remote.released);
  free(s->remote.recent);
  free(s->remote.resume_seqs);
  free(s->remote.wire);
  free(s);
}

/* How long chime_stream_close() waits for the server to end the call. */
#define CLOSE_WAIT_MS 2000

/* Ends the call the way a closing learner should, in either mode: what it
 * owes the server goes out (the last releases, its version), then the
 * client half-closes and the server ends the call with OK once every batch
 * the learner did not release is back in its table; so when close returns
 * they are. Bounded by CLOSE_WAIT_MS, after which the call is cancelled
 * (the server still gives them back, a little later). */
static void end_gracefully(chime_stream_t *s) {
  if (!s->thread_started || s->close_now || atomic_load(&s->resuming) ||
      !s->rpc.call)
    return;
  int64_t end = chime__now_ms() + CLOSE_WAIT_MS;
  pthread_mutex_lock(&s->lock);
  while (!s->ended && chime__now_ms() < end) {
    int owed = s->tp->flush_locked && !s->tp->flush_locked(s);
    send_version_locked(s);
    if (!owed && !s->version_unsent && !s->half_closed &&
        !chime__rpc_pending(&s->rpc, CHIME__RPC_SEND)) {
      if (chime__rpc_half_close(&s->rpc))
        break;
      s->half_closed = 1;
    }
    pthread_mutex_unlock(&s->lock);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
}

void chime__single_close(chime_stream_t *s) {
  if (!s)
    return;
  if (s->fork_gen != chime__fork_gen()) {
    close_inherited(s);
    return;
  }
  const chime__transport_t *tp = s->tp;
  /* Copies end and their slots go back while the ring and the call are
   * still there (stream mode: as credits). */
  chime__device_close(s->dev);
  s->dev = NULL;
  pthread_mutex_lock(&s->lock);
  s->closing = 1; /* the stream's thread polls from now on */
  pthread_cond_broadcast(&s->idle_cv);
  pthread_mutex_unlock(&s->lock);
  if (tp)
    end_gracefully(s);
  if (tp && tp->close)
    tp->close(s);
  call_teardown(s);
  chime__resume_fini(s);
  if (tp && tp->fini)
    tp->fini(s);
  chime_ring_destroy(s->ring);
  free(s->lent);
  chime__group_view_free(s->grp);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->drive_mu);
  pthread_cond_destroy(&s->idle_cv);
  free(s);
}
