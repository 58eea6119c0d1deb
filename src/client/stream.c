/* Stream: a Subscribe call and the ring the learner reads. In shm mode the
 * ring is the server's, mapped through the handoff; in stream mode it is a
 * local ring filled from chunks. Either way next/release are ring calls, and
 * a thread per stream drives the call on its own completion queue. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/internal.h"
#include "wire/handoff.h"

/* How long chime_stream_close() waits for the server to take the last
 * releases (stream mode) before it cancels the call. */
#define CLOSE_WAIT_MS 2000

struct chime_stream_s {
  chime_client_t *client;
  chime_mode_t mode;
  char table[CHIME_MAX_NAME];
  char fallback[CHIME__ERRLEN];
  int has_fallback;
  chime_spec_t spec;
  chime_ring_layout_t layout;
  uint64_t send_bytes;
  uint64_t stream_id;
  chime_ring_t *ring;
  chime__remote_t remote;

  chime__rpc_t rpc; /* the Subscribe call */
  pthread_t thread;
  int thread_started;
  int opening; /* the opener, not the thread, consumes the first message */
  /* Receive side: touched by one thread at a time (opener, then thread). */
  int notice_shutdown;

  pthread_mutex_t lock; /* send side (credits) and err */
  int ended;            /* the call's status arrived: no more sends */
  int half_closed;      /* chime_stream_close() sent its last */
  int closing;          /* chime_stream_close(): send releases at once */
  uint32_t credit_pending;
  uint32_t credit_batch; /* releases gathered into one Credit message */
  uint64_t *released;    /* server seqs of the credit_pending releases */

  atomic_int end_code;     /* why next fails once the ring is cut off */
  uint64_t batches, bytes; /* taken by next (learner's thread) */
  char err[CHIME__ERRLEN];
};

static void set_err(chime_stream_t *s, const char *text) {
  pthread_mutex_lock(&s->lock);
  snprintf(s->err, sizeof(s->err), "%.*s", (int)sizeof(s->err) - 1, text);
  pthread_mutex_unlock(&s->lock);
}

/* A learner-side error (all slots held, a timeout) must not overwrite why the
 * stream ended: end_stream() sets end_code before its text, so checking it
 * under the lock leaves the end reason last. */
static void set_err_unless_ended(chime_stream_t *s, const char *text) {
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->end_code) == 0)
    snprintf(s->err, sizeof(s->err), "%.*s", (int)sizeof(s->err) - 1, text);
  pthread_mutex_unlock(&s->lock);
}

/* Batches the server may still send: credits given, not yet used. */
static uint64_t owed(chime_stream_t *s) {
  return atomic_load(&s->remote.granted) - atomic_load(&s->remote.started);
}

/* Caller holds s->lock. Releases are gathered into one Credit of
 * credit_batch: each message costs a write here and a read, a completion and
 * a wakeup in the server. Fewer are sent at once only when the server owes
 * nothing, so a learner holding batches while it waits for the next one is
 * never left without. */
static void send_credit_locked(chime_stream_t *s) {
  if (chime__rpc_pending(&s->rpc, CHIME__RPC_SEND) || s->ended ||
      s->half_closed || s->credit_pending == 0)
    return;
  if (s->credit_pending < s->credit_batch && owed(s) > 0 && !s->closing)
    return;
  Chime__V1__Credit credit = CHIME__V1__CREDIT__INIT;
  credit.batches = s->credit_pending;
  credit.n_released =
      s->credit_pending < s->layout.slots ? s->credit_pending : s->layout.slots;
  credit.released = s->released;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT;
  req.credit = &credit;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (!bb)
    return; /* retried on the next release */
  /* Counted before the server can act on it (the receive thread checks). */
  atomic_fetch_add(&s->remote.granted, s->credit_pending);
  if (chime__rpc_send(&s->rpc, bb)) {
    atomic_fetch_sub(&s->remote.granted, s->credit_pending);
    return;
  }
  s->credit_pending = 0;
}

/* Cuts the learner off the ring: next then reports end_code. */
static void end_stream(chime_stream_t *s, int code, const char *why) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&s->end_code, &expected, code) && why)
    set_err(s, why);
  if (s->ring)
    chime_ring_set_disconnected(s->ring);
}

