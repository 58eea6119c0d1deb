/* Taking connections off a listening socket, as both of chimed's loops do
 * (the acceptor's TCP and Unix listeners, the handoff socket): what an
 * accept error means, and the pause that one calls for. */
#ifndef CHIME_SERVER_ACCEPT_H
#define CHIME_SERVER_ACCEPT_H

#include <errno.h>
#include <sys/socket.h>

#include <uv.h>

/* How long a listener is left alone after an error that only time cures. */
#define CHIME__ACCEPT_BACKOFF_MS 100

typedef enum {
  CHIME__ACCEPT_OK,    /* *fd is a new nonblocking, close-on-exec socket */
  CHIME__ACCEPT_AGAIN, /* interrupted, or the peer gave up first: go on */
  CHIME__ACCEPT_EMPTY, /* nothing is waiting */
  /* Out of descriptors or memory, or an error nothing here cures (errno
   * says which): the pending connection keeps the socket readable, so
   * polling on would spin. Stop polling and chime__accept_pause. */
  CHIME__ACCEPT_PAUSE,
} chime__accept_t;

static inline chime__accept_t chime__accept_next(int lfd, int *fd) {
  *fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (*fd >= 0)
    return CHIME__ACCEPT_OK;
  if (errno == EINTR || errno == ECONNABORTED)
    return CHIME__ACCEPT_AGAIN;
  if (errno == EAGAIN || errno == EWOULDBLOCK)
    return CHIME__ACCEPT_EMPTY;
  return CHIME__ACCEPT_PAUSE;
}

/* resume runs on the timer's loop CHIME__ACCEPT_BACKOFF_MS from now, to
 * poll the listener(s) again. */
static inline void chime__accept_pause(uv_timer_t *timer, uv_timer_cb resume) {
  uv_timer_start(timer, resume, CHIME__ACCEPT_BACKOFF_MS, 0);
}

#endif
