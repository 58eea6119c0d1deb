/* Crashes on either side, with the real chimed:
 * - a learner process killed with SIGKILL while it holds leases: its streams'
 *   leases and rings are reclaimed (Stats: stream gone, budget back) and new
 *   learners are served;
 * - chimed killed with SIGKILL: a learner's next returns CHIME_EDISCONNECTED
 *   within its timeout (no hang, no SIGBUS), in shm and in stream mode, and
 *   the batches it holds stay readable.
 * - fifo items in batches a learner (shm or stream mode) held or never took
 *   go back to the table when it is killed, or stopped and dropped by
 *   keepalive: a later learner gets each exactly once.
 * The holding learner is this binary re-executed (--hold). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "writes.h"
#include "pattern.h"

#define BATCH 4
#define SLOTS 8
#define HELD 3

static const char *config =
    "{\"tables\": [{\"name\": \"demo\", \"spec\": \"obs:f32[64], "
    "action:i32[], reward:f32[]\", \"capacity\": 4096, \"min_size\": 1, "
    "\"sampler\": \"fifo\"}],\n"
    " \"keepalive_time_ms\": 300, \"keepalive_timeout_ms\": 500}\n";

static chime__chimed_t chimed;
static chime_client_t *client;

static int setup(void **state) {
  (void)state;
  return chime__chimed_start_client(&chimed, config, &client) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  chime_client_destroy(client);
  client = NULL;
  chime__proc_kill(&chimed.proc);
  chime__harness_kill_all();
  return 0;
}

/* n pattern samples of seed into "demo", every one acked. */
static void write_demo(uint64_t seed, uint64_t n) {
  chime_spec_t spec;
  assert_int_equal(chime_spec_parse(&spec, "obs:f32[64], action:i32[], "
                                           "reward:f32[]"),
                   0);
  assert_int_equal(chime__write_pattern(client, "demo", &spec, seed, n, NULL),
                   0);
}

/* The learner process: opens a stream, takes HELD batches without giving any
 * back, says so, and waits to be killed. */
static int hold_main(const char *addr, const char *mode) {
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = strcmp(mode, "shm") == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
  if (chime_client_create(&c, addr, NULL) != 0 ||
      chime_stream_open(&s, c, "demo", &so) != 0) {
    fprintf(stderr, "hold: open: %s\n", chime_last_error());
    return 1;
  }
  for (int i = 0; i < HELD; i++) {
    chime_batch_t b;
    if (chime_stream_next(s, &b, 30000) != 0) {
      fprintf(stderr, "hold: next: %s\n", chime_last_error());
      return 1;
    }
  }
  printf("holding %d\n", HELD);
  fflush(stdout);
  for (;;)
    pause();
}

