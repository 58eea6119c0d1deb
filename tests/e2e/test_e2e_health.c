/* grpc.health.v1.Health/Check against the real chimed, over raw calls as a
 * Kubernetes probe makes them: SERVING for "" and "chime.v1.Chime" with
 * auth tokens configured and no token sent (or any token, even a wrong
 * one); NOT_FOUND for another service; Watch UNIMPLEMENTED; a malformed or
 * oversized request INVALID_ARGUMENT; and NOT_SERVING, probe after probe,
 * while chimed stops (held in its stop by a learner that never reads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmocka.h>

#include <grpc/grpc_security.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "healthcheck.h"
#include "health.pb-c.h"
#include "rawcall.h"

#define CHECK "/grpc.health.v1.Health/Check"
#define ADMIN "admin-4e1c7a9d2b5f8e30"
#define SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define NOT_SERVING                                                            \
  GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING

static chime__chimed_t chimed;
static grpc_channel *ch;

/* chimed with auth tokens: every chime.v1.Chime call needs one. */
static int setup(void **state) {
  (void)state;
  char m[512], config[1024];
  if (chime__harness_write_file("admin.token", ADMIN "\n", m, sizeof m))
    return -1;
  snprintf(config, sizeof config,
           "{\"auth\": {\"tokens\": [{\"file\": \"%s\", \"role\": "
           "\"admin\"}]},\n"
           " \"tables\": [{\"name\": \"t\", \"spec\": \"x:u64[]\", "
           "\"capacity\": 100}]}\n",
           m);
  return chime__raw_fixture_start(&chimed, &ch, config);
}

static int teardown(void **state) {
  (void)state;
  return chime__raw_fixture_stop(&chimed, ch);
}

/* One Check of `service` on c (healthcheck.h): the gRPC status, and the
 * serving status when one came (-1 when none). */
static grpc_status_code check(grpc_channel *c, const char *service,
                              const char *token, int *serving, char *details,
                              size_t len) {
  grpc_status_code st;
  assert_int_equal(
      chime__health_check(c, service, token, &st, serving, details, len), 0);
  return st;
}

/* A probe sends no token: it is answered SERVING though every other call
 * needs one; a token, known or not, changes nothing. */
static void test_check_needs_no_token(void **state) {
  (void)state;
  char details[256];
  int s;
  const char *tokens[] = {NULL, ADMIN, "not-a-token"};
  const char *services[] = {"", "chime.v1.Chime"};
  for (size_t t = 0; t < 3; t++) {
    for (size_t i = 0; i < 2; i++) {
      assert_int_equal(
          check(ch, services[i], tokens[t], &s, details, sizeof details),
          GRPC_STATUS_OK);
      assert_int_equal(s, SERVING);
    }
  }
  /* The tokens are on: GetInfo without one is refused. */
  Chime__V1__GetInfoRequest req = CHIME__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st;
  assert_int_equal(chime__raw_unary(ch, "/chime.v1.Chime/GetInfo", &req.base,
                                    &chime__v1__get_info_response__descriptor,
                                    &resp, &st, details, sizeof details),
                   0);
  assert_int_equal(st, GRPC_STATUS_UNAUTHENTICATED);
  assert_null(resp);
}

/* The standard: a service the server does not know is NOT_FOUND. */
static void test_unknown_service(void **state) {
  (void)state;
  char details[256];
  int s;
  const char *names[] = {"chime.v1.Other", "grpc.health.v1.Health", "x"};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(check(ch, names[i], NULL, &s, details, sizeof details),
                     GRPC_STATUS_NOT_FOUND);
    assert_int_equal(s, -1);
    assert_non_null(strstr(details, names[i]));
  }
}

/* Watch is not served (documented): UNIMPLEMENTED for a caller that may
 * call anything. */
static void test_watch_unimplemented(void **state) {
  (void)state;
  chime__raw_t r;
  grpc_metadata md = {grpc_slice_from_static_string("authorization"),
                      grpc_slice_from_static_string("Bearer " ADMIN),
                      {{NULL, NULL, NULL, NULL}}};
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_start_md(&r, ch, "/grpc.health.v1.Health/Watch",
                                       10000, &md, 1),
                   0);
  (void)chime__raw_send(&r, &req.base);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof details, 10000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_UNIMPLEMENTED);
}

/* Bytes that are no HealthCheckRequest, and a name past the method's
 * limit (4 KiB), are INVALID_ARGUMENT; the server goes on answering. */
