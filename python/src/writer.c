/* chime.Writer: samples from dicts of numpy arrays, packed in spec order. */
#include "chimepy.h"
#include "writer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The C writer waits for acks at most this long per call, so that Ctrl-C
 * (a signal Python only acts on with the GIL) is seen between waits; the
 * writer's own timeout is kept here, across the slices. */
#define SLICE_MS 50
/* A wait that ended because a signal handler raised (KeyboardInterrupt). */
#define INTERRUPTED 1

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Raises the error of a failed library call and says which samples made it:
 * acks come in order, so the first `acked` samples this writer took are in
 * the table and the rest are not known to be. The exception carries both
 * counts as .acked and .taken. */
static PyObject *writer_raise(writer_t *self, int code, const char *what,
                              const char *detail, uint64_t acked) {
  PyObject *msg = PyUnicode_FromFormat(
      "%s%s; acked: the first %llu of the %llu samples this writer took "
      "(acks come in order; the other %llu are not known to be in the table)",
      what, detail && detail[0] ? detail : chime_strerror(code),
      (unsigned long long)acked, (unsigned long long)self->taken,
      (unsigned long long)(self->taken - acked));
  if (!msg)
    return NULL;
  chimepy_raise(code, PyUnicode_AsUTF8(msg));
  Py_DECREF(msg);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *a = PyLong_FromUnsignedLongLong(acked);
  PyObject *t = PyLong_FromUnsignedLongLong(self->taken);
  if (value && a && t) {
    (void)PyObject_SetAttrString(value, "acked", a);
    (void)PyObject_SetAttrString(value, "taken", t);
  }
  Py_XDECREF(a);
  Py_XDECREF(t);
  PyErr_Restore(type, value, tb);
  return NULL;
}

/* The exception a signal handler raised during a wait (KeyboardInterrupt
 * for Ctrl-C) gets .acked and .taken and a note saying which samples are
 * in the table, as the writer's own errors do. */
static void annotate_interrupt(writer_t *self, const char *what) {
  uint64_t acked = self->w ? chime_writer_acked(self->w) : self->acked_at_close;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != NULL) {
    PyObject *a = PyLong_FromUnsignedLongLong(acked);
    PyObject *t = PyLong_FromUnsignedLongLong(self->taken);
    PyObject *note = PyUnicode_FromFormat(
        "chime.Writer.%s interrupted while waiting for acks; acked: the "
        "first %llu of the %llu samples this writer took (acks come in "
        "order; the other %llu are not known to be in the table)",
        what, (unsigned long long)acked, (unsigned long long)self->taken,
        (unsigned long long)(self->taken - acked));
    if (a && t && note) {
      /* Best effort: the exception is what the handler raised. */
      if (PyObject_SetAttrString(value, "acked", a) < 0 ||
          PyObject_SetAttrString(value, "taken", t) < 0)
        PyErr_Clear();
      PyObject *r = PyObject_CallMethod(value, "add_note", "O", note);
      if (r == NULL)
        PyErr_Clear();
      Py_XDECREF(r);
    } else {
      PyErr_Clear();
    }
    Py_XDECREF(a);
    Py_XDECREF(t);
    Py_XDECREF(note);
  }
  PyErr_Restore(type, value, tb);
}

/* One wait of the C writer, in slices: call() runs without the GIL with
 * the C writer's SLICE_MS timeout; between slices signal handlers run
 * (Ctrl-C). The timeout (self->timeout_ms) counts from the last progress:
 * an ack, or samples taken (*progress, when not NULL). Returns call()'s
 * result, CHIME_ETIMEDOUT with the writer's message in *why, or
 * INTERRUPTED with the handler's exception set. */
