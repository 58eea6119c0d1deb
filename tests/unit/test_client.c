/* Client pieces that need no server: the handoff client against an in-test
 * Unix socket server, chunks into a local ring, the sample pattern, and the
 * status mapping. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/internal.h"
#include "client/stream.h"
#include "wire/chunk.h"
#include "pattern.h"

/* ------------------------------------------------------------ handoff */

typedef enum {
  SRV_OK,      /* status 0 + one memfd */
  SRV_REFUSE,  /* status CHIME_EPERM, no fd */
  SRV_CLOSE,   /* close without answering */
  SRV_NO_FD,   /* status 0, no fd */
  SRV_TWO_FDS, /* status 0 + two fds */
  SRV_SILENT,  /* never answer (client times out) */
  SRV_SPLIT,   /* status in two writes, fd with the first */
  SRV_RESET,   /* the first connection closed with its request unread, the
                  second served */
} srv_behaviour_t;

typedef struct {
  int listen_fd;
  srv_behaviour_t how;
  uint8_t hello[24]; /* what the client sent */
  size_t hello_len;
  int release_fd; /* SRV_SILENT: closed by the test to end the thread */
  int resets;     /* SRV_RESET: connections closed unread */
} srv_t;

static const uint8_t token[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                  9, 10, 11, 12, 13, 14, 15, 16};

static int make_memfd(const char *text) {
  int fd = memfd_create("chime-test", MFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  return fd;
}

static void send_status(int c, int32_t status, const int *fds, int nfds,
                        size_t bytes) {
  uint8_t st[4] = {(uint8_t)status, (uint8_t)(status >> 8),
                   (uint8_t)(status >> 16), (uint8_t)(status >> 24)};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 2)];
  } ctrl;
  struct iovec iov = {st, bytes};
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds) {
    msg.msg_control = ctrl.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
  }
  (void)sendmsg(c, &msg, MSG_NOSIGNAL);
  if (bytes < 4)
    (void)send(c, st + bytes, 4 - bytes, MSG_NOSIGNAL);
}

static void *srv_main(void *arg) {
  srv_t *s = arg;
  int c = accept(s->listen_fd, NULL, NULL);
  if (c < 0)
    return NULL;
  if (s->how == SRV_RESET) {
    /* The request arrives and is left unread when the connection closes,
     * as when chimed makes the idlest handshake give way (a flood of its
     * uid) just before the request comes: the client reads ECONNRESET. */
    struct pollfd p = {c, POLLIN, 0};
    (void)poll(&p, 1, 10000);
    close(c);
    s->resets++;
    struct pollfd l = {s->listen_fd, POLLIN, 0};
    if (poll(&l, 1, 10000) != 1) /* a client that does not come back */
      return NULL;
    c = accept(s->listen_fd, NULL, NULL);
    if (c < 0)
      return NULL;
  }
  while (s->hello_len < sizeof(s->hello)) {
    ssize_t k =
        read(c, s->hello + s->hello_len, sizeof(s->hello) - s->hello_len);
    if (k <= 0)
      break;
    s->hello_len += (size_t)k;
  }
  int fds[2] = {make_memfd("ring bytes"), make_memfd("other")};
  switch (s->how) {
  case SRV_OK:
    send_status(c, 0, fds, 1, 4);
    break;
  case SRV_REFUSE:
    send_status(c, CHIME_EPERM, NULL, 0, 4);
    break;
  case SRV_CLOSE:
    break;
  case SRV_NO_FD:
    send_status(c, 0, NULL, 0, 4);
    break;
  case SRV_TWO_FDS:
    send_status(c, 0, fds, 2, 4);
    break;
  case SRV_SILENT: {
    char b;
    (void)read(s->release_fd, &b, 1); /* until the test lets go */
    break;
  }
  case SRV_SPLIT:
    send_status(c, 0, fds, 1, 1);
    break;
  case SRV_RESET:
    send_status(c, 0, fds, 1, 4);
    break;
  }
  close(fds[0]);
  close(fds[1]);
  close(c);
  return NULL;
}

/* Listens on an abstract (abstract != 0) or filesystem socket. */
static void srv_listen(srv_t *s, char *path, size_t len, int abstract) {
  static int n;
  if (abstract)
    snprintf(path, len, "@chime-test-%d-%d", (int)getpid(), n++);
  else
    snprintf(path, len, "/tmp/chime-test-%d-%d.sock", (int)getpid(), n++);
  struct sockaddr_un a;
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  size_t plen = strlen(path);
  memcpy(a.sun_path, path, plen);
  if (abstract)
    a.sun_path[0] = '\0';
  else
    unlink(path);
  s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s->listen_fd >= 0);
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen +
                               (abstract ? 0 : 1));
  assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&a, alen), 0);
  assert_int_equal(listen(s->listen_fd, 4), 0);
}

static int count_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 1024; fd++)
    if (fcntl(fd, F_GETFD) >= 0)
      n++;
  return n;
}

