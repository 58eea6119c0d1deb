/* Streams: ring creation under the memory budgets, the sampler thread, and in
 * stream mode the sending of published slots: the server takes them on its own
 * consumer side of the ring and hands slot memory to gRPC without a copy; a
 * slot is released when gRPC drops the last slice pointing into it. Sending
 * happens on whichever thread makes a batch sendable (the sampler publishing,
 * or a credit arriving), so no thread exists just to wait for either. */
#include "server/stream.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "common/errfmt.h"
#include "wire/chunk.h"
#include "ring/ring_internal.h"
#include "server/handoff.h"

uint64_t chime__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void chime__stream_ref(chime__stream_t *s) {
  atomic_fetch_add(&s->refs, 1);
}

void chime__stream_unref(chime__stream_t *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1)
    return;
  chime_server_t *srv = s->srv;
  chime_ring_destroy(s->ring);
  s->ring = NULL;
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->send_mu);
  pthread_cond_destroy(&s->attach_cond);
  pthread_mutex_lock(&srv->mu);
  srv->nstreams--;
  pthread_cond_broadcast(&srv->cond);
  pthread_mutex_unlock(&srv->mu);
  chime__stream_unhold(s); /* chimed's own mapping is gone */
}

void chime__stream_hold(chime__stream_t *s) {
  atomic_fetch_add(&s->holds, 1);
}