typedef int (*slice_fn)(writer_t *self, void *arg);
static int in_slices(writer_t *self, slice_fn call, void *arg,
                     const Py_ssize_t *progress, const char *what, char *why,
                     size_t whylen) {
  int64_t start = mono_ms();
  uint64_t acked = chime_writer_acked(self->w);
  Py_ssize_t moved = progress ? *progress : 0;
  int rc;
  self->busy = 1;
  for (;;) {
    Py_BEGIN_ALLOW_THREADS rc = call(self, arg);
    Py_END_ALLOW_THREADS if (rc != CHIME_ETIMEDOUT) break;
    uint64_t now_acked = chime_writer_acked(self->w);
    if (now_acked != acked || (progress && *progress != moved)) {
      acked = now_acked;
      moved = progress ? *progress : 0;
      start = mono_ms();
    }
    if (mono_ms() - start >= self->timeout_ms) {
      snprintf(why, whylen, "insert into '%s': no ack within %d ms",
               self->table, self->timeout_ms);
      break;
    }
    if (PyErr_CheckSignals() < 0) {
      self->interrupted = 1;
      annotate_interrupt(self, what);
      rc = INTERRUPTED;
      break;
    }
  }
  self->busy = 0;
  return rc;
}

static int writer_init(PyObject *o, PyObject *args, PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"client",
                           "table",
                           "max_inflight",
                           "timeout",
                           "version",
                           "compress",
                           "warm_start",
                           "max_batch_samples",
                           "reconnect_timeout",
                           NULL};
  PyObject *client;
  const char *table;
  chime_writer_opts_t opts = CHIME_WRITER_OPTS_INIT;
  double timeout = opts.timeout_ms / 1000.0;
  double reconnect = opts.reconnect_timeout_ms / 1000.0;
  PyObject *inflight_o = NULL, *version_o = NULL;
  int compress = opts.compress, warm = 0;
  PyObject *batch_o = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!s|OdOp$pOd:Writer", kwlist,
                                   &chimepy_client_type, &client, &table,
                                   &inflight_o, &timeout, &version_o, &compress,
                                   &warm, &batch_o, &reconnect))
    return -1;
  opts.compress = compress;
  opts.warm_start = warm;
  uint64_t batch = opts.max_batch_samples;
  if (batch_o &&
      chimepy_uint_arg(batch_o, "max_batch_samples", 1, UINT32_MAX, &batch))
    return -1;
  opts.max_batch_samples = (uint32_t)batch;
  uint64_t max_inflight = opts.max_inflight, version = 0;
  if ((inflight_o && chimepy_uint_arg(inflight_o, "max_inflight", 0, UINT32_MAX,
                                      &max_inflight)) ||
      (version_o &&
       chimepy_uint_arg(version_o, "version", 0, UINT64_MAX, &version)))
    return -1;
  self->version = opts.version = version;
  if (self->client) {
    PyErr_SetString(PyExc_RuntimeError, "Writer already initialised");
    return -1;
  }
  chimepy_client_t *c = (chimepy_client_t *)client;
  if (chimepy_client_check(c))
    return -1;
  if (!(timeout > 0 && timeout < 2e6) || !(reconnect > 0 && reconnect < 2e6)) {
    chimepy_raise(CHIME_EINVAL,
                  "timeout and reconnect_timeout must be positive seconds");
    return -1;
  }
  /* How long a lost connection may stay lost (docs/remote.md). */
  opts.reconnect_timeout_ms = (int)(reconnect * 1000 + 0.999);
  snprintf(self->table, sizeof(self->table), "%s", table);
  self->timeout_ms = (int)(timeout * 1000);
  opts.max_inflight = max_inflight;
  opts.timeout_ms = SLICE_MS;
  if (chimepy_client_call_begin(c))
    return -1;
  int rc;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_writer_open(&self->w, c->c, table, &opts);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS if (chimepy_client_open_end(c, rc, detail)) {
    self->w = NULL;
    return -1;
  }
  self->client = c;
  /* The writer's own spec: the one its C writer copies samples at (a
   * sharded client's shards might differ; the writer refuses such a
   * target, and this is the spec it checked). */
  if (chime_writer_spec(self->w, &self->spec)) {
    chimepy_raise(CHIME_EINVAL, chime_last_error());
    return -1;
  }
  if (chime_writer_compress(self->w, self->compress, sizeof(self->compress))) {
    chimepy_raise(CHIME_EINVAL, chime_last_error());
    return -1;
  }
  self->sample_bytes = chime_spec_sample_bytes(&self->spec);
  self->sample = malloc(self->sample_bytes ? self->sample_bytes : 1);
  if (!self->sample) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

