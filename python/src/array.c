/* chime.Array, the numpy array type of a batch's leaves, and the DLPack
 * exporter that it and chime.View share.
 *
 * Why a subclass: a batch's arrays are read-only (the ring is mapped
 * read-only in shm mode), and numpy's own ndarray.__dlpack__ refuses
 * read-only arrays because DLPack before 1.0 cannot say "read-only". So
 * torch.from_dlpack(batch["obs"]) would fail with a plain ndarray. An
 * Array is an ndarray in every other way; its __dlpack__ exports the
 * array's own pointer, shape, strides and dtype, so slices, transposes and
 * dtype views of a leaf export what they show.
 *
 * Lifetime: the exported tensor holds a reference to the array until the
 * consumer calls the deleter. The array's base is the View (directly, or
 * through the Array it was sliced from), and the View holds the Batch, so
 * the ring slot stays leased for as long as the tensor lives, exactly as for
 * an array or memoryview (batch.h).
 *
 * Results that own new memory (obs * 2, obs.sum(), np.sin(obs)) come back
 * as plain ndarrays and scalars, as they would from a plain ndarray: the
 * subclass only marks memory that belongs to a batch. */
#include "chimepy.h"
#include "dlpack.h"

#include <stdlib.h>

/* Set at init: whether a base object is a view over a bf16 leaf. */
static int (*base_is_bf16)(PyObject *base);

/* ---------------------------------------------------------------- export */

typedef struct {
  chimepy_dl_managed_t m;
  int64_t dims[]; /* shape[ndim], then strides[ndim] in elements */
} dl_export_t;

static void dl_deleter(chimepy_dl_managed_t *m) {
  PyGILState_STATE g = PyGILState_Ensure();
  Py_XDECREF((PyObject *)m->manager_ctx);
  free(m);
  PyGILState_Release(g);
}

static void dl_capsule_destructor(PyObject *cap) {
  /* Renamed "used_dltensor" by a consumer that took ownership. */
  if (!PyCapsule_IsValid(cap, "dltensor"))
    return;
  chimepy_dl_managed_t *m = PyCapsule_GetPointer(cap, "dltensor");
  if (m && m->deleter)
    m->deleter(m);
}

int chimepy_dlpack_check_args(PyObject *args, PyObject *kw, int device,
                              int *has_stream, void **cuda_stream) {
  /* The array API's keywords. Host memory has no stream to order against;
   * max_version is answered with an unversioned capsule, which every
   * consumer that asks must accept. */
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None,
           *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist,
                                   &stream, &max_version, &dl_device, &copy))
    return -1;
  if (dl_device != Py_None) {
    int type, id;
    if (!PyArg_ParseTuple(dl_device, "ii;dl_device: (device_type, device_id)",
                          &type, &id))
      return -1;
    if (device < 0 && (type != CHIMEPY_DL_CPU || id != 0)) {
      PyErr_SetString(PyExc_BufferError,
                      "chime batches are in host memory: only dl_device "
                      "(1, 0) (CPU) can be exported");
      return -1;
    }
    if (device >= 0 && (type != CHIMEPY_DL_CUDA || id != device)) {
      PyErr_Format(PyExc_BufferError,
                   "this batch is on CUDA device %d: only dl_device (2, %d) "
                   "can be exported",
                   device, device);
      return -1;
    }
  }
  if (copy != Py_None) {
    int yes = PyObject_IsTrue(copy);
    if (yes < 0)
      return -1;
    if (yes) {
      PyErr_SetString(PyExc_BufferError,
                      "chime exports the batch's memory itself "
                      "(copy=True is not supported; copy the tensor)");
      return -1;
    }
  }
  *has_stream = 0;
  *cuda_stream = NULL;
  if (device < 0)
    return 0;
  if (stream == Py_None) {
    *has_stream = 1;
    *cuda_stream = (void *)(uintptr_t)1; /* cudaStreamLegacy */
    return 0;
  }
  if (!PyLong_Check(stream)) {
    PyErr_SetString(PyExc_TypeError, "__dlpack__: stream is an int or None");
    return -1;
  }
  long long v = PyLong_AsLongLong(stream);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear(); /* above LLONG_MAX: a pointer, read as unsigned below */
    v = 3;
  }
  if (v == -1)
    return 0; /* the consumer orders itself */
  if (v < -1) {
    PyErr_SetString(PyExc_ValueError, "__dlpack__: a negative stream other "
                                      "than -1");
    return -1;
  }
  if (v == 0) {
    PyErr_SetString(PyExc_ValueError,
                    "__dlpack__: stream 0 is ambiguous for CUDA (use 1 for "
                    "the legacy default stream, 2 for the per-thread one)");
    return -1;
  }
  *has_stream = 1;
  *cuda_stream = PyLong_AsVoidPtr(stream);
  return *cuda_stream || !PyErr_Occurred() ? 0 : -1;
}

