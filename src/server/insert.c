/* Insert (bidi): reads each request by hand from the received slices
 * (insertreq.c; the sample bytes never go through protobuf-c), checks it
 * against its table and acks only after the samples are in the table. When
 * the table has room and nothing waits before the request, the samples are
 * copied once, from gRPC's slices straight into the table, on the
 * completion-queue thread; otherwise they are staged (a second copy) and
 * the table's worker thread waits for room, so the completion-queue thread
 * never blocks on a full fifo table and gRPC's buffers are released before
 * the ack either way (held by the worker past the ack, they left chimed's
 * grpc_shutdown waiting 10 s for a connection now and then). A request goes
 * in whole or not at all, so a writer that retries what was not acked never
 * duplicates items. One request per call is in the works at a time: the
 * next is read after the ack is queued, which is the back-pressure a writer
 * sees. A staged request belongs to its call: when the call ends (cancel,
 * deadline, client gone) before the request went in, it is dropped, so a
 * request that was never acked never goes in later. Staged bytes count
 * against budgets.staged_insert_bytes (staging.c): past it, calls are not
 * read until staged requests go in or are dropped. */
#include <inttypes.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>

#include "chime.pb-c.h"
#include "common/clock.h"
#include "common/errfmt.h"
#include "common/spec.h"
#include "wire/pbread.h"
#include "wire/insert_limits.h"
#include "server/auth.h"
#include "server/insertreq.h"
#include "server/insert.h"
#include "server/insertack.h"
#include "server/insertcheck.h"
#include "server/insertwhy.h"
#include "replay/rules.h"
#include "server/staging.h"
#include "wire/credit.h"
#include "wire/leaf.h"

/* A received InsertRequest: its slices, held until the worker has copied
 * the samples out of them, and the fields read from them. */
typedef struct {
  grpc_byte_buffer *bb;
  grpc_byte_buffer_reader rd;
  int rd_live;
  chime__span_t *slices;
  size_t nslices;
  chime__pb_reader_t pr;
  chime__insert_req_t q;
} msg_t;

static void msg_free(msg_t *m) {
  if (m == NULL)
    return;
  chime__insert_req_free(&m->q);
  free(m->slices);
  if (m->rd_live)
    grpc_byte_buffer_reader_destroy(&m->rd);
  grpc_byte_buffer_destroy(m->bb);
  free(m);
}

/* Takes bb. The slices are looked at where gRPC put them, not gathered:
 * the sample bytes are copied once, into the table. */
static int msg_read(msg_t **out, grpc_byte_buffer *bb) {
  int rc = 0;
  size_t cap = 0;
  grpc_slice *sl;
  msg_t *m = calloc(1, sizeof(*m));
  *out = NULL;
  if (m == NULL) {
    grpc_byte_buffer_destroy(bb);
    return CHIME_ENOMEM;
  }
  m->bb = bb;
  if (!grpc_byte_buffer_reader_init(&m->rd, bb)) {
    rc = CHIME_EPROTO; /* e.g. a compressed message that does not inflate */
    goto out;
  }
  m->rd_live = 1;
  while (grpc_byte_buffer_reader_peek(&m->rd, &sl)) {
    if (m->nslices == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      chime__span_t *g = realloc(m->slices, ncap * sizeof(*g));
      if (g == NULL) {
        rc = CHIME_ENOMEM;
        goto out;
      }
      m->slices = g;
      cap = ncap;
    }
    m->slices[m->nslices].p = GRPC_SLICE_START_PTR(*sl);
    m->slices[m->nslices].len = GRPC_SLICE_LENGTH(*sl);
    m->nslices++;
  }
  chime__pb_reader_init(&m->pr, m->slices, m->nslices);
  *out = m;
  m = NULL;
out:
  msg_free(m);
  return rc;
}

/* The longest refusal of a stored leaf the table explains (insert_why). */
#define WHY_LEN 256

/* A request that has to wait (its table is full, or requests queued
 * before it): its samples, copied out of gRPC's buffers so those are never
 * held while an insert waits. */
