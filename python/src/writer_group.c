/* chime.Writer's group calls (writer.h): a group of sample dicts packed as
 * the group table's one item (its group leaf of lengths, each leaf's
 * samples stacked or, ragged, back to back), then appended as append()
 * does; and the groups the table's filters dropped. */
#include "writer.h"

#include <string.h>

/* Leaf name of sample j, or NULL with the error set. */
static PyObject *leaf_of(PyObject *sample, const char *name, Py_ssize_t j) {
  PyObject *v =
      PyDict_Check(sample) ? PyDict_GetItemString(sample, name) : NULL;
  PyObject *msg = NULL;
  if (v == NULL && !PyDict_Check(sample))
    msg = PyUnicode_FromFormat("append_group: sample %zd is not a dict of "
                               "leaves",
                               j);
  else if (v == NULL)
    msg = PyUnicode_FromFormat("append_group: sample %zd has no leaf '%s'", j,
                               name);
  if (msg != NULL) {
    chimepy_raise(CHIME_EINVAL, PyUnicode_AsUTF8(msg));
    Py_DECREF(msg);
  }
  return v;
}

/* The group's dict of the stored spec's leaves from the n samples of seq
 * (a fast sequence), or NULL with the error set. */
static PyObject *pack(const chime_spec_t *st, uint32_t gmax, PyObject *seq,
                      Py_ssize_t n) {
  PyObject *np = PyImport_ImportModule("numpy"), *dict = PyDict_New();
  npy_intp dims[2] = {n, (npy_intp)st->leaves[0].shape[1]};
  PyArrayObject *g = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_UINT32, 0);
  if (np == NULL || dict == NULL || g == NULL)
    goto fail;
  uint32_t *gv = PyArray_DATA(g);
  for (uint32_t i = 1, c = 0; i < st->nleaves; i++) {
    const chime_leaf_t *l = &st->leaves[i];
    int fixed = l->shares == 1;
    PyObject *list = PyList_New(n), *v;
    if (list == NULL)
      goto fail;
    for (Py_ssize_t j = 0; j < n; j++) {
      PyObject *x = leaf_of(PySequence_Fast_GET_ITEM(seq, j), l->name, j);
      PyArrayObject *a =
          x ? (PyArrayObject *)PyArray_FromAny(x, NULL, 0, 0, 0, NULL) : NULL;
      if (a == NULL) {
        Py_DECREF(list);
        goto fail;
      }
      if (!fixed && PyArray_NDIM(a) < 1) {
        Py_DECREF(a);
        Py_DECREF(list);
        chimepy_raise(CHIME_EINVAL,
                      "append_group: a ragged leaf's value needs rows");
        goto fail;
      }
      if (!fixed && (uint64_t)PyArray_DIM(a, 0) > l->shape[0] / gmax) {
        PyObject *msg = PyUnicode_FromFormat(
            "append_group: leaf '%s' of sample %zd has %zd rows, more than "
            "its bound %llu",
            l->name, j, (Py_ssize_t)PyArray_DIM(a, 0),
            (unsigned long long)(l->shape[0] / gmax));
        chimepy_raise(CHIME_EINVAL, msg ? PyUnicode_AsUTF8(msg) : l->name);
        Py_XDECREF(msg);
        Py_DECREF(a);
        Py_DECREF(list);
        goto fail;
      }
      if (!fixed)
        gv[(size_t)j * dims[1] + c] = (uint32_t)PyArray_DIM(a, 0);
      PyList_SET_ITEM(list, j, (PyObject *)a);
    }
    c += !fixed;
    v = PyObject_CallMethod(np, fixed ? "stack" : "concatenate", "O", list);
    Py_DECREF(list);
    if (v == NULL || PyDict_SetItemString(dict, l->name, v) != 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  if (PyDict_SetItemString(dict, CHIME_GROUP_LEAF, (PyObject *)g) != 0)
    goto fail;
  Py_DECREF(g);
  Py_DECREF(np);
  return dict;
fail:
  Py_XDECREF(g);
  Py_XDECREF(dict);
  Py_XDECREF(np);
  return NULL;
}

PyObject *chimepy_writer_append_group(PyObject *o, PyObject *args,
                                      PyObject *kw) {
  writer_t *self = (writer_t *)o;
  static char *kwlist[] = {"samples", "priority", "version", NULL};
  PyObject *samples, *vo = Py_None;
  double priority = 1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dO:append_group", kwlist,
                                   &samples, &priority, &vo))
    return NULL;
  uint32_t gmax = chime_spec_group_max(&self->spec);
  if (gmax == 0) {
    PyErr_Format(PyExc_ValueError,
                 "append_group: table '%s' is not a group table (no "
                 "group_max): append samples, not groups",
                 self->table);
    return NULL;
  }
  PyObject *seq = PySequence_Fast(samples, "append_group: a list of samples");
  if (seq == NULL)
    return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n < 1 || n > (Py_ssize_t)gmax) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError,
                 "append_group: a group of %zd samples; table '%s' takes "
                 "1..%u (group_max)",
                 n, self->table, gmax);
    return NULL;
  }
  PyObject *dict = pack(&self->spec, gmax, seq, n), *r = NULL;
  Py_DECREF(seq);
  if (dict == NULL)
    return NULL;
  PyObject *kwa =
      Py_BuildValue("{s:d,s:O}", "priority", priority, "version", vo);
  PyObject *append = PyObject_GetAttrString(o, "append");
  PyObject *a = PyTuple_Pack(1, dict);
  if (kwa && append && a)
    r = PyObject_Call(append, a, kwa);
  Py_XDECREF(a);
  Py_XDECREF(append);
  Py_XDECREF(kwa);
  Py_DECREF(dict);
  return r;
}

PyObject *chimepy_writer_take_dropped(PyObject *o, PyObject *unused) {
  (void)unused;
  writer_t *self = (writer_t *)o;
  PyObject *list = PyList_New(0);
  chime_writer_drop_t d[64];
  uint32_t k;
  while (list != NULL && self->w != NULL &&
         (k = chime_writer_take_dropped(self->w, d, 64)) > 0)
    for (uint32_t i = 0; i < k; i++) {
      PyObject *t = Py_BuildValue(
          "(KKs)", (unsigned long long)d[i].index, (unsigned long long)d[i].key,
          d[i].reason == CHIME_DROP_ZERO_VARIANCE ? "zero_variance"
                                                  : "mean_outside");
      if (t == NULL || PyList_Append(list, t) != 0) {
        Py_XDECREF(t);
        Py_CLEAR(list);
        break;
      }
      Py_DECREF(t);
    }
  return list;
}