static int flush_slice(writer_t *self, void *arg) {
  (void)arg;
  return chime_writer_flush(self->w);
}

/* Closes the C writer; returns its flush result (INTERRUPTED with the
 * handler's exception set). The flush runs first, in slices, so that
 * Ctrl-C ends it and the acked count can still be read (close frees the
 * writer); the C close then returns at once with the flush's error, if
 * any (after a timed-out slice it does not wait again). A writer whose
 * wait was interrupted is closed without waiting: what is not acked is
 * abandoned, as the KeyboardInterrupt said. */
static int writer_shut(writer_t *self, char *why, size_t whylen) {
  chime_writer_t *w = self->w;
  if (!w)
    return 0;
  int rc = 0, closed;
  if (!self->interrupted)
    rc = in_slices(self, flush_slice, NULL, NULL, "close()", why, whylen);
  self->w = NULL;
  self->acked_at_close = chime_writer_acked(w);
  self->bytes_at_close = chime_writer_bytes_sent(w);
  self->stalls_at_close = chime_writer_stalls(w);
  Py_BEGIN_ALLOW_THREADS closed = chime_writer_close(w);
  Py_END_ALLOW_THREADS chimepy_client_child_closed(self->client);
  if (self->interrupted && rc != INTERRUPTED)
    return 0;
  return rc ? rc : closed;
}

static void writer_dealloc(PyObject *o) {
  writer_t *self = (writer_t *)o;
  char why[512];
  /* Nobody is left to raise to: a failed flush (samples that may be
   * lost) or a Ctrl-C during it (which ends the wait) goes to
   * sys.unraisablehook, as Python does for errors in __del__, naming no
   * object (the hook would hold this dying one, and its end would free it
   * twice). A writer inherited across fork (CHIME_ENOTSUP) loses nothing:
   * its samples are the parent's. An exception on its way (this may run
   * while one unwinds) is kept. */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  why[0] = '\0';
  int rc = writer_shut(self, why, sizeof(why));
  if (rc != 0 && rc != CHIME_ENOTSUP) {
    if (!PyErr_Occurred()) {
      char msg[640];
      snprintf(msg, sizeof(msg),
               "a chime.Writer collected unclosed could not flush: %s; its "
               "unacked samples may be lost (close() it to see this raised)",
               why[0] ? why : chime_strerror(rc));
      chimepy_raise(rc, msg);
    }
    PyErr_WriteUnraisable(NULL);
  } else {
    PyErr_Clear();
  }
  PyErr_Restore(type, value, tb);
  Py_XDECREF(self->client);
  free(self->sample);
  Py_TYPE(o)->tp_free(o);
}

static int writer_ready(writer_t *self) {
  if (!self->w) {
    chimepy_raise(CHIME_ECLOSED, self->client ? "writer is closed"
                                              : "writer is not open "
                                                "(Client.writer())");
    return -1;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "chime.Writer used by two threads at once");
    return -1;
  }
  return 0;
}

static PyObject *leaf_error(const chime_leaf_t *leaf, const char *what) {
  PyObject *msg = PyUnicode_FromFormat("leaf '%s': %s", leaf->name, what);
  if (msg) {
    chimepy_raise(CHIME_EINVAL, PyUnicode_AsUTF8(msg));
    Py_DECREF(msg);
  }
  return NULL;
}

/* The value for `leaf` as a C-contiguous array of its dtype with shape
 * [n, *leaf shape] (batched) or the leaf shape (n < 0). Converted like
 * numpy.asarray(value, dtype). New reference or NULL. */