static void test_bad_requests(void **state) {
  (void)state;
  chime__raw_t r;
  grpc_status_code st;
  char details[256];
  int s;
  static const uint8_t junk[] = {0x0a, 0x7f, 0x01}; /* a length past the end */
  assert_int_equal(chime__raw_start(&r, ch, CHECK, 10000), 0);
  (void)chime__raw_send_bytes(&r, junk, sizeof junk);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof details, 10000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  char *big = malloc(8192);
  assert_non_null(big);
  memset(big, 'a', 8191);
  big[8191] = '\0';
  assert_int_equal(check(ch, big, NULL, &s, details, sizeof details),
                   GRPC_STATUS_INVALID_ARGUMENT);
  free(big);
  assert_int_equal(check(ch, "", NULL, &s, details, sizeof details),
                   GRPC_STATUS_OK);
  assert_int_equal(s, SERVING);
}

/* A channel of its own (its own connection: a stalled stream's data must
 * not share the probes'). */
static grpc_channel *own_channel(const char *addr) {
  grpc_arg a = {GRPC_ARG_INTEGER,
                (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
                {.integer = 1}};
  grpc_channel_args ca = {1, &a};
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *c = grpc_channel_create(addr, cr, &ca);
  grpc_channel_credentials_release(cr);
  return c;
}

/* SIGTERM: from the moment chimed is stopping, every probe hears
 * NOT_SERVING (not "shutting down", not a hang), for as long as the stop
 * lasts; then chimed exits 0. A stream-mode learner that never reads holds
 * the stop for its grace (its batches cannot be sent, so its call cannot
 * end) and gives the probes time. */
static void test_not_serving_while_stopping(void **state) {
  (void)state;
  chime__chimed_t d;
  int s, status = 0;
  char details[256];
  const char *config =
      "{\"tables\": [{\"name\": \"big\", \"spec\": \"x:u8[1048576]\", "
      "\"capacity\": 8, \"sampler\": \"uniform\"}]}";
  assert_int_equal(chime__chimed_start(&d, config, NULL, 30000), 0);
  grpc_channel *probe = chime__raw_channel(d.addr);
  grpc_channel *slow = own_channel(d.addr);

  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  uint8_t *sample = calloc(1, 1 << 20);
  assert_non_null(sample);
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  assert_int_equal(chime_writer_open(&w, c, "big", NULL), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(chime_writer_append(w, sample, 1 << 20, 1.0), 0);
  assert_int_equal(chime_writer_close(w), 0);
  chime_client_destroy(c);
  free(sample);

  /* 3 batches of 8 MiB granted, none read. */
  chime__raw_t sub;
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)"big";
  open.batch_size = 8;
  open.slots = 4;
  open.prefetch = 3;
  open.mode = CHIME__V1__MODE__MODE_STREAM;
  Chime__V1__SubscribeRequest sreq = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  sreq.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  sreq.open = &open;
  assert_int_equal(
      chime__raw_start(&sub, slow, "/chime.v1.Chime/Subscribe", 60000), 0);
  assert_int_equal(chime__raw_send(&sub, &sreq.base), 0);
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(&sub, &chime__v1__subscribe_response__descriptor, &m,
                          30000),
      0);
  assert_non_null(m);
  assert_int_equal(((Chime__V1__SubscribeResponse *)m)->kind_case,
                   CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  protobuf_c_message_free_unpacked(m, NULL);

  assert_int_equal(check(probe, "", NULL, &s, details, sizeof details),
                   GRPC_STATUS_OK);
  assert_int_equal(s, SERVING);
  assert_int_equal(kill(d.proc.pid, SIGTERM), 0);
  /* SERVING until the signal is handled, then NOT_SERVING: five answers
   * in a row (more than the calls the server had asked for before it
   * began to stop). */
  int not_serving = 0;
  int64_t t0 = chime__now_ms();
  while (not_serving < 5) {
    assert_true(chime__now_ms() - t0 < 20000);
    grpc_status_code st = check(probe, not_serving % 2 ? "chime.v1.Chime" : "",
                                NULL, &s, details, sizeof details);
    if (st != GRPC_STATUS_OK)
      fail_msg("probe %d during the stop: status %d '%s'", not_serving, st,
               details);
    if (s == NOT_SERVING)
      not_serving++;
    else
      assert_int_equal(not_serving, 0); /* never SERVING again */
  }
  printf("five NOT_SERVING answers within %lld ms of SIGTERM\n",
         (long long)(chime__now_ms() - t0));
  chime__raw_destroy(&sub); /* cancels: the stop may end */
  assert_int_equal(chime__proc_wait(&d.proc, 20000, &status), 0);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  grpc_channel_destroy(slow);
  grpc_channel_destroy(probe);
  chime__proc_kill(&d.proc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_check_needs_no_token),
      cmocka_unit_test(test_unknown_service),
      cmocka_unit_test(test_watch_unimplemented),
      cmocka_unit_test(test_bad_requests),
      cmocka_unit_test(test_not_serving_while_stopping),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
