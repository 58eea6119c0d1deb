/* chimectl top against real chimed: with a writer (chime-actor) and a
 * learner (chime-learner) running on shard 1, `top ADDR --iterations 3`
 * prints three plain frames (no terminal codes: stdout is a file), each
 * with the table's row and a stream row, the table inserting at a nonzero
 * rate; over a sharded target (shards 1 and 2) a row per shard and the
 * table's size the sum of the shards', and a shard that does not answer
 * gets an error row while the others show (exit 1); a target that does not
 * answer gives a "chimectl: ..." line and exit 1, one that cannot be parsed
 * and a bad flag each one and exit 2. The live
 * view on a terminal (raw mode restored on q, Ctrl-C and signals) is
 * python/tests/test_top.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"
#include "writes.h"

#define CAPACITY 1000
#define SHARD2_ITEMS 20

static chime__chimed_t g_d[2];
static chime__proc_t g_actor, g_learner;
static char g_bin[1024];
static char g_target[600]; /* "A,B" */
static char g_dead[64];    /* an address that refuses connections */
static int g_dead_fd = -1; /* bound, never listening: refused at once */

/* A writer that inserts until it is stopped, and a learner that samples
 * until then: the rates top shows. */
static int start_load(const char *addr) {
  char actor[1024], learner[1024];
  if (!chime__harness_bin("examples/chime-actor", actor, sizeof(actor)) ||
      !chime__harness_bin("examples/chime-learner", learner, sizeof(learner)))
    chime__skip("chime-actor or chime-learner is not built");
  const char *a[] = {actor, "--server", addr,         "--table",
                     "t",   "--count",  "1000000000", NULL};
  const char *l[] = {learner, "--server",     addr,     "--table",
                     "t",     "--batch-size", "16",     "--batches",
                     "0",     "--until-idle", "600000", NULL};
  if (chime__proc_spawn(&g_actor, a, "/dev/null") ||
      chime__proc_spawn(&g_learner, l, "/dev/null"))
    return -1;
  /* Running once the table has items and the learner's stream is open. */
  chime_client_t *c = NULL;
  int rc = -1;
  if (chime_client_create(&c, addr, NULL) != 0)
    return -1;
  for (int64_t end = chime__now_ms() + 60000; chime__now_ms() < end;
       chime__sleep_ms(20)) {
    chime_stats_t *st = NULL;
    if (chime_client_stats(c, &st) != 0)
      break;
    int going = st->ntables == 1 && st->tables[0].inserts > 0 &&
                st->nstreams == 1 && st->streams[0].batches > 0;
    chime_stats_free(st);
    if (going) {
      rc = 0;
      break;
    }
  }
  chime_client_destroy(c);
  return rc;
}

static int setup(void **state) {
  (void)state;
  if (chime__harness_bin("examples/chimectl", g_bin, sizeof(g_bin)) == NULL)
    chime__skip("chimectl is not built");
  for (int i = 0; i < 2; i++) {
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"shard\": %d, \"tables\": [{\"name\": \"t\", \"spec\": "
             "\"x:u64[]\", \"capacity\": %d, \"sampler\": \"uniform\", "
             "\"min_size\": 1}]}\n",
             i + 1, CAPACITY);
    int rc = chime__chimed_start_or_skip(&g_d[i], cfg, NULL, 30000);
    if (rc != 0)
      return -1;
  }
  chime_client_t *c = NULL; /* counting samples into "t" */
  assert_int_equal(chime_client_create(&c, g_d[1].addr, NULL), 0);
  assert_int_equal(chime__write_counter(c, "t", 0, SHARD2_ITEMS, NULL), 0);
  chime_client_destroy(c);
  snprintf(g_target, sizeof(g_target), "%s,%s", g_d[0].addr, g_d[1].addr);
  if ((g_dead_fd = chime__refusing_addr(g_dead, sizeof(g_dead))) < 0)
    return -1;
  return start_load(g_d[0].addr);
}

static int teardown(void **state) {
  (void)state;
  int rc = 0, st;
  chime__proc_kill(&g_actor);
  chime__proc_kill(&g_learner);
  for (int i = 0; i < 2; i++)
    if (g_d[i].proc.pid > 0 && chime__chimed_stop(&g_d[i], 20000, &st))
      rc = -1;
  if (g_dead_fd >= 0)
    close(g_dead_fd);
  return rc;
}