static void on_status(chime_stream_t *s) {
  char text[CHIME__ERRLEN], why[CHIME__ERRLEN + 64];
  int code = chime__rpc_result(&s->rpc, text, sizeof(text));
  pthread_mutex_lock(&s->lock);
  s->ended = 1;
  pthread_mutex_unlock(&s->lock);
  if (s->notice_shutdown || code == CHIME_ESHUTDOWN)
    code = CHIME_ESHUTDOWN;
  else if (code == 0 || code == CHIME_EUNAVAILABLE)
    code = CHIME_EDISCONNECTED;
  snprintf(why, sizeof(why), "stream %" PRIu64 " on '%s' ended: %.400s",
           s->stream_id, s->table, text[0] ? text : chime_strerror(code));
  if (s->mode == CHIME_MODE_STREAM && code == CHIME_ESHUTDOWN && s->ring)
    chime_ring_shutdown(s->ring);
  end_stream(s, code, why);
}

static void protocol_error(chime_stream_t *s, const char *what) {
  end_stream(s, CHIME_EPROTO, what);
  chime__rpc_cancel(&s->rpc);
}

/* A message after Opened: chunks (stream mode) or notices. */
static void on_message(chime_stream_t *s, grpc_byte_buffer *bb) {
  char err[CHIME__ERRLEN];
  if (s->mode == CHIME_MODE_STREAM) {
    int rc = chime__remote_chunk(&s->remote, bb, err, sizeof(err));
    if (rc == 0)
      return;
    if (rc != CHIME_ENOTFOUND) {
      if (rc == CHIME_ESHUTDOWN)
        return; /* closing */
      protocol_error(s, err);
      return;
    }
  }
  Chime__V1__SubscribeResponse *r =
      (Chime__V1__SubscribeResponse *)chime__unpack(
          &chime__v1__subscribe_response__descriptor, bb);
  if (!r || r->kind_case != CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE) {
    snprintf(err, sizeof(err), "stream %" PRIu64 ": unexpected %s message",
             s->stream_id, r ? "non-notice" : "malformed");
    protocol_error(s, err);
  } else if (chime__notice_err(r->notice->error, r->notice->code) ==
             CHIME_ESHUTDOWN) {
    s->notice_shutdown = 1;
    if (s->mode == CHIME_MODE_STREAM)
      chime_ring_shutdown(s->ring);
  }
  if (r)
    protobuf_c_message_free_unpacked(&r->base, NULL);
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
    if (!s->rpc.recv_bb)
      break; /* the call is over; its status follows */
    if (s->opening)
      break; /* the opener takes it */
    {
      /* Ask for the next message before copying this one, so gRPC assembles
       * it while this thread copies. */
      grpc_byte_buffer *bb = s->rpc.recv_bb;
      s->rpc.recv_bb = NULL;
      if (chime__rpc_recv(&s->rpc))
        protocol_error(s, "stream: cannot receive");
      on_message(s, bb);
      grpc_byte_buffer_destroy(bb);
    }
    break;
  case CHIME__RPC_STATUS:
    on_status(s);
    break;
  case CHIME__RPC_SEND:
    /* A credit (or the half-close) went: the next may go now. */
    pthread_mutex_lock(&s->lock);
    send_credit_locked(s);
    pthread_mutex_unlock(&s->lock);
    break;
  default:
    break;
  }
  return 0;
}

static int busy(const chime_stream_t *s) {
  return chime__rpc_busy(&s->rpc);
}

static void *stream_thread(void *arg) {
  chime_stream_t *s = arg;
  while (busy(s))
    pump(s, gpr_inf_future(GPR_CLOCK_MONOTONIC));
  return NULL;
}

/* Cancels the call, waits for its operations and frees it. */
static void call_teardown(chime_stream_t *s) {
  if (s->rpc.call) {
    chime__rpc_cancel(&s->rpc);
    if (s->thread_started)
      pthread_join(s->thread, NULL);
    s->thread_started = 0;
    s->opening = 0;
    while (busy(s))
      pump(s, gpr_inf_future(GPR_CLOCK_MONOTONIC));
  }
  chime__rpc_destroy(&s->rpc);
  s->ended = 0;
  s->half_closed = 0;
  s->credit_pending = 0;
  s->notice_shutdown = 0;
  atomic_store(&s->end_code, 0);
}

