/* Streams: ring creation under the memory budgets (the registry's), one
 * fill step for the fill pool (wait for the attach, take a free slot,
 * sample a batch into it, publish), and the end: what the learner did not
 * finish goes back to the table. Where the two modes part, the stream's
 * mode table decides (streammode.h: mode_shm.c, mode_stream.c); this
 * file never names a mode.
 * The other end of a stream of batches: src/client/stream.c (one basename, two
 * ends). */
#include "common/log.h"
#include "server/stream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/errfmt.h"
#include "common/spec.h"
#include "replay/rules.h"
#include "ring/extents.h"
#include "ring/layout.h"
#include "ring/pin.h"

void chime__stream_ref(chime__stream_t *s) {
  atomic_fetch_add(&s->refs, 1);
}

void chime__stream_unref(chime__stream_t *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1)
    return;
  chime_server_t *srv = s->srv;
  if (s->end_call != NULL) /* never retired: the server stopped */
    chime__call_unref(s->end_call);
  s->ops->fini(s);
  chime_ring_destroy(s->ring);
  s->ring = NULL;
  pthread_mutex_destroy(&s->mu);
  chime__registry_exit(&srv->streams);
  chime__stream_unhold(s); /* chimed's own mapping is gone */
}

void chime__stream_hold(chime__stream_t *s) {
  atomic_fetch_add(&s->holds, 1);
}

void chime__stream_unhold(chime__stream_t *s) {
  if (atomic_fetch_sub(&s->holds, 1) != 1)
    return;
  /* 0 when it was never charged */
  chime__registry_uncharge(&s->srv->streams, s->ring_bytes);
  free(s);
}

static int stream_ring_fd(chime__stream_t *s) {
  return chime_ring_fd(s->ring);
}

static void stream_ring_id(chime__stream_t *s, dev_t *dev, ino_t *ino) {
  *dev = s->ring_dev;
  *ino = s->ring_ino;
}

static int stream_closed(chime__stream_t *s) {
  return atomic_load(&s->closed);
}

const chime__stream_ops_t chime__stream_ops = {
    .ref = chime__stream_ref,
    .unref = chime__stream_unref,
    .hold = chime__stream_hold,
    .unhold = chime__stream_unhold,
    .ring_fd = stream_ring_fd,
    .ring_id = stream_ring_id,
    .attached = chime__stream_attached,
    .kill = chime__stream_kill,
    .closed = stream_closed,
};

/* The leaves the stream's ring holds as their stored bytes (framed) and,
 * of those, the ones its client decompresses (unframe): every fixed
 * compressed leaf of a plain table, and every compressed step leaf of a
 * sequence table (a window's steps' stored bytes), for a stream-mode
 * client that decompresses (the wire carries the frames), and the leaves
 * the learner asked to keep compressed, in either mode (plain tables
 * only; docs/replay.md, "Compressed leaves"). A name that is no
 * compressed leaf is refused. */
static int frames_plan(const chime__table_t *t, const Chime__V1__Open *open,
                       const chime__stream_mode_ops_t *mode, uint8_t *framed,
                       uint8_t *unframe, char *err, size_t errlen) {
  const chime_spec_t *spec = chime__table_item_spec(t);
  const chime__table_config_t *tc = chime__table_config(t);
  int plain = tc->sequence_length == 0;
  memset(framed, 0, CHIME_MAX_LEAVES);
  memset(unframe, 0, CHIME_MAX_LEAVES);
  for (size_t k = 0; k < open->n_keep_compressed; k++) {
    char pn[CHIME__PRINTABLE_LEN(64)];
    const char *name = open->keep_compressed[k];
    uint32_t l = 0;
    while (l < spec->nleaves && strcmp(spec->leaves[l].name, name) != 0)
      l++;
    if (l == spec->nleaves || !chime__table_compressed(t, l) ||
        spec->leaves[l].ragged)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "keep_compressed: table '%s' has no %s leaf '%s'",
                         tc->name,
                         l == spec->nleaves ? "such" : "compressed fixed-shape",
                         chime__printable(pn, sizeof(pn), name, 64));
    if (!plain)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "keep_compressed: table '%s' is a sequence table "
                         "(plain tables only, for now)",
                         tc->name);
    framed[l] = 1;
  }
  if (!open->frames || mode->mode != CHIME_MODE_STREAM)
    return 0;
  for (uint32_t l = 0; l < spec->nleaves; l++)
    if (chime__table_compressed(t, l) && !spec->leaves[l].ragged && !framed[l])
      framed[l] = unframe[l] = 1;
  return 0;
}

