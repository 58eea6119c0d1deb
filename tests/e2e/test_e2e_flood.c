/* A connection flood against a chimed whose fd limit is low: more idle TCP
 * connections than it has fds, then closed. gRPC 1.51's own listener stops
 * accepting for good after one EMFILE; chimed must serve a new client again
 * once the flood is over, and keep serving the clients it already had
 * while the flood lasts. Two floods: silent connections (never a byte) and
 * connections that speak HTTP/2's preface and then idle (these reach gRPC). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"

#define NOFILE 256
#define FLOOD 400
#define FLOOD_HOLD_MS 1500
#define RECOVER_WAIT_MS 60000

static chime__chimed_t chimed;
static int flood[FLOOD];

static int setup(void **state) {
  (void)state;
  struct rlimit rl;
  /* The flood is opened from here: this process needs the fds. */
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max < FLOOD + 128)
    chime__skip("the hard fd limit is too low for the flood");
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    return -1;
  for (int i = 0; i < FLOOD; i++)
    flood[i] = -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < FLOOD; i++)
    if (flood[i] >= 0)
      close(flood[i]);
  chime__harness_kill_all();
  return 0;
}

static void start_limited(void) {
  char n[16];
  snprintf(n, sizeof(n), "%d", NOFILE);
  setenv("CHIME__HARNESS_NOFILE", n, 1);
  int rc = chime__chimed_start(&chimed, NULL, NULL, 30000);
  unsetenv("CHIME__HARNESS_NOFILE");
  if (rc == CHIME_ENOTFOUND)
    chime__skip("chimed is not built");
  assert_int_equal(rc, 0);
}

static void addr_of(struct sockaddr_in *sa) {
  const char *colon = strrchr(chimed.addr, ':');
  char host[64];
  assert_non_null(colon);
  assert_true((size_t)(colon - chimed.addr) < sizeof(host));
  snprintf(host, sizeof(host), "%.*s", (int)(colon - chimed.addr), chimed.addr);
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)atoi(colon + 1));
  assert_int_equal(inet_pton(AF_INET, host, &sa->sin_addr), 1);
}

/* HTTP/2's client preface and an empty SETTINGS frame: enough for gRPC to
 * take the connection as a client's and wait for its calls. */
static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                              "\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/* Opens the flood without waiting for each connect: the kernel completes
 * the handshakes from chimed's backlog whether chimed accepts or not. */
static void open_flood(int speak) {
  struct sockaddr_in sa;
  addr_of(&sa);
  for (int i = 0; i < FLOOD; i++) {
    flood[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(flood[i] >= 0);
    /* Blocking connect: loopback completes it at once, or refuses it when
     * the backlog is full, which is part of a flood too. */
    if (connect(flood[i], (struct sockaddr *)&sa, sizeof(sa)) != 0)
      continue;
    if (speak)
      (void)send(flood[i], preface, sizeof(preface) - 1, MSG_NOSIGNAL);
  }
}

static void close_flood(void) {
  for (int i = 0; i < FLOOD; i++) {
    if (flood[i] >= 0)
      close(flood[i]);
    flood[i] = -1;
  }
}

static void assert_running(void) {
  int st = 0;
  char sbuf[64];
  if (chime__proc_wait(&chimed.proc, 0, &st) != CHIME_ETIMEDOUT)
    fail_msg("chimed exited during the flood (%s)",
             chime__status_str(st, sbuf, sizeof(sbuf)));
}

/* A new client (a fresh channel each time, so gRPC's reconnect backoff of
 * an earlier failure plays no part) until GetInfo answers. */
static void assert_new_client_served(const char *what) {
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.timeout_ms = 2000;
  int64_t t0 = chime__now_ms();
  int attempts = 0, rc = -1;
  char last[256] = "";
  while (chime__now_ms() - t0 < RECOVER_WAIT_MS) {
    chime_client_t *c = NULL;
    chime_server_info_t *info = NULL;
    attempts++;
    assert_int_equal(chime_client_create(&c, chimed.addr, &o), 0);
    rc = chime_client_info(c, &info);
    if (rc != 0)
      snprintf(last, sizeof(last), "%s", chime_last_error());
    chime_server_info_free(info);
    chime_client_destroy(c);
    if (rc == 0)
      break;
    chime__sleep_ms(200);
  }
  if (rc != 0)
    fail_msg("%s: no new client served within %d ms (%d attempts; last: %s)",
             what, RECOVER_WAIT_MS, attempts, last);
  printf("%s: a new client served %lld ms after the flood ended (%d "
         "attempts)\n",
         what, (long long)(chime__now_ms() - t0), attempts);
}

/* lower_to > 0: once chimed runs, its fd limit drops to lower_to, under
 * its connection cap, so the flood runs it out of fds (EMFILE) instead of
 * into the cap. */
static void flood_and_recover(int speak, int lower_to, const char *what) {
  chime_client_t *old = NULL;
  chime_server_info_t *info = NULL;
  int st = 0;
  start_limited();
  if (lower_to > 0) {
    struct rlimit rl = {(rlim_t)lower_to, (rlim_t)lower_to};
    assert_int_equal(prlimit(chimed.proc.pid, RLIMIT_NOFILE, &rl, NULL), 0);
  }
  /* A client from before the flood, connected. */
  assert_int_equal(chime_client_create(&old, chimed.addr, NULL), 0);
  assert_int_equal(chime_client_info(old, &info), 0);
  chime_server_info_free(info);

  open_flood(speak);
  int64_t t0 = chime__now_ms();
  while (chime__now_ms() - t0 < FLOOD_HOLD_MS) {
    assert_running();
    chime__sleep_ms(100);
  }
  /* The connected client keeps being served while the flood lasts. */
  info = NULL;
  if (chime_client_info(old, &info) != 0)
    fail_msg("%s: a connected client failed during the flood: %s", what,
             chime_last_error());
  chime_server_info_free(info);
  /* Gone before the new clients: gRPC shares one connection among a
   * process's channels to the same address, and a new client must make its
   * own. */
  chime_client_destroy(old);
  close_flood();
  assert_new_client_served(what);
  assert_int_equal(chime__chimed_stop(&chimed, 20000, &st), 0);
  assert_int_equal(st, 0);
}

static void test_silent_flood(void **state) {
  (void)state;
  flood_and_recover(0, 0, "silent flood");
}

static void test_http2_flood(void **state) {
  (void)state;
  flood_and_recover(1, 0, "HTTP/2 flood");
}

static void test_flood_past_fd_limit(void **state) {
  (void)state;
  flood_and_recover(1, NOFILE / 2, "flood past the fd limit");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_silent_flood, setup, teardown),
      cmocka_unit_test_setup_teardown(test_http2_flood, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flood_past_fd_limit, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