/* Sends Open and waits for Opened. *opened is freed by the caller. */
static int subscribe(chime_stream_t *s, chime_mode_t mode,
                     const chime_stream_opts_t *o, uint32_t prefetch,
                     Chime__V1__Opened **opened,
                     Chime__V1__SubscribeResponse **resp, char *err,
                     size_t errlen) {
  char boot_id[CHIME__BOOT_ID_LEN], host[CHIME__HOSTNAME_LEN];
  *opened = NULL;
  *resp = NULL;
  chime__host_identity(boot_id, sizeof(boot_id), host, sizeof(host));
  if (chime__rpc_init(&s->rpc))
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");

  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = s->table;
  open.batch_size = o->batch_size;
  open.slots = o->slots;
  open.mode = mode == CHIME_MODE_SHM ? CHIME__V1__MODE__MODE_SHM
                                     : CHIME__V1__MODE__MODE_STREAM;
  open.prefetch = mode == CHIME_MODE_STREAM ? prefetch : 0;
  open.boot_id = boot_id;
  open.hostname = host;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (!bb)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  s->opening = 1;
  if (chime__rpc_start(&s->rpc, s->client, CHIME__M_SUBSCRIBE,
                       gpr_inf_future(GPR_CLOCK_REALTIME), 0, bb) ||
      chime__rpc_recv(&s->rpc))
    return chime__fail(err, errlen, CHIME_EPROTO, "cannot start call");

  gpr_timespec deadline = chime__deadline_ms(o->open_timeout_ms);
  while (chime__rpc_pending(&s->rpc, CHIME__RPC_RECV)) {
    if (pump(s, deadline) == CHIME_ETIMEDOUT)
      return chime__fail(err, errlen, CHIME_ETIMEDOUT,
                         "no answer to Subscribe within %d ms",
                         o->open_timeout_ms);
  }
  if (!s->rpc.recv_bb) {
    /* Refused: the status carries the reason. */
    while (chime__rpc_pending(&s->rpc, CHIME__RPC_STATUS)) {
      if (pump(s, deadline) == CHIME_ETIMEDOUT)
        return chime__fail(err, errlen, CHIME_ETIMEDOUT,
                           "Subscribe ended without a status");
    }
    int code = chime__rpc_result(&s->rpc, err, errlen);
    if (!err[0])
      snprintf(err, errlen, "%s", chime_strerror(code));
    return code ? code : CHIME_EPROTO;
  }
  *resp = (Chime__V1__SubscribeResponse *)chime__unpack(
      &chime__v1__subscribe_response__descriptor, s->rpc.recv_bb);
  grpc_byte_buffer_destroy(s->rpc.recv_bb);
  s->rpc.recv_bb = NULL;
  s->opening = 0;
  if (!*resp ||
      (*resp)->kind_case != CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED ||
      !(*resp)->opened->layout)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Subscribe: first answer is not Opened");
  *opened = (*resp)->opened;
  if ((*opened)->mode != open.mode)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Subscribe: asked for %s, server opened mode %d",
                       chime_mode_name(mode), (int)(*opened)->mode);
  return 0;
}

/* The server's layout must be the one this library computes for the spec. */
static int check_layout(chime_stream_t *s, const Chime__V1__Layout *l,
                        const chime_stream_opts_t *o, char *err,
                        size_t errlen) {
  char why[256];
  int rc =
      chime__spec_from_leaves(&s->spec, l->spec, l->n_spec, why, sizeof(why));
  if (rc)
    return chime__fail(err, errlen, CHIME_EPROTO, "Opened: bad spec: %s", why);
  rc = chime_ring_layout(&s->layout, &s->spec, o->batch_size, o->slots, why,
                         sizeof(why));
  if (rc)
    return chime__fail(err, errlen, CHIME_EPROTO, "Opened: layout: %s", why);
  int same = l->slots == s->layout.slots &&
             l->batch_size == s->layout.batch_size &&
             l->slot_bytes == s->layout.slot_bytes &&
             l->info_offset == s->layout.info_offset &&
             l->n_leaf_offset == s->spec.nleaves;
  for (size_t i = 0; same && i < l->n_leaf_offset; i++)
    same = l->leaf_offset[i] == s->layout.leaf_offset[i];
  uint64_t send = s->layout.info_offset +
                  (uint64_t)o->batch_size * sizeof(chime_sample_info_t);
  if (!same || l->send_bytes != send || send > s->layout.slot_bytes)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Opened: the server's ring layout differs from this "
                       "library's (version mismatch?)");
  s->send_bytes = send;
  return 0;
}

