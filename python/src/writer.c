/* chime.Writer: samples from dicts of numpy arrays, packed in spec order. */
#include "chimepy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  PyObject_HEAD chimepy_client_t *client;
  chime_writer_t *w;
  chime_spec_t spec;
  uint64_t sample_bytes;
  unsigned char *sample; /* one packed sample */
  int busy;              /* a call has the GIL released: one user at a time */
  uint64_t taken;        /* samples chime_writer_append accepted */
  uint64_t acked_at_close;
} writer_t;

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

static int writer_init(PyObject *o, PyObject *args, PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"client", "table", "max_inflight", "timeout", NULL};
  PyObject *client;
  const char *table;
  unsigned max_inflight = 8;
  double timeout = 30.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!s|Id:Writer", kwlist,
                                   &chimepy_client_type, &client, &table,
                                   &max_inflight, &timeout))
    return -1;
  if (self->client) {
    PyErr_SetString(PyExc_RuntimeError, "Writer already initialised");
    return -1;
  }
  chimepy_client_t *c = (chimepy_client_t *)client;
  if (chimepy_client_check(c))
    return -1;
  if (!(timeout > 0 && timeout < 2e6)) {
    chimepy_raise(CHIME_EINVAL, "timeout must be positive seconds");
    return -1;
  }
  if (chimepy_client_table_spec(c, table, &self->spec))
    return -1;
  self->sample_bytes = chime_spec_sample_bytes(&self->spec);
  self->sample = malloc(self->sample_bytes ? self->sample_bytes : 1);
  if (!self->sample) {
    PyErr_NoMemory();
    return -1;
  }
  chime_writer_opts_t opts = CHIME_WRITER_OPTS_INIT;
  opts.max_inflight = max_inflight;
  opts.timeout_ms = (int)(timeout * 1000);
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = chime_writer_open(&self->w, c->c, table, &opts);
  Py_END_ALLOW_THREADS if (rc) {
    self->w = NULL;
    chimepy_raise(rc, chime_client_last_error(c->c));
    return -1;
  }
  Py_INCREF(client);
  self->client = c;
  c->children++;
  return 0;
}

/* Closes the C writer; returns its flush result. The flush runs first on
 * its own so that the acked count can still be read (close frees the
 * writer); close then returns at once with the flush's error, if any. */
static int writer_shut(writer_t *self) {
  chime_writer_t *w = self->w;
  if (!w)
    return 0;
  self->w = NULL;
  int rc, closed;
  Py_BEGIN_ALLOW_THREADS rc = chime_writer_flush(w);
  self->acked_at_close = chime_writer_acked(w);
  closed = chime_writer_close(w);
  Py_END_ALLOW_THREADS chimepy_client_child_closed(self->client);
  return rc ? rc : closed;
}

static void writer_dealloc(PyObject *o) {
  writer_t *self = (writer_t *)o;
  (void)writer_shut(self); /* nobody left to tell of a failed flush */
  Py_XDECREF(self->client);
  free(self->sample);
  Py_TYPE(o)->tp_free(o);
}

static int writer_ready(writer_t *self) {
  if (!self->w) {
    chimepy_raise(CHIME_ECLOSED, "writer is closed");
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
  int ok = nd == (int)leaf->ndim + batched;
  for (int i = 0; ok && i < (int)leaf->ndim; i++)
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
        leaf, batched ? "shape is not [N, *leaf shape] with one N for all "
                        "leaves"
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

static PyObject *writer_append(PyObject *o, PyObject *args, PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"sample", "priority", NULL};
  PyObject *dict;
  double priority = 1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|d:append", kwlist, &dict,
                                   &priority))
    return NULL;
  if (writer_ready(self) || check_keys(&self->spec, dict))
    return NULL;
  unsigned char *p = self->sample;
  for (uint32_t i = 0; i < self->spec.nleaves; i++) {
    Py_ssize_t n[2] = {-1, 0};
    PyArrayObject *a = leaf_array(dict, &self->spec.leaves[i], n);
    if (!a)
      return NULL;
    size_t len = (size_t)PyArray_NBYTES(a);
    memcpy(p, PyArray_DATA(a), len);
    p += len;
    Py_DECREF(a);
  }
  int rc;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS rc = chime_writer_append(
      self->w, self->sample, (size_t)self->sample_bytes, priority);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (rc)
    return writer_raise(self, rc, "", chime_writer_last_error(self->w),
                        chime_writer_acked(self->w));
  self->taken++;
  Py_RETURN_NONE;
}