typedef struct {
  uint8_t *data; /* chime__staging_alloc'd */
  size_t data_len;
  uint64_t bytes; /* charged to the staging budget */
  uint32_t count;
  uint64_t id, writer_id;
  int end_episode, warm_start;
  double *priorities;          /* NULL: all 1.0 */
  uint32_t *lengths;           /* a ragged table's (insertreq.h); NULL: none */
  chime__table_versions_t ver; /* its v malloc'd (NULL: all 0) */
  uint32_t *zleaves, *zsizes;  /* leaves sent stored (insertreq.h) */
  size_t nzleaves;
  chime__staging_t *budget;
} staged_t;

static void staged_free(staged_t *sg) {
  if (sg == NULL)
    return;
  chime__staging_free(sg->data, sg->data_len);
  free(sg->priorities);
  free(sg->lengths);
  free((void *)sg->ver.v);
  free(sg->zleaves);
  free(sg->zsizes);
  chime__staging_release(sg->budget, sg->bytes);
  free(sg);
}

/* Takes the request's samples and priorities out of m, charged to the
 * staging budget. CHIME_ERESOURCE when they do not fit it. */
static int stage(staged_t **out, msg_t *m, chime__staging_t *budget,
                 uint64_t *taken) {
  uint64_t bytes = m->q.data_len + (uint64_t)m->q.count * sizeof(double) +
                   (uint64_t)m->q.n_lengths * sizeof(uint32_t) +
                   (uint64_t)m->q.n_versions * sizeof(uint64_t) +
                   (uint64_t)m->q.n_stored * sizeof(uint32_t);
  *out = NULL;
  chime__staging_seen(budget, bytes);
  if (chime__staging_charge_from(budget, bytes, taken) != 0)
    return CHIME_ERESOURCE;
  staged_t *sg = calloc(1, sizeof(*sg));
  if (sg == NULL ||
      (sg->data = chime__staging_alloc((size_t)m->q.data_len)) == NULL) {
    free(sg);
    chime__staging_release(budget, bytes);
    return CHIME_ENOMEM;
  }
  sg->data_len = (size_t)m->q.data_len;
  chime__pb_copy(&m->pr, m->q.data_offset, sg->data, m->q.data_len);
  sg->count = m->q.count;
  sg->id = m->q.id;
  sg->writer_id = m->q.writer_id;
  sg->end_episode = m->q.end_episode;
  sg->warm_start = m->q.warm_start;
  sg->priorities = m->q.priorities;
  m->q.priorities = NULL;
  sg->lengths = m->q.lengths;
  m->q.lengths = NULL;
  sg->ver = (chime__table_versions_t){m->q.versions, m->q.n_versions};
  m->q.versions = NULL;
  sg->zleaves = m->q.stored_leaves;
  sg->nzleaves = m->q.n_stored_leaves;
  sg->zsizes = m->q.stored;
  m->q.stored_leaves = m->q.stored = NULL;
  sg->budget = budget;
  sg->bytes = bytes;
  *out = sg;
  return 0;
}

/* Inserts m's samples from the received slices, without waiting; why
 * (WHY_LEN bytes) gets a stored leaf's refusal. */
static int insert_direct(chime__table_t *t, msg_t *m, uint64_t *first_key,
                         chime__dedupe_req_t *dq, char *why, uint8_t *drop) {
  chime__span_t few[64], *spans = few;
  size_t n = chime__pb_spans(&m->pr, m->q.data_offset, m->q.data_len, few, 64);
  if (n > 64) {
    spans = malloc(n * sizeof(*spans));
    if (spans == NULL)
      return CHIME_ENOMEM;
    chime__pb_spans(&m->pr, m->q.data_offset, m->q.data_len, spans, n);
  }
  chime__table_versions_t ver = {m->q.versions, m->q.n_versions};
  chime__table_stored_t zs = {m->q.stored_leaves,
                              m->q.n_stored_leaves,
                              m->q.stored,
                              why,
                              WHY_LEN,
                              drop};
  int rc = chime__table_insert_stored(t, spans, n, m->q.count, m->q.lengths,
                                      m->q.priorities, &ver, first_key, NULL,
                                      dq, 1, &zs);
  if (spans != few)
    free(spans);
  return rc;
}

