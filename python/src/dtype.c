/* What Python needs of a leaf dtype, worked out at import from the C
 * library's table of them (chime_dtype_name, chime_dtype_size over
 * CHIME_DTYPE_MAP): numpy's dtype, the buffer protocol's format and
 * DLPack's type; and the structured dtype of the per-sample info record
 * (chime_sample_info_t). */
#include "chimepy.h"

#include <stddef.h>
#include <string.h>

/* Room for every dtype value, checked against the library's table. */
enum { CHIMEPY_NDTYPES = 32 };
#define CHIMEPY_DTYPE_MAX(name, value, str, size) (value) >= CHIMEPY_NDTYPES ||
_Static_assert(!(CHIME_DTYPE_MAP(CHIMEPY_DTYPE_MAX) 0),
               "a dtype value outgrew the table below");

typedef struct {
  PyArray_Descr *descr; /* NULL: not a dtype */
  char format[2];
  chimepy_dl_dtype_t dl;
} dtype_t;

static dtype_t dtypes[CHIMEPY_NDTYPES];
static PyArray_Descr *info_descr;

/* The kind of a dtype as DLPack codes it, from its name: u8..u64, i8..i64,
 * f16..f64, bf16, bool. */
static int kind_of(const char *name) {
  if (strcmp(name, "bool") == 0)
    return CHIMEPY_DL_BOOL;
  if (strncmp(name, "bf", 2) == 0)
    return CHIMEPY_DL_BFLOAT;
  return name[0] == 'u'   ? CHIMEPY_DL_UINT
         : name[0] == 'i' ? CHIMEPY_DL_INT
         : name[0] == 'f' ? CHIMEPY_DL_FLOAT
                          : -1;
}

static int dtype_add(chime_dtype_t d) {
  int kind = kind_of(chime_dtype_name(d));
  size_t size = chime_dtype_size(d);
  unsigned lg = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3;
  if (kind < 0 || (size != (size_t)1 << lg) || (unsigned)d >= CHIMEPY_NDTYPES) {
    PyErr_Format(PyExc_SystemError, "chime: no Python type for dtype %s",
                 chime_dtype_name(d));
    return -1;
  }
  /* numpy and the struct module by kind and size; numpy has no bfloat16,
   * so a bf16 leaf is its bits as uint16 (DLPack still exports bfloat16). */
  char np[24]; /* "=" a kind letter and any size_t: no truncation to warn of */
  snprintf(np, sizeof(np), "=%c%zu",
           kind == CHIMEPY_DL_INT     ? 'i'
           : kind == CHIMEPY_DL_FLOAT ? 'f'
           : kind == CHIMEPY_DL_BOOL  ? 'b'
                                      : 'u',
           size);
  dtypes[d].format[0] = kind == CHIMEPY_DL_INT     ? "bhiq"[lg]
                        : kind == CHIMEPY_DL_FLOAT ? "?efd"[lg]
                        : kind == CHIMEPY_DL_BOOL  ? '?'
                                                   : "BHIQ"[lg];
  dtypes[d].dl.code = (uint8_t)kind;
  dtypes[d].dl.bits = (uint8_t)(8 * size);
  dtypes[d].dl.lanes = 1;
  PyObject *str = PyUnicode_FromString(np);
  int ok = str != NULL && PyArray_DescrConverter(str, &dtypes[d].descr);
  Py_XDECREF(str);
  return ok ? 0 : -1;
}

static const dtype_t *dtype_get(chime_dtype_t d) {
  return (unsigned)d < CHIMEPY_NDTYPES && dtypes[d].descr != NULL ? &dtypes[d]
                                                                  : NULL;
}

PyArray_Descr *chimepy_descr(chime_dtype_t dtype) {
  const dtype_t *t = dtype_get(dtype);
  if (t == NULL)
    return (PyArray_Descr *)chimepy_raise(CHIME_EINVAL, "unknown leaf dtype");
  Py_INCREF(t->descr);
  return t->descr;
}

const char *chimepy_buffer_format(chime_dtype_t d) {
  const dtype_t *t = dtype_get(d);
  return t != NULL ? t->format : "B";
}

int chimepy_dl_dtype(chime_dtype_t d, chimepy_dl_dtype_t *out) {
  const dtype_t *t = dtype_get(d);
  if (t == NULL)
    return -1;
  *out = t->dl;
  return 0;
}

PyArray_Descr *chimepy_info_descr(void) {
  return info_descr;
}

/* The info records' buffer format, numpy's own for info_descr (so every
 * field is in it, as in the dtype). */
static char info_format[512];

const char *chimepy_info_format(void) {
  return info_format;
}

static int info_format_init(void) {
  Py_INCREF(info_descr);
  PyObject *a = PyArray_Zeros(1, (npy_intp[]){1}, info_descr, 0);
  if (!a)
    return -1;
  Py_buffer view;
  int rc = PyObject_GetBuffer(a, &view, PyBUF_RECORDS_RO);
  Py_DECREF(a);
  if (rc < 0)
    return -1;
  rc = view.itemsize == (Py_ssize_t)sizeof(chime_sample_info_t) &&
               strlen(view.format) < sizeof(info_format)
           ? 0
           : -1;
  if (rc == 0)
    snprintf(info_format, sizeof(info_format), "%s", view.format);
  else
    PyErr_SetString(PyExc_SystemError, "info record: unexpected format");
  PyBuffer_Release(&view);
  return rc;
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
_Static_assert(offsetof(chime_sample_info_t, version) == 64, "info layout");
_Static_assert(offsetof(chime_sample_info_t, staleness) == 72, "info layout");
_Static_assert(sizeof(chime_sample_info_t) == 80, "info layout");

int chimepy_dtype_init(void) {
#define CHIMEPY_DTYPE_ADD(name, value, str, size)                              \
  if (dtype_add(CHIME_DTYPE_##name) < 0)                                       \
    return -1;
  CHIME_DTYPE_MAP(CHIMEPY_DTYPE_ADD)
#undef CHIMEPY_DTYPE_ADD
  PyObject *spec = Py_BuildValue(
      "[(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)(ss)]", "key", "<u8",
      "probability", "<f8", "times_sampled", "<u4", "reserved", "<u4",
      "insert_time_ns", "<u8", "priority", "<f8", "table_size", "<u8",
      "episode_id", "<u8", "first_step", "<u4", "length", "<u4", "version",
      "<u8", "staleness", "<u8");
  if (!spec)
    return -1;
  int ok = PyArray_DescrConverter(spec, &info_descr);
  Py_DECREF(spec);
  return ok ? info_format_init() : -1;
}