/* The Open's shape and the table's rules for its batches (replay/rules.h):
 * 0, or a CHIME_E code with err for the client. */
static int open_refused(chime_server_t *srv, const chime__table_config_t *tc,
                        const Chime__V1__Open *open,
                        const chime__stream_mode_ops_t *mode, char *err,
                        size_t errlen) {
  if (open->batch_size == 0 || open->batch_size > CHIME_RING_MAX_BATCH)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "batch_size %u: must be 1..%u", open->batch_size,
                       CHIME_RING_MAX_BATCH);
  if (open->slots < 2 || open->slots > CHIME_RING_MAX_SLOTS)
    return chime__fail(err, errlen, CHIME_EINVAL, "slots %u: must be 2..%u",
                       open->slots, CHIME_RING_MAX_SLOTS);
  if (mode == NULL)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "mode %d: must be MODE_SHM (1) or MODE_STREAM (2)",
                       (int)open->mode);
  if (open->prefetch > open->slots)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "prefetch %u: must be 0..slots (%u)", open->prefetch,
                       open->slots);
  int rc = chime__rules_stream(tc, open->batch_size, err, errlen);
  if (rc != 0)
    return rc;
  if (atomic_load(&srv->stopping))
    return chime__fail(err, errlen, CHIME_ESHUTDOWN, "shutting down");
  return 0;
}

/* The ring the stream would have: its spec (*rspec, framed leaves as
 * stored), the leaves its client decompresses (unframe) and its size,
 * checked against the budgets before anything is created or page-locked:
 * a refused stream costs no memory and no registration. */
static int ring_plan(chime_server_t *srv, const chime__table_t *t,
                     const Chime__V1__Open *open,
                     const chime__stream_mode_ops_t *mode, chime_spec_t *rspec,
                     uint8_t *unframe, uint64_t *ring_bytes, char *err,
                     size_t errlen) {
  const chime__table_config_t *tc = chime__table_config(t);
  uint8_t framed[CHIME_MAX_LEAVES];
  char lerr[256];
  int rc = frames_plan(t, open, mode, framed, unframe, err, errlen);
  if (rc != 0)
    return rc;
  if (chime__spec_framed_steps(rspec, chime__table_item_spec(t), framed,
                               tc->sequence_length) != 0)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "table '%s': a compressed leaf too large to frame",
                       tc->name);
  chime_ring_layout_t lay;
  rc = chime__ring_layout(&lay, rspec, open->batch_size, open->slots, lerr,
                          sizeof(lerr));
  if (rc == 0 && chime__ring_bytes(&lay, ring_bytes) != 0)
    rc = chime__fail(lerr, sizeof(lerr), CHIME_EOVERFLOW, "ring too large");
  if (rc != 0)
    return chime__fail(err, errlen, rc, "ring for table '%s': %s", tc->name,
                       lerr);
  return chime__registry_check(&srv->streams, *ring_bytes, err, errlen);
}

/* The ring page-locked (pin_host_memory): the full report names the
 * server's library paths and site directories, the operator's business
 * (the log), not the remote client's (err). */
static int ring_pin(chime__stream_t *s, char *err, size_t errlen) {
  char pin_err[CHIME__PIN_ERRLEN], what[96];
  int rc = chime__ring_pin(s->ring, pin_err, sizeof(pin_err));
  if (rc != 0) {
    chime__log(CHIME_LOG_ERROR,
               "stream on table '%s': cannot page-lock the ring: %s",
               s->table_name, pin_err);
    return chime__fail(
        err, errlen, rc,
        "page-locking the ring failed on the server: %s; see the server log",
        chime__pin_error_name(pin_err, rc, what, sizeof(what)));
  }
  s->pinned_bytes = chime_ring_pinned_bytes(s->ring);
  return 0;
}

