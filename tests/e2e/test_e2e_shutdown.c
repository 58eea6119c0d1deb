/* SIGTERM while actors insert and learners read: chimed tells both sides
 * (UNAVAILABLE "shutting down": a Notice then the status on Subscribe, the
 * status on Insert after acking what came before; CHIME_ESHUTDOWN through the
 * client library), exits 0, and leaves nothing behind (its handoff socket
 * file, any file it had open, nothing in /dev/shm). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "pattern.h"
#include "rawcall.h"

#define SAMPLE_BYTES 264
#define MAX_PATHS 64

static chime__chimed_t chimed;
static char sock_path[600];
static chime_spec_t spec;

static int setup(void **state) {
  (void)state;
  char config[2048];
  const char *dir = chime__harness_tmpdir();
  if (dir == NULL)
    return -1;
  snprintf(sock_path, sizeof(sock_path), "%s/handoff.sock", dir);
  snprintf(config, sizeof(config),
           "{\"handoff_socket\": \"%s\",\n"
           " \"tables\": [{\"name\": \"demo\", \"spec\": \"obs:f32[64], "
           "action:i32[], reward:f32[]\", \"capacity\": 4096, \"min_size\": "
           "1, \"sampler\": \"fifo\"}]}\n",
           sock_path);
  if (chime_spec_parse(&spec, "obs:f32[64], action:i32[], reward:f32[]") != 0)
    return -1;
  int rc = chime__chimed_start_or_skip(&chimed, config, NULL, 30000);
  return rc == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  chime__proc_kill(&chimed.proc);
  chime__harness_kill_all();
  return 0;
}

/* Names in /dev/shm that mention chime. */
static int shm_names(char names[][NAME_MAX + 1], int max) {
  int n = 0;
  DIR *d = opendir("/dev/shm");
  if (d == NULL)
    return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max)
    if (strstr(e->d_name, "chime") != NULL)
      snprintf(names[n++], NAME_MAX + 1, "%s", e->d_name);
  closedir(d);
  return n;
}

/* Files (not sockets, pipes, memfds, devices) that pid has open. */
static int open_files(pid_t pid, char paths[][PATH_MAX], int max) {
  char dir[64], link[PATH_MAX + 64];
  int n = 0;
  snprintf(dir, sizeof(dir), "/proc/%ld/fd", (long)pid);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    /* stdin, stdout and stderr are the test's own */
    if (e->d_name[0] == '.' || atoi(e->d_name) < 3)
      continue;
    snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
    ssize_t k = readlink(link, paths[n], PATH_MAX - 1);
    if (k <= 0)
      continue;
    paths[n][k] = '\0';
    if (paths[n][0] == '/' && strncmp(paths[n], "/dev/", 5) != 0 &&
        strstr(paths[n], "(deleted)") == NULL)
      n++;
    else if (strncmp(paths[n], "/dev/shm/", 9) == 0)
      n++;
  }
  closedir(d);
  return n;
}

typedef struct {
  const char *addr;
  int rc;
  uint64_t appended;
  uint64_t acked;
  char err[512];
} writer_t;

/* An actor that inserts until chimed stops it. */
static void *endless_writer_main(void *arg) {
  writer_t *w = arg;
  chime_client_t *c = NULL;
  chime_writer_t *wr = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  uint8_t sample[SAMPLE_BYTES];
  wo.max_batch_samples = 16;
  w->rc = chime_client_create(&c, w->addr, NULL);
  if (w->rc == 0)
    w->rc = chime_writer_open(&wr, c, "demo", &wo);
  for (uint64_t i = 0; w->rc == 0 && i < 10000000; i++) {
    chime__pattern_fill(&spec, chime__pattern_id(5, i), sample);
    w->rc = chime_writer_append(wr, sample, sizeof(sample), 1.0);
    if (w->rc == 0)
      w->appended++;
  }
  if (w->rc == 0)
    w->rc = chime_writer_flush(wr);
  if (wr != NULL) {
    snprintf(w->err, sizeof(w->err), "%s", chime_last_error());
    w->acked = chime_writer_acked(wr);
  }
  int closed = chime_writer_close(wr); /* the server is gone: w->rc says */
  (void)closed;
  chime_client_destroy(c);
  return NULL;
}

