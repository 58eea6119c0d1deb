/* The handoff socket, on a libuv loop thread (shared with liveness.c). Nothing
 * a peer sends can do more than get its connection closed: the request is a
 * fixed 24 bytes read with a deadline, and the token is compared in constant
 * time and consumed on first use. Nor can a peer lock others out: a uid that
 * may not attach is answered and closed at accept, before it holds anything;
 * a request already there at accept is served at once; a handshake still
 * waiting for its bytes holds one of MAX_CONNS slots, at most
 * MAX_CONNS_PER_UID of them per uid, and when its uid (or the whole table)
 * has none left the oldest waiting one gives way: an honest learner sends
 * its request right after connecting, so the oldest is the idlest.
 *
 * The handoff owns the token registry: a stream's token is issued here,
 * consumed by the handshake that presents it (even when expired), or
 * revoked when the stream ends or its token expires unused.
 * A learner handed a ring is watched by liveness.c from then on.
 * The other end of the same-host handoff of a ring's fd: src/client/handoff.c
 * (one basename, two ends). */
#include "server/handoff.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "chime/errors.h"
#include "common/clock.h"
#include "common/list.h"
#include "server/accept.h"
#include "server/liveness.h"

#define MAX_CONNS 64
#define MAX_CONNS_PER_UID 8
#define CONN_TIMEOUT_MS 2000

/* A token issued for a stream's ring: single use, with a deadline. Holds a
 * stream reference while it is in the registry. */
typedef struct token_s {
  uint8_t token[CHIME__HANDOFF_TOKEN_BYTES];
  uint64_t deadline_ns;
  chime__stream_t *s; /* the stream, through h->ops */
  struct token_s *next;
} token_t;

typedef struct conn_s {
  uv_poll_t poll;
  uv_timer_t timer;
  int fd;
  int closing;
  int handles;
  struct ucred cr; /* the peer, from accept */
  size_t got;
  uint8_t buf[CHIME__HANDOFF_REQUEST_BYTES];
  chime__handoff_t *h;
  chime__link_t link; /* on h->conns */
} conn_t;

struct chime__handoff_s {
  const chime__config_t *cfg;
  const chime__stream_ops_t *ops;
  char path[108];
  int fs;
  int lfd;
  uv_loop_t loop;
  uv_poll_t lpoll;
  uv_async_t async;
  uv_timer_t backoff;
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  int quit;
  token_t *tokens;     /* issued, not yet used, revoked or expired-and-used */
  int nwaiting;        /* conns not closing: the slots in use */
  chime__list_t conns; /* conn_t's, newest first */
  chime__liveness_t *liveness; /* learners handed a ring (loop thread) */
};

static socklen_t make_addr(struct sockaddr_un *a, const char *path) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  if (path[0] == '@') {
    /* Abstract: sun_path[0] = 0, the name without padding. */
    size_t n = strlen(path + 1);
    memcpy(a->sun_path + 1, path + 1, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  }
  snprintf(a->sun_path, sizeof(a->sun_path), "%s", path);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                     strlen(a->sun_path) + 1);
}

/* A filesystem socket left by a killed chimed: nobody answers on it. */
static void remove_stale(const char *path) {
  struct stat st;
  struct sockaddr_un a;
  if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
    return;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return;
  socklen_t al = make_addr(&a, path);
  if (connect(fd, (struct sockaddr *)&a, al) != 0 && errno == ECONNREFUSED)
    unlink(path);
  close(fd);
}

