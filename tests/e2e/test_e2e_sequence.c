/* Sequence tables against the real chimed: two writers' interleaved
 * episodes, read as windows in shm and stream mode while the writers keep
 * evicting the oldest steps, every byte checked (each step's bytes say its
 * episode and index); GetInfo and Stats of a sequence table; a writer
 * killed mid-episode leaves its complete windows and nothing half-written. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define T 16
#define X 200 /* bytes of leaf x per step */
#define STEP (8 + X)

static chime__chimed_t chimed;
static chime_client_t *client;

static int setup(void **state) {
  (void)state;
  int rc = chime__chimed_start_client(
      &chimed,
      "{\"tables\": [{\"name\": \"seq\", \"spec\": \"id:u32[2], x:u8[200]\", "
      "\"capacity_steps\": 512, \"sequence_length\": 16, \"stride\": 8, "
      "\"episode_end\": \"pad\", \"sampler\": \"uniform\"},\n"
      " {\"name\": \"k\", \"spec\": \"id:u32[2], x:u8[200]\", "
      "\"capacity_steps\": 1024, \"sequence_length\": 8, \"stride\": 8, "
      "\"episode_end\": \"drop\", \"sampler\": \"uniform\"},\n"
      " {\"name\": \"q\", \"spec\": \"id:u32[2], x:u8[200]\", "
      "\"capacity_steps\": 1024, \"sequence_length\": 4, \"stride\": 4, "
      "\"sampler\": \"fifo\"}]}\n",
      &client);
  if (rc != 0)
    fprintf(stderr, "setup: %s\n", chime_strerror(rc));
  return rc;
}

static int teardown(void **state) {
  (void)state;
  int rc = chime__chimed_stop_client(&chimed, client);
  if (rc != 0)
    fprintf(stderr, "teardown: chimed did not exit 0 after SIGTERM\n");
  return rc;
}

static void step_bytes(uint8_t *p, uint32_t tag, uint32_t idx) {
  uint32_t id[2] = {tag, idx};
  memcpy(p, id, 8);
  for (uint32_t i = 0; i < X; i++)
    p[8 + i] = (uint8_t)(tag * 31 + idx * 7 + i);
}

/* A writer of episodes tagged base, base + 2, ... (so two writers' tags
 * never meet). */
typedef struct {
  chime_writer_t *w;
  uint32_t tag, len, end_at;
} actor_t;

static void actor_steps(actor_t *a, uint32_t n) {
  uint8_t buf[STEP];
  for (uint32_t i = 0; i < n; i++) {
    step_bytes(buf, a->tag, a->len++);
    assert_int_equal(chime_writer_append(a->w, buf, STEP, 1.0), 0);
    if (a->len == a->end_at) {
      assert_int_equal(chime_writer_end_episode(a->w), 0);
      a->tag += 2;
      a->len = 0;
      a->end_at = 3 + (a->tag * 13) % 45; /* short ones pad */
    }
  }
}

/* Checks every window of a batch; returns how many. */
static uint32_t check_batch_windows(const chime_batch_t *b) {
  assert_int_equal(b->nleaves, 3);
  for (uint32_t j = 0; j < b->count; j++) {
    const chime_sample_info_t *in = &b->info[j];
    const uint32_t *id = (const uint32_t *)b->leaf[0].data + (size_t)j * T * 2;
    const uint8_t *x = (const uint8_t *)b->leaf[1].data + (size_t)j * T * X;
    const uint8_t *m = (const uint8_t *)b->leaf[2].data + (size_t)j * T;
    uint32_t tag = id[0];
    if (in->length < 1 || in->length > T || in->first_step % 8 != 0 ||
        in->episode_id == 0)
      fail_msg("window %u: length %u first_step %u episode %llu", j, in->length,
               in->first_step, (unsigned long long)in->episode_id);
    for (uint32_t i = 0; i < T; i++) {
      int valid = i < in->length;
      if (m[i] != valid)
        fail_msg("window %u step %u: mask %u", j, i, m[i]);
      uint32_t want_tag = valid ? tag : 0, want_idx = in->first_step + i;
      if (id[2 * i] != want_tag || id[2 * i + 1] != (valid ? want_idx : 0))
        fail_msg("window %u (episode %llu from %u, length %u) step %u: "
                 "tag %u index %u, expected %u %u",
                 j, (unsigned long long)in->episode_id, in->first_step,
                 in->length, i, id[2 * i], id[2 * i + 1], want_tag,
                 valid ? want_idx : 0);
      for (uint32_t k = 0; k < X; k++) {
        uint8_t want = valid ? (uint8_t)(tag * 31 + want_idx * 7 + k) : 0;
        if (x[(size_t)i * X + k] != want)
          fail_msg("window %u step %u byte %u: %u, expected %u", j, i, k,
                   x[(size_t)i * X + k], want);
      }
    }
  }
  return b->count;
}

