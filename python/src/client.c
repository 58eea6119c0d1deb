/* chime.Client: connection, info()/stats() as dicts (the shape of
 * `chimectl --json`), and the factories of writers and streams. */
#include "chimepy.h"

#include <inttypes.h>
#include <string.h>

static void client_destroy(chimepy_client_t *self) {
  chime_client_t *c = self->c;
  self->c = NULL;
  if (!c)
    return;
  Py_BEGIN_ALLOW_THREADS chime_client_destroy(c);
  Py_END_ALLOW_THREADS
}

/* A close() asked for happens once no writer, stream or call is left. */
static void client_finish_close(chimepy_client_t *client) {
  if (client->closing && client->children == 0 && client->calls == 0)
    client_destroy(client);
}

void chimepy_client_child_closed(chimepy_client_t *client) {
  client->children--;
  client_finish_close(client);
}

int chimepy_client_check(chimepy_client_t *client) {
  if (client->c && !client->closing)
    return 0;
  chimepy_raise(CHIME_ECLOSED, client->closing
                                   ? "client is closed"
                                   : "client is not initialised (Client())");
  return -1;
}

int chimepy_client_call_begin(chimepy_client_t *client) {
  if (chimepy_client_check(client))
    return -1;
  client->calls++;
  return 0;
}

void chimepy_client_call_end(chimepy_client_t *client) {
  client->calls--;
  client_finish_close(client);
}

int chimepy_client_open_end(chimepy_client_t *client, int rc,
                            const char *detail) {
  if (rc == 0) {
    Py_INCREF(client);
    client->children++; /* before the call ends: a close() meanwhile waits */
  }
  chimepy_client_call_end(client);
  if (rc) {
    chimepy_raise(rc, detail);
    return -1;
  }
  return 0;
}

static int client_init(PyObject *o, PyObject *args, PyObject *kw) {
  chimepy_client_t *self = (chimepy_client_t *)o;
  static char *kwlist[] = {"address",  "timeout", "token",           "tls_ca",
                           "tls_cert", "tls_key", "tls_server_name", NULL};
  const char *addr;
  chime_client_opts_t opts = CHIME_CLIENT_OPTS_INIT;
  double timeout = opts.timeout_ms / 1000.0;
  const char *token = NULL, *tls_ca = NULL, *tls_cert = NULL, *tls_key = NULL,
             *tls_name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|d$zzzzz:Client", kwlist, &addr,
                                   &timeout, &token, &tls_ca, &tls_cert,
                                   &tls_key, &tls_name))
    return -1;
  if (self->c) {
    PyErr_SetString(PyExc_RuntimeError, "Client already initialised");
    return -1;
  }
  if (!(timeout > 0 && timeout < 2e6)) {
    chimepy_raise(CHIME_EINVAL, "timeout must be positive seconds");
    return -1;
  }
  opts.timeout_ms = (int)(timeout * 1000);
  opts.token = token;
  opts.tls_ca = tls_ca;
  opts.tls_cert = tls_cert;
  opts.tls_key = tls_key;
  opts.tls_server_name = tls_name;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = chime_client_create(&self->c, addr, &opts);
  Py_END_ALLOW_THREADS if (rc) {
    self->c = NULL;
    /* libchime's detail names what it refused (an address, a token, a TLS
     * file or option, a child of fork() that cannot use gRPC). */
    char what[1024];
    snprintf(what, sizeof(what), "%s: %s", addr, chime_last_error());
    chimepy_raise(rc, what);
    return -1;
  }
  return 0;
}

static void client_dealloc(PyObject *o) {
  /* Writers and streams hold a reference, and so does every call running
   * on it (its caller's): none is left here. */
  client_destroy((chimepy_client_t *)o);
  Py_TYPE(o)->tp_free(o);
}

static PyObject *client_close(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_client_t *self = (chimepy_client_t *)o;
  self->closing = 1;
  client_finish_close(self);
  Py_RETURN_NONE;
}