static PyArrayObject *leaf_array(PyObject *dict, const chime_leaf_t *leaf,
                                 Py_ssize_t *n) {
  PyObject *value = PyDict_GetItemString(dict, leaf->name);
  if (!value)
    return (PyArrayObject *)leaf_error(leaf, "missing");
  PyArray_Descr *d = chimepy_descr(leaf->dtype);
  if (!d)
    return NULL;
  PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(
      value, d, 0, 0,
      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, NULL);
  if (!a) {
    PyErr_Clear();
    return (PyArrayObject *)leaf_error(leaf, "cannot convert to its dtype");
  }
  int batched = n[1] == 1;
  int nd = PyArray_NDIM(a);
  const npy_intp *dims = PyArray_DIMS(a);
  if (leaf->ragged && batched) {
    Py_DECREF(a);
    return (PyArrayObject *)leaf_error(
        leaf, "is ragged: extend takes fixed-shape leaves; append its "
              "samples one by one");
  }
  /* A ragged leaf: any number of rows up to its bound. */
  int ok = nd == (int)leaf->ndim + batched &&
           (!leaf->ragged || (uint64_t)dims[0] <= leaf->shape[0]);
  for (int i = leaf->ragged; ok && i < (int)leaf->ndim; i++)
    ok = (uint64_t)dims[i + batched] == leaf->shape[i];
  if (ok && batched) {
    if (*n < 0)
      *n = dims[0];
    else
      ok = dims[0] == *n;
  }
  if (!ok) {
    Py_DECREF(a);
    return (PyArrayObject *)leaf_error(
        leaf, batched        ? "shape is not [N, *leaf shape] with one N for "
                               "all leaves"
              : leaf->ragged ? "shape is not [n, *rest] with n up to its bound"
                             : "shape differs from the spec");
  }
  return a;
}

/* Unknown keys are refused: a misspelt leaf name would otherwise be a
 * silently missing one. */
static int check_keys(const chime_spec_t *spec, PyObject *dict) {
  if (!PyDict_Check(dict)) {
    PyErr_SetString(PyExc_TypeError, "expected a dict of leaf name -> array");
    return -1;
  }
  if ((Py_ssize_t)spec->nleaves == PyDict_Size(dict))
    return 0;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    int known = 0;
    for (uint32_t i = 0; name && i < spec->nleaves && !known; i++)
      known = !strcmp(spec->leaves[i].name, name);
    if (!known) {
      PyErr_Clear();
      PyObject *msg =
          PyUnicode_FromFormat("key %R is not a leaf of the spec", k);
      if (msg) {
        chimepy_raise(CHIME_EINVAL, PyUnicode_AsUTF8(msg));
        Py_DECREF(msg);
      }
      return -1;
    }
  }
  return 0;
}

struct append_arg {
  double priority;
  int ragged; /* the table has ragged leaves: leaves and lengths */
  const void *leaves[CHIME_MAX_LEAVES];
  uint32_t lengths[CHIME_MAX_LEAVES];
  uint64_t version;
};

static int append_slice(writer_t *self, void *arg) {
  const struct append_arg *a = arg;
  int rc = chime_writer_set_version(self->w, a->version);
  if (rc)
    return rc;
  if (a->ragged)
    return chime_writer_append_leaves(self->w, a->leaves, a->lengths,
                                      a->priority);
  return chime_writer_append(self->w, self->sample, (size_t)self->sample_bytes,
                             a->priority);
}

/* A version argument: None (the writer's own), else a u64. */
static int version_arg(const writer_t *self, PyObject *v, uint64_t *out) {
  *out = self->version;
  if (v == NULL || v == Py_None)
    return 0;
  return chimepy_uint_arg(v, "version", 0, UINT64_MAX, out);
}