static int attach_shm(chime_stream_t *s, const Chime__V1__Opened *op,
                      const chime_stream_opts_t *o, char *err, size_t errlen) {
  const Chime__V1__Handoff *h = op->handoff;
  int fd = -1;
  if (!h || h->nonce.len != CHIME__HANDOFF_NONCE_BYTES)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Opened: shm mode without a valid handoff");
  int rc = chime__handoff_fetch(h->socket_path, h->token.data, h->token.len,
                                o->open_timeout_ms, &fd, err, errlen);
  if (rc)
    return rc;
  rc = chime_ring_attach(&s->ring, fd, h->nonce.data);
  close(fd);
  if (rc)
    return chime__fail(err, errlen, rc, "ring attach: %s", chime_strerror(rc));
  const chime_ring_layout_t *got = chime_ring_get_layout(s->ring);
  if (got->slot_bytes != s->layout.slot_bytes ||
      got->slots != s->layout.slots ||
      got->info_offset != s->layout.info_offset) {
    chime_ring_destroy(s->ring);
    s->ring = NULL;
    return chime__fail(err, errlen, CHIME_ECORRUPT,
                       "ring attach: mapped ring does not match Opened");
  }
  return 0;
}

/* One attempt in one concrete mode. */
static int open_mode(chime_stream_t *s, chime_mode_t mode,
                     const chime_stream_opts_t *o, uint32_t prefetch,
                     int *attach_failed, char *err, size_t errlen) {
  Chime__V1__Opened *op = NULL;
  Chime__V1__SubscribeResponse *resp = NULL;
  *attach_failed = 0;
  s->mode = mode;
  int rc = subscribe(s, mode, o, prefetch, &op, &resp, err, errlen);
  if (rc)
    goto cleanup;
  s->stream_id = op->stream_id;
  rc = check_layout(s, op->layout, o, err, errlen);
  if (rc)
    goto cleanup;
  if (mode == CHIME_MODE_SHM) {
    rc = attach_shm(s, op, o, err, errlen);
    *attach_failed = rc != 0;
  } else {
    rc = chime_ring_create(&s->ring, &s->spec, o->batch_size, o->slots);
    if (rc)
      chime__fail(err, errlen, rc, "local ring: %s", chime_strerror(rc));
    s->remote.ring = s->ring;
    s->remote.send_bytes = s->send_bytes;
    s->remote.slot_seq = calloc(o->slots, sizeof(uint64_t));
    s->released = calloc(o->slots, sizeof(uint64_t));
    if (rc == 0 && (s->remote.slot_seq == NULL || s->released == NULL))
      rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    /* The server lends at most slots - 1 batches whatever the prefetch. */
    uint32_t lent = prefetch < o->slots ? prefetch : o->slots - 1;
    atomic_store(&s->remote.granted, lent);
    s->credit_batch = lent / 2 > 1 ? lent / 2 : 1;
  }
  if (rc == 0 && chime__rpc_recv(&s->rpc))
    rc = chime__fail(err, errlen, CHIME_EPROTO, "cannot receive");

cleanup:
  if (resp)
    protobuf_c_message_free_unpacked(&resp->base, NULL);
  if (rc) {
    call_teardown(s);
    chime_ring_destroy(s->ring);
    s->ring = NULL;
    free(s->remote.slot_seq);
    s->remote.slot_seq = NULL;
    free(s->released);
    s->released = NULL;
  }
  return rc;
}