void chime__stream_unhold(chime__stream_t *s) {
  if (atomic_fetch_sub(&s->holds, 1) != 1)
    return;
  chime_server_t *srv = s->srv;
  pthread_mutex_lock(&srv->mu);
  srv->ring_bytes -= s->ring_bytes; /* 0 when it was never charged */
  pthread_mutex_unlock(&srv->mu);
  free(s);
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

/* "cudaErrorMemoryAllocation (2)" out of a pinning report, or the chime
 * error's name when the report holds no CUDA error. */
static const char *cuda_error_of(const char *report, int rc, char *buf,
                                 size_t len) {
  const char *p = strstr(report, "cudaError");
  size_t n = 0;
  if (p == NULL || len < 2) {
    snprintf(buf, len, "%s", chime_err_name(rc));
    return buf;
  }
  while (n + 1 < len && (isalnum((unsigned char)p[n]) || p[n] == '_'))
    n++;
  const char *q = p + n;
  if (q[0] == ' ' && q[1] == '(') {
    size_t m = 2;
    if (q[m] == '-')
      m++;
    while (isdigit((unsigned char)q[m]))
      m++;
    if (q[m] == ')' && n + m + 2 <= len)
      n += m + 1;
  }
  snprintf(buf, len, "%.*s", (int)n, p);
  return buf;
}

int chime__stream_open(chime__stream_t **out, chime_server_t *srv,
                       chime__call_t *call, const Chime__V1__Open *open,
                       char *err, size_t errlen) {
  int rc = 0;
  char lerr[256], pin_err[CHIME_PIN_ERRLEN];
  chime__stream_t *s = NULL;
  const char *tname = open->table ? open->table : "";
  *out = NULL;
  chime__table_t *t = chime__server_table(srv, tname, NULL);
  if (t == NULL) {
    char pn[CHIME__PRINTABLE_LEN(64)];
    return fail(err, errlen, CHIME_ENOTFOUND, "table '%s' not found",
                chime__printable(pn, sizeof(pn), tname, 64));
  }
  const chime__table_config_t *tc = chime__table_config(t);
  if (open->batch_size == 0 || open->batch_size > CHIME_RING_MAX_BATCH)
    return fail(err, errlen, CHIME_EINVAL, "batch_size %u: must be 1..%u",
                open->batch_size, CHIME_RING_MAX_BATCH);
  if (open->slots < 2 || open->slots > CHIME_RING_MAX_SLOTS)
    return fail(err, errlen, CHIME_EINVAL, "slots %u: must be 2..%u",
                open->slots, CHIME_RING_MAX_SLOTS);
  if (open->mode != CHIME__V1__MODE__MODE_SHM &&
      open->mode != CHIME__V1__MODE__MODE_STREAM)
    return fail(err, errlen, CHIME_EINVAL,
                "mode %d: must be MODE_SHM (1) or MODE_STREAM (2)",
                (int)open->mode);
  if (open->prefetch > open->slots)
    return fail(err, errlen, CHIME_EINVAL, "prefetch %u: must be 0..slots (%u)",
                open->prefetch, open->slots);
  if (tc->sampler == CHIME__SAMPLER_FIFO && open->batch_size > tc->capacity)
    return fail(err, errlen, CHIME_EINVAL,
                "batch_size %u exceeds the capacity %llu of fifo table '%s'",
                open->batch_size, (unsigned long long)tc->capacity, tc->name);
  if (atomic_load(&srv->stopping))
    return fail(err, errlen, CHIME_ESHUTDOWN, "shutting down");

  chime_ring_layout_t lay;
  chime__ring_regions_t reg;
  rc = chime_ring_layout(&lay, &tc->spec, open->batch_size, open->slots, lerr,
                         sizeof(lerr));
  if (rc == 0 && chime__ring_regions(&lay, chime__page_size(), &reg) != 0)
    rc = fail(lerr, sizeof(lerr), CHIME_EOVERFLOW, "ring too large");
  if (rc != 0)
    return fail(err, errlen, rc, "ring for table '%s': %s", tc->name, lerr);
  /* Budgets are checked on the ring's whole size before anything is
   * created or page-locked: a refused stream costs no memory and no
   * registration. */
  if (reg.total_bytes > srv->cfg.stream_ring_bytes)
    return fail(err, errlen, CHIME_ERESOURCE,
                "stream needs %llu bytes of ring; per-stream budget is %llu "
                "bytes",
                (unsigned long long)reg.total_bytes,
                (unsigned long long)srv->cfg.stream_ring_bytes);

  s = calloc(1, sizeof(*s));
  if (s == NULL)
    return fail(err, errlen, CHIME_ENOMEM, "out of memory");
  s->srv = srv;
  s->table = t;
  snprintf(s->table_name, sizeof(s->table_name), "%s", tc->name);
  s->mode = open->mode == CHIME__V1__MODE__MODE_SHM ? CHIME_MODE_SHM
                                                    : CHIME_MODE_STREAM;
  atomic_init(&s->refs, 1);
  atomic_init(&s->holds, 1);
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->send_mu, NULL);
  /* Monotonic: the attach wait ends at the token's deadline. */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->attach_cond, &ca);
  pthread_condattr_destroy(&ca);
  /* The server side of the ring can lend at most slots - 1 batches. */
  /* A fifo batch is the learner's until it says it released it: then a
   * learner that dies holding batches loses no item (give_back). */
  s->hold = s->mode == CHIME_MODE_STREAM && tc->sampler == CHIME__SAMPLER_FIFO;
  s->credits = open->prefetch && open->prefetch < open->slots ? open->prefetch
                                                              : open->slots - 1;
  pthread_mutex_lock(&srv->mu);
  srv->nstreams++;
  uint64_t left = srv->cfg.total_ring_bytes - srv->ring_bytes;
  if (reg.total_bytes > left) {
    pthread_mutex_unlock(&srv->mu);
    rc = fail(err, errlen, CHIME_ERESOURCE,
              "stream needs %llu bytes of ring; %llu of the total budget of "
              "%llu bytes is left",
              (unsigned long long)reg.total_bytes, (unsigned long long)left,
              (unsigned long long)srv->cfg.total_ring_bytes);
    goto out;
  }
  /* Each stream has a thread: a cap keeps a flood of opens from exhausting
   * them (nstreams counts this one too, and streams still draining). */
  if (srv->nstreams > CHIME__MAX_STREAMS) {
    pthread_mutex_unlock(&srv->mu);
    rc = fail(err, errlen, CHIME_ERESOURCE,
              "too many streams: at most %d at once", CHIME__MAX_STREAMS);
    goto out;
  }
  srv->ring_bytes += reg.total_bytes;
  s->ring_bytes = reg.total_bytes;
  pthread_mutex_unlock(&srv->mu);

  rc = chime_ring_create(&s->ring, &tc->spec, open->batch_size, open->slots);
  if (rc != 0) {
    rc = fail(err, errlen, rc, "cannot create a ring for table '%s': %s",
              tc->name, chime_strerror(rc));
    goto out;
  }
  s->lay = *chime_ring_get_layout(s->ring);
  size_t map_len = 0;
  chime_ring_map_base(s->ring, &map_len);
  if (map_len != s->ring_bytes) { /* the budget charged what is mapped */
    rc = fail(err, errlen, CHIME_ESYS, "ring of %zu bytes, %llu expected",
              map_len, (unsigned long long)s->ring_bytes);
    goto out;
  }
  struct stat st;
  if (fstat(chime_ring_fd(s->ring), &st) == 0) {
    s->ring_dev = st.st_dev;
    s->ring_ino = st.st_ino;
  }
  s->send_bytes = s->lay.info_offset +
                  (uint64_t)s->lay.batch_size * sizeof(chime_sample_info_t);
  if (srv->cfg.pin_host_memory) {
    rc = chime_ring_pin(s->ring, pin_err, sizeof(pin_err));
    if (rc != 0) {
      /* The full report names the server's library paths and site
       * directories: the operator's business, not the remote client's. */
      char what[96];
      fprintf(stderr,
              "chimed: stream on table '%s': cannot page-lock the "
              "ring: %s\n",
              tc->name, pin_err);
      rc = fail(err, errlen, rc,
                "page-locking the ring failed on the server: %s; see the "
                "server log",
                cuda_error_of(pin_err, rc, what, sizeof(what)));
      goto out;
    }
    s->pinned_bytes = chime_ring_pinned_bytes(s->ring);
  }
  if (s->mode == CHIME_MODE_SHM) {
    if (getrandom(s->token, sizeof(s->token), 0) != (ssize_t)sizeof(s->token)) {
      rc = fail(err, errlen, CHIME_ESYS, "no randomness for a token");
      goto out;
    }
    s->token_deadline_ns =
        chime__now_ns() + (uint64_t)srv->cfg.handoff_expires_ms * 1000000u;
    s->token_live = 1;
  }
  pthread_mutex_lock(&srv->mu);
  s->id = ++srv->next_stream_id;
  s->next = srv->streams;
  if (srv->streams != NULL)
    srv->streams->prev = s;
  srv->streams = s;
  pthread_mutex_unlock(&srv->mu);
  chime__call_ref(call);
  s->call = call;
  *out = s;
  s = NULL;
