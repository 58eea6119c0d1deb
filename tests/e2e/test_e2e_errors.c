/* Bad input against the real chimed, with raw gRPC calls so the exact status
 * codes and details are seen: wrong sample size or spec, unknown tables,
 * malformed Subscribe opens, memory budgets, wrong and replayed handoff
 * tokens, and garbage on the gRPC port and the handoff socket. After each,
 * chimed must still serve. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <grp.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "chime/ring.h"
#include "harness.h"
#include "asserts.h"
#include "rawcall.h"

#define SAMPLE_BYTES 264 /* obs:f32[64], action:i32[], reward:f32[] */
#define STREAM_BUDGET (4u << 20)
#define TOTAL_BUDGET (6u << 20)

#define M_INFO "/chime.v1.Chime/GetInfo"
#define M_INSERT "/chime.v1.Chime/Insert"
#define M_SUBSCRIBE "/chime.v1.Chime/Subscribe"

static chime__chimed_t chimed;
static grpc_channel *ch;

static int setup(void **state) {
  (void)state;
  char config[512];
  snprintf(config, sizeof(config),
           "{\"budgets\": {\"stream_ring_bytes\": %u, \"total_ring_bytes\": "
           "%u},\n"
           " \"tables\": [{\"name\": \"demo\", \"spec\": \"obs:f32[64], "
           "action:i32[], reward:f32[]\", \"capacity\": 4096, \"min_size\": "
           "1, \"sampler\": \"fifo\"}]}\n",
           STREAM_BUDGET, TOTAL_BUDGET);
  if (chime__raw_fixture_start(&chimed, &ch, config) != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  return chime__raw_fixture_stop(&chimed, ch);
}

/* chimed answers GetInfo and still knows its table. */
static void assert_serving(void) {
  Chime__V1__GetInfoRequest req = CHIME__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[512];
  assert_int_equal(chime__raw_unary(ch, M_INFO, &req.base,
                                    &chime__v1__get_info_response__descriptor,
                                    &resp, &st, details, sizeof(details)),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_non_null(resp);
  Chime__V1__GetInfoResponse *info = (Chime__V1__GetInfoResponse *)resp;
  assert_int_equal(info->n_tables, 1);
  assert_string_equal(info->tables[0]->name, "demo");
  protobuf_c_message_free_unpacked(resp, NULL);
}

/* Ends a raw call, frees it, and returns its final status. */
static grpc_status_code finish_call(chime__raw_t *r, char *details,
                                    size_t len) {
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  assert_int_equal(chime__raw_finish(r, &st, details, len, 20000), 0);
  chime__raw_destroy(r);
  return st;
}

/* An InsertRequest of `count` samples in data[0..len) for `table`. */
static Chime__V1__InsertRequest insert_req(const char *table, uint32_t count,
                                           uint8_t *data, size_t len) {
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = (char *)table;
  req.count = count;
  req.data.data = data;
  req.data.len = len;
  return req;
}

/* Sends the requests of one Insert call and returns its final status. */
static grpc_status_code insert_call(Chime__V1__InsertRequest *const *reqs,
                                    size_t n, char *details, size_t len) {
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, ch, M_INSERT, 20000), 0);
  for (size_t i = 0; i < n; i++)
    if (chime__raw_send(&r, &reqs[i]->base) != 0)
      break; /* the server may end the call before reading everything */
  return finish_call(&r, details, len);
}

static grpc_status_code insert_one(Chime__V1__InsertRequest *req, char *details,
                                   size_t len) {
  Chime__V1__InsertRequest *reqs[] = {req};
  return insert_call(reqs, 1, details, len);
}

