/* Same-host handoff, client side: present the token on the server's Unix
 * socket and receive the ring's memfd with SCM_RIGHTS.
 * The other end of the same-host handoff of a ring's fd: src/server/handoff.c
 * (one basename, two ends). */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/clock.h"
#include "wire/handoff_bytes.h"

/* Handshakes dropped unanswered that one fetch tries again at most. */
#define MAX_ATTEMPTS 64

static int set_timeouts(int fd, int timeout_ms) {
  if (timeout_ms < 0)
    return 0;
  if (timeout_ms == 0)
    timeout_ms = 1;
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
    return -1;
  return 0;
}

/* Closes every fd that arrived in a control message. */
static void close_passed_fds(struct msghdr *msg) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      close(fd);
    }
  }
}

/* One handshake. *dropped is set when the server closed the connection
 * without reading the request and answered nothing: the token was not
 * consumed and may be presented again. That is a flood of handshakes of
 * this uid making this one, the idlest, give way (server/handoff.c) before
 * the request was sent whole (the send fails), or just before it arrived
 * (the request is left unread, and a socket closed with unread bytes makes
 * the peer's read fail with ECONNRESET). A request the server read is
 * always answered, so a plain close after it is an answer of its own
 * (CHIME_EPROTO). */
/* A connected socket to the server's handoff socket at socket_path, with
 * timeout_ms on its sends and receives, in *sock. */
static int connect_to(const char *socket_path, int timeout_ms, int *sock,
                      char *err, size_t errlen) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  size_t plen = socket_path ? strlen(socket_path) : 0;
  if (plen < 2 || plen >= sizeof(addr.sun_path))
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "handoff: bad socket address (%zu bytes)", plen);
  memcpy(addr.sun_path, socket_path, plen);
  if (socket_path[0] == '@')
    addr.sun_path[0] = '\0'; /* abstract namespace */
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen +
                               (socket_path[0] == '@' ? 0 : 1));
  *sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*sock < 0)
    return chime__fail(err, errlen, CHIME_ESYS, "handoff: socket: %s",
                       strerror(errno));
  if (set_timeouts(*sock, timeout_ms))
    return chime__fail(err, errlen, CHIME_ESYS, "handoff: setsockopt: %s",
                       strerror(errno));
  if (connect(*sock, (struct sockaddr *)&addr, alen) != 0)
    return chime__fail(
        err, errlen, errno == EACCES ? CHIME_EPERM : CHIME_EUNAVAILABLE,
        "handoff: cannot connect to the server's socket: %s", strerror(errno));
  return 0;
}

/* Sends the magic and the token. A server that refuses this uid answers
 * and closes at accept, maybe before the send: then *send_errno is set and
 * 0 returned, for the answer to say why. */
static int send_hello(int sock, const uint8_t *token, int *send_errno,
                      char *err, size_t errlen) {
  uint8_t hello[CHIME__HANDOFF_REQUEST_BYTES];
  memcpy(hello, CHIME__HANDOFF_MAGIC, CHIME__HANDOFF_MAGIC_BYTES);
  memcpy(hello + CHIME__HANDOFF_MAGIC_BYTES, token, CHIME__HANDOFF_TOKEN_BYTES);
  size_t sent = 0;
  *send_errno = 0;
  while (sent < sizeof(hello)) {
    ssize_t k = send(sock, hello + sent, sizeof(hello) - sent, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      *send_errno = errno;
      return 0;
    }
    if (k <= 0)
      return chime__fail(err, errlen,
                         (errno == EAGAIN || errno == EWOULDBLOCK)
                             ? CHIME_ETIMEDOUT
                             : CHIME_EDISCONNECTED,
                         "handoff: sending the token: %s", strerror(errno));
    sent += (size_t)k;
  }
  return 0;
}

/* The answer: the 4-byte status into status, the descriptor riding on its
 * first byte into *fd (at most one, else CHIME_EPROTO). *dropped when the
 * server closed with the request unread (the token unused). */