PyObject *chimepy_dlpack_export(PyObject *owner, const void *data, int ndim,
                                const Py_ssize_t *shape,
                                const Py_ssize_t *strides, Py_ssize_t itemsize,
                                chimepy_dl_dtype_t dtype, int device) {
  for (int i = 0; i < ndim; i++) {
    if (strides[i] % itemsize) {
      PyErr_SetString(PyExc_BufferError,
                      "DLPack strides count elements: this array's byte "
                      "strides are not a multiple of its item size");
      return NULL;
    }
    /* torch (1.13 at least) aborts the process on a negative stride
     * instead of raising: refuse it here. */
    if (strides[i] < 0 && shape[i] > 1) {
      PyErr_SetString(PyExc_BufferError,
                      "negative strides (a reversed slice) are not exported: "
                      "torch cannot take them; copy it first");
      return NULL;
    }
  }
  dl_export_t *e = calloc(1, sizeof(*e) + 2 * (size_t)ndim * sizeof(int64_t));
  if (!e)
    return PyErr_NoMemory();
  for (int i = 0; i < ndim; i++) {
    e->dims[i] = (int64_t)shape[i];
    e->dims[ndim + i] = (int64_t)(strides[i] / itemsize);
  }
  e->m.dl_tensor.data = (void *)data;
  e->m.dl_tensor.device.device_type =
      device < 0 ? CHIMEPY_DL_CPU : CHIMEPY_DL_CUDA;
  e->m.dl_tensor.device.device_id = device < 0 ? 0 : device;
  e->m.dl_tensor.ndim = ndim;
  e->m.dl_tensor.dtype = dtype;
  e->m.dl_tensor.shape = e->dims;
  e->m.dl_tensor.strides = e->dims + ndim;
  e->m.manager_ctx = owner;
  e->m.deleter = dl_deleter;
  Py_INCREF(owner);
  PyObject *cap = PyCapsule_New(&e->m, "dltensor", dl_capsule_destructor);
  if (!cap) {
    Py_DECREF(owner);
    free(e);
  }
  return cap;
}

PyObject *chimepy_dlpack_device(PyObject *o, PyObject *unused) {
  (void)o;
  (void)unused;
  return Py_BuildValue("(ii)", CHIMEPY_DL_CPU, 0);
}

/* ----------------------------------------------------------------- Array */

