/* Client.export(table, fn): chime_client_export with a Python callback per
 * chunk (docs/python.md, docs/datasets.md). The export runs without the
 * GIL; each chunk takes it back for fn, which gets the chunk's bytes
 * (copied: they are valid during the C callback only). */
#include "chimepy.h"

typedef struct {
  PyObject *fn;
  PyThreadState *ts; /* saved while the GIL is let go */
  int raised;        /* fn raised: its exception stays set */
} export_ctx_t;

static PyObject *chunk_dict(const chime_export_chunk_t *ch) {
  uint64_t sb = chime_spec_sample_bytes(ch->spec);
  return Py_BuildValue(
      "{s:I,s:K,s:I,s:y#,s:y#,s:y#}", "shard", (unsigned)ch->shard, "total",
      (unsigned long long)ch->total, "count", (unsigned)ch->count, "data",
      (const char *)ch->data, (Py_ssize_t)(ch->count * sb), "keys",
      (const char *)ch->keys, (Py_ssize_t)ch->count * 8, "priorities",
      (const char *)ch->priorities, (Py_ssize_t)ch->count * 8);
}

static int export_cb(void *arg, const chime_export_chunk_t *ch) {
  export_ctx_t *x = arg;
  PyEval_RestoreThread(x->ts);
  PyObject *d = chunk_dict(ch);
  PyObject *r = d != NULL ? PyObject_CallOneArg(x->fn, d) : NULL;
  Py_XDECREF(d);
  int rc = 0;
  if (r == NULL) {
    x->raised = 1;
    rc = CHIME_ECLOSED; /* stops the export; fn's exception is raised */
  }
  Py_XDECREF(r);
  x->ts = PyEval_SaveThread();
  return rc;
}

PyObject *chimepy_client_export(PyObject *o, PyObject *args) {
  chimepy_client_t *self = (chimepy_client_t *)o;
  const char *table;
  PyObject *fn;
  if (!PyArg_ParseTuple(args, "sO:export", &table, &fn))
    return NULL;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "export: fn must be callable");
    return NULL;
  }
  if (chimepy_client_call_begin(self))
    return NULL;
  export_ctx_t x = {.fn = fn};
  char detail[1024] = "";
  x.ts = PyEval_SaveThread();
  int rc = chime_client_export(self->c, table, export_cb, &x);
  if (rc && !x.raised)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  PyEval_RestoreThread(x.ts);
  chimepy_client_call_end(self);
  if (x.raised)
    return NULL;
  if (rc)
    return chimepy_raise(rc, detail);
  Py_RETURN_NONE;
}