static PyObject *writer_append(PyObject *o, PyObject *args, PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"sample", "priority", "version", NULL};
  PyObject *dict, *vo = NULL;
  double priority = 1.0;
  uint64_t version;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dO:append", kwlist, &dict,
                                   &priority, &vo) ||
      version_arg(self, vo, &version))
    return NULL;
  if (writer_ready(self) || check_keys(&self->spec, dict))
    return NULL;
  /* A ragged leaf's rows are at most its bound's: the sample fits. */
  unsigned char *p = self->sample;
  struct append_arg a = {.priority = priority,
                         .ragged = chime_spec_ragged(&self->spec) > 0,
                         .version = version};
  for (uint32_t i = 0; i < self->spec.nleaves; i++) {
    Py_ssize_t n[2] = {-1, 0};
    PyArrayObject *arr = leaf_array(dict, &self->spec.leaves[i], n);
    if (!arr)
      return NULL;
    size_t len = (size_t)PyArray_NBYTES(arr);
    a.leaves[i] = p;
    a.lengths[i] =
        self->spec.leaves[i].ragged ? (uint32_t)PyArray_DIM(arr, 0) : 0;
    memcpy(p, PyArray_DATA(arr), len);
    p += len;
    Py_DECREF(arr);
  }
  char why[512];
  int rc =
      in_slices(self, append_slice, &a, NULL, "append()", why, sizeof(why));
  if (rc == INTERRUPTED)
    return NULL;
  if (rc)
    return writer_raise(self, rc, "",
                        rc == CHIME_ETIMEDOUT ? why : chime_last_error(),
                        chime_writer_acked(self->w));
  self->taken++;
  self->interrupted = 0;
  Py_RETURN_NONE;
}

struct extend_arg {
  Py_ssize_t n, done; /* done: taken so far (self->taken counts them too) */
  uint32_t nl;
  const unsigned char *src[CHIME_MAX_LEAVES];
  size_t leaf_bytes[CHIME_MAX_LEAVES];
  const double *prio;
};

/* Feeds the rest of the columns to chime_writer_extend, 2^20 at a time;
 * without the GIL, so only plain fields (taken, done) are touched. */
static int extend_slice(writer_t *self, void *arg) {
  struct extend_arg *a = arg;
  int rc = 0;
  while (a->done < a->n && rc == 0) {
    const void *cols[CHIME_MAX_LEAVES];
    Py_ssize_t left = a->n - a->done;
    uint32_t k = left > (1 << 20) ? (1u << 20) : (uint32_t)left, got = 0;
    for (uint32_t i = 0; i < a->nl; i++)
      cols[i] = a->src[i] + (size_t)a->done * a->leaf_bytes[i];
    rc = chime_writer_extend(self->w, cols, a->prio ? a->prio + a->done : NULL,
                             k, &got);
    a->done += got;
    self->taken += got;
  }
  return rc;
}

static PyObject *writer_extend(PyObject *o, PyObject *args, PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"samples", "priorities", "version", NULL};
  PyObject *dict, *pri_obj = Py_None, *vo = NULL;
  uint64_t version;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:extend", kwlist, &dict,
                                   &pri_obj, &vo) ||
      version_arg(self, vo, &version))
    return NULL;
  if (writer_ready(self) || check_keys(&self->spec, dict))
    return NULL;
  uint32_t nl = self->spec.nleaves;
  PyArrayObject *arrays[CHIME_MAX_LEAVES] = {0};
  PyArrayObject *pri = NULL;
  PyObject *result = NULL;
  Py_ssize_t n[2] = {-1, 1};
  for (uint32_t i = 0; i < nl; i++)
    if (!(arrays[i] = leaf_array(dict, &self->spec.leaves[i], n)))
      goto cleanup;
  if (n[0] < 0)
    n[0] = 0;
  if (pri_obj != Py_None) {
    pri = (PyArrayObject *)PyArray_FromAny(
        pri_obj, PyArray_DescrFromType(NPY_FLOAT64), 1, 1,
        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, NULL);
    if (!pri)
      goto cleanup;
    if (PyArray_DIM(pri, 0) != n[0]) {
      chimepy_raise(CHIME_EINVAL, "priorities: one per sample");
      goto cleanup;
    }
  }
  /* The arrays are ours (references held), so the columns go to the C
   * writer, which interleaves them into its message, without the GIL. */
  struct extend_arg a = {
      .n = n[0], .nl = nl, .prio = pri ? PyArray_DATA(pri) : NULL};
  for (uint32_t i = 0; i < nl; i++) {
    a.src[i] = PyArray_DATA(arrays[i]);
    a.leaf_bytes[i] = (size_t)chime_leaf_bytes(&self->spec.leaves[i]);
  }
  char why[512];
  int rc =
      chime_writer_set_version(self->w, version); /* no wait: never fails */
  if (rc == 0)
    rc = in_slices(self, extend_slice, &a, &a.done, "extend()", why,
                   sizeof(why));
  if (rc == INTERRUPTED)
    goto cleanup;
  if (rc) {
    PyObject *what = PyUnicode_FromFormat(
        "sample %zd of this extend (the ones before it were taken): ",
        (Py_ssize_t)a.done);
    if (what)
      writer_raise(self, rc, PyUnicode_AsUTF8(what),
                   rc == CHIME_ETIMEDOUT ? why : chime_last_error(),
                   chime_writer_acked(self->w));
    Py_XDECREF(what);
    goto cleanup;
  }
  self->interrupted = 0;
  result = Py_None;
  Py_INCREF(result);