static void test_two_writers_shm_and_stream(void **state) {
  (void)state;
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(client, &info), 0);
  const chime_table_info_t *ti = &info->tables[0];
  assert_string_equal(ti->name, "seq");
  assert_int_equal(ti->sequence_length, T);
  assert_int_equal(ti->stride, 8);
  assert_int_equal(ti->capacity_steps, 512);
  assert_string_equal(ti->episode_end, "pad");
  assert_int_equal(ti->step_spec.nleaves, 2);
  assert_int_equal(ti->step_bytes, STEP);
  assert_int_equal(ti->spec.nleaves, 3);
  assert_int_equal(ti->spec.leaves[0].ndim, 2);
  assert_int_equal(ti->spec.leaves[0].shape[0], T);
  assert_string_equal(ti->spec.leaves[2].name, "mask");
  assert_int_equal(ti->sample_bytes, T * STEP + T);
  chime_server_info_free(info);

  actor_t a[2];
  for (int i = 0; i < 2; i++) {
    a[i].tag = 1 + (uint32_t)i;
    a[i].len = 0;
    a[i].end_at = 40;
    assert_int_equal(chime_writer_open(&a[i].w, client, "seq", NULL), 0);
  }
  actor_steps(&a[0], 20); /* a window (and the table's min_size) */
  assert_int_equal(chime_writer_flush(a[0].w), 0);

  chime_stream_t *s[2];
  for (int i = 0; i < 2; i++) {
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = 8;
    so.slots = 4;
    so.mode = i == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
    assert_int_equal(chime_stream_open(&s[i], client, "seq", &so), 0);
  }
  uint32_t windows[2] = {0, 0};
  for (int round = 0; round < 60; round++) {
    actor_steps(&a[0], 17 + (uint32_t)round % 5);
    actor_steps(&a[1], 23 - (uint32_t)round % 7);
    assert_int_equal(chime_writer_flush(a[0].w), 0);
    assert_int_equal(chime_writer_flush(a[1].w), 0);
    for (int i = 0; i < 2; i++) {
      chime_batch_t b;
      assert_int_equal(chime_stream_next(s[i], &b, 30000), 0);
      windows[i] += check_batch_windows(&b);
      assert_int_equal(chime_stream_release(s[i], &b), 0);
    }
  }
  assert_int_equal(windows[0], 480);
  assert_int_equal(windows[1], 480);

  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  const chime_table_stats_t *ts = &st->tables[0];
  assert_true(ts->steps > 0 && ts->steps <= 512);
  assert_true(ts->steps_inserted > 4 * 512); /* evicted over and over */
  assert_true(ts->size <= ts->steps);
  assert_int_equal(ts->episodes_open, 2);
  assert_true(ts->step_bytes >= 512 * STEP && ts->step_bytes < 544 * STEP);
  chime_stats_free(st);
  for (int i = 0; i < 2; i++) {
    chime_stream_close(s[i]);
    assert_int_equal(chime_writer_close(a[i].w), 0);
  }
}

/* The child: 21 steps of one episode (windows at 0 and 8, 5 steps more),
 * acked, then killed by the test. */
static int write_main(const char *addr) {
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  if (chime_client_create(&c, addr, NULL) != 0 ||
      chime_writer_open(&w, c, "k", NULL) != 0) {
    fprintf(stderr, "write: open: %s\n", chime_last_error());
    return 1;
  }
  uint8_t buf[STEP];
  for (uint32_t i = 0; i < 21; i++) {
    step_bytes(buf, 7, i);
    if (chime_writer_append(w, buf, STEP, 1.0) != 0)
      return 1;
  }
  if (chime_writer_flush(w) != 0)
    return 1;
  printf("flushed\n");
  fflush(stdout);
  for (;;)
    pause();
}

