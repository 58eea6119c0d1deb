/* chime.Stream: next() with the GIL released, iteration, close() deferred
 * while batches are leased, stats (batch.h says how views stay safe). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- Stream */

static int parse_timeout_ms(PyObject *t, int *out) {
  if (t == Py_None) {
    *out = -1;
    return 0;
  }
  double s = PyFloat_AsDouble(t);
  if (s == -1.0 && PyErr_Occurred())
    return -1;
  if (!(s >= 0 && s < 2e6)) {
    chimepy_raise(CHIME_EINVAL, "timeout: seconds >= 0, or None");
    return -1;
  }
  *out = (int)(s * 1000);
  return 0;
}

/* device: None or "cpu" (-1), an ordinal, "cuda" (0) or "cuda:N", or
 * anything whose str() is one (torch.device). */
static int parse_device(PyObject *d, int *out) {
  *out = -1;
  if (d == Py_None)
    return 0;
  if (PyBool_Check(d)) { /* an int to C, but False is no ordinal */
    chimepy_raise(CHIME_EINVAL,
                  "device: None, 'cpu', 'cuda', 'cuda:N' or an ordinal "
                  "(not a bool)");
    return -1;
  }
  if (PyLong_Check(d)) {
    long v = PyLong_AsLong(d);
    if (v == -1 && PyErr_Occurred())
      return -1;
    if (v < -1 || v > 1 << 20) {
      chimepy_raise(CHIME_EINVAL, "device: a CUDA ordinal, or -1 for host");
      return -1;
    }
    *out = (int)v;
    return 0;
  }
  PyObject *str = PyObject_Str(d);
  const char *s = str ? PyUnicode_AsUTF8(str) : NULL;
  int rc = -1;
  char *end = NULL;
  if (!s)
    goto cleanup;
  if (!strcmp(s, "cpu")) {
    rc = 0;
  } else if (!strcmp(s, "cuda")) {
    *out = 0;
    rc = 0;
  } else if (!strncmp(s, "cuda:", 5) && s[5] >= '0' && s[5] <= '9') {
    long v = strtol(s + 5, &end, 10);
    if (*end == '\0' && v <= 1 << 20) {
      *out = (int)v;
      rc = 0;
    }
  }
  if (rc)
    chimepy_raise(CHIME_EINVAL,
                  "device: None, 'cpu', 'cuda', 'cuda:N' or an ordinal");
cleanup:
  Py_XDECREF(str);
  return rc;
}

/* keep_compressed: a leaf name or a list of them, as the library's
 * comma-separated text ("" for None). */
static int keep_text(PyObject *o, char *buf, size_t len) {
  buf[0] = 0;
  if (o == NULL || o == Py_None)
    return 0;
  PyObject *seq = PyUnicode_Check(o)
                      ? PyTuple_Pack(1, o)
                      : PySequence_Fast(o, "keep_compressed: "
                                           "expected leaf names");
  if (seq == NULL)
    return -1;
  size_t at = 0;
  int rc = 0;
  for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
    const char *name = PyUnicode_Check(it) ? PyUnicode_AsUTF8(it) : NULL;
    size_t n = name != NULL ? strlen(name) : 0;
    if (name == NULL || n == 0 || strchr(name, ',') != NULL ||
        at + n + 2 > len) {
      if (!PyErr_Occurred())
        chimepy_raise(CHIME_EINVAL, "keep_compressed: expected leaf names");
      rc = -1;
      break;
    }
    if (at > 0)
      buf[at++] = ',';
    memcpy(buf + at, name, n + 1);
    at += n;
  }
  Py_DECREF(seq);
  return rc;
}