int chime_stream_open(chime_client_t *client, const char *table,
                      const chime_stream_opts_t *opts, chime_stream_t **out) {
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  char err[CHIME__ERRLEN] = "";
  chime_server_info_t *info = NULL;
  chime_table_info_t ti;
  chime_stream_t *s = NULL;
  int rc = 0;
  if (!client || !table || !opts || !out)
    return CHIME_EINVAL;
  *out = NULL;
  o = *opts;
  if (o.slots == 0)
    o.slots = 8;
  if (o.open_timeout_ms <= 0)
    o.open_timeout_ms = 10000;
  uint32_t prefetch = o.prefetch ? o.prefetch : o.slots - 1;
  if (strlen(table) >= CHIME_MAX_NAME || o.batch_size == 0 ||
      o.batch_size > CHIME_RING_MAX_BATCH || o.slots < 2 ||
      o.slots > CHIME_RING_MAX_SLOTS || prefetch > o.slots ||
      (o.mode != CHIME_MODE_AUTO && o.mode != CHIME_MODE_SHM &&
       o.mode != CHIME_MODE_STREAM)) {
    rc = chime__fail(err, sizeof(err), CHIME_EINVAL,
                     "stream: need 0 < batch_size <= %u, 2 <= slots <= %u, "
                     "prefetch <= slots, a known mode and a table name",
                     CHIME_RING_MAX_BATCH, CHIME_RING_MAX_SLOTS);
    goto cleanup;
  }
  s = calloc(1, sizeof(*s));
  if (!s) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  s->client = client;
  snprintf(s->table, sizeof(s->table), "%s", table);
  pthread_mutex_init(&s->lock, NULL);

  chime_mode_t want = o.mode;
  if (want != CHIME_MODE_STREAM) {
    rc = chime__table_lookup(client, table, &ti, &info, err, sizeof(err));
    if (rc)
      goto cleanup;
    char boot_id[CHIME__BOOT_ID_LEN], host[CHIME__HOSTNAME_LEN];
    chime__host_identity(boot_id, sizeof(boot_id), host, sizeof(host));
    const char *differs = NULL;
    if (!info->boot_id[0] || !boot_id[0])
      differs = "host identity unknown (no boot_id)";
    else if (strcmp(boot_id, info->boot_id) != 0)
      differs = "server on another host (boot_id differs)";
    else if (strcmp(host, info->hostname) != 0)
      differs = "server on another host (hostname differs)";
    if (differs && want == CHIME_MODE_SHM) {
      rc = chime__fail(err, sizeof(err), CHIME_ENOTSUP,
                       "shm mode needs the server on this host: %s", differs);
      goto cleanup;
    }
    if (differs) {
      snprintf(s->fallback, sizeof(s->fallback), "%s", differs);
      s->has_fallback = 1;
      want = CHIME_MODE_STREAM;
    }
  }

  int attach_failed = 0;
  if (want != CHIME_MODE_STREAM) {
    rc = open_mode(s, CHIME_MODE_SHM, &o, prefetch, &attach_failed, err,
                   sizeof(err));
    if (rc && attach_failed && o.mode == CHIME_MODE_AUTO) {
      snprintf(s->fallback, sizeof(s->fallback), "shm attach failed: %.450s",
               err);
      s->has_fallback = 1;
      want = CHIME_MODE_STREAM;
    } else if (rc) {
      goto cleanup;
    }
  }
  if (want == CHIME_MODE_STREAM) {
    rc = open_mode(s, CHIME_MODE_STREAM, &o, prefetch, &attach_failed, err,
                   sizeof(err));
    if (rc)
      goto cleanup;
  }

  if (o.pin_host_memory) {
    char why[CHIME_PIN_ERRLEN];
    rc = chime_ring_pin(s->ring, why, sizeof(why));
    if (rc) {
      chime__fail(err, sizeof(err), rc, "pin_host_memory: %s", why);
      goto cleanup;
    }
  }
  if (pthread_create(&s->thread, NULL, stream_thread, s) != 0) {
    rc = chime__fail(err, sizeof(err), CHIME_ESYS, "cannot start thread");
    goto cleanup;
  }
  s->thread_started = 1;
  *out = s;
  s = NULL;

cleanup:
  chime_server_info_free(info);
  if (rc) {
    chime__client_set_error(client, rc, err);
    chime_stream_close(s);
  }
  return rc;
}

int chime_stream_next(chime_stream_t *stream, chime_batch_t *out,
                      int timeout_ms) {
  chime_stream_t *s = stream;
  if (!s || !out)
    return CHIME_EINVAL;
  chime_ring_view_t v;
  int rc = chime_ring_next(s->ring, &v,
                           s->mode == CHIME_MODE_STREAM ? 0 : timeout_ms);
  if (rc == CHIME_ETIMEDOUT && s->mode == CHIME_MODE_STREAM) {
    /* About to wait: gathered credits go now if the server owes nothing
     * (a completing credit send re-checks, see pump). */
    pthread_mutex_lock(&s->lock);
    send_credit_locked(s);
    pthread_mutex_unlock(&s->lock);
    rc = chime_ring_next(s->ring, &v, timeout_ms);
  }
  if (rc == CHIME_EDISCONNECTED || rc == CHIME_ESHUTDOWN) {
    int end = atomic_load(&s->end_code);
    if (rc == CHIME_EDISCONNECTED && end)
      rc = end;
    set_err_unless_ended(s, rc == CHIME_ESHUTDOWN ? "server shutting down"
                                                  : "server disconnected");
    return rc;
  }
  if (rc) {
    set_err_unless_ended(s, chime_strerror(rc));
    return rc;
  }
  out->seq = v.seq;
  out->count = v.count;
  out->nleaves = s->spec.nleaves;
  out->slot = v.slot;
  out->info = v.info;
  for (uint32_t i = 0; i < s->spec.nleaves; i++) {
    const chime_leaf_t *l = &s->spec.leaves[i];
    chime_batch_leaf_t *b = &out->leaf[i];
    b->name = l->name;
    b->dtype = l->dtype;
    b->ndim = l->ndim + 1;
    b->shape[0] = v.count;
    for (uint32_t d = 0; d < l->ndim; d++)
      b->shape[d + 1] = l->shape[d];
    b->data = v.leaf[i];
    b->bytes = (uint64_t)v.count * chime_leaf_bytes(l);
    s->bytes += b->bytes;
  }
  s->batches++;
  return 0;
}