int chime__handoff_create(chime__handoff_t **out, const chime__config_t *cfg,
                          const chime__stream_ops_t *ops, char *err,
                          size_t errlen) {
  int rc = 0;
  struct sockaddr_un a;
  const char *cfgpath = cfg->handoff_socket;
  chime__handoff_t *h = calloc(1, sizeof(*h));
  *out = NULL;
  if (h == NULL)
    return CHIME_ENOMEM;
  h->cfg = cfg;
  h->ops = ops;
  h->lfd = -1;
  pthread_mutex_init(&h->mu, NULL);
  if (strcmp(cfgpath, "@auto") == 0) {
    uint8_t r[8];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
      snprintf(err, errlen, "handoff socket: no randomness");
      rc = CHIME_ESYS;
      goto out;
    }
    snprintf(h->path, sizeof(h->path),
             "@chime-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", (long)getpid(),
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  } else {
    snprintf(h->path, sizeof(h->path), "%s", cfgpath);
    h->fs = h->path[0] != '@';
  }
  if (strlen(h->path) >= sizeof(a.sun_path)) {
    snprintf(err, errlen, "handoff socket '%s': path too long", h->path);
    rc = CHIME_EINVAL;
    goto out;
  }
  h->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (h->lfd < 0) {
    snprintf(err, errlen, "handoff socket: %s", strerror(errno));
    rc = CHIME_ESYS;
    goto out;
  }
  if (h->fs)
    remove_stale(h->path);
  socklen_t al = make_addr(&a, h->path);
  if (bind(h->lfd, (struct sockaddr *)&a, al) != 0) {
    snprintf(err, errlen, "handoff socket '%s': %s", h->path, strerror(errno));
    rc = CHIME_ESYS;
    goto out;
  }
  /* Only chimed's uid may connect unless allowed_uids names others; those
   * need write access to a filesystem socket, and then SO_PEERCRED (checked
   * against allowed_uids) and the token decide, as for an abstract socket,
   * which has no permissions at all. Set before listening: nobody connects
   * under the umask's mode. */
  if ((h->fs && chmod(h->path, cfg->nuids > 0 ? 0666 : 0600) != 0) ||
      listen(h->lfd, 64) != 0) {
    snprintf(err, errlen, "handoff socket '%s': %s", h->path, strerror(errno));
    if (h->fs)
      unlink(h->path); /* bound by us just now */
    rc = CHIME_ESYS;
    goto out;
  }
  *out = h;
  h = NULL;
out:
  if (h != NULL) {
    if (h->lfd >= 0)
      close(h->lfd);
    pthread_mutex_destroy(&h->mu);
    free(h);
  }
  return rc;
}

const char *chime__handoff_path(const chime__handoff_t *h) {
  return h->path;
}

static void conn_handle_closed(uv_handle_t *hd) {
  conn_t *c = hd->data;
  if (--c->handles > 0)
    return;
  close(c->fd);
  chime__list_remove(&c->h->conns, &c->link);
  free(c);
}

static void conn_close(conn_t *c) {
  if (c->closing)
    return;
  c->closing = 1;
  c->h->nwaiting--;
  uv_poll_stop(&c->poll);
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->poll, conn_handle_closed);
  uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
}

static int uid_allowed(const chime__config_t *cfg, uid_t uid) {
  if (uid == getuid() || uid == geteuid())
    return 1;
  for (uint32_t i = 0; i < cfg->nuids; i++)
    if (cfg->allowed_uids[i] == uid)
      return 1;
  return 0;
}

static int token_eq(const uint8_t *a, const uint8_t *b) {
  uint8_t d = 0;
  for (int i = 0; i < CHIME__HANDOFF_TOKEN_BYTES; i++)
    d |= a[i] ^ b[i];
  return d == 0;
}

int chime__handoff_issue(chime__handoff_t *h, chime__stream_t *s,
                         uint32_t expires_ms,
                         uint8_t token[CHIME__HANDOFF_TOKEN_BYTES],
                         uint64_t *deadline_ns) {
  token_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return CHIME_ENOMEM;
  if (getrandom(t->token, sizeof(t->token), 0) != (ssize_t)sizeof(t->token)) {
    free(t);
    return CHIME_ESYS;
  }
  t->deadline_ns = chime__now_ns() + (uint64_t)expires_ms * 1000000u;
  h->ops->ref(s);
  t->s = s;
  memcpy(token, t->token, sizeof(t->token));
  *deadline_ns = t->deadline_ns;
  pthread_mutex_lock(&h->mu);
  t->next = h->tokens;
  h->tokens = t;
  pthread_mutex_unlock(&h->mu);
  return 0;
}