/* Runs one handoff against a server behaving as `how`. */
static int run_handoff(srv_behaviour_t how, int abstract, int timeout_ms,
                       int *fd, char *err, size_t errlen, srv_t *srv) {
  char path[108];
  memset(srv, 0, sizeof(*srv));
  srv->how = how;
  int rel[2];
  assert_int_equal(pipe(rel), 0);
  srv->release_fd = rel[0];
  srv_listen(srv, path, sizeof(path), abstract);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, srv_main, srv), 0);
  int rc = chime__handoff_fetch(path, token, sizeof(token), timeout_ms, fd, err,
                                errlen);
  close(rel[1]);
  pthread_join(t, NULL);
  close(rel[0]);
  close(srv->listen_fd);
  if (!abstract)
    unlink(path);
  return rc;
}

static void test_handoff_ok(void **state) {
  (void)state;
  for (int abstract = 0; abstract < 2; abstract++) {
    srv_t srv;
    char err[256] = "";
    int fd = -1;
    int rc = run_handoff(SRV_OK, abstract, 5000, &fd, err, sizeof(err), &srv);
    assert_int_equal(rc, 0);
    assert_true(fd >= 0);
    assert_int_equal(srv.hello_len, 24);
    assert_memory_equal(srv.hello, "CHIMEHO1", 8);
    assert_memory_equal(srv.hello + 8, token, 16);
    char buf[32] = "";
    assert_int_equal(pread(fd, buf, sizeof(buf), 0), 10);
    assert_string_equal(buf, "ring bytes");
    close(fd);
  }
}

static void test_handoff_status_split_from_fd(void **state) {
  (void)state;
  srv_t srv;
  char err[256] = "";
  int fd = -1;
  assert_int_equal(run_handoff(SRV_SPLIT, 1, 5000, &fd, err, sizeof(err), &srv),
                   0);
  assert_true(fd >= 0);
  close(fd);
}

/* A handshake closed with its request unread never consumed the token: the
 * client tries again on a new connection and attaches (under a flood of its
 * own uid on a loaded machine, test_e2e_lockout failed with "waiting for
 * the answer: Connection reset by peer"). */
static void test_handoff_retried_after_reset(void **state) {
  (void)state;
  srv_t srv;
  char err[256] = "";
  int fd = -1;
  int rc = run_handoff(SRV_RESET, 1, 10000, &fd, err, sizeof(err), &srv);
  if (rc != 0)
    fail_msg("handoff after a reset: %s: %s", chime_err_name(rc), err);
  assert_true(fd >= 0);
  assert_int_equal(srv.resets, 1);
  assert_int_equal(srv.hello_len, 24);
  close(fd);
}

static void test_handoff_failures(void **state) {
  (void)state;
  /* Only the silent server waits out its timeout; the others answer, so
   * theirs is generous (a loaded machine ran a 200 ms one out first). */
  const struct {
    srv_behaviour_t how;
    int want;
    const char *text;
    int timeout_ms;
  } cases[] = {
      {SRV_REFUSE, CHIME_EPERM, "permission denied", 10000},
      {SRV_CLOSE, CHIME_EPROTO, "closed the connection", 10000},
      {SRV_NO_FD, CHIME_EPROTO, "no descriptor", 10000},
      {SRV_TWO_FDS, CHIME_EPROTO, "exactly one descriptor", 10000},
      {SRV_SILENT, CHIME_ETIMEDOUT, "waiting for the answer", 200},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int before = count_fds();
    srv_t srv;
    char err[256] = "";
    int fd = -1;
    int rc = run_handoff(cases[i].how, 1, cases[i].timeout_ms, &fd, err,
                         sizeof(err), &srv);
    assert_int_equal(rc, cases[i].want);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(err, cases[i].text));
    /* Nothing the server passed stays open in this process. */
    assert_int_equal(count_fds(), before);
  }
}

static void test_handoff_no_server(void **state) {
  (void)state;
  char err[256] = "";
  int fd = -1;
  int rc = chime__handoff_fetch("@chime-test-nobody-listens", token,
                                sizeof(token), 1000, &fd, err, sizeof(err));
  assert_int_equal(rc, CHIME_EUNAVAILABLE);
  assert_int_equal(fd, -1);
  assert_non_null(strstr(err, "cannot connect"));
  rc = chime__handoff_fetch("", token, sizeof(token), 1000, &fd, err,
                            sizeof(err));
  assert_int_equal(rc, CHIME_EPROTO);
  rc = chime__handoff_fetch("@x", token, 8, 1000, &fd, err, sizeof(err));
  assert_int_equal(rc, CHIME_EPROTO);
}

/* ------------------------------------------------------------ remote */

typedef struct {
  chime_spec_t spec;
  chime_ring_t *ring;
  chime__remote_t r;
  uint64_t slot_seq[4];
  uint64_t send_bytes;
} remote_fx_t;

