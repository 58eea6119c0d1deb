/* Subscribe (bidi): the first request opens a stream; the answer describes
 * the ring (and, for shm, how to fetch its fd); later requests carry credits.
 * The call stays open as the stream's liveness: when it ends, the stream's
 * ring is shut down and its budget returned. */
#include <stdlib.h>
#include <string.h>

#include "common/errfmt.h"
#include "server/stream.h"
#include "wire/credit.h"
#include "wire/leaf.h"

typedef struct {
  chime__stream_t *s;
  int stopped; /* the notice and status are queued */
  int closing; /* the learner's last Credit said it closes (mu) */
  int lane;    /* the call joined s as a lane (lanes.c): it only sends */
} sub_t;

static chime__stream_t *sub_stream(chime__call_t *c) {
  chime__call_lock(c);
  sub_t *st = chime__call_state(c);
  chime__stream_t *s = st != NULL ? st->s : NULL;
  chime__call_unlock(c);
  return s;
}

static void sub_on_start(chime__call_t *c) {
  sub_t *st = calloc(1, sizeof(*st));
  if (st == NULL) {
    chime__call_finish(c, CHIME_ENOMEM, "out of memory");
    return;
  }
  chime__call_set_state(c, st);
  chime__call_recv(c);
}

static void send_opened(chime__call_t *c, chime__stream_t *s, int resumed) {
  const chime_spec_t *spec = chime_ring_spec(s->ring);
  Chime__V1__Leaf leaves[CHIME_MAX_LEAVES];
  Chime__V1__Leaf *lp[CHIME_MAX_LEAVES];
  chime__leaf_msgs(spec, leaves, lp);

  Chime__V1__Layout lay = CHIME__V1__LAYOUT__INIT;
  lay.slots = s->lay.slots;
  lay.batch_size = s->lay.batch_size;
  lay.slot_bytes = s->lay.slot_bytes;
  lay.n_leaf_offset = spec->nleaves;
  lay.leaf_offset = s->lay.leaf_offset;
  lay.info_offset = s->lay.info_offset;
  lay.n_spec = spec->nleaves;
  lay.spec = lp;
  lay.send_bytes = s->send_bytes;
  lay.info_record_bytes = (uint32_t)sizeof(chime_sample_info_t);
  /* The raw leaves the client decompresses the frames of, by name. */
  const chime_spec_t *ts = chime__table_item_spec(s->table);
  chime_spec_t raw = {0};
  for (uint32_t l = 0; l < ts->nleaves; l++)
    if (s->unframe[l])
      raw.leaves[raw.nleaves++] = ts->leaves[l];
  Chime__V1__Leaf rleaves[CHIME_MAX_LEAVES];
  Chime__V1__Leaf *rp[CHIME_MAX_LEAVES];
  chime__leaf_msgs(&raw, rleaves, rp);
  lay.n_framed = raw.nleaves;
  lay.framed = rp;
  /* A sequence table's framed leaves are its windows' steps as stored. */
  if (raw.nleaves > 0)
    lay.framed_steps = chime__table_config(s->table)->sequence_length;

  Chime__V1__Handoff ho = CHIME__V1__HANDOFF__INIT;
  uint8_t nonce[CHIME__HANDOFF_NONCE_BYTES];
  Chime__V1__Opened op = CHIME__V1__OPENED__INIT;
  op.stream_id = s->id;
  op.mode = s->ops->wire;
  op.layout = &lay;
  op.max_staleness = chime__table_config(s->table)->max_staleness;
  if (s->mode == CHIME_MODE_STREAM) {
    op.resume_token.data = s->resume_token;
    op.resume_token.len = sizeof(s->resume_token);
    op.resumed = resumed;
    op.heartbeat_ms = atomic_load(&s->heartbeat_ms);
  }
  if (s->ops->handoff != NULL && s->ops->handoff(s, &ho, nonce))
    op.handoff = &ho;
  Chime__V1__SubscribeResponse resp = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
  resp.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED;
  resp.opened = &op;
  chime__call_send_msg(c, &resp);
}

/* The mode table for the request's mode, or NULL for none of them
 * (chime__stream_open refuses it among its other checks). */
