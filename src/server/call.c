/* One gRPC call as a small state machine: a pending RECV_CLOSE_ON_SERVER to
 * learn when the call ends, at most one RECV_MESSAGE, and a send queue so at
 * most one send batch is in flight (gRPC's rule). Every batch in flight holds
 * a reference; the call is freed when the last one goes.
 * The other end of a gRPC call, as the server and as the client drive it:
 * src/client/call.c (one basename, two ends). */
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/call.h"
#include "wire/message.h"

struct chime__call_s {
  chime__callhost_t *host;
  int method;
  const chime__call_vt_t *vt;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details; /* unregistered methods only */
  grpc_byte_buffer *payload;
  chime__tag_t req_tag, recv_tag, send_tag, close_tag;
  pthread_mutex_t mu;
  int refs;
  grpc_byte_buffer *recv_bb;
  int cancelled;
  int closed;
  int recving;
  /* The last receive failed (the call is over: cancelled, its connection
   * lost) rather than the client half-closing: on_message then gets NULL
   * too (mu). */
  int recv_failed;
  int sending;
  int meta_sent;
  int finishing;
  chime__send_t *q_head, *q_tail, *inflight;
  chime__link_t link; /* on the host's live calls */
  void *state;
};

struct chime__send_s {
  chime__send_t *next;
  grpc_byte_buffer *bb; /* NULL: the final status */
  grpc_status_code code;
  grpc_slice details;
  grpc_metadata md[1]; /* the final status: chime-error, when it failed */
  size_t nmd;
};

static void free_sends(chime__send_t *s) {
  while (s != NULL) {
    chime__send_t *n = s->next;
    if (s->bb != NULL) {
      grpc_byte_buffer_destroy(s->bb);
    } else {
      grpc_slice_unref(s->details);
      for (size_t i = 0; i < s->nmd; i++)
        grpc_slice_unref(s->md[i].value);
    }
    free(s);
    s = n;
  }
}

chime_server_t *chime__call_server(const chime__call_t *c) {
  return c->host->srv;
}

int chime__call_method(const chime__call_t *c) {
  return c->method;
}

grpc_byte_buffer *chime__call_payload(const chime__call_t *c) {
  return c->payload;
}

const grpc_metadata_array *chime__call_metadata(const chime__call_t *c) {
  return &c->md;
}

void chime__call_lock(chime__call_t *c) {
  pthread_mutex_lock(&c->mu);
}

void chime__call_unlock(chime__call_t *c) {
  pthread_mutex_unlock(&c->mu);
}

void *chime__call_state(const chime__call_t *c) {
  return c->state;
}

void chime__call_set_state(chime__call_t *c, void *state) {
  pthread_mutex_lock(&c->mu);
  c->state = state;
  pthread_mutex_unlock(&c->mu);
}

int chime__call_closed(const chime__call_t *c) {
  return c->closed;
}

int chime__call_cancelled(const chime__call_t *c) {
  return c->cancelled;
}

int chime__call_recv_failed(const chime__call_t *c) {
  return c->recv_failed;
}

void chime__call_ref(chime__call_t *c) {
  pthread_mutex_lock(&c->mu);
  c->refs++;
  pthread_mutex_unlock(&c->mu);
}

void chime__call_stop(chime__call_t *c) {
  if (c->vt->on_stop != NULL)
    c->vt->on_stop(c);
}

void chime__call_cancel(chime__call_t *c, grpc_status_code status,
                        const char *why) {
  grpc_call_cancel_with_status(c->call, status, why, NULL);
}

void chime__call_each(chime__callhost_t *h, void (*fn)(chime__call_t *c)) {
  pthread_mutex_lock(h->mu);
  uint32_t n = h->ncalls, i = 0;
  chime__call_t **v = calloc(n ? n : 1, sizeof(*v));
  CHIME__LIST_EACH(l, &h->calls) {
    if (v == NULL || i >= n)
      break;
    chime__call_t *c = CHIME__CONTAINER(l, chime__call_t, link);
    /* A call whose last reference is gone is being freed: not ours to
     * revive. */
    pthread_mutex_lock(&c->mu);
    int alive = c->refs > 0;
    if (alive)
      c->refs++;
    pthread_mutex_unlock(&c->mu);
    if (alive)
      v[i++] = c;
  }
  pthread_mutex_unlock(h->mu);
  for (uint32_t k = 0; k < i; k++) {
    fn(v[k]);
    chime__call_unref(v[k]);
  }
  free(v);
}

