/* The handoff socket of an in-process server: a token works once, wrong,
 * replayed, expired and garbage requests get nothing (and break nothing), the
 * fd passed is the ring, a Subscribe call that ends returns its budget once
 * this process let go of the ring, and a filesystem socket's mode. */
#include <grpc/grpc.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "chime/ring.h"
#include "rawcall.h"

static chime_server_t *srv;
static grpc_channel *ch;
static char cfg_path[] = "/tmp/chime-test-handoff-XXXXXX";

static int setup(void **state) {
  char bound[300];
  static const char cfg[] =
      "{\"listen\": \"127.0.0.1:0\", \"handoff_expires_ms\": 300,"
      " \"tables\": [{\"name\": \"demo\", \"spec\": \"x:u8[100]\","
      " \"capacity\": 64, \"sampler\": \"fifo\"}]}";
  (void)state;
  int fd = mkstemp(cfg_path);
  if (fd < 0 || write(fd, cfg, sizeof(cfg) - 1) != (ssize_t)sizeof(cfg) - 1)
    return -1;
  close(fd);
  chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
  o.config_path = cfg_path;
  if (chime_server_create(&srv, &o) != 0 ||
      chime_server_listen(srv, bound, sizeof(bound)) != 0) {
    fprintf(stderr, "server: %s\n", chime_last_error());
    return -1;
  }
  grpc_init();
  ch = chime__raw_channel(bound);
  return ch != NULL ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  grpc_channel_destroy(ch);
  chime_server_destroy(srv);
  grpc_shutdown_blocking();
  unlink(cfg_path);
  return 0;
}

typedef struct {
  chime__raw_t r;
  char path[108];
  uint8_t token[16];
  uint8_t nonce[16];
} sub_t;

static void subscribe_shm(sub_t *s) {
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)"demo";
  open.batch_size = 4;
  open.slots = 4;
  open.mode = CHIME__V1__MODE__MODE_SHM;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_start(&s->r, ch, "/chime.v1.Chime/Subscribe", 60000), 0);
  assert_int_equal(chime__raw_send(&s->r, &req.base), 0);
  assert_int_equal(
      chime__raw_recv_msg(&s->r, &chime__v1__subscribe_response__descriptor, &m,
                          20000),
      0);
  assert_non_null(m);
  Chime__V1__SubscribeResponse *resp = (Chime__V1__SubscribeResponse *)m;
  assert_int_equal(resp->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  Chime__V1__Handoff *h = resp->opened->handoff;
  assert_non_null(h);
  assert_int_equal(h->token.len, 16);
  assert_int_equal(h->nonce.len, 16);
  assert_true(h->socket_path[0] == '@');
  assert_true(strlen(h->socket_path) < sizeof(s->path));
  snprintf(s->path, sizeof(s->path), "%s", h->socket_path);
  memcpy(s->token, h->token.data, 16);
  memcpy(s->nonce, h->nonce.data, 16);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* Sends len bytes; returns the int32 reply (and *fd), or 1 when the server
 * closed without a reply. */
static int32_t handshake(const char *path, const void *msg, size_t len,
                         int *fd) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  size_t n = strlen(path + 1);
  memcpy(a.sun_path + 1, path + 1, n);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s >= 0);
  assert_int_equal(
      connect(s, (struct sockaddr *)&a,
              (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)),
      0);
  assert_int_equal(write(s, msg, len), (ssize_t)len);
  if (len < 24)
    shutdown(s, SHUT_WR);
  uint8_t b[4];
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {b, sizeof(b)};
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.buf;
  m.msg_controllen = sizeof(ctl.buf);
  ssize_t got = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  *fd = -1;
  struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&m) : NULL;
  if (cm != NULL && cm->cmsg_type == SCM_RIGHTS)
    memcpy(fd, CMSG_DATA(cm), sizeof(int));
  close(s);
  /* Closed with our bytes unread is a reset: no reply either way. */
  if (got == 0 || (got < 0 && errno == ECONNRESET))
    return 1;
  assert_int_equal(got, 4);
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                   (uint32_t)b[3] << 24);
}

static void request(uint8_t out[24], const uint8_t token[16]) {
  memcpy(out, "CHIMEHO1", 8);
  memcpy(out + 8, token, 16);
}