static const chime__stream_mode_ops_t *mode_of(const Chime__V1__Open *open) {
  switch (open->mode) {
  case CHIME__V1__MODE__MODE_SHM:
    return &chime__stream_mode_shm;
  case CHIME__V1__MODE__MODE_STREAM:
    return &chime__stream_mode_send;
  default:
    return NULL;
  }
}

/* The call's first request is a Join: it becomes one of s's lanes, or
 * ends refused. */
static void join_lane(chime__call_t *c, const Chime__V1__Join *join) {
  char err[CHIME__ERRLEN];
  int code = 0;
  chime__stream_t *s = chime__stream_join(chime__call_server(c), c, join, &code,
                                          err, sizeof(err));
  if (s == NULL) {
    chime__call_finish(c, code, "%s", err);
    return;
  }
  chime__call_lock(c);
  sub_t *st = chime__call_state(c);
  st->s = s;
  st->lane = 1;
  chime__call_unlock(c);
  chime__call_recv(c); /* its end: half-closed, or lost */
}

/* A lane's call sends only: a failed receive is its connection lost. */
static void lane_message(chime__call_t *c, chime__stream_t *s,
                         grpc_byte_buffer *bb) {
  if (bb != NULL) {
    grpc_byte_buffer_destroy(bb);
    chime__call_finish(c, CHIME_EINVAL, "a lane sends no requests after Join");
    return;
  }
  chime__call_lock(c);
  int failed = chime__call_recv_failed(c);
  chime__call_unlock(c);
  if (failed)
    chime__stream_lane_lost(s);
}

static void sub_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  char err[CHIME__ERRLEN];
  chime__call_lock(c);
  const sub_t *lst = chime__call_state(c);
  chime__stream_t *ls = lst != NULL && lst->lane ? lst->s : NULL;
  chime__call_unlock(c);
  if (ls != NULL) {
    lane_message(c, ls, bb);
    return;
  }
  if (bb == NULL) {
    /* The client closed its side: it releases nothing more. Or the call
     * is over (connection lost): a resumable stream waits (resume.c). */
    chime__stream_t *s = sub_stream(c);
    chime__call_lock(c);
    const sub_t *st = chime__call_state(c);
    /* gRPC may end a lost call's receive as a half-close: a resumable
     * learner says when it closes (Credit.closing). */
    int lost = chime__call_recv_failed(c) ||
               (s != NULL && s->resumable && st != NULL && !st->closing);
    chime__call_unlock(c);
    if (s != NULL && lost)
      chime__stream_lost(s);
    else if (s != NULL)
      chime__stream_end(s, c);
    return;
  }
  ProtobufCMessage *m;
  int rc = chime__msg_unpack(&chime__v1__subscribe_request__descriptor, bb, &m);
  grpc_byte_buffer_destroy(bb);
  if (rc != 0) {
    chime__call_finish(c, CHIME_EINVAL, "%s SubscribeRequest",
                       rc == CHIME_EPROTO ? "unreadable" : "malformed");
    return;
  }
  Chime__V1__SubscribeRequest *req = (Chime__V1__SubscribeRequest *)m;
  chime__stream_t *s = sub_stream(c);
  if (s == NULL && req->kind_case == CHIME__V1__SUBSCRIBE_REQUEST__KIND_JOIN) {
    join_lane(c, req->join);
    goto out;
  }
  if (s == NULL) {
    if (req->kind_case != CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN) {
      chime__call_finish(c, CHIME_EINVAL,
                         "the first SubscribeRequest must be 'open' or 'join'");
      goto out;
    }
    /* A resuming Open ends the stream it names first (resume.c): what
     * that one held and its learner never received goes back, and its
     * ring's budget with it, which the new ring may need. */
    chime_server_t *srv = chime__call_server(c);
    int resumed = req->open->mode == CHIME__V1__MODE__MODE_STREAM &&
                  chime__stream_resume_old(srv, req->open);
    rc = chime__stream_open(&s, srv, c, req->open, mode_of(req->open), err,
                            sizeof(err));
    if (rc != 0) {
      chime__call_finish(c, rc, "%s", err);
      goto out;
    }
    chime__call_lock(c);
    ((sub_t *)chime__call_state(c))->s = s;
    int gone = chime__call_closed(c);
    chime__call_unlock(c);
    /* The learner's version at open counts before its first batch. */
    if (req->open->version != 0)
      (void)chime__table_set_version(s->table, req->open->version, NULL);
    if (s->mode == CHIME_MODE_STREAM) {
      (void)chime__stream_resume_token(s); /* none: not resumable then */
      if (req->open->heartbeat_ms > 0)
        atomic_store(&s->heartbeat_ms, CHIME__HEARTBEAT_MS);
    }
    send_opened(c, s, resumed);
    if (gone || chime__stream_start(s, c) != 0) {
      chime__call_finish(c, CHIME_ESYS, "cannot start the stream");
      chime__stream_close(s);
      goto out;
    }
    if (atomic_load(&srv->stopping))
      chime__call_stop(c);
  } else if (req->kind_case == CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT) {
    if (req->credit != NULL && req->credit->closing) {
      chime__call_lock(c);
      ((sub_t *)chime__call_state(c))->closing = 1;
      chime__call_unlock(c);
    }
    if (req->credit != NULL && s->ops->credit != NULL)
      s->ops->credit(s, req->credit->batches, req->credit->released,
                     req->credit->n_released);
  } else if (req->kind_case == CHIME__V1__SUBSCRIBE_REQUEST__KIND_VERSION) {
    /* Lower than the newest known: allowed, changes nothing. */
    if (req->version != NULL)
      (void)chime__table_set_version(s->table, req->version->version, NULL);
  } else {
    chime__call_finish(c, CHIME_EINVAL,
                       "the stream is already open; send credits or "
                       "versions only");
    goto out;
  }
  chime__call_recv(c);