static void call_free(chime__call_t *c) {
  chime__callhost_t *h = c->host;
  if (c->vt != NULL && c->vt->on_free != NULL)
    c->vt->on_free(c);
  free_sends(c->q_head);
  free_sends(c->inflight);
  if (c->payload != NULL)
    grpc_byte_buffer_destroy(c->payload);
  if (c->recv_bb != NULL)
    grpc_byte_buffer_destroy(c->recv_bb);
  grpc_metadata_array_destroy(&c->md);
  grpc_call_details_destroy(&c->details);
  if (c->call != NULL)
    grpc_call_unref(c->call);
  pthread_mutex_lock(h->mu);
  if (chime__list_has(&h->calls, &c->link)) {
    chime__list_remove(&h->calls, &c->link);
    h->ncalls--;
    if (c->method == CHIME__M_INSERT)
      h->insert_calls--;
    pthread_cond_broadcast(h->cond);
  }
  pthread_mutex_unlock(h->mu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

void chime__call_unref(chime__call_t *c) {
  pthread_mutex_lock(&c->mu);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (last)
    call_free(c);
}

/* Called with c->mu held. Starts the next send batch if none is in flight. A
 * message directly followed by the final status goes in one batch. Returns
 * sends to free once c->mu is released: freeing a chunk may release a ring
 * slot, which takes a stream's lock, and that lock is never taken under a
 * call's. */
static chime__send_t *pump_locked(chime__call_t *c) {
  grpc_op ops[3];
  size_t n = 0;
  if (c->sending || c->q_head == NULL)
    return NULL;
  if (c->closed) {
    chime__send_t *drop = c->q_head;
    c->q_head = c->q_tail = NULL;
    return drop;
  }
  memset(ops, 0, sizeof(ops));
  if (!c->meta_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->meta_sent = 1;
  }
  chime__send_t *first = c->q_head;
  chime__send_t *last = first;
  if (first->bb != NULL) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = first->bb;
    if (first->next != NULL && first->next->bb == NULL)
      last = first->next;
  }
  if (last->bb == NULL) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = last->code;
    ops[n].data.send_status_from_server.trailing_metadata_count = last->nmd;
    ops[n].data.send_status_from_server.trailing_metadata = last->md;
    ops[n++].data.send_status_from_server.status_details = &last->details;
  }
  c->q_head = last->next;
  if (c->q_head == NULL)
    c->q_tail = NULL;
  last->next = NULL;
  c->inflight = first;
  c->sending = 1;
  c->refs++;
  if (grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL) !=
      GRPC_CALL_OK) {
    /* Only a bug in this file gets here; drop the sends, keep serving. */
    chime__log(CHIME_LOG_ERROR, "internal error: send batch refused");
    c->inflight = NULL;
    c->sending = 0;
    c->refs--;
    return first;
  }
  return NULL;
}

static void on_send_done(chime__tag_t *tag, int ok) {
  chime__call_t *c =
      (chime__call_t *)((char *)tag - offsetof(chime__call_t, send_tag));
  chime__send_t *done;
  chime__send_t *dropped = NULL;
  pthread_mutex_lock(&c->mu);
  done = c->inflight;
  c->inflight = NULL;
  c->sending = 0;
  if (!ok) {
    dropped = c->q_head;
    c->q_head = c->q_tail = NULL;
  }
  chime__send_t *refused = pump_locked(c);
  int idle = ok && !c->sending && !c->closed && !c->finishing;
  pthread_mutex_unlock(&c->mu);
  free_sends(done);
  free_sends(dropped);
  free_sends(refused);
  if (idle && c->vt != NULL && c->vt->on_sent != NULL)
    c->vt->on_sent(c);
  chime__call_unref(c);
}

int chime__call_sending(chime__call_t *c) {
  pthread_mutex_lock(&c->mu);
  int busy = c->sending;
  pthread_mutex_unlock(&c->mu);
  return busy;
}

static int enqueue(chime__call_t *c, chime__send_t *s) {
  pthread_mutex_lock(&c->mu);
  if (c->finishing || c->closed) {
    pthread_mutex_unlock(&c->mu);
    free_sends(s);
    return CHIME_ECLOSED;
  }
  if (s->bb == NULL)
    c->finishing = 1;
  if (c->q_tail != NULL)
    c->q_tail->next = s;
  else
    c->q_head = s;
  c->q_tail = s;
  chime__send_t *refused = pump_locked(c);
  pthread_mutex_unlock(&c->mu);
  free_sends(refused);
  return 0;
}

int chime__call_send(chime__call_t *c, grpc_byte_buffer *bb) {
  chime__send_t *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    grpc_byte_buffer_destroy(bb);
    return CHIME_ENOMEM;
  }
  s->bb = bb;
  return enqueue(c, s);
}

