/* Sequence tables in files (replay/table_file.h, steps_file.c): a table
 * opened again on its data dir holds the same windows in the same order
 * (keys, episodes, first steps, lengths, priorities) over the same steps,
 * every window sampled whole, and goes on (new episodes, keys past the old
 * ones, eviction through the old blocks); a process killed with SIGKILL
 * while it appends leaves a store that opens with every window whole;
 * both with a compressed leaf too (its steps in the bytes file). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/table.h"
#include "replay/table_internal.h" /* the windows in insert order */
#include "seq_steps.h"
#include "table_dir.h"
#include "table_slot.h"

static int setup(void **state) {
  if (tdir_setup(state, SEQ_SPEC) != 0)
    return -1;
  fx_t *f = *state;
  char dir[sizeof(f->tc.data_dir)];
  memcpy(dir, f->tc.data_dir, sizeof(dir));
  seq_table_cfg(&f->tc, "t", 512, 8, 2, 1, CHIME__SELECTOR_UNIFORM);
  memcpy(f->tc.data_dir, dir, sizeof(dir));
  f->tc.seed = 11;
  return 0;
}

/* A live window as the table holds it. */
typedef struct {
  uint64_t key, ep;
  uint32_t first, len, times;
  double prio;
} win_t;

/* The live windows oldest first into w (room for max); how many. */
static uint32_t windows(const chime__table_t *t, win_t *w, uint32_t max) {
  uint32_t n = 0;
  for (uint32_t r = t->oldest; r != NONE; r = t->nx[r]) {
    assert_true(n < max);
    w[n++] = (win_t){t->meta[r].key, t->wep[r],        t->wfirst[r],
                     t->wlen[r],     t->meta[r].times, t->meta[r].prio};
  }
  return n;
}

/* Every window of a batch: its valid steps one episode's (one tag), in
 * order from its first step, the rest zeros with the mask 0. */
static void check_slot_windows(const slot_t *s, uint32_t tl) {
  for (uint32_t j = 0; j < s->lay.batch_size; j++) {
    const chime_sample_info_t *in = &s->ws.info[j];
    const uint8_t *id = (const uint8_t *)s->ws.leaf[0] + (size_t)j * tl * 8;
    const uint8_t *x = (const uint8_t *)s->ws.leaf[1] + (size_t)j * tl * 3;
    const uint8_t *m = (const uint8_t *)s->ws.leaf[2] + (size_t)j * tl;
    uint32_t tag;
    memcpy(&tag, id, 4);
    for (uint32_t i = 0; i < tl; i++) {
      uint8_t want[SEQ_STEP];
      if (i < in->length)
        seq_step_bytes(want, tag, in->first_step + i);
      else
        memset(want, 0, sizeof(want));
      assert_memory_equal(id + 8 * i, want, 8);
      assert_memory_equal(x + 3 * i, want + 8, 3);
      assert_int_equal(m[i], i < in->length);
    }
  }
}

/* Three writers' episodes of 3..40 steps, n requests of 1..9 steps. */
static void fill(chime__table_t *t, seq_writer_t *w, uint32_t n,
                 uint64_t *seed) {
  for (uint32_t i = 0; i < n; i++) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    seq_writer_t *wr = &w[(*seed >> 33) % 3];
    uint32_t k = 1 + (uint32_t)(*seed >> 40) % 9;
    int end = wr->len + k >= 3 + (wr->tag % 37);
    assert_int_equal(seq_append(t, wr, k, end), 0);
  }
}