static void remote_setup(remote_fx_t *fx, uint64_t credits) {
  memset(fx, 0, sizeof(*fx));
  assert_int_equal(chime_spec_parse(&fx->spec, "obs:f32[64],action:i32[],"
                                               "reward:f32[]"),
                   0);
  assert_int_equal(chime__ring_create(&fx->ring, &fx->spec, 4, 4), 0);
  const chime_ring_layout_t *l = chime_ring_layout(fx->ring);
  fx->send_bytes = l->info_offset + 4 * sizeof(chime_sample_info_t);
  fx->r.ring = fx->ring;
  fx->r.send_bytes = fx->send_bytes;
  fx->r.slot_seq = fx->slot_seq;
  atomic_store(&fx->r.granted, credits);
}

/* A chunk message cut into slices at `cuts` (offsets into the message). */
static grpc_byte_buffer *chunk_bb(uint64_t seq, uint64_t off, uint64_t total,
                                  const uint8_t *data, size_t len,
                                  const size_t *cuts, size_t ncuts) {
  uint8_t *msg = malloc(CHIME_CHUNK_HEADER_MAX + len);
  size_t h = chime__chunk_header_encode(msg, seq, off, total, len);
  memcpy(msg + h, data, len);
  size_t n = h + len;
  grpc_slice slices[16];
  size_t ns = 0, at = 0;
  for (size_t i = 0; i < ncuts && ns < 15; i++) {
    if (cuts[i] <= at || cuts[i] >= n)
      continue;
    slices[ns++] =
        grpc_slice_from_copied_buffer((char *)msg + at, cuts[i] - at);
    at = cuts[i];
  }
  slices[ns++] = grpc_slice_from_copied_buffer((char *)msg + at, n - at);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, ns);
  for (size_t i = 0; i < ns; i++)
    grpc_slice_unref(slices[i]);
  free(msg);
  return bb;
}

static int feed(remote_fx_t *fx, uint64_t seq, uint64_t off, uint64_t total,
                const uint8_t *data, size_t len, const size_t *cuts,
                size_t ncuts, char *err, size_t errlen) {
  grpc_byte_buffer *bb = chunk_bb(seq, off, total, data, len, cuts, ncuts);
  int rc = chime__remote_chunk(&fx->r, bb, err, errlen);
  grpc_byte_buffer_destroy(bb);
  return rc;
}

static void test_remote_assembles_batches(void **state) {
  (void)state;
  remote_fx_t fx;
  remote_setup(&fx, 2);
  uint8_t *img = malloc(fx.send_bytes);
  char err[256] = "";
  for (uint64_t seq = 0; seq < 2; seq++) {
    for (uint64_t i = 0; i < fx.send_bytes; i++)
      img[i] = (uint8_t)(i * 31 + seq);
    /* Three chunks; slices cut inside the header and the payload. */
    uint64_t a = 5, b = fx.send_bytes / 2;
    const size_t cuts[] = {1, 3, 7, 40, 200};
    assert_int_equal(
        feed(&fx, seq, 0, fx.send_bytes, img, a, cuts, 5, err, sizeof(err)), 0);
    assert_int_equal(feed(&fx, seq, a, fx.send_bytes, img + a, b - a, cuts, 5,
                          err, sizeof(err)),
                     0);
    chime_ring_view_t v;
    assert_int_equal(chime_ring_next(fx.ring, &v, 0), CHIME_ETIMEDOUT);
    assert_int_equal(feed(&fx, seq, b, fx.send_bytes, img + b,
                          fx.send_bytes - b, cuts, 5, err, sizeof(err)),
                     0);
    assert_int_equal(chime_ring_next(fx.ring, &v, 0), 0);
    assert_memory_equal(chime_ring_slot_base(fx.ring, v.slot), img,
                        fx.send_bytes);
    assert_int_equal(fx.r.batches, seq + 1);
    /* Held, not released: the second batch uses the second credit. */
  }
  /* No credit left: a third batch is a protocol error. */
  assert_int_equal(
      feed(&fx, 2, 0, fx.send_bytes, img, 8, NULL, 0, err, sizeof(err)),
      CHIME_EPROTO);
  assert_non_null(strstr(err, "credits"));
  free(img);
  chime_ring_destroy(fx.ring);
}

