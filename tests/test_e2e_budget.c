/* Ring-memory budgets against the real chimed: they are checked before a
 * ring is page-locked, and a ring handed to a learner keeps its charge while
 * that learner still holds it (a process that collects ring fds cannot grow
 * chimed's memory past the total budget), and gives it back when the learner
 * is gone. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"
#include "ring/ring_internal.h"

#define SPEC "x:u8[4000]"
#define BATCH 16
#define SLOTS 4

static char g_chimed[4096];
static char g_self[4096];

/* Bytes of one ring of the streams these tests open (what chimed charges). */
static uint64_t ring_bytes(void) {
  chime_spec_t spec;
  chime_ring_layout_t lay;
  chime__ring_regions_t reg;
  assert_int_equal(chime_spec_parse(&spec, SPEC, NULL, 0), 0);
  assert_int_equal(chime_ring_layout(&lay, &spec, BATCH, SLOTS, NULL, 0), 0);
  assert_int_equal(chime__ring_regions(&lay, chime__page_size(), &reg), 0);
  return reg.total_bytes;
}

/* chimed with a total budget of `total` bytes, its stderr in err_path. */
static void start_chimed(chime__chimed_t *d, uint64_t total, int pin,
                         const char *err_path) {
  char json[1024], path[512];
  const char *argv[8];
  int n = 0;
  snprintf(json, sizeof json,
           "{\"budgets\": {\"stream_ring_bytes\": %llu, \"total_ring_bytes\": "
           "%llu}, \"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC
           "\", \"capacity\": 256, \"sampler\": \"uniform\"}]}\n",
           (unsigned long long)total, (unsigned long long)total);
  assert_int_equal(
      chime__harness_write_file("budget.json", json, path, sizeof path), 0);
  memset(d, 0, sizeof(*d));
  argv[n++] = g_chimed;
  argv[n++] = "--listen";
  argv[n++] = "127.0.0.1:0";
  argv[n++] = "--config";
  argv[n++] = path;
  if (pin)
    argv[n++] = "--pin-host-memory";
  argv[n] = NULL;
  assert_int_equal(chime__proc_spawn_err(&d->proc, argv, NULL, err_path), 0);
  assert_int_equal(chime__proc_read_line(&d->proc, "listening on ", d->addr,
                                         sizeof d->addr, 30000),
                   0);
}

static void stop_chimed(chime__chimed_t *d) {
  int st = 0;
  assert_int_equal(chime__chimed_stop(d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Opens a stream. Returns the Opened answer (free it), or NULL with the
 * status and details of the refusal (the call is then destroyed). */
static Chime__V1__SubscribeResponse *
open_stream(grpc_channel *ch, chime__raw_t *r, Chime__V1__Mode mode,
            grpc_status_code *st, char *details, size_t len) {
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  ProtobufCMessage *m = NULL;
  open.table = (char *)"demo";
  open.batch_size = BATCH;
  open.slots = SLOTS;
  open.mode = mode;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  *st = GRPC_STATUS_OK;
  details[0] = '\0';
  if (chime__raw_start(r, ch, "/chime.v1.Chime/Subscribe", 60000) != 0 ||
      chime__raw_send(r, &req.base) != 0)
    return NULL;
  if (chime__raw_recv_msg(r, &chime__v1__subscribe_response__descriptor, &m,
                          20000) != 0 ||
      m == NULL) {
    chime__raw_finish(r, st, details, len, 20000);
    chime__raw_destroy(r);
    return NULL;
  }
  return (Chime__V1__SubscribeResponse *)m;
}

static Chime__V1__StatsResponse *stats(grpc_channel *ch) {
  Chime__V1__StatsRequest req = CHIME__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m = NULL;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[256];
  if (chime__raw_unary(ch, "/chime.v1.Chime/Stats", &req.base,
                       &chime__v1__stats_response__descriptor, &m, &st, details,
                       sizeof details) != 0 ||
      st != GRPC_STATUS_OK)
    return NULL;
  return (Chime__V1__StatsResponse *)m;
}

static uint64_t ring_bytes_total(grpc_channel *ch) {
  Chime__V1__StatsResponse *s = stats(ch);
  assert_non_null(s);
  uint64_t v = s->ring_bytes_total;
  protobuf_c_message_free_unpacked(&s->base, NULL);
  return v;
}

static size_t count_lines(const char *path, const char *prefix) {
  char line[512];
  size_t n = 0;
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  while (fgets(line, sizeof line, f) != NULL)
    n += strncmp(line, prefix, strlen(prefix)) == 0;
  fclose(f);
  return n;
}

/* A stream refused for the total budget never reaches cudaHostRegister. */
static void test_budget_checked_before_pinning(void **state) {
  chime__chimed_t d;
  chime__raw_t a, b;
  grpc_status_code st;
  char details[512], log[512];
  (void)state;
  snprintf(log, sizeof log, "%s/cudart.log", chime__harness_tmpdir());
  unsetenv("CHIME_CUDART");
  setenv("CUDA_HOME", FAKE_CUDART_ROOT, 1);
  setenv("FAKE_CUDART_LOG", log, 1);
  start_chimed(&d, ring_bytes() + ring_bytes() / 2, 1, NULL);
  unsetenv("FAKE_CUDART_LOG");
  unsetenv("CUDA_HOME");
  grpc_channel *ch = chime__raw_channel(d.addr);

  Chime__V1__SubscribeResponse *ra = open_stream(
      ch, &a, CHIME__V1__MODE__MODE_STREAM, &st, details, sizeof details);
  if (ra == NULL)
    fail_msg("first stream refused: %s", details);
  protobuf_c_message_free_unpacked(&ra->base, NULL);
  size_t pinned = count_lines(log, "register ");
  assert_int_equal(pinned, SLOTS); /* one registration per slot */

  assert_null(open_stream(ch, &b, CHIME__V1__MODE__MODE_STREAM, &st, details,
                          sizeof details));
  assert_int_equal(st, GRPC_STATUS_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(details, "total budget"));
  assert_int_equal(count_lines(log, "register "), pinned);
  assert_int_equal(count_lines(log, "register-fail "), 0);
  assert_int_equal(ring_bytes_total(ch), ring_bytes());

  chime__raw_destroy(&a);
  grpc_channel_destroy(ch);
  stop_chimed(&d);
}

static int teardown(void **state) {
  (void)state;
  chime__harness_kill_all();
  return 0;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_budget_checked_before_pinning, teardown),
  };
  (void)argc;
  (void)argv;
  if (chime__harness_bin("src/server/chimed", g_chimed, sizeof g_chimed) ==
      NULL)
    chime__skip("chimed is not built");
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (n <= 0)
    chime__skip("no /proc/self/exe");
  g_self[n] = '\0';
  grpc_init();
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  grpc_shutdown_blocking();
  return rc;
}