static int stream_init(PyObject *o, PyObject *args, PyObject *kw) {
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  static char *kwlist[] = {"client",
                           "table",
                           "batch_size",
                           "mode",
                           "slots",
                           "prefetch",
                           "open_timeout",
                           "pin_host_memory",
                           "timeout",
                           "device",
                           "version",
                           "ready_bytes",
                           "keep_compressed",
                           "max_inflight_bytes",
                           "reconnect_timeout",
                           "connections",
                           NULL};
  PyObject *client, *iter_timeout = Py_None, *device = Py_None;
  const chime_stream_opts_t def = CHIME_STREAM_OPTS_INIT;
  const char *table, *mode = chime_mode_name(def.mode);
  double open_timeout = def.open_timeout_ms / 1000.0;
  int pin = def.pin_host_memory;
  PyObject *batch_o = NULL, *slots_o = NULL, *prefetch_o = NULL,
           *version_o = NULL, *ready_o = NULL, *keep_o = NULL,
           *inflight_o = NULL, *conns_o = NULL;
  double reconnect = 0; /* 0: the default */
  if (!PyArg_ParseTupleAndKeywords(
          args, kw, "O!s|OsOOdpOOOOOOdO:Stream", kwlist, &chimepy_client_type,
          &client, &table, &batch_o, &mode, &slots_o, &prefetch_o,
          &open_timeout, &pin, &iter_timeout, &device, &version_o, &ready_o,
          &keep_o, &inflight_o, &reconnect, &conns_o))
    return -1;
  char keep[CHIME_MAX_LEAVES * CHIME_MAX_NAME];
  if (keep_text(keep_o, keep, sizeof(keep)))
    return -1;
  /* Counts past 32 bits and negative ones are refused here; the library
   * checks the rest of their ranges. */
  uint64_t batch_size = def.batch_size, slots = def.slots,
           prefetch = def.prefetch, version = 0, ready_bytes = 0, inflight = 0,
           conns = 0;
  if ((batch_o &&
       chimepy_uint_arg(batch_o, "batch_size", 0, UINT32_MAX, &batch_size)) ||
      (slots_o && chimepy_uint_arg(slots_o, "slots", 0, UINT32_MAX, &slots)) ||
      (prefetch_o &&
       chimepy_uint_arg(prefetch_o, "prefetch", 0, UINT32_MAX, &prefetch)) ||
      (version_o &&
       chimepy_uint_arg(version_o, "version", 0, UINT64_MAX, &version)) ||
      (ready_o &&
       chimepy_uint_arg(ready_o, "ready_bytes", 0, UINT64_MAX, &ready_bytes)) ||
      (inflight_o && chimepy_uint_arg(inflight_o, "max_inflight_bytes", 0,
                                      UINT64_MAX, &inflight)) ||
      (conns_o &&
       chimepy_uint_arg(conns_o, "connections", 0, UINT32_MAX, &conns)))
    return -1;
  if (self->client) {
    PyErr_SetString(PyExc_RuntimeError, "Stream already initialised");
    return -1;
  }
  chimepy_client_t *c = (chimepy_client_t *)client;
  if (chimepy_client_check(c) ||
      parse_timeout_ms(iter_timeout, &self->iter_timeout_ms))
    return -1;
  chime_stream_opts_t opts = def;
  /* The modes by the library's names for them. */
  int m = CHIME_MODE_AUTO;
  while (m <= CHIME_MODE_STREAM &&
         strcmp(mode, chime_mode_name((chime_mode_t)m)) != 0)
    m++;
  if (m > CHIME_MODE_STREAM) {
    chimepy_raise(CHIME_EINVAL, "mode must be 'auto', 'shm' or 'stream'");
    return -1;
  }
  opts.mode = (chime_mode_t)m;
  if (!(open_timeout > 0 && open_timeout < 2e6)) {
    chimepy_raise(CHIME_EINVAL, "open_timeout must be positive seconds");
    return -1;
  }
  if (parse_device(device, &self->device))
    return -1;
  opts.batch_size = batch_size;
  opts.slots = slots;
  /* With a device, prefetch is the batches copied ahead; stream mode's
   * credits keep their default. */
  opts.device = self->device;
  opts.prefetch = self->device >= 0 ? def.prefetch : prefetch;
  opts.device_prefetch = self->device >= 0 ? prefetch : 0;
  opts.open_timeout_ms = (int)(open_timeout * 1000);
  opts.pin_host_memory = pin;
  opts.version = version;
  opts.ready_bytes = ready_bytes;
  opts.keep_compressed = keep[0] ? keep : NULL;
  opts.max_inflight_bytes = inflight;
  opts.connections = (uint32_t)conns;
  if (!(reconnect > -2e6 && reconnect < 2e6)) {
    chimepy_raise(CHIME_EINVAL, "reconnect_timeout must be seconds (< 0: "
                                "never)");
    return -1;
  }
  /* Negative: never; 0: the default; a positive sliver still 1 ms. */
  opts.reconnect_timeout_ms =
      reconnect < 0 ? -1
                    : (int)(reconnect * 1000 + (reconnect > 0 ? 0.999 : 0));
  /* At most slots - 1 batches are leased, so a queue of `slots` entries
   * always has room for the slots given back during one next(). */
  self->cap = slots ? slots : def.slots; /* 0: the default */
  if (self->cap > CHIME_RING_MAX_SLOTS)
    self->cap = CHIME_RING_MAX_SLOTS;
  self->pending = calloc(self->cap, sizeof(*self->pending));
  if (!self->pending) {
    PyErr_NoMemory();
    return -1;
  }
  if (chimepy_client_call_begin(c))
    return -1;
  int rc;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_stream_open(&self->s, c->c, table, &opts);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS if (chimepy_client_open_end(c, rc, detail)) {
    self->s = NULL;
    return -1;
  }
  self->client = c;
  /* A stream-mode ring may have grown past the slots asked (the window,
   * docs/remote.md): the learner may hold all it lends. */
  chime_stream_local_stats_t st;
  if (chime_stream_stats(self->s, &st) == 0 && st.slots > self->cap) {
    chime_batch_t *more = realloc(self->pending, st.slots * sizeof(*more));
    if (!more) {
      PyErr_NoMemory();
      chimepy_stream_shut(self);
      return -1;
    }
    self->pending = more;
    self->cap = st.slots;
  }
  self->mode = chime_stream_mode(self->s);
  self->sharded = chime_client_nshards(c->c) > 0;
  const char *why = chime_stream_fallback_reason(self->s);
  self->fallback = why ? PyUnicode_FromString(why) : Py_None;
  if (!why)
    Py_INCREF(Py_None);
  if (!self->fallback) {
    chimepy_stream_shut(self);
    return -1;
  }
  return 0;
}

