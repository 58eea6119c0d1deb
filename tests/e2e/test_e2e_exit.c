/* A program may return from main() right after chime_client_destroy
 * (issue 33): exit_client (create, GetInfo, a writer, a stream, destroy,
 * return 0) run many times against a real chimed, over shm and stream,
 * and against a target with a shard that refuses connections (whose
 * channel gRPC was still tearing down, on its own threads, when destroy
 * returned: gRPC stayed up ~1 s and exit()'s C++ destructors ran under
 * it). Every run must exit 0: no signal, and gRPC no longer initialized
 * after destroy (exit_client checks; 3 when it is). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"

/* Per mode; the whole test stays near 20 s. A sanitized exit_client
 * starts several times slower (ASan maps its shadow first): fewer runs
 * keep that build's test inside its timeout on a busy 2-core machine. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RUNS 40
#else
#define RUNS 100
#endif
#define UNREACHABLE_RUNS 10 /* each ~1 s: destroy waits out the backoff */

static const char *config =
    "{\"tables\": [{\"name\": \"t\", \"spec\": \"x:u8[64]\", \"capacity\": "
    "1024, \"min_size\": 1, \"sampler\": \"uniform\"}]}\n";

static chime__chimed_t chimed;
static char bin[1024];
static char dead_target[600]; /* "chimed,DEAD" */
static int dead_fd = -1;      /* bound, never listening: refused at once */

static int setup(void **state) {
  (void)state;
  if (chime__harness_bin("tests/exit_client", bin, sizeof(bin)) == NULL)
    chime__skip("exit_client is not built");
  int rc = chime__chimed_start_or_skip(&chimed, config, NULL, 30000);
  if (rc != 0)
    return -1;
  char dead[64];
  if ((dead_fd = chime__refusing_addr(dead, sizeof(dead))) < 0)
    return -1;
  snprintf(dead_target, sizeof(dead_target), "%s,%s", chimed.addr, dead);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int st = 0;
  int rc = chime__chimed_stop(&chimed, 20000, &st);
  chime__harness_kill_all();
  if (dead_fd >= 0)
    close(dead_fd);
  return rc == 0 && st == 0 ? 0 : -1;
}

static void run_many(const char *target, const char *mode, int runs) {
  const char *argv[] = {bin, target, "t", mode, NULL};
  for (int i = 0; i < runs; i++) {
    char out[256], err[2048], what[64];
    int status = 0;
    int rc = chime__proc_run(argv, 30000, out, sizeof(out), err, sizeof(err),
                             &status);
    if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail_msg("%s run %d of %d: %s (%s): %s", mode, i + 1, runs,
               chime__status_str(status, what, sizeof(what)),
               rc ? chime_strerror(rc) : "ran", err);
  }
}

static void test_shm(void **state) {
  (void)state;
  run_many(chimed.addr, "shm", RUNS);
}

static void test_stream(void **state) {
  (void)state;
  run_many(chimed.addr, "stream", RUNS);
}

static void test_unreachable_shard(void **state) {
  (void)state;
  run_many(dead_target, "unreachable", UNREACHABLE_RUNS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shm),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_unreachable_shard),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