/* Unlinks the entry that matches (tok, or else s). Caller holds h->mu. */
static token_t *unlink_token(chime__handoff_t *h, const uint8_t *tok,
                             const chime__stream_t *s) {
  for (token_t **pp = &h->tokens; *pp != NULL; pp = &(*pp)->next) {
    token_t *t = *pp;
    if (tok != NULL ? token_eq(t->token, tok) : t->s == s) {
      *pp = t->next;
      return t;
    }
  }
  return NULL;
}

int chime__handoff_revoke(chime__handoff_t *h, const chime__stream_t *s) {
  pthread_mutex_lock(&h->mu);
  token_t *t = unlink_token(h, NULL, s);
  pthread_mutex_unlock(&h->mu);
  if (t == NULL)
    return 0;
  h->ops->unref(t->s);
  free(t);
  return 1;
}

int chime__handoff_pending(chime__handoff_t *h, const chime__stream_t *s) {
  int found = 0;
  pthread_mutex_lock(&h->mu);
  for (token_t *t = h->tokens; t != NULL && !found; t = t->next)
    found = t->s == s;
  pthread_mutex_unlock(&h->mu);
  return found;
}

/* Single use: a token is consumed when presented, even if expired. Returns
 * its stream with the registry's reference (*expired set when it was), or
 * NULL. */
static chime__stream_t *take_token(chime__handoff_t *h, const uint8_t *tok,
                                   int *expired) {
  pthread_mutex_lock(&h->mu);
  token_t *t = unlink_token(h, tok, NULL);
  pthread_mutex_unlock(&h->mu);
  if (t == NULL)
    return NULL;
  chime__stream_t *s = t->s;
  *expired = chime__now_ns() > t->deadline_ns;
  free(t);
  return s;
}