static void reopen_keeps_windows(fx_t *f) {
  chime__table_t *t = open_table(&f->tc);
  seq_writer_t w[3] = {{101, 0, 1, 0}, {202, 0, 2, 0}, {303, 0, 3, 0}};
  uint64_t seed = 5;
  slot_t s;
  static win_t a[2048], b[2048];
  fill(t, w, 400, &seed); /* several times the 512 steps: blocks reused */
  slot_init(&s, t, 16);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    check_slot_windows(&s, 8);
  }
  chime__table_stats_t st, st2;
  chime__table_get_stats(t, &st);
  assert_true(st.steps_inserted > st.steps); /* some evicted */
  uint32_t na = windows(t, a, 2048);
  assert_true(na > 16);
  uint64_t maxkey = 0;
  for (uint32_t i = 0; i < na; i++)
    maxkey = a[i].key > maxkey ? a[i].key : maxkey;
  chime__table_destroy(t);

  /* Again: the same windows in the same order, over the same steps. */
  t = open_table(&f->tc);
  chime__table_get_stats(t, &st2);
  assert_int_equal(st2.size, st.size);
  assert_int_equal(st2.steps, st.steps);
  assert_int_equal(windows(t, b, 2048), na);
  assert_memory_equal(a, b, na * sizeof(win_t));
  for (int i = 0; i < 20; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    check_slot_windows(&s, 8);
  }
  /* And on: new writers (the old ones' requests are forgotten, as after
   * a restore) start new episodes, past the old keys, evicting old
   * blocks. */
  for (int i = 0; i < 3; i++)
    w[i] = (seq_writer_t){w[i].id + 1000, 0, w[i].tag + 500, 0};
  fill(t, w, 400, &seed);
  na = windows(t, a, 2048);
  assert_true(a[na - 1].key > maxkey);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    check_slot_windows(&s, 8);
  }
  chime__table_destroy(t);
  /* A changed sequence shape is another table's file. */
  f->tc.sequence_length = 4;
  refused(&f->tc, CHIME_EINVAL, "holds another table");
  slot_fini(&s);
}

static void test_reopen_keeps_windows(void **state) {
  reopen_keeps_windows(*state);
}

/* The same with a compressed leaf: the steps' compressed bytes in the
 * bytes file, their extents in the table's file, freed as blocks are
 * taken again and rebuilt at open (the sequence table's rows hold none:
 * the bytes file's free extents are the step store's to rebuild). */
static void test_reopen_compressed(void **state) {
  fx_t *f = *state;
  f->tc.compress[1] = 3;
  reopen_keeps_windows(f);
  f->tc.sequence_length = 8; /* as made (the last check changed it) */
  chime__table_t *t = open_table(&f->tc);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_true(st.raw_bytes > 0 && st.stored_bytes > 0);
  assert_true(st.disk_bytes > 0);
  chime__table_destroy(t);
}

/* A child appends until SIGKILL; the store opens with every window whole
 * and at least the steps of the requests it acked (none evicted: the
 * store holds more than it appends). */
static void kill9(fx_t *f) {
  int fd[2];
  f->tc.capacity_steps = 1 << 16;
  assert_int_equal(pipe(fd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    chime__table_t *t = NULL;
    if (chime__table_create(&t, &f->tc) != 0)
      _exit(2);
    seq_writer_t w[3] = {{101, 0, 1, 0}, {202, 0, 2, 0}, {303, 0, 3, 0}};
    for (uint32_t i = 0;; i++) {
      seq_writer_t *wr = &w[i % 3];
      int end = wr->len + 5 >= 3 + (wr->tag % 37);
      if (seq_append(t, wr, 5, end) != 0)
        _exit(3);
      uint32_t acked = (i + 1) * 5;
      if (acked >= 60000 || write(fd[1], &acked, 4) != 4)
        _exit(0);
    }
  }
  close(fd[1]);
  uint32_t acked = 0, got;
  while (acked < 20000 && read(fd[0], &got, 4) == 4)
    acked = got;
  kill(pid, SIGKILL);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  while (read(fd[0], &got, 4) == 4) /* acked before the kill landed */
    acked = got;
  close(fd[0]);
  assert_true(acked >= 20000);

  chime__table_t *t = open_table(&f->tc);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_true(st.steps >= acked);
  assert_true(st.size > 0);
  slot_t s;
  slot_init(&s, t, 64);
  for (int i = 0; i < 50; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    check_slot_windows(&s, 8);
  }
  fprintf(stderr, "acked %u steps, after the kill %llu steps, %llu windows\n",
          acked, (unsigned long long)st.steps, (unsigned long long)st.size);
  chime__table_destroy(t);
  slot_fini(&s);
}

static void test_kill9(void **state) {
  kill9(*state);
}

static void test_kill9_compressed(void **state) {
  fx_t *f = *state;
  f->tc.compress[1] = 3;
  kill9(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reopen_keeps_windows, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_kill9, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reopen_compressed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_compressed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
