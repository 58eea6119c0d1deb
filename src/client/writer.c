/* Writer: an Insert call driven from the caller's thread. Samples collect in a
 * batch; a full batch becomes one InsertRequest; up to max_inflight requests
 * wait for their acks while the caller keeps appending.
 *
 * Exactly once across reconnects: the writer has a random id and numbers its
 * requests from 1 (docs/protocol.md, Insert). It keeps each request's bytes
 * until the ack; when the call dies without a graceful CHIME_ESHUTDOWN it
 * opens a new call (waiting for the channel to reconnect, for at most
 * reconnect_timeout_ms) and sends every unacked request again, in order. The
 * server acks one it already inserted with its original keys instead of
 * inserting it twice, so nothing is lost and nothing doubled.
 *
 * A sharded client's writer is bound to one shard, the one with the fewest
 * of the client's writers; when that shard stays unreachable past
 * reconnect_timeout_ms it moves to another the same way (move_shard) and
 * resends there as a new writer (a fresh writer_id): at least once, since
 * the dead shard may have inserted what it never acked. So it does when its
 * shard restarted quickly and forgot it (CHIME_EFORGOTTEN). It moves only to
 * a shard whose table has its spec (another is refused by name, as at
 * open: chime_writer_spec is what its caller's samples were checked
 * against).
 *
 * This file holds the public calls and the batching; the Insert call and
 * its requests in flight are writer_call.c's, the shard binding and
 * failover writer_shard.c's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/fork.h"
#include "client/internal.h"
#include "client/writer_call.h"
#include "client/writer_shard.h"
#include "client/writer_zip.h"
#include "common/spec.h"
#include "wire/credit.h"
#include "wire/insert_limits.h"

/* A public call begins: what an earlier call's failure said is not this
 * one's (a sticky failure's text stays: every later call returns it). */
static void begin(chime_writer_t *w) {
  if (!w->failed && w->err[0] != '\0') /* an append costs no store */
    w->err[0] = '\0';
}

/* A public call ends: a failure's sentence becomes the calling thread's
 * detail (the code's own sentence when no step wrote one). */
static int report(const chime_writer_t *w, int rc) {
  return rc ? chime__detail(rc, w->err) : 0;
}

/* CHIME_ENOTSUP in a child of fork(): the call and its acks are the
 * parent's (fork.h). */
static int inherited(chime_writer_t *w) {
  return w->fork_gen == chime__fork_gen()
             ? 0
             : chime__fork_check(w->fork_gen, w->pid, "writer", w->err,
                                 sizeof(w->err));
}

/* The waits' deadlines, passed (a sharded writer moves on instead): the
 * reconnect deadline (CHIME_EDISCONNECTED), the call's (CHIME_ETIMEDOUT).
 * 0 while neither passed, or a move to another shard was made. */
static int past(chime_writer_t *w, int64_t end, int timeout_ms) {
  if (w->reconnect_deadline && chime__now_ms() >= w->reconnect_deadline) {
    if (w->set && chime__writer_move_shard(w) == 0)
      return 0;
    if (w->failed) /* a shard configured otherwise, named */
      return w->failed;
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': connection lost and not back within %d ms "
             "(%" PRIu32 " requests unacked)",
             w->table, w->reconnect_timeout_ms, w->inflight);
    chime__rpc_cancel(&w->rpc);
    return fail(w, CHIME_EDISCONNECTED);
  }
  if (chime__now_ms() >= end) {
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': no ack within %d ms (%" PRIu32
             " messages in flight)",
             w->table, timeout_ms, w->inflight);
    w->stalled = 1;
    return CHIME_ETIMEDOUT;
  }
  return 0;
}

/* Waits until cond() holds, the writer fails or the deadline passes; a call
 * lost on the way is resumed on a new one, up to the reconnect deadline,
 * and so is a call that stalls (chime__writer_stall_check). */
