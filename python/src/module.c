/* `chime._chime`, the extension behind the `chime` package (python/chime/
 * __init__.py re-exports it): the module, its types and its init. */
#define CHIMEPY_IMPORT_ARRAY
#include "chimepy.h"

static int init_types(PyObject *m) {
  PyTypeObject *types[] = {&chimepy_client_type, &chimepy_writer_type,
                           &chimepy_stream_type, &chimepy_batch_type,
                           &chimepy_view_type,   &chimepy_array_type};
  const char *names[] = {"Client", "Writer", "Stream",
                         "Batch",  "View",   "Array"};
  if (chimepy_array_type_init(chimepy_view_is_bf16) < 0)
    return -1;
  chimepy_client_docs_init();
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
    if (PyType_Ready(types[i]) < 0)
      return -1;
    Py_INCREF(types[i]);
    if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
      Py_DECREF(types[i]);
      return -1;
    }
  }
  return 0;
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

/* key_shard(key): which shard issued a key (chime_key_shard). */
static PyObject *py_key_shard(PyObject *self, PyObject *arg) {
  (void)self;
  PyObject *i = PyNumber_Index(arg); /* ints and numpy integers */
  if (i == NULL)
    return NULL;
  unsigned long long key = PyLong_AsUnsignedLongLong(i);
  Py_DECREF(i);
  if (key == (unsigned long long)-1 && PyErr_Occurred())
    return NULL; /* negative or past 64 bits: OverflowError */
  return PyLong_FromUnsignedLong(chime_key_shard((uint64_t)key));
}

static PyMethodDef module_methods[] = {
    {"key_shard", py_key_shard, METH_O,
     "key_shard(key) -> int: the shard (1..65535) of the server that issued "
     "key, 0 for an unsharded server (keys are shard << 48 | n)."},
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
  if (chimepy_errors_init(m) < 0 || chimepy_dtype_init() < 0 ||
      init_types(m) < 0 ||
      PyModule_AddStringConstant(m, "__version__", CHIME_VERSION_STRING) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
