/* fork() with a client open (src/client/fork.h): a child gets CHIME_ENOTSUP
 * at once from every object it inherited (client, writer, shm and stream
 * mode streams, batches) and destroys them without touching the parent's
 * connection; a client it makes itself works in both modes while the
 * parent holds streams whose threads poll; the parent's client, streams
 * and writer then work at once.
 *
 * These tests fork on purpose (the harness never does): the child reports
 * through its exit status and stderr, never through CMocka. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"
#include "pattern.h"
#include "streams.h"
#include "writes.h"

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define SAMPLE_BYTES 264

static const char *config =
    "{\"tables\": [{\"name\": \"u\", \"spec\": \"" SPEC "\", \"capacity\": "
    "4096, \"min_size\": 1, \"sampler\": \"uniform\"}]}\n";

static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  return chime_spec_parse(&spec, SPEC) == 0 ? 0 : -1;
}

/* One batch, checked against the pattern, released. */
static int one_batch(chime_stream_t *s) {
  chime_batch_t b;
  uint64_t ids[8];
  char err[256];
  int rc = chime_stream_next(s, &b, 20000);
  if (rc == 0 && chime__pattern_verify(&b, ids, err, sizeof(err)) != 0)
    rc = CHIME_ECORRUPT;
  if (rc == 0)
    rc = chime_stream_release(s, &b);
  return rc;
}

/* In the child: report and leave without atexit handlers (the harness's
 * belong to the parent). */
#define CHILD_CHECK(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "child, line %d: ", __LINE__);                           \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

static void child(const char *addr, chime_client_t *c, chime_stream_t *s[2],
                  chime_writer_t *w) {
  /* Inherited: CHIME_ENOTSUP at once, saying why. */
  chime_server_info_t *info = NULL;
  int rc = chime_client_info(c, &info);
  CHILD_CHECK(rc == CHIME_ENOTSUP, "inherited client info: %s",
              chime_err_name(rc));
  CHILD_CHECK(strstr(chime_last_error(), "fork()") != NULL,
              "inherited client: '%s'", chime_last_error());
  chime_stats_t *st = NULL;
  CHILD_CHECK(chime_client_stats(c, &st) == CHIME_ENOTSUP, "stats");
  chime_stream_t *s3 = NULL;
  CHILD_CHECK(chime__try_open_stream(&s3, c, "u", CHIME_MODE_STREAM, 8, 4,
                                     NULL) == CHIME_ENOTSUP,
              "stream open on an inherited client");
  for (int i = 0; i < 2; i++) {
    chime_batch_t b;
    rc = chime_stream_next(s[i], &b, 0);
    CHILD_CHECK(rc == CHIME_ENOTSUP, "inherited stream %d next: %s", i,
                chime_err_name(rc));
    CHILD_CHECK(strstr(chime_last_error(), "fork()") != NULL,
                "inherited stream: '%s'", chime_last_error());
  }
  uint8_t sample[SAMPLE_BYTES] = {0};
  rc = chime_writer_append(w, sample, sizeof(sample), 1.0);
  CHILD_CHECK(rc == CHIME_ENOTSUP, "inherited writer append: %s",
              chime_err_name(rc));
  CHILD_CHECK(chime_writer_flush(w) == CHIME_ENOTSUP, "inherited flush");

  /* Its own client works, in both modes, while the parent's stream
   * threads poll (the other order of the issue). */
  chime_client_t *mine = NULL;
  rc = chime_client_create(&mine, addr, NULL);
  CHILD_CHECK(rc == 0, "own client: %s", chime_err_name(rc));
  rc = chime_client_info(mine, &info);
  CHILD_CHECK(rc == 0, "own info: %s", chime_last_error());
  chime_server_info_free(info);
  rc = chime__write_pattern(mine, "u", &spec, 7, 64, NULL);
  CHILD_CHECK(rc == 0, "own writer: %s", chime_err_name(rc));
  const chime_mode_t modes[2] = {CHIME_MODE_SHM, CHIME_MODE_STREAM};
  for (int i = 0; i < 2; i++) {
    chime_stream_t *own = NULL;
    rc = chime__try_open_stream(&own, mine, "u", modes[i], 8, 4, NULL);
    CHILD_CHECK(rc == 0, "own %s stream: %s", chime_mode_name(modes[i]),
                chime_last_error());
    for (int k = 0; k < 3; k++) {
      rc = one_batch(own);
      CHILD_CHECK(rc == 0, "own %s batch: %s", chime_mode_name(modes[i]),
                  chime_last_error());
    }
    chime_stream_close(own);
  }
  chime_client_destroy(mine);

  /* Ending the inherited objects frees this copy only. */
  chime_stream_close(s[0]);
  chime_stream_close(s[1]);
  CHILD_CHECK(chime_writer_close(w) == CHIME_ENOTSUP, "inherited close");
  chime_client_destroy(c);
  _exit(0);
}

/* A process that overstayed: every thread's stack on stderr (gdb, when
 * there is one), for it and its own children, so a hang says where it
 * hangs. posix_spawn: no fork handlers run in this gRPC process. */