static int wait_until(chime_writer_t *w, int (*cond)(const chime_writer_t *),
                      int timeout_ms) {
  int64_t end = chime__now_ms() + timeout_ms;
  while (!cond(w)) {
    if (w->failed)
      return w->failed;
    if (w->forgotten) {
      /* At least once, as a failover after the shard stayed away: the
       * shard that forgot may hold what it never acked. w->err says
       * what was forgotten, should there be nowhere to go. */
      w->forgotten = 0;
      if (chime__writer_move_shard(w) != 0)
        return fail(w, CHIME_EFORGOTTEN);
      continue;
    }
    if (w->broken) {
      int rc = chime__writer_reconnect(w, end);
      if (rc)
        return rc;
      /* No fresh connection yet (a stall's): the deadlines are looked at. */
      if (w->broken && (rc = past(w, end, timeout_ms)) != 0)
        return rc;
      continue;
    }
    int64_t until = end;
    if (w->reconnect_deadline && w->reconnect_deadline < until)
      until = w->reconnect_deadline;
    int64_t stall = chime__writer_stall_left_ms(w);
    int64_t left = until - chime__now_ms();
    if (stall < left)
      left = stall;
    int rc =
        chime__writer_pump(w, chime__deadline_ms(left > 0 ? (int)left : 0));
    if (rc != CHIME_ETIMEDOUT || chime__writer_stall_check(w))
      continue;
    if ((rc = past(w, end, timeout_ms)) != 0)
      return rc;
  }
  return w->failed;
}

static int can_send(const chime_writer_t *w) {
  return w->inflight < w->max_inflight;
}

static int all_acked(const chime_writer_t *w) {
  return !sending(w) && w->inflight == 0;
}

static int send_batch(chime_writer_t *w) {
  int rc = wait_until(w, can_send, w->timeout_ms);
  if (rc)
    return rc;
  if (chime__writer_fl_reserve(w)) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': out of memory",
             w->table);
    return CHIME_ENOMEM;
  }
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = w->table;
  req.count = w->queued;
  req.data.data = w->data;
  req.data.len = w->nrag ? w->used : (size_t)(w->queued * w->sample_bytes);
  req.n_lengths = (size_t)w->queued * w->nrag;
  req.lengths = w->lengths;
  if (!w->all_default) {
    req.n_priorities = w->queued;
    req.priorities = w->priorities;
  }
  /* One version for the lot when they share it (0: none sent). */
  if (w->mixed || w->versions[0] != 0) {
    req.n_versions = w->mixed ? w->queued : 1;
    req.versions = w->versions;
  }
  req.id = w->next_id;
  req.writer_id = w->writer_id;
  req.end_episode = w->end_pending != 0;
  chime__writer_zip_req(w, &req);
  req.warm_start = w->warm_start != 0;
  req.heartbeat_ms = w->resend ? CHIME__HEARTBEAT_MS : 0;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (!bb)
    return fail(w, CHIME_ENOMEM);
  w->bytes_sent += grpc_byte_buffer_length(bb);
  /* Nothing was at stake while idle: a reconnect clock starts now. */
  if (w->reconnect_deadline && w->inflight == 0)
    w->reconnect_deadline = chime__now_ms() + w->reconnect_timeout_ms;
  struct inflight_s *f = fl_at(w, w->inflight);
  f->bb = bb;
  f->count = w->queued;
  w->inflight++;
  w->next_id++;
  w->sent += w->queued;
  w->queued = 0;
  w->used = 0;
  w->all_default = 1;
  w->mixed = 0;
  w->end_pending = 0;
  return chime__writer_kick(w);
}

/* Names the leaf a sample of `len` bytes breaks, like the server does. */
static void describe_size(const chime_writer_t *w, size_t len, char *buf,
                          size_t buflen) {
  uint64_t off = 0;
  for (uint32_t i = 0; i < w->spec.nleaves; i++) {
    const chime_leaf_t *l = &w->spec.leaves[i];
    uint64_t b = chime_leaf_bytes(l);
    if (len < off + b) {
      char shape[128];
      chime_spec_t one = {1, {*l}};
      const char *dims = chime_spec_format(&one, shape, sizeof(shape)) == 0
                             ? strchr(shape, ':') + 1
                             : "?";
      snprintf(buf, buflen,
               "insert into '%s': leaf '%s' (%s, %" PRIu64
               " bytes at offset %" PRIu64 ") does not fit: expected %" PRIu64
               " bytes per sample, got %zu",
               w->table, l->name, dims, b, off, w->sample_bytes, len);
      return;
    }
    off += b;
  }
  snprintf(buf, buflen,
           "insert into '%s': %zu bytes after the last leaf '%s': expected "
           "%" PRIu64 " bytes per sample, got %zu",
           w->table, len - (size_t)w->sample_bytes,
           w->spec.leaves[w->spec.nleaves - 1].name, w->sample_bytes, len);
}

