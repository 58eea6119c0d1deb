/* Lanes, the learner's end (docs/remote.md, "More connections";
 * docs/protocol.md, "Lanes"): a stream-mode stream with connections N > 1
 * reads its batches over N Subscribe calls, each on a client of its own
 * (a channel, so a TCP connection). The stream's own call Opened it and
 * keeps its credits (lane 0, pumped as ever); each other lane Joins it by
 * its id and resume token and is read by a thread of its own. The server
 * deals whole batches to the lanes: each lane fills the slot it took for
 * its batch, and a whole batch is published once every batch before it is
 * (seq order: the local ring is the reorder buffer; credits bound the
 * slots taken). Slots are taken, published and given back under one lock,
 * the ring's producer side being one thread's at a time. A lane lost is
 * the stream's loss: the server ends the first call as a lost connection,
 * and the stream resumes whole (resume.c) with its lanes stopped first and
 * joined again after. The other end: src/server/lanes.c. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/stream.h"

typedef struct {
  struct chime__lanes_s *ls;
  uint32_t index;         /* 1..n-1 */
  chime_client_t *client; /* its own connection */
  chime__rpc_t rpc;
  chime__remote_t r; /* its batch being filled; the rest is the stream's */
  pthread_t thread;
  int started;
  _Atomic uint64_t chunks; /* received, for tests */
} lane_t;

struct chime__lanes_s {
  chime_stream_t *s;
  uint32_t n;
  pthread_mutex_t mu; /* the ring's producer side, what follows */
  uint64_t next_seq;  /* the next batch to publish */
  uint32_t window;    /* the ring's slots */
  uint32_t *done;     /* [window]: slot + 1 of whole batch seq % window */
  atomic_int stop;
  chime__land_fn land; /* the transport's: a chunk into its slot */
  lane_t lane[CHIME_MAX_CONNECTIONS];
};

int chime__lanes_create(chime_stream_t *s, uint32_t n, chime__land_fn land,
                        char *err, size_t errlen) {
  chime__lanes_t *ls = calloc(1, sizeof(*ls));
  if (ls != NULL)
    ls->done = calloc(s->layout.slots, sizeof(*ls->done));
  if (ls == NULL || ls->done == NULL) {
    free(ls);
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  }
  ls->s = s;
  ls->n = n;
  ls->land = land;
  ls->window = s->layout.slots;
  pthread_mutex_init(&ls->mu, NULL);
  for (uint32_t i = 1; i < n; i++) {
    lane_t *l = &ls->lane[i];
    l->ls = ls;
    l->index = i;
    if (chime__conn_again(&l->client, s->client) != 0) {
      s->remote.lanes = ls; /* freed by the caller's fini */
      return chime__fail(err, errlen, CHIME_ENOMEM, "connection %u of %u: %s",
                         i + 1, n, chime_last_error());
    }
  }
  s->remote.lanes = ls;
  return 0;
}