/* Runs chimectl with args (NULL-terminated); stdout into out, stderr into
 * err; returns its exit status. The bound is generous: three frames of a
 * second each on a loaded machine. */
static int ctl(const char *const args[], char *out, size_t outlen, char *err,
               size_t errlen) {
  const char *argv[16] = {g_bin};
  for (int i = 0; args[i] != NULL && i < 14; i++)
    argv[i + 1] = args[i];
  int st = 0;
  assert_int_equal(chime__proc_run(argv, 60000, out, outlen, err, errlen, &st),
                   0);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* One frame's figures: the table's row and its stream's. */
typedef struct {
  uint64_t size, capacity;
  double insert_s, sample_s;
  int streams; /* stream rows of table t */
  double gb_s;
  int shard_rows, shard_errors, errors; /* a sharded target's */
  uint64_t shard_size[2];               /* of g_d[0] and g_d[1] */
} frame_t;

/* Splits out into frames (each from its "chimectl top " head) and reads
 * the row of table t and the stream rows of t in each; returns how many. */
static int frames(char *out, frame_t *f, int max) {
  int n = 0;
  for (char *l = out, *next; l != NULL && *l != '\0'; l = next) {
    next = strchr(l, '\n');
    if (next != NULL)
      *next++ = '\0';
    if (strncmp(l, "chimectl top ", 13) == 0) {
      assert_true(n < max);
      memset(&f[n++], 0, sizeof(*f));
      continue;
    }
    if (n == 0)
      continue;
    frame_t *fr = &f[n - 1];
    char mode[16];
    uint64_t id;
    char addr[256];
    uint64_t size;
    if (strncmp(l, "error: ", 7) == 0) {
      fr->errors++;
    } else if (strncmp(l, "127.0.0.1:", 10) == 0) {
      /* ADDRESS SIZE INSERT/S ..., or ADDRESS error: ... */
      fr->shard_rows++;
      assert_int_equal(sscanf(l, "%255s", addr), 1);
      if (strstr(l, " error: ") != NULL) {
        fr->shard_errors++;
        continue;
      }
      assert_int_equal(sscanf(l, "%*s %" SCNu64, &size), 1);
      for (int k = 0; k < 2; k++)
        if (strcmp(addr, g_d[k].addr) == 0)
          fr->shard_size[k] = size;
    } else if (strncmp(l, "t ", 2) == 0) {
      /* t SIZE CAPACITY INSERT/S SAMPLE/S SAMPLED/INS ... */
      assert_int_equal(sscanf(l, "t %" SCNu64 " %" SCNu64 " %lf %lf", &fr->size,
                              &fr->capacity, &fr->insert_s, &fr->sample_s),
                       4);
    } else if (sscanf(l, "%" SCNu64 " t %15s %lf", &id, mode, &fr->gb_s) == 3) {
      assert_true(strcmp(mode, "shm") == 0 || strcmp(mode, "stream") == 0);
      fr->streams++;
    }
  }
  return n;
}

static void test_frames(void **state) {
  (void)state;
  static char out[65536], err[4096];
  const char *args[] = {"top", g_d[0].addr, "--iterations", "3", NULL};
  int rc = ctl(args, out, sizeof(out), err, sizeof(err));
  if (rc != 0)
    fail_msg("exit %d: %s", rc, err);
  assert_null(strchr(out, '\033')); /* plain frames: stdout is a file */
  frame_t f[4];
  assert_int_equal(frames(out, f, 4), 3);
  int inserting = 0;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(f[i].capacity, CAPACITY);
    assert_true(f[i].size > 0 && f[i].size <= CAPACITY);
    assert_int_equal(f[i].streams, 1);
    inserting += f[i].insert_s > 0;
  }
  /* The writer never stops; a frame of a loaded machine might still see it
   * descheduled all along, so one frame of three is enough. */
  assert_true(inserting > 0);
}