static int send_reply(int fd, int32_t status, int pass_fd) {
  uint8_t b[CHIME__HANDOFF_STATUS_BYTES];
  chime__handoff_status_put(b, status);
  struct iovec iov = {b, sizeof(b)};
  struct msghdr m;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (pass_fd >= 0) {
    memset(&ctl, 0, sizeof(ctl));
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof(ctl.buf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  }
  return sendmsg(fd, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(b) ? 0 : -1;
}

/* A whole request from a peer whose uid was allowed at accept; the caller
 * closes fd. */
static void handshake(chime__handoff_t *h, int fd, const uint8_t *req,
                      const struct ucred *cr) {
  if (memcmp(req, CHIME__HANDOFF_MAGIC, CHIME__HANDOFF_MAGIC_BYTES) != 0)
    return;
  int expired = 0;
  chime__stream_t *s =
      take_token(h, req + CHIME__HANDOFF_MAGIC_BYTES, &expired);
  if (s == NULL || expired) {
    send_reply(fd, CHIME_EPERM, -1);
    if (s != NULL) {
      /* Consumed, so nobody can attach any more: the stream ends now
       * rather than hold its ring's budget until its call does. */
      h->ops->kill(s, "handoff token presented after it expired");
      h->ops->unref(s);
    }
    return;
  }
  if (cr->pid <= 0) {
    /* The learner runs in a pid namespace chimed cannot see (SO_PEERCRED
     * gives 0): its liveness cannot be watched, so no ring is lent. The
     * learner is told (CHIME_ENOTSUP; auto mode streams instead), and the
     * spent token's stream ends. */
    send_reply(fd, CHIME_ENOTSUP, -1);
    h->ops->kill(s, "handoff refused: the learner's process is not visible "
                    "from chimed's pid namespace (shm needs chimed in the "
                    "learner's pid namespace or the host's)");
    h->ops->unref(s);
    return;
  }
  /* Held from before the fd leaves: the learner may map it at once. */
  h->ops->hold(s);
  int sock = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (sock < 0 || send_reply(fd, 0, h->ops->ring_fd(s)) != 0) {
    /* Nothing sent (sendmsg passes the fd with the bytes or not at all),
     * and the token is spent: the stream ends, as above. */
    if (sock >= 0)
      close(sock);
    h->ops->kill(s, "handoff failed: the learner's connection closed before "
                    "the ring was sent");
    h->ops->unref(s);
    h->ops->unhold(s);
    return;
  }
  /* The learner holds the ring: its sampler may fill it now. */
  h->ops->attached(s);
  /* The learner reads to the end: it sees it while our dup lives on. */
  shutdown(sock, SHUT_RDWR);
  /* Takes the reference and the hold. */
  chime__liveness_watch(h->liveness, s, cr->pid, sock);
}

static void on_conn_timeout(uv_timer_t *t) {
  conn_close(t->data);
}

/* Reads what arrived; a whole request is served, an end or error closes. */
static void conn_read(conn_t *c) {
  ssize_t n = recv(c->fd, c->buf + c->got, sizeof(c->buf) - c->got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n <= 0) {
    conn_close(c);
    return;
  }
  c->got += (size_t)n;
  if (c->got < sizeof(c->buf))
    return;
  handshake(c->h, c->fd, c->buf, &c->cr);
  conn_close(c);
}

static void on_conn_readable(uv_poll_t *p, int status, int events) {
  conn_t *c = p->data;
  (void)events;
  if (status < 0)
    conn_close(c);
  else
    conn_read(c);
}

/* The oldest waiting handshake gives way, unless its request arrived since
 * (the loop has not turned yet): then it is served. */
static void give_way(conn_t *c) {
  conn_read(c);
  conn_close(c);
}

/* Makes room for one more waiting handshake of uid: the oldest waiting one
 * of that uid gives way when it has all its slots, else the oldest of all
 * when every slot is taken. */
static void make_room(chime__handoff_t *h, uid_t uid) {
  conn_t *oldest = NULL, *oldest_same = NULL;
  int same = 0;
  CHIME__LIST_EACH(l, &h->conns) {
    conn_t *c = CHIME__CONTAINER(l, conn_t, link);
    if (c->closing)
      continue;
    oldest = c;
    if (c->cr.uid == uid) {
      oldest_same = c;
      same++;
    }
  }
  if (same >= MAX_CONNS_PER_UID)
    give_way(oldest_same);
  else if (h->nwaiting >= MAX_CONNS)
    give_way(oldest);
}

/* A connection just accepted: refused, served, or left to wait for the rest
 * of its request. */
static void admit(chime__handoff_t *h, int fd) {
  struct ucred cr;
  socklen_t cl = sizeof(cr);
  uint8_t buf[CHIME__HANDOFF_REQUEST_BYTES];
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
    close(fd);
    return;
  }
  if (!uid_allowed(h->cfg, cr.uid)) {
    /* Told why, without reading a byte of it (the socket is fresh, the
     * answer fits); the peer reads it even after its send fails. */
    send_reply(fd, CHIME_EPERM, -1);
    close(fd);
    return;
  }
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  if (n == (ssize_t)sizeof(buf)) {
    handshake(h, fd, buf, &cr);
    close(fd);
    return;
  }
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    close(fd);
    return;
  }
  conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    close(fd);
    return;
  }
  make_room(h, cr.uid);
  c->fd = fd;
  c->h = h;
  c->cr = cr;
  c->handles = 2;
  if (n > 0) {
    memcpy(c->buf, buf, (size_t)n);
    c->got = (size_t)n;
  }
  h->nwaiting++;
  chime__list_push(&h->conns, &c->link);
  uv_poll_init(&h->loop, &c->poll, fd);
  uv_timer_init(&h->loop, &c->timer);
  c->poll.data = c;
  c->timer.data = c;
  uv_poll_start(&c->poll, UV_READABLE, on_conn_readable);
  uv_timer_start(&c->timer, on_conn_timeout, CONN_TIMEOUT_MS, 0);
}

static void on_accept(uv_poll_t *p, int status, int events);

static void on_backoff(uv_timer_t *t) {
  chime__handoff_t *h = t->data;
  uv_poll_start(&h->lpoll, UV_READABLE, on_accept);
}