static PyObject *client_enter(PyObject *o, PyObject *unused) {
  (void)unused;
  Py_INCREF(o);
  return o;
}

static PyObject *client_exit(PyObject *o, PyObject *args) {
  (void)args;
  return client_close(o, NULL);
}

/* ---------------------------------------------------------- dict builders */

static int set_item(PyObject *d, const char *k, PyObject *v) {
  if (!v)
    return -1;
  int rc = PyDict_SetItemString(d, k, v);
  Py_DECREF(v);
  return rc;
}

/* A new dict appended to list: borrowed (the list holds it), or NULL. */
static PyObject *append_dict(PyObject *list) {
  PyObject *d = PyDict_New();
  if (d == NULL || PyList_Append(list, d) < 0) {
    Py_XDECREF(d);
    return NULL;
  }
  Py_DECREF(d);
  return d;
}

#define U64(x) PyLong_FromUnsignedLongLong((unsigned long long)(x))

/* d["leaves"]: each compressed leaf's bytes, {"obs": {"raw_bytes", ...}}
 * (info() and stats()). */
static int leaves_item(PyObject *d, const chime_leaf_bytes_t *lb, uint32_t n) {
  PyObject *leaves = PyDict_New();
  if (leaves == NULL)
    return -1;
  for (uint32_t k = 0; k < n; k++) {
    const chime_leaf_bytes_t *b = &lb[k];
    PyObject *ld = PyDict_New();
    if (ld == NULL || PyDict_SetItemString(leaves, b->leaf, ld) < 0 ||
        set_item(ld, "level", U64(b->level)) ||
        set_item(ld, "raw_bytes", U64(b->raw_bytes)) ||
        set_item(ld, "stored_bytes", U64(b->stored_bytes)) ||
        set_item(ld, "stored_raw", U64(b->stored_raw))) {
      Py_XDECREF(ld);
      Py_DECREF(leaves);
      return -1;
    }
    Py_DECREF(ld);
  }
  return set_item(d, "leaves", leaves);
}

static PyObject *spec_text(const chime_spec_t *spec) {
  char buf[8192];
  if (chime_spec_format(spec, buf, sizeof(buf)) != 0)
    snprintf(buf, sizeof(buf), "?");
  return PyUnicode_FromString(buf);
}