static void stream_dealloc(PyObject *o) {
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  /* Every batch holds this stream: none is leased any more. */
  if (self->s) {
    (void)chimepy_stream_drain(self);
    chimepy_stream_shut(self);
  }
  Py_XDECREF(self->fallback);
  Py_XDECREF(self->client);
  free(self->pending);
  Py_TYPE(o)->tp_free(o);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits of at most this long at a time, so Ctrl-C is seen within about
 * that long (the writer's waits use the same). */
#define SLICE_MS 50

/* Waits for the next batch into *b with the GIL released, in slices so
 * that Ctrl-C is seen: 0, or -1 with an exception set. */
static int stream_wait(chimepy_stream_t *self, chime_batch_t *b,
                       int timeout_ms) {
  uint64_t deadline = timeout_ms < 0 ? 0 : now_ms() + (uint64_t)timeout_ms;
  int rc;
  /* next()'s detail, kept when releases follow it (a failed release would
   * make chime_last_error() its own). */
  char detail[1024] = "";
  for (;;) {
    int slice = SLICE_MS;
    if (timeout_ms >= 0) {
      uint64_t now = now_ms();
      uint64_t left = deadline > now ? deadline - now : 0;
      if (left < (uint64_t)slice)
        slice = (int)left;
    }
    self->in_next = 1;
    Py_BEGIN_ALLOW_THREADS rc = chime_stream_next(self->s, b, slice);
    Py_END_ALLOW_THREADS self->in_next = 0;
    unsigned drained = self->npending;
    detail[0] = '\0';
    if (rc && drained)
      snprintf(detail, sizeof(detail), "%s", chime_last_error());
    int rrc = chimepy_stream_drain(self);
    if (self->closing) {
      if (rc == 0)
        chimepy_release_unreported(self->s, b);
      chimepy_stream_finish_close(self);
      chimepy_raise(CHIME_ECLOSED, "stream closed during next()");
      return -1;
    }
    if (rrc && rc == 0) {
      chimepy_raise(rrc, chime_last_error()); /* before another release */
      chimepy_release_unreported(self->s, b);
      return -1;
    }
    if (rc == CHIME_ETIMEDOUT &&
        (timeout_ms < 0 || (slice > 0 && now_ms() < deadline))) {
      if (PyErr_CheckSignals() < 0)
        return -1;
      continue;
    }
    if (rc == CHIME_EBUSY && drained)
      continue;
    break;
  }
  if (rc) {
    chimepy_raise(rc, detail[0] ? detail : chime_last_error());
    return -1;
  }
  return 0;
}

static PyObject *stream_next_ms(chimepy_stream_t *self, int timeout_ms) {
  if (!self->s || self->closing)
    return chimepy_raise(CHIME_ECLOSED, "stream is closed");
  if (self->in_next) {
    PyErr_SetString(PyExc_RuntimeError,
                    "chime.Stream.next called by two threads at once");
    return NULL;
  }
  if (self->last) {
    chimepy_batch_t *prev = self->last;
    self->last = NULL;
    int rc = chimepy_batch_request_release(prev);
    if (rc)
      return chimepy_raise(rc, chime_last_error());
  }
  /* The batch is written straight into its object (chime_batch_t is
   * several KiB: no copy of it per batch). Until it is leased the object
   * owns nothing, and its dealloc does nothing but free it. */
  chimepy_batch_t *bt = PyObject_New(chimepy_batch_t, &chimepy_batch_type);
  if (!bt)
    return NULL;
  bt->stream = NULL;
  bt->leased = 0;
  /* A batch the ring already holds is taken without letting go of the
   * GIL (timeout 0 does not wait). Only in shm mode from one server: in
   * stream mode a miss may send credits, and over shards it may reopen a
   * shard's sub-stream (GetInfo, DNS), none of it for under the GIL. */
  int rc = CHIME_ETIMEDOUT;
  if (self->mode == CHIME_MODE_SHM && !self->sharded)
    rc = chime_stream_next(self->s, &bt->b, 0);
  if (rc == CHIME_ETIMEDOUT)
    rc = stream_wait(self, &bt->b, timeout_ms);
  else if (rc) {
    chimepy_raise(rc, chime_last_error());
    rc = -1;
  }
  if (rc) {
    Py_DECREF(bt);
    return NULL;
  }
  Py_INCREF(self);
  bt->stream = self;
  bt->leased = 1;
  bt->release_asked = 0;
  bt->views = 0;
  bt->prev = NULL;
  bt->next = self->held;
  if (self->held)
    self->held->prev = bt;
  self->held = bt;
  self->leased++;
  self->last = bt;
  return (PyObject *)bt;
}

/* next(timeout=1.0), parsed by hand (vectorcall): it runs once a batch. */
static PyObject *stream_next(PyObject *o, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *t = nargs > 0 ? args[0] : NULL;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs > 1 || nargs + nkw > 1) {
    PyErr_SetString(PyExc_TypeError, "next() takes at most one argument, "
                                     "timeout");
    return NULL;
  }
  if (nkw) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
    if (!PyUnicode_Check(name) ||
        PyUnicode_CompareWithASCIIString(name, "timeout") != 0) {
      PyErr_Format(PyExc_TypeError,
                   "next() got an unexpected keyword argument '%S'", name);
      return NULL;
    }
    t = args[0];
  }
  int ms = 1000;
  if (t && parse_timeout_ms(t, &ms))
    return NULL;
  return stream_next_ms((chimepy_stream_t *)o, ms);
}

