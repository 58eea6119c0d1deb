/* chime.Batch: one leased ring slot, its leaves as zero-copy views (host
 * arrays, or device Views exported with DLPack), and the give-back rules
 * that keep those views safe (batch.h). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- stream end */

/* For a batch the caller never saw, on a path that already raises. */
void chimepy_release_unreported(chime_stream_t *s, const chime_batch_t *b) {
  if (chime_stream_release(s, b) != 0) {
    /* the stream ended: the slot goes back with it */
  }
}

void chimepy_stream_shut(chimepy_stream_t *self) {
  chime_stream_t *s = self->s;
  if (!s)
    return;
  self->s = NULL;
  Py_BEGIN_ALLOW_THREADS chime_stream_close(s);
  Py_END_ALLOW_THREADS chimepy_client_child_closed(self->client);
}

int chimepy_stream_drain(chimepy_stream_t *self) {
  int first = 0;
  for (unsigned i = 0; i < self->npending; i++) {
    int rc = chime_stream_release(self->s, &self->pending[i]);
    if (rc && !first)
      first = rc;
  }
  self->npending = 0;
  return first;
}

void chimepy_stream_finish_close(chimepy_stream_t *self) {
  if (self->closing && !self->in_next && self->leased == 0) {
    (void)chimepy_stream_drain(self);
    chimepy_stream_shut(self);
  }
}

/* Gives the slot of a batch with no live view back to the server. */
int chimepy_batch_give_back(chimepy_batch_t *bt) {
  chimepy_stream_t *st = bt->stream;
  int rc = 0;
  if (!bt->leased)
    return 0;
  bt->leased = 0;
  if (bt->prev)
    bt->prev->next = bt->next;
  else
    st->held = bt->next;
  if (bt->next)
    bt->next->prev = bt->prev;
  bt->prev = bt->next = NULL;
  if (st->in_next)
    st->pending[st->npending++] = bt->b; /* cap >= slots: never overflows */
  else
    rc = chime_stream_release(st->s, &bt->b);
  st->leased--;
  chimepy_stream_finish_close(st);
  return rc;
}

int chimepy_batch_request_release(chimepy_batch_t *bt) {
  bt->release_asked = 1;
  if (bt->leased && bt->views == 0)
    return chimepy_batch_give_back(bt);
  return 0;
}

/* The last View of the batch went (view.c): a release asked meanwhile
 * happens now. */
static void batch_view_gone(PyObject *o) {
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  if (--bt->views == 0 && bt->release_asked)
    (void)chimepy_batch_give_back(bt); /* a dealloc cannot report it */
}

/* ----------------------------------------------------------------- Batch */

static PyObject *batch_not_leased(void) {
  return chimepy_raise(CHIME_ECLOSED,
                       "batch was released: its slot may hold other data");
}

/* A device leaf's View: the consumer's CUDA stream waits for the copy. */
static int batch_order(PyObject *o, void *cuda_stream) {
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  if (!bt->leased) {
    batch_not_leased();
    return -1;
  }
  int rc = chime_stream_wait(bt->stream->s, &bt->b, cuda_stream);
  if (rc) {
    chimepy_raise(rc, chime_last_error());
    return -1;
  }
  return 0;
}

/* A read-only ndarray over leaf `leaf` (-1: info; -2 - i: ragged leaf i's
 * offsets) whose base is a new View;
 * on a device stream a leaf's View itself. */