static void dump_stacks(pid_t pid) {
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "for p in %d $(pgrep -P %d); do echo \"== stacks of $p\"; "
           "command -v gdb >/dev/null && timeout 60 gdb -p $p -batch -nx "
           "-ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' | "
           "head -150; done 1>&2",
           (int)pid, (int)pid);
  char *argv[] = {"sh", "-c", cmd, NULL};
  extern char **environ;
  pid_t sh;
  if (posix_spawnp(&sh, "sh", NULL, NULL, argv, environ) == 0)
    waitpid(sh, NULL, 0);
}

/* Waits for pid, at most timeout_ms; kills it when it overstays. */
static int wait_child(pid_t pid, int timeout_ms) {
  int64_t end = chime__now_ms() + timeout_ms;
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return st;
    if (chime__now_ms() > end) {
      dump_stacks(pid);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      fail_msg("child %d did not finish in %d ms", (int)pid, timeout_ms);
    }
    chime__sleep_ms(10);
  }
}

static void fork_with_everything_open(int stream_thread_busy) {
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(chime__chimed_start_client(&d, config, &c), 0);
  assert_int_equal(chime__write_pattern(c, "u", &spec, 5, 256, NULL), 0);
  chime_stream_t *s[2] = {NULL, NULL};
  assert_int_equal(
      chime__try_open_stream(&s[0], c, "u", CHIME_MODE_SHM, 8, 4, NULL), 0);
  assert_int_equal(
      chime__try_open_stream(&s[1], c, "u", CHIME_MODE_STREAM, 8, 4, NULL), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(one_batch(s[i]), 0);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "u", NULL), 0);
  assert_int_equal(chime__append_pattern(w, &spec, 6, 8), 0);
  if (stream_thread_busy) {
    /* A learner away from next(): the stream-mode stream's own thread
     * receives meanwhile, so it is inside gRPC when fork() comes. */
    chime__sleep_ms(50);
  }

  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    child(d.addr, c, s, w);
  int st = wait_child(pid, 60000);
  char why[64];
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("child: %s", chime__status_str(st, why, sizeof(why)));

  /* The parent's objects: untouched, and at once (the fault: a 3 s
   * timeout of its next call, a corrupt HTTP/2 stream). */
  chime_server_info_t *info = NULL;
  int rc = chime_client_info(c, &info);
  if (rc)
    fail_msg("parent info after the fork: %s", chime_last_error());
  chime_server_info_free(info);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 5; k++)
      if ((rc = one_batch(s[i])) != 0)
        fail_msg("parent stream %d: %s", i, chime_last_error());
  assert_int_equal(chime__append_pattern(w, &spec, 8, 64), 0);
  assert_int_equal(chime_writer_close(w), 0);
  chime_stream_close(s[0]);
  chime_stream_close(s[1]);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

static void test_fork_child_makes_own_client(void **state) {
  (void)state;
  fork_with_everything_open(0);
}

static void test_fork_while_stream_thread_receives(void **state) {
  (void)state;
  fork_with_everything_open(1);
}

/* Two forks in a row and a grandchild: the generation moves on. */
static void test_fork_twice(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(chime__chimed_start_client(&d, config, &c), 0);
  assert_int_equal(chime__write_pattern(c, "u", &spec, 5, 64, NULL), 0);
  for (int round = 0; round < 2; round++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      chime_client_t *mine = NULL;
      CHILD_CHECK(chime_client_create(&mine, d.addr, NULL) == 0, "create");
      CHILD_CHECK(chime__write_pattern(mine, "u", &spec, 9, 16, NULL) == 0,
                  "child insert");
      pid_t g = fork();
      CHILD_CHECK(g >= 0, "fork");
      if (g == 0) {
        chime_server_info_t *info = NULL;
        CHILD_CHECK(chime_client_info(mine, &info) == CHIME_ENOTSUP,
                    "grandchild, inherited");
        chime_client_t *own = NULL;
        CHILD_CHECK(chime_client_create(&own, d.addr, NULL) == 0, "g create");
        CHILD_CHECK(chime__write_pattern(own, "u", &spec, 10, 16, NULL) == 0,
                    "grandchild insert");
        chime_client_destroy(own);
        _exit(0);
      }
      int gst = 0;
      waitpid(g, &gst, 0);
      CHILD_CHECK(WIFEXITED(gst) && WEXITSTATUS(gst) == 0, "grandchild");
      CHILD_CHECK(chime__write_pattern(mine, "u", &spec, 11, 16, NULL) == 0,
                  "child after its fork");
      chime_client_destroy(mine);
      _exit(0);
    }
    int st = wait_child(pid, 60000);
    char why[64];
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("child: %s", chime__status_str(st, why, sizeof(why)));
    assert_int_equal(chime__write_pattern(c, "u", &spec, 12, 16, NULL), 0);
  }
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_fork_child_makes_own_client,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_fork_while_stream_thread_receives,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_fork_twice, chime__harness_teardown),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