typedef struct insert_s insert_t;
struct insert_s {
  chime__call_t *call;
  chime_server_t *srv; /* the call's, read once per message */
  chime__table_t *table;
  uint32_t tindex;
  staged_t *req; /* waiting for the worker */
  /* Set when the server stops or the call ends: a request waiting for room
   * gives up (nothing of it in the table). */
  atomic_int abort;
  int pending, half_closed, stopping;
  int ended;      /* the call is over: a request not yet in is dropped */
  int closed_ok;  /* OK after the client closed its side, all acked */
  insert_t *next; /* worker queue */
  /* The writers this call carried, bound to it in the table's memory until
   * it ends (dedupe.h). Under the call's lock. */
  uint64_t writers[CHIME__INSERT_CALL_WRITERS];
  uint32_t nwriters;
  uint32_t owner; /* whose writer places they take (auth.h) */
  /* What the read in the works reserves of the staging budget (staging.h),
   * under the budget's lock. */
  uint64_t reserved;
  uint64_t taken; /* the message's read reserved it (on_message's own) */
  /* Why the table refused the request in the works ("": no sentence). */
  char why[WHY_LEN];
  chime__insert_drops_t drops; /* its groups' filter reasons */
  chime__insert_beat_t beat;   /* heartbeats (server/beat.c) */
  uint8_t *drop;               /* drops' room for it, or NULL */
};

struct chime__inserter_s {
  chime_server_t *srv;
  chime__table_t *t;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  insert_t *head, *tail;
  int busy; /* the worker is inserting one */
  int quit;
};

static void finish_err(chime__call_t *c, int rc, const char *msg) {
  chime__call_finish(c, rc, "%s", msg);
}

/* The writer closed its side and everything it sent is acked. During a
 * shutdown it still hears "shutting down", whichever came first. */
static void finish_closed(chime__call_t *c) {
  if (atomic_load(&chime__call_server(c)->stopping)) {
    chime__call_finish(c, CHIME_ESHUTDOWN, "shutting down");
    return;
  }
  /* The writers it carried are done (dedupe.h: closed, forgotten first). */
  insert_t *st = chime__call_state(c);
  chime__call_lock(c);
  st->closed_ok = 1;
  chime__call_unlock(c);
  chime__call_finish(c, CHIME_OK, "%s", "");
}

/* Binds the request's writer to the call the first time the call carries
 * it, so the table does not forget it while the call is open (dedupe.h). 0,
 * or an error for the call with its text in err. */
static int bind_writer(chime__call_t *c, insert_t *st, uint64_t writer,
                       uint64_t seq, char *err, size_t errlen) {
  const chime__table_config_t *tc = chime__table_config(st->table);
  chime__call_lock(c);
  int full = st->nwriters == CHIME__INSERT_CALL_WRITERS;
  for (uint32_t i = 0; i < st->nwriters; i++)
    if (st->writers[i] == writer) {
      chime__call_unlock(c);
      return 0;
    }
  chime__call_unlock(c);
  if (full) {
    snprintf(err, errlen,
             "insert into '%s': one Insert call carries at most %d writer "
             "ids and writer %016llx would be one more; nothing of request "
             "%llu was inserted; open a call per writer",
             tc->name, CHIME__INSERT_CALL_WRITERS, (unsigned long long)writer,
             (unsigned long long)seq);
    return CHIME_ERESOURCE;
  }
  int over_share = 0;
  int rc =
      chime__table_writer_bind(st->table, writer, seq, st->owner, &over_share);
  if (rc == CHIME_ENOMEM)
    snprintf(err, errlen, "out of memory");
  else if (rc == CHIME_ERESOURCE && over_share)
    snprintf(err, errlen,
             "insert into '%s': writer %016llx not taken: this call's token "
             "holds its share of the table's %u writer places or more, and "
             "the places left are kept for other actor tokens "
             "(writer_token_reserve, %u%%); nothing was inserted; try again "
             "later",
             tc->name, (unsigned long long)writer,
             tc->max_writers ? tc->max_writers : CHIME__INSERT_WRITERS,
             tc->writer_token_reserve);
  else if (rc != 0)
    chime__insert_writer_refused(err, errlen, st->table, rc, writer, seq);
  if (rc != 0)
    return rc;
  chime__call_lock(c);
  int ended = st->ended; /* on_close unbound what it found already */
  if (!ended)
    st->writers[st->nwriters++] = writer;
  chime__call_unlock(c);
  if (ended)
    chime__table_writer_unbind(st->table, writer, 0);
  return 0;
}