static void test_sigterm(void **state) {
  (void)state;
  static char before[MAX_PATHS][NAME_MAX + 1], after[MAX_PATHS][NAME_MAX + 1];
  static char files[MAX_PATHS][PATH_MAX];
  char details[512];
  grpc_status_code st;
  int nbefore = shm_names(before, MAX_PATHS);

  chime_client_t *client = NULL;
  assert_int_equal(chime_client_create(&client, chimed.addr, NULL), 0);
  struct stat sb;
  assert_int_equal(stat(sock_path, &sb), 0);
  assert_true(S_ISSOCK(sb.st_mode));

  /* The actor thread starts filling the table. */
  writer_t w = {chimed.addr, 0, 0, 0, ""};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, endless_writer_main, &w), 0);

  /* Learners through the library, one per mode, each reading a batch. */
  chime_stream_t *s[2];
  for (int m = 0; m < 2; m++) {
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = 4;
    so.slots = 4;
    so.mode = m == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
    assert_int_equal(chime_stream_open(&s[m], client, "demo", &so), 0);
    chime_batch_t b;
    int rc = chime_stream_next(s[m], &b, 30000);
    if (rc != 0)
      fail_msg("next: %s", chime_last_error());
    assert_int_equal(chime_stream_release(s[m], &b), 0);
  }

  /* And as separate processes: a chime-actor inserting for ever and a
   * chime-learner reading for ever. */
  char actor_bin[512], learner_bin[512], actor_err[600], learner_out[600];
  chime__proc_t actor, learner;
  int procs = chime__harness_bin("examples/chime-actor", actor_bin,
                                 sizeof(actor_bin)) != NULL &&
              chime__harness_bin("examples/chime-learner", learner_bin,
                                 sizeof(learner_bin)) != NULL;
  if (procs) {
    snprintf(actor_err, sizeof(actor_err), "%s/actor.err",
             chime__harness_tmpdir());
    snprintf(learner_out, sizeof(learner_out), "%s/learner.out",
             chime__harness_tmpdir());
    const char *aargv[] = {actor_bin, "--server", chimed.addr, "--table",
                           "demo",    "--count",  "100000000", "--seed",
                           "7",       NULL};
    const char *largv[] = {learner_bin, "--server",  chimed.addr,
                           "--table",   "demo",      "--batch-size",
                           "4",         "--batches", "100000000",
                           "--mode",    "stream",    "--timeout-ms",
                           "60000",     NULL};
    assert_int_equal(chime__proc_spawn_err(&actor, aargv, NULL, actor_err), 0);
    assert_int_equal(chime__proc_spawn(&learner, largv, learner_out), 0);
    /* Both at work: the learner's stream is open and items flow. */
    int64_t deadline = chime__now_ms() + 60000;
    for (;;) {
      chime_stats_t *stats = NULL;
      assert_int_equal(chime_client_stats(client, &stats), 0);
      uint32_t n = stats->nstreams;
      uint64_t inserts = stats->tables[0].inserts;
      chime_stats_free(stats);
      if (n >= 3 && inserts > 10000)
        break;
      if (chime__now_ms() > deadline)
        fail_msg("actor and learner processes did not get going in 60 s");
      chime__sleep_ms(10);
    }
  } else {
    fprintf(stderr, "note: examples not built, no actor/learner processes\n");
  }

  /* Raw calls to see the exact statuses: an Insert with one acked request
   * and a stream-mode Subscribe. */
  grpc_init();
  grpc_channel *ch = chime__raw_channel(chimed.addr);
  chime__raw_t ins, sub;
  uint8_t data[SAMPLE_BYTES];
  chime__pattern_fill(&spec, chime__pattern_id(6, 0), data);
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = (char *)"demo";
  req.count = 1;
  req.data.data = data;
  req.data.len = sizeof(data);
  req.id = 77;
  assert_int_equal(chime__raw_start(&ins, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(chime__raw_send(&ins, &req.base), 0);
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(&ins, &chime__v1__insert_ack__descriptor, &m, 30000),
      0);
  assert_non_null(m);
  assert_int_equal(((Chime__V1__InsertAck *)m)->id, 77);
  protobuf_c_message_free_unpacked(m, NULL);

  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)"demo";
  open.batch_size = 4;
  open.slots = 4;
  open.mode = CHIME__V1__MODE__MODE_STREAM;
  Chime__V1__SubscribeRequest sreq = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  sreq.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  sreq.open = &open;
  assert_int_equal(
      chime__raw_start(&sub, ch, "/chime.v1.Chime/Subscribe", 60000), 0);
  assert_int_equal(chime__raw_send(&sub, &sreq.base), 0);
  assert_int_equal(
      chime__raw_recv_msg(&sub, &chime__v1__subscribe_response__descriptor, &m,
                          30000),
      0);
  assert_non_null(m);
  assert_int_equal(((Chime__V1__SubscribeResponse *)m)->kind_case,
                   CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED);
  protobuf_c_message_free_unpacked(m, NULL);

  int nfiles = open_files(chimed.proc.pid, files, MAX_PATHS);
  pid_t pid = chimed.proc.pid;
  int64_t t0 = chime__now_ms();
  assert_int_equal(kill(pid, SIGTERM), 0);

  /* Subscribe: chunks may still come, then the notice, then the status. */
  int notice = 0;
  for (int i = 0; i < 1000 && !notice; i++) {
    assert_int_equal(
        chime__raw_recv_msg(&sub, &chime__v1__subscribe_response__descriptor,
                            &m, 30000),
        0);
    if (m == NULL)
      break;
    Chime__V1__SubscribeResponse *r = (Chime__V1__SubscribeResponse *)m;
    if (r->kind_case == CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE) {
      notice = 1;
      assert_int_equal(r->notice->code, GRPC_STATUS_UNAVAILABLE);
      assert_string_equal(r->notice->message, "shutting down");
    }
    protobuf_c_message_free_unpacked(m, NULL);
  }
  assert_true(notice);
  assert_int_equal(
      chime__raw_finish(&sub, &st, details, sizeof(details), 30000), 0);
  assert_int_equal(st, GRPC_STATUS_UNAVAILABLE);
  assert_string_equal(details, "shutting down");
  chime__raw_destroy(&sub);

  assert_int_equal(
      chime__raw_finish(&ins, &st, details, sizeof(details), 30000), 0);
  assert_int_equal(st, GRPC_STATUS_UNAVAILABLE);
  assert_string_equal(details, "shutting down");
  chime__raw_destroy(&ins);
  grpc_channel_destroy(ch);
  grpc_shutdown_blocking();

  /* The library's learners and the actor hear CHIME_ESHUTDOWN. */
  for (int k = 0; k < 2; k++) {
    int rc = 0;
    for (int i = 0; i < 16 && rc == 0; i++) {
      chime_batch_t b;
      rc = chime_stream_next(s[k], &b, 30000);
      if (rc == 0)
        rc = chime_stream_release(s[k], &b);
    }
    if (rc != CHIME_ESHUTDOWN)
      fail_msg("%s learner: %s (%s)", k ? "stream" : "shm", chime_err_name(rc),
               chime_last_error());
    chime_stream_close(s[k]);
  }
  pthread_join(th, NULL);
  if (w.rc != CHIME_ESHUTDOWN)
    fail_msg("actor: %s (%s)", chime_err_name(w.rc), w.err);
  assert_true(w.acked > 0);
  chime_client_destroy(client);

  /* The processes heard it too, and said so. */
  if (procs) {
    char line[4096];
    int pst = 0;
    assert_int_equal(chime__proc_wait(&learner, 60000, &pst), 0);
    assert_int_equal(chime__proc_last_json(&learner, line, sizeof(line)), 0);
    if (strstr(line, "CHIME_ESHUTDOWN") == NULL)
      fail_msg("chime-learner: %s", line);
    assert_int_equal(chime__proc_wait(&actor, 60000, &pst), 0);
    assert_true(WIFEXITED(pst) && WEXITSTATUS(pst) != 0);
    FILE *f = fopen(actor_err, "r");
    assert_non_null(f);
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    if (strstr(line, "shutting down") == NULL)
      fail_msg("chime-actor said: %s", line);
  }

  /* Exit 0, in a few seconds (the test allows 30 and says how long). */
  int status = 0;
  char sbuf[64];
  assert_int_equal(chime__proc_wait(&chimed.proc, 30000, &status), 0);
  fprintf(stderr, "chimed exited %lld ms after SIGTERM: %s\n",
          (long long)(chime__now_ms() - t0),
          chime__status_str(status, sbuf, sizeof(sbuf)));
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);

  /* Nothing left behind. */
  char procdir[64];
  snprintf(procdir, sizeof(procdir), "/proc/%ld/fd", (long)pid);
  assert_int_not_equal(access(procdir, F_OK), 0);
  assert_int_not_equal(stat(sock_path, &sb), 0);
  for (int i = 0; i < nfiles; i++)
    if (strcmp(files[i], chimed.config_path) != 0 &&
        access(files[i], F_OK) == 0)
      fail_msg("chimed left %s behind", files[i]);
  int nafter = shm_names(after, MAX_PATHS);
  for (int i = 0; i < nafter; i++) {
    int old = 0;
    for (int j = 0; j < nbefore; j++)
      old |= strcmp(after[i], before[j]) == 0;
    if (!old)
      fail_msg("/dev/shm/%s appeared while chimed ran", after[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_sigterm, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