static void test_writer_killed_mid_episode(void **state) {
  (void)state;
  char self[512], line[64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  assert_true(n > 0);
  self[n] = '\0';
  const char *argv[] = {self, "--write", chimed.addr, NULL};
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn(&p, argv, NULL), 0);
  int rc = chime__proc_read_line(&p, "flushed", line, sizeof(line), 60000);
  if (rc != 0)
    fail_msg("the writer did not flush: %s", chime_strerror(rc));
  chime__proc_kill(&p);

  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  const chime_table_stats_t *ts = &st->tables[1];
  assert_string_equal(ts->name, "k");
  assert_int_equal(ts->steps, 21);
  assert_int_equal(ts->size, 2);
  assert_int_equal(ts->episodes_open, 1);
  chime_stats_free(st);

  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 4;
  so.slots = 2;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, client, "k", &so), 0);
  for (int k = 0; k < 8; k++) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 30000), 0);
    assert_int_equal(b.nleaves, 2); /* drop: no mask */
    for (uint32_t j = 0; j < b.count; j++) {
      const chime_sample_info_t *in = &b.info[j];
      assert_int_equal(in->length, 8);
      assert_true(in->first_step == 0 || in->first_step == 8);
      const uint32_t *id = (const uint32_t *)b.leaf[0].data + (size_t)j * 16;
      for (uint32_t i = 0; i < 8; i++) {
        assert_int_equal(id[2 * i], 7);
        assert_int_equal(id[2 * i + 1], in->first_step + i);
      }
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

/* A fifo sequence table (each window to one stream): windows of batches a
 * learner never released come back when its stream closes (shm: from the
 * ring; stream: from the pinned rows), and the next stream gets them
 * first, in order, byte for byte. */
static void test_give_back(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "q", NULL), 0);
  uint8_t buf[STEP];
  for (uint32_t i = 0; i < 32; i++) { /* 8 windows: keys 1..8 */
    step_bytes(buf, 5, i);
    assert_int_equal(chime_writer_append(w, buf, STEP, 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
  /* shm, then stream mode, unreleased; then stream mode, released. */
  for (int round = 0; round < 3; round++) {
    chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
    so.batch_size = 4;
    so.slots = 3; /* a learner may hold all but one */
    so.mode = round == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
    chime_stream_t *s = NULL;
    assert_int_equal(chime_stream_open(&s, client, "q", &so), 0);
    for (uint32_t k = 0; k < 2; k++) {
      chime_batch_t b;
      assert_int_equal(chime_stream_next(s, &b, 30000), 0);
      for (uint32_t j = 0; j < 4; j++) {
        const chime_sample_info_t *in = &b.info[j];
        assert_int_equal(in->key, 1 + 4 * k + j);
        assert_int_equal(in->first_step, 4 * (4 * k + j));
        const uint32_t *id = (const uint32_t *)b.leaf[0].data + (size_t)j * 8;
        for (uint32_t i = 0; i < 4; i++) {
          assert_int_equal(id[2 * i], 5);
          assert_int_equal(id[2 * i + 1], in->first_step + i);
        }
      }
      if (round == 2)
        assert_int_equal(chime_stream_release(s, &b), 0);
    }
    chime_stream_close(s);
  }
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  assert_string_equal(st->tables[2].name, "q");
  assert_int_equal(st->tables[2].returned, 16);
  assert_int_equal(st->tables[2].size, 0);
  chime_stats_free(st);
}

/* Wrong uses are refused with a reason: end_episode on a plain table's
 * writer, a priority other than 1 for a step; a stream on the fifo table
 * "q" whose batch exceeds the 256 windows its store holds at once
 * (capacity_steps 1024 in blocks of 64, T 4, stride 4: (1024 - 4) / 4 + 1)
 * would wait for ever: refused (before: up to capacity_steps went). */
static void test_refusals(void **state) {
  (void)state;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 257;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, client, "q", &so), CHIME_EINVAL);
  if (!strstr(chime_last_error(), "batch_size 257 exceeds the 256 windows "
                                  "sequence table 'q' can hold at once"))
    fail_msg("last error '%s'", chime_last_error());
  so.batch_size = 256;
  assert_int_equal(chime_stream_open(&s, client, "q", &so), 0);
  chime_stream_close(s);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "k", NULL), 0);
  uint8_t buf[STEP];
  step_bytes(buf, 9, 0);
  assert_int_equal(chime_writer_append(w, buf, STEP, 2.0), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "initial_priority"));
  assert_int_equal(chime_writer_append(w, buf, STEP - 1, 1.0), CHIME_EINVAL);
  assert_int_equal(chime_writer_close(w), 0);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write") == 0)
    return write_main(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_two_writers_shm_and_stream, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_writer_killed_mid_episode, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_give_back, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
