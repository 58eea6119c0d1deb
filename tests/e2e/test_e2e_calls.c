/* A flood of calls against the real chimed (each open call costs the
 * server about 12 KiB): one connection holds at most
 * max_calls_per_connection calls (HTTP/2's concurrent-stream limit, so a
 * call past it waits in its client and never reaches the server), and the
 * server at most max_calls in all: a call past that ends at once with
 * RESOURCE_EXHAUSTED, a health check excepted, and calls are served again
 * as soon as one ends. Streams (stream mode) are the calls held: each is
 * open on the server once chime_stream_open returned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "chime/chime.h"
#include "harness.h"
#include "streams.h"
#include "healthcheck.h"
#include "rawcall.h"

#define PER_CONN 3
#define MAX_CALLS 4

static const char *config =
    "{\"max_calls_per_connection\": 3, \"max_calls\": 4, \"tables\": "
    "[{\"name\": \"u\", \"spec\": \"x:u64[]\", \"capacity\": 64, "
    "\"sampler\": \"uniform\"}]}\n";

static int setup(void **state) {
  (void)state;
  grpc_init();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  chime__harness_kill_all();
  grpc_shutdown_blocking();
  return 0;
}

/* A client of its own: its own connection. */
static chime_client_t *client(const chime__chimed_t *d, int timeout_ms) {
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.timeout_ms = timeout_ms;
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, d->addr, &o), 0);
  return c;
}

static int info(chime_client_t *c) {
  chime_server_info_t *i = NULL;
  int rc = chime_client_info(c, &i);
  chime_server_info_free(i);
  return rc;
}

/* GetInfo until it is served (a call that ended is forgotten by the server
 * just after its client heard its status), within 20 s. */
static void served_again(chime_client_t *c) {
  int64_t end = chime__now_ms() + 20000;
  int rc;
  while ((rc = info(c)) != 0 && chime__now_ms() < end)
    chime__sleep_ms(5);
  if (rc != 0)
    fail_msg("not served again: %s", chime_last_error());
}

/* A health check on a connection of its own: SERVING, 1. */
static int health(const char *addr) {
  grpc_channel *ch = chime__raw_channel(addr);
  grpc_status_code st;
  int serving;
  assert_int_equal(chime__health_check(ch, "", NULL, &st, &serving, NULL, 0),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  grpc_channel_destroy(ch);
  return serving;
}

/* PER_CONN streams fill one connection: its next call never reaches the
 * server (out of time in its client), while another connection is
 * served; once one stream ends, the first connection's calls go again. */
static void test_per_connection(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c2 = NULL;
  assert_int_equal(chime__chimed_start_client(&d, config, &c2), 0);
  chime_client_t *c1 = client(&d, 1000);
  chime_stream_t *s[PER_CONN];
  for (int i = 0; i < PER_CONN; i++)
    s[i] = chime__open_stream(c1, "u", CHIME_MODE_STREAM, 1, 0, NULL);
  assert_int_equal(info(c1), CHIME_ETIMEDOUT);
  assert_int_equal(info(c2), 0);
  chime_stream_close(s[0]);
  served_again(c1);
  for (int i = 1; i < PER_CONN; i++)
    chime_stream_close(s[i]);
  chime_client_destroy(c1);
  assert_int_equal(chime__chimed_stop_client(&d, c2), 0);
}

/* MAX_CALLS streams over two connections fill the server: a third
 * connection's call is refused at once, saying why, but a health check
 * is answered; once one stream ends, calls are served again. */
static void test_max_calls(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c3 = NULL;
  assert_int_equal(chime__chimed_start_client(&d, config, &c3), 0);
  chime_client_t *c[2] = {client(&d, 5000), client(&d, 5000)};
  chime_stream_t *s[MAX_CALLS];
  for (int i = 0; i < MAX_CALLS; i++)
    s[i] = chime__open_stream(c[i % 2], "u", CHIME_MODE_STREAM, 1, 0, NULL);
  assert_int_equal(info(c3), CHIME_ERESOURCE); /* not CHIME_ETIMEDOUT */
  assert_non_null(strstr(chime_last_error(), "max_calls"));
  chime_stream_t *more = NULL;
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.batch_size = 1;
  o.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&more, c3, "u", &o), CHIME_ERESOURCE);
  assert_int_equal(health(d.addr), 1);
  chime_stream_close(s[0]);
  served_again(c3);
  for (int i = 1; i < MAX_CALLS; i++)
    chime_stream_close(s[i]);
  chime_client_destroy(c[0]);
  chime_client_destroy(c[1]);
  assert_int_equal(chime__chimed_stop_client(&d, c3), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_per_connection),
      cmocka_unit_test(test_max_calls),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
