/* Tables in files (replay/table_file.h): a table opened again on its data
 * dir holds the same items, in the same order, with the same priorities,
 * times sampled and keys going on; and a data dir that is not a directory,
 * not writable, full, locked, or holding another table's or no table's
 * file is refused with its path named, the file left as it was. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/table.h"
#include "replay/table_file.h"
#include "replay/table_internal.h" /* pins, ndead: the rows' state */
#include "table_dir.h"
#include "table_slot.h"

#define SB 12 /* "a:u32[2], p:f32": a = {key, ~key}, p = the priority */

static int setup(void **state) {
  if (tdir_setup(state, "a:u32[2], p:f32") != 0)
    return -1;
  fx_t *f = *state;
  f->tc.capacity = 64;
  f->tc.sampler = CHIME__SELECTOR_PRIORITIZED;
  f->tc.remover = CHIME__SELECTOR_FIFO;
  f->tc.priority_exponent = 1.0;
  f->tc.min_size = 1;
  f->tc.seed = 7;
  return 0;
}

/* Inserts n items, key k's priority (k % 7) + 1 (its own p leaf too). */
static uint64_t put(chime__table_t *t, uint32_t n, uint64_t first_count) {
  uint8_t buf[16 * SB];
  double prio[16];
  uint64_t key = 0;
  assert_true(n <= 16);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = (uint32_t)(first_count + i);
    uint32_t a[2] = {c, ~c};
    float p = (float)(c % 7 + 1);
    prio[i] = p;
    memcpy(buf + i * SB, a, 8);
    memcpy(buf + i * SB + 8, &p, 4);
  }
  assert_int_equal(chime__table_insert(t, buf, n, prio, &key, NULL, NULL), 0);
  return key;
}

/* A batch whose every sample is whole and its probability its priority
 * over the sum. */
static void check_prio_batch(slot_t *s, double sum) {
  const uint32_t *a = (const uint32_t *)s->ws.leaf[0];
  const float *p = (const float *)s->ws.leaf[1];
  for (uint32_t j = 0; j < s->lay.batch_size; j++) {
    uint32_t c = (uint32_t)chime__key_count(s->ws.info[j].key);
    assert_int_equal(a[2 * j], c);
    assert_int_equal(a[2 * j + 1], ~c);
    assert_true(p[j] == (float)(c % 7 + 1));
    assert_true(fabs(s->ws.info[j].probability - p[j] / sum) < 1e-12);
  }
}

static void test_reopen_keeps_items(void **state) {
  fx_t *f = *state;
  chime__table_t *t = open_table(&f->tc);
  chime__table_stats_t st;
  slot_t s;
  /* 80 into 64: the oldest 16 leave (fifo remover). */
  for (uint64_t c = 1; c <= 80; c += 16)
    put(t, 16, c);
  slot_init(&s, t, 8);
  double sum = 0;
  for (uint32_t c = 17; c <= 80; c++)
    sum += c % 7 + 1;
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  check_prio_batch(&s, sum);
  uint64_t times_before = 0;
  chime__table_get_stats(t, &st);
  times_before = st.samples;
  assert_int_equal(times_before, 8);
  chime__table_destroy(t);

  /* Again: the same items, the same probabilities. */
  t = open_table(&f->tc);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 64);
  for (int i = 0; i < 10; i++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    check_prio_batch(&s, sum);
  }
  chime__table_destroy(t);

  /* As a fifo queue: the selectors are rebuilt, not stored. Insert order
   * kept, times sampled kept (88 draws before). */
  f->tc.sampler = CHIME__SELECTOR_FIFO;
  t = open_table(&f->tc);
  uint64_t times = 0;
  for (uint32_t c = 17; c <= 80; c += 8) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 8; j++) {
      assert_int_equal(chime__key_count(s.ws.info[j].key), c + j);
      times += s.ws.info[j].times_sampled - 1;
    }
  }
  assert_int_equal(times, 88);
  chime__table_destroy(t);
  /* Keys go on past the last one issued, the items sampled out gone. */
  t = open_table(&f->tc);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(chime__key_count(put(t, 1, 81)), 81);
  chime__table_destroy(t);
  free(s.mem);
}

static void test_other_table_refused(void **state) {
  fx_t *f = *state;
  chime__table_t *t = open_table(&f->tc);
  put(t, 10, 1);
  chime__table_destroy(t);
  chime__table_config_t other = f->tc;
  other.capacity = 65;
  refused(&other, CHIME_EINVAL, "holds another table");
  refused(&other, CHIME_EINVAL, "capacity 64");
  other = f->tc;
  assert_int_equal(chime_spec_parse(&other.spec, "a:u32[3], p:f32"), 0);
  refused(&other, CHIME_EINVAL, "a:u32[3]");
  /* Left as it was: the table's own config opens its 10 items. */
  t = open_table(&f->tc);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 10);
  /* And a second opener while it is open is refused. */
  refused(&f->tc, CHIME_EBUSY, "in use by another process");
  chime__table_destroy(t);
}

static void test_bad_files(void **state) {
  fx_t *f = *state;
  char path[CHIME__MAX_DATA_DIR / 2];
  chime__table_destroy(open_table(&f->tc));
  assert_int_equal(chime__tbl_file_path(&f->tc, path, sizeof(path)), 0);
  /* Cut short. */
  assert_int_equal(truncate(path, 8192), 0);
  refused(&f->tc, CHIME_ECORRUPT, "truncated");
  /* Not a table's file at all. */
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs("not a table", fp);
  fclose(fp);
  refused(&f->tc, CHIME_ECORRUPT, "not a chime table file");
  refused(&f->tc, CHIME_ECORRUPT, path);
  /* A data dir that is a file. */
  snprintf(f->tc.data_dir, sizeof(f->tc.data_dir), "%s", path);
  refused(&f->tc, CHIME_EINVAL, "is not a directory");
}