/* Creates s's ring of s->spec, as charged (s->ring_bytes). */
static int ring_make(chime__stream_t *s, const Chime__V1__Open *open, char *err,
                     size_t errlen) {
  int rc =
      chime__ring_create(&s->ring, &s->spec, open->batch_size, open->slots);
  if (rc != 0)
    return chime__fail(err, errlen, rc,
                       "cannot create a ring for table '%s': %s: %s",
                       s->table_name, chime_strerror(rc), chime_last_error());
  /* A learner that keeps the ring full (one over several shards) would
   * wake the sampler on each release; a quarter of the slots free wakes it
   * about once in slots / 4 releases instead (docs/ring.md, wake
   * threshold). */
  rc = chime__ring_set_wake_at(s->ring,
                               open->slots / 4 > 1 ? open->slots / 4 : 1);
  if (rc != 0)
    return rc;
  s->lay = *chime_ring_layout(s->ring);
  size_t map_len = 0;
  chime_ring_map_base(s->ring, &map_len);
  if (map_len != s->ring_bytes) /* the budget charged what is mapped */
    return chime__fail(err, errlen, CHIME_ESYS,
                       "ring of %zu bytes, %llu expected", map_len,
                       (unsigned long long)s->ring_bytes);
  struct stat st;
  if (fstat(chime_ring_fd(s->ring), &st) == 0) {
    s->ring_dev = st.st_dev;
    s->ring_ino = st.st_ino;
  }
  s->send_bytes = chime__slot_send_bytes(&s->lay);
  return s->srv->cfg.pin_host_memory ? ring_pin(s, err, errlen) : 0;
}

int chime__stream_open(chime__stream_t **out, chime_server_t *srv,
                       chime__call_t *call, const Chime__V1__Open *open,
                       const chime__stream_mode_ops_t *mode, char *err,
                       size_t errlen) {
  int rc = 0;
  const char *tname = open->table ? open->table : "";
  *out = NULL;
  chime__table_t *t = chime__server_table(srv, tname, NULL);
  if (t == NULL) {
    char pn[CHIME__PRINTABLE_LEN(64)];
    return chime__fail(err, errlen, CHIME_ENOTFOUND, "table '%s' not found",
                       chime__printable(pn, sizeof(pn), tname, 64));
  }
  const chime__table_config_t *tc = chime__table_config(t);
  if ((rc = open_refused(srv, tc, open, mode, err, errlen)) != 0)
    return rc;
  uint8_t unframe[CHIME_MAX_LEAVES];
  chime_spec_t rspec;
  uint64_t ring_bytes = 0;
  rc = ring_plan(srv, t, open, mode, &rspec, unframe, &ring_bytes, err, errlen);
  if (rc != 0)
    return rc;

  chime__stream_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  s->srv = srv;
  s->table = t;
  snprintf(s->table_name, sizeof(s->table_name), "%s", tc->name);
  s->ops = mode;
  s->mode = mode->mode;
  s->resumable = open->resumable && mode->mode == CHIME_MODE_STREAM;
  s->spec = rspec;
  memcpy(s->unframe, unframe, sizeof(s->unframe));
  atomic_init(&s->refs, 1);
  atomic_init(&s->holds, 1);
  pthread_mutex_init(&s->mu, NULL);
  /* The mode's state (the last unref finishes it, made or not). Its
   * failure is told after the budgets'. */
  int init_rc = mode->init(s, open);
  /* Counted from here (the last unref uncounts it), charged only if it
   * fits. */
  if ((rc = chime__registry_enter(&srv->streams, ring_bytes, err, errlen)) != 0)
    goto out;
  s->ring_bytes = ring_bytes;
  if (init_rc != 0) {
    rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = ring_make(s, open, err, errlen)) != 0)
    goto out;
  /* Last: nothing fails after it (the registry holds a reference). */
  if (mode->expose != NULL && (rc = mode->expose(s, err, errlen)) != 0)
    goto out;
  s->id = chime__registry_add(&srv->streams, &s->node, s);
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