int chime_stream_get_stats(const chime_stream_t *stream,
                           chime_stream_local_stats_t *out) {
  const chime_stream_t *s = stream;
  if (!s || !out)
    return CHIME_EINVAL;
  chime_ring_stats_t rs;
  chime_ring_get_stats(s->ring, &rs);
  memset(out, 0, sizeof(*out));
  out->mode = s->mode;
  out->stream_id = s->stream_id;
  out->batches = s->batches;
  out->bytes = s->bytes;
  if (s->mode == CHIME_MODE_STREAM) {
    out->received_bytes =
        atomic_load_explicit(&s->remote.bytes, memory_order_relaxed);
    out->credits = atomic_load(&s->remote.granted);
  }
  out->leases = rs.leases;
  out->max_leases = rs.max_leases;
  out->consumer_wait_ns = rs.consumer_wait_ns;
  out->pinned_bytes = chime_ring_pinned_bytes(s->ring);
  return 0;
}

int chime_batch_release(chime_stream_t *stream, const chime_batch_t *batch) {
  chime_stream_t *s = stream;
  if (!s || !batch)
    return CHIME_EINVAL;
  /* The slot's server seq, read while the slot is still held (the receive
   * thread refills it only once released). */
  uint64_t seq = s->mode == CHIME_MODE_STREAM && batch->slot < s->layout.slots
                     ? s->remote.slot_seq[batch->slot]
                     : 0;
  int rc = chime_ring_release(s->ring, batch->slot);
  if (rc || s->mode != CHIME_MODE_STREAM)
    return rc;
  pthread_mutex_lock(&s->lock);
  /* At most slots held, so at most slots releases wait to be sent. */
  if (s->credit_pending < s->layout.slots)
    s->released[s->credit_pending] = seq;
  s->credit_pending++;
  send_credit_locked(s);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

chime_mode_t chime_stream_mode(const chime_stream_t *stream) {
  return stream ? stream->mode : CHIME_MODE_AUTO;
}

const char *chime_stream_fallback_reason(const chime_stream_t *stream) {
  return stream && stream->has_fallback ? stream->fallback : NULL;
}

const char *chime_stream_last_error(const chime_stream_t *stream) {
  return stream ? stream->err : "no stream";
}

/* Stream mode: a fifo batch stays the learner's until a Credit names it,
 * and the server gives back what was never named. So the last releases go
 * out, then the client half-closes and the server ends the call once it
 * has read them; bounded by CLOSE_WAIT_MS, after which the call is
 * cancelled (and those batches may be delivered again elsewhere). */
static void close_gracefully(chime_stream_t *s) {
  if (s->mode != CHIME_MODE_STREAM || !s->rpc.call || !s->thread_started)
    return;
  int64_t end = chime__mono_ms() + CLOSE_WAIT_MS;
  pthread_mutex_lock(&s->lock);
  s->closing = 1;
  while (!s->ended && chime__mono_ms() < end) {
    send_credit_locked(s);
    if (!chime__rpc_pending(&s->rpc, CHIME__RPC_SEND) &&
        s->credit_pending == 0 && !s->half_closed) {
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

void chime_stream_close(chime_stream_t *stream) {
  chime_stream_t *s = stream;
  if (!s)
    return;
  close_gracefully(s);
  /* Unblocks the thread if it waits for a local slot. */
  if (s->mode == CHIME_MODE_STREAM && s->ring)
    chime_ring_shutdown(s->ring);
  call_teardown(s);
  if (s->mode == CHIME_MODE_STREAM)
    chime__remote_abandon(&s->remote);
  chime_ring_destroy(s->ring);
  free(s->remote.slot_seq);
  free(s->released);
  pthread_mutex_destroy(&s->lock);
  free(s);
}