static void test_not_writable(void **state) {
  fx_t *f = *state;
  assert_int_equal(mkdir(f->tc.data_dir, 0555), 0);
  assert_int_equal(chmod(f->tc.data_dir, 0555), 0);
  assert_int_equal(chmod(f->dir, 0755), 0);
  /* Root writes anywhere: the check runs as nobody then. */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      _exit(2);
    chime__table_t *t = NULL;
    int rc = chime__table_create(&t, &f->tc);
    _exit(rc == CHIME_EPERM && strstr(chime_last_error(), "cannot create") &&
                  strstr(chime_last_error(), f->tc.data_dir)
              ? 0
              : 1);
  }
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
}

/* A full disk fails at creation, not as a SIGBUS once rows are written:
 * a 1 MiB tmpfs (root only; skipped elsewhere). */
static void test_full_disk(void **state) {
  fx_t *f = *state;
  mount_small(f);
  f->tc.capacity = 100000; /* 2.4 MB of leaves */
  refused(&f->tc, CHIME_ERESOURCE, "cannot allocate");
  char path[CHIME__MAX_DATA_DIR + 80];
  assert_int_equal(chime__tbl_file_path(&f->tc, path, sizeof(path)), 0);
  assert_int_equal(access(path, F_OK), -1);
  f->tc.capacity = 64; /* fits */
  chime__table_destroy(open_table(&f->tc));
  assert_int_equal(umount(f->tc.data_dir), 0);
}

/* Rows a sampler held pinned when the process died (one live, one whose
 * item had left meanwhile) come back pinned by no one: free or live, never
 * kept from reuse. */
static void test_pins_not_kept(void **state) {
  fx_t *f = *state;
  slot_t s, s2;
  f->tc.capacity = 4;
  chime__table_t *t = open_table(&f->tc);
  put(t, 4, 1);
  slot_init(&s, t, 1);
  slot_pin(&s);
  slot_init(&s2, t, 1);
  slot_pin(&s2);
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  put(t, 4, 5); /* the pinned item leaves: its row dead */
  assert_int_equal(t->ndead, 1);
  assert_int_equal(slot_sample_pinned(t, &s2, UINT64_MAX), 0); /* a live one */
  chime__table_destroy(t); /* as if killed: never unpinned */
  t = open_table(&f->tc);
  for (uint64_t r = 0; r < t->rows; r++)
    assert_int_equal(t->meta[r].pins, 0);
  assert_int_equal(t->ndead, 0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 4);
  /* Every row may be taken again: 40 more items go through 8 rows. */
  for (uint64_t c = 7; c < 47; c += 4)
    put(t, 4, c);
  assert_int_equal(t->ndead, 0);
  assert_int_equal(t->count + t->nfree + t->nspare, t->rows);
  chime__table_destroy(t);
  slot_fini(&s);
  slot_fini(&s2);
}

/* A rate-limited table opened again samples at once: its limiter starts
 * at its balance over the items there, not at 0 inserts. */
static void test_limiter_balanced(void **state) {
  fx_t *f = *state;
  slot_t s;
  chime__table_t *t = open_table(&f->tc);
  for (uint64_t c = 1; c <= 32; c += 16)
    put(t, 16, c);
  chime__table_destroy(t);
  /* The limiter is not in the file's fingerprint: set it now. */
  f->tc.samples_per_insert = 2;
  f->tc.error_buffer = 4;
  f->tc.min_size = 4;
  t = open_table(&f->tc);
  slot_init(&s, t, 1);
  chime__table_waiter_t w;
  memset(&w, 0, sizeof(w));
  int rc = chime__table_try_sample(t, &s.lay, &s.ws, &w);
  if (rc == CHIME_EBUSY)
    chime__table_unwait(t, &w);
  assert_int_equal(rc, 0);
  put(t, 1, 33); /* and inserts go in */
  chime__table_destroy(t);
  slot_fini(&s);
}

/* Stats' disk_bytes: the file's allocated blocks (the whole file, made
 * with posix_fallocate); 0 for the same table in memory. */
static void test_disk_bytes(void **state) {
  fx_t *f = *state;
  char path[CHIME__MAX_DATA_DIR / 2];
  struct stat st;
  chime__table_stats_t ts;
  chime__table_t *t = open_table(&f->tc);
  put(t, 10, 1);
  assert_int_equal(chime__tbl_file_path(&f->tc, path, sizeof(path)), 0);
  assert_int_equal(stat(path, &st), 0);
  chime__table_get_stats(t, &ts);
  assert_int_equal(ts.disk_bytes, (uint64_t)st.st_blocks * 512);
  assert_true(ts.disk_bytes >= (uint64_t)st.st_size);
  chime__table_destroy(t);
  f->tc.data_dir[0] = '\0';
  t = open_table(&f->tc);
  chime__table_get_stats(t, &ts);
  assert_int_equal(ts.disk_bytes, 0);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reopen_keeps_items, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_table_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pins_not_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(test_limiter_balanced, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_writable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_disk_bytes, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