static uint64_t ring_bytes_total(void) {
  Chime__V1__StatsRequest req = CHIME__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m = NULL;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[256];
  assert_int_equal(chime__raw_unary(ch, "/chime.v1.Chime/Stats", &req.base,
                                    &chime__v1__stats_response__descriptor, &m,
                                    &st, details, sizeof(details)),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_non_null(m);
  uint64_t v = ((Chime__V1__StatsResponse *)m)->ring_bytes_total;
  protobuf_c_message_free_unpacked(m, NULL);
  return v;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_token_works_once(void **state) {
  sub_t s;
  uint8_t msg[24];
  int fd;
  (void)state;
  subscribe_shm(&s);
  assert_true(ring_bytes_total() > 0);
  request(msg, s.token);
  assert_int_equal(handshake(s.path, msg, sizeof(msg), &fd), 0);
  assert_true(fd >= 0);
  /* The fd is the ring: its header validates, nonce included. */
  chime_ring_t *ring = NULL;
  assert_int_equal(chime_ring_attach(&ring, fd, s.nonce), 0);
  assert_int_equal(chime_ring_layout(ring)->batch_size, 4);
  chime_ring_destroy(ring);
  close(fd);
  /* Replayed: refused, no fd. */
  assert_int_equal(handshake(s.path, msg, sizeof(msg), &fd), CHIME_EPERM);
  assert_int_equal(fd, -1);
  /* The call ending gives the ring and its budget back. */
  chime__raw_destroy(&s.r);
  while (ring_bytes_total() != 0)
    sleep_ms(10);
}

static void test_bad_requests(void **state) {
  sub_t s;
  uint8_t msg[24], bad[24];
  int fd;
  (void)state;
  subscribe_shm(&s);
  request(msg, s.token);
  memcpy(bad, msg, sizeof(bad));
  bad[23] ^= 1;
  assert_int_equal(handshake(s.path, bad, sizeof(bad), &fd), CHIME_EPERM);
  assert_int_equal(fd, -1);
  memcpy(bad, msg, sizeof(bad));
  bad[0] = 'X'; /* wrong magic: closed without a word */
  assert_int_equal(handshake(s.path, bad, sizeof(bad), &fd), 1);
  assert_int_equal(handshake(s.path, msg, 10, &fd), 1); /* short */
  uint8_t junk[4096];
  for (size_t i = 0; i < sizeof(junk); i++)
    junk[i] = (uint8_t)(i * 37 + 11);
  assert_int_equal(handshake(s.path, junk, sizeof(junk), &fd), 1);
  /* None of that used the token up. */
  assert_int_equal(handshake(s.path, msg, sizeof(msg), &fd), 0);
  assert_true(fd >= 0);
  close(fd);
  chime__raw_destroy(&s.r);
}

static void test_expired_token(void **state) {
  sub_t s;
  uint8_t msg[24];
  int fd;
  (void)state;
  subscribe_shm(&s);
  request(msg, s.token);
  sleep_ms(600); /* twice handoff_expires_ms */
  assert_int_equal(handshake(s.path, msg, sizeof(msg), &fd), CHIME_EPERM);
  assert_int_equal(fd, -1);
  chime__raw_destroy(&s.r);
  while (ring_bytes_total() != 0)
    sleep_ms(10);
}

/* A filesystem handoff socket is 0600 (chimed's uid only) unless
 * allowed_uids names others, who need write access to connect (SO_PEERCRED
 * and the token decide then). */
static mode_t socket_mode(const char *uids_json) {
  char dir[] = "/tmp/chime-test-hosock-XXXXXX", path[256], cfg[512];
  char cfgfile[300];
  struct stat st;
  chime_server_t *s = NULL;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/ho.sock", dir);
  snprintf(cfgfile, sizeof(cfgfile), "%s/cfg.json", dir);
  snprintf(cfg, sizeof(cfg),
           "{\"listen\": \"127.0.0.1:0\", \"handoff_socket\": \"%s\",%s"
           " \"tables\": [{\"name\": \"demo\", \"spec\": \"x:u8[4]\","
           " \"capacity\": 4}]}",
           path, uids_json);
  FILE *f = fopen(cfgfile, "w");
  assert_non_null(f);
  assert_true(fputs(cfg, f) >= 0);
  assert_int_equal(fclose(f), 0);
  chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
  o.config_path = cfgfile;
  if (chime_server_create(&s, &o) != 0)
    fail_msg("server: %s", chime_last_error());
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  mode_t mode = st.st_mode & 0777;
  chime_server_destroy(s);
  assert_int_equal(stat(path, &st) == 0 ? 0 : errno, ENOENT); /* unlinked */
  unlink(cfgfile);
  rmdir(dir);
  return mode;
}

static void test_socket_mode(void **state) {
  (void)state;
  assert_int_equal(socket_mode(""), 0600);
  assert_int_equal(socket_mode(" \"allowed_uids\": [65534],"), 0666);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_works_once),
      cmocka_unit_test(test_bad_requests),
      cmocka_unit_test(test_expired_token),
      cmocka_unit_test(test_socket_mode),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
