/* libFuzzer target: the handoff handshake as the server reads it
 * (src/server/handoff.c: the accept, the per-connection reads, the token
 * registry), over a real abstract Unix socket served by the handoff's own
 * loop thread, with the real learner watch (liveness.c). The handoff and
 * the watch reach the stream only through its ops table (streamops.h):
 * here a table of stand-ins that count what they do to one stream, which
 * ends as soon as it is watched and whose ring no /proc entry names, so
 * the watch lets go of it at once.
 *
 * Input: [n][n piece lengths][flags][bytes a local client sends]
 * (pieces as in fuzz_common.h: each piece is one send()). The client then
 * half-closes and reads the answer to the end.
 *   flags bit 0: bytes 8..23 are replaced by the valid token of the round
 *                (a fuzzer cannot guess 128 random bits)
 *   flags bit 1: bytes 0..7 are replaced by the magic "CHIMEHO1"
 *   flags bit 2: the same bytes are sent again on a second connection (a
 *                replayed token)
 *
 * Beyond "no crash": the answer is exactly what docs/protocol.md promises
 * for those bytes: nothing (EOF) unless 24 bytes with the magic came; then
 * a 4-byte 0 with exactly one fd (the ring's) for the valid, unused token,
 * else CHIME_EPERM and no fd. A token is consumed by the first request
 * that presents it and no other; every stream reference and budget hold
 * the handoff takes is given back or handed to the learner watch, which
 * gives them back once the stream is over. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "fuzz_common.h"
#include "server/config.h"
#include "server/handoff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* --- one stream, as the handoff and the watch see it (streamops.h) --- */

/* The stream the handoff's ops take is this test's own (streamops.h
 * names only its tag). */
struct chime__stream_s {
  atomic_int refs, holds, attached, kills;
};
typedef chime__stream_t fake_stream_t;

static int ring_memfd = -1;

static void fake_ref(chime__stream_t *s) {
  atomic_fetch_add(&((fake_stream_t *)s)->refs, 1);
}
static void fake_unref(chime__stream_t *s) {
  /* ours is the last */
  FUZZ_CHECK(atomic_fetch_sub(&((fake_stream_t *)s)->refs, 1) > 1);
}
static void fake_hold(chime__stream_t *s) {
  atomic_fetch_add(&((fake_stream_t *)s)->holds, 1);
}
static void fake_unhold(chime__stream_t *s) {
  FUZZ_CHECK(atomic_fetch_sub(&((fake_stream_t *)s)->holds, 1) > 0);
}
static int fake_ring_fd(chime__stream_t *s) {
  (void)s;
  return ring_memfd;
}
/* No file has this identity: the learner (this process) holds nothing the
 * watch's /proc sweep could find. */
static void fake_ring_id(chime__stream_t *s, dev_t *dev, ino_t *ino) {
  (void)s;
  *dev = (dev_t)-1;
  *ino = (ino_t)-1;
}
static void fake_attached(chime__stream_t *s) {
  atomic_fetch_add(&((fake_stream_t *)s)->attached, 1);
}
static void fake_kill(chime__stream_t *s, const char *why) {
  (void)why;
  atomic_fetch_add(&((fake_stream_t *)s)->kills, 1);
}
/* The stream ends as soon as its learner is watched. */
static int fake_closed(chime__stream_t *s) {
  (void)s;
  return 1;
}

static const chime__stream_ops_t fake_ops = {.ref = fake_ref,
                                             .unref = fake_unref,
                                             .hold = fake_hold,
                                             .unhold = fake_unhold,
                                             .ring_fd = fake_ring_fd,
                                             .ring_id = fake_ring_id,
                                             .attached = fake_attached,
                                             .kill = fake_kill,
                                             .closed = fake_closed};

/* --- the server and one stream, made once --- */

static chime__config_t cfg;
static chime__handoff_t *ho;
static fake_stream_t stream;
static struct sockaddr_un addr;
static socklen_t addrlen;

static void setup(void) {
  char err[256];
  snprintf(cfg.handoff_socket, sizeof(cfg.handoff_socket), "@auto");
  FUZZ_CHECK(chime__handoff_create(&ho, &cfg, &fake_ops, err, sizeof(err)) ==
             0);
  FUZZ_CHECK(chime__handoff_start(ho) == 0);
  ring_memfd = memfd_create("fuzz-ring", MFD_CLOEXEC);
  FUZZ_CHECK(ring_memfd >= 0);
  atomic_init(&stream.refs, 1);
  const char *p = chime__handoff_path(ho);
  FUZZ_CHECK(p[0] == '@' && strlen(p) < sizeof(addr.sun_path));
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path + 1, p + 1, strlen(p + 1));
  addrlen =
      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(p + 1));
}

typedef struct {
  uint8_t bytes[8];
  size_t len;
  int nfds;
  int fd;
} answer_t;