static void test_remote_rejects_bad_chunks(void **state) {
  (void)state;
  remote_fx_t fx;
  remote_setup(&fx, 8);
  uint8_t data[64] = {0};
  char err[256] = "";
  /* Wrong total. */
  assert_int_equal(
      feed(&fx, 0, 0, fx.send_bytes + 1, data, 8, NULL, 0, err, sizeof(err)),
      CHIME_EPROTO);
  /* A batch that does not start at 0. */
  assert_int_equal(
      feed(&fx, 0, 8, fx.send_bytes, data, 8, NULL, 0, err, sizeof(err)),
      CHIME_EPROTO);
  /* A gap, and a different seq mid-batch. */
  assert_int_equal(
      feed(&fx, 0, 0, fx.send_bytes, data, 8, NULL, 0, err, sizeof(err)), 0);
  assert_int_equal(
      feed(&fx, 0, 16, fx.send_bytes, data, 8, NULL, 0, err, sizeof(err)),
      CHIME_EPROTO);
  assert_non_null(strstr(err, "expected batch 0 at offset 8"));
  assert_int_equal(
      feed(&fx, 1, 8, fx.send_bytes, data, 8, NULL, 0, err, sizeof(err)),
      CHIME_EPROTO);
  /* Not a chunk at all: a notice. */
  Chime__V1__Notice notice = CHIME__V1__NOTICE__INIT;
  notice.message = "shutting down";
  notice.code = 14;
  Chime__V1__SubscribeResponse r = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
  r.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE;
  r.notice = &notice;
  grpc_byte_buffer *bb = chime__pack(&r.base);
  assert_int_equal(chime__remote_chunk(&fx.r, bb, err, sizeof(err)),
                   CHIME_ENOTFOUND);
  grpc_byte_buffer_destroy(bb);
  chime__remote_abandon(&fx.r);
  assert_int_equal(fx.r.active, 0);
  chime_ring_destroy(fx.ring);
}

/* --------------------------------------------------- ragged batches */

/* A ragged batch as its sender's slot holds it and as it goes on the wire,
 * written out here by hand from docs/protocol.md ("With ragged leaves"):
 * the tail (offsets, info) first, then each leaf's used bytes. */
#define RAG_SPEC "tok:i32[<=16], lp:f32[<=16 ~tok], fr:u8[<=2,3], r:f32[]"
#define RAG_B 4

typedef struct {
  remote_fx_t fx;
  chime_ring_layout_t lay;
  uint8_t *slot; /* the sender's */
  uint8_t wire[8192];
  uint64_t tail, nwire;
} rag_fx_t;

static void rag_wire_add(rag_fx_t *x, uint64_t off, uint64_t len) {
  assert_true(x->nwire + len <= sizeof(x->wire));
  memcpy(x->wire + x->nwire, x->slot + off, len);
  x->nwire += len;
}

static void rag_setup(rag_fx_t *x, uint64_t credits) {
  remote_fx_t *fx = &x->fx;
  memset(x, 0, sizeof(*x));
  assert_int_equal(chime_spec_parse(&fx->spec, RAG_SPEC), 0);
  assert_int_equal(chime__ring_create(&fx->ring, &fx->spec, RAG_B, 4), 0);
  x->lay = *chime_ring_layout(fx->ring);
  fx->send_bytes = x->lay.info_offset + RAG_B * sizeof(chime_sample_info_t);
  fx->r.ring = fx->ring;
  fx->r.send_bytes = fx->send_bytes;
  fx->r.slot_seq = fx->slot_seq;
  chime__remote_set_spec(&fx->r, &fx->spec);
  atomic_store(&fx->r.granted, credits);
  x->tail = x->lay.offsets_offset[0];
  assert_int_equal(fx->r.tail, x->tail);

  x->slot = calloc(1, x->lay.slot_bytes);
  for (uint64_t i = 0; i < x->lay.slot_bytes; i++)
    x->slot[i] = (uint8_t)(i * 7 + 1); /* stale past the rows used, too */
  const int64_t tok[RAG_B + 1] = {0, 3, 3, 19, 24}; /* 3, 0, 16, 5 */
  const int64_t fr[RAG_B + 1] = {0, 1, 3, 3, 5};
  memcpy(x->slot + x->lay.offsets_offset[0], tok, sizeof(tok));
  memcpy(x->slot + x->lay.offsets_offset[1], tok, sizeof(tok));
  memcpy(x->slot + x->lay.offsets_offset[2], fr, sizeof(fr));
  rag_wire_add(x, x->tail, fx->send_bytes - x->tail);
  rag_wire_add(x, x->lay.leaf_offset[0], 24 * 4);
  rag_wire_add(x, x->lay.leaf_offset[1], 24 * 4);
  rag_wire_add(x, x->lay.leaf_offset[2], 5 * 3);
  rag_wire_add(x, x->lay.leaf_offset[3], RAG_B * 4);
}

static void rag_teardown(rag_fx_t *x) {
  chime__remote_abandon(&x->fx.r);
  chime_ring_destroy(x->fx.ring);
  free(x->slot);
}

/* Whether bytes [off, off + len) of local slot `slot` are all zero (as a
 * new ring's are): nothing was written there. */
static int zero_at(rag_fx_t *x, uint32_t slot, uint64_t off, uint64_t len) {
  const uint8_t *p = (const uint8_t *)chime_ring_slot_base(x->fx.ring, slot);
  for (uint64_t i = 0; i < len; i++)
    if (p[off + i] != 0)
      return 0;
  return 1;
}

