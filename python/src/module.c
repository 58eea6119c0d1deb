/* `chime._chime`, the extension behind the `chime` package (python/chime/
 * __init__.py re-exports it): exception classes, dtype mapping, init. */
#define CHIMEPY_IMPORT_ARRAY
#include "chimepy.h"

#include <stddef.h>

static PyObject *err_base, *err_shutdown, *err_disconnected, *err_timeout,
    *err_notfound, *err_invalid, *err_forgotten;
static PyArray_Descr *info_descr;

PyObject *chimepy_raise(int code, const char *detail) {
  PyObject *type = err_base;
  switch (code) {
  case CHIME_ESHUTDOWN:
    type = err_shutdown;
    break;
  case CHIME_EDISCONNECTED:
    type = err_disconnected;
    break;
  case CHIME_ETIMEDOUT:
    type = err_timeout;
    break;
  case CHIME_ENOTFOUND:
    type = err_notfound;
    break;
  case CHIME_EINVAL:
    type = err_invalid;
    break;
  case CHIME_EFORGOTTEN:
    type = err_forgotten;
    break;
  default:
    break;
  }
  PyObject *msg = PyUnicode_FromFormat(
      "%s (%s)", detail && detail[0] ? detail : chime_strerror(code),
      chime_err_name(code));
  if (!msg)
    return NULL;
  PyObject *exc = PyObject_CallOneArg(type, msg);
  Py_DECREF(msg);
  if (!exc)
    return NULL;
  /* code and name let callers branch on codes chime has no class for. */
  PyObject *pycode = PyLong_FromLong(code);
  PyObject *pyname = PyUnicode_FromString(chime_err_name(code));
  if (pycode && pyname && PyObject_SetAttrString(exc, "code", pycode) == 0 &&
      PyObject_SetAttrString(exc, "name", pyname) == 0)
    PyErr_SetObject(type, exc);
  Py_XDECREF(pycode);
  Py_XDECREF(pyname);
  Py_DECREF(exc);
  return NULL;
}

PyArray_Descr *chimepy_descr(chime_dtype_t dtype) {
  int t;
  switch (dtype) {
  case CHIME_DTYPE_U8:
    t = NPY_UINT8;
    break;
  case CHIME_DTYPE_I8:
    t = NPY_INT8;
    break;
  case CHIME_DTYPE_U16:
  case CHIME_DTYPE_BF16:
    t = NPY_UINT16;
    break;
  case CHIME_DTYPE_I16:
    t = NPY_INT16;
    break;
  case CHIME_DTYPE_U32:
    t = NPY_UINT32;
    break;
  case CHIME_DTYPE_I32:
    t = NPY_INT32;
    break;
  case CHIME_DTYPE_U64:
    t = NPY_UINT64;
    break;
  case CHIME_DTYPE_I64:
    t = NPY_INT64;
    break;
  case CHIME_DTYPE_F16:
    t = NPY_FLOAT16;
    break;
  case CHIME_DTYPE_F32:
    t = NPY_FLOAT32;
    break;
  case CHIME_DTYPE_F64:
    t = NPY_FLOAT64;
    break;
  case CHIME_DTYPE_BOOL:
    t = NPY_BOOL;
    break;
  default:
    return (PyArray_Descr *)chimepy_raise(CHIME_EINVAL, "unknown leaf dtype");
  }
  return PyArray_DescrFromType(t);
}

PyArray_Descr *chimepy_info_descr(void) {
  return info_descr;
}

/* Checked against chime_sample_info_t below, so a change to the record
 * breaks the build instead of the views. */
_Static_assert(offsetof(chime_sample_info_t, key) == 0, "info layout");
_Static_assert(offsetof(chime_sample_info_t, probability) == 8, "info layout");
_Static_assert(offsetof(chime_sample_info_t, times_sampled) == 16,
               "info layout");
_Static_assert(offsetof(chime_sample_info_t, reserved) == 20, "info layout");
_Static_assert(offsetof(chime_sample_info_t, insert_time_ns) == 24,
               "info layout");
_Static_assert(offsetof(chime_sample_info_t, priority) == 32, "info layout");
_Static_assert(offsetof(chime_sample_info_t, table_size) == 40, "info layout");
_Static_assert(offsetof(chime_sample_info_t, episode_id) == 48, "info layout");
_Static_assert(offsetof(chime_sample_info_t, first_step) == 56, "info layout");
_Static_assert(offsetof(chime_sample_info_t, length) == 60, "info layout");
_Static_assert(sizeof(chime_sample_info_t) == 64, "info layout");