int chime__call_send_msg(chime__call_t *c, const void *msg) {
  return chime__call_send(c, chime__msg_pack(msg));
}

static void vfinish(chime__call_t *c, int err, grpc_status_code code,
                    const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static void vfinish(chime__call_t *c, int err, grpc_status_code code,
                    const char *fmt, va_list ap) {
  va_list again;
  char *msg = NULL;
  chime__send_t *s = calloc(1, sizeof(*s));
  /* Sized to fit: a pinning error names the whole ladder, and a prefix of it
   * would hide the rung that matters. */
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n >= 0)
    msg = malloc((size_t)n + 1);
  if (s == NULL || msg == NULL) {
    free(s);
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "out of memory", NULL);
    goto out;
  }
  vsnprintf(msg, (size_t)n + 1, fmt, again);
  s->code = code;
  s->details = grpc_slice_from_copied_buffer(msg, (size_t)n);
  if (err != CHIME_OK)
    chime__err_metadata(&s->md[s->nmd++], err);
  enqueue(c, s);
out:
  va_end(again);
  free(msg);
}

void chime__call_finish(chime__call_t *c, chime_errno_t err, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  vfinish(c, err, chime__status_from_err(err), fmt, ap);
  va_end(ap);
}

void chime__call_finish_as(chime__call_t *c, chime_errno_t err,
                           grpc_status_code status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfinish(c, err, status, fmt, ap);
  va_end(ap);
}