static PyObject *batch_array(chimepy_batch_t *bt, int leaf) {
  if (!bt->leased || bt->release_asked)
    return batch_not_leased();
  chimepy_view_t *v = chimepy_view_new((PyObject *)bt, batch_view_gone);
  if (!v)
    return NULL;
  bt->views++;
  v->leaf = leaf;
  npy_intp dims[CHIME_MAX_DIMS + 1];
  PyArray_Descr *descr;
  if (leaf >= 0 && bt->stream->device >= 0) {
    const chime_batch_leaf_t *l = &bt->b.leaf[leaf];
    v->data = l->data;
    v->ndim = (int)l->ndim;
    v->format = chimepy_buffer_format(l->dtype);
    v->dtype = l->dtype;
    v->itemsize = (Py_ssize_t)chime_dtype_size(l->dtype);
    v->device = bt->stream->device;
    v->order = batch_order;
    Py_ssize_t stride = v->itemsize;
    v->len = v->itemsize;
    for (int i = v->ndim - 1; i >= 0; i--) {
      v->shape[i] = (Py_ssize_t)l->shape[i];
      v->strides[i] = stride;
      stride *= v->shape[i];
      v->len *= v->shape[i];
    }
    return (PyObject *)v;
  }
  if (leaf <= -2) { /* a ragged leaf's count + 1 offsets */
    descr = chimepy_descr(CHIME_DTYPE_I64);
    v->data = bt->b.leaf[-2 - leaf].offsets;
    v->ndim = 1;
    v->format = chimepy_buffer_format(CHIME_DTYPE_I64);
    v->dtype = CHIME_DTYPE_I64;
    v->itemsize = 8;
    /* A group batch's leaves have a row per sample (the group leaf's
     * offsets are the groups'). */
    int64_t rows = bt->b.groups != NULL && leaf != -2
                       ? bt->b.groups[bt->b.count]
                       : (int64_t)bt->b.count;
    v->shape[0] = dims[0] = (npy_intp)rows + 1;
  } else if (leaf >= 0) {
    const chime_batch_leaf_t *l = &bt->b.leaf[leaf];
    descr = chimepy_descr(l->dtype);
    v->data = l->data;
    v->ndim = (int)l->ndim;
    v->format = chimepy_buffer_format(l->dtype);
    v->dtype = l->dtype;
    v->itemsize = (Py_ssize_t)chime_dtype_size(l->dtype);
    for (int i = 0; i < v->ndim; i++)
      v->shape[i] = dims[i] = (npy_intp)l->shape[i];
  } else {
    descr = chimepy_info_descr();
    Py_XINCREF(descr);
    v->data = bt->b.info;
    v->dtype = CHIME_DTYPE_INVALID;
    v->ndim = 1;
    v->format = chimepy_info_format();
    v->itemsize = sizeof(chime_sample_info_t);
    v->shape[0] = dims[0] = bt->b.count;
  }
  if (!descr) {
    Py_DECREF(v);
    return NULL;
  }
  Py_ssize_t stride = v->itemsize;
  v->len = v->itemsize;
  for (int i = v->ndim - 1; i >= 0; i--) {
    v->strides[i] = stride;
    stride *= v->shape[i];
    v->len *= v->shape[i];
  }
  /* No NPY_ARRAY_WRITEABLE; and the base refuses writable buffers, so numpy
   * will not let it be set later either. A chime.Array so that it exports
   * DLPack although read-only (array.c). */
  PyObject *arr = PyArray_NewFromDescr(
      &chimepy_array_type, descr, v->ndim, dims, NULL, (void *)v->data,
      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
  if (!arr) {
    Py_DECREF(v);
    return NULL;
  }
  if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)v) < 0) {
    Py_DECREF(arr);
    return NULL;
  }
  return arr;
}

static int leaf_index(chimepy_batch_t *bt, PyObject *key) {
  const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
  if (!name) {
    PyErr_Clear();
    PyErr_SetObject(PyExc_KeyError, key);
    return -1;
  }
  for (uint32_t i = 0; i < bt->b.nleaves; i++)
    if (!strcmp(bt->b.leaf[i].name, name))
      return (int)i;
  PyErr_SetObject(PyExc_KeyError, key);
  return -1;
}

static PyObject *batch_getitem(PyObject *o, PyObject *key) {
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  int i = leaf_index(bt, key);
  return i < 0 ? NULL : batch_array(bt, i);
}

static PyObject *batch_view(PyObject *o, PyObject *key) {
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  int i = leaf_index(bt, key);
  if (i < 0)
    return NULL;
  PyObject *arr = batch_array(bt, i);
  if (!arr || Py_TYPE(arr) == &chimepy_view_type)
    return arr; /* a device leaf's View */
  PyObject *v = PyArray_BASE((PyArrayObject *)arr);
  Py_INCREF(v);
  Py_DECREF(arr);
  return v;
}

static PyObject *batch_offsets(PyObject *o, PyObject *key) {
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  int i = leaf_index(bt, key);
  if (i < 0)
    return NULL;
  /* On a device stream too: the offsets are a host copy. */
  if (bt->b.leaf[i].offsets == NULL)
    return chimepy_raise(CHIME_EINVAL, "offsets: not a ragged leaf");
  return batch_array(bt, -2 - i);
}

static PyObject *batch_groups(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  if (bt->b.groups == NULL)
    return chimepy_raise(CHIME_EINVAL, "groups: not a group table's batch");
  return batch_array(bt, -2); /* the group leaf's offsets: the groups' */
}

static Py_ssize_t batch_len(PyObject *o) {
  return (Py_ssize_t)((chimepy_batch_t *)o)->b.nleaves;
}

static PyMappingMethods batch_mapping = {
    .mp_length = batch_len,
    .mp_subscript = batch_getitem,
};