static PyObject *info_dict(const chime_server_info_t *in) {
  PyObject *d = PyDict_New(), *tables = PyList_New(0), *rings = PyList_New(0);
  if (!d || !tables || !rings)
    goto fail;
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    PyObject *td = append_dict(tables);
    if (!td)
      goto fail;
    if (set_item(td, "name", PyUnicode_FromString(t->name)) ||
        set_item(td, "spec", spec_text(&t->spec)) ||
        set_item(td, "capacity", U64(t->capacity)) ||
        set_item(td, "size", U64(t->size)) ||
        set_item(td, "mass", PyFloat_FromDouble(t->mass)) ||
        set_item(td, "min_size", U64(t->min_size)) ||
        set_item(td, "sample_bytes", U64(t->sample_bytes)) ||
        set_item(td, "sampler", PyUnicode_FromString(t->sampler)) ||
        set_item(td, "remover", PyUnicode_FromString(t->remover)) ||
        set_item(td, "priority_exponent",
                 PyFloat_FromDouble(t->priority_exponent)) ||
        set_item(td, "max_times_sampled", U64(t->max_times_sampled)) ||
        set_item(td, "max_staleness", U64(t->max_staleness)) ||
        set_item(td, "newest_version", U64(t->newest_version)) ||
        set_item(td, "staleness_weight",
                 PyUnicode_FromString(t->staleness_weight)) ||
        set_item(td, "compress", PyUnicode_FromString(t->compress)) ||
        set_item(td, "data_dir", PyUnicode_FromString(t->data_dir)) ||
        set_item(td, "disk_bytes", U64(t->disk_bytes)) ||
        set_item(td, "pace_batch", U64(t->pace_batch)) ||
        set_item(td, "version_leaf", PyUnicode_FromString(t->version_leaf)) ||
        leaves_item(td, t->leaf_bytes, t->nleaf_bytes) ||
        set_item(td, "samples_per_insert",
                 PyFloat_FromDouble(t->samples_per_insert)) ||
        set_item(td, "error_buffer", PyFloat_FromDouble(t->error_buffer)))
      goto fail;
    if (t->sequence_length > 0) { /* docs/sequences.md */
      PyObject *sq = PyDict_New();
      if (set_item(td, "sequence", sq) ||
          set_item(sq, "step_spec", spec_text(&t->step_spec)) ||
          set_item(sq, "step_bytes", U64(t->step_bytes)) ||
          set_item(sq, "capacity_steps", U64(t->capacity_steps)) ||
          set_item(sq, "sequence_length", U64(t->sequence_length)) ||
          set_item(sq, "stride", U64(t->stride)) ||
          set_item(sq, "episode_end", PyUnicode_FromString(t->episode_end)) ||
          set_item(sq, "initial_priority",
                   t->initial_priority_max
                       ? PyUnicode_FromString("max")
                       : PyFloat_FromDouble(t->initial_priority)))
        goto fail;
    }
  }
  for (uint32_t i = 0; i < in->nrings; i++) {
    const chime_ring_info_t *r = &in->rings[i];
    PyObject *rd = append_dict(rings);
    if (!rd)
      goto fail;
    if (set_item(rd, "stream_id", U64(r->stream_id)) ||
        set_item(rd, "table", PyUnicode_FromString(r->table)) ||
        set_item(rd, "bytes", U64(r->bytes)) ||
        set_item(rd, "pinned_bytes", U64(r->pinned_bytes)))
      goto fail;
  }
  if (set_item(d, "version", PyUnicode_FromString(in->version)) ||
      set_item(d, "boot_id", PyUnicode_FromString(in->boot_id)) ||
      set_item(d, "hostname", PyUnicode_FromString(in->hostname)) ||
      set_item(d, "shard", U64(in->shard)) ||
      set_item(d, "instance", U64(in->instance)) ||
      set_item(d, "pin_host_memory", PyBool_FromLong(in->pin_host_memory)) ||
      set_item(d, "pinned_bytes", U64(in->pinned_bytes)))
    goto fail;
  Py_INCREF(tables);
  Py_INCREF(rings);
  if (set_item(d, "tables", tables) || set_item(d, "rings", rings))
    goto fail;
  Py_DECREF(tables);
  Py_DECREF(rings);
  return d;
fail:
  Py_XDECREF(d);
  Py_XDECREF(tables);
  Py_XDECREF(rings);
  return NULL;
}

/* The stats lists (chime/stats.h) as dict items, keyed by field
 * name: a FLAG is a bool, every other field an int. */