void chime__call_drop_queued(chime__call_t *c) {
  chime__send_t *q = NULL;
  pthread_mutex_lock(&c->mu);
  if (!c->finishing) { /* never drop the final status */
    q = c->q_head;
    c->q_head = c->q_tail = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  free_sends(q);
}

/* A request larger than its method takes (wire/method.h) ends the call
 * before its handler sees it: 1 then, with the call finished. */
static int refuse_oversized(chime__call_t *c, grpc_byte_buffer *bb) {
  unsigned max =
      c->method < CHIME__M_COUNT ? chime__method_max_request[c->method] : 0;
  size_t len = bb != NULL ? grpc_byte_buffer_length(bb) : 0;
  if (max == 0 || len <= max)
    return 0;
  chime__call_finish(c, CHIME_EINVAL,
                     "%s: a request of %zu bytes; this method takes at most "
                     "%u",
                     strrchr(chime__method_path[c->method], '/') + 1, len, max);
  return 1;
}

static void on_recv_done(chime__tag_t *tag, int ok) {
  chime__call_t *c =
      (chime__call_t *)((char *)tag - offsetof(chime__call_t, recv_tag));
  pthread_mutex_lock(&c->mu);
  grpc_byte_buffer *bb = c->recv_bb;
  c->recv_bb = NULL;
  c->recving = 0;
  c->recv_failed = !ok;
  pthread_mutex_unlock(&c->mu);
  if (!ok && bb != NULL) {
    grpc_byte_buffer_destroy(bb);
    bb = NULL;
  }
  if (refuse_oversized(c, bb))
    grpc_byte_buffer_destroy(bb);
  else
    c->vt->on_message(c, bb);
  chime__call_unref(c);
}

void chime__call_recv(chime__call_t *c) {
  grpc_op op;
  pthread_mutex_lock(&c->mu);
  if (c->recving || c->finishing || c->closed) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv_bb;
  c->recving = 1;
  c->refs++;
  if (grpc_call_start_batch(c->call, &op, 1, &c->recv_tag, NULL) !=
      GRPC_CALL_OK) {
    c->recving = 0;
    c->refs--;
  }
  pthread_mutex_unlock(&c->mu);
}

static void on_close_done(chime__tag_t *tag, int ok) {
  chime__call_t *c =
      (chime__call_t *)((char *)tag - offsetof(chime__call_t, close_tag));
  (void)ok;
  chime__send_t *q;
  pthread_mutex_lock(&c->mu);
  c->closed = 1;
  q = c->q_head;
  c->q_head = c->q_tail = NULL;
  pthread_mutex_unlock(&c->mu);
  free_sends(q);
  if (c->vt->on_close != NULL)
    c->vt->on_close(c);
  chime__call_unref(c); /* the batch's reference */
  chime__call_unref(c); /* the call's lifetime reference */
}

/* Once stopping, only an open method (health) is asked for again, and only
 * until the grpc_server shuts down (server.c sets host.closing under mu
 * first): a probe during the stop hears NOT_SERVING instead of waiting. */
static void request_while_stopping(chime__callhost_t *h, int method) {
  pthread_mutex_lock(h->mu);
  if (!h->closing)
    chime__request_call(h, method);
  pthread_mutex_unlock(h->mu);
}

/* The call arrived: watch for its end, then hand it to its method. */
static void on_request_done(chime__tag_t *tag, int ok) {
  chime__call_t *c =
      (chime__call_t *)((char *)tag - offsetof(chime__call_t, req_tag));
  chime__callhost_t *h = c->host;
  grpc_op op;
  if (!ok) { /* the server is shutting down */
    call_free(c);
    return;
  }
  pthread_mutex_lock(h->mu);
  chime__list_push(&h->calls, &c->link);
  h->ncalls++;
  int over = h->max_calls != 0 && h->ncalls > h->max_calls;
  if (c->method == CHIME__M_INSERT) {
    h->insert_calls++; /* before any of its operations can complete */
    pthread_cond_broadcast(h->cond);
  }
  pthread_mutex_unlock(h->mu);
  if (!atomic_load(h->stopping))
    chime__request_call(h, c->method);
  else if (c->vt->open)
    request_while_stopping(h, c->method);

  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  /* The batch's reference, and ours until on_start returned: a client that
   * cancels at once completes the batch on another completion-queue thread,
   * whose on_close_done drops the batch's and the lifetime references while
   * this thread still reads the call (found by fuzz_requests). */
  pthread_mutex_lock(&c->mu);
  c->refs += 2;
  grpc_call_error e =
      grpc_call_start_batch(c->call, &op, 1, &c->close_tag, NULL);
  pthread_mutex_unlock(&c->mu);
  if (e != GRPC_CALL_OK) {
    grpc_call_cancel(c->call, NULL);
    chime__call_unref(c);
    chime__call_unref(c);
    goto out;
  }
  if (atomic_load(h->stopping) && !c->vt->open) {
    chime__call_finish(c, CHIME_ESHUTDOWN, "shutting down");
    goto out;
  }
  if (over && !c->vt->open) {
    chime__call_finish(c, CHIME_ERESOURCE,
                       "the server holds %u calls at once (max_calls); "
                       "try again later",
                       h->max_calls);
    goto out;
  }
  char why[128];
  int rc = c->vt->open || h->admit == NULL
               ? 0
               : h->admit(h->admit_arg, c->method, &c->md, why, sizeof(why));
  if (rc != 0) {
    chime__call_finish(c, (chime_errno_t)rc, "%s", why);
    goto out;
  }
  if (refuse_oversized(c, c->payload))
    goto out;
  c->vt->on_start(c);
out:
  chime__call_unref(c);
}

/* Any other method, when chime owns the grpc_server: without someone asking
 * for unregistered calls gRPC would hold them until the client's deadline. */
static void unknown_on_start(chime__call_t *c) {
  chime__call_finish(c, CHIME_ENOTSUP,
                     "unknown method (chime.v1.Chime has GetInfo, Stats, "
                     "Insert, Subscribe, MutatePriorities, Checkpoint; "
                     "grpc.health.v1.Health has Check)");
}

static void unknown_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

static const chime__call_vt_t unknown_vt = {
    .on_start = unknown_on_start,
    .on_message = unknown_on_message,
};

/* Where a call of `method` completes: an Insert on the insert queue, when
 * the service made one (service.c), every other call on the host's. */
static grpc_completion_queue *call_cq(chime__callhost_t *h, int method) {
  return method == CHIME__M_INSERT && h->insert_cq != NULL ? h->insert_cq
                                                           : h->cq;
}

int chime__request_call(chime__callhost_t *h, int method) {
  chime__call_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return CHIME_ENOMEM;
  c->host = h;
  c->method = method;
  c->vt = method < CHIME__M_COUNT ? h->vt[method] : &unknown_vt;
  c->refs = 1;
  c->req_tag.fn = on_request_done;
  c->recv_tag.fn = on_recv_done;
  c->send_tag.fn = on_send_done;
  c->close_tag.fn = on_close_done;
  pthread_mutex_init(&c->mu, NULL);
  grpc_metadata_array_init(&c->md);
  int unary = chime__method_one_request(method);
  grpc_call_error e;
  grpc_call_details_init(&c->details);
  /* The new call is announced on cq; its own operations complete where
   * the service says (service.c). */
  grpc_completion_queue *bound = call_cq(h, method);
  if (method == CHIME__M_COUNT)
    e = grpc_server_request_call(h->gs, &c->call, &c->details, &c->md, bound,
                                 h->cq, &c->req_tag);
  else
    e = grpc_server_request_registered_call(
        h->gs, h->methods[method], &c->call, &c->deadline, &c->md,
        unary ? &c->payload : NULL, bound, h->cq, &c->req_tag);
  if (e != GRPC_CALL_OK) {
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return CHIME_EUNAVAILABLE;
  }
  return 0;
}
