/* chime.Stream and chime.Batch (stream.c, batch.c): batches as zero-copy numpy
 * views into the ring (over chime.View, view.c), and the rules that keep those
 * views safe.
 *
 * Ownership: View -> Batch -> Stream -> Client (strong references), so no
 * object outlives what its memory depends on. A Batch holds a lease on one
 * ring slot until it is given back; it is given back only when no View of it
 * is alive (numpy arrays and memoryviews keep their View alive through
 * their base, DLPack tensors through the array or View they came from,
 * array.c), so no array can read a slot the server may refill. release()
 * with views alive is deferred until the last view goes; so is closing the
 * stream (chime_stream_close() unmaps the ring) while any batch is leased.
 *
 * Threads: chime_stream_next() runs without the GIL. A view dropped in
 * another thread meanwhile must not call chime_stream_release() concurrently
 * (one thread at a time per stream), so its slot is queued in `pending` and
 * given back by next() once it has the GIL again.
 *
 * A device stream (device >= 0, docs/python.md): a leaf is a chime.View
 * over device memory (no numpy array: the host cannot read it), exported
 * with DLPack as CUDA; its __dlpack__(stream=s) makes s wait for the
 * batch's copy (chime_stream_wait, which any thread may call, also while
 * next() runs), and the release records the release point on s. */
#ifndef CHIMEPY_BATCH_H
#define CHIMEPY_BATCH_H

#include "chimepy.h"

typedef struct chimepy_batch_s chimepy_batch_t;

typedef struct {
  PyObject_HEAD chimepy_client_t *client;
  chime_stream_t *s;
  chime_mode_t mode;
  int sharded;        /* over shards: next() may reopen sub-streams */
  int device;         /* -1: host batches; else the CUDA ordinal */
  PyObject *fallback; /* str or None */
  int iter_timeout_ms;
  int closing; /* close() asked: the C stream closes once nothing is leased */
  int in_next; /* next() or set_version() runs without the GIL: one call */
  unsigned leased;
  chimepy_batch_t *last;  /* borrowed: what next() returned last */
  chimepy_batch_t *held;  /* borrowed: every leased batch, a list */
  chime_batch_t *pending; /* slots to give back when next() returns */
  unsigned npending, cap;
} chimepy_stream_t;

struct chimepy_batch_s {
  PyObject_HEAD chimepy_stream_t *stream;
  chime_batch_t b;
  int leased;        /* the slot is ours: the server does not write it */
  int release_asked; /* release() or a later next(): no new views */
  unsigned views;    /* live View objects */
  chimepy_batch_t *prev, *next;
};

/* For a batch the caller never saw, on a path that already raises. */
void chimepy_release_unreported(chime_stream_t *s, const chime_batch_t *b);
/* Closes the C stream now (GIL released) and tells the client. */
void chimepy_stream_shut(chimepy_stream_t *self);
/* Gives back the slots queued while next() ran: 0 or the first failure. */
int chimepy_stream_drain(chimepy_stream_t *self);
/* A close() asked for ends the C stream once nothing is leased and no
 * next() runs. */
void chimepy_stream_finish_close(chimepy_stream_t *self);
/* Gives the slot of a batch with no live view back to the server (queued
 * while next() runs). */
int chimepy_batch_give_back(chimepy_batch_t *bt);
/* release(): now when no view is alive, else when the last one goes. */
int chimepy_batch_request_release(chimepy_batch_t *bt);

#endif
