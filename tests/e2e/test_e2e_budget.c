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
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_ring_layout_compute(&lay, &spec, BATCH, SLOTS), 0);
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

/* Presents a token on the handoff socket; returns the ring's fd or -1. */
static int fetch_fd(const char *path, const uint8_t *token) {
  struct sockaddr_un sa;
  uint8_t req[24], rep[4];
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  int fd = -1;
  size_t n = strlen(path);
  if (path[0] != '@' || n >= sizeof(sa.sun_path))
    return -1;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path + 1, path + 1, n - 1);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 ||
      connect(s, (struct sockaddr *)&sa,
              (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) != 0)
    goto out;
  memcpy(req, "CHIMEHO1", 8);
  memcpy(req + 8, token, 16);
  if (write(s, req, sizeof req) != (ssize_t)sizeof req)
    goto out;
  struct iovec iov = {rep, sizeof rep};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.b;
  m.msg_controllen = sizeof ctl.b;
  if (recvmsg(s, &m, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof rep) {
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (c != NULL && c->cmsg_type == SCM_RIGHTS)
      memcpy(&fd, CMSG_DATA(c), sizeof fd);
  }
out:
  if (s >= 0)
    close(s);
  return fd;
}

/* Whether the server still lists stream id among its open streams. */
static int stream_listed(grpc_channel *ch, uint64_t id) {
  Chime__V1__StatsResponse *s = stats(ch);
  int found = s == NULL;
  for (size_t i = 0; s != NULL && i < s->n_streams; i++)
    found |= s->streams[i]->stream_id == id;
  if (s != NULL)
    protobuf_c_message_free_unpacked(&s->base, NULL);
  return found;
}

/* The helper process: opens shm streams, fetches each ring and keeps it
 * (the fd, or a mapping of it with the fd closed), and cancels the stream,
 * until chimed refuses; prints "refused after N: CODE" and waits to be
 * killed. */
static int hold_main(const char *addr) {
  grpc_init();
  grpc_channel *ch = chime__raw_channel(addr);
  int i;
  grpc_status_code st = GRPC_STATUS_OK;
  for (i = 0; i < 12; i++) {
    chime__raw_t r;
    char details[512];
    Chime__V1__SubscribeResponse *resp = open_stream(
        ch, &r, CHIME__V1__MODE__MODE_SHM, &st, details, sizeof details);
    if (resp == NULL)
      break;
    uint64_t id = resp->opened->stream_id;
    int fd = fetch_fd(resp->opened->handoff->socket_path,
                      resp->opened->handoff->token.data);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (fd < 0) {
      printf("no fd\n");
      fflush(stdout);
      return 1;
    }
    if (i % 2 == 1) {
      struct stat sb;
      if (fstat(fd, &sb) != 0 || mmap(NULL, (size_t)sb.st_size, PROT_READ,
                                      MAP_SHARED, fd, 0) == MAP_FAILED)
        return 1;
      close(fd);
    }
    chime__raw_destroy(&r); /* cancels: the stream ends */
    int64_t deadline = chime__now_ms() + 20000;
    while (stream_listed(ch, id) && chime__now_ms() < deadline)
      chime__sleep_ms(5);
  }
  printf("refused after %d: %d\n", i < 12 ? i : -1, (int)st);
  fflush(stdout);
  for (;;)
    pause();
}

/* A process that collects rings is held to the total budget (whether it
 * keeps their fds or only mappings), and its rings' budget comes back when
 * it dies. */