#define STAT_PY_COUNT(v) U64(v)
#define STAT_PY_NS(v) U64(v)
#define STAT_PY_BYTES(v) U64(v)
#define STAT_PY_FLAG(v) PyBool_FromLong(v)
#define SET_STAT(type, name, kind, unit, help)                                 \
  if (set_item(d, #name, STAT_PY_##unit(s->name)) < 0)                         \
    return -1;

static int table_stats_items(PyObject *d, const chime_table_stats_t *s) {
  CHIME_TABLE_STATS_FIELDS(SET_STAT)
  return leaves_item(d, s->leaf_bytes, s->nleaf_bytes);
}

static int stream_stats_items(PyObject *d, const chime_stream_stats_t *s) {
  CHIME_STREAM_STATS_FIELDS(SET_STAT)
  return 0;
}

static int server_stats_items(PyObject *d, const chime_stats_t *s) {
  CHIME_SERVER_STATS_FIELDS(SET_STAT)
  return 0;
}

static PyObject *stats_dict(const chime_stats_t *st) {
  PyObject *d = PyDict_New(), *tables = PyList_New(0), *streams = PyList_New(0);
  if (!d || !tables || !streams)
    goto fail;
  for (uint32_t i = 0; i < st->ntables; i++) {
    const chime_table_stats_t *t = &st->tables[i];
    PyObject *td = append_dict(tables);
    if (!td)
      goto fail;
    if (set_item(td, "name", PyUnicode_FromString(t->name)) ||
        table_stats_items(td, t) ||
        set_item(td, "reuse",
                 PyFloat_FromDouble(t->left ? (double)t->left_times_sampled /
                                                  (double)t->left
                                            : 0.0)))
      goto fail;
  }
  for (uint32_t i = 0; i < st->nstreams; i++) {
    const chime_stream_stats_t *s = &st->streams[i];
    PyObject *sd = append_dict(streams);
    if (!sd)
      goto fail;
    if (set_item(sd, "stream_id", U64(s->stream_id)) ||
        set_item(sd, "table", PyUnicode_FromString(s->table)) ||
        set_item(
            sd, "mode",
            PyUnicode_FromString(chime_mode_name((chime_mode_t)s->mode))) ||
        stream_stats_items(sd, s))
      goto fail;
  }
  Py_INCREF(tables);
  Py_INCREF(streams);
  if (set_item(d, "tables", tables) || set_item(d, "streams", streams) ||
      server_stats_items(d, st))
    goto fail;
  Py_DECREF(tables);
  Py_DECREF(streams);
  return d;
fail:
  Py_XDECREF(d);
  Py_XDECREF(tables);
  Py_XDECREF(streams);
  return NULL;
}

static PyObject *client_info(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_client_t *self = (chimepy_client_t *)o;
  if (chimepy_client_call_begin(self))
    return NULL;
  chime_server_info_t *info = NULL;
  int rc;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_client_info(self->c, &info);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS chimepy_client_call_end(self);
  if (rc)
    return chimepy_raise(rc, detail);
  PyObject *d = info_dict(info);
  chime_server_info_free(info);
  return d;
}

/* {"chime/<table>/<field>": number, "chime/<field>": number} for loggers
 * (wandb, TensorBoard): every number of the tables and the totals. */
static PyObject *flatten(PyObject *d) {
  PyObject *flat = PyDict_New();
  PyObject *tables = PyDict_GetItemString(d, "tables");
  if (flat == NULL || tables == NULL)
    goto fail;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tables); i++) {
    PyObject *td = PyList_GET_ITEM(tables, i);
    PyObject *name = PyDict_GetItemString(td, "name");
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(td, &pos, &k, &v)) {
      if (!PyLong_Check(v) && !PyFloat_Check(v))
        continue;
      PyObject *key = PyUnicode_FromFormat("chime/%U/%U", name, k);
      if (key == NULL || PyDict_SetItem(flat, key, v) < 0) {
        Py_XDECREF(key);
        goto fail;
      }
      Py_DECREF(key);
    }
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(d, &pos, &k, &v)) {
    if (!PyLong_Check(v) && !PyFloat_Check(v))
      continue;
    PyObject *key = PyUnicode_FromFormat("chime/%U", k);
    if (key == NULL || PyDict_SetItem(flat, key, v) < 0) {
      Py_XDECREF(key);
      goto fail;
    }
    Py_DECREF(key);
  }
  PyObject *streams = PyDict_GetItemString(d, "streams");
  PyObject *n = PyLong_FromSsize_t(streams ? PyList_GET_SIZE(streams) : 0);
  if (n == NULL || PyDict_SetItemString(flat, "chime/streams", n) < 0) {
    Py_XDECREF(n);
    goto fail;
  }
  Py_DECREF(n);
  return flat;
fail:
  Py_XDECREF(flat);
  return NULL;
}