cleanup:
  for (uint32_t i = 0; i < nl; i++)
    Py_XDECREF(arrays[i]);
  Py_XDECREF(pri);
  return result;
}

static PyObject *writer_flush(PyObject *o, PyObject *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  if (writer_ready(self))
    return NULL;
  char why[512];
  int rc =
      in_slices(self, flush_slice, NULL, NULL, "flush()", why, sizeof(why));
  if (rc == INTERRUPTED)
    return NULL;
  if (rc)
    return writer_raise(
        self, rc, "flush: ", rc == CHIME_ETIMEDOUT ? why : chime_last_error(),
        chime_writer_acked(self->w));
  self->interrupted = 0;
  Py_RETURN_NONE;
}

static int end_slice(writer_t *self, void *arg) {
  (void)arg;
  return chime_writer_end_episode(self->w);
}

static PyObject *writer_end_episode(PyObject *o, PyObject *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  if (writer_ready(self))
    return NULL;
  char why[512];
  int rc =
      in_slices(self, end_slice, NULL, NULL, "end_episode()", why, sizeof(why));
  if (rc == INTERRUPTED)
    return NULL;
  if (rc)
    return chimepy_raise(rc, rc == CHIME_ETIMEDOUT ? why : chime_last_error());
  self->interrupted = 0;
  Py_RETURN_NONE;
}

static PyObject *writer_close(PyObject *o, PyObject *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "chime.Writer used by two threads at once");
    return NULL;
  }
  char why[512] = "";
  int rc = writer_shut(self, why, sizeof(why));
  if (rc == INTERRUPTED)
    return NULL;
  if (rc)
    return writer_raise(self, rc, "close: flushing what was queued failed: ",
                        rc == CHIME_ETIMEDOUT ? why : chime_last_error(),
                        self->acked_at_close);
  Py_RETURN_NONE;
}

static PyObject *writer_acked(PyObject *o, void *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  return PyLong_FromUnsignedLongLong(self->w ? chime_writer_acked(self->w)
                                             : self->acked_at_close);
}

static PyObject *writer_taken(PyObject *o, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(((writer_t *)o)->taken);
}

static PyObject *writer_timeout(PyObject *o, void *unused) {
  (void)unused;
  return PyFloat_FromDouble(((writer_t *)o)->timeout_ms / 1000.0);
}

/* The timeout may change between calls (a short one while probing, a
 * long one for a last flush); the same bounds as at open. */
static int writer_set_timeout(PyObject *o, PyObject *v, void *unused) {
  (void)unused;
  double timeout = v ? PyFloat_AsDouble(v) : -1.0;
  if (timeout == -1.0 && PyErr_Occurred())
    return -1;
  if (!(timeout > 0 && timeout < 2e6)) {
    chimepy_raise(CHIME_EINVAL, "timeout must be positive seconds");
    return -1;
  }
  ((writer_t *)o)->timeout_ms = (int)(timeout * 1000);
  return 0;
}

static PyObject *writer_bytes_sent(PyObject *o, void *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  return PyLong_FromUnsignedLongLong(self->w ? chime_writer_bytes_sent(self->w)
                                             : self->bytes_at_close);
}

static PyObject *writer_stalls(PyObject *o, void *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  return PyLong_FromUnsignedLongLong(self->w ? chime_writer_stalls(self->w)
                                             : self->stalls_at_close);
}