static void spawn_holder(chime__proc_t *p, const char *mode) {
  char self[512], line[64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  assert_true(n > 0);
  self[n] = '\0';
  const char *argv[] = {self, "--hold", chimed.addr, mode, NULL};
  assert_int_equal(chime__proc_spawn(p, argv, NULL), 0);
  int rc = chime__proc_read_line(p, "holding ", line, sizeof(line), 60000);
  if (rc != 0)
    fail_msg("%s holder did not take its batches: %s", mode,
             chime_strerror(rc));
}

static void test_learner_killed(void **state) {
  (void)state;
  chime__proc_t shm, stream;
  write_demo(1, 200);
  spawn_holder(&shm, "shm");
  spawn_holder(&stream, "stream");

  chime_stats_t *st = chime__stats(client);
  assert_int_equal(st->nstreams, 2);
  assert_true(st->ring_bytes_total > 0);
  int shm_seen = 0;
  for (uint32_t i = 0; i < st->nstreams; i++) {
    assert_true(st->streams[i].ring_bytes > 0);
    if (st->streams[i].mode == CHIME_MODE_SHM) {
      shm_seen = 1;
      /* the learner's own leases, in the shared ring */
      assert_int_equal(st->streams[i].leases, HELD);
    }
  }
  assert_true(shm_seen);
  chime_stats_free(st);

  int64_t t0 = chime__now_ms();
  kill(shm.pid, SIGKILL);
  kill(stream.pid, SIGKILL);
  assert_int_equal(chime__proc_wait(&shm, 10000, NULL), 0);
  assert_int_equal(chime__proc_wait(&stream, 10000, NULL), 0);
  /* The server's promise is a second; the test waits up to ten and says how
   * long it took. */
  for (;;) {
    st = chime__stats(client);
    uint32_t n = st->nstreams;
    uint64_t bytes = st->ring_bytes_total;
    chime_stats_free(st);
    if (n == 0 && bytes == 0)
      break;
    if (chime__now_ms() - t0 > 10000)
      fail_msg("10 s after SIGKILL: %u streams, %llu ring bytes left", n,
               (unsigned long long)bytes);
    chime__sleep_ms(10);
  }
  fprintf(stderr, "learners' streams reclaimed %lld ms after SIGKILL\n",
          (long long)(chime__now_ms() - t0));

  /* New learners are served. */
  write_demo(2, 16);
  for (int m = 0; m < 2; m++) {
    chime_stream_t *s = NULL;
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = BATCH;
    so.slots = SLOTS;
    so.mode = m == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
    assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
    chime_batch_t b;
    char err[256];
    int rc = chime_stream_next(s, &b, 30000);
    if (rc != 0)
      fail_msg("new learner: %s", chime_last_error());
    assert_int_equal(chime__pattern_verify(&b, NULL, err, sizeof(err)), 0);
    assert_int_equal(chime_stream_release(s, &b), 0);
    chime_stream_close(s);
  }
}

static void test_chimed_killed(void **state) {
  (void)state;
  chime_stream_t *s[2] = {NULL, NULL};
  chime_batch_t held[2];
  uint8_t *copy[2];
  uint64_t copy_len[2];
  char err[256];

  write_demo(3, 64);
  for (int m = 0; m < 2; m++) {
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = BATCH;
    so.slots = SLOTS;
    so.mode = m == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
    so.max_inflight_bytes = 1; /* SLOTS batches at most come after */
    /* Its connection is lost: the stream tries again for 1 s, then
     * says the server is gone (docs/remote.md, "A link that drops"). */
    so.reconnect_timeout_ms = 1000;
    assert_int_equal(chime_stream_open(&s[m], client, "demo", &so), 0);
    int rc = chime_stream_next(s[m], &held[m], 30000);
    if (rc != 0)
      fail_msg("next: %s", chime_last_error());
    copy_len[m] = 0;
    for (uint32_t l = 0; l < held[m].nleaves; l++)
      copy_len[m] += held[m].leaf[l].bytes;
    copy[m] = malloc(copy_len[m]);
    assert_non_null(copy[m]);
    uint64_t off = 0;
    for (uint32_t l = 0; l < held[m].nleaves; l++) {
      memcpy(copy[m] + off, held[m].leaf[l].data, held[m].leaf[l].bytes);
      off += held[m].leaf[l].bytes;
    }
  }

  int st = 0;
  assert_int_equal(chime__proc_stop(&chimed.proc, SIGKILL, 10000, &st), 0);
  assert_true(WIFSIGNALED(st));

  for (int m = 0; m < 2; m++) {
    /* Batches published before the kill may still come; then the stream
     * must say the server is gone, well before the 10 s timeout. */
    int rc = 0;
    for (int i = 0; i < SLOTS + 1 && rc == 0; i++) {
      chime_batch_t b;
      rc = chime_stream_next(s[m], &b, 10000);
      if (rc == 0)
        assert_int_equal(chime_stream_release(s[m], &b), 0);
    }
    if (rc != CHIME_EDISCONNECTED)
      fail_msg("%s: next after chimed died: %s (%s)", m ? "stream" : "shm",
               chime_err_name(rc), chime_last_error());
    if (m == 1 && strstr(chime_last_error(), "reconnect_timeout_ms") == NULL)
      fail_msg("stream: gave up without saying why: %s", chime_last_error());
    /* The held batch is still mapped and unchanged. */
    uint64_t off = 0;
    for (uint32_t l = 0; l < held[m].nleaves; l++) {
      assert_memory_equal(copy[m] + off, held[m].leaf[l].data,
                          held[m].leaf[l].bytes);
      off += held[m].leaf[l].bytes;
    }
    assert_int_equal(chime__pattern_verify(&held[m], NULL, err, sizeof(err)),
                     0);
    assert_int_equal(chime_stream_release(s[m], &held[m]), 0);
    chime_stream_close(s[m]);
    free(copy[m]);
  }
}

typedef struct {
  int rc;
  char err[256];
} late_writer_t;

/* write_demo() without cmocka (this runs on its own thread): 64 items,
 * seed 9. */
static void *late_writer(void *arg) {
  late_writer_t *lw = arg;
  chime_writer_t *w = NULL;
  chime_spec_t spec;
  lw->rc = chime_spec_parse(&spec, "obs:f32[64], action:i32[], reward:f32[]");
  if (lw->rc == 0)
    lw->rc = chime_writer_open(&w, client, "demo", NULL);
  if (lw->rc == 0)
    lw->rc = chime__append_pattern(w, &spec, 9, 64);
  if (w != NULL)
    snprintf(lw->err, sizeof(lw->err), "%s", chime_last_error());
  int rc = chime_writer_close(w);
  if (lw->rc == 0)
    lw->rc = rc;
  return NULL;
}

/* A writer killed while its inserts wait for room in a full fifo table
 * (back-pressure): chimed finishes or drops that work, keeps serving, and a
 * new writer's items all reach a learner. */
static void test_writer_killed(void **state) {
  (void)state;
  char actor[512], out[600];
  if (chime__harness_bin("examples/chime-actor", actor, sizeof(actor)) == NULL)
    chime__skip("chime-actor is not built");
  snprintf(out, sizeof(out), "%s/actor.out", chime__harness_tmpdir());
  const char *argv[] = {actor,     "--server",  chimed.addr, "--table", "demo",
                        "--count", "100000000", "--seed",    "4",       NULL};
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn(&p, argv, out), 0);
  /* Until the table is full: the actor is then blocked on back-pressure. */
  int64_t deadline = chime__now_ms() + 60000;
  for (;;) {
    chime_stats_t *st = chime__stats(client);
    uint64_t size = st->tables[0].size, cap = st->tables[0].capacity;
    chime_stats_free(st);
    if (size == cap)
      break;
    if (chime__now_ms() > deadline)
      fail_msg("the table did not fill in 60 s (%llu of %llu)",
               (unsigned long long)size, (unsigned long long)cap);
    chime__sleep_ms(10);
  }
  kill(p.pid, SIGKILL);
  assert_int_equal(chime__proc_wait(&p, 10000, NULL), 0);

  /* Drain whatever the dead writer got in (maybe part of a request: batches
   * of one sample, so nothing is left in a partial batch), then the new
   * writer's 64. */
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 1;
  so.slots = 64;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
  /* The new writer waits for room like the dead one did: in a thread, while
   * this one drains. */
  late_writer_t lw = {0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, late_writer, &lw), 0);
  uint64_t ids[1], seen = 0;
  char err[256];
  /* a full table, what the actor had in flight, and the new 64: far less */
  for (int k = 0; k < 100000 && seen < 64; k++) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 30000);
    if (rc != 0)
      fail_msg("next after %llu of the new items: %s", (unsigned long long)seen,
               chime_last_error());
    assert_int_equal(chime__pattern_verify(&b, ids, err, sizeof(err)), 0);
    for (uint32_t i = 0; i < b.count; i++)
      if (ids[i] >> 40 == 9)
        assert_int_equal(ids[i], chime__pattern_id(9, seen++));
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  pthread_join(th, NULL);
  if (lw.rc != 0)
    fail_msg("new writer: %s (%s)", chime_err_name(lw.rc), lw.err);
  assert_int_equal(seen, 64);
  chime_stream_close(s);
}

