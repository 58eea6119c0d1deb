/* Nobody can lock learners out of the handoff socket: while a flooder (this
 * binary re-executed, --flood) keeps more idle connections open than chimed
 * has handshake slots, reconnecting each one chimed drops, a real shm
 * learner of chimed's uid still attaches and reads batches. The flooder is of
 * chimed's own uid, of another uid (closed at accept), and of another uid
 * that allowed_uids lets in (held to its per-uid share of the slots). The
 * other-uid cases need root (to become nobody); without it they are not run
 * and the binary exits 77 after the rest passed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "writes.h"
#include "pattern.h"

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define SAMPLE_BYTES 264
#define NOBODY 65534
/* More than chimed's 64 handshake slots. */
#define FLOOD_CONNS 80
/* Each attach is a fresh handoff; the old single pool let one in now and
 * then, so one lucky attach would prove little. */
#define ATTACHES 3

static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  return chime_spec_parse(&spec, SPEC) == 0 ? 0 : -1;
}

/* chimed with a uniform table (batches never run out), its handoff socket
 * at an abstract address of ours (abstract like the default, so without
 * permissions: only SO_PEERCRED keeps another uid out), and extra config. */
static void start(chime__chimed_t *d, chime_client_t **c, char *path,
                  size_t len, const char *extra) {
  static int n;
  char config[768];
  snprintf(path, len, "@chime-test-lockout-%ld-%d", (long)getpid(), n++);
  snprintf(config, sizeof(config),
           "{\"handoff_socket\": \"%s\", %s \"tables\": [{\"name\": "
           "\"u\", \"spec\": \"" SPEC "\", \"capacity\": 1024, "
           "\"min_size\": 1, \"sampler\": \"uniform\"}]}\n",
           path, extra);
  assert_int_equal(chime__chimed_start_client(d, config, c), 0);
}

/* The flooder: FLOOD_CONNS connections to path as uid, each reopened when
 * chimed drops it. Prints "flooding" once all were open at the same time. */
static void flood_start(chime__proc_t *p, const char *path, uid_t uid) {
  char self[512], uidtxt[16], line[64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  assert_true(n > 0);
  self[n] = '\0';
  snprintf(uidtxt, sizeof(uidtxt), "%u", (unsigned)uid);
  const char *argv[] = {self, "--flood", path, uidtxt, NULL};
  assert_int_equal(chime__proc_spawn(p, argv, NULL), 0);
  assert_int_equal(
      chime__proc_read_line(p, "flooding", line, sizeof(line), 20000), 0);
  /* Long enough for chimed to have taken in the first wave. */
  chime__sleep_ms(300);
}

/* Stops the flooder; how many of its connections chimed refused with an
 * answer (CHIME_EPERM at accept) and how many it dropped without one. */
static void flood_stop(chime__proc_t *p, long *refused, long *dropped) {
  char line[128];
  assert_int_equal(kill(p->pid, SIGTERM), 0);
  assert_int_equal(
      chime__proc_read_line(p, "ended ", line, sizeof(line), 20000), 0);
  assert_int_equal(sscanf(line, "refused %ld dropped %ld", refused, dropped),
                   2);
  chime__proc_kill(p);
}

/* Attaches ATTACHES times in shm mode (no fallback to hide a failed attach)
 * and reads batches each time, all while the flood goes on. */
static void attach_and_read(chime_client_t *c, chime__proc_t *flooder) {
  for (int a = 0; a < ATTACHES; a++) {
    chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
    o.batch_size = 8;
    o.slots = 4;
    o.mode = CHIME_MODE_SHM;
    o.open_timeout_ms = 5000;
    chime_stream_t *s = NULL;
    int rc = chime_stream_open(&s, c, "u", &o);
    if (rc != 0)
      fail_msg("attach %d of %d during the flood: %s: %s", a + 1, ATTACHES,
               chime_err_name(rc), chime_last_error());
    assert_int_equal(chime_stream_mode(s), CHIME_MODE_SHM);
    for (int i = 0; i < 4; i++) {
      chime_batch_t b;
      char err[256];
      assert_int_equal(chime_stream_next(s, &b, 10000), 0);
      assert_int_equal(chime__pattern_verify(&b, NULL, err, sizeof(err)), 0);
      assert_int_equal(chime_stream_release(s, &b), 0);
    }
    chime_stream_close(s);
  }
  /* The flood was on all along, not over before the attaches. */
  int st = 0;
  assert_int_equal(chime__proc_wait(flooder, 0, &st), CHIME_ETIMEDOUT);
}

static void flood_case(uid_t uid, const char *extra, long *refused,
                       long *dropped) {
  chime__chimed_t d;
  chime_client_t *c = NULL;
  chime__proc_t flooder;
  char path[128];
  start(&d, &c, path, sizeof(path), extra);
  assert_int_equal(chime__write_pattern(c, "u", &spec, 1, 64, NULL), 0);
  flood_start(&flooder, path, uid);
  attach_and_read(c, &flooder);
  flood_stop(&flooder, refused, dropped);
  chime__stop_clean(&d, c);
}

/* An allowed uid is never refused: its idle handshakes beyond its share
 * give way instead. */
static void test_same_uid_flood(void **state) {
  long refused, dropped;
  (void)state;
  flood_case(geteuid(), "", &refused, &dropped);
  assert_int_equal(refused, 0);
  assert_true(dropped > 0);
}

/* Every connection of a refused uid is answered and closed at accept: none
 * sat in a slot until dropped. */
static void test_other_uid_flood(void **state) {
  long refused, dropped;
  (void)state;
  flood_case(NOBODY, "", &refused, &dropped);
  assert_true(refused >= FLOOD_CONNS);
  assert_int_equal(dropped, 0);
}

static void test_allowed_uid_flood(void **state) {
  long refused, dropped;
  (void)state;
  flood_case(NOBODY, "\"allowed_uids\": [65534],", &refused, &dropped);
  assert_int_equal(refused, 0);
  assert_true(dropped > 0);
}

static int flood_connect(const struct sockaddr_un *sa, socklen_t len) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, len) != 0) {
    close(fd); /* backlog full (EAGAIN): next round */
    fd = -1;
  }
  return fd;
}