static PyObject *writer_compress(PyObject *o, void *unused) {
  (void)unused;
  return PyUnicode_FromString(((writer_t *)o)->compress);
}

static PyObject *writer_enter(PyObject *o, PyObject *unused) {
  (void)unused;
  Py_INCREF(o);
  return o;
}

static PyObject *writer_exit(PyObject *o, PyObject *args) {
  /* Left by Ctrl-C: close without waiting for acks, as after a wait that
   * was interrupted (acked says what is in the table). */
  PyObject *type =
      PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : NULL;
  if (type != NULL && PyType_Check(type) &&
      PyType_IsSubtype((PyTypeObject *)type,
                       (PyTypeObject *)PyExc_KeyboardInterrupt))
    ((writer_t *)o)->interrupted = 1;
  return writer_close(o, NULL);
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))writer_append,
     METH_VARARGS | METH_KEYWORDS,
     "append(sample, priority=1.0, version=None): sample is a dict leaf name "
     "-> array or scalar, converted as numpy.asarray(value, leaf dtype) and "
     "of exactly the leaf's shape; version: its policy version (None: the "
     "writer's, Writer(version=...)). May wait for acks (GIL released)."},
    {"append_group", (PyCFunction)(void (*)(void))chimepy_writer_append_group,
     METH_VARARGS | METH_KEYWORDS,
     "append_group(samples, priority=1.0, version=None): a group table's "
     "group, a list of 1..group_max sample dicts, as one item."},
    {"take_dropped", chimepy_writer_take_dropped, METH_NOARGS,
     "take_dropped() -> list of (index, key, reason) of the groups the "
     "table's filters dropped, not taken before (reason 'zero_variance' or "
     "'mean_outside'; index: the append's place, from 0)."},
    {"extend", (PyCFunction)(void (*)(void))writer_extend,
     METH_VARARGS | METH_KEYWORDS,
     "extend(samples, priorities=None, version=None): samples is a dict leaf "
     "name -> array [N, *leaf shape]; priorities None (all 1.0) or N "
     "floats; version: the policy version of all N (None: the writer's)."},
    {"flush", writer_flush, METH_NOARGS,
     "Sends what is queued and waits until every sample is in the table."},
    {"end_episode", writer_end_episode, METH_NOARGS,
     "A sequence table's writer: ends the open episode after the steps "
     "appended so far (sent now); the next append starts a new one."},
    {"close", writer_close, METH_NOARGS,
     "Flushes and closes. After Ctrl-C interrupted a wait of this writer "
     "(or ended its `with` block) it closes without waiting: samples not "
     "acked are abandoned (acked says which are in the table)."},
    {"__enter__", writer_enter, METH_NOARGS, NULL},
    {"__exit__", writer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef writer_getset[] = {
    {"acked", writer_acked, NULL,
     "samples acked so far (the first `acked` taken; after close, the "
     "count at close)",
     NULL},
    {"taken", writer_taken, NULL,
     "samples append/extend accepted (queued or sent)", NULL},
    {"timeout", writer_timeout, writer_set_timeout,
     "seconds a call waits without progress (an ack, samples taken) before "
     "TimeoutError; may be changed between calls",
     NULL},
    {"bytes_sent", writer_bytes_sent, NULL,
     "bytes of the Insert messages made of its samples (each once; after "
     "close, the count at close)",
     NULL},
    {"stalls", writer_stalls, NULL,
     "Insert calls left as stalled (requests unacked, nothing heard from a "
     "server that heartbeats for 1.5 s), each resumed on a fresh connection "
     "(after close, the count at close)",
     NULL},
    {"compress", writer_compress, NULL,
     "the leaves it compresses before sending, 'obs:3' ('' : none; "
     "writer(compress=False) sends raw and chimed compresses)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject chimepy_writer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chime.Writer",
    .tp_basicsize = sizeof(writer_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An Insert stream to one table; from Client.writer().",
    .tp_new = PyType_GenericNew,
    .tp_init = writer_init,
    .tp_dealloc = writer_dealloc,
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
};