static void batch_dealloc(PyObject *o) {
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  chimepy_stream_t *st = bt->stream;
  if (st) {
    if (st->last == bt)
      st->last = NULL;
    (void)chimepy_batch_give_back(
        bt); /* no view is alive: they hold the batch */
    Py_DECREF(st);
  }
  Py_TYPE(o)->tp_free(o);
}

static PyObject *batch_release(PyObject *o, PyObject *unused) {
  (void)unused;
  int rc = chimepy_batch_request_release((chimepy_batch_t *)o);
  if (rc)
    return chimepy_raise(rc, "release");
  Py_RETURN_NONE;
}

static PyObject *batch_keys(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_batch_t *bt = (chimepy_batch_t *)o;
  PyObject *l = PyList_New(bt->b.nleaves);
  for (uint32_t i = 0; l && i < bt->b.nleaves; i++) {
    PyObject *s = PyUnicode_FromString(bt->b.leaf[i].name);
    if (!s) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, i, s);
  }
  return l;
}

static PyObject *batch_enter(PyObject *o, PyObject *unused) {
  (void)unused;
  Py_INCREF(o);
  return o;
}

static PyObject *batch_exit(PyObject *o, PyObject *args) {
  (void)args;
  return batch_release(o, NULL);
}

static PyObject *batch_get_info(PyObject *o, void *unused) {
  (void)unused;
  return batch_array((chimepy_batch_t *)o, -1);
}

static PyObject *batch_get_seq(PyObject *o, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(((chimepy_batch_t *)o)->b.seq);
}

static PyObject *batch_get_count(PyObject *o, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLong(((chimepy_batch_t *)o)->b.count);
}

static PyObject *batch_get_released(PyObject *o, void *unused) {
  (void)unused;
  return PyBool_FromLong(!((chimepy_batch_t *)o)->leased);
}

static PyMethodDef batch_methods[] = {
    {"release", batch_release, METH_NOARGS,
     "Gives the slot back to the server now, or, while arrays or "
     "memoryviews of this batch are alive, as soon as the last one is "
     "gone. No new view can be taken after it."},
    {"keys", batch_keys, METH_NOARGS, "leaf names in spec order"},
    {"view", batch_view, METH_O,
     "view(leaf) -> View: the exporter behind batch[leaf] (buffer protocol, "
     "__dlpack__ for torch.from_dlpack); holds the batch like an array."},
    {"offsets", batch_offsets, METH_O,
     "offsets(leaf) -> int64 array [count + 1] of a ragged leaf: sample j's "
     "rows of batch[leaf] are offsets[j]:offsets[j + 1] (in the ring)."},
    {"groups", batch_groups, METH_NOARGS,
     "groups() -> int64 array [count + 1] of a group table's batch: group g "
     "is samples groups[g]:groups[g + 1] (each leaf has a row per sample; "
     "in the ring)."},
    {"samples", chimepy_batch_samples, METH_O,
     "samples(leaf) -> list of count views, sample j's rows of a ragged "
     "leaf (zero copy)."},
    {"padded", (PyCFunction)(void (*)(void))chimepy_batch_padded,
     METH_VARARGS | METH_KEYWORDS,
     "padded(leaf, value=0, length=None) -> a new array [count, length, "
     "*rest] of a ragged leaf, each sample's rows then value (a copy; length "
     "None: the longest sample's)."},
    {"nested", chimepy_batch_nested, METH_O,
     "nested(leaf) -> torch nested tensor of a ragged leaf's count samples, "
     "sample j's rows [n_j, *rest] (needs torch; a copy: torch 1.13's "
     "nested tensors own their storage, so no zero copy; samples(leaf) and "
     "torch.from_dlpack give views of the ring)."},
    {"__enter__", batch_enter, METH_NOARGS, NULL},
    {"__exit__", batch_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef batch_getset[] = {
    {"info", batch_get_info, NULL,
     "numpy structured array [count] of (key u64, probability f64, "
     "times_sampled u32, reserved u32, insert_time_ns u64, priority f64, "
     "table_size u64, episode_id u64, first_step u32, length u32, version "
     "u64, staleness u64), in the ring",
     NULL},
    {"seq", batch_get_seq, NULL, "batch sequence number", NULL},
    {"count", batch_get_count, NULL, "samples in the batch", NULL},
    {"released", batch_get_released, NULL,
     "True once the slot went back to the server", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject chimepy_batch_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chime.Batch",
    .tp_basicsize = sizeof(chimepy_batch_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One leased batch. batch['leaf'] is a read-only numpy array "
              "[count, *shape] pointing into the ring (zero copy); a ragged "
              "leaf's is its values [total, *rest], with offsets(leaf).",
    .tp_dealloc = batch_dealloc,
    .tp_as_mapping = &batch_mapping,
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
};
