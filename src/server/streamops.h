/* Internal: what the handoff and the liveness watch may do to a stream, as
 * an owner ops table (nng's habit, as the sender's owner in sender.h): they
 * hold streams as opaque pointers and reach them only through it, so each
 * is built and tested without stream.c (the stream's table is
 * chime__stream_ops, stream.h). Every member may be called from the
 * handoff's loop thread with no lock held; none may block. */
#ifndef CHIME_SERVER_STREAMOPS_H
#define CHIME_SERVER_STREAMOPS_H

#include <sys/types.h>

typedef struct {
  /* A reference keeps the stream and its ring alive. */
  void (*ref)(void *s);
  void (*unref)(void *s);
  /* A hold keeps the ring's budget charge: a learner that was handed the
   * ring keeps its pages alive whatever the stream does. */
  void (*hold)(void *s);
  void (*unhold)(void *s);
  /* The ring's memfd, to pass to the learner (the stream keeps it). */
  int (*ring_fd)(void *s);
  /* The ring's memfd as (dev, ino), to find it in a learner's /proc. */
  void (*ring_id)(void *s, dev_t *dev, ino_t *ino);
  /* The learner holds the ring: its filling may start. */
  void (*attached)(void *s);
  /* The learner is gone: close the stream and cancel its call. */
  void (*kill)(void *s, const char *why);
  /* 1 once the stream is closed. */
  int (*closed)(void *s);
} chime__stream_ops_t;

#endif