out:
  chime__v1__subscribe_request__free_unpacked(req, NULL);
}

static void sub_on_close(chime__call_t *c) {
  chime__stream_t *s = sub_stream(c);
  chime__call_lock(c);
  const sub_t *st = chime__call_state(c);
  int lane = st != NULL && st->lane;
  chime__call_unlock(c);
  /* A learner that closed ended it already; a lane's end after the
   * stream's is nothing. */
  if (s != NULL && lane && !atomic_load(&s->closed))
    chime__stream_lane_lost(s);
  else if (s != NULL)
    chime__stream_lost(s);
}

static void sub_on_stop(chime__call_t *c) {
  /* Runs again when an open raced with the stop; the first run's notice and
   * status must not be dropped as if they were chunks. */
  chime__call_lock(c);
  sub_t *st = chime__call_state(c);
  chime__stream_t *s = st != NULL ? st->s : NULL;
  int again = st != NULL && st->stopped;
  int lane = st != NULL && st->lane;
  if (st != NULL && s != NULL)
    st->stopped = 1;
  chime__call_unlock(c);
  if (again)
    return;
  if (s != NULL && !lane) { /* a lane's stream ends with its first call */
    chime__stream_close(s); /* stops the sender before the notice */
    Chime__V1__Notice n = CHIME__V1__NOTICE__INIT;
    Chime__V1__SubscribeResponse resp = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
    n.code = GRPC_STATUS_UNAVAILABLE;
    n.error = CHIME_ESHUTDOWN;
    n.message = (char *)"shutting down";
    resp.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE;
    resp.notice = &n;
    chime__call_drop_queued(c);
    chime__call_send_msg(c, &resp);
  }
  chime__call_finish(c, CHIME_ESHUTDOWN, "shutting down");
}

static void sub_on_free(chime__call_t *c) {
  sub_t *st = chime__call_state(c);
  if (st != NULL && st->s != NULL) {
    chime__stream_close(st->s);
    chime__stream_unref(st->s);
  }
  free(st);
}

/* The call can take the next batch: sending from here, the thread that
 * polls the completion queue, costs no wake-up of another thread. */
static void sub_on_sent(chime__call_t *c) {
  chime__call_lock(c);
  sub_t *st = chime__call_state(c);
  chime__stream_t *s = st != NULL ? st->s : NULL; /* held until on_free */
  chime__call_unlock(c);
  if (s != NULL && s->ops->sent != NULL)
    s->ops->sent(s);
}

const chime__call_vt_t chime__subscribe_vt = {
    .on_start = sub_on_start,
    .on_message = sub_on_message,
    .on_close = sub_on_close,
    .on_stop = sub_on_stop,
    .on_free = sub_on_free,
    .on_sent = sub_on_sent,
};