static void test_remote_places_ragged_rows(void **state) {
  (void)state;
  rag_fx_t x;
  rag_setup(&x, 2);
  char err[256] = "";
  /* Chunks that end inside the tail, straddle its end and cut the leaves;
   * slices cut inside the header and the payload. */
  uint64_t tail_len = x.fx.send_bytes - x.tail;
  uint64_t cut[] = {0, 40, tail_len + 10, x.nwire - 7, x.nwire};
  const size_t cuts[] = {1, 3, 9, 50};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(x.fx.r.batches, 0);
    int rc = feed(&x.fx, 5, cut[i], x.nwire, x.wire + cut[i],
                  cut[i + 1] - cut[i], cuts, 4, err, sizeof(err));
    if (rc != 0)
      fail_msg("chunk %d: %s", i, err);
  }
  assert_int_equal(x.fx.r.batches, 1);
  assert_int_equal(atomic_load(&x.fx.r.bytes), x.nwire);
  chime_ring_view_t v;
  assert_int_equal(chime_ring_next(x.fx.ring, &v, 0), 0);
  const uint8_t *got = chime_ring_slot_base(x.fx.ring, v.slot);
  /* The slot the sender had, where it used it; nothing past that. */
  assert_memory_equal(got + x.tail, x.slot + x.tail, tail_len);
  const uint64_t used[4] = {24 * 4, 24 * 4, 5 * 3, RAG_B * 4};
  for (int l = 0; l < 4; l++) {
    assert_memory_equal(got + x.lay.leaf_offset[l],
                        x.slot + x.lay.leaf_offset[l], used[l]);
    assert_true(zero_at(&x, v.slot, x.lay.leaf_offset[l] + used[l],
                        x.lay.leaf_bytes[l] - used[l]));
  }
  const int64_t *offs = (const int64_t *)(got + x.lay.offsets_offset[0]);
  assert_int_equal(offs[RAG_B], 24);
  assert_int_equal(chime_ring_release(x.fx.ring, v.slot), 0);
  rag_teardown(&x);
}

/* One lie of a sender: the chunk carrying the whole batch (total as given,
 * 0: the bytes it holds) is refused with a message holding want, and nothing
 * lands in any leaf. */
static void rag_refused(uint64_t total, void (*lie)(rag_fx_t *),
                        const char *want) {
  rag_fx_t x;
  rag_setup(&x, 2);
  if (lie != NULL) { /* the tail on the wire carries the lie */
    lie(&x);
    memcpy(x.wire, x.slot + x.tail, x.fx.send_bytes - x.tail);
  }
  char err[256] = "";
  if (total == 0)
    total = x.nwire;
  uint64_t len = total < x.nwire ? total : x.nwire;
  assert_int_equal(
      feed(&x.fx, 0, 0, total, x.wire, len, NULL, 0, err, sizeof(err)),
      CHIME_EPROTO);
  if (strstr(err, want) == NULL)
    fail_msg("refused with '%s', not '%s'", err, want);
  for (int l = 0; l < 4; l++)
    assert_true(
        zero_at(&x, x.fx.r.w.slot, x.lay.leaf_offset[l], x.lay.leaf_bytes[l]));
  rag_teardown(&x);
}

static void put_off(rag_fx_t *x, uint32_t leaf, uint32_t j, int64_t v) {
  memcpy(x->slot + x->lay.offsets_offset[leaf] + j * sizeof(int64_t), &v,
         sizeof(v));
}
static void lie_first(rag_fx_t *x) {
  put_off(x, 2, 0, 1);
}
static void lie_decreasing(rag_fx_t *x) {
  put_off(x, 2, 2, 0);
}
static void lie_past_bound(rag_fx_t *x) {
  put_off(x, 2, 1, 3); /* frames: at most 2 rows a sample */
}
static void lie_past_batch(rag_fx_t *x) {
  put_off(x, 0, RAG_B, INT64_MAX); /* and past the leaf's whole region */
  put_off(x, 1, RAG_B, INT64_MAX);
}
static void lie_unshared(rag_fx_t *x) {
  put_off(x, 1, 1, 2);
}

static void test_remote_refuses_lying_ragged(void **state) {
  (void)state;
  rag_fx_t x;
  rag_setup(&x, 2);
  uint64_t tail_len = x.fx.send_bytes - x.tail, send = x.fx.send_bytes;
  uint64_t nwire = x.nwire;
  rag_teardown(&x);
  /* Totals no ragged batch can have: less than its tail, more than the
   * slot's prefix. */
  rag_refused(tail_len - 1, NULL, "bytes per batch");
  rag_refused(send + 1, NULL, "bytes per batch");
  /* A total the offsets do not add up to, either way. */
  rag_refused(nwire + 4, NULL, "its offsets say");
  rag_refused(nwire - 4, NULL, "its offsets say");
  /* Offsets that do not hold. */
  rag_refused(0, lie_first, "offsets[0] is 1");
  rag_refused(0, lie_decreasing, "sample 1 has offsets 1..0");
  rag_refused(0, lie_past_bound, "sample 0 has offsets 0..3, not 0..2");
  rag_refused(0, lie_past_batch, "leaf 'tok': sample 3");
  rag_refused(0, lie_unshared, "offsets unlike those of 'tok'");

  /* A total that changes mid-batch. */
  rag_setup(&x, 2);
  char err[256] = "";
  assert_int_equal(
      feed(&x.fx, 0, 0, x.nwire, x.wire, 16, NULL, 0, err, sizeof(err)), 0);
  assert_int_equal(feed(&x.fx, 0, 16, x.nwire + 8, x.wire + 16, 16, NULL, 0,
                        err, sizeof(err)),
                   CHIME_EPROTO);
  assert_non_null(strstr(err, "bytes per batch"));
  rag_teardown(&x);
}