int chime__stream_pins_init(chime__stream_t *s, const Chime__V1__Open *open,
                            int times) {
  size_t n = (size_t)open->slots * open->batch_size;
  s->pins = calloc(open->slots, sizeof(*s->pins));
  s->pin_rows = malloc(n * sizeof(*s->pin_rows));
  if (times)
    s->pin_times = malloc(n * sizeof(*s->pin_times));
  if (s->pins == NULL || s->pin_rows == NULL || (times && s->pin_times == NULL))
    return CHIME_ENOMEM;
  for (uint32_t i = 0; i < open->slots; i++) {
    s->pins[i].rows = s->pin_rows + (size_t)i * open->batch_size;
    if (times)
      s->pins[i].times = s->pin_times + (size_t)i * open->batch_size;
  }
  return 0;
}

void chime__stream_pins_fini(chime__stream_t *s) {
  for (uint32_t i = 0; s->pins != NULL && i < s->lay.slots; i++)
    chime__table_unpin(s->table, &s->pins[i]);
  free(s->pins);
  free(s->pin_rows);
  free(s->pin_times);
  s->pins = NULL;
  s->pin_rows = NULL;
  s->pin_times = NULL;
}

/* The stream ended: items that batches its learner never finished (not
 * taken, or taken and not released; in stream mode not yet sent or still
 * held by gRPC) took out of the table (fifo, max_times_sampled) go back,
 * so a learner's death loses nothing. From each batch's pinned rows and
 * pin_times: nothing of the slot is read (in shm mode its bytes, offsets
 * and info are the learner's to write). At least once: a batch the
 * learner was reading as its stream ended may be delivered again. Newest
 * first: each goes in front of the table's items, so they keep their
 * order. No pins: the table takes nothing out. */
static void give_back(chime__stream_t *s) {
  if (s->pins == NULL)
    return;
  uint32_t *slots = malloc(s->lay.slots * sizeof(*slots));
  if (slots == NULL) {
    chime__log(CHIME_LOG_ERROR, "stream %llu: out of memory giving back items",
               (unsigned long long)s->id);
    return;
  }
  uint32_t n = chime__ring_unreleased(s->ring, slots, s->lay.slots);
  for (uint32_t i = n; i-- > 0;)
    chime__table_give_back_pinned(s->table, &s->lay, &s->pins[slots[i]]);
  free(slots);
}

/* Ends a call chime__stream_end was given, unless the server stops. */
static void end_call_ok(chime__stream_t *s, chime__call_t *call) {
  if (call == NULL)
    return;
  if (!atomic_load(&s->srv->stopping))
    chime__call_finish(call, CHIME_OK, "%s", "");
  chime__call_unref(call);
}

/* The stream is over: what its learner did not finish goes back, then a
 * call that asked to end (chime__stream_end) does. */
static chime__fill_t retire(chime__stream_t *s) {
  chime__registry_remove(&s->srv->streams, &s->node); /* parked: listed */
  chime__table_unwait(s->table, &s->twait);
  give_back(s);
  if (s->ops->retired != NULL)
    s->ops->retired(s);
  pthread_mutex_lock(&s->mu);
  s->retired = 1;
  chime__call_t *call = s->end_call;
  s->end_call = NULL;
  pthread_mutex_unlock(&s->mu);
  end_call_ok(s, call);
  return CHIME__FILL_DONE;
}

/* One fill step (fill_pool.h): never blocks; the mode's gate may hold it
 * back (shm: until the learner holds the ring). */
