/* The ring across processes: a consumer spawned with posix_spawn attaches by
 * fd and checks 10,000 batches; a consumer killed with SIGKILL has its leases
 * reclaimed; the consumer cannot write the data; shutdown wakes a consumer in
 * another process. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/ring.h"
#include "ring/producer.h"
#include "ring_pattern.h"

#ifndef CHIME_RING_CONSUMER
#error "CHIME_RING_CONSUMER (path of the helper) must be defined"
#endif

extern char **environ;

#define SPEC "obs:f32[17], act:i32, mask:bool[3]"

typedef struct {
  pid_t pid;
  int out; /* read end of the child's stdout, or -1 */
} child_t;

static child_t children[4];
static int nchildren;

static chime_ring_t *make_ring(uint32_t batch, uint32_t slots) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime__ring_create(&ring, &spec, batch, slots), 0);
  return ring;
}

/* Starts the helper with a non-CLOEXEC dup of the ring fd. */
static child_t *spawn_consumer(chime_ring_t *ring, const char *mode,
                               const char *arg, int want_stdout) {
  posix_spawn_file_actions_t fa;
  child_t *c = &children[nchildren++];
  char fdtext[16], hex[33];
  uint8_t nonce[16];
  int fd, pipefd[2] = {-1, -1};
  char *argv[6];

  chime_ring_nonce(ring, nonce);
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", nonce[i]);
  fd = fcntl(chime_ring_fd(ring), F_DUPFD, 3); /* no FD_CLOEXEC */
  assert_true(fd >= 0);
  snprintf(fdtext, sizeof(fdtext), "%d", fd);
  argv[0] = (char *)CHIME_RING_CONSUMER;
  argv[1] = fdtext;
  argv[2] = hex;
  argv[3] = (char *)mode;
  argv[4] = (char *)arg;
  argv[5] = NULL;
  assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
  if (want_stdout) {
    assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1), 0);
  }
  assert_int_equal(posix_spawn(&c->pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fd);
  if (want_stdout)
    close(pipefd[1]);
  c->out = pipefd[0];
  return c;
}

/* Waits up to `seconds` for the child; kills it and fails on a hang. */
static int wait_child(child_t *c, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 100; i++) {
    pid_t r = waitpid(c->pid, &status, WNOHANG);
    if (r == c->pid) {
      c->pid = 0;
      return status;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(c->pid, SIGKILL);
  waitpid(c->pid, &status, 0);
  c->pid = 0;
  fail_msg("consumer still running after %d s", seconds);
  return -1;
}

static void read_ready(child_t *c) {
  struct pollfd p = {c->out, POLLIN, 0};
  char buf[16] = "";
  assert_int_equal(poll(&p, 1, 10000), 1);
  assert_true(read(c->out, buf, sizeof(buf) - 1) > 0);
  assert_non_null(strstr(buf, "ready"));
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < nchildren; i++) {
    if (children[i].pid > 0) {
      kill(children[i].pid, SIGKILL);
      waitpid(children[i].pid, NULL, 0);
    }
    if (children[i].out >= 0)
      close(children[i].out);
    children[i].pid = 0;
    children[i].out = -1;
  }
  nchildren = 0;
  return 0;
}

static void test_consumer_process_verifies_10000(void **state) {
  const uint64_t n = 10000;
  chime_ring_t *ring = make_ring(32, 8);
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  chime_ring_stats_t st;
  child_t *c;
  int status;
  (void)state;
  c = spawn_consumer(ring, "verify", "10000", 0);
  for (uint64_t i = 0; i < n; i++) {
    chime__ring_wslot_t w;
    uint64_t seq;
    int rc = chime__ring_acquire(ring, &w, 10000);
    if (rc != 0)
      fail_msg("acquire at batch %llu: %s (consumer died?)",
               (unsigned long long)i, chime_err_name(rc));
    ring_pattern_fill(l, 3, &w, i);
    assert_int_equal(chime__ring_publish(ring, w.slot, &seq), 0);
    assert_int_equal(seq, i);
  }
  status = wait_child(c, 60);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.published, n);
  assert_int_equal(st.released, n);
  assert_true(st.max_leases >= 1 && st.max_leases <= 7);
  chime_ring_destroy(ring);
}

static void test_kill9_consumer_then_reclaim(void **state) {
  chime_ring_t *ring = make_ring(4, 4);
  chime__ring_wslot_t w[4];
  chime_ring_stats_t st;
  child_t *c;
  int status;
  (void)state;
  for (uint64_t i = 0; i < 4; i++) {
    assert_int_equal(chime__ring_acquire(ring, &w[0], 0), 0);
    assert_int_equal(chime__ring_publish(ring, w[0].slot, NULL), 0);
  }
  c = spawn_consumer(ring, "hold", "3", 1);
  read_ready(c);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.leases, 3);
  assert_int_equal(chime__ring_acquire(ring, &w[0], 0), CHIME_ETIMEDOUT);
  assert_int_equal(kill(c->pid, SIGKILL), 0);
  status = wait_child(c, 10);
  assert_true(WIFSIGNALED(status));
  /* Still nothing free: a dead consumer's leases stay until reclaimed. */
  assert_int_equal(chime__ring_acquire(ring, &w[0], 0), CHIME_ETIMEDOUT);
  assert_int_equal(chime__ring_reclaim(ring), 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(chime__ring_acquire(ring, &w[i], 0), 0);
  chime_ring_stats(ring, &st);
  assert_int_equal(st.generation, 1);
  assert_int_equal(st.leases, 0);
  chime_ring_destroy(ring);
}

static void test_consumer_cannot_write_data(void **state) {
  chime_ring_t *ring = make_ring(4, 2);
  child_t *c;
  int status;
  (void)state;
  c = spawn_consumer(ring, "write", NULL, 0);
  status = wait_child(c, 30);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 7); /* faulted */
  chime_ring_destroy(ring);
}

static void test_shutdown_wakes_other_process(void **state) {
  chime_ring_t *ring = make_ring(4, 2);
  struct timespec ts = {0, 100 * 1000 * 1000};
  child_t *c;
  int status;
  (void)state;
  c = spawn_consumer(ring, "shutdown", NULL, 0);
  nanosleep(&ts, NULL); /* usually asleep in the futex by now */
  chime__ring_shutdown(ring);
  status = wait_child(c, 30);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  chime_ring_destroy(ring);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_consumer_process_verifies_10000, teardown),
      cmocka_unit_test_teardown(test_kill9_consumer_then_reclaim, teardown),
      cmocka_unit_test_teardown(test_consumer_cannot_write_data, teardown),
      cmocka_unit_test_teardown(test_shutdown_wakes_other_process, teardown),
  };
  for (int i = 0; i < 4; i++)
    children[i].out = -1;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