static PyObject *client_stats(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"flat", NULL};
  int flat = 0;
  chimepy_client_t *self = (chimepy_client_t *)o;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &flat) ||
      chimepy_client_call_begin(self))
    return NULL;
  chime_stats_t *st = NULL;
  int rc;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_client_stats(self->c, &st);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS chimepy_client_call_end(self);
  if (rc)
    return chimepy_raise(rc, detail);
  PyObject *d = stats_dict(st);
  chime_stats_free(st);
  if (d == NULL || !flat)
    return d;
  PyObject *f = flatten(d);
  Py_DECREF(d);
  return f;
}

/* writer(table, **opts) and stream(table, **opts) call the types. */
static PyObject *make_child(PyObject *type, PyObject *self, PyObject *args,
                            PyObject *kw) {
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject *full = PyTuple_New(n + 1);
  if (!full)
    return NULL;
  Py_INCREF(self);
  PyTuple_SET_ITEM(full, 0, self);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *a = PyTuple_GET_ITEM(args, i);
    Py_INCREF(a);
    PyTuple_SET_ITEM(full, i + 1, a);
  }
  PyObject *r = PyObject_Call(type, full, kw);
  Py_DECREF(full);
  return r;
}

/* A 1-d contiguous array of dtype from any sequence (NULL/None: empty). */
static PyArrayObject *as_1d(PyObject *o, int type, const char *what) {
  if (o == NULL || o == Py_None)
    return (PyArrayObject *)PyArray_ZEROS(1, (npy_intp[]){0}, type, 0);
  PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(
      o, type, 1, 1, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (a == NULL)
    PyErr_Format(PyExc_TypeError, "%s: expected a 1-d sequence of numbers",
                 what);
  return a;
}

/* Keys (as u64) from any 1-d sequence or array of integers, signed ones
 * too (a numpy int64 array, a torch tensor): a negative key is no key and
 * is refused by name (InvalidArgumentError), not wrapped round. */
static PyArrayObject *as_keys(PyObject *o, const char *what) {
  if (o == NULL || o == Py_None)
    return as_1d(NULL, NPY_UINT64, what);
  PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(o, NPY_NOTYPE, 1, 1, 0);
  if (a == NULL || (PyArray_SIZE(a) > 0 && !PyArray_ISINTEGER(a))) {
    Py_XDECREF(a);
    PyErr_Format(PyExc_TypeError, "%s: expected a 1-d sequence of integers",
                 what);
    return NULL;
  }
  if (PyArray_ISSIGNED(a)) {
    PyArrayObject *s = (PyArrayObject *)PyArray_FROM_OTF(
        (PyObject *)a, NPY_INT64, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    Py_DECREF(a);
    if (s == NULL)
      return NULL;
    const int64_t *k = PyArray_DATA(s);
    for (npy_intp i = 0; i < PyArray_SIZE(s); i++)
      if (k[i] < 0) {
        Py_DECREF(s);
        char detail[128];
        snprintf(detail, sizeof(detail), "%s: key %" PRId64 " is negative",
                 what, k[i]);
        chimepy_raise(CHIME_EINVAL, detail);
        return NULL;
      }
    a = s;
  }
  PyArrayObject *u = (PyArrayObject *)PyArray_FROM_OTF(
      (PyObject *)a, NPY_UINT64,
      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
  Py_DECREF(a);
  return u;
}

static PyObject *client_mutate(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"table", "keys", "priorities", "deletes", NULL};
  chimepy_client_t *self = (chimepy_client_t *)o;
  const char *table;
  PyObject *ko = NULL, *po = NULL, *dobj = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|OOO", kwlist, &table, &ko, &po,
                                   &dobj))
    return NULL;
  PyArrayObject *keys = as_keys(ko, "keys");
  PyArrayObject *prios = keys ? as_1d(po, NPY_FLOAT64, "priorities") : NULL;
  PyArrayObject *dels = prios ? as_keys(dobj, "deletes") : NULL;
  PyObject *ret = NULL;
  if (dels == NULL)
    goto out;
  if (PyArray_SIZE(keys) != PyArray_SIZE(prios)) {
    chimepy_raise(CHIME_EINVAL, "mutate_priorities: keys and priorities "
                                "differ in length");
    goto out;
  }
  if (chimepy_client_call_begin(self))
    goto out;
  chime_mutate_result_t r;
  int rc;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_client_mutate_priorities(
      self->c, table, (const uint64_t *)PyArray_DATA(keys),
      (const double *)PyArray_DATA(prios), (size_t)PyArray_SIZE(keys),
      (const uint64_t *)PyArray_DATA(dels), (size_t)PyArray_SIZE(dels), &r);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS chimepy_client_call_end(self);
  if (rc) {
    chimepy_raise(rc, detail);
    goto out;
  }
  ret = Py_BuildValue("{s:I,s:I,s:I}", "updated", r.updated, "deleted",
                      r.deleted, "unknown", r.unknown);
out:
  Py_XDECREF(keys);
  Py_XDECREF(prios);
  Py_XDECREF(dels);
  return ret;
}