/* A request's room (w->batch_cap samples, a ragged table's w->data_cap
 * bytes) from the options, the table and the client's message size: the
 * bytes of its data buffer. */
static size_t batch_sizes(chime_writer_t *w, const chime_table_info_t *ti,
                          const chime_writer_opts_t *opts) {
  const chime_client_t *client = w->client;
  const chime_writer_opts_t def = CHIME_WRITER_OPTS_INIT;
  uint64_t max_bytes =
      opts->max_batch_bytes > 0 ? opts->max_batch_bytes : def.max_batch_bytes;
  uint32_t max_samples = opts->max_batch_samples > 0 ? opts->max_batch_samples
                                                     : def.max_batch_samples;
  uint64_t cap = max_bytes / ti->sample_bytes;
  if (cap > max_samples)
    cap = max_samples;
  if (cap > (client->max_message_bytes / 2) / ti->sample_bytes)
    cap = (client->max_message_bytes / 2) / ti->sample_bytes;
  /* The server takes a request whole or not at all, so a request larger than
   * the table could never go in. */
  if (ti->capacity && cap > ti->capacity)
    cap = ti->capacity;
  w->batch_cap = cap ? (uint32_t)cap : 1;
  size_t data_bytes = (size_t)(w->batch_cap * ti->sample_bytes);
  if (chime_spec_ragged(&ti->spec) > 0) {
    /* Samples at their lengths, far under the bound's bytes: a message
     * holds as many as max_batch_bytes takes (one more sample, at most
     * the bound, fits behind them). */
    cap = max_samples;
    if (ti->capacity && cap > ti->capacity)
      cap = ti->capacity;
    w->batch_cap = cap ? (uint32_t)cap : 1;
    w->data_cap = max_bytes < client->max_message_bytes / 2
                      ? max_bytes
                      : client->max_message_bytes / 2;
    data_bytes = w->data_cap + (size_t)ti->sample_bytes;
  }
  return data_bytes;
}

/* The options that stay the writer's (0: the default), its id, and the
 * first request's. */
static void take_options(chime_writer_t *w, const chime_writer_opts_t *opts) {
  const chime_writer_opts_t def = CHIME_WRITER_OPTS_INIT;
  w->max_inflight =
      opts->max_inflight > 0 ? opts->max_inflight : def.max_inflight;
  w->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : def.timeout_ms;
  /* A negative reconnect_timeout_ms: no reconnecting, as resend 0. */
  w->resend = opts->resend != 0 && opts->reconnect_timeout_ms >= 0;
  w->warm_start = opts->warm_start != 0;
  w->reconnect_timeout_ms = opts->reconnect_timeout_ms > 0
                                ? opts->reconnect_timeout_ms
                                : def.reconnect_timeout_ms;
  /* A resend must still be in the server's window to be recognised. */
  if (w->resend && w->max_inflight > CHIME__INSERT_WINDOW)
    w->max_inflight = CHIME__INSERT_WINDOW;
  if (w->resend || w->sequence)
    w->writer_id = chime__writer_new_id();
  w->next_id = w->acked_id = 1;
  w->all_default = 1;
  w->min_key = 1; /* keys start at 1 */
  w->version = opts->version;
}

/* A request's buffers (data_bytes of samples, their priorities, ragged
 * lengths, versions) and the call's state: 0 or -1. */
static int alloc_buffers(chime_writer_t *w, size_t data_bytes) {
  w->data = malloc(data_bytes);
  w->priorities = malloc(w->batch_cap * sizeof(double));
  w->nrag = chime_spec_ragged(&w->spec);
  if (w->nrag > 0)
    w->lengths = malloc((size_t)w->batch_cap * w->nrag * sizeof(uint32_t));
  w->versions = malloc(w->batch_cap * sizeof(uint64_t));
  return !w->data || !w->priorities || (w->nrag > 0 && !w->lengths) ||
                 !w->versions || chime__rpc_init(&w->rpc)
             ? -1
             : 0;
}