static void on_accept(uv_poll_t *p, int status, int events) {
  chime__handoff_t *h = p->data;
  (void)status;
  (void)events;
  /* A bounded round: the connections that gave way are freed when the loop
   * turns, and the listening socket, still readable, brings us back. */
  for (int i = 0; i < MAX_CONNS; i++) {
    int fd;
    switch (chime__accept_next(h->lfd, &fd)) {
    case CHIME__ACCEPT_OK:
      admit(h, fd);
      break;
    case CHIME__ACCEPT_AGAIN:
      break;
    case CHIME__ACCEPT_EMPTY:
      return;
    case CHIME__ACCEPT_PAUSE:
      uv_poll_stop(&h->lpoll);
      chime__accept_pause(&h->backoff, on_backoff);
      return;
    }
  }
}

static void on_async(uv_async_t *a) {
  chime__handoff_t *h = a->data;
  pthread_mutex_lock(&h->mu);
  int quit = h->quit;
  pthread_mutex_unlock(&h->mu);
  if (quit)
    chime__liveness_close(h->liveness);
  else
    chime__liveness_check(h->liveness);
  if (!quit)
    return;
  CHIME__LIST_EACH(l, &h->conns)
    conn_close(CHIME__CONTAINER(l, conn_t, link));
  uv_poll_stop(&h->lpoll);
  uv_timer_stop(&h->backoff);
  uv_close((uv_handle_t *)&h->lpoll, NULL);
  uv_close((uv_handle_t *)&h->async, NULL);
  uv_close((uv_handle_t *)&h->backoff, NULL);
}

static void *loop_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-handoff");
  chime__handoff_t *h = arg;
  uv_run(&h->loop, UV_RUN_DEFAULT);
  return NULL;
}

int chime__handoff_start(chime__handoff_t *h) {
  if (uv_loop_init(&h->loop) != 0)
    return CHIME_ESYS;
  uv_poll_init(&h->loop, &h->lpoll, h->lfd);
  h->lpoll.data = h;
  uv_poll_start(&h->lpoll, UV_READABLE, on_accept);
  uv_async_init(&h->loop, &h->async, on_async);
  h->async.data = h;
  uv_timer_init(&h->loop, &h->backoff);
  h->backoff.data = h;
  if (chime__liveness_create(&h->liveness, &h->loop, h->ops) != 0) {
    uv_close((uv_handle_t *)&h->lpoll, NULL);
    uv_close((uv_handle_t *)&h->async, NULL);
    uv_close((uv_handle_t *)&h->backoff, NULL);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    uv_loop_close(&h->loop);
    return CHIME_ENOMEM;
  }
  if (pthread_create(&h->th, NULL, loop_main, h) != 0) {
    uv_close((uv_handle_t *)&h->lpoll, NULL);
    uv_close((uv_handle_t *)&h->async, NULL);
    uv_close((uv_handle_t *)&h->backoff, NULL);
    chime__liveness_close(h->liveness);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    chime__liveness_free(h->liveness);
    uv_loop_close(&h->loop);
    return CHIME_ESYS;
  }
  h->started = 1;
  return 0;
}

void chime__handoff_notify(chime__handoff_t *h) {
  pthread_mutex_lock(&h->mu);
  if (h->started && !h->quit)
    uv_async_send(&h->async);
  pthread_mutex_unlock(&h->mu);
}

void chime__handoff_destroy(chime__handoff_t *h) {
  if (h == NULL)
    return;
  pthread_mutex_lock(&h->mu);
  h->quit = 1;
  if (h->started)
    uv_async_send(&h->async);
  pthread_mutex_unlock(&h->mu);
  if (h->started) {
    pthread_join(h->th, NULL);
    uv_loop_close(&h->loop);
    chime__liveness_free(h->liveness);
  }
  close(h->lfd);
  if (h->fs)
    unlink(h->path);
  while (h->tokens != NULL) { /* streams close revoke theirs: none left */
    token_t *t = h->tokens;
    h->tokens = t->next;
    h->ops->unref(t->s);
    free(t);
  }
  pthread_mutex_destroy(&h->mu);
  free(h);
}