static void test_insert_wrong_size(void **state) {
  (void)state;
  uint8_t data[4 * 260];
  char details[512];
  memset(data, 1, sizeof(data));
  Chime__V1__InsertRequest req = insert_req("demo", 4, data, sizeof(data));
  assert_int_equal(insert_one(&req, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "'reward'");
  chime__assert_contains(details, "264");
  chime__assert_contains(details, "260");
  assert_serving();
}

static void test_insert_wrong_spec(void **state) {
  (void)state;
  uint8_t data[SAMPLE_BYTES];
  char details[512];
  uint64_t obs_shape[] = {64};
  Chime__V1__Leaf obs = CHIME__V1__LEAF__INIT, act = CHIME__V1__LEAF__INIT,
                  rew = CHIME__V1__LEAF__INIT;
  obs.name = (char *)"obs";
  obs.dtype = (char *)"f32";
  obs.n_shape = 1;
  obs.shape = obs_shape;
  act.name = (char *)"action";
  act.dtype = (char *)"i32";
  rew.name = (char *)"reward";
  rew.dtype = (char *)"f64"; /* the table has f32 */
  Chime__V1__Leaf *spec[] = {&obs, &act, &rew};
  memset(data, 0, sizeof(data));
  Chime__V1__InsertRequest req = insert_req("demo", 1, data, sizeof(data));
  req.n_spec = 3;
  req.spec = spec;
  assert_int_equal(insert_one(&req, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "leaf 'reward'");
  chime__assert_contains(details, "4 bytes");
  chime__assert_contains(details, "8 bytes");
  assert_serving();
}

static void test_insert_table_changes(void **state) {
  (void)state;
  uint8_t data[SAMPLE_BYTES];
  char details[512];
  memset(data, 0, sizeof(data));
  Chime__V1__InsertRequest a = insert_req("demo", 1, data, sizeof(data));
  Chime__V1__InsertRequest b = a;
  b.table = (char *)"other";
  Chime__V1__InsertRequest *reqs[] = {&a, &b};
  assert_int_equal(insert_call(reqs, 2, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_serving();
}

static void test_insert_unknown_table(void **state) {
  (void)state;
  uint8_t data[SAMPLE_BYTES] = {0};
  char details[512];
  Chime__V1__InsertRequest req = insert_req("nope", 1, data, sizeof(data));
  assert_int_equal(insert_one(&req, details, sizeof(details)),
                   GRPC_STATUS_NOT_FOUND);
  chime__assert_contains(details, "table 'nope' not found");
  assert_serving();
}

/* One Subscribe call: sends msg (an Open, or anything) and returns the
 * first response (NULL if the call ended) with the call left open in r. */
static Chime__V1__SubscribeResponse *subscribe(chime__raw_t *r,
                                               const ProtobufCMessage *msg) {
  ProtobufCMessage *resp = NULL;
  assert_int_equal(chime__raw_start(r, ch, M_SUBSCRIBE, 60000), 0);
  (void)chime__raw_send(r, msg);
  assert_int_equal(
      chime__raw_recv_msg(r, &chime__v1__subscribe_response__descriptor, &resp,
                          20000),
      0);
  return (Chime__V1__SubscribeResponse *)resp;
}

/* subscribe() with an Open of these fields. */
static Chime__V1__SubscribeResponse *
subscribe_open(chime__raw_t *r, const char *table, uint32_t batch,
               uint32_t slots, Chime__V1__Mode mode) {
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)table;
  open.batch_size = batch;
  open.slots = slots;
  open.mode = mode;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  return subscribe(r, &req.base);
}

static grpc_status_code open_fails(const char *table, uint32_t batch,
                                   uint32_t slots, Chime__V1__Mode mode,
                                   char *details, size_t len) {
  chime__raw_t r;
  Chime__V1__SubscribeResponse *resp =
      subscribe_open(&r, table, batch, slots, mode);
  if (resp != NULL) {
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    chime__raw_destroy(&r);
    fail_msg("Subscribe(%s, batch %u, slots %u, mode %d) was answered", table,
             batch, slots, (int)mode);
  }
  return finish_call(&r, details, len);
}

static void test_subscribe_unknown_table(void **state) {
  (void)state;
  char details[512];
  assert_int_equal(open_fails("nope", 8, 4, CHIME__V1__MODE__MODE_STREAM,
                              details, sizeof(details)),
                   GRPC_STATUS_NOT_FOUND);
  chime__assert_contains(details, "'nope'");
  assert_serving();
}

static void test_subscribe_bad_open(void **state) {
  (void)state;
  char details[512];
  assert_int_equal(open_fails("demo", 0, 4, CHIME__V1__MODE__MODE_STREAM,
                              details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(open_fails("demo", CHIME_RING_MAX_BATCH + 1, 4,
                              CHIME__V1__MODE__MODE_STREAM, details,
                              sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(open_fails("demo", 8, 1, CHIME__V1__MODE__MODE_STREAM,
                              details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(open_fails("demo", 8, CHIME_RING_MAX_SLOTS + 1,
                              CHIME__V1__MODE__MODE_STREAM, details,
                              sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(open_fails("demo", 8, 4, CHIME__V1__MODE__MODE_AUTO, details,
                              sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(
      open_fails("demo", 8, 4, (Chime__V1__Mode)7, details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);

  /* A credit before any open. */
  chime__raw_t r;
  Chime__V1__Credit credit = CHIME__V1__CREDIT__INIT;
  credit.batches = 1;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_CREDIT;
  req.credit = &credit;
  Chime__V1__SubscribeResponse *resp = subscribe(&r, &req.base);
  assert_null(resp);
  assert_int_equal(finish_call(&r, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "open");
  assert_serving();
}

/* Opens a stream whose ring is batch * 264 bytes per slot and more; returns
 * the Opened response (call stays open in r) or NULL with the status. */
static Chime__V1__SubscribeResponse *
raw_open_stream(chime__raw_t *r, uint32_t batch, uint32_t slots,
                Chime__V1__Mode mode, grpc_status_code *st, char *details,
                size_t len) {
  Chime__V1__SubscribeResponse *resp =
      subscribe_open(r, "demo", batch, slots, mode);
  *st = GRPC_STATUS_OK;
  details[0] = '\0';
  if (resp == NULL) {
    *st = finish_call(r, details, len);
    return NULL;
  }
  assert_int_equal(resp->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  return resp;
}

/* A shm stream of 8-sample batches in 4 slots; its Opened response. */
static Chime__V1__SubscribeResponse *open_shm_stream(chime__raw_t *r) {
  grpc_status_code st;
  char details[512];
  Chime__V1__SubscribeResponse *resp = raw_open_stream(
      r, 8, 4, CHIME__V1__MODE__MODE_SHM, &st, details, sizeof(details));
  if (resp == NULL)
    fail_msg("shm open refused: %s", details);
  return resp;
}

static uint64_t ring_bytes_total(void) {
  Chime__V1__StatsRequest req = CHIME__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[256];
  assert_int_equal(chime__raw_unary(ch, "/chime.v1.Chime/Stats", &req.base,
                                    &chime__v1__stats_response__descriptor,
                                    &resp, &st, details, sizeof(details)),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_non_null(resp);
  uint64_t v = ((Chime__V1__StatsResponse *)resp)->ring_bytes_total;
  protobuf_c_message_free_unpacked(resp, NULL);
  return v;
}

static void wait_ring_bytes(uint64_t want) {
  int64_t deadline = chime__now_ms() + 10000;
  uint64_t v;
  while ((v = ring_bytes_total()) != want) {
    if (chime__now_ms() > deadline)
      fail_msg("ring_bytes_total is %llu, expected %llu after 10 s",
               (unsigned long long)v, (unsigned long long)want);
    chime__sleep_ms(20);
  }
}

static void test_budgets(void **state) {
  (void)state;
  chime__raw_t a, b, c;
  grpc_status_code st;
  char details[512], num[32];

  wait_ring_bytes(0);
  /* 8 slots of 4096 samples: far over the 4 MiB per-stream budget. */
  assert_null(raw_open_stream(&a, 4096, 8, CHIME__V1__MODE__MODE_STREAM, &st,
                              details, sizeof(details)));
  assert_int_equal(st, GRPC_STATUS_RESOURCE_EXHAUSTED);
  snprintf(num, sizeof(num), "%u", STREAM_BUDGET);
  chime__assert_contains(details, num);
  chime__assert_contains(details, "per-stream budget");

  /* Two streams of about 3.4 MiB each (5 slots of 2048 samples of 264
   * bytes and an 80-byte info record): the second is over what is left of
   * the 6 MiB total. */
  Chime__V1__SubscribeResponse *ra = raw_open_stream(
      &a, 2048, 5, CHIME__V1__MODE__MODE_STREAM, &st, details, sizeof(details));
  if (ra == NULL)
    fail_msg("first stream refused: %s", details);
  uint64_t first = ring_bytes_total();
  assert_true(first > TOTAL_BUDGET / 2 && first <= STREAM_BUDGET);
  assert_null(raw_open_stream(&b, 2048, 5, CHIME__V1__MODE__MODE_STREAM, &st,
                              details, sizeof(details)));
  assert_int_equal(st, GRPC_STATUS_RESOURCE_EXHAUSTED);
  snprintf(num, sizeof(num), "%u", TOTAL_BUDGET);
  chime__assert_contains(details, num);
  chime__assert_contains(details, "total budget");

  /* Ending the first call returns its budget. */
  protobuf_c_message_free_unpacked(&ra->base, NULL);
  chime__raw_destroy(&a);
  wait_ring_bytes(0);
  Chime__V1__SubscribeResponse *rc = raw_open_stream(
      &c, 2048, 5, CHIME__V1__MODE__MODE_STREAM, &st, details, sizeof(details));
  if (rc == NULL)
    fail_msg("stream refused after the budget came back: %s", details);
  protobuf_c_message_free_unpacked(&rc->base, NULL);
  chime__raw_destroy(&c);
  wait_ring_bytes(0);
  assert_serving();
}

/* --- handoff socket --- */

/* The address of a handoff socket path ('@' for the abstract namespace);
 * -1 for a path that cannot be one. Also used by the --present helper, which
 * has no cmocka to assert with. */
static int handoff_addr(const char *path, struct sockaddr_un *sa,
                        socklen_t *len) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n < 2 || n >= sizeof(sa->sun_path))
    return -1;
  if (path[0] == '@') {
    memcpy(sa->sun_path + 1, path + 1, n - 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  } else {
    memcpy(sa->sun_path, path, n);
    *len = (socklen_t)sizeof(*sa);
  }
  return 0;
}

static int handoff_connect(const char *path) {
  struct sockaddr_un sa;
  socklen_t len = 0;
  assert_int_equal(handoff_addr(path, &sa, &len), 0);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
  return fd;
}

/* Everything the server sends back until it closes (at most cap bytes), and
 * the fds passed with it (closed here; their count in *nfds). */
static size_t read_reply(int fd, uint8_t *buf, size_t cap, int *nfds,
                         int *first_fd) {
  size_t got = 0;
  *nfds = 0;
  *first_fd = -1;
  int64_t deadline = chime__now_ms() + 20000;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    int left = (int)(deadline - chime__now_ms());
    if (left <= 0)
      fail_msg("the handoff socket neither answered nor closed in 20 s");
    if (poll(&p, 1, left) <= 0)
      continue;
    union {
      char b[CMSG_SPACE(4 * sizeof(int))];
      struct cmsghdr align;
    } ctl;
    struct iovec iov = {buf + got, cap - got};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.b;
    m.msg_controllen = sizeof(ctl.b);
    ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR)
      continue;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL;
         c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
          int passed;
          memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          if (*first_fd < 0)
            *first_fd = passed;
          else
            close(passed);
          (*nfds)++;
        }
      }
    }
    if (r <= 0 || got + (size_t)r >= cap) {
      got += r > 0 ? (size_t)r : 0;
      return got;
    }
    got += (size_t)r;
  }
}

static int32_t le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

/* Presents a token; returns the status and fills *fd (or -1). */
static int32_t present(const char *path, const uint8_t token[16], int *fd,
                       uint8_t *reply, size_t *reply_len) {
  uint8_t req[24];
  memcpy(req, "CHIMEHO1", 8);
  memcpy(req + 8, token, 16);
  int s = handoff_connect(path);
  assert_int_equal(write(s, req, sizeof(req)), (ssize_t)sizeof(req));
  int nfds;
  *reply_len = read_reply(s, reply, 256, &nfds, fd);
  close(s);
  assert_int_equal(*reply_len, 4);
  int32_t st = le32(reply);
  assert_int_equal(nfds, st == 0 ? 1 : 0);
  return st;
}

static void assert_no_secret(const void *hay, size_t len, const uint8_t *tok) {
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", tok[i]);
  assert_null(memmem(hay, len, tok, 16));
  assert_null(memmem(hay, len, hex, 32));
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02X", tok[i]);
  assert_null(memmem(hay, len, hex, 32));
}

static void test_tokens(void **state) {
  (void)state;
  chime__raw_t r;
  char details[512];
  uint8_t reply[256], wrong[16], token[16], nonce[16];
  size_t reply_len;
  int fd = -1;

  Chime__V1__SubscribeResponse *resp = open_shm_stream(&r);
  Chime__V1__Handoff *ho = resp->opened->handoff;
  assert_non_null(ho);
  assert_int_equal(ho->token.len, 16);
  assert_int_equal(ho->nonce.len, 16);
  assert_true(ho->expires_ms > 0);
  memcpy(token, ho->token.data, 16);
  memcpy(nonce, ho->nonce.data, 16);
  char path[128];
  snprintf(path, sizeof(path), "%s", ho->socket_path);
  protobuf_c_message_free_unpacked(&resp->base, NULL);

  /* A wrong token: CHIME_EPERM, no fd, nothing of the real token. */
  assert_int_equal(getrandom(wrong, sizeof(wrong), 0), (ssize_t)sizeof(wrong));
  wrong[0] = (uint8_t)(token[0] ^ 0xff);
  assert_int_equal(present(path, wrong, &fd, reply, &reply_len), CHIME_EPERM);
  assert_int_equal(fd, -1);
  assert_no_secret(reply, reply_len, token);

  /* The right one: status 0 and the ring, which attaches with the nonce. */
  assert_int_equal(present(path, token, &fd, reply, &reply_len), 0);
  assert_true(fd >= 0);
  chime_ring_t *ring = NULL;
  assert_int_equal(chime_ring_attach(&ring, fd, nonce), 0);
  assert_int_equal(chime_ring_layout(ring)->batch_size, 8);
  chime_ring_destroy(ring);
  close(fd);

  /* Replayed: single use. */
  assert_int_equal(present(path, token, &fd, reply, &reply_len), CHIME_EPERM);
  assert_int_equal(fd, -1);
  assert_no_secret(reply, reply_len, token);

  /* Whatever the call ends with carries no token either. */
  grpc_call_cancel(r.call, NULL);
  (void)finish_call(&r, details, sizeof(details));
  assert_no_secret(details, strlen(details), token);
  wait_ring_bytes(0);
  assert_serving();
}

static void test_garbage_on_handoff_socket(void **state) {
  (void)state;
  chime__raw_t r;
  uint8_t junk[4096], reply[256];

  Chime__V1__SubscribeResponse *resp = open_shm_stream(&r);
  char path[128];
  snprintf(path, sizeof(path), "%s", resp->opened->handoff->socket_path);
  protobuf_c_message_free_unpacked(&resp->base, NULL);

  static const size_t lens[] = {0, 1, 8, 23, 24, 25, 4096};
  for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
    assert_int_equal(getrandom(junk, lens[i], 0), (ssize_t)lens[i]);
    if (lens[i] >= 8 && i % 2 == 0)
      memcpy(junk, "CHIMEHO1", 8); /* right magic, random token */
    int s = handoff_connect(path);
    if (lens[i] > 0)
      (void)!write(s, junk, lens[i]);
    shutdown(s, SHUT_WR);
    int nfds, fd;
    size_t n = read_reply(s, reply, sizeof(reply), &nfds, &fd);
    close(s);
    /* Closed without a word, or refused; never a ring. */
    assert_int_equal(nfds, 0);
    assert_true(n == 0 || (n == 4 && le32(reply) < 0));
  }
  /* A client that connects and says nothing is dropped in time, not
   * served; meanwhile everyone else is. */
  int idle = handoff_connect(path);
  assert_serving();
  close(idle);
  chime__raw_destroy(&r);
  wait_ring_bytes(0);
  assert_serving();
}

static void test_garbage_on_grpc_port(void **state) {
  (void)state;
  uint8_t junk[8192];
  char host[256];
  snprintf(host, sizeof(host), "%s", chimed.addr);
  char *colon = strrchr(host, ':');
  assert_non_null(colon);
  int port = atoi(colon + 1);
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

  for (int i = 0; i < 4; i++) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getrandom(junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
    if (i % 2 == 1) /* a valid HTTP/2 preface, then garbage frames */
      memcpy(junk, preface, sizeof(preface) - 1);
    (void)!write(s, junk, i == 3 ? 100 : sizeof(junk));
    close(s);
  }

  /* Garbage as gRPC messages: unreadable protobuf. */
  chime__raw_t r;
  char details[512];
  static const char *methods[] = {M_INSERT, M_SUBSCRIBE};
  for (size_t m = 0; m < 2; m++) {
    assert_int_equal(getrandom(junk, 512, 0), 512);
    junk[0] = 0xff; /* field 31, wire type 7: never valid protobuf */
    assert_int_equal(chime__raw_start(&r, ch, methods[m], 20000), 0);
    (void)chime__raw_send_bytes(&r, junk, 512);
    assert_int_equal(finish_call(&r, details, sizeof(details)),
                     GRPC_STATUS_INVALID_ARGUMENT);
  }
  assert_serving();
}

/* A method chimed does not have is answered UNIMPLEMENTED, not left to the
 * client's deadline with a call held meanwhile. */
static void test_unknown_method(void **state) {
  (void)state;
  chime__raw_t r;
  char details[512];
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Nope", 20000), 0);
  assert_int_equal(finish_call(&r, details, sizeof(details)),
                   GRPC_STATUS_UNIMPLEMENTED);
  assert_serving();
}

/* The chime-error value in a finished call's trailing metadata ("" when
 * there is none). */
static void error_md(const chime__raw_t *r, char *out, size_t len) {
  out[0] = '\0';
  for (size_t i = 0; i < r->md_trail.count; i++) {
    const grpc_metadata *m = &r->md_trail.metadata[i];
    if (grpc_slice_str_cmp(m->key, "chime-error") == 0)
      snprintf(out, len, "%.*s", (int)GRPC_SLICE_LENGTH(m->value),
               (const char *)GRPC_SLICE_START_PTR(m->value));
  }
}

/* Every failure chimed sends carries its CHIME_E* code next to the text
 * (docs/protocol.md, Status codes); a success carries none. */
static void test_error_metadata(void **state) {
  (void)state;
  chime__raw_t r;
  char details[512], code[32];
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  uint8_t data[4 * 260] = {0}; /* 4 samples of 260 bytes: the table has 264 */
  Chime__V1__InsertRequest req = insert_req("nope", 1, data, SAMPLE_BYTES);
  assert_int_equal(chime__raw_start(&r, ch, M_INSERT, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &req.base), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  error_md(&r, code, sizeof(code));
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_NOT_FOUND);
  assert_string_equal(code, "-9"); /* CHIME_ENOTFOUND */

  req = insert_req("demo", 4, data, sizeof(data));
  assert_int_equal(chime__raw_start(&r, ch, M_INSERT, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &req.base), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  error_md(&r, code, sizeof(code));
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  assert_string_equal(code, "-1"); /* CHIME_EINVAL */

  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Nope", 20000), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  error_md(&r, code, sizeof(code));
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_UNIMPLEMENTED);
  assert_string_equal(code, "-15"); /* CHIME_ENOTSUP */

  Chime__V1__GetInfoRequest info = CHIME__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  assert_int_equal(chime__raw_start(&r, ch, M_INFO, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &info.base), 0);
  assert_int_equal(
      chime__raw_recv_msg(&r, &chime__v1__get_info_response__descriptor, &resp,
                          20000),
      0);
  assert_non_null(resp);
  protobuf_c_message_free_unpacked(resp, NULL);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  error_md(&r, code, sizeof(code));
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_string_equal(code, "");
  assert_serving();
}

/* --- expiry and peer uid, each against a chimed of its own --- */

static grpc_channel *saved_ch;
static chime__chimed_t other;

static void other_start(const char *extra_json) {
  char config[1024];
  snprintf(config, sizeof(config),
           "{%s \"tables\": [{\"name\": \"demo\", \"spec\": \"obs:f32[64], "
           "action:i32[], reward:f32[]\", \"capacity\": 64, \"min_size\": 1, "
           "\"sampler\": \"fifo\"}]}\n",
           extra_json);
  assert_int_equal(chime__chimed_start(&other, config, NULL, 30000), 0);
  saved_ch = ch;
  ch = chime__raw_channel(other.addr);
}

static void other_stop(void) {
  int st = 0;
  grpc_channel_destroy(ch);
  ch = saved_ch;
  assert_int_equal(chime__chimed_stop(&other, 20000, &st), 0);
  assert_int_equal(st, 0);
}

/* Opens a shm stream on the current channel; the token and socket path. */
static void open_shm(chime__raw_t *r, uint8_t token[16], char *path,
                     size_t len) {
  Chime__V1__SubscribeResponse *resp = open_shm_stream(r);
  memcpy(token, resp->opened->handoff->token.data, 16);
  snprintf(path, len, "%s", resp->opened->handoff->socket_path);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static void test_token_expires(void **state) {
  (void)state;
  chime__raw_t r;
  uint8_t token[16], reply[256];
  char path[128];
  size_t reply_len;
  int fd = -1;
  other_start("\"handoff_expires_ms\": 1,");
  open_shm(&r, token, path, sizeof(path));
  /* Far past the 1 ms expiry: a wait, not a measurement. */
  chime__sleep_ms(200);
  assert_int_equal(present(path, token, &fd, reply, &reply_len), CHIME_EPERM);
  assert_int_equal(fd, -1);
  assert_no_secret(reply, reply_len, token);
  chime__raw_destroy(&r);
  assert_serving();
  other_stop();
}

/* Presents token as another user (this binary re-executed, --present), so
 * SO_PEERCRED sees that uid. Returns the status the helper received and
 * whether an fd came with it. */
static int32_t present_as(uid_t uid, const char *path, const uint8_t tok[16],
                          int *got_fd) {
  char self[512], hex[33], uidtxt[16], line[64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  assert_true(n > 0);
  self[n] = '\0';
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", tok[i]);
  snprintf(uidtxt, sizeof(uidtxt), "%u", (unsigned)uid);
  const char *argv[] = {self, "--present", path, hex, uidtxt, NULL};
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn(&p, argv, NULL), 0);
  assert_int_equal(
      chime__proc_read_line(&p, "status ", line, sizeof(line), 20000), 0);
  chime__proc_kill(&p);
  int st = 0, fds = 0;
  assert_int_equal(sscanf(line, "%d fds %d", &st, &fds), 2);
  *got_fd = fds > 0;
  return st;
}

static void test_peer_uid(void **state) {
  (void)state;
  chime__raw_t r;
  uint8_t token[16], reply[256];
  char path[128];
  size_t reply_len;
  int fd = -1, got_fd = 0;
  if (geteuid() != 0) {
    fprintf(stderr, "note: not root, the other-uid cases are not run\n");
    return;
  }
  /* Same uid only (the default): nobody is refused, and cannot burn the
   * token for its owner. */
  other_start("");
  open_shm(&r, token, path, sizeof(path));
  assert_int_equal(present_as(65534, path, token, &got_fd), CHIME_EPERM);
  assert_false(got_fd);
  assert_int_equal(present(path, token, &fd, reply, &reply_len), 0);
  assert_true(fd >= 0);
  close(fd);
  chime__raw_destroy(&r);
  other_stop();

  /* allowed_uids lets nobody in. */
  other_start("\"allowed_uids\": [65534],");
  open_shm(&r, token, path, sizeof(path));
  assert_int_equal(present_as(65534, path, token, &got_fd), 0);
  assert_true(got_fd);
  chime__raw_destroy(&r);
  other_stop();
}

/* The --present helper: drop to uid, present the token, print what came. */
static int present_main(const char *path, const char *hex, const char *uidtxt) {
  uint8_t req[24], reply[4];
  uid_t uid = (uid_t)strtoul(uidtxt, NULL, 10);
  memcpy(req, "CHIMEHO1", 8);
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1)
      return 2;
    req[8 + i] = (uint8_t)v;
  }
  if (uid != geteuid() &&
      (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) {
    perror("present: cannot change uid");
    return 2;
  }
  struct sockaddr_un sa;
  socklen_t len = 0;
  if (handoff_addr(path, &sa, &len) != 0)
    return 2;
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, len) != 0) {
    perror("present: connect");
    return 2;
  }
  /* A refused uid is answered and closed at accept, maybe before this send:
   * the answer is read whether or not the send went through. */
  (void)!send(s, req, sizeof(req), MSG_NOSIGNAL);
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {reply, sizeof(reply)};
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.b;
  m.msg_controllen = sizeof(ctl.b);
  ssize_t r = recvmsg(s, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  int fds = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      fds++;
  if (r != 4) {
    printf("status %d fds %d\n", -999, fds);
    return 1;
  }
  printf("status %d fds %d\n", (int)le32(reply), fds);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--present") == 0)
    return present_main(argv[2], argv[3], argv[4]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_insert_wrong_size),
      cmocka_unit_test(test_insert_wrong_spec),
      cmocka_unit_test(test_insert_table_changes),
      cmocka_unit_test(test_insert_unknown_table),
      cmocka_unit_test(test_subscribe_unknown_table),
      cmocka_unit_test(test_subscribe_bad_open),
      cmocka_unit_test(test_budgets),
      cmocka_unit_test(test_tokens),
      cmocka_unit_test(test_garbage_on_handoff_socket),
      cmocka_unit_test(test_garbage_on_grpc_port),
      cmocka_unit_test(test_unknown_method),
      cmocka_unit_test(test_error_metadata),
      cmocka_unit_test(test_token_expires),
      cmocka_unit_test(test_peer_uid),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