static PyObject *client_set_version(PyObject *o, PyObject *args) {
  chimepy_client_t *self = (chimepy_client_t *)o;
  const char *table;
  PyObject *vo;
  uint64_t v;
  if (!PyArg_ParseTuple(args, "sO:set_version", &table, &vo) ||
      chimepy_uint_arg(vo, "version", 0, UINT64_MAX, &v) ||
      chimepy_client_call_begin(self))
    return NULL;
  int rc;
  uint64_t n = 0;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_client_set_version(self->c, table, v, &n);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS chimepy_client_call_end(self);
  if (rc)
    return chimepy_raise(rc, detail);
  return PyLong_FromUnsignedLongLong(n);
}

static PyObject *client_writer(PyObject *o, PyObject *args, PyObject *kw) {
  return make_child((PyObject *)&chimepy_writer_type, o, args, kw);
}

static PyObject *client_stream(PyObject *o, PyObject *args, PyObject *kw) {
  return make_child((PyObject *)&chimepy_stream_type, o, args, kw);
}

static PyObject *client_checkpoint(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_client_t *self = (chimepy_client_t *)o;
  if (chimepy_client_call_begin(self))
    return NULL;
  chime_checkpoint_result_t r;
  int rc;
  char detail[1024];
  Py_BEGIN_ALLOW_THREADS rc = chime_client_checkpoint(self->c, &r);
  if (rc)
    snprintf(detail, sizeof(detail), "%s", chime_last_error());
  Py_END_ALLOW_THREADS chimepy_client_call_end(self);
  if (rc)
    return chimepy_raise(rc, detail);
  return Py_BuildValue("{s:s,s:I,s:K,s:K,s:K,s:K}", "path", r.path, "tables",
                       (unsigned)r.tables, "items", (unsigned long long)r.items,
                       "bytes", (unsigned long long)r.bytes, "pause_ns",
                       (unsigned long long)r.pause_ns, "duration_ns",
                       (unsigned long long)r.duration_ns);
}

static PyObject *none(void) {
  Py_INCREF(Py_None);
  return Py_None;
}

/* [{"address", "shard", "instance", "error"}] per shard the client
 * follows (one for a one-server target): shard and instance from that
 * server's own GetInfo, None with error saying why when it did not
 * answer, so one shard down does not hide the others. */