/* ------------------------------------------------------------ pattern */

/* Lays samples out leaf-major like a ring slot and returns a batch view. */
static uint8_t *make_batch(const chime_spec_t *spec, const uint64_t *ids,
                           uint32_t n, chime_batch_t *b) {
  uint64_t sb = chime_spec_sample_bytes(spec);
  uint8_t *mem = calloc(n, sb);
  uint8_t *sample = malloc(sb);
  memset(b, 0, sizeof(*b));
  b->count = n;
  b->nleaves = spec->nleaves;
  uint64_t leaf_base = 0;
  for (uint32_t l = 0; l < spec->nleaves; l++) {
    b->leaf[l].name = spec->leaves[l].name;
    b->leaf[l].bytes = n * chime_leaf_bytes(&spec->leaves[l]);
    b->leaf[l].data = mem + leaf_base;
    leaf_base += b->leaf[l].bytes;
  }
  for (uint32_t i = 0; i < n; i++) {
    chime__pattern_fill(spec, ids[i], sample);
    uint64_t off = 0;
    for (uint32_t l = 0; l < spec->nleaves; l++) {
      uint64_t lb = chime_leaf_bytes(&spec->leaves[l]);
      memcpy((uint8_t *)b->leaf[l].data + i * lb, sample + off, lb);
      off += lb;
    }
  }
  free(sample);
  return mem;
}

static void test_pattern(void **state) {
  (void)state;
  const char *specs[] = {"obs:f32[64],action:i32[],reward:f32[]",
                         "a:u64[],b:u8[3],c:f64[5],d:bool[13]",
                         "img:u8[9,11],x:i16[]"};
  for (size_t si = 0; si < 3; si++) {
    chime_spec_t spec;
    char err[256];
    assert_int_equal(chime_spec_parse(&spec, specs[si]), 0);
    assert_int_equal(chime__pattern_check_spec(&spec, err, sizeof(err)), 0);
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
      ids[i] = chime__pattern_id(3 + (uint64_t)i % 2, 1000 + (uint64_t)i);
    chime_batch_t b;
    uint8_t *mem = make_batch(&spec, ids, 5, &b);
    uint64_t got[5];
    assert_int_equal(chime__pattern_verify(&b, got, err, sizeof(err)), 0);
    assert_memory_equal(got, ids, sizeof(ids));
    /* Every single flipped byte is caught and located. */
    uint64_t total = 0;
    for (uint32_t l = 0; l < b.nleaves; l++)
      total += b.leaf[l].bytes;
    for (uint64_t off = 8; off < total; off++) {
      mem[off] ^= 0x10;
      assert_int_equal(chime__pattern_verify(&b, NULL, err, sizeof(err)),
                       CHIME_ECORRUPT);
      assert_non_null(strstr(err, "expected"));
      mem[off] ^= 0x10;
    }
    /* A changed id makes its sample's other bytes wrong. */
    mem[0] ^= 1;
    assert_int_equal(chime__pattern_verify(&b, NULL, err, sizeof(err)),
                     CHIME_ECORRUPT);
    free(mem);
  }
  chime_spec_t small;
  char err[256];
  assert_int_equal(chime_spec_parse(&small, "r:f32[],o:f32[8]"), 0);
  assert_int_equal(chime__pattern_check_spec(&small, err, sizeof(err)),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "'r'"));
}

static void test_pattern_ids_differ_by_seed(void **state) {
  (void)state;
  assert_int_not_equal(chime__pattern_id(1, 5), chime__pattern_id(2, 5));
  assert_int_equal(chime__pattern_id(1, 5) >> 40, 1);
  assert_int_equal(chime__pattern_id(1, 5) & CHIME__PATTERN_MAX_INDEX, 5);
}

/* An unreachable server fails fast with a clear error, no crash. */
static void test_unreachable_server(void **state) {
  (void)state;
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.timeout_ms = 300;
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, "unix:/nonexistent/chime.sock", &o),
                   0);
  chime_server_info_t *info = NULL;
  int rc = chime_client_info(c, &info);
  assert_true(rc == CHIME_EUNAVAILABLE || rc == CHIME_ETIMEDOUT);
  assert_null(info);
  assert_non_null(strstr(chime_last_error(), "GetInfo"));
  chime_writer_t *w = NULL;
  assert_int_not_equal(chime_writer_open(&w, c, "demo", NULL), 0);
  assert_null(w);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 4;
  chime_stream_t *s = NULL;
  assert_int_not_equal(chime_stream_open(&s, c, "demo", &so), 0);
  assert_null(s);
  so.batch_size = CHIME_RING_MAX_BATCH + 1;
  assert_int_equal(chime_stream_open(&s, c, "demo", &so), CHIME_EINVAL);
  chime_client_destroy(c);
}