static volatile sig_atomic_t flood_over;

static void on_term(int sig) {
  (void)sig;
  flood_over = 1;
}

/* The --flood helper: become uid, then hold FLOOD_CONNS idle connections
 * until SIGTERM, reopening each one chimed drops (at most every 20 ms, so
 * the flood is steady rather than a busy loop on a shared machine). Ends
 * with "ended refused R dropped D": connections closed after a CHIME_EPERM
 * answer, and without a word. */
static int flood_main(const char *path, const char *uidtxt) {
  uid_t uid = (uid_t)strtoul(uidtxt, NULL, 10);
  struct pollfd p[FLOOD_CONNS];
  int answered[FLOOD_CONNS] = {0};
  long refused = 0, dropped = 0;
  struct sockaddr_un sa;
  char junk[64];
  int announced = 0;
  size_t n = strlen(path);
  if (path[0] != '@' || n < 2 || n >= sizeof(sa.sun_path))
    return 2;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path + 1, path + 1, n - 1);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  if (uid != geteuid() &&
      (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) {
    perror("flood: cannot change uid");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa_term;
  memset(&sa_term, 0, sizeof(sa_term));
  sa_term.sa_handler = on_term; /* no SA_RESTART: poll returns */
  sigaction(SIGTERM, &sa_term, NULL);
  for (int i = 0; i < FLOOD_CONNS; i++)
    p[i] = (struct pollfd){-1, POLLIN, 0};
  while (!flood_over) {
    int open = 0;
    for (int i = 0; i < FLOOD_CONNS; i++) {
      if (p[i].fd < 0)
        p[i].fd = flood_connect(&sa, len);
      open += p[i].fd >= 0;
    }
    if (open == FLOOD_CONNS && !announced) {
      printf("flooding %d\n", open);
      fflush(stdout);
      announced = 1;
    }
    if (poll(p, FLOOD_CONNS, 20) < 0 && errno != EINTR)
      return 1;
    int closed = 0;
    for (int i = 0; i < FLOOD_CONNS; i++) {
      if (p[i].fd < 0 || p[i].revents == 0)
        continue;
      /* A refusal's 4 bytes, then the end. */
      ssize_t r = recv(p[i].fd, junk, sizeof(junk), MSG_DONTWAIT);
      if (r == 4 && (int32_t)((uint32_t)(uint8_t)junk[0] |
                              (uint32_t)(uint8_t)junk[1] << 8 |
                              (uint32_t)(uint8_t)junk[2] << 16 |
                              (uint32_t)(uint8_t)junk[3] << 24) == CHIME_EPERM)
        answered[i] = 1;
      if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
        continue;
      if (answered[i])
        refused++;
      else
        dropped++;
      answered[i] = 0;
      close(p[i].fd);
      p[i].fd = -1;
      closed = 1;
    }
    if (closed) {
      struct timespec ts = {0, 20 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  printf("ended refused %ld dropped %ld\n", refused, dropped);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--flood") == 0)
    return flood_main(argv[2], argv[3]);
  const struct CMUnitTest all[] = {
      cmocka_unit_test(test_same_uid_flood),
      cmocka_unit_test(test_other_uid_flood),
      cmocka_unit_test(test_allowed_uid_flood),
  };
  const struct CMUnitTest same_uid[] = {
      cmocka_unit_test(test_same_uid_flood),
  };
  int root = geteuid() == 0;
  int failed =
      root ? cmocka_run_group_tests(all, setup, chime__harness_teardown)
           : cmocka_run_group_tests(same_uid, setup, chime__harness_teardown);
  if (failed == 0 && !root) {
    fprintf(stderr, "skip: not root: the other-uid floods need to become "
                    "nobody (65534); only the same-uid flood ran\n");
    return 77;
  }
  return failed;
}