static PyObject *client_shards(PyObject *o, PyObject *unused) {
  (void)unused;
  chimepy_client_t *self = (chimepy_client_t *)o;
  if (chimepy_client_call_begin(self))
    return NULL;
  PyObject *list = PyList_New(0);
  uint32_t n = chime_client_nshards(self->c);
  for (uint32_t i = 0; list != NULL && i < n; i++) {
    /* Both belong to the parent client (shards are only ever added):
     * never destroyed or freed here. */
    chime_client_t *shard = chime_client_shard(self->c, i);
    const char *addr = chime_client_shard_address(self->c, i);
    chime_server_info_t *info = NULL;
    PyObject *d;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = chime_client_info(shard, &info);
    Py_END_ALLOW_THREADS d = append_dict(list);
    if (d == NULL || set_item(d, "address", PyUnicode_FromString(addr)) ||
        set_item(d, "shard",
                 rc ? none() : PyLong_FromUnsignedLong(info->shard)) ||
        set_item(d, "instance", rc ? none() : U64(info->instance)) ||
        set_item(d, "error",
                 rc ? PyUnicode_FromString(chime_last_error()) : none())) {
      Py_CLEAR(list);
    }
    chime_server_info_free(info);
  }
  chimepy_client_call_end(self);
  return list;
}

/* The signatures' defaults are the C library's (CHIME_*_OPTS_INIT), written
 * into the docstrings at import. */
static char client_doc[512], writer_doc[640], stream_doc[1280];

/* Seconds as Python writes a float: 5.0, 2.5. */
static const char *secs(char *buf, size_t len, int ms) {
  snprintf(buf, len, "%.15g", ms / 1000.0);
  if (strpbrk(buf, ".e") == NULL)
    snprintf(buf + strlen(buf), len - strlen(buf), ".0");
  return buf;
}

void chimepy_client_docs_init(void) {
  const chime_client_opts_t co = CHIME_CLIENT_OPTS_INIT;
  const chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  const chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  char a[32], b[32];
  snprintf(client_doc, sizeof(client_doc),
           "Client(address, timeout=%s): a connection to chimed at "
           "\"host:port\" or \"unix:/path\", or to its shards (a comma "
           "list, ipv4:/ipv6: lists, \"dns:///name:port\"; shards() lists "
           "them) (made lazily: an unreachable server shows at the first "
           "call). timeout bounds unary calls.",
           secs(a, sizeof(a), co.timeout_ms));
  snprintf(writer_doc, sizeof(writer_doc),
           "writer(table, max_inflight=%u, timeout=%s, version=0, "
           "compress=True, *, warm_start=False, max_batch_samples=%u, "
           "reconnect_timeout=%s) -> Writer. compress: the writer compresses "
           "the table's compressed leaves; warm_start: its samples pass the "
           "table's rate limiter (an import, docs/datasets.md); "
           "max_batch_samples: samples per message (at most 1 MiB of them); "
           "reconnect_timeout: seconds a lost connection may stay lost",
           (unsigned)wo.max_inflight, secs(a, sizeof(a), wo.timeout_ms),
           (unsigned)wo.max_batch_samples,
           secs(b, sizeof(b), wo.reconnect_timeout_ms));
  snprintf(
      stream_doc, sizeof(stream_doc),
      "stream(table, batch_size=%u, mode='%s', slots=%u, prefetch=%u, "
      "open_timeout=%s, pin_host_memory=%s, timeout=None, "
      "device=None, version=0, ready_bytes=0, keep_compressed=None, "
      "max_inflight_bytes=0, reconnect_timeout=10.0, connections=1) -> "
      "Stream. keep_compressed (a leaf name or a list): compressed leaves "
      "taken as stored, a ragged u8 leaf (offsets and each sample's zstd "
      "frame, or its raw bytes when as long as the leaf). device "
      "('cuda:0', an ordinal): batches are copied to that GPU ahead of "
      "the learner, and prefetch is how many (0: %u); leaves export "
      "DLPack as CUDA. ready_bytes (shm): the server samples at most "
      "max(2, ready_bytes / batch bytes) batches ahead (0: no limit). "
      "max_inflight_bytes (stream mode): the most bytes of batches kept in "
      "flight, the ring grown past slots to cover the measured round trip "
      "(0: 64 MiB; docs/remote.md). reconnect_timeout (stream mode): a lost "
      "connection is resumed for this long (< 0: never). connections "
      "(stream mode): TCP connections the batches travel over, each batch "
      "whole on one, handed on in order (1 to 16; docs/remote.md).",
      (unsigned)so.batch_size, chime_mode_name(so.mode), (unsigned)so.slots,
      (unsigned)so.prefetch, secs(b, sizeof(b), so.open_timeout_ms),
      so.pin_host_memory ? "True" : "False", (unsigned)CHIME_DEVICE_PREFETCH);
}