static int array_dl_dtype(PyArrayObject *a, chimepy_dl_dtype_t *out) {
  if (!PyArray_ISNOTSWAPPED(a))
    return -1;
  out->lanes = 1;
  out->bits = (uint8_t)(8 * PyArray_ITEMSIZE(a));
  switch (PyArray_TYPE(a)) {
  case NPY_BOOL:
    out->code = CHIMEPY_DL_BOOL;
    return 0;
  case NPY_INT8:
  case NPY_INT16:
  case NPY_INT32:
  case NPY_INT64:
    out->code = CHIMEPY_DL_INT;
    return 0;
  case NPY_UINT8:
  case NPY_UINT32:
  case NPY_UINT64:
    out->code = CHIMEPY_DL_UINT;
    return 0;
  case NPY_UINT16: {
    /* numpy has no bfloat16: a bf16 leaf is uint16 here, and exports as
     * bfloat16 while it still has the leaf's dtype. Slices have the first
     * Array as base, that one the View (numpy collapses same-type bases). */
    PyObject *base = PyArray_BASE(a);
    while (base && Py_TYPE(base) == &chimepy_array_type)
      base = PyArray_BASE((PyArrayObject *)base);
    out->code =
        base && base_is_bf16(base) ? CHIMEPY_DL_BFLOAT : CHIMEPY_DL_UINT;
    return 0;
  }
  case NPY_FLOAT16:
  case NPY_FLOAT32:
  case NPY_FLOAT64:
    out->code = CHIMEPY_DL_FLOAT;
    return 0;
  case NPY_COMPLEX64:
  case NPY_COMPLEX128:
    out->code = CHIMEPY_DL_COMPLEX;
    return 0;
  default:
    return -1;
  }
}

static PyObject *array_dlpack(PyObject *o, PyObject *args, PyObject *kw) {
  int has_stream;
  void *cuda_stream;
  if (chimepy_dlpack_check_args(args, kw, -1, &has_stream, &cuda_stream) < 0)
    return NULL;
  PyArrayObject *a = (PyArrayObject *)o;
  chimepy_dl_dtype_t dt;
  if (array_dl_dtype(a, &dt) < 0) {
    PyErr_SetString(PyExc_BufferError,
                    "DLPack has no type for this array's dtype");
    return NULL;
  }
  return chimepy_dlpack_export(o, PyArray_DATA(a), PyArray_NDIM(a),
                               PyArray_DIMS(a), PyArray_STRIDES(a),
                               PyArray_ITEMSIZE(a), dt, -1);
}

/* A ufunc's new output: keep it a plain ndarray (numpy 1.x would make it
 * an Array through these two hooks), and a 0-d one a scalar, as numpy
 * gives for plain arrays; numpy 2 says which through return_scalar. */
static PyObject *array_prepare(PyObject *o, PyObject *args) {
  (void)o;
  PyObject *arr, *context = NULL;
  if (!PyArg_ParseTuple(args, "O!|O:__array_prepare__", &PyArray_Type, &arr,
                        &context))
    return NULL;
  Py_INCREF(arr);
  return arr;
}

static PyObject *array_wrap(PyObject *o, PyObject *args) {
  (void)o;
  PyObject *arr, *context = NULL;
  int to_scalar = -1;
  if (!PyArg_ParseTuple(args, "O!|Op:__array_wrap__", &PyArray_Type, &arr,
                        &context, &to_scalar))
    return NULL;
  Py_INCREF(arr);
  if (to_scalar == 0 || PyArray_NDIM((PyArrayObject *)arr) != 0)
    return arr;
  return PyArray_Return((PyArrayObject *)arr);
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule over this array's memory (CPU), holding the array, "
     "and so the batch, until the consumer's tensor is freed. DLPack "
     "cannot say read-only: do not write the tensor (in shm mode the ring "
     "is mapped read-only)."},
    {"__dlpack_device__", chimepy_dlpack_device, METH_NOARGS, NULL},
    {"__array_prepare__", array_prepare, METH_VARARGS, NULL},
    {"__array_wrap__", array_wrap, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject chimepy_array_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chime.Array",
    .tp_basicsize = sizeof(PyArrayObject_fields),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "numpy.ndarray over a leased batch's memory (batch['leaf'] "
              "and its slices): read-only, and exportable with DLPack "
              "(torch.from_dlpack(batch['obs']) shares the address).",
    .tp_methods = array_methods,
};

int chimepy_array_type_init(int (*is_bf16)(PyObject *base)) {
  base_is_bf16 = is_bf16;
  chimepy_array_type.tp_base = &PyArray_Type;
  return PyType_Ready(&chimepy_array_type);
}
