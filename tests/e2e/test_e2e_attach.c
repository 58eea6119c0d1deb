/* A fifo table loses nothing to a shm attach that does not happen: chimed
 * fills a shm ring only once its learner was handed it, and a stream whose
 * token expires unused ends (DEADLINE_EXCEEDED) and gives its ring budget
 * back. In each case the items inserted before are then read by another
 * learner, every id exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "streams.h"
#include "writes.h"
#include "pattern.h"
#include "rawcall.h"

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define SAMPLE_BYTES 264
#define BATCH 8
#define SLOTS 4
/* Several rings' worth: what an early fill would strand is a part of it. */
#define ITEMS 96
#define EXPIRES_MS 300

static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  grpc_init(); /* for the raw calls; the client library inits its own */
  return chime_spec_parse(&spec, SPEC) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  grpc_shutdown_blocking();
  chime__harness_kill_all();
  return 0;
}

/* A config with a fifo table "f" and extra top-level keys. */
static void config_of(char *config, size_t len, const char *extra) {
  snprintf(config, len,
           "{%s \"tables\": [{\"name\": \"f\", \"spec\": \"" SPEC
           "\", \"capacity\": 1024, \"min_size\": 1, \"sampler\": "
           "\"fifo\"}]}\n",
           extra);
}

/* chimed with a fifo table "f" and extra top-level config. */
static void start(chime__chimed_t *d, chime_client_t **c, const char *extra) {
  char config[1024];
  config_of(config, sizeof(config), extra);
  assert_int_equal(chime__chimed_start_client(d, config, c), 0);
}

/* Reads from s until every id of seed arrived once; fails on a repeat, a
 * stranger, or ids missing after 10 s without a batch. */
static void read_all(chime_stream_t *s, uint64_t seed) {
  uint8_t seen[ITEMS] = {0};
  int got = 0;
  while (got < ITEMS) {
    chime_batch_t b;
    uint64_t ids[BATCH];
    char err[256];
    int rc = chime_stream_next(s, &b, 10000);
    if (rc != 0)
      fail_msg("%d of %d items delivered, then %s: %s", got, ITEMS,
               chime_err_name(rc), chime_last_error());
    assert_int_equal(b.count, BATCH);
    assert_int_equal(chime__pattern_verify(&b, ids, err, sizeof(err)), 0);
    for (int i = 0; i < BATCH; i++) {
      uint64_t idx = ids[i] & CHIME__PATTERN_MAX_INDEX;
      assert_int_equal(ids[i] >> 40, seed);
      assert_true(idx < ITEMS);
      assert_int_equal(seen[idx], 0);
      seen[idx] = 1;
      got++;
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 200), CHIME_ETIMEDOUT);
}

/* Waits until chimed charges no ring: every budget came back. */
static void wait_no_ring_bytes(chime_client_t *c) {
  int64_t deadline = chime__now_ms() + 10000;
  for (;;) {
    chime_stats_t *st = NULL;
    assert_int_equal(chime_client_stats(c, &st), 0);
    uint64_t v = st->ring_bytes_total;
    chime_stats_free(st);
    if (v == 0)
      return;
    if (chime__now_ms() > deadline)
      fail_msg("ring_bytes_total is %llu after 10 s, expected 0",
               (unsigned long long)v);
    chime__sleep_ms(20);
  }
}

/* A raw shm Subscribe on "f"; the Opened response's token and socket. */
static void raw_open_shm(chime__raw_t *r, grpc_channel *ch, uint8_t token[16],
                         char *path, size_t len) {
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)"f";
  open.batch_size = BATCH;
  open.slots = SLOTS;
  open.mode = CHIME__V1__MODE__MODE_SHM;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  ProtobufCMessage *m = NULL;
  assert_int_equal(chime__raw_start(r, ch, "/chime.v1.Chime/Subscribe", 60000),
                   0);
  assert_int_equal(chime__raw_send(r, &req.base), 0);
  assert_int_equal(
      chime__raw_recv_msg(r, &chime__v1__subscribe_response__descriptor, &m,
                          20000),
      0);
  assert_non_null(m);
  Chime__V1__SubscribeResponse *resp = (Chime__V1__SubscribeResponse *)m;
  assert_int_equal(resp->kind_case, CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  /* The Layout states the sample info record's size, which a reader in
   * any language uses to find sample j's record (docs/protocol.md). */
  const Chime__V1__Layout *l = resp->opened->layout;
  assert_non_null(l);
  assert_int_equal(l->info_record_bytes, sizeof(chime_sample_info_t));
  assert_int_equal(l->send_bytes,
                   l->info_offset + (uint64_t)BATCH * l->info_record_bytes);
  Chime__V1__Handoff *h = resp->opened->handoff;
  assert_non_null(h);
  assert_int_equal(h->token.len, 16);
  memcpy(token, h->token.data, 16);
  snprintf(path, len, "%s", h->socket_path);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* A connection to the handoff socket at the abstract path. */
static int handoff_connect(const char *path) {
  struct sockaddr_un sa;
  size_t n = strlen(path);
  assert_true(path[0] == '@' && n >= 2 && n < sizeof(sa.sun_path));
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path + 1, path + 1, n - 1);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s >= 0);
  assert_int_equal(
      connect(s, (struct sockaddr *)&sa,
              (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)),
      0);
  return s;
}