/* Two threads share one client and fail their own calls in lockstep: each
 * reads the detail of its own failure, not the other's. Every round both
 * fail first and then both read, so a detail kept per client (one buffer
 * for both threads) hands one of them the other's sentence every round. */
#define DETAIL_ROUNDS 200

typedef struct {
  chime_client_t *c;
  const char *table;
  pthread_barrier_t *both;
  int wrong_code, wrong_detail;
  char last[256];
} detail_thread_t;

static void *fail_in_lockstep(void *arg) {
  detail_thread_t *t = arg;
  const uint64_t key = 1;
  const double nan = __builtin_nan("");
  char mine[64];
  snprintf(mine, sizeof(mine), "'%s'", t->table);
  if (chime_last_error()[0] != '\0') /* a new thread has failed nothing */
    t->wrong_detail++;
  for (int i = 0; i < DETAIL_ROUNDS; i++) {
    /* Refused before anything is sent: no server is needed. */
    int rc = chime_client_mutate_priorities(t->c, t->table, &key, &nan, 1, NULL,
                                            0, NULL);
    if (rc != CHIME_EINVAL)
      t->wrong_code++;
    pthread_barrier_wait(t->both); /* both failed */
    const char *d = chime_last_error();
    if (strstr(d, mine) == NULL) {
      t->wrong_detail++;
      snprintf(t->last, sizeof(t->last), "%s", d);
    }
    pthread_barrier_wait(t->both); /* both read */
  }
  return NULL;
}

static void test_detail_per_thread_on_shared_client(void **state) {
  (void)state;
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, "127.0.0.1:1", NULL), 0);
  pthread_barrier_t both;
  pthread_barrier_init(&both, NULL, 2);
  detail_thread_t t[2] = {{.c = c, .table = "table_a", .both = &both},
                          {.c = c, .table = "table_b", .both = &both}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, fail_in_lockstep, &t[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&both);
  chime_client_destroy(c);
  for (int i = 0; i < 2; i++) {
    if (t[i].wrong_detail)
      print_error("%s read another thread's detail %d times: \"%s\"\n",
                  t[i].table, t[i].wrong_detail, t[i].last);
    assert_int_equal(t[i].wrong_code, 0);
    assert_int_equal(t[i].wrong_detail, 0);
  }
}

/* Every failing call writes its own sentence, even one refused at its
 * first check: never the previous failure's. */
static void expect_detail(int rc, int want, const char *names) {
  assert_int_equal(rc, want);
  if (strstr(chime_last_error(), names) == NULL)
    fail_msg("detail '%s' does not name '%s'", chime_last_error(), names);
}

static void test_every_failure_sets_detail(void **state) {
  (void)state;
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_writer_t *w = NULL;
  chime_batch_t b;
  chime_stream_local_stats_t ls;
  chime_server_info_t *info = NULL;
  chime_stats_t *st = NULL;
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.token = "has space";
  expect_detail(chime_client_create(&c, "127.0.0.1:1", &o), CHIME_EINVAL,
                "token");
  expect_detail(chime_client_create(&c, NULL, NULL), CHIME_EINVAL,
                "chime_client_create");
  expect_detail(chime_client_info(NULL, &info), CHIME_EINVAL,
                "chime_client_info");
  expect_detail(chime_client_stats(NULL, &st), CHIME_EINVAL,
                "chime_client_stats");
  expect_detail(chime_client_checkpoint(NULL, NULL), CHIME_EINVAL,
                "chime_client_checkpoint");
  expect_detail(
      chime_client_mutate_priorities(NULL, "t", NULL, NULL, 0, NULL, 0, NULL),
      CHIME_EINVAL, "chime_client_mutate_priorities");
  expect_detail(chime_writer_open(&w, NULL, "t", NULL), CHIME_EINVAL,
                "chime_writer_open");
  expect_detail(chime_writer_append(NULL, NULL, 0, 1.0), CHIME_EINVAL,
                "chime_writer_append");
  expect_detail(chime_writer_extend(NULL, NULL, NULL, 0, NULL), CHIME_EINVAL,
                "chime_writer_extend");
  expect_detail(chime_writer_end_episode(NULL), CHIME_EINVAL,
                "chime_writer_end_episode");
  expect_detail(chime_writer_flush(NULL), CHIME_EINVAL, "chime_writer_flush");
  expect_detail(chime_stream_open(&s, NULL, "t", NULL), CHIME_EINVAL,
                "chime_stream_open");
  expect_detail(chime_stream_next(NULL, &b, 0), CHIME_EINVAL,
                "chime_stream_next");
  expect_detail(chime_stream_stats(NULL, &ls), CHIME_EINVAL,
                "chime_stream_stats");
  expect_detail(chime_server_create(NULL, NULL), CHIME_EINVAL,
                "chime_server_create");
  expect_detail(chime_server_start(NULL), CHIME_EINVAL, "chime_server_start");
  expect_detail(chime_server_listen(NULL, NULL, 0), CHIME_EINVAL,
                "chime_server_listen");
  /* A call that succeeds leaves the detail as it was (errno's rule). */
  assert_int_equal(chime_client_create(&c, "127.0.0.1:1", NULL), 0);
  assert_non_null(strstr(chime_last_error(), "chime_server_listen"));
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = CHIME_RING_MAX_BATCH + 1;
  expect_detail(chime_stream_open(&s, c, "t", &so), CHIME_EINVAL, "batch_size");
  /* The sentinel rule (chime.h): 0 is a default, a negative duration
   * means only what its field says. */
  so = (chime_stream_opts_t)CHIME_STREAM_OPTS_INIT;
  so.open_timeout_ms = -1;
  expect_detail(chime_stream_open(&s, c, "t", &so), CHIME_EINVAL,
                "open_timeout_ms");
  chime_client_t *c2 = NULL;
  chime_client_opts_t co = CHIME_CLIENT_OPTS_INIT;
  co.timeout_ms = -5;
  expect_detail(chime_client_create(&c2, "127.0.0.1:1", &co), CHIME_EINVAL,
                "timeout_ms");
  assert_null(c2);
  chime_writer_t *w2 = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.timeout_ms = -1;
  expect_detail(chime_writer_open(&w2, c, "t", &wo), CHIME_EINVAL,
                "timeout_ms");
  assert_null(w2);
  chime_client_destroy(c);
}