static PyMethodDef client_methods[] = {
    {"info", client_info, METH_NOARGS,
     "info() -> dict: GetInfo (version, host, tables with spec, rings), as "
     "`chimectl --json info`."},
    {"stats", (PyCFunction)(void (*)(void))client_stats,
     METH_VARARGS | METH_KEYWORDS,
     "stats(flat=False) -> dict: the server's counters, as `chimectl --json "
     "stats` (per table also `reuse`: how many times items that left were "
     "sampled, on average); flat=True gives {'chime/<table>/<field>': "
     "number, 'chime/<field>': number} for loggers."},
    {"mutate_priorities", (PyCFunction)(void (*)(void))client_mutate,
     METH_VARARGS | METH_KEYWORDS,
     "mutate_priorities(table, keys=(), priorities=(), deletes=()) -> dict: "
     "new priorities by key, then deletes (MutatePriorities); returns "
     "{'updated', 'deleted', 'unknown'}. A NaN, infinite or negative "
     "priority raises InvalidArgumentError and changes nothing."},
    {"shards", client_shards, METH_NOARGS,
     "shards() -> list: per shard of the target (one for a single address) "
     "{'address' (as the client uses it), 'shard' and 'instance' (from the "
     "server's GetInfo; one instance at two addresses is one server; None "
     "when it did not answer), 'error' (why not; else None)}."},
    {"set_version", client_set_version, METH_VARARGS,
     "set_version(table, version) -> the table's newest version: a policy "
     "version from a process with no stream on it (the trainer); with "
     "max_staleness, items more than that behind leave"},
    {"export", chimepy_client_export, METH_VARARGS,
     "export(table, fn): the table's items as they were at one instant "
     "(a snapshot; inserts and samples go on), oldest first: fn(chunk) per "
     "chunk, chunk a dict {'shard', 'total', 'count', 'data' (count "
     "samples' bytes, leaves in spec order), 'keys' (u64), 'priorities' "
     "(f64)}; the first call per shard has count 0. Sharded: each shard's "
     "snapshot in turn. An exception in fn stops it and propagates. "
     "chime.dataset.export_table wraps it."},
    {"checkpoint", client_checkpoint, METH_NOARGS,
     "checkpoint() -> dict: the server writes every table to its "
     "configured checkpoint dir and answers once it is complete; returns "
     "{'path' (on the server's host), 'tables', 'items', 'bytes', "
     "'pause_ns', 'duration_ns'}. InvalidArgumentError when the server has "
     "no checkpoint dir; bounded by the client's timeout (the checkpoint "
     "still completes on the server)."},
    {"writer", (PyCFunction)(void (*)(void))client_writer,
     METH_VARARGS | METH_KEYWORDS, writer_doc},
    {"stream", (PyCFunction)(void (*)(void))client_stream,
     METH_VARARGS | METH_KEYWORDS, stream_doc},
    {"close", client_close, METH_NOARGS,
     "Closes the connection once every writer and stream of it is closed."},
    {"__enter__", client_enter, METH_NOARGS, NULL},
    {"__exit__", client_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject chimepy_client_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chime.Client",
    .tp_basicsize = sizeof(chimepy_client_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = client_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = client_init,
    .tp_dealloc = client_dealloc,
    .tp_methods = client_methods,
};