/* Sends the handshake presenting token on s. */
static void send_token(int s, const uint8_t token[16]) {
  uint8_t req[24];
  memcpy(req, "CHIMEHO1", 8);
  memcpy(req + 8, token, 16);
  assert_int_equal(send(s, req, sizeof(req), MSG_NOSIGNAL),
                   (ssize_t)sizeof(req));
}

/* Presents token on the abstract socket path; the int32 answer. */
static int32_t present(const char *path, const uint8_t token[16]) {
  uint8_t b[4];
  int s = handoff_connect(path);
  send_token(s, token);
  assert_int_equal(recv(s, b, sizeof(b), MSG_WAITALL), (ssize_t)sizeof(b));
  close(s);
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                   (uint32_t)b[3] << 24);
}

/* Nobody attaches: the token expires, the call ends saying so (and not with
 * the token), the budget comes back, and the items wait in the table. */
static void test_token_expires_unused(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime__raw_t r;
  uint8_t token[16];
  char path[128], details[512], want[96];
  start(&d, &c, "\"handoff_expires_ms\": 300,");
  assert_int_equal(chime__write_pattern(c, "f", &spec, 1, ITEMS, NULL), 0);
  grpc_channel *ch = chime__raw_channel(d.addr);
  assert_non_null(ch);
  raw_open_shm(&r, ch, token, path, sizeof(path));

  int64_t t0 = chime__now_ms();
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  int rc = chime__raw_status(&r, &st, details, sizeof(details), 10000);
  if (rc != 0)
    fail_msg("the Subscribe call of an unused token did not end in 10 s (%s)",
             chime_err_name(rc));
  assert_int_equal(st, GRPC_STATUS_DEADLINE_EXCEEDED);
  snprintf(want, sizeof(want), "handoff token expired unused after %d ms",
           EXPIRES_MS);
  chime__assert_contains(details, want);
  assert_true(chime__now_ms() - t0 < 10000);
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", token[i]);
  assert_null(strstr(details, hex));
  chime__raw_destroy(&r);
  grpc_channel_destroy(ch);
  wait_no_ring_bytes(c);

  chime_stream_t *s =
      chime__open_stream(c, "f", CHIME_MODE_STREAM, BATCH, SLOTS, NULL);
  read_all(s, 1);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* The token is presented, but the answer cannot be sent (the learner shut
 * its side for reading: the server's send fails): the token is spent, so
 * the stream ends at once, saying why, and its budget comes back, rather
 * than wait for a handoff that can never come. */
static void test_token_spent_unanswered(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime__raw_t r;
  uint8_t token[16];
  char path[128], details[512];
  start(&d, &c, "\"handoff_expires_ms\": 60000,");
  assert_int_equal(chime__write_pattern(c, "f", &spec, 1, ITEMS, NULL), 0);
  grpc_channel *ch = chime__raw_channel(d.addr);
  assert_non_null(ch);
  raw_open_shm(&r, ch, token, path, sizeof(path));

  int fd = handoff_connect(path);
  assert_int_equal(shutdown(fd, SHUT_RD), 0);
  send_token(fd, token);

  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  int rc = chime__raw_status(&r, &st, details, sizeof(details), 20000);
  if (rc != 0)
    fail_msg("the Subscribe call of a spent token did not end (%s)",
             chime_err_name(rc));
  assert_int_equal(st, GRPC_STATUS_CANCELLED);
  chime__assert_contains(details, "handoff failed");
  close(fd);
  chime__raw_destroy(&r);
  grpc_channel_destroy(ch);
  wait_no_ring_bytes(c);
  chime_stream_t *s =
      chime__open_stream(c, "f", CHIME_MODE_STREAM, BATCH, SLOTS, NULL);
  read_all(s, 1); /* the item stayed in the table */
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* chimed in a pid namespace of its own cannot see the learner (its
 * SO_PEERCRED pid is 0), so it cannot watch its liveness and lends no ring:
 * the handoff is refused with CHIME_ENOTSUP saying why, shm mode fails
 * with it, auto mode streams every item instead, and nothing is stranded
 * (the spent token's stream ends). Skipped where unshare(1) may not make
 * a pid namespace. */
static void test_other_pid_namespace_streams(void **state) {
  (void)state;
  char bin[512], config[1024], cfg_path[600];
  if (chime__harness_bin("src/server/chimed", bin, sizeof(bin)) == NULL)
    chime__skip("chimed is not built");
  config_of(config, sizeof(config), "");
  assert_int_equal(chime__harness_write_file("pidns.json", config, cfg_path,
                                             sizeof(cfg_path)),
                   0);
  const char *argv[] = {
      "/usr/bin/unshare", "--pid",  "--fork",   "--kill-child=SIGTERM",
      "--mount-proc",     bin,      "--listen", "127.0.0.1:0",
      "--config",         cfg_path, NULL};
  chime__chimed_t d;
  memset(&d, 0, sizeof(d));
  d.proc.out_fd = -1;
  assert_int_equal(chime__proc_spawn(&d.proc, argv, NULL), 0);
  if (chime__proc_read_line(&d.proc, "listening on ", d.addr, sizeof(d.addr),
                            20000) != 0) {
    int st = 0;
    chime__proc_stop(&d.proc, SIGKILL, 10000, &st);
    fprintf(stderr, "SKIP: unshare --pid cannot run chimed here\n");
    skip();
  }
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  assert_int_equal(chime__write_pattern(c, "f", &spec, 7, ITEMS, NULL), 0);

  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.batch_size = BATCH;
  o.slots = SLOTS;
  o.mode = CHIME_MODE_SHM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, c, "f", &o), CHIME_ENOTSUP);
  chime__assert_contains(chime_last_error(), "another pid namespace");
  wait_no_ring_bytes(c);

  s = chime__open_stream(c, "f", CHIME_MODE_AUTO, BATCH, SLOTS, NULL);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  assert_non_null(chime_stream_fallback_reason(s));
  chime__assert_contains(chime_stream_fallback_reason(s),
                         "another pid namespace");
  read_all(s, 7);
  chime_stream_close(s);
  int st = 0;
  chime_client_destroy(c);
  chime__proc_stop(&d.proc, SIGTERM, 10000, &st);
}

/* A wrong token is refused; the learner gives up on shm and streams. */
static void test_wrong_token_then_stream(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime__raw_t r;
  uint8_t token[16];
  char path[128];
  start(&d, &c, "");
  assert_int_equal(chime__write_pattern(c, "f", &spec, 2, ITEMS, NULL), 0);
  grpc_channel *ch = chime__raw_channel(d.addr);
  assert_non_null(ch);
  raw_open_shm(&r, ch, token, path, sizeof(path));
  /* What an early fill takes, it takes at once: give it the time. */
  chime__sleep_ms(300);
  token[0] ^= 0xff;
  assert_int_equal(present(path, token), CHIME_EPERM);
  chime__raw_destroy(&r); /* cancels: the learner's fallback */
  grpc_channel_destroy(ch);
  wait_no_ring_bytes(c);

  chime_stream_t *s =
      chime__open_stream(c, "f", CHIME_MODE_STREAM, BATCH, SLOTS, NULL);
  read_all(s, 2);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

/* The client library's own fallback: the attach fails (the socket file is
 * gone), auto mode streams, and every item arrives. */
static void test_failed_attach_falls_back(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  char path[600], extra[700];
  const char *dir = chime__harness_tmpdir();
  assert_non_null(dir);
  snprintf(path, sizeof(path), "%s/handoff.sock", dir);
  snprintf(extra, sizeof(extra), "\"handoff_socket\": \"%s\",", path);
  start(&d, &c, extra);
  assert_int_equal(chime__write_pattern(c, "f", &spec, 3, ITEMS, NULL), 0);
  assert_int_equal(unlink(path), 0);

  chime_stream_t *s =
      chime__open_stream(c, "f", CHIME_MODE_AUTO, BATCH, SLOTS, NULL);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  assert_non_null(chime_stream_fallback_reason(s));
  chime__assert_contains(chime_stream_fallback_reason(s), "shm attach failed");
  read_all(s, 3);
  chime_stream_close(s);
  chime__stop_clean(&d, c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_expires_unused),
      cmocka_unit_test(test_token_spent_unanswered),
      cmocka_unit_test(test_other_pid_namespace_streams),
      cmocka_unit_test(test_wrong_token_then_stream),
      cmocka_unit_test(test_failed_attach_falls_back),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