/* Drains the table with a stream-mode learner until nothing comes for 2 s;
 * counts each pattern id of `seed` below n in seen. */
static void drain(uint64_t seed, uint64_t n, uint8_t *seen) {
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
  for (;;) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 2000);
    if (rc == CHIME_ETIMEDOUT)
      break;
    assert_int_equal(rc, 0);
    for (uint32_t i = 0; i < b.count; i++) {
      uint64_t id;
      memcpy(&id, (const uint8_t *)b.leaf[0].data + i * 64 * sizeof(float),
             sizeof(id));
      if (id >> 40 != seed || (id & CHIME__PATTERN_MAX_INDEX) >= n)
        fail_msg("unexpected sample id %llx", (unsigned long long)id);
      seen[id & CHIME__PATTERN_MAX_INDEX]++;
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

/* fifo items in batches a killed shm learner held, or that were published
 * in its ring and never taken, go back to the table: a later learner gets
 * every item exactly once. */
/* Waits up to 15 s for every stream to be gone. */
static void wait_no_streams(const char *why) {
  int64_t end = chime__now_ms() + 15000;
  for (;;) {
    chime_stats_t *st = chime__stats(client);
    uint32_t n = st->nstreams;
    chime_stats_free(st);
    if (n == 0)
      return;
    if (chime__now_ms() > end)
      fail_msg("%s: its stream is still there after 15 s", why);
    chime__sleep_ms(10);
  }
}

static void check_loses_nothing(int sig, const char *mode, uint64_t seed) {
  enum { N = 200 };
  chime__proc_t p;
  uint8_t seen[N] = {0};
  write_demo(seed, N);
  spawn_holder(&p, mode);
  kill(p.pid, sig);
  if (sig == SIGKILL) {
    assert_int_equal(chime__proc_wait(&p, 10000, NULL), 0);
    wait_no_streams("a learner killed with SIGKILL");
  } else {
    /* Alive but silent: only keepalive (300 + 500 ms here) can tell. */
    wait_no_streams("a learner stopped with SIGSTOP");
    assert_int_equal(kill(p.pid, 0), 0);
  }
  drain(seed, N, seen);
  chime__proc_kill(&p);
  for (int i = 0; i < N; i++)
    if (seen[i] != 1)
      fail_msg("item %d delivered %u times after the learner's death", i,
               seen[i]);
  chime_stats_t *st = chime__stats(client);
  assert_true(st->ntables == 1 && st->tables[0].returned >= HELD * BATCH);
  chime_stats_free(st);
}

static void test_killed_learner_loses_nothing(void **state) {
  (void)state;
  check_loses_nothing(SIGKILL, "shm", 5);
  /* stream mode: batches sent to the learner stay its own until a Credit
   * names them, so those it held (and those in flight) come back too. */
  check_loses_nothing(SIGKILL, "stream", 6);
}

/* A learner that stops answering (SIGSTOP: its process and connection stay
 * up) is dropped by keepalive, and its items go back too. */
static void test_stopped_learner_dropped(void **state) {
  (void)state;
  check_loses_nothing(SIGSTOP, "shm", 7);
  check_loses_nothing(SIGSTOP, "stream", 8);
}

/* Waits (up to 10 s) until the kernel reports pid stopped: SIGSTOP takes
 * effect asynchronously, and a request could still be acked meanwhile. */
static void wait_stopped(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int64_t end = chime__now_ms() + 10000;
  for (;;) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
      fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the state follows the name */
    if (p != NULL && p[1] == ' ' && p[2] == 'T')
      return;
    if (chime__now_ms() > end)
      fail_msg("pid %d not stopped after 10 s", (int)pid);
    chime__sleep_ms(5);
  }
}