out:
  if (s != NULL) {
    atomic_store(&s->closed, 1);
    chime__stream_unref(s);
  }
  return rc;
}

/* One batch sent: its chunks' slices point into the slot, which is
 * released when gRPC drops the last of them and, for a held batch, the
 * learner released it too (one reference each). */
typedef struct chime__sent_s {
  chime__stream_t *s;
  uint32_t slot;
  uint64_t seq;
  atomic_uint refs;
  struct chime__sent_s *next; /* s->held_* list */
} batch_t;

static void batch_put(batch_t *b, unsigned n) {
  if (atomic_fetch_sub(&b->refs, n) != n)
    return;
  chime__stream_t *s = b->s;
  pthread_mutex_lock(&s->mu);
  chime_ring_release(s->ring, b->slot); /* wakes the sampler if it waits */
  pthread_mutex_unlock(&s->mu);
  free(b);
  chime__stream_unref(s);
}

static void slice_done(void *ud) {
  batch_put(ud, 1);
}

static void send_batch(chime__stream_t *s, chime__call_t *call,
                       const chime_ring_view_t *v) {
  uint8_t *base = chime_ring_slot_base(s->ring, v->slot);
  uint64_t total = s->send_bytes;
  unsigned nchunks =
      (unsigned)((total + CHIME__CHUNK_BYTES - 1) / CHIME__CHUNK_BYTES);
  /* A batch of whole MiBs has a small tail (the sample info): it rides with
   * the last chunk rather than costing a message of its own. */
  if (nchunks > 1 && total - (uint64_t)(nchunks - 1) * CHIME__CHUNK_BYTES <=
                         CHIME__CHUNK_BYTES / 16)
    nchunks--;
  batch_t *b = malloc(sizeof(*b));
  if (b == NULL) {
    pthread_mutex_lock(&s->mu);
    chime_ring_release(s->ring, v->slot);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  b->s = s;
  b->slot = v->slot;
  b->seq = v->seq;
  b->next = NULL;
  atomic_init(&b->refs, nchunks);
  chime__stream_ref(s);
  pthread_mutex_lock(&s->mu);
  if (s->hold && !s->unheld) {
    atomic_fetch_add(&b->refs, 1);
    if (s->held_tail != NULL)
      s->held_tail->next = b;
    else
      s->held_head = b;
    s->held_tail = b;
  }
  pthread_mutex_unlock(&s->mu);
  for (unsigned i = 0; i < nchunks; i++) {
    uint64_t off = (uint64_t)i * CHIME__CHUNK_BYTES;
    uint64_t len = i + 1 == nchunks ? total - off : CHIME__CHUNK_BYTES;
    uint8_t hdr[CHIME_CHUNK_HEADER_MAX];
    size_t hl = chime__chunk_header_encode(hdr, v->seq, off, total, len);
    grpc_slice sl[2];
    sl[0] = grpc_slice_from_copied_buffer((const char *)hdr, hl);
    sl[1] = grpc_slice_new_with_user_data(base + off, len, slice_done, b);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, 2);
    grpc_slice_unref(sl[0]);
    grpc_slice_unref(sl[1]);
    if (chime__call_send(call, bb) != 0) {
      /* The call is finishing: the chunks never made drop their share. */
      if (i + 1 < nchunks)
        batch_put(b, nchunks - i - 1);
      return;
    }
  }
  atomic_fetch_add(&s->batches, 1);
  atomic_fetch_add(&s->bytes, total);
}