static PyObject *writer_extend(PyObject *o, PyObject *args, PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"samples", "priorities", NULL};
  PyObject *dict, *pri_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:extend", kwlist, &dict,
                                   &pri_obj))
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
  const unsigned char *src[CHIME_MAX_LEAVES];
  size_t leaf_bytes[CHIME_MAX_LEAVES];
  for (uint32_t i = 0; i < nl; i++) {
    src[i] = PyArray_DATA(arrays[i]);
    leaf_bytes[i] = (size_t)chime_leaf_bytes(&self->spec.leaves[i]);
  }
  const double *prio = pri ? PyArray_DATA(pri) : NULL;
  Py_ssize_t done = 0;
  int rc = 0;
  self->busy = 1;
  /* The arrays are ours (references held), so the columns go to the C
   * writer, which interleaves them into its message, without the GIL. */
  Py_BEGIN_ALLOW_THREADS while (done < n[0] && rc == 0) {
    const void *cols[CHIME_MAX_LEAVES];
    Py_ssize_t left = n[0] - done;
    uint32_t k = left > (1 << 20) ? (1u << 20) : (uint32_t)left, got = 0;
    for (uint32_t i = 0; i < nl; i++)
      cols[i] = src[i] + (size_t)done * leaf_bytes[i];
    rc = chime_writer_extend(self->w, k, cols, prio ? prio + done : NULL, &got);
    done += got;
  }
  Py_END_ALLOW_THREADS self->busy = 0;
  self->taken += (uint64_t)done;
  if (rc) {
    PyObject *what = PyUnicode_FromFormat(
        "sample %zd of this extend (the ones before it were taken): ", done);
    if (what)
      writer_raise(self, rc, PyUnicode_AsUTF8(what),
                   chime_writer_last_error(self->w),
                   chime_writer_acked(self->w));
    Py_XDECREF(what);
    goto cleanup;
  }
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
  int rc;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS rc = chime_writer_flush(self->w);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (rc)
    return writer_raise(self, rc, "flush: ", chime_writer_last_error(self->w),
                        chime_writer_acked(self->w));
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
  int rc = writer_shut(self);
  if (rc)
    return writer_raise(self, rc,
                        "close: flushing what was queued failed: ", NULL,
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

static PyObject *writer_enter(PyObject *o, PyObject *unused) {
  (void)unused;
  Py_INCREF(o);
  return o;
}

static PyObject *writer_exit(PyObject *o, PyObject *args) {
  (void)args;
  return writer_close(o, NULL);
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))writer_append,
     METH_VARARGS | METH_KEYWORDS,
     "append(sample, priority=1.0): sample is a dict leaf name -> array or "
     "scalar, converted as numpy.asarray(value, leaf dtype) and of exactly "
     "the leaf's shape. May wait for acks (GIL released)."},
    {"extend", (PyCFunction)(void (*)(void))writer_extend,
     METH_VARARGS | METH_KEYWORDS,
     "extend(samples, priorities=None): samples is a dict leaf name -> "
     "array [N, *leaf shape]; priorities None (all 1.0) or N floats."},
    {"flush", writer_flush, METH_NOARGS,
     "Sends what is queued and waits until every sample is in the table."},
    {"close", writer_close, METH_NOARGS, "Flushes and closes."},
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