static PyObject *stream_iternext(PyObject *o) {
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  PyObject *b = stream_next_ms(self, self->iter_timeout_ms);
  if (!b && PyErr_Occurred()) {
    /* A graceful server stop ends the iteration, as EOF ends a file. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *code = value ? PyObject_GetAttrString(value, "code") : NULL;
    int shut =
        code && PyLong_Check(code) && PyLong_AsLong(code) == CHIME_ESHUTDOWN;
    Py_XDECREF(code);
    if (shut) {
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
      PyErr_Clear();
      return NULL;
    }
    PyErr_Restore(type, value, tb);
  }
  return b;
}

static PyObject *stream_close(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  if (self->closing || !self->s)
    Py_RETURN_NONE;
  self->closing = 1;
  self->last = NULL;
  /* Batches without views go back now; the rest when their views go. */
  chimepy_batch_t *bt = self->held;
  while (bt) {
    chimepy_batch_t *next = bt->next;
    bt->release_asked = 1;
    if (bt->views == 0)
      (void)chimepy_batch_give_back(bt);
    bt = next;
  }
  chimepy_stream_finish_close(self);
  Py_RETURN_NONE;
}

static PyObject *stream_set_version(PyObject *o, PyObject *arg) {
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  uint64_t v;
  if (chimepy_uint_arg(arg, "version", 0, UINT64_MAX, &v))
    return NULL;
  if (!self->s || self->closing)
    return chimepy_raise(CHIME_ECLOSED, "stream is closed");
  /* One call at a time, as next(): a sharded stream's set_version walks
   * sub-streams that next() may be reopening, and close() must wait. */
  if (self->in_next) {
    PyErr_SetString(PyExc_RuntimeError,
                    "chime.Stream used by two threads at once "
                    "(set_version while another call runs)");
    return NULL;
  }
  int rc;
  char detail[1024];
  self->in_next = 1;
  Py_BEGIN_ALLOW_THREADS rc = chime_stream_set_version(self->s, v);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS self->in_next = 0;
  /* Slots whose views went meanwhile were queued (batch.c); a close()
   * asked meanwhile happens now. */
  (void)chimepy_stream_drain(self);
  chimepy_stream_finish_close(self);
  if (rc)
    return chimepy_raise(rc, detail);
  Py_RETURN_NONE;
}

static PyObject *stream_stats(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  if (!self->s || self->in_next)
    return chimepy_raise(CHIME_ECLOSED, "stream is closed or busy");
  chime_stream_local_stats_t st;
  int rc = chime_stream_stats(self->s, &st);
  if (rc)
    return chimepy_raise(rc, chime_last_error());
  return Py_BuildValue(
      "{s:s,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:K,s:K,s:K,s:K,s:I,s:K,s:I,s:K,s:I,"
      "s:K,s:K,s:K,s:K,s:K}",
      "mode", chime_mode_name(st.mode), "stream_id",
      (unsigned long long)st.stream_id, "batches",
      (unsigned long long)st.batches, "bytes", (unsigned long long)st.bytes,
      "received_bytes", (unsigned long long)st.received_bytes, "credits",
      (unsigned long long)st.credits, "leases", (unsigned)st.leases,
      "max_leases", (unsigned)st.max_leases, "consumer_wait_ns",
      (unsigned long long)st.consumer_wait_ns, "pinned_bytes",
      (unsigned long long)st.pinned_bytes, "device_bytes",
      (unsigned long long)st.device_bytes, "device_copies",
      (unsigned long long)st.device_copies, "device_max_slots_held",
      (unsigned)st.device_max_slots_held, "dropped_stale",
      (unsigned long long)st.dropped_stale, "shards_aside",
      (unsigned)st.shards_aside, "shard_asides",
      (unsigned long long)st.shard_asides, "slots", (unsigned)st.slots,
      "rtt_ns", (unsigned long long)st.rtt_ns, "window_bytes",
      (unsigned long long)st.window_bytes, "resumes",
      (unsigned long long)st.resumes, "resumes_late",
      (unsigned long long)st.resumes_late, "stalls",
      (unsigned long long)st.stalls);
}

static PyObject *stream_enter(PyObject *o, PyObject *unused) {
  (void)unused;
  Py_INCREF(o);
  return o;
}

static PyObject *stream_exit(PyObject *o, PyObject *args) {
  (void)args;
  return stream_close(o, NULL);
}

static PyObject *stream_iter(PyObject *o) {
  Py_INCREF(o);
  return o;
}

/* The getters of a Stream made by Stream.__new__ without __init__ (no
 * client, nothing opened) say None. */
static PyObject *stream_get_mode(PyObject *o, void *unused) {
  (void)unused;
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  if (!self->client)
    Py_RETURN_NONE;
  return PyUnicode_FromString(chime_mode_name(self->mode));
}

static PyObject *stream_get_fallback(PyObject *o, void *unused) {
  (void)unused;
  PyObject *f = ((chimepy_stream_t *)o)->fallback;
  if (!f)
    Py_RETURN_NONE;
  Py_INCREF(f);
  return f;
}

static PyObject *stream_get_device(PyObject *o, void *unused) {
  (void)unused;
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  if (!self->client || self->device < 0)
    Py_RETURN_NONE;
  return PyLong_FromLong(self->device);
}

static PyObject *stream_get_closed(PyObject *o, void *unused) {
  (void)unused;
  chimepy_stream_t *self = (chimepy_stream_t *)o;
  return PyBool_FromLong(!self->s || self->closing);
}

static PyMethodDef stream_methods[] = {
    {"next", (PyCFunction)(void (*)(void))stream_next,
     METH_FASTCALL | METH_KEYWORDS,
     "next(timeout=1.0) -> Batch: releases the batch the previous next() "
     "returned (deferred while views of it are alive), then waits up to "
     "timeout seconds (None: forever) with the GIL released."},
    {"close", stream_close, METH_NOARGS,
     "Ends the stream; the ring is unmapped once no view of any batch is "
     "alive."},
    {"stats", stream_stats, METH_NOARGS, "this process's view of the stream"},
    {"set_version", stream_set_version, METH_O,
     "set_version(v): the learner's policy version now (the table's newest "
     "rises to it; with max_staleness, items more than that behind it leave, "
     "and batches drawn before it that hold one are dropped by next())"},
    {"__enter__", stream_enter, METH_NOARGS, NULL},
    {"__exit__", stream_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef stream_getset[] = {
    {"mode", stream_get_mode, NULL, "'shm' or 'stream': the mode in use", NULL},
    {"fallback_reason", stream_get_fallback, NULL,
     "None, or why auto mode did not use shm", NULL},
    {"closed", stream_get_closed, NULL, "close() was called", NULL},
    {"device", stream_get_device, NULL,
     "None (host batches), or the CUDA ordinal batches are copied to", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject chimepy_stream_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chime.Stream",
    .tp_basicsize = sizeof(chimepy_stream_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Batches from one table; from Client.stream(). Iterating "
              "calls next(timeout) with the stream's `timeout` (None: "
              "forever) and ends when the server shuts down.",
    .tp_new = PyType_GenericNew,
    .tp_init = stream_init,
    .tp_dealloc = stream_dealloc,
    .tp_iter = stream_iter,
    .tp_iternext = stream_iternext,
    .tp_methods = stream_methods,
    .tp_getset = stream_getset,
};