int chime_writer_open(chime_writer_t **out, chime_client_t *client,
                      const char *table, const chime_writer_opts_t *opts) {
  chime_writer_opts_t def = CHIME_WRITER_OPTS_INIT;
  chime_table_info_t ti;
  char err[CHIME__ERRLEN] = "";
  int rc = 0;
  chime_writer_t *w = NULL;
  chime__shards_t *set = NULL;
  uint32_t member = 0;
  int bound = 0; /* member's count is ours to give back on failure */
  if (!client || !table || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_open: needs out, a client and a table");
  *out = NULL;
  rc = chime__client_inherited(client);
  if (rc)
    return rc;
  if (!opts)
    opts = &def;
  if (strlen(table) >= CHIME_MAX_NAME || opts->timeout_ms < 0) {
    rc = chime__fail(err, sizeof(err), CHIME_EINVAL,
                     "writer: a table name of at most %d bytes, and "
                     "timeout_ms 0 (the default) or more",
                     CHIME_MAX_NAME - 1);
    goto cleanup;
  }
  set = client->set;
  if (set) {
    if ((rc = chime__writer_bind_shard(set, table, UINT32_MAX, &member, &ti,
                                       err, sizeof(err))) != 0)
      goto cleanup;
    bound = 1;
    client = chime__shards_at(set, member)->client;
  } else if ((rc = chime__table_lookup(client, table, &ti, NULL, err,
                                       sizeof(err))) != 0) {
    goto cleanup;
  }
  if (ti.sequence_length > 0) {
    /* Steps go in; items (windows) come out. */
    ti.spec = ti.step_spec;
    ti.sample_bytes = ti.step_bytes;
  }
  if (ti.sample_bytes == 0 ||
      ti.sample_bytes != chime_spec_sample_bytes(&ti.spec) ||
      ti.sample_bytes > client->max_message_bytes / 2) {
    rc = chime__fail(err, sizeof(err), CHIME_EPROTO,
                     "writer: table '%s' reports %" PRIu64 " bytes per sample",
                     table, ti.sample_bytes);
    goto cleanup;
  }
  w = calloc(1, sizeof(*w));
  if (!w) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  w->client = client;
  w->set = set; /* the writer's now: close gives its member back */
  w->member = member;
  bound = 0;
  w->fork_gen = client->fork_gen;
  w->pid = client->pid;
  snprintf(w->table, sizeof(w->table), "%s", table);
  w->spec = ti.spec;
  w->sample_bytes = ti.sample_bytes;
  w->sequence = ti.sequence_length > 0;
  size_t data_bytes = batch_sizes(w, &ti, opts);
  take_options(w, opts);
  if (alloc_buffers(w, data_bytes)) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  rc = chime__writer_zip_open(w, &ti, opts->compress, data_bytes, err,
                              sizeof(err));
  if (rc)
    goto cleanup;
  if (chime__writer_call_start(w, 0)) {
    rc = chime__fail(err, sizeof(err), CHIME_EPROTO, "writer: start failed");
    goto cleanup;
  }
  *out = w;
  w = NULL;

cleanup:
  if (w) {
    w->failed = rc;
    int closed = chime_writer_close(w); /* rc, as w->failed says */
    (void)closed;
  }
  if (bound)
    chime__shards_unpick(set, member);
  return rc ? chime__detail(rc, err) : 0;
}

static int bad_priority(chime_writer_t *w, double priority) {
  if (w->sequence && priority != 1.0) {
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': a sequence table's items are windows: they "
             "take the table's initial_priority, not a step's (pass 1.0)",
             w->table);
    return CHIME_EINVAL;
  }
  if (isfinite(priority) && priority >= 0)
    return 0;
  snprintf(w->err, sizeof(w->err),
           "insert into '%s': priority %g: must be finite and at least 0",
           w->table, priority);
  return CHIME_EINVAL;
}

/* Before a batch starts: acks that already arrived are collected (no wait),
 * a broken call is resumed, the sticky error returned. Once per message, not
 * per sample: a poll of the completion queue (an epoll_wait and its locks)
 * costs more than appending a small sample. */
static int ready(chime_writer_t *w) {
  while ((w->inflight || sending(w)) && !w->broken &&
         chime__writer_pump(w, gpr_inf_past(GPR_CLOCK_MONOTONIC)) == 0) {
  }
  /* After a stall an append does not wait for a fresh connection: the
   * next wait (max_inflight full, a flush, a close) connects. */
  if (w->broken && !w->failed)
    chime__writer_reconnect(w, chime__now_ms());
  return w->failed;
}

/* Room for a sample: a full batch that could not go yet goes first (this
 * may wait), so an error here means nothing more was queued. */
static int room(chime_writer_t *w) {
  return w->queued == w->batch_cap ? send_batch(w) : 0;
}