/* A hung server (SIGSTOP): flush gives up after the writer's timeout, and
 * close, after that, does not wait a second timeout. */
static void test_writer_close_bounded(void **state) {
  (void)state;
  enum { TIMEOUT_MS = 3000 };
  chime_writer_t *w = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.timeout_ms = TIMEOUT_MS;
  uint8_t sample[264] = {0};
  assert_int_equal(chime_writer_open(&w, client, "demo", &wo), 0);
  assert_int_equal(kill(chimed.proc.pid, SIGSTOP), 0);
  wait_stopped(chimed.proc.pid);
  assert_int_equal(chime_writer_append(w, sample, sizeof(sample), 1.0), 0);
  int64_t t0 = chime__now_ms();
  assert_int_equal(chime_writer_flush(w), CHIME_ETIMEDOUT);
  int64_t t1 = chime__now_ms();
  assert_non_null(strstr(chime_last_error(), "no ack within"));
  assert_int_equal(chime_writer_close(w), CHIME_ETIMEDOUT);
  int64_t t2 = chime__now_ms();
  fprintf(stderr, "flush gave up after %lld ms, close took %lld ms\n",
          (long long)(t1 - t0), (long long)(t2 - t1));
  /* Relative to the writer's own timeout, not a wall-clock budget: close
   * must not have waited for acks again. */
  assert_true(t1 - t0 >= TIMEOUT_MS);
  assert_true(t2 - t1 < TIMEOUT_MS);
  kill(chimed.proc.pid, SIGCONT);
}

/* A client that sits idle while the server's keepalive (300 + 500 ms here)
 * pings it answers no ping (nothing polls its connection), so the server
 * drops the connection; the next Stats goes onto it and met "Socket closed"
 * though chimed was up (test_learner_killed failed so on a busy machine
 * while its holders started). Reads are sent again on a new connection. */
static void test_idle_client_reads_again(void **state) {
  (void)state;
  for (int round = 0; round < 3; round++) {
    chime_stats_free(chime__stats(client));
    chime__sleep_ms(1500); /* idle: the keepalive window passes */
  }
  chime_server_info_t *info = NULL;
  chime__sleep_ms(1500);
  if (chime_client_info(client, &info) != 0)
    fail_msg("GetInfo: %s", chime_last_error());
  chime_server_info_free(info);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--hold") == 0)
    return hold_main(argv[2], argv[3]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_learner_killed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_client_reads_again, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_chimed_killed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writer_killed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_killed_learner_loses_nothing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stopped_learner_dropped, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_writer_close_bounded, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