int chime__lanes_acquire(chime__lanes_t *ls, chime__ring_wslot_t *w) {
  for (;;) {
    pthread_mutex_lock(&ls->mu);
    /* Credits keep a slot free: a wait here is for the learner's release
     * of the one the ring reuses, in slices so that a stop is heard. */
    int rc = chime__ring_acquire(ls->s->ring, w, 0);
    pthread_mutex_unlock(&ls->mu);
    if (rc != CHIME_ETIMEDOUT)
      return rc;
    if (atomic_load(&ls->stop))
      return CHIME_ESHUTDOWN;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

void chime__lanes_abandon(chime__lanes_t *ls, uint32_t slot) {
  pthread_mutex_lock(&ls->mu);
  chime__ring_abandon(ls->s->ring, slot);
  pthread_mutex_unlock(&ls->mu);
}

int chime__lanes_publish(chime__lanes_t *ls, uint32_t slot, uint64_t seq,
                         char *err, size_t errlen) {
  chime__remote_t *m = &ls->s->remote;
  int rc = 0;
  pthread_mutex_lock(&ls->mu);
  /* Credits bound the batches in flight by the ring's slots. */
  if (seq < ls->next_seq || seq - ls->next_seq >= ls->window ||
      ls->done[seq % ls->window] != 0) {
    rc = chime__fail(err, errlen, CHIME_EPROTO,
                     "stream: batch %" PRIu64 " came with batch %" PRIu64
                     " next, more than %u apart or twice",
                     seq, ls->next_seq, ls->window);
    chime__ring_abandon(ls->s->ring, slot);
  } else {
    ls->done[seq % ls->window] = slot + 1;
  }
  while (rc == 0 && ls->done[ls->next_seq % ls->window] != 0) {
    uint32_t at = ls->next_seq % ls->window, sl = ls->done[at] - 1;
    uint64_t local;
    ls->done[at] = 0;
    m->slot_seq[sl] = ls->next_seq++;
    rc = chime__ring_publish(ls->s->ring, sl, &local);
    if (rc != 0)
      rc = chime__fail(err, errlen, rc, "stream: local ring publish: %s",
                       chime_strerror(rc));
    else
      m->batches++;
  }
  pthread_mutex_unlock(&ls->mu);
  return rc;
}

/* A lane's call, pumped until it is over: each chunk into its slot. */
static void *lane_thread(void *arg) {
  lane_t *l = arg;
  chime_stream_t *s = l->ls->s;
  char err[CHIME__ERRLEN];
  pthread_setname_np(pthread_self(), "chime-lane");
  if (chime__rpc_recv(&l->rpc) != 0)
    chime__rpc_cancel(&l->rpc);
  while (chime__rpc_busy(&l->rpc)) {
    chime__rpc_op_t op;
    int ok;
    if (chime__rpc_next(&l->rpc, gpr_inf_future(GPR_CLOCK_MONOTONIC), &op,
                        &ok) != 0 ||
        op != CHIME__RPC_RECV || l->rpc.recv_bb == NULL)
      continue;
    grpc_byte_buffer *bb = l->rpc.recv_bb;
    l->rpc.recv_bb = NULL;
    if (chime__rpc_recv(&l->rpc) != 0)
      chime__rpc_cancel(&l->rpc);
    chime__stall_heard_lane(s);
    int rc = l->ls->land(&l->r, bb, err, sizeof(err));
    chime__bb_free(bb);
    atomic_fetch_add(&l->chunks, rc == 0);
    /* A notice (the server stopping) comes on the first call too. */
    if (rc != 0 && rc != CHIME_ENOTFOUND && rc != CHIME_ESHUTDOWN &&
        !atomic_load(&l->ls->stop)) {
      chime__stream_cut(s, rc, err);
      chime__rpc_cancel(&l->rpc);
    }
  }
  return NULL;
}

/* The Join of lane l to the stream id (the remote's token). */
static grpc_byte_buffer *join_msg(const chime_stream_t *s, uint64_t id,
                                  uint32_t lane) {
  Chime__V1__Join j = CHIME__V1__JOIN__INIT;
  j.stream_id = id;
  j.resume_token.data = (uint8_t *)s->remote.token;
  j.resume_token.len = s->remote.token_len;
  j.lane = lane;
  j.table = (char *)s->table;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_JOIN;
  req.join = &j;
  return chime__pack(&req.base);
}

int chime__lanes_start(chime_stream_t *s, uint64_t id) {
  chime__lanes_t *ls = s->remote.lanes;
  if (ls == NULL)
    return 0;
  atomic_store(&ls->stop, 0);
  ls->next_seq = 0;
  int rc = 0;
  for (uint32_t i = 1; i < ls->n && rc == 0; i++) {
    lane_t *l = &ls->lane[i];
    l->r = s->remote;
    l->r.active = 0;
    if ((rc = chime__rpc_init(&l->rpc)) != 0)
      break;
    grpc_byte_buffer *bb = join_msg(s, id, i);
    if (bb == NULL) {
      rc = CHIME_ENOMEM;
      break;
    }
    rc = chime__rpc_start(&l->rpc, l->client, CHIME__M_SUBSCRIBE,
                          gpr_inf_future(GPR_CLOCK_REALTIME), 0, bb);
    if (rc == 0 && pthread_create(&l->thread, NULL, lane_thread, l) == 0)
      l->started = 1;
    else if (rc == 0)
      rc = CHIME_ESYS;
  }
  return rc;
}

void chime__lanes_stop(chime_stream_t *s) {
  chime__lanes_t *ls = s->remote.lanes;
  if (ls == NULL)
    return;
  atomic_store(&ls->stop, 1);
  for (uint32_t i = 1; i < ls->n; i++)
    chime__rpc_cancel(&ls->lane[i].rpc);
  for (uint32_t i = 1; i < ls->n; i++) {
    lane_t *l = &ls->lane[i];
    if (l->started)
      pthread_join(l->thread, NULL);
    l->started = 0;
    chime__rpc_destroy(&l->rpc);
    memset(&l->rpc, 0, sizeof(l->rpc));
    if (l->r.active)
      chime__lanes_abandon(ls, l->r.w.slot);
    l->r.active = 0;
  }
  /* Whole batches not yet handed on go back with the old stream: the
   * resuming Open does not name them. */
  pthread_mutex_lock(&ls->mu);
  for (uint32_t k = 0; k < ls->window; k++)
    if (ls->done[k] != 0)
      chime__ring_abandon(s->ring, ls->done[k] - 1);
  memset(ls->done, 0, ls->window * sizeof(*ls->done));
  pthread_mutex_unlock(&ls->mu);
}

void chime__lanes_free(chime_stream_t *s) {
  chime__lanes_t *ls = s->remote.lanes;
  if (ls == NULL)
    return;
  chime__lanes_stop(s);
  for (uint32_t i = 1; i < ls->n; i++)
    chime__conn_destroy(ls->lane[i].client);
  pthread_mutex_destroy(&ls->mu);
  free(ls->done);
  free(ls);
  s->remote.lanes = NULL;
}

chime__remote_t *chime__lanes_remote(chime__lanes_t *ls) {
  return &ls->s->remote;
}

int chime__stream_lane_cancel(chime_stream_t *s, uint32_t lane) {
  chime__lanes_t *ls = s->uni == NULL ? s->remote.lanes : NULL;
  if (ls == NULL || lane == 0 || lane >= ls->n)
    return CHIME_EINVAL;
  chime__rpc_cancel(&ls->lane[lane].rpc);
  return 0;
}

uint64_t chime__stream_lane_chunks(chime_stream_t *s, uint32_t lane) {
  chime__lanes_t *ls = s->uni == NULL ? s->remote.lanes : NULL;
  return ls != NULL && lane > 0 && lane < ls->n
             ? atomic_load(&ls->lane[lane].chunks)
             : 0;
}