/* Room for a ragged table's sample of `bytes`: also a batch whose bytes
 * would pass data_cap goes first. */
static int room_for(chime_writer_t *w, uint64_t bytes) {
  if (w->nrag > 0 && w->queued > 0 && w->used + bytes > w->data_cap)
    return send_batch(w);
  return room(w);
}

/* k samples were queued: a batch they filled goes if it may. */
static int queued(chime_writer_t *w, uint32_t k, const double *prio) {
  for (uint32_t i = 0; prio != NULL && i < k; i++) {
    w->priorities[w->queued + i] = prio[i];
    if (prio[i] != 1.0)
      w->all_default = 0;
  }
  for (uint32_t i = 0; prio == NULL && i < k; i++)
    w->priorities[w->queued + i] = 1.0;
  for (uint32_t i = 0; i < k; i++)
    w->versions[w->queued + i] = w->version;
  if (w->queued > 0 && w->versions[0] != w->version)
    w->mixed = 1;
  w->queued += k;
  if ((w->queued == w->batch_cap || (w->nrag > 0 && w->used >= w->data_cap)) &&
      can_send(w))
    return send_batch(w);
  return 0;
}

/* A ragged table's samples are not whole blocks of sample_bytes. */
static int ragged_refused(chime_writer_t *w, const char *call) {
  snprintf(w->err, sizeof(w->err),
           "insert into '%s': the table has ragged leaves: %s takes samples "
           "of its fixed size; chime_writer_append_leaves takes each ragged "
           "leaf's length",
           w->table, call);
  return CHIME_EINVAL;
}

static int append(chime_writer_t *w, const void *sample, size_t len,
                  double priority) {
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  if (w->nrag > 0)
    return ragged_refused(w, "chime_writer_append");
  if (len != w->sample_bytes) {
    describe_size(w, len, w->err, sizeof(w->err));
    return CHIME_EINVAL;
  }
  rc = bad_priority(w, priority);
  if (rc == 0 && w->queued == 0)
    rc = ready(w);
  if (rc == 0)
    rc = room(w);
  if (rc != 0)
    return rc;
  if (w->nz > 0) /* compressed as it comes (writer_zip.c) */
    chime__writer_zip_put_flat(w, w->queued, sample);
  else
    memcpy(w->data + (size_t)w->queued * w->sample_bytes, sample, len);
  return queued(w, 1, &priority);
}

int chime_writer_append(chime_writer_t *writer, const void *sample, size_t len,
                        double priority) {
  chime_writer_t *w = writer;
  if (!w || (!sample && len))
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_append: needs a writer and a sample");
  begin(w);
  return report(w, append(w, sample, len, priority));
}

static int extend(chime_writer_t *w, uint32_t n, const void *const leaves[],
                  const double *priorities, uint32_t *taken) {
  uint32_t done = 0;
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  if (w->nrag > 0)
    return ragged_refused(w, "chime_writer_extend");
  uint32_t nl = w->spec.nleaves;
  size_t lb[CHIME_MAX_LEAVES], off[CHIME_MAX_LEAVES], at = 0;
  for (uint32_t l = 0; l < nl; l++) {
    if (n > 0 && leaves[l] == NULL) {
      snprintf(w->err, sizeof(w->err), "insert into '%s': leaf '%s': no data",
               w->table, w->spec.leaves[l].name);
      return CHIME_EINVAL;
    }
    lb[l] = (size_t)chime_leaf_bytes(&w->spec.leaves[l]);
    off[l] = at;
    at += lb[l];
  }
  for (uint32_t i = 0; priorities != NULL && i < n && rc == 0; i++)
    rc = bad_priority(w, priorities[i]);
  if (rc == 0)
    rc = ready(w);
  /* Leaf-major in, sample-major out: each leaf's values go straight into
   * the batch, one copy, a batch at a time. */
  while (rc == 0 && done < n && (rc = room(w)) == 0) {
    uint32_t k = w->batch_cap - w->queued;
    if (k > n - done)
      k = n - done;
    uint8_t *dst = w->data + (size_t)w->queued * w->sample_bytes;
    for (uint32_t i = 0; w->nz > 0 && i < k; i++) {
      const uint8_t *leaf[CHIME_MAX_LEAVES];
      for (uint32_t l = 0; l < nl; l++)
        leaf[l] = (const uint8_t *)leaves[l] + (size_t)(done + i) * lb[l];
      chime__writer_zip_put(w, w->queued + i, leaf, lb);
    }
    for (uint32_t l = 0; w->nz == 0 && l < nl; l++) {
      const uint8_t *src = (const uint8_t *)leaves[l] + (size_t)done * lb[l];
      uint8_t *d = dst + off[l];
      if (lb[l] == 4)
        for (uint32_t i = 0; i < k; i++)
          memcpy(d + (size_t)i * w->sample_bytes, src + 4 * (size_t)i, 4);
      else
        for (uint32_t i = 0; i < k; i++)
          memcpy(d + (size_t)i * w->sample_bytes, src + (size_t)i * lb[l],
                 lb[l]);
    }
    rc = queued(w, k, priorities != NULL ? priorities + done : NULL);
    done += k; /* queued even when sending the full batch failed */
    if (taken != NULL)
      *taken = done;
  }
  return rc;
}