/* Asks for the call's next request through the staging budget. A read
 * that may end staged reserves a request's worth of the budget until its
 * message arrives: always for a new call's first (its table unknown) or
 * when its table has requests waiting, else while anything is staged or
 * reserved (staging.h). */
static void read_next(chime__call_t *c, insert_t *st) {
  int always = st->table == NULL;
  if (!always) {
    chime__inserter_t *w = st->srv->inserters[st->tindex];
    pthread_mutex_lock(&w->mu);
    always = w->head != NULL || w->busy;
    pthread_mutex_unlock(&w->mu);
  }
  chime__staging_recv_reserved(&st->srv->staging, c, &st->reserved, always);
}

/* Acks a request that went in (rc 0), then reads the next one, or ends
 * the call: "shutting down" during a stop, the error, or OK after a
 * half-close. Drops the reference the request held. */
static void insert_finish(chime__call_t *c, insert_t *st, int rc,
                          const chime__dedupe_req_t *dq, uint64_t id,
                          uint32_t count, uint64_t first_key) {
  if (rc == 0)
    chime__insert_send_ack(c, id, count, first_key, st->drop, &st->beat);
  chime__call_lock(c);
  st->pending = 0;
  int stop = st->stopping, hc = st->half_closed;
  chime__call_unlock(c);
  if (rc != 0 && dq->refused)
    chime__insert_finish_refused(c, st->table, dq, rc, count);
  else if (rc == CHIME_EINVAL && st->why[0] != '\0')
    chime__call_finish(c, rc, "insert into '%s': request %llu not inserted: %s",
                       chime__table_config(st->table)->name,
                       (unsigned long long)id, st->why);
  else if (rc == CHIME_EINVAL || rc == CHIME_ENOMEM)
    finish_err(c, rc,
               rc == CHIME_ENOMEM ? "out of memory"
                                  : "request larger than the table");
  else if (rc == CHIME_EOVERFLOW)
    chime__call_finish_as(
        c, CHIME_EOVERFLOW, GRPC_STATUS_RESOURCE_EXHAUSTED,
        "insert into '%s': request %llu not inserted: the table issued the "
        "last of its 2^48 - 1 keys (a key is the shard in 16 bits and a "
        "count in 48, and never runs into the next shard's); start the "
        "server without --restore to count from 1 again",
        chime__table_config(st->table)->name, (unsigned long long)id);
  else if (rc == CHIME_ESYS)
    chime__call_finish(
        c, CHIME_ESYS,
        "insert into '%s': request %llu not inserted: the server could not "
        "record its key reservation in its checkpoint dir (its log says "
        "why); send it again later",
        chime__table_config(st->table)->name, (unsigned long long)id);
  else if (rc == CHIME_ERESOURCE)
    chime__call_finish(
        c, CHIME_ERESOURCE,
        "insert into '%s': request %llu not inserted: the server's budget "
        "for requests waiting for room (budgets.staged_insert_bytes, %llu "
        "bytes) is spent; send it again later",
        chime__table_config(st->table)->name, (unsigned long long)id,
        (unsigned long long)st->srv->staging.budget);
  else if (rc != 0 || stop)
    chime__call_finish(c, CHIME_ESHUTDOWN, "shutting down");
  else if (hc)
    finish_closed(c);
  else
    read_next(c, st);
  chime__call_unref(c);
}

