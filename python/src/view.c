/* chime.View: the read-only exporter of one leaf (or the info records) of
 * a leased batch, through the buffer protocol and DLPack; numpy arrays of
 * a batch have one as their base. A View holds its owner (the batch) and
 * tells it when it goes (`gone`), so the owner keeps its slot leased while
 * any View lives; it knows nothing else of batches or streams (batch.c
 * fills in what it points at). */
#include "chimepy.h"

chimepy_view_t *chimepy_view_new(PyObject *owner, void (*gone)(PyObject *)) {
  chimepy_view_t *v = PyObject_New(chimepy_view_t, &chimepy_view_type);
  if (!v)
    return NULL;
  Py_INCREF(owner);
  v->owner = owner;
  v->gone = gone;
  v->device = -1;
  v->order = NULL;
  return v;
}

static void view_dealloc(PyObject *o) {
  chimepy_view_t *v = (chimepy_view_t *)o;
  if (v->owner) {
    v->gone(v->owner);
    Py_DECREF(v->owner);
  }
  Py_TYPE(o)->tp_free(o);
}

static int view_getbuffer(PyObject *o, Py_buffer *view, int flags) {
  chimepy_view_t *v = (chimepy_view_t *)o;
  if (v->device >= 0) {
    PyErr_Format(PyExc_BufferError,
                 "this leaf is in CUDA device %d's memory: take it with "
                 "DLPack (torch.from_dlpack), not as a buffer",
                 v->device);
    view->obj = NULL;
    return -1;
  }
  if (flags & PyBUF_WRITABLE) {
    PyErr_SetString(PyExc_BufferError,
                    "chime batch memory is read-only (the ring's)");
    view->obj = NULL;
    return -1;
  }
  view->buf = (void *)v->data;
  view->obj = o;
  Py_INCREF(o);
  view->len = v->len;
  view->readonly = 1;
  view->suboffsets = NULL;
  view->internal = NULL;
  if (!(flags & PyBUF_ND)) { /* plain bytes, as PyBuffer_FillInfo gives */
    view->itemsize = 1;
    view->format = (flags & PyBUF_FORMAT) ? "B" : NULL;
    view->ndim = 1;
    view->shape = NULL;
    view->strides = NULL;
    return 0;
  }
  view->itemsize = v->itemsize;
  view->format = (flags & PyBUF_FORMAT) ? (char *)v->format : NULL;
  view->ndim = v->ndim;
  view->shape = v->shape;
  view->strides = (flags & PyBUF_STRIDES) ? v->strides : NULL;
  return 0;
}

static PyBufferProcs view_buffer = {.bf_getbuffer = view_getbuffer};

/* DLPack through the View (b.view(leaf)): the capsule's tensor holds the
 * View, so the slot stays leased until the consumer calls the deleter. */
static PyObject *view_dlpack(PyObject *o, PyObject *args, PyObject *kw) {
  chimepy_view_t *v = (chimepy_view_t *)o;
  int has_stream;
  void *cuda_stream;
  if (chimepy_dlpack_check_args(args, kw, v->device, &has_stream,
                                &cuda_stream) < 0)
    return NULL;
  chimepy_dl_dtype_t dt;
  if (v->leaf < 0 || chimepy_dl_dtype(v->dtype, &dt) < 0) {
    PyErr_SetString(PyExc_BufferError,
                    "DLPack has no type for the info records");
    return NULL;
  }
  /* A device leaf: the consumer's stream waits for the batch's copy
   * before anything it queues later reads the tensor. */
  if (has_stream && v->order(v->owner, cuda_stream) < 0)
    return NULL;
  return chimepy_dlpack_export(o, v->data, v->ndim, v->shape, v->strides,
                               v->itemsize, dt, v->device);
}

static PyObject *view_dlpack_device(PyObject *o, PyObject *unused) {
  (void)unused;
  const chimepy_view_t *v = (const chimepy_view_t *)o;
  if (v->device < 0)
    return chimepy_dlpack_device(o, NULL);
  return Py_BuildValue("(ii)", CHIMEPY_DL_CUDA, v->device);
}

static PyObject *view_get_shape(PyObject *o, void *unused) {
  (void)unused;
  const chimepy_view_t *v = (const chimepy_view_t *)o;
  PyObject *t = PyTuple_New(v->ndim);
  for (int i = 0; t && i < v->ndim; i++) {
    PyObject *n = PyLong_FromSsize_t(v->shape[i]);
    if (!n) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, n);
  }
  return t;
}

static PyObject *view_get_device(PyObject *o, void *unused) {
  (void)unused;
  const chimepy_view_t *v = (const chimepy_view_t *)o;
  if (v->device < 0)
    Py_RETURN_NONE;
  return PyLong_FromLong(v->device);
}

static PyObject *view_get_ptr(PyObject *o, void *unused) {
  (void)unused;
  return PyLong_FromVoidPtr((void *)((const chimepy_view_t *)o)->data);
}

int chimepy_view_is_bf16(PyObject *o) {
  return Py_TYPE(o) == &chimepy_view_type &&
         ((chimepy_view_t *)o)->dtype == CHIME_DTYPE_BF16;
}

static PyMethodDef view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule over the leaf (CPU; CUDA for a device stream's, "
     "whose copy the consumer's `stream` is made to wait for), holding "
     "the batch until the consumer's tensor is freed. DLPack cannot say "
     "read-only: do not write the tensor (in shm mode the ring is mapped "
     "read-only)."},
    {"__dlpack_device__", view_dlpack_device, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef view_getset[] = {
    {"shape", view_get_shape, NULL, "the leaf's shape, [count, *shape]", NULL},
    {"device", view_get_device, NULL,
     "None for host memory; the CUDA ordinal for a device stream's leaf", NULL},
    {"ptr", view_get_ptr, NULL,
     "the address of the leaf's first byte (a device pointer on a device "
     "stream)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject chimepy_view_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chime.View",
    .tp_basicsize = sizeof(chimepy_view_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only buffer over one leaf of a leased batch; keeps the "
              "batch's slot leased while alive (the base of its arrays).",
    .tp_dealloc = view_dealloc,
    .tp_as_buffer = &view_buffer,
    .tp_methods = view_methods,
    .tp_getset = view_getset,
};
