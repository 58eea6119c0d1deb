/* A batch's ragged leaves beyond its values and offsets (stream.c): each
 * sample's rows as a view of its own, and a padded copy or a torch nested
 * tensor made only when asked. Built on the batch's own Python calls (b[leaf],
 * b.offsets(leaf)), so the views hold the batch as any array of it does. */
#include "chimepy.h"

/* b[leaf] and b.offsets(leaf), checked: offsets are count + 1, from 0,
 * never decreasing, within the values (the C library checked them once;
 * an array may be indexed with them here). 0, or -1 with an exception. */
static int values_offsets(PyObject *batch, PyObject *leaf,
                          PyArrayObject **values, PyArrayObject **offsets) {
  *values = (PyArrayObject *)PyObject_GetItem(batch, leaf);
  if (*values == NULL)
    return -1;
  if (!PyArray_Check(*values)) { /* a device batch's values: on the GPU */
    Py_CLEAR(*values);
    chimepy_raise(CHIME_EINVAL,
                  "samples, padded and nested read host batches: on a "
                  "device stream split b[leaf] by b.offsets(leaf)");
    return -1;
  }
  *offsets = (PyArrayObject *)PyObject_CallMethod(batch, "offsets", "O", leaf);
  if (*offsets == NULL) {
    Py_CLEAR(*values);
    return -1;
  }
  const int64_t *o = PyArray_DATA(*offsets);
  npy_intp n = PyArray_DIM(*offsets, 0);
  int ok = PyArray_NDIM(*values) >= 1 && n >= 1 && o[0] == 0 &&
           o[n - 1] <= (int64_t)PyArray_DIM(*values, 0);
  for (npy_intp j = 0; ok && j + 1 < n; j++)
    ok = o[j] <= o[j + 1];
  if (!ok) {
    Py_CLEAR(*values);
    Py_CLEAR(*offsets);
    chimepy_raise(CHIME_EPROTO, "offsets out of order or past the values");
    return -1;
  }
  return 0;
}

PyObject *chimepy_batch_samples(PyObject *batch, PyObject *leaf) {
  PyArrayObject *values, *offsets;
  if (values_offsets(batch, leaf, &values, &offsets) != 0)
    return NULL;
  const int64_t *o = PyArray_DATA(offsets);
  npy_intp count = PyArray_DIM(offsets, 0) - 1;
  PyObject *list = PyList_New(count);
  for (npy_intp j = 0; list != NULL && j < count; j++) {
    PyObject *lo = PyLong_FromLongLong(o[j]);
    PyObject *hi = PyLong_FromLongLong(o[j + 1]);
    PyObject *sl = lo && hi ? PySlice_New(lo, hi, NULL) : NULL;
    PyObject *item = sl ? PyObject_GetItem((PyObject *)values, sl) : NULL;
    Py_XDECREF(sl);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    if (item == NULL) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, j, item);
  }
  Py_DECREF(values);
  Py_DECREF(offsets);
  return list;
}

PyObject *chimepy_batch_padded(PyObject *batch, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"leaf", "value", "length", NULL};
  PyObject *leaf, *value = NULL, *length = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:padded", kwlist, &leaf,
                                   &value, &length))
    return NULL;
  PyArrayObject *values, *offsets;
  if (values_offsets(batch, leaf, &values, &offsets) != 0)
    return NULL;
  const int64_t *o = PyArray_DATA(offsets);
  npy_intp count = PyArray_DIM(offsets, 0) - 1, longest = 0;
  for (npy_intp j = 0; j < count; j++)
    if (o[j + 1] - o[j] > longest)
      longest = (npy_intp)(o[j + 1] - o[j]);
  PyArrayObject *out = NULL;
  npy_intp len = longest;
  if (length != Py_None) {
    len = (npy_intp)PyLong_AsSsize_t(length);
    if (len < 0 && !PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "padded: length must be at least 0");
    else if (len < longest)
      PyErr_Format(PyExc_ValueError,
                   "padded: a sample has %zd rows, more than length %zd",
                   (Py_ssize_t)longest, (Py_ssize_t)len);
    if (PyErr_Occurred())
      goto out;
  }
  int nd = PyArray_NDIM(values);
  npy_intp dims[CHIME_MAX_DIMS + 2];
  dims[0] = count;
  dims[1] = len;
  for (int d = 1; d < nd; d++)
    dims[d + 1] = PyArray_DIM(values, d);
  PyArray_Descr *descr = PyArray_DESCR(values);
  Py_INCREF(descr);
  out = (PyArrayObject *)PyArray_Zeros(nd + 1, dims, descr, 0);
  if (out == NULL)
    goto out;
  if (value != NULL && value != Py_None &&
      PyArray_FillWithScalar(out, value) != 0) {
    Py_CLEAR(out);
    goto out;
  }
  npy_intp row = PyArray_ITEMSIZE(values);
  for (int d = 1; d < nd; d++)
    row *= PyArray_DIM(values, d);
  const char *src = PyArray_DATA(values);
  char *dst = PyArray_DATA(out);
  for (npy_intp j = 0; j < count; j++)
    memcpy(dst + (size_t)(j * len * row), src + (size_t)(o[j] * row),
           (size_t)((o[j + 1] - o[j]) * row));
out:
  Py_DECREF(values);
  Py_DECREF(offsets);
  return (PyObject *)out;
}

PyObject *chimepy_batch_nested(PyObject *batch, PyObject *leaf) {
  PyArrayObject *values = NULL, *offsets = NULL;
  PyObject *t = NULL, *list = NULL, *out = NULL;
  /* torch is optional for the package: imported on the first call. */
  PyObject *torch = PyImport_ImportModule("torch");
  if (torch == NULL || values_offsets(batch, leaf, &values, &offsets) != 0)
    goto out;
  /* The values as one tensor over the ring (DLPack: bf16 stays bfloat16),
   * each sample a slice of it; torch 1.13 has no nested tensor over given
   * storage, so nested_tensor copies the slices into its own. */
  if ((t = PyObject_CallMethod(torch, "from_dlpack", "O", values)) == NULL)
    goto out;
  const int64_t *o = PyArray_DATA(offsets);
  npy_intp count = PyArray_DIM(offsets, 0) - 1;
  if ((list = PyList_New(count)) == NULL)
    goto out;
  for (npy_intp j = 0; j < count; j++) {
    PyObject *item =
        PySequence_GetSlice(t, (Py_ssize_t)o[j], (Py_ssize_t)o[j + 1]);
    if (item == NULL)
      goto out;
    PyList_SET_ITEM(list, j, item);
  }
  PyObject *nested = PyObject_GetAttrString(torch, "nested");
  if (nested != NULL) {
    out = PyObject_CallMethod(nested, "nested_tensor", "O", list);
    Py_DECREF(nested);
  }
out:
  Py_XDECREF(list);
  Py_XDECREF(t);
  Py_XDECREF(values);
  Py_XDECREF(offsets);
  Py_XDECREF(torch);
  return out;
}