static void insert_on_start(chime__call_t *c) {
  insert_t *st = calloc(1, sizeof(*st));
  if (st == NULL) {
    finish_err(c, CHIME_ENOMEM, "out of memory");
    return;
  }
  st->call = c;
  st->srv = chime__call_server(c);
  st->owner = chime__auth_owner(&st->srv->cfg, chime__call_metadata(c));
  atomic_init(&st->abort, 0);
  atomic_init(&st->beat.ms, 0);
  atomic_init(&st->beat.sent_ns, chime__now_ns());
  chime__call_set_state(c, st);
  read_next(c, st);
}

/* The call's table: named by its first request (whose spec, if it sends
 * one, must be the table's), and by any later one that names a table. 0,
 * or a CHIME_E code with err for the writer. */
static int bind_table(chime_server_t *srv, insert_t *st, chime__insert_req_t *q,
                      char *err, size_t errlen) {
  const char *tname = q->table;
  char pn[CHIME__PRINTABLE_LEN(64)];
  uint32_t ti = 0;
  if (st->table != NULL) {
    if (tname[0] == '\0' ||
        strcmp(tname, chime__table_config(st->table)->name) == 0)
      return 0;
    snprintf(err, errlen, "this Insert stream writes to table '%s', not '%s'",
             chime__table_config(st->table)->name,
             chime__printable(pn, sizeof(pn), tname, 64));
    return CHIME_EINVAL;
  }
  if (tname[0] == '\0') {
    snprintf(err, errlen, "the first InsertRequest must name a table");
    return CHIME_EINVAL;
  }
  st->table = q->table_too_long ? NULL : chime__server_table(srv, tname, &ti);
  if (st->table == NULL) {
    snprintf(err, errlen, "table '%s' not found",
             chime__printable(pn, sizeof(pn), tname, 64));
    return CHIME_ENOTFOUND;
  }
  st->tindex = ti;
  if (q->n_spec == 0)
    return 0;
  return chime__insert_check_spec(chime__table_config(st->table), q->spec,
                                  q->n_spec, err, errlen);
}

static void on_request(chime__call_t *c, grpc_byte_buffer *bb) {
  insert_t *st = chime__call_state(c);
  chime_server_t *srv = st->srv;
  char err[1024];
  int rc;
  if (bb == NULL) {
    chime__call_lock(c);
    int busy = st->pending;
    st->half_closed = 1;
    chime__call_unlock(c);
    if (!busy)
      finish_closed(c);
    return;
  }
  msg_t *req = NULL;
  rc = msg_read(&req, bb);
  if (rc != 0) {
    finish_err(c, rc == CHIME_ENOMEM ? rc : CHIME_EINVAL,
               rc == CHIME_ENOMEM ? "out of memory"
                                  : "unreadable InsertRequest");
    return;
  }
  char why[128];
  rc = chime__insert_req_parse(&req->q, &req->pr, why, sizeof(why));
  if (rc != 0) {
    if (rc == CHIME_ENOMEM)
      snprintf(err, sizeof(err), "out of memory");
    else
      snprintf(err, sizeof(err), "malformed InsertRequest: %s", why);
    rc = rc == CHIME_ENOMEM ? rc : CHIME_EINVAL;
    goto fail;
  }
  if ((rc = bind_table(srv, st, &req->q, err, sizeof(err))) != 0)
    goto fail;
  if (req->q.heartbeat_ms > 0)
    atomic_store(&st->beat.ms, CHIME__HEARTBEAT_MS);
  const chime__table_config_t *tc = chime__table_config(st->table);
  rc = chime__insert_check_data(tc, chime__table_sample_bytes(st->table),
                                &req->q, err, sizeof(err));
  if (rc != 0)
    goto fail;
  chime__insert_shape_t shape = {.count = req->q.count,
                                 .writer_id = req->q.writer_id,
                                 .id = req->q.id,
                                 .end_episode = req->q.end_episode,
                                 .n_versions = req->q.n_versions,
                                 .priorities = req->q.priorities,
                                 .n_priorities = req->q.n_priorities};
  if ((rc = chime__rules_insert(st->table, &shape, err, sizeof(err))) != 0)
    goto fail;
  if (req->q.writer_id != 0 &&
      (rc = bind_writer(c, st, req->q.writer_id, req->q.id, err,
                        sizeof(err))) != 0)
    goto fail;
  {
    chime__inserter_t *w = srv->inserters[st->tindex];
    uint64_t first_key = 0;
    uint64_t id = req->q.id;
    uint32_t count = req->q.count;
    chime__dedupe_req_t dq = {.writer = req->q.writer_id,
                              .seq = id,
                              .end_episode = req->q.end_episode,
                              .warm = req->q.warm_start};
    chime__call_lock(c);
    if (st->stopping) {
      /* Not taken in, so never acked: the writer sees "shutting down". */
      chime__call_unlock(c);
      msg_free(req);
      return;
    }
    st->pending = 1;
    chime__call_unlock(c);
    chime__call_ref(c); /* the request's, dropped by insert_finish */
    /* The one copy, from the slices into the table, when nothing waits
     * before this request; else it is staged for the worker. */
    pthread_mutex_lock(&w->mu);
    st->why[0] = '\0';
    st->drop = chime__insert_drops_for(&st->drops, count,
                                       chime__table_config(w->t)->nfilters > 0);
    rc = w->head == NULL && !w->busy
             ? insert_direct(w->t, req, &first_key, &dq, st->why, st->drop)
             : CHIME_EBUSY;
    if (rc == CHIME_EBUSY) {
      rc = stage(&st->req, req, &srv->staging, &st->taken);
      if (rc == 0) {
        st->next = NULL;
        if (w->tail != NULL)
          w->tail->next = st;
        else
          w->head = st;
        w->tail = st;
        pthread_cond_signal(&w->cond);
      }
      pthread_mutex_unlock(&w->mu);
      msg_free(req);
      if (rc != 0)
        insert_finish(c, st, rc, &dq, id, count, 0);
      return;
    }
    pthread_mutex_unlock(&w->mu);
    msg_free(req);
    insert_finish(c, st, rc, &dq, id, count, first_key);
  }
  return;
fail:
  msg_free(req);
  finish_err(c, rc, err);
}

