/* The integration-test harness itself, against /bin/sh: lines, JSON, exit
 * status, timeouts, and that no child outlives the test. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "chime/errors.h"
#include "harness.h"

/* Dead, or a zombie nobody reaped yet (PID 1 in a container may not reap). */
static int pid_gone(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 1;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  return rp != NULL && (rp[2] == 'Z' || rp[2] == 'X');
}

static int wait_gone(pid_t pid, int timeout_ms) {
  int64_t deadline = chime__now_ms() + timeout_ms;
  while (!pid_gone(pid)) {
    if (chime__now_ms() > deadline)
      return 0;
    chime__sleep_ms(10);
  }
  return 1;
}

static void test_read_line_and_stop(void **state) {
  (void)state;
  chime__proc_t p;
  const char *argv[] = {"/bin/sh", "-c",
                        "echo noise; echo 'listening on 127.0.0.1:4242'; "
                        "exec sleep 30",
                        NULL};
  char addr[64];
  int st = 0;
  assert_int_equal(chime__proc_spawn(&p, argv, NULL), 0);
  assert_int_equal(
      chime__proc_read_line(&p, "listening on ", addr, sizeof(addr), 10000), 0);
  assert_string_equal(addr, "127.0.0.1:4242");
  assert_int_equal(chime__proc_stop(&p, SIGTERM, 10000, &st), 0);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGTERM);
  assert_true(pid_gone(p.pid));
}

static void test_read_line_eof_and_timeout(void **state) {
  (void)state;
  chime__proc_t p;
  char buf[64];
  const char *quiet[] = {"/bin/sh", "-c", "exec sleep 30", NULL};
  assert_int_equal(chime__proc_spawn(&p, quiet, NULL), 0);
  assert_int_equal(
      chime__proc_read_line(&p, "listening on ", buf, sizeof(buf), 200),
      CHIME_ETIMEDOUT);
  chime__proc_kill(&p);

  const char *dies[] = {"/bin/sh", "-c", "echo bye; exit 2", NULL};
  int st = 0;
  assert_int_equal(chime__proc_spawn(&p, dies, NULL), 0);
  assert_int_equal(
      chime__proc_read_line(&p, "listening on ", buf, sizeof(buf), 10000),
      CHIME_EDISCONNECTED);
  assert_int_equal(chime__proc_wait(&p, 10000, &st), 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 2);
  chime__proc_kill(&p);
}

static void test_last_json_and_exit(void **state) {
  (void)state;
  chime__proc_t p;
  char out[512], json[256], sbuf[64];
  int st = 0;
  snprintf(out, sizeof(out), "%s/json.out", chime__harness_tmpdir());
  const char *argv[] = {"/bin/sh", "-c",
                        "echo '{\"a\":1}'; echo text; echo '{\"a\":2}'; "
                        "echo trailing; exit 3",
                        NULL};
  assert_int_equal(chime__proc_spawn(&p, argv, out), 0);
  assert_int_equal(chime__proc_wait(&p, 10000, &st), 0);
  assert_string_equal(chime__status_str(st, sbuf, sizeof(sbuf)), "exit 3");
  assert_int_equal(chime__proc_last_json(&p, json, sizeof(json)), 0);
  assert_string_equal(json, "{\"a\":2}");
}

static void test_stop_escalates_to_kill(void **state) {
  (void)state;
  chime__proc_t p;
  int st = 0;
  char ready[16];
  const char *argv[] = {"/bin/sh", "-c",
                        "trap '' TERM; echo ready; while :; do sleep 1; done",
                        NULL};
  assert_int_equal(chime__proc_spawn(&p, argv, NULL), 0);
  /* The trap must be in place before SIGTERM is sent. */
  assert_int_equal(
      chime__proc_read_line(&p, "ready", ready, sizeof(ready), 10000), 0);
  assert_int_equal(chime__proc_stop(&p, SIGTERM, 300, &st), CHIME_ETIMEDOUT);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGKILL);
}

static void test_missing_binary(void **state) {
  (void)state;
  chime__proc_t p;
  int st = 0;
  const char *argv[] = {"/nonexistent/chime-no-such-binary", NULL};
  char buf[64];
  assert_null(chime__harness_bin("no/such/binary", buf, sizeof(buf)));
  /* The trampoline reports the failed exec as exit 127. */
  assert_int_equal(chime__proc_spawn(&p, argv, NULL), 0);
  assert_int_equal(chime__proc_wait(&p, 10000, &st), 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 127);
  chime__proc_kill(&p);
}

/* A middle process (this binary, --spawner MODE) spawns a sleeper through the
 * harness and reports its pid; the sleeper must die when the middle one is
 * killed (death signal) and when it exits normally (atexit). */
static void check_grandchild_dies(const char *mode) {
  char self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  assert_true(n > 0);
  self[n] = '\0';
  const char *argv[] = {self, "--spawner", mode, NULL};
  chime__proc_t mid;
  char pidtxt[32];
  assert_int_equal(chime__proc_spawn(&mid, argv, NULL), 0);
  assert_int_equal(
      chime__proc_read_line(&mid, "pid ", pidtxt, sizeof(pidtxt), 20000), 0);
  pid_t grandchild = (pid_t)strtol(pidtxt, NULL, 10);
  assert_true(grandchild > 0);
  /* (In "exit" mode the middle process may already be gone and have taken
   * the sleeper with it; it said "pid" only once the sleeper ran.) */
  if (strcmp(mode, "kill") == 0) {
    assert_false(pid_gone(grandchild));
    chime__proc_kill(&mid);
  } else {
    assert_int_equal(chime__proc_wait(&mid, 20000, NULL), 0);
  }
  assert_true(wait_gone(grandchild, 20000));
  chime__proc_kill(&mid);
}

static void test_children_die_with_killed_test(void **state) {
  (void)state;
  check_grandchild_dies("kill");
}

static void test_children_die_at_exit(void **state) {
  (void)state;
  check_grandchild_dies("exit");
}

static int spawner(const char *mode) {
  chime__proc_t p;
  const char *argv[] = {"/bin/sh", "-c", "echo up; exec sleep 60", NULL};
  char up[8];
  if (chime__proc_spawn(&p, argv, NULL) != 0)
    return 1;
  /* Past the trampoline: the sleeper runs, and only the harness's guarantees
   * can take it down. */
  if (chime__proc_read_line(&p, "up", up, sizeof(up), 20000) != 0)
    return 1;
  printf("pid %ld\n", (long)p.pid);
  fflush(stdout);
  if (strcmp(mode, "kill") == 0)
    pause(); /* until the test kills this process */
  return 0;  /* atexit must take the sleeper down */
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--spawner") == 0)
    return spawner(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_read_line_and_stop,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_read_line_eof_and_timeout,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_last_json_and_exit,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_stop_escalates_to_kill,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_missing_binary, chime__harness_teardown),
      cmocka_unit_test_teardown(test_children_die_with_killed_test,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_children_die_at_exit,
                                chime__harness_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
