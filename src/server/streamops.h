/* Internal: what the handoff and the liveness watch may do to a stream, as
 * an owner ops table (nng's habit, as the sender's owner in sender.h): they
 * hold streams as pointers to a struct they never see into and reach them
 * only through it, so each is built and tested without stream.c (the stream's
 * table is chime__stream_ops, stream.h). Every member may be called from the
 * handoff's loop thread with no lock held; none may block. */
#ifndef CHIME_SERVER_STREAMOPS_H
#define CHIME_SERVER_STREAMOPS_H

#include <sys/types.h>

typedef struct chime__stream_s chime__stream_t;

typedef struct {
  /* A reference keeps the stream and its ring alive. */
  void (*ref)(chime__stream_t *s);
  void (*unref)(chime__stream_t *s);
  /* A hold keeps the ring's budget charge: a learner that was handed the
   * ring keeps its pages alive whatever the stream does. */
  void (*hold)(chime__stream_t *s);
  void (*unhold)(chime__stream_t *s);
  /* The ring's memfd, to pass to the learner (the stream keeps it). */
  int (*ring_fd)(chime__stream_t *s);
  /* The ring's memfd as (dev, ino), to find it in a learner's /proc. */
  void (*ring_id)(chime__stream_t *s, dev_t *dev, ino_t *ino);
  /* The learner holds the ring: its filling may start. */
  void (*attached)(chime__stream_t *s);
  /* The learner is gone: close the stream and cancel its call. */
  void (*kill)(chime__stream_t *s, const char *why);
  /* 1 once the stream is closed. */
  int (*closed)(chime__stream_t *s);
} chime__stream_ops_t;

#endif