int chime_writer_extend(chime_writer_t *writer, const void *const leaves[],
                        const double *priorities, uint32_t n, uint32_t *taken) {
  chime_writer_t *w = writer;
  if (taken != NULL)
    *taken = 0;
  if (!w || (!leaves && n))
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_extend: needs a writer and leaves");
  begin(w);
  return report(w, extend(w, n, leaves, priorities, taken));
}

static int append_leaves(chime_writer_t *w, const void *const leaves[],
                         const uint32_t lengths[], double priority) {
  uint32_t rl[CHIME_MAX_LEAVES], k = 0;
  uint64_t bytes;
  char why[256]; /* one leaf's sentence (common/spec.h) */
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  for (uint32_t l = 0; l < w->spec.nleaves; l++) {
    const chime_leaf_t *leaf = &w->spec.leaves[l];
    if (leaf->ragged && lengths == NULL) {
      snprintf(w->err, sizeof(w->err),
               "insert into '%s': leaf '%s' is ragged: lengths needed",
               w->table, leaf->name);
      return CHIME_EINVAL;
    }
    if (leaf->ragged)
      rl[k++] = lengths[l];
    if (leaves[l] == NULL && (!leaf->ragged || lengths[l] > 0)) {
      snprintf(w->err, sizeof(w->err), "insert into '%s': leaf '%s': no data",
               w->table, leaf->name);
      return CHIME_EINVAL;
    }
  }
  if (chime__spec_ragged_bytes(&w->spec, 1, rl, &bytes, why, sizeof(why))) {
    snprintf(w->err, sizeof(w->err), "insert into '%s': %s", w->table, why);
    return CHIME_EINVAL;
  }
  rc = bad_priority(w, priority);
  if (rc == 0 && w->queued == 0)
    rc = ready(w);
  if (rc == 0)
    rc = room_for(w, bytes);
  if (rc != 0)
    return rc;
  /* At most sample_bytes (lengths within bounds) past data_cap, or a fixed
   * table's batch_cap: the buffer has room. */
  uint8_t *dst = w->data + (w->nrag ? w->used : w->queued * w->sample_bytes);
  size_t lb[CHIME_MAX_LEAVES];
  for (uint32_t l = 0; l < w->spec.nleaves; l++) {
    const chime_leaf_t *leaf = &w->spec.leaves[l];
    lb[l] = leaf->ragged ? (size_t)lengths[l] * chime_leaf_row_bytes(leaf)
                         : (size_t)chime_leaf_bytes(leaf);
    if (lb[l] > 0 && w->nz == 0)
      memcpy(dst, leaves[l], lb[l]);
    dst += lb[l];
  }
  if (w->nz > 0) /* compressed as it comes (writer_zip.c) */
    chime__writer_zip_put(w, w->queued, (const uint8_t *const *)leaves, lb);
  if (w->nrag > 0) {
    memcpy(w->lengths + (size_t)w->queued * w->nrag, rl,
           w->nrag * sizeof(uint32_t));
    w->used += (size_t)bytes;
  }
  return queued(w, 1, &priority);
}

int chime_writer_append_leaves(chime_writer_t *writer,
                               const void *const leaves[],
                               const uint32_t lengths[], double priority) {
  chime_writer_t *w = writer;
  if (!w || !leaves)
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_append_leaves: needs a writer and "
                         "leaves");
  begin(w);
  return report(w, append_leaves(w, leaves, lengths, priority));
}