static void test_held_rings_count(void **state) {
  chime__chimed_t d;
  chime__proc_t helper;
  chime__raw_t a;
  grpc_status_code st;
  char details[512], line[128];
  int n = 0, code = 0;
  (void)state;
  uint64_t rb = ring_bytes();
  start_chimed(&d, 3 * rb + rb / 2, 0, NULL);
  grpc_channel *ch = chime__raw_channel(d.addr);
  const char *argv[] = {g_self, "--hold", d.addr, NULL};
  assert_int_equal(chime__proc_spawn(&helper, argv, NULL), 0);
  assert_int_equal(chime__proc_read_line(&helper, "refused after ", line,
                                         sizeof line, 90000),
                   0);
  assert_int_equal(sscanf(line, "%d: %d", &n, &code), 2);
  assert_int_equal(n, 3);
  assert_int_equal(code, GRPC_STATUS_RESOURCE_EXHAUSTED);
  /* No stream is open, but three rings are still held. */
  assert_int_equal(ring_bytes_total(ch), 3 * rb);
  assert_null(open_stream(ch, &a, CHIME__V1__MODE__MODE_STREAM, &st, details,
                          sizeof details));
  assert_int_equal(st, GRPC_STATUS_RESOURCE_EXHAUSTED);

  chime__proc_kill(&helper);
  int64_t deadline = chime__now_ms() + 30000;
  while (ring_bytes_total(ch) != 0) {
    if (chime__now_ms() > deadline)
      fail_msg("30 s after the helper died: %llu ring bytes still charged",
               (unsigned long long)ring_bytes_total(ch));
    chime__sleep_ms(10);
  }
  Chime__V1__SubscribeResponse *ra = open_stream(
      ch, &a, CHIME__V1__MODE__MODE_STREAM, &st, details, sizeof details);
  if (ra == NULL)
    fail_msg("refused after the helper died: %s", details);
  protobuf_c_message_free_unpacked(&ra->base, NULL);
  chime__raw_destroy(&a);
  grpc_channel_destroy(ch);
  stop_chimed(&d);
}

/* A ring the server cannot page-lock: the learner hears the CUDA error and
 * where to look, not the server's library paths; chimed's stderr has the
 * whole report. */
static void test_pin_failure_short_message(void **state) {
  chime__chimed_t d;
  chime__raw_t a;
  grpc_status_code st;
  char details[4096], err_path[512];
  (void)state;
  snprintf(err_path, sizeof err_path, "%s/chimed.err", chime__harness_tmpdir());
  unsetenv("CHIME_CUDART");
  setenv("CUDA_HOME", FAKE_CUDART_ROOT, 1);
  setenv("FAKE_CUDART_FAIL_REGISTER_AT", "2", 1);
  start_chimed(&d, 8 * ring_bytes(), 1, err_path);
  unsetenv("FAKE_CUDART_FAIL_REGISTER_AT");
  unsetenv("CUDA_HOME");
  grpc_channel *ch = chime__raw_channel(d.addr);

  assert_null(open_stream(ch, &a, CHIME__V1__MODE__MODE_SHM, &st, details,
                          sizeof details));
  assert_int_equal(st, GRPC_STATUS_FAILED_PRECONDITION);
  assert_string_equal(details,
                      "page-locking the ring failed on the server: "
                      "cudaErrorMemoryAllocation (2); see the server log");
  /* Nothing was left charged, and the next ring pins. */
  assert_int_equal(ring_bytes_total(ch), 0);
  Chime__V1__SubscribeResponse *ra = open_stream(
      ch, &a, CHIME__V1__MODE__MODE_STREAM, &st, details, sizeof details);
  if (ra == NULL)
    fail_msg("refused after a failed pin: %s", details);
  protobuf_c_message_free_unpacked(&ra->base, NULL);
  chime__raw_destroy(&a);
  grpc_channel_destroy(ch);
  stop_chimed(&d);

  char line[8192];
  int whole = 0;
  FILE *f = fopen(err_path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f) != NULL)
    whole |= strstr(line, "chimed: stream on table 'demo': cannot page-lock "
                          "the ring: page-locking failed: "
                          "cudaErrorMemoryAllocation (2) from "
                          "cudaHostRegister(") != NULL &&
             strstr(line, FAKE_CUDART_ROOT) != NULL &&
             strstr(line, "ladder:") != NULL;
  fclose(f);
  assert_true(whole);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_budget_checked_before_pinning,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_held_rings_count, chime__harness_teardown),
      cmocka_unit_test_teardown(test_pin_failure_short_message,
                                chime__harness_teardown),
  };
  if (argc == 3 && strcmp(argv[1], "--hold") == 0)
    return hold_main(argv[2]);
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
