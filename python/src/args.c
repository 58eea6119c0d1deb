/* The integer arguments of the Python API, checked: an int (or anything
 * with __index__, such as a numpy integer), never a bool, in its range, so
 * that a negative count or a version past 64 bits is refused by name
 * rather than wrapped round by a PyArg "I" or "K" format. */
#include "chimepy.h"

#include <inttypes.h>
#include <stdio.h>

int chimepy_uint_arg(PyObject *o, const char *name, uint64_t lo, uint64_t hi,
                     uint64_t *out) {
  char detail[160];
  snprintf(detail, sizeof(detail),
           "%s: an integer in %" PRIu64 "..%" PRIu64 " (not a bool)", name, lo,
           hi);
  if (PyBool_Check(o)) {
    chimepy_raise(CHIME_EINVAL, detail);
    return -1;
  }
  PyObject *i = PyNumber_Index(o);
  if (i == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError))
      return -1;
    PyErr_Clear();
    chimepy_raise(CHIME_EINVAL, detail);
    return -1;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(i);
  Py_DECREF(i);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
      return -1;
    PyErr_Clear(); /* negative or past 64 bits */
    chimepy_raise(CHIME_EINVAL, detail);
    return -1;
  }
  if (v < lo || v > hi) {
    chimepy_raise(CHIME_EINVAL, detail);
    return -1;
  }
  *out = (uint64_t)v;
  return 0;
}