/* A stream-mode ring's slots cover twice 10 Gb/s x the round trip
 * (docs/remote.md, "Enough in flight"), bounded by max_inflight and the
 * ring's most slots, never under the asked ones; a local round trip (under
 * 0.5 ms) keeps the asked ones. */
static void test_window_slots(void **state) {
  (void)state;
  const uint64_t mib = 1u << 20, cap = 64 * mib;
  /* 10 ms: 25 MB, 381 batches of 64 KiB lent, + 1 slot, + 1 for the
   * remainder */
  assert_int_equal(chime__window_slots(8, 65536, 10000000, cap, 1),
                   25000000 / 65536 + 2);
  assert_int_equal(chime__window_slots(8, mib, 10000000, cap, 1),
                   25000000 / mib + 2);
  /* 50 ms wants 125 MB: max_inflight's 64 MiB */
  assert_int_equal(chime__window_slots(8, mib, 50000000, cap, 1), 64 + 2);
  /* 16 MiB batches at 1 ms need fewer than asked */
  assert_int_equal(chime__window_slots(8, 16 * mib, 1000000, cap, 1), 8);
  /* local: as asked, whatever the batch */
  assert_int_equal(chime__window_slots(8, 64, 400000, cap, 1), 8);
  /* max_inflight at or under the asked window: as asked */
  assert_int_equal(chime__window_slots(8, 65536, 10000000, 1, 1), 8);
  /* tiny batches: the ring's most slots */
  assert_int_equal(chime__window_slots(8, 64, 10000000, cap, 1),
                   CHIME_RING_MAX_SLOTS);
  /* a stalled server's round trip counts as 10 s at most */
  assert_int_equal(chime__window_slots(8, mib, UINT64_MAX, cap, 1), 64 + 2);
  /* 4 connections of 16 MiB batches at 10 ms: two batches each would be
   * 128 MiB, max_inflight's 64 MiB (4 batches) + 2 */
  assert_int_equal(chime__window_slots(4, 16 * mib, 10000000, cap, 1), 4);
  assert_int_equal(chime__window_slots(4, 16 * mib, 10000000, cap, 4), 6);
  assert_int_equal(chime__window_slots(4, 16 * mib, 10000000, 256 * mib, 4),
                   8 + 2);
  /* 1 MiB at 1 ms over 4: 8 batches, more than the round trip wants */
  assert_int_equal(chime__window_slots(8, mib, 1000000, cap, 4), 8 + 2);
  /* a local round trip keeps the asked slots, connections or not */
  assert_int_equal(chime__window_slots(4, 16 * mib, 400000, cap, 4), 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_slots),
      cmocka_unit_test(test_handoff_ok),
      cmocka_unit_test(test_handoff_status_split_from_fd),
      cmocka_unit_test(test_handoff_retried_after_reset),
      cmocka_unit_test(test_handoff_failures),
      cmocka_unit_test(test_handoff_no_server),
      cmocka_unit_test(test_remote_assembles_batches),
      cmocka_unit_test(test_remote_rejects_bad_chunks),
      cmocka_unit_test(test_remote_places_ragged_rows),
      cmocka_unit_test(test_remote_refuses_lying_ragged),
      cmocka_unit_test(test_pattern),
      cmocka_unit_test(test_pattern_ids_differ_by_seed),
      cmocka_unit_test(test_unreachable_server),
      cmocka_unit_test(test_detail_per_thread_on_shared_client),
      cmocka_unit_test(test_every_failure_sets_detail),
  };
  grpc_init();
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  grpc_shutdown_blocking();
  return rc;
}