static int recv_answer(int sock, int send_errno,
                       uint8_t status[CHIME__HANDOFF_STATUS_BYTES], int *fd,
                       int *dropped, char *err, size_t errlen) {
  size_t got = 0;
  while (got < CHIME__HANDOFF_STATUS_BYTES) {
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int) * 4)];
    } ctrl;
    struct iovec iov = {status + got, CHIME__HANDOFF_STATUS_BYTES - got};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.buf;
    msg.msg_controllen = sizeof(ctrl.buf);
    ssize_t k = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0 && got == 0 && send_errno != 0) {
      *dropped = 1;
      return chime__fail(err, errlen, CHIME_EDISCONNECTED,
                         "handoff: sending the token: %s",
                         strerror(send_errno));
    }
    if (k < 0 && errno == ECONNRESET && got == 0)
      *dropped = 1; /* closed with the request unread: the token unused */
    if (k < 0)
      return chime__fail(
          err, errlen,
          (errno == EAGAIN || errno == EWOULDBLOCK) ? CHIME_ETIMEDOUT
                                                    : CHIME_EDISCONNECTED,
          "handoff: waiting for the answer: %s", strerror(errno));
    if (k == 0)
      return chime__fail(err, errlen, CHIME_EPROTO,
                         "handoff: server closed the connection after %zu of "
                         "4 status bytes",
                         got);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c) {
      if (*fd >= 0 || (msg.msg_flags & MSG_CTRUNC) || CMSG_NXTHDR(&msg, c) ||
          c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
          c->cmsg_len != CMSG_LEN(sizeof(int))) {
        close_passed_fds(&msg);
        return chime__fail(err, errlen, CHIME_EPROTO,
                           "handoff: expected exactly one descriptor");
      }
      memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
    got += (size_t)k;
  }
  return 0;
}

/* A status other than 0, said. */
static int refused(int32_t code, char *err, size_t errlen) {
  int rc = code < 0 && code >= CHIME_ECLOSED ? code : CHIME_EPROTO;
  if (rc == CHIME_EPERM)
    return chime__fail(err, errlen, rc,
                       "handoff refused: permission denied (token unknown, "
                       "used or expired, or uid not allowed)");
  if (rc == CHIME_ENOTSUP)
    return chime__fail(err, errlen, rc,
                       "handoff refused: chimed cannot see this process (it "
                       "runs in another pid namespace) to watch its liveness");
  return chime__fail(err, errlen, rc, "handoff refused: %s",
                     chime_strerror(rc));
}

static int fetch_once(const char *socket_path, const uint8_t *token,
                      size_t token_len, int timeout_ms, int *fd_out,
                      int *dropped, char *err, size_t errlen) {
  int sock = -1, fd = -1, send_errno = 0;
  uint8_t status[CHIME__HANDOFF_STATUS_BYTES];
  *fd_out = -1;
  if (token_len != CHIME__HANDOFF_TOKEN_BYTES)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "handoff: token is %zu bytes, expected %d", token_len,
                       CHIME__HANDOFF_TOKEN_BYTES);
  int rc = connect_to(socket_path, timeout_ms, &sock, err, errlen);
  if (rc == 0)
    rc = send_hello(sock, token, &send_errno, err, errlen);
  if (rc == 0)
    rc = recv_answer(sock, send_errno, status, &fd, dropped, err, errlen);
  if (rc == 0 && chime__handoff_status_get(status) != 0)
    rc = refused(chime__handoff_status_get(status), err, errlen);
  if (rc == 0 && fd < 0)
    rc = chime__fail(err, errlen, CHIME_EPROTO,
                     "handoff: status 0 but no descriptor was passed");
  if (rc == 0) {
    *fd_out = fd;
    fd = -1;
  }
  if (fd >= 0)
    close(fd);
  if (sock >= 0)
    close(sock);
  return rc;
}

/* A handshake dropped unanswered is tried again, on a new connection, until
 * the timeout: a learner descheduled between its connect and its request
 * (a loaded machine) is the idlest handshake when a flood of its uid comes
 * in, and must not be locked out by it (test_e2e_lockout). */
int chime__handoff_fetch(const char *socket_path, const uint8_t *token,
                         size_t token_len, int timeout_ms, int *fd_out,
                         char *err, size_t errlen) {
  const uint64_t start = chime__now_ns();
  for (int attempt = 1;; attempt++) {
    int dropped = 0, left = timeout_ms;
    if (timeout_ms > 0) {
      uint64_t spent_ms = (chime__now_ns() - start) / 1000000u;
      left = spent_ms < (uint64_t)timeout_ms ? timeout_ms - (int)spent_ms : 1;
    }
    int rc = fetch_once(socket_path, token, token_len, left, fd_out, &dropped,
                        err, errlen);
    if (rc == 0 || !dropped || attempt >= MAX_ATTEMPTS ||
        (timeout_ms >= 0 &&
         (chime__now_ns() - start) / 1000000u >= (uint64_t)timeout_ms))
      return rc;
  }
}