/* Sends every published batch the client has credit for, in order. Called
 * by the sampler after each publish and by the completion-queue thread when
 * credits arrive, so no thread waits on either. send_mu keeps batches (and
 * their chunks) in sequence; s->mu guards the ring's consumer side. */
static void send_ready(chime__stream_t *s) {
  pthread_mutex_lock(&s->send_mu);
  chime__call_t *call = s->sender_call;
  while (call != NULL && !atomic_load(&s->stop)) {
    chime_ring_view_t v;
    pthread_mutex_lock(&s->mu);
    int rc = s->credits > 0 ? chime_ring_next(s->ring, &v, 0) : CHIME_EBUSY;
    if (rc == 0)
      s->credits--;
    pthread_mutex_unlock(&s->mu);
    if (rc != 0)
      break;
    send_batch(s, call, &v);
  }
  pthread_mutex_unlock(&s->send_mu);
}

/* The stream ended: fifo items in batches its learner never finished (not
 * taken, or taken and not released; in stream mode not yet sent or still
 * held by gRPC) go back to the table, so a learner's death loses nothing.
 * At least once: a batch the learner was reading as its stream ended may be
 * delivered again. */
static void give_back(chime__stream_t *s) {
  uint32_t *slots = malloc(s->lay.slots * sizeof(*slots));
  if (slots == NULL) {
    fprintf(stderr, "chimed: stream %llu: out of memory giving back items\n",
            (unsigned long long)s->id);
    return;
  }
  uint32_t n = chime_ring_unreleased(s->ring, slots, s->lay.slots);
  for (uint32_t i = 0; i < n; i++)
    if (chime__table_give_back(s->table, &s->lay,
                               chime_ring_slot_base(s->ring, slots[i])) != 0)
      fprintf(stderr,
              "chimed: stream %llu: out of memory giving back a batch of "
              "%u items\n",
              (unsigned long long)s->id, s->lay.batch_size);
  free(slots);
}

