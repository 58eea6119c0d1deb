/* The liveness watch alone (src/server/liveness.c), on a libuv loop of the
 * test's own, with a stream of its own behind the stream ops (streamops.h)
 * and a real learner process (forked, no gRPC in this test) that holds the
 * ring's memfd as the test tells it: a learner that dies ends its open
 * stream; once the stream is over, the ring's budget hold stays while the
 * learner still has the memfd open or mapped, or while the fd is still in
 * flight on the handoff connection, and goes when none of that is left;
 * a learner already gone is told at once; close drops every watch. Every
 * reference and hold handed over comes back exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "server/liveness.h"

#define LIVENESS_NS (20ull * 1000000000ull) /* liveness, not speed */

/* A stream as the watch sees it. Everything runs on the loop's thread
 * (this one), so plain ints do. */
struct chime__stream_s {
  int refs, holds, kills, closed;
  char why[64];
  int ring; /* the memfd */
};
typedef chime__stream_t fstream_t;

static void s_ref(fstream_t *s) {
  s->refs++;
}
static void s_unref(fstream_t *s) {
  assert_true(s->refs-- > 0);
}
static void s_hold(fstream_t *s) {
  s->holds++;
}
static void s_unhold(fstream_t *s) {
  assert_true(s->holds-- > 0);
}
static int s_ring_fd(fstream_t *s) {
  return s->ring;
}
static void s_ring_id(fstream_t *s, dev_t *dev, ino_t *ino) {
  struct stat st;
  assert_int_equal(fstat(s->ring, &st), 0);
  *dev = st.st_dev;
  *ino = st.st_ino;
}
static void s_attached(fstream_t *s) {
  (void)s;
}
/* A killed stream closes, as stream.c's does. */
static void s_kill(fstream_t *s, const char *why) {
  fstream_t *f = s;
  f->kills++;
  f->closed = 1;
  snprintf(f->why, sizeof(f->why), "%s", why);
}
static int s_closed(fstream_t *s) {
  return s->closed;
}

static const chime__stream_ops_t ops = {
    .ref = s_ref,
    .unref = s_unref,
    .hold = s_hold,
    .unhold = s_unhold,
    .ring_fd = s_ring_fd,
    .ring_id = s_ring_id,
    .attached = s_attached,
    .kill = s_kill,
    .closed = s_closed,
};

/* The learner: a child process that does what the test writes to it
 * ('m' map the ring, 'c' close its fd, 'u' unmap) and answers each. */
typedef struct {
  pid_t pid;
  int cmd, ack;
} learner_t;

static void scripted_learner_main(int cmd, int ack, int ring) {
  void *map = NULL;
  char c;
  while (read(cmd, &c, 1) == 1) {
    if (c == 'm')
      map = mmap(NULL, 4096, PROT_READ, MAP_SHARED, ring, 0);
    else if (c == 'c')
      close(ring);
    else if (c == 'u' && map != NULL && map != MAP_FAILED)
      munmap(map, 4096);
    if (write(ack, &c, 1) != 1)
      break;
  }
  _exit(0);
}

static void learner_start(learner_t *l, fstream_t *s) {
  int cp[2], ap[2];
  assert_int_equal(pipe2(cp, O_CLOEXEC), 0);
  assert_int_equal(pipe2(ap, O_CLOEXEC), 0);
  l->pid = fork();
  assert_true(l->pid >= 0);
  if (l->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
    close(cp[1]);
    close(ap[0]);
    scripted_learner_main(cp[0], ap[1], s->ring);
  }
  close(cp[0]);
  close(ap[1]);
  l->cmd = cp[1];
  l->ack = ap[0];
}

static void learner_do(learner_t *l, char c) {
  char got;
  assert_int_equal(write(l->cmd, &c, 1), 1);
  assert_int_equal(read(l->ack, &got, 1), 1);
  assert_int_equal(got, c);
}

/* Ends the learner (if still there) and reaps it. */
static void learner_end(learner_t *l) {
  if (l->pid > 0) {
    kill(l->pid, SIGKILL);
    waitpid(l->pid, NULL, 0);
    l->pid = 0;
  }
  if (l->cmd >= 0)
    close(l->cmd);
  if (l->ack >= 0)
    close(l->ack);
  l->cmd = l->ack = -1;
}

