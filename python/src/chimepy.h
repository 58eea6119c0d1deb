/* What the files of the `chime` extension share: the object types, the
 * exception classes and the dtype mapping. The module is a thin layer over
 * libchime's public API (include/chime/chime.h); everything about memory
 * safety of zero-copy views lives in batch.h and
 * batch.c (view.c exports them). */
#ifndef CHIMEPY_H
#define CHIMEPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL chimepy_ARRAY_API
#ifndef CHIMEPY_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "chime/chime.h"
#include "dlpack.h"

/* A client: the C client plus a count of writers and streams still open on
 * it and of calls other threads run on it with the GIL released. close()
 * with either open is deferred until the last one ends, because
 * chime_client_destroy() must come after them (a call still running would
 * write into the freed client). */
typedef struct {
  PyObject_HEAD chime_client_t *c;
  unsigned children;
  unsigned calls;
  int closing;
} chimepy_client_t;

extern PyTypeObject chimepy_client_type;
extern PyTypeObject chimepy_writer_type;
extern PyTypeObject chimepy_stream_type;
extern PyTypeObject chimepy_batch_type;
extern PyTypeObject chimepy_view_type;
extern PyTypeObject chimepy_array_type;

/* A chime.View (view.c) over `data`: what batch.c fills in after
 * chimepy_view_new. */
typedef struct {
  PyObject_HEAD PyObject *owner; /* held; told by gone() when the View goes */
  void (*gone)(PyObject *owner);
  int leaf; /* -1: the sample info records */
  const void *data;
  int ndim;
  Py_ssize_t shape[CHIME_MAX_DIMS + 1];
  Py_ssize_t strides[CHIME_MAX_DIMS + 1];
  Py_ssize_t itemsize, len;
  const char *format;
  chime_dtype_t dtype; /* CHIME_DTYPE_INVALID for the info records */
  /* -1: host memory; else the CUDA ordinal `data` is on (a device
   * stream's leaf: no buffer protocol, DLPack with device type CUDA, and
   * the consumer's stream made to wait by order(owner, cuda_stream), 0 or
   * -1 with an exception set). */
  int device;
  int (*order)(PyObject *owner, void *cuda_stream);
} chimepy_view_t;

/* A new View holding `owner`; gone(owner) runs when it is freed (before
 * the reference is dropped). NULL with an exception set. */
chimepy_view_t *chimepy_view_new(PyObject *owner, void (*gone)(PyObject *));

/* Readies chime.Array (an ndarray subclass: its base is numpy's type).
 * `is_bf16` tells an Array's base view over a bf16 leaf (DLPack exports
 * those as bfloat16): the views live above arrays, so it is handed in. */
int chimepy_array_type_init(int (*is_bf16)(PyObject *base));
/* 1 if `o` is a chime.View over a bf16 leaf. */
int chimepy_view_is_bf16(PyObject *o);

/* A batch's ragged leaf (ragged.c, over the batch's own calls): the list
 * of its samples' views, a padded copy, and a torch nested tensor (a copy;
 * torch imported on the call). */
PyObject *chimepy_batch_samples(PyObject *batch, PyObject *leaf);
PyObject *chimepy_batch_padded(PyObject *batch, PyObject *args, PyObject *kw);
PyObject *chimepy_batch_nested(PyObject *batch, PyObject *leaf);

/* Called when a writer or stream of the client has closed. */
void chimepy_client_child_closed(chimepy_client_t *client);
/* Raises ClosedError-like chime.Error when the client was closed. */
int chimepy_client_check(chimepy_client_t *client);
/* Client.export(table, fn) (export.c). */
PyObject *chimepy_client_export(PyObject *o, PyObject *args);
/* A call on client->c that releases the GIL: begin checks the client is
 * open (-1 with chime.Error CHIME_ECLOSED if not) and counts the call;
 * end (with the GIL) uncounts it, and destroys a client closed meanwhile
 * once nothing else is left on it. */
int chimepy_client_call_begin(chimepy_client_t *client);
void chimepy_client_call_end(chimepy_client_t *client);
/* Ends the call that opened a writer or stream (chime_*_open's rc, and
 * detail, its error copied before the GIL came back): opened, the client
 * gains a child (a reference, and a close() waits for it) before the call
 * ends; else raises. 0 or -1. */
int chimepy_client_open_end(chimepy_client_t *client, int rc,
                            const char *detail);
/* Writes the C defaults into Client's docstrings; before the types are
 * readied. */
void chimepy_client_docs_init(void);

/* Sets the exception that matches `code` (chime.TimeoutError for
 * CHIME_ETIMEDOUT, ...) with `detail` as its message, and returns NULL. */
PyObject *chimepy_raise(int code, const char *detail);
/* An integer argument named `name` in lo..hi (args.c): an int or anything
 * with __index__, not a bool. 0 with *out, or -1 with the exception set
 * (chime.InvalidArgumentError naming the argument and its range). */
int chimepy_uint_arg(PyObject *o, const char *name, uint64_t lo, uint64_t hi,
                     uint64_t *out);

/* A leaf dtype as Python sees it (dtype.c, from the C library's table):
 * numpy's dtype (bf16 as uint16: numpy has no bfloat16), new reference or
 * NULL with an exception set; the buffer protocol's format ("H" for bf16;
 * "B" for an unknown one); DLPack's type (-1 for an unknown one). */
PyArray_Descr *chimepy_descr(chime_dtype_t dtype);
const char *chimepy_buffer_format(chime_dtype_t d);
int chimepy_dl_dtype(chime_dtype_t d, chimepy_dl_dtype_t *out);
/* The structured dtype of chime_sample_info_t (borrowed), and its buffer
 * format (every field, as numpy writes it for that dtype). */
PyArray_Descr *chimepy_info_descr(void);
const char *chimepy_info_format(void);

/* Module init (module.c): the exception classes (errors.c), the info
 * record's dtype (dtype.c). */
int chimepy_errors_init(PyObject *module);
int chimepy_dtype_init(void);

/* DLPack export (array.c), shared by chime.Array and chime.View. */
/* Checks __dlpack__'s keywords (stream, max_version, dl_device, copy) for
 * memory on `device` (-1: the host): 0, or -1 with BufferError, ValueError
 * or TypeError set. For device memory *cuda_stream is the stream the
 * consumer named, as the array API reads `stream` (None and 1: the legacy
 * default stream, 2: the per-thread one, else its cudaStream_t; 0 is
 * refused), and *has_stream 0 for -1 (no ordering asked). */
int chimepy_dlpack_check_args(PyObject *args, PyObject *kw, int device,
                              int *has_stream, void **cuda_stream);
/* A "dltensor" capsule over `data` (byte strides) on `device` (-1: CPU,
 * else CUDA), holding `owner` until the consumer's deleter runs. */
PyObject *chimepy_dlpack_export(PyObject *owner, const void *data, int ndim,
                                const Py_ssize_t *shape,
                                const Py_ssize_t *strides, Py_ssize_t itemsize,
                                chimepy_dl_dtype_t dtype, int device);
/* __dlpack_device__: (CPU, 0). */
PyObject *chimepy_dlpack_device(PyObject *o, PyObject *unused);

#endif