static int make_info_descr(void) {
  PyObject *spec = Py_BuildValue(
      "[(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)]", "key", "<u8", "probability",
      "<f8", "times_sampled", "<u4", "reserved", "<u4", "insert_time_ns", "<u8",
      "priority", "<f8", "table_size", "<u8", "episode_id", "<u8", "first_step",
      "<u4", "length", "<u4");
  if (!spec)
    return -1;
  int ok = PyArray_DescrConverter(spec, &info_descr);
  Py_DECREF(spec);
  return ok ? 0 : -1;
}

static int add_error(PyObject *m, PyObject **slot, const char *name,
                     PyObject *bases, const char *doc) {
  char qual[64];
  snprintf(qual, sizeof(qual), "chime.%s", name);
  *slot = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
  if (!*slot)
    return -1;
  Py_INCREF(*slot);
  if (PyModule_AddObject(m, name, *slot) < 0) {
    Py_DECREF(*slot);
    return -1;
  }
  return 0;
}

static int add_errors(PyObject *m) {
  if (add_error(m, &err_base, "Error", NULL,
                "A chime call failed. .code is the CHIME_E* code (negative "
                "int), .name its symbolic name; the message is the "
                "library's last error.") < 0)
    return -1;
  PyObject *b = PyTuple_Pack(1, err_base);
  PyObject *bt = PyTuple_Pack(2, err_base, PyExc_TimeoutError);
  int rc = -1;
  if (b && bt &&
      add_error(m, &err_shutdown, "ShutdownError", b,
                "The server is shutting down (CHIME_ESHUTDOWN).") == 0 &&
      add_error(m, &err_disconnected, "DisconnectedError", b,
                "The server is gone (CHIME_EDISCONNECTED).") == 0 &&
      add_error(m, &err_timeout, "TimeoutError", bt,
                "A wait ran out (CHIME_ETIMEDOUT); also a builtin "
                "TimeoutError.") == 0 &&
      add_error(m, &err_notfound, "NotFoundError", b,
                "No such table (CHIME_ENOTFOUND).") == 0 &&
      add_error(m, &err_invalid, "InvalidArgumentError", b,
                "Bad input, e.g. a sample that does not fit the spec "
                "(CHIME_EINVAL).") == 0 &&
      add_error(m, &err_forgotten, "WriterForgottenError", b,
                "The server no longer remembers this writer "
                "(CHIME_EFORGOTTEN): the acked samples are in the table, "
                "each unacked request wholly or not at all, which nobody "
                "can tell. Go on with a new writer.") == 0)
    rc = 0;
  Py_XDECREF(b);
  Py_XDECREF(bt);
  return rc;
}

/* _raise(code, detail): raises what a failed call with that CHIME_E* code
 * raises, so errors found by the Python half of the package (ensure_server)
 * have the same classes, .code and .name. */
static PyObject *py_raise(PyObject *self, PyObject *args) {
  (void)self;
  int code;
  const char *detail;
  if (!PyArg_ParseTuple(args, "is:_raise", &code, &detail))
    return NULL;
  if (code >= 0) {
    PyErr_SetString(PyExc_ValueError, "_raise: a negative CHIME_E* code");
    return NULL;
  }
  return chimepy_raise(code, detail);
}

static PyMethodDef module_methods[] = {
    {"_raise", py_raise, METH_VARARGS,
     "_raise(code, detail): raise the chime.Error subclass of a CHIME_E* "
     "code (internal)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef chime_module = {
    PyModuleDef_HEAD_INIT,
    .m_methods = module_methods,
    .m_name = "chime._chime",
    .m_doc = "chime: replay batches from chimed as zero-copy numpy views.\n"
             "See docs/python.md.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__chime(void);
PyMODINIT_FUNC PyInit__chime(void) {
  import_array();
  PyObject *m = PyModule_Create(&chime_module);
  if (!m)
    return NULL;
  if (add_errors(m) < 0 || make_info_descr() < 0 || chimepy_init_types(m) < 0 ||
      PyModule_AddStringConstant(m, "__version__", CHIME_VERSION_STRING) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