typedef struct {
  uv_loop_t loop;
  uv_timer_t tick; /* keeps each turn of the loop short */
  chime__liveness_t *lv;
  fstream_t s;
} fix_t;

static void on_tick(uv_timer_t *t) {
  (void)t;
}

static int setup(void **state) {
  fix_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  uv_timer_init(&f->loop, &f->tick);
  uv_timer_start(&f->tick, on_tick, 20, 20);
  assert_int_equal(chime__liveness_create(&f->lv, &f->loop, &ops), 0);
  /* Not close-on-exec: a learner inherits it, as one that received it. */
  f->s.ring = memfd_create("test-ring", 0);
  assert_true(f->s.ring >= 0);
  assert_int_equal(ftruncate(f->s.ring, 4096), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fix_t *f = *state;
  chime__liveness_close(f->lv);
  uv_close((uv_handle_t *)&f->tick, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT); /* the close callbacks */
  assert_int_equal(uv_loop_close(&f->loop), 0);
  chime__liveness_free(f->lv);
  /* Every reference and hold handed over came back. */
  assert_int_equal(f->s.refs, 0);
  assert_int_equal(f->s.holds, 0);
  close(f->s.ring);
  free(f);
  return 0;
}

/* What the handoff does when it passed the ring: a reference and a hold
 * go with the watch. */
static void watch(fix_t *f, pid_t pid, int sock) {
  f->s.refs++;
  f->s.holds++;
  chime__liveness_watch(f->lv, &f->s, pid, sock);
}

static int no_hold(fix_t *f) {
  return f->s.holds == 0;
}
static int killed(fix_t *f) {
  return f->s.kills > 0 && f->s.holds == 0;
}
static int no_ref(fix_t *f) {
  return f->s.refs == 0;
}

/* Runs the loop until pred holds; fails after LIVENESS_NS. */
static void run_until(fix_t *f, int (*pred)(fix_t *)) {
  uint64_t t0 = chime__now_ns();
  while (!pred(f)) {
    if (chime__now_ns() - t0 > LIVENESS_NS)
      fail_msg("the watch did not act in 20 s");
    uv_run(&f->loop, UV_RUN_ONCE);
  }
}

/* Runs the loop for ms milliseconds (sweeps happen meanwhile). */
static void run_for(fix_t *f, int ms) {
  uint64_t end = chime__now_ns() + (uint64_t)ms * 1000000u;
  while (chime__now_ns() < end)
    uv_run(&f->loop, UV_RUN_ONCE);
}

/* The learner dies with its stream open: the stream is killed, saying
 * why, and its reference and hold come back. */
static void test_learner_exits(void **state) {
  fix_t *f = *state;
  learner_t l;
  learner_start(&l, &f->s);
  watch(f, l.pid, -1);
  assert_int_equal(f->s.kills, 0);
  kill(l.pid, SIGKILL);
  run_until(f, killed);
  assert_int_equal(f->s.kills, 1);
  assert_string_equal(f->s.why, "learner process exited");
  assert_int_equal(f->s.refs, 0);
  learner_end(&l);
}

/* A learner gone before the watch: killed at once, everything given back,
 * the handoff socket closed. */
static void test_learner_already_gone(void **state) {
  fix_t *f = *state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    _exit(0);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  watch(f, pid, sv[0]);
  assert_int_equal(f->s.kills, 1);
  assert_int_equal(f->s.refs, 0);
  assert_int_equal(f->s.holds, 0);
  /* Our end is closed: the peer reads end of file. */
  char c;
  assert_int_equal(read(sv[1], &c, 1), 0);
  close(sv[1]);
}

/* The stream ends first: its reference comes back at once, the hold stays
 * while the learner still has the memfd open, and goes once it closed
 * it. The learner is not killed. */
static void test_hold_while_fd_open(void **state) {
  fix_t *f = *state;
  learner_t l;
  learner_start(&l, &f->s);
  watch(f, l.pid, -1);
  chime__liveness_check(f->lv); /* open: nothing to do */
  assert_int_equal(f->s.refs, 1);
  f->s.closed = 1;
  chime__liveness_check(f->lv);
  assert_int_equal(f->s.refs, 0);
  run_for(f, 1200); /* a sweep or two */
  assert_int_equal(f->s.holds, 1);
  learner_do(&l, 'c');
  run_until(f, no_hold);
  assert_int_equal(f->s.kills, 0);
  learner_end(&l);
}

/* A mapping holds the pages as well as the fd: the hold stays after the
 * fd is closed, until the learner unmaps. */
static void test_hold_while_mapped(void **state) {
  fix_t *f = *state;
  learner_t l;
  learner_start(&l, &f->s);
  learner_do(&l, 'm');
  learner_do(&l, 'c');
  watch(f, l.pid, -1);
  f->s.closed = 1;
  chime__liveness_check(f->lv);
  run_for(f, 1200);
  assert_int_equal(f->s.holds, 1);
  learner_do(&l, 'u');
  run_until(f, no_hold);
  assert_int_equal(f->s.kills, 0);
  learner_end(&l);
}

/* The fd still in flight (the handoff reply unread on the connection)
 * holds too, though the learner has nothing of the ring yet. */
static void test_hold_while_in_flight(void **state) {
  fix_t *f = *state;
  learner_t l;
  learner_start(&l, &f->s);
  learner_do(&l, 'c'); /* the learner has no fd, no mapping */
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  assert_int_equal(write(sv[0], "reply", 5), 5);
  watch(f, l.pid, sv[0]);
  f->s.closed = 1;
  chime__liveness_check(f->lv);
  run_for(f, 1200);
  assert_int_equal(f->s.holds, 1);
  char buf[8];
  assert_int_equal(read(sv[1], buf, sizeof(buf)), 5);
  run_until(f, no_hold);
  /* The watch closed our end with it. */
  assert_int_equal(read(sv[1], buf, sizeof(buf)), 0);
  close(sv[1]);
  learner_end(&l);
}

/* A learner that exits after its stream ended: the hold goes (the pages
 * went with the process), and no kill. */
static void test_learner_exits_after_close(void **state) {
  fix_t *f = *state;
  learner_t l;
  learner_start(&l, &f->s);
  watch(f, l.pid, -1);
  f->s.closed = 1;
  chime__liveness_check(f->lv);
  run_until(f, no_ref);
  kill(l.pid, SIGKILL);
  run_until(f, no_hold);
  assert_int_equal(f->s.kills, 0);
  learner_end(&l);
}

/* A stream closed before its watch was made: the watch sees it at once. */
static void test_closed_before_watch(void **state) {
  fix_t *f = *state;
  learner_t l;
  learner_start(&l, &f->s);
  learner_do(&l, 'c');
  f->s.closed = 1;
  watch(f, l.pid, -1);
  assert_int_equal(f->s.refs, 0);
  run_until(f, no_hold);
  assert_int_equal(f->s.kills, 0);
  learner_end(&l);
}

/* close drops every watch, open or not, with its reference and hold
 * (teardown checks they came back); the learners live on. */
static void test_close_drops_watches(void **state) {
  fix_t *f = *state;
  learner_t a, b;
  learner_start(&a, &f->s);
  learner_start(&b, &f->s);
  watch(f, a.pid, -1);
  watch(f, b.pid, -1);
  f->s.closed = 0;
  assert_int_equal(f->s.refs, 2);
  assert_int_equal(f->s.holds, 2);
  chime__liveness_close(f->lv);
  uv_run(&f->loop, UV_RUN_NOWAIT);
  assert_int_equal(f->s.refs, 0);
  assert_int_equal(f->s.holds, 0);
  assert_int_equal(f->s.kills, 0);
  assert_int_equal(kill(a.pid, 0), 0);
  learner_end(&a);
  learner_end(&b);
  /* teardown closes it again: make a fresh one so that is harmless. */
  chime__liveness_free(f->lv);
  assert_int_equal(chime__liveness_create(&f->lv, &f->loop, &ops), 0);
}

int main(void) {
  /* A learner killed while the test writes to it must not kill the test. */
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_learner_exits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_learner_already_gone, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_hold_while_fd_open, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hold_while_mapped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hold_while_in_flight, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_learner_exits_after_close, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_closed_before_watch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_close_drops_watches, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