/* The read's reservation is given back once its message is staged,
 * refused or in the table (a read for the next one, asked for meanwhile,
 * reserves anew). */
static void insert_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  insert_t *st = chime__call_state(c);
  chime__staging_t *g = &st->srv->staging;
  st->taken = chime__staging_take(g, &st->reserved);
  if (bb != NULL)
    chime__staging_seen(g, grpc_byte_buffer_length(bb));
  on_request(c, bb);
  uint64_t left = st->taken; /* not turned into staged bytes */
  st->taken = 0;
  chime__staging_unreserve_bytes(g, left);
}

static void insert_done(chime__inserter_t *w, insert_t *st) {
  staged_t *sg = st->req;
  uint64_t first_key = 0;
  chime__call_lock(st->call);
  int ended = st->ended;
  chime__call_unlock(st->call);
  /* A call that ended before its request went in was never acked: the
   * request is dropped, and the writer's resend is the one that counts. */
  chime__dedupe_req_t dq = {.writer = sg->writer_id,
                            .seq = sg->id,
                            .end_episode = sg->end_episode,
                            .warm = sg->warm_start};
  chime__table_stored_t zs = {sg->zleaves, sg->nzleaves, sg->zsizes,
                              st->why,     WHY_LEN,      st->drop};
  int rc = ended ? CHIME_ECLOSED
                 : chime__table_insert_stored(
                       w->t, &(chime__span_t){sg->data, sg->data_len}, 1,
                       sg->count, sg->lengths, sg->priorities, &sg->ver,
                       &first_key, &st->abort, &dq, 0, &zs);
  uint64_t id = sg->id;
  uint32_t count = sg->count;
  chime__call_lock(st->call);
  st->req = NULL;
  chime__call_unlock(st->call);
  staged_free(sg);
  insert_finish(st->call, st, rc, &dq, id, count, first_key);
}