/* One client: connect, send the pieces, half-close, read to the end. */
static void exchange(const fuzz_piece_t *pieces, size_t npieces,
                     answer_t *ans) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(connect(fd, (struct sockaddr *)&addr, addrlen) == 0);
  for (size_t i = 0; i < npieces; i++) {
    if (pieces[i].len == 0)
      continue;
    /* The server may close early (a whole request read, or refused). */
    ssize_t n;
    do
      n = send(fd, pieces[i].p, pieces[i].len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
      FUZZ_CHECK(errno == EPIPE || errno == ECONNRESET);
      break;
    }
  }
  shutdown(fd, SHUT_WR);
  memset(ans, 0, sizeof(*ans));
  ans->fd = -1;
  for (;;) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    /* The handoff reads within its 2 s deadline, and a half-closed client
     * ends it at once: 10 s is a hang. */
    int pr = poll(&pfd, 1, 10000);
    if (pr < 0 && errno == EINTR) /* libFuzzer's -timeout alarm */
      continue;
    FUZZ_CHECK(pr == 1);
    uint8_t b[8];
    union {
      char buf[CMSG_SPACE(4 * sizeof(int))];
      struct cmsghdr align;
    } ctl;
    struct iovec iov = {b, sizeof(b)};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof(ctl.buf);
    ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == ECONNRESET)
      break;
    FUZZ_CHECK(n >= 0);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL;
         c = CMSG_NXTHDR(&m, c)) {
      FUZZ_CHECK(c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS);
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t j = 0; j < k; j++) {
        int got;
        memcpy(&got, CMSG_DATA(c) + j * sizeof(int), sizeof(int));
        if (ans->fd < 0)
          ans->fd = got;
        else
          close(got);
        ans->nfds++;
      }
    }
    if (n == 0)
      break;
    FUZZ_CHECK(ans->len + (size_t)n <= sizeof(ans->bytes));
    memcpy(ans->bytes + ans->len, b, (size_t)n);
    ans->len += (size_t)n;
  }
  close(fd);
}

static int32_t le32(const uint8_t *b) {
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                   (uint32_t)b[3] << 24);
}

/* What the server must answer to msg, given whether the token is unused. */
static void check_answer(const answer_t *a, const uint8_t *msg, size_t len,
                         const uint8_t *token, int unused) {
  if (len < CHIME__HANDOFF_REQUEST_BYTES ||
      memcmp(msg, CHIME__HANDOFF_MAGIC, CHIME__HANDOFF_MAGIC_BYTES) != 0) {
    FUZZ_CHECK(a->len == 0 && a->nfds == 0);
    return;
  }
  FUZZ_CHECK(a->len == CHIME__HANDOFF_STATUS_BYTES);
  if (unused && memcmp(msg + CHIME__HANDOFF_MAGIC_BYTES, token,
                       CHIME__HANDOFF_TOKEN_BYTES) == 0) {
    FUZZ_CHECK(le32(a->bytes) == 0 && a->nfds == 1);
    struct stat x, y;
    FUZZ_CHECK(fstat(a->fd, &x) == 0 && fstat(ring_memfd, &y) == 0);
    FUZZ_CHECK(x.st_dev == y.st_dev && x.st_ino == y.st_ino);
  } else {
    FUZZ_CHECK(le32(a->bytes) == CHIME_EPERM && a->nfds == 0);
  }
}

/* The watch takes the handshake's reference and hold after the answer's
 * EOF (handoff.c shuts the connection down first, so the learner can read
 * on) and gives them back once the learner read it all, on its sweep: wait
 * for that, 10 s at most. */
static void wait_returned(void) {
  for (int i = 0; i < 100000 && (atomic_load(&stream.refs) != 1 ||
                                 atomic_load(&stream.holds) != 0);
       i++)
    usleep(100);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ho == NULL)
    setup();
  const uint8_t *cuts;
  size_t ncuts;
  size_t skip = fuzz_cuts(data, size, &cuts, &ncuts);
  if (skip == 0 || size < skip + 1)
    return 0;
  uint8_t flags = data[skip];
  size_t len = size - skip - 1;
  uint8_t *msg = malloc(len ? len : 1);
  FUZZ_CHECK(msg != NULL);
  memcpy(msg, data + skip + 1, len);

  uint8_t token[CHIME__HANDOFF_TOKEN_BYTES];
  uint64_t deadline;
  FUZZ_CHECK(chime__handoff_issue(ho, &stream, 60000, token, &deadline) == 0);
  if ((flags & 1) && len >= CHIME__HANDOFF_REQUEST_BYTES)
    memcpy(msg + CHIME__HANDOFF_MAGIC_BYTES, token, sizeof(token));
  if ((flags & 2) && len >= CHIME__HANDOFF_MAGIC_BYTES)
    memcpy(msg, CHIME__HANDOFF_MAGIC, CHIME__HANDOFF_MAGIC_BYTES);
  int valid =
      len >= CHIME__HANDOFF_REQUEST_BYTES &&
      memcmp(msg, CHIME__HANDOFF_MAGIC, CHIME__HANDOFF_MAGIC_BYTES) == 0 &&
      memcmp(msg + CHIME__HANDOFF_MAGIC_BYTES, token, sizeof(token)) == 0;
  int attached0 = atomic_load(&stream.attached);

  fuzz_piece_t pieces[FUZZ_MAX_PIECES];
  size_t n = fuzz_split(msg, len, cuts, ncuts, pieces);
  answer_t a;
  exchange(pieces, n, &a);
  check_answer(&a, msg, len, token, 1);
  if (a.fd >= 0)
    close(a.fd);
  if (flags & 4) {
    exchange(pieces, n, &a);
    check_answer(&a, msg, len, token, !valid);
    if (a.fd >= 0)
      close(a.fd);
  }
  fuzz_pieces_free(pieces, n);

  /* Consumed by the request that presented it, and only then. */
  FUZZ_CHECK(chime__handoff_pending(ho, &stream) == !valid);
  FUZZ_CHECK(chime__handoff_revoke(ho, &stream) == !valid);
  wait_returned();
  FUZZ_CHECK(atomic_load(&stream.attached) - attached0 == valid);
  /* Every reference and hold came back; the learner (alive) was never
   * taken for dead. */
  FUZZ_CHECK(atomic_load(&stream.refs) == 1);
  FUZZ_CHECK(atomic_load(&stream.holds) == 0);
  FUZZ_CHECK(atomic_load(&stream.kills) == 0);
  free(msg);
  return 0;
}