static int end_episode(chime_writer_t *w) {
  if (!w->sequence) {
    snprintf(w->err, sizeof(w->err),
             "end_episode: table '%s' is not a sequence table", w->table);
    return CHIME_EINVAL;
  }
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  w->end_pending = 1;
  rc = send_batch(w); /* the queued steps, possibly none, and the end */
  /* Not sent (no room within the timeout, no memory): nothing was ended,
   * and the caller calls again. A pending end would ride on the next
   * batch and end the episode after steps appended later. */
  if (rc)
    w->end_pending = 0;
  return rc;
}

int chime_writer_set_version(chime_writer_t *writer, uint64_t version) {
  if (!writer)
    return chime__detail(CHIME_EINVAL, "chime_writer_set_version: no writer");
  writer->version = version;
  return 0;
}

int chime_writer_end_episode(chime_writer_t *writer) {
  chime_writer_t *w = writer;
  if (!w)
    return chime__detail(CHIME_EINVAL, "chime_writer_end_episode: no writer");
  begin(w);
  return report(w, end_episode(w));
}

static int flush(chime_writer_t *w) {
  int rc = inherited(w);
  if (rc)
    return rc;
  if (w->failed)
    return w->failed;
  if (w->queued) {
    rc = send_batch(w);
    if (rc)
      return rc;
  }
  return wait_until(w, all_acked, w->timeout_ms);
}

int chime_writer_flush(chime_writer_t *writer) {
  chime_writer_t *w = writer;
  if (!w)
    return chime__detail(CHIME_EINVAL, "chime_writer_flush: no writer");
  begin(w);
  return report(w, flush(w));
}

uint64_t chime_writer_acked(const chime_writer_t *writer) {
  return writer ? writer->acked : 0;
}

uint64_t chime_writer_stalls(const chime_writer_t *writer) {
  return writer ? atomic_load(&writer->stalls) : 0;
}

uint64_t chime_writer_bytes_sent(const chime_writer_t *writer) {
  return writer ? writer->bytes_sent : 0;
}

int chime_writer_spec(const chime_writer_t *writer, chime_spec_t *out) {
  if (!writer || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_writer_spec: needs a writer and out");
  *out = writer->spec;
  return 0;
}

int chime_writer_close(chime_writer_t *writer) {
  chime_writer_t *w = writer;
  if (!w)
    return 0;
  begin(w);
  if (w->fork_gen != chime__fork_gen()) {
    /* In a child of fork(): only this process's copy goes; the call and
     * its byte buffers are the parent's gRPC state. */
    int rc = report(w, inherited(w));
    chime__writer_zip_close(w);
    free(w->data);
    free(w->priorities);
    free(w->lengths);
    free(w->versions);
    free(w->fl);
    free(w->drops);
    free(w);
    return rc;
  }
  /* One timeout bounds a writer's end: after a flush that timed out with
   * no ack since, close does not wait a second time. */
  int rc = w->stalled && !w->failed ? CHIME_ETIMEDOUT
           : w->rpc.call            ? flush(w)
                                    : w->failed;
  if (rc == CHIME_ETIMEDOUT && w->stalled && w->err[0] == '\0')
    snprintf(w->err, sizeof(w->err),
             "insert into '%s': close after a wait that timed out with no ack "
             "since (%" PRIu32 " messages in flight): not waiting again",
             w->table, w->inflight);
  report(w, rc);
  if (w->rpc.call) {
    if (rc == 0 && !sending(w) && live(w)) {
      chime__rpc_half_close(&w->rpc);
      /* Everything is acked: the server's status after our half-close is a
       * courtesy, so don't wait long for it. */
      gpr_timespec deadline =
          chime__deadline_ms(w->timeout_ms < 5000 ? w->timeout_ms : 5000);
      while (live(w) && chime__writer_pump(w, deadline) != CHIME_ETIMEDOUT) {
      }
    }
    chime__writer_drop_call(w);
  }
  chime__rpc_destroy(&w->rpc);
  chime__writer_chan_drop(w);
  if (w->set)
    chime__shards_unpick(w->set, w->member);
  chime__writer_zip_close(w);
  free(w->data);
  free(w->priorities);
  free(w->lengths);
  free(w->versions);
  for (uint32_t i = 0; i < w->inflight; i++)
    chime__bb_free(fl_at(w, i)->bb);
  free(w->fl);
  free(w->drops);
  free(w);
  return rc;
}