static void *inserter_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-insert");
  chime__inserter_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (w->head == NULL && !w->quit)
      pthread_cond_wait(&w->cond, &w->mu);
    if (w->head == NULL)
      break;
    insert_t *st = w->head;
    w->head = st->next;
    if (w->head == NULL)
      w->tail = NULL;
    w->busy = 1;
    pthread_mutex_unlock(&w->mu);
    insert_done(w, st);
    pthread_mutex_lock(&w->mu);
    w->busy = 0;
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int chime__inserter_create(chime__inserter_t **out, chime_server_t *srv,
                           chime__table_t *t) {
  chime__inserter_t *w = calloc(1, sizeof(*w));
  *out = NULL;
  if (w == NULL)
    return CHIME_ENOMEM;
  w->srv = srv;
  w->t = t;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cond, NULL);
  if (pthread_create(&w->th, NULL, inserter_main, w) != 0) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
    free(w);
    return CHIME_ESYS;
  }
  *out = w;
  return 0;
}

/* Finishes what is queued first: an accepted request is either wholly in
 * its table and acked, or (a stop ended its wait) not in it at all and
 * answered "shutting down", never dropped. */
void chime__inserter_destroy(chime__inserter_t *w) {
  if (w == NULL)
    return;
  pthread_mutex_lock(&w->mu);
  w->quit = 1;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->th, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cond);
  free(w);
}

/* Makes a request that waits for room give up, and wakes its wait. */
static void abort_wait(insert_t *st) {
  atomic_store(&st->abort, 1);
  if (st->table != NULL)
    chime__table_wake(st->table);
}

static void insert_on_stop(chime__call_t *c) {
  chime__call_lock(c);
  insert_t *st = chime__call_state(c);
  int busy = 0;
  if (st != NULL) {
    st->stopping = 1;
    busy = st->pending;
  }
  chime__call_unlock(c);
  /* No sampler will make room any more: a request waiting for it ends now
   * (not acked); requests that fit still go in and are acked. */
  if (st != NULL)
    abort_wait(st);
  if (!busy)
    chime__call_finish(c, CHIME_ESHUTDOWN, "shutting down");
}

static void insert_on_close(chime__call_t *c) {
  uint64_t writers[CHIME__INSERT_CALL_WRITERS];
  uint32_t n = 0;
  int closed = 0;
  chime__call_lock(c);
  insert_t *st = chime__call_state(c);
  if (st != NULL) {
    st->ended = 1;
    n = st->nwriters;
    memcpy(writers, st->writers, n * sizeof(writers[0]));
    st->nwriters = 0;
    /* Closed: its OK after the client's half-close reached the client.
     * A cancelled call (the client or its connection gone) also reads as
     * a half-close first, but its writers may come back to resend. */
    closed = st->closed_ok && !chime__call_cancelled(c);
  }
  chime__call_unlock(c);
  chime__staging_t *g = &chime__call_server(c)->staging;
  chime__staging_forget(g, c);
  if (st != NULL) {
    chime__staging_unreserve(g, &st->reserved);
    abort_wait(st);
  }
  /* A request of the call still in the works meets its writer idle, not
   * forgotten: idle ones are kept writer_idle_ms (and a call with one in
   * the works did not end closed). */
  for (uint32_t i = 0; i < n; i++)
    chime__table_writer_unbind(st->table, writers[i], closed);
}

chime__insert_beat_t *chime__insert_beat_of(chime__call_t *c) {
  if (chime__call_method(c) != CHIME__M_INSERT)
    return NULL;
  chime__call_lock(c);
  insert_t *st = chime__call_state(c);
  chime__call_unlock(c);
  return st != NULL ? &st->beat : NULL;
}

static void insert_on_free(chime__call_t *c) {
  insert_t *st = chime__call_state(c);
  /* A read asked for after the call ended, never completed. Nothing else
   * holds the call now (a parked one is held by a reference). */
  if (st != NULL && st->reserved != 0)
    chime__staging_unreserve(&chime__call_server(c)->staging, &st->reserved);
  if (st != NULL)
    chime__insert_drops_free(&st->drops);
  free(st);
}

const chime__call_vt_t chime__insert_vt = {
    .on_start = insert_on_start,
    .on_message = insert_on_message,
    .on_close = insert_on_close,
    .on_stop = insert_on_stop,
    .on_free = insert_on_free,
};