/* A token that expired unused ends its stream: nobody can attach any more,
 * and the ring would hold its budget until the call ends. 0 when the token
 * was taken instead (the handoff is under way and decides). */
static int expire_unused(chime__stream_t *s) {
  chime_server_t *srv = s->srv;
  pthread_mutex_lock(&srv->mu);
  int unused = s->token_live;
  s->token_live = 0;
  chime__call_t *call = unused ? s->call : NULL;
  if (call != NULL)
    chime__call_ref(call);
  pthread_mutex_unlock(&srv->mu);
  if (!unused)
    return 0;
  chime__stream_close(s);
  if (call != NULL) {
    chime__call_finish(call, CHIME_ETIMEDOUT,
                       "handoff token expired unused after %u ms",
                       (unsigned)srv->cfg.handoff_expires_ms);
    chime__call_unref(call);
  }
  return 1;
}

/* shm: items sampled into a ring its learner never maps would be lost, so
 * the sampler waits for the handoff (or the stream's end) first. */
static void wait_attached(chime__stream_t *s) {
  uint64_t deadline = s->token_deadline_ns;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->attached && !atomic_load(&s->stop) &&
           chime__now_ns() < deadline) {
      struct timespec ts = {(time_t)(deadline / 1000000000u),
                            (long)(deadline % 1000000000u)};
      pthread_cond_timedwait(&s->attach_cond, &s->mu, &ts);
    }
    int done = s->attached || atomic_load(&s->stop);
    pthread_mutex_unlock(&s->mu);
    if (done || expire_unused(s))
      return;
    deadline = UINT64_MAX; /* taken: wait for the fd to leave, or the end */
  }
}

static void unhold_all(chime__stream_t *s);

static void *sampler_main(void *arg) {
  chime__stream_t *s = arg;
  if (s->mode == CHIME_MODE_SHM)
    wait_attached(s);
  while (!atomic_load(&s->stop)) {
    chime_ring_wslot_t ws;
    uint64_t seq;
    int rc = chime_ring_acquire(s->ring, &ws, 250);
    if (rc == CHIME_ETIMEDOUT)
      continue;
    if (rc != 0)
      break;
    rc = chime__table_sample(s->table, &s->lay, &ws, &s->stop);
    if (rc != 0) {
      chime_ring_abandon(s->ring, ws.slot);
      break;
    }
    chime_ring_publish(s->ring, ws.slot, &seq);
    if (s->mode == CHIME_MODE_STREAM)
      send_ready(s);
  }
  give_back(s);
  unhold_all(s);
  chime__stream_unref(s);
  return NULL;
}

static int spawn(void *(*fn)(void *), chime__stream_t *s) {
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  chime__stream_ref(s);
  int e = pthread_create(&th, &attr, fn, s);
  pthread_attr_destroy(&attr);
  if (e != 0) {
    chime__stream_unref(s);
    return CHIME_ESYS;
  }
  return 0;
}

int chime__stream_start(chime__stream_t *s, chime__call_t *call) {
  if (s->mode == CHIME_MODE_STREAM) {
    /* The caller holds `call`; a close that already ran (server stopping)
     * leaves nothing to send to, a later one drops this reference. */
    pthread_mutex_lock(&s->send_mu);
    if (!atomic_load(&s->closed)) {
      s->sender_call = call;
      chime__call_ref(call);
    }
    pthread_mutex_unlock(&s->send_mu);
  }
  return spawn(sampler_main, s);
}

/* Unlinks the held batch with seq (NULL when none: unknown, or named
 * twice). Caller holds s->mu. */
