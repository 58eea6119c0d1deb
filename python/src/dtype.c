/* Leaf dtypes as numpy sees them, and the structured dtype of the
 * per-sample info record (chime_sample_info_t). */
#include "chimepy.h"

#include <stddef.h>

static PyArray_Descr *info_descr;

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

int chimepy_dtype_init(void) {
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