static chime__fill_t stream_fill(chime__fill_job_t *j, chime__fill_wait_t *w) {
  chime__stream_t *s =
      (chime__stream_t *)((char *)j - offsetof(chime__stream_t, job));
  if (atomic_load(&s->stop)) {
    /* Parked (resume.c): its learner may yet resume and name what it
     * received; woken at the deadline or by the resume. */
    uint64_t until = atomic_load(&s->park_until_ns);
    if (until != 0 && chime__now_ns() < until &&
        !atomic_load(&s->srv->stopping)) {
      w->until_ns = until;
      return CHIME__FILL_WAIT_UNTIL;
    }
    return retire(s);
  }
  chime__fill_t g =
      s->ops->gate != NULL ? s->ops->gate(s, w) : CHIME__FILL_AGAIN;
  if (g == CHIME__FILL_DONE)
    return retire(s);
  if (g != CHIME__FILL_AGAIN)
    return g;
  chime__ring_wslot_t ws;
  uint64_t seq;
  int rc = s->ops->acquire(s, &ws, w);
  if (rc == CHIME_EBUSY)
    return CHIME__FILL_WAIT_SLOT;
  if (rc != 0)
    return retire(s);
  rc = s->ops->sample(s, &ws);
  if (rc != 0) {
    s->ops->abandon(s, ws.slot);
    if (rc != CHIME_EBUSY)
      return retire(s);
    return s->ops->wait_items != NULL ? s->ops->wait_items(s, w)
                                      : CHIME__FILL_WAIT_ITEMS;
  }
  rc = chime__ring_publish(s->ring, ws.slot, &seq); /* cannot fail: acquired */
  (void)rc;
  if (s->ops->published != NULL)
    s->ops->published(s);
  return CHIME__FILL_AGAIN;
}

static void stream_fill_done(chime__fill_job_t *j) {
  chime__stream_unref(
      (chime__stream_t *)((char *)j - offsetof(chime__stream_t, job)));
}

/* The table has items for a stream that waited for them. */
static void items_arrived(chime__table_waiter_t *w) {
  chime__stream_t *s =
      (chime__stream_t *)((char *)w - offsetof(chime__stream_t, twait));
  chime__pool_kick(s->srv->sampler, &s->job);
}

int chime__stream_start(chime__stream_t *s, chime__call_t *call) {
  /* The caller holds `call`; a close that already ran (server stopping)
   * leaves nothing to send to, a later one drops this reference. */
  if (s->ops->start != NULL)
    s->ops->start(s, call);
  s->job.fill = stream_fill;
  s->job.done = stream_fill_done;
  s->twait.fn = items_arrived;
  chime__stream_ref(s); /* the pool's, dropped by stream_fill_done */
  chime__pool_add(s->srv->sampler, &s->job);
  return 0;
}

void chime__stream_close(chime__stream_t *s) {
  chime_server_t *srv = s->srv;
  if (atomic_exchange(&s->closed, 1))
    return;
  atomic_store(&s->stop, 1);
  chime__ring_shutdown(s->ring);
  /* Once started, its next fill step retires it. */
  chime__pool_kick(srv->sampler, &s->job);
  if (atomic_load(&s->park_until_ns) == 0) /* else listed until it retires */
    chime__registry_remove(&srv->streams, &s->node);
  pthread_mutex_lock(&srv->mu);
  chime__call_t *call = s->call; /* guarded by srv->mu, see stream_kill */
  s->call = NULL;
  pthread_mutex_unlock(&srv->mu);
  if (s->ops->close != NULL)
    s->ops->close(s); /* stream mode: its sender stops */
  if (call != NULL)
    chime__call_unref(call);
}

void chime__stream_end(chime__stream_t *s, chime__call_t *call) {
  chime__call_ref(call);
  pthread_mutex_lock(&s->mu);
  int now = s->retired || s->end_call != NULL;
  if (!now)
    s->end_call = call;
  pthread_mutex_unlock(&s->mu);
  if (now)
    end_call_ok(s, call);
  chime__stream_close(s);
}

void chime__stream_attached(chime__stream_t *s) {
  pthread_mutex_lock(&s->mu);
  s->attached = 1;
  pthread_mutex_unlock(&s->mu);
  chime__pool_kick(s->srv->sampler, &s->job);
}

chime__call_t *chime__stream_call(chime__stream_t *s) {
  /* Lock order: server, then call (never a call's under a stream's). */
  pthread_mutex_lock(&s->srv->mu);
  chime__call_t *call = s->call;
  if (call != NULL)
    chime__call_ref(call);
  pthread_mutex_unlock(&s->srv->mu);
  return call;
}

void chime__stream_kill(chime__stream_t *s, const char *why) {
  chime__call_t *call = chime__stream_call(s);
  chime__stream_close(s);
  if (call != NULL) {
    chime__call_cancel(call, GRPC_STATUS_CANCELLED, why);
    chime__call_unref(call);
  }
}
