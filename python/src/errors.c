/* chime's Python exception classes (chime.Error and one subclass per
 * CHIME_E* code a caller branches on) and the raise every call shares. */
#include "chimepy.h"

#include <stdio.h>

static PyObject *err_base, *err_shutdown, *err_disconnected, *err_timeout,
    *err_notfound, *err_invalid, *err_forgotten;

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

/* chime.EINVAL, chime.EBUSY, ...: every CHIME_E* code under its name
 * without the prefix, from the one list that makes the C enum, so Python
 * never restates a value. */
static int add_codes(PyObject *m) {
#define CHIMEPY_ADD_CODE(name, value, msg)                                     \
  if (PyModule_AddIntConstant(m, #name, value) < 0)                            \
    return -1;
  CHIME_ERRNO_MAP(CHIMEPY_ADD_CODE)
#undef CHIMEPY_ADD_CODE
  return 0;
}

int chimepy_errors_init(PyObject *m) {
  if (add_codes(m) < 0)
    return -1;
  if (add_error(m, &err_base, "Error", NULL,
                "A chime call failed. .code is the CHIME_E* code (negative "
                "int), .name its symbolic name; the message is the "
                "library's detail (chime_last_error()).") < 0)
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
