/* chime.Writer's object (writer.c), shared with its group calls
 * (writer_group.c). */
#ifndef CHIMEPY_WRITER_H
#define CHIMEPY_WRITER_H

#include "chimepy.h"

typedef struct {
  PyObject_HEAD chimepy_client_t *client;
  chime_writer_t *w;
  chime_spec_t spec;
  char table[CHIME_MAX_NAME];
  uint64_t sample_bytes;
  unsigned char *sample; /* one packed sample */
  int busy;              /* a call has the GIL released: one user at a time */
  int timeout_ms;        /* without an ack for this long: TimeoutError */
  /* A wait was interrupted (Ctrl-C) and nothing succeeded since: closing
   * does not wait for acks again, so the program ends at once. */
  int interrupted;
  uint64_t taken; /* samples chime_writer_append accepted */
  uint64_t acked_at_close;
  uint64_t bytes_at_close;  /* chime_writer_bytes_sent at close */
  uint64_t stalls_at_close; /* chime_writer_stalls at close */
  char compress[1024];      /* chime_writer_compress: what it compresses */
  uint64_t version; /* the policy version of samples appended without one */
} writer_t;

/* Writer.append_group(samples, priority=1.0, version=None): a group
 * table's group (docs/python.md), packed as the table's one item and
 * appended as Writer.append does. */
PyObject *chimepy_writer_append_group(PyObject *o, PyObject *args,
                                      PyObject *kw);
/* Writer.take_dropped() -> [(index, key, reason), ...]. */
PyObject *chimepy_writer_take_dropped(PyObject *o, PyObject *unused);

#endif