static batch_t *unhold_seq(chime__stream_t *s, uint64_t seq) {
  for (batch_t **pp = &s->held_head, *prev = NULL; *pp != NULL;
       prev = *pp, pp = &(*pp)->next) {
    batch_t *b = *pp;
    if (b->seq != seq)
      continue;
    *pp = b->next;
    if (s->held_tail == b)
      s->held_tail = prev;
    b->next = NULL;
    return b;
  }
  return NULL;
}

void chime__stream_credit(chime__stream_t *s, uint32_t n,
                          const uint64_t *released, size_t nreleased) {
  batch_t *done = NULL;
  pthread_mutex_lock(&s->mu);
  /* A client can't be owed more than the ring holds; cap, don't trust. */
  uint64_t c = (uint64_t)s->credits + n;
  s->credits = c > s->lay.slots - 1 ? s->lay.slots - 1 : (uint32_t)c;
  /* Named seqs the learner is done with; a client that names none releases
   * the oldest. A seq not held (made up, repeated) is ignored: a lying
   * learner can only give back its own batches early. */
  for (size_t i = 0; i < (nreleased ? nreleased : n); i++) {
    batch_t *b = nreleased
                     ? unhold_seq(s, released[i])
                     : (s->held_head ? unhold_seq(s, s->held_head->seq) : NULL);
    if (b != NULL) {
      b->next = done;
      done = b;
    }
  }
  pthread_mutex_unlock(&s->mu);
  while (done != NULL) {
    batch_t *b = done;
    done = b->next;
    batch_put(b, 1);
  }
  send_ready(s);
}

/* The stream ended (its items given back): held batches need the learner
 * no more. */
static void unhold_all(chime__stream_t *s) {
  pthread_mutex_lock(&s->mu);
  batch_t *b = s->held_head;
  s->held_head = s->held_tail = NULL;
  s->unheld = 1;
  pthread_mutex_unlock(&s->mu);
  while (b != NULL) {
    batch_t *n = b->next;
    batch_put(b, 1);
    b = n;
  }
}

void chime__stream_close(chime__stream_t *s) {
  chime_server_t *srv = s->srv;
  if (atomic_exchange(&s->closed, 1))
    return;
  atomic_store(&s->stop, 1);
  chime_ring_shutdown(s->ring);
  chime__table_wake(s->table);
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->attach_cond); /* a sampler waiting to attach */
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&srv->mu);
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    srv->streams = s->next;
  if (s->next != NULL)
    s->next->prev = s->prev;
  s->prev = s->next = NULL;
  s->token_live = 0;
  chime__call_t *call = s->call; /* guarded by srv->mu, see stream_kill */
  s->call = NULL;
  pthread_mutex_unlock(&srv->mu);
  pthread_mutex_lock(&s->send_mu);
  chime__call_t *sender_call = s->sender_call;
  s->sender_call = NULL;
  pthread_mutex_unlock(&s->send_mu);
  if (srv->handoff != NULL)
    chime__handoff_notify(srv->handoff);
  if (call != NULL)
    chime__call_unref(call);
  if (sender_call != NULL)
    chime__call_unref(sender_call);
}

void chime__stream_attached(chime__stream_t *s) {
  pthread_mutex_lock(&s->mu);
  s->attached = 1;
  pthread_cond_broadcast(&s->attach_cond);
  pthread_mutex_unlock(&s->mu);
}

void chime__stream_kill(chime__stream_t *s, const char *why) {
  /* Lock order: server, then call (never a call's under a stream's). */
  pthread_mutex_lock(&s->srv->mu);
  chime__call_t *call = s->call;
  if (call != NULL)
    chime__call_ref(call);
  pthread_mutex_unlock(&s->srv->mu);
  chime__stream_close(s);
  if (call != NULL) {
    grpc_call_cancel_with_status(call->call, GRPC_STATUS_CANCELLED, why, NULL);
    chime__call_unref(call);
  }
}