static void test_sharded_sums(void **state) {
  (void)state;
  static char out[65536], err[4096];
  const char *args[] = {"top", g_target, "--iterations", "2", "--interval-ms",
                        "200", NULL};
  int rc = ctl(args, out, sizeof(out), err, sizeof(err));
  if (rc != 0)
    fail_msg("exit %d: %s", rc, err);
  frame_t f[3];
  assert_int_equal(frames(out, f, 3), 2);
  for (int i = 0; i < 2; i++) {
    /* Shard 1 is full (the writer evicts as it goes), shard 2 has its 20;
     * a row for each, and the table summed. */
    assert_int_equal(f[i].shard_rows, 2);
    assert_int_equal(f[i].shard_size[0], CAPACITY);
    assert_int_equal(f[i].shard_size[1], SHARD2_ITEMS);
    assert_int_equal(f[i].size, CAPACITY + SHARD2_ITEMS);
    assert_int_equal(f[i].capacity, 2 * CAPACITY);
    assert_int_equal(f[i].streams, 1);
    assert_int_equal(f[i].errors, 0);
  }
}

/* A shard that does not answer: its row says why, the others still show,
 * the sum is an error line, and an --iterations run exits 1. */
static void test_shard_down(void **state) {
  (void)state;
  static char out[65536], err[4096];
  char target[800];
  snprintf(target, sizeof(target), "%s,%s,%s", g_d[0].addr, g_dead,
           g_d[1].addr);
  const char *args[] = {"top", target, "--iterations", "1", "--interval-ms",
                        "200", NULL};
  assert_int_equal(ctl(args, out, sizeof(out), err, sizeof(err)), 1);
  frame_t f[2];
  assert_int_equal(frames(out, f, 2), 1);
  assert_int_equal(f[0].shard_rows, 3);
  assert_int_equal(f[0].shard_errors, 1);
  assert_int_equal(f[0].shard_size[0], CAPACITY);
  assert_int_equal(f[0].shard_size[1], SHARD2_ITEMS);
  assert_int_equal(f[0].errors, 1);
}

static void test_bad_target(void **state) {
  (void)state;
  static char out[65536], err[4096];
  /* Not answering is 1, as for info and stats (2 is for mistakes). */
  const char *args[] = {"top", g_dead, "--iterations", "1", NULL};
  assert_int_equal(ctl(args, out, sizeof(out), err, sizeof(err)), 1);
  char want[128];
  snprintf(want, sizeof(want), "chimectl: top %s: ", g_dead);
  assert_non_null(strstr(err, want));
  assert_string_equal(out, "");
  /* A target that cannot be parsed is a mistake: 2. */
  const char *bad[] = {"top", "127.0.0.1:99999", "--iterations", "1", NULL};
  assert_int_equal(ctl(bad, out, sizeof(out), err, sizeof(err)), 2);
  assert_non_null(strstr(err, "chimectl: 127.0.0.1:99999: "));
  assert_non_null(strstr(err, "1..65535"));
  assert_string_equal(out, "");
}

static void test_bad_flags(void **state) {
  (void)state;
  static char out[65536], err[4096];
  const char *const bad[][6] = {
      {"top", g_d[0].addr, "--interval-ms", "5", NULL},
      {"top", g_d[0].addr, "--iterations", "0", NULL},
      {"top", g_d[0].addr, "--iterations", NULL},
      {"top", g_d[0].addr, "--bogus", NULL},
      {"--json", "top", g_d[0].addr, NULL},
      {"stats", g_d[0].addr, "--iterations", "2", NULL},
  };
  const char *says[] = {"bad value '5' for --interval-ms",
                        "bad value '0' for --iterations",
                        "incomplete option '--iterations'",
                        "unknown option '--bogus'",
                        "top has no --json",
                        "--iterations and --interval-ms are top's"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(ctl(bad[i], out, sizeof(out), err, sizeof(err)), 2);
    if (strstr(err, says[i]) == NULL)
      fail_msg("case %zu: no '%s' in: %s", i, says[i], err);
    assert_string_equal(out, "");
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_frames),     cmocka_unit_test(test_sharded_sums),
      cmocka_unit_test(test_shard_down), cmocka_unit_test(test_bad_target),
      cmocka_unit_test(test_bad_flags),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
