/* Compressed and ragged leaves of a table in files (replay/table_bytes.h,
 * docs/operations.md "Tables in files"): a table opened again on its data
 * dir samples the same bytes as the one before and as the same table in
 * memory (compressed leaves, a compressed ragged leaf, a raw ragged leaf,
 * noise kept raw, rows of no ragged bytes); freed extents are taken
 * again, so the bytes file stays within its rows' worth however many
 * items pass; a bytes file cut short, missing, holding sizes unlike a
 * row's extent, or two rows' bytes at one place is refused naming the
 * file and row; a full disk refuses the insert that needed the room. */
#include <errno.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/table.h"
#include "replay/table_internal.h" /* the rows' extents */
#include "table_dir.h"
#include "table_slot.h"
#include "zframe.h"

/* a = k; obs = frame k (noise when k % 3 == 0), compressed; r: k % 5
 * frames k * 100 + i, compressed; g: k % 9 floats k + i, raw. */
#define SPEC "a:i32[], obs:u8[84,84], r:u8[<=4,84,84], g:f32[<=8]"
#define CAP 32

static int setup(void **state) {
  if (tdir_setup(state, SPEC) != 0)
    return -1;
  fx_t *f = *state;
  f->tc.capacity = CAP;
  f->tc.sampler = CHIME__SELECTOR_UNIFORM;
  f->tc.remover = CHIME__SELECTOR_FIFO;
  f->tc.min_size = 1;
  f->tc.seed = 11;
  f->tc.compress[1] = 3;
  f->tc.compress[2] = 3;
  return 0;
}

static uint32_t rlen(uint32_t k) {
  return k % 5;
}
static uint32_t glen(uint32_t k) {
  return k % 9;
}

/* Items k0 .. k0 + n - 1 (n <= 16) in one request: its code. */
static int put_rc(chime__table_t *t, uint32_t k0, uint32_t n) {
  uint32_t lens[32];
  uint64_t total = 0, first;
  assert_true(n <= 16);
  for (uint32_t j = 0; j < n; j++) {
    lens[2 * j] = rlen(k0 + j);
    lens[2 * j + 1] = glen(k0 + j);
    total += 4 + FRAME + (uint64_t)lens[2 * j] * FRAME + 4 * lens[2 * j + 1];
  }
  uint8_t *buf = malloc((size_t)total), *p = buf;
  assert_non_null(buf);
  for (uint32_t j = 0; j < n; j++) {
    uint32_t k = k0 + j;
    int32_t a = (int32_t)k;
    memcpy(p, &a, 4);
    frame(p + 4, k, k % 3 == 0);
    p += 4 + FRAME;
    for (uint32_t i = 0; i < rlen(k); i++, p += FRAME)
      frame(p, k * 100 + i, 0);
    for (uint32_t i = 0; i < glen(k); i++, p += 4) {
      float g = (float)(k + i);
      memcpy(p, &g, 4);
    }
  }
  chime__span_t sp = {buf, (size_t)total};
  int rc =
      chime__table_insert_spans(t, &sp, 1, n, lens, NULL, &first, NULL, NULL);
  free(buf);
  return rc;
}

static void put(chime__table_t *t, uint32_t k0, uint32_t n) {
  assert_int_equal(put_rc(t, k0, n), 0);
}

/* Every sample of s (n of them) is its item's bytes exactly. */
static void check(const slot_t *s, uint32_t n) {
  uint8_t want[FRAME];
  const int64_t *ro = s->ws.offsets[2], *go = s->ws.offsets[3];
  for (uint32_t j = 0; j < n; j++) {
    int32_t a;
    memcpy(&a, (const uint8_t *)s->ws.leaf[0] + 4 * (size_t)j, 4);
    uint32_t k = (uint32_t)a;
    assert_int_equal(chime__key_count(s->ws.info[j].key), k);
    frame(want, k, k % 3 == 0);
    assert_memory_equal((const uint8_t *)s->ws.leaf[1] + (size_t)j * FRAME,
                        want, FRAME);
    assert_int_equal(ro[j + 1] - ro[j], rlen(k));
    for (int64_t i = 0; i < ro[j + 1] - ro[j]; i++) {
      frame(want, k * 100 + (uint32_t)i, 0);
      assert_memory_equal((const uint8_t *)s->ws.leaf[2] +
                              (size_t)(ro[j] + i) * FRAME,
                          want, FRAME);
    }
    assert_int_equal(go[j + 1] - go[j], glen(k));
    for (int64_t i = 0; i < go[j + 1] - go[j]; i++) {
      float g;
      memcpy(&g, (const uint8_t *)s->ws.leaf[3] + 4 * (size_t)(go[j] + i), 4);
      assert_true(g == (float)(k + (uint32_t)i));
    }
  }
}

/* A batch of n: its bytes, leaves and offsets, for comparing two. */
static void sample_into(chime__table_t *t, slot_t *s, uint32_t n) {
  slot_init(s, t, n);
  assert_int_equal(chime__table_sample(t, &s->lay, &s->ws, NULL), 0);
  check(s, n);
}

static int same_leaves(const slot_t *a, const slot_t *b) {
  for (uint32_t l = 0; l < 4; l++) {
    size_t n = a->lay.leaf_bytes[l];
    if (memcmp(a->ws.leaf[l], b->ws.leaf[l], n) != 0)
      return 0;
  }
  return 1;
}

static void test_reopen_identical(void **state) {
  fx_t *f = *state;
  chime__table_config_t mem = f->tc;
  mem.data_dir[0] = '\0';
  chime__table_t *t = open_table(&f->tc), *m = open_table(&mem);
  /* 100 through 32: the oldest leave, their extents taken again. */
  for (uint32_t k = 1; k <= 100; k += 11) {
    uint32_t n = k + 11 > 101 ? 101 - k : 11;
    put(t, k, n);
    put(m, k, n);
  }
  chime__table_stats_t st, sm;
  chime__table_get_stats(t, &st);
  chime__table_get_stats(m, &sm);
  assert_int_equal(st.size, CAP);
  assert_int_equal(st.raw_bytes, sm.raw_bytes);
  assert_int_equal(st.stored_bytes, sm.stored_bytes);
  assert_int_equal(st.leaves_stored_raw, sm.leaves_stored_raw);
  assert_int_equal(st.ragged_bytes, sm.ragged_bytes);
  slot_t s1, s2, s3;
  sample_into(t, &s1, 16); /* the same seed: the same draws as in memory */
  sample_into(m, &s2, 16);
  assert_true(same_leaves(&s1, &s2));
  chime__table_destroy(m);
  chime__table_destroy(t);

  /* Opened again: the same bytes held, and sampled exactly. */
  t = open_table(&f->tc);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, CAP);
  assert_int_equal(st.raw_bytes, sm.raw_bytes);
  assert_int_equal(st.stored_bytes, sm.stored_bytes);
  /* leaves_stored_raw counts since the open, as the other counters: the
   * live rows' (11 of the 33 inserted kept raw, 1 in 3 is noise). */
  assert_true(st.leaves_stored_raw > 0);
  assert_int_equal(st.ragged_bytes, sm.ragged_bytes);
  /* Each sample its item's bytes (the draws differ: the uniform index is
   * rebuilt in insert order). */
  sample_into(t, &s3, 16);
  /* More through it after the reopen: the rebuilt free lists. */
  for (uint32_t k = 101; k <= 400; k += 15)
    put(t, k, 15);
  chime__table_destroy(t);
  f->tc.sampler = CHIME__SELECTOR_FIFO; /* in insert order, all of them */
  t = open_table(&f->tc);
  slot_t s4;
  sample_into(t, &s4, CAP);
  for (uint32_t j = 0; j < CAP; j++)
    assert_int_equal(chime__key_count(s4.ws.info[j].key), 400 - CAP + 1 + j);
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, 0);
  assert_int_equal(st.stored_bytes, 0);
  assert_int_equal(st.ragged_bytes, 0);
  chime__table_destroy(t);
  slot_fini(&s1);
  slot_fini(&s2);
  slot_fini(&s3);
  slot_fini(&s4);
}

/* However many items pass, the extents stay within what the rows could
 * hold at their bounds (the freed ones are taken again). */
static void test_extents_reused(void **state) {
  fx_t *f = *state;
  chime__table_t *t = open_table(&f->tc);
  for (uint32_t k = 1; k <= 3000; k += 16)
    put(t, k, 16);
  uint64_t most = 4 + FRAME + 4 + 4 * FRAME + 8 * 4; /* a row's, at most */
  uint64_t end = chime__tbl_bytes_end(t->bytes);
  assert_true(end <= t->rows * (2 * most + 64));
  assert_true(end > 0);
  chime__table_destroy(t);
}

static void test_bad_bytes_file(void **state) {
  fx_t *f = *state;
  char path[CHIME__MAX_DATA_DIR + 64];
  snprintf(path, sizeof(path), "%s/t.bytes", f->tc.data_dir);
  chime__table_t *t = open_table(&f->tc);
  put(t, 1, 10);
  uint32_t r = t->oldest;
  chime__tbl_extent_t e = t->zext[r];
  chime__table_destroy(t);
  /* A compressed leaf's size over its extent: refused naming the row. */
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  uint32_t big = 1u << 30, was;
  assert_int_equal(pread(fd, &was, 4, (off_t)e.off), 4);
  assert_int_equal(pwrite(fd, &big, 4, (off_t)e.off), 4);
  refused(&f->tc, CHIME_ECORRUPT, "sizes unlike their extent");
  char row[32];
  snprintf(row, sizeof(row), "row %u", r);
  refused(&f->tc, CHIME_ECORRUPT, row);
  assert_int_equal(pwrite(fd, &was, 4, (off_t)e.off), 4);
  close(fd);
  t = open_table(&f->tc); /* put back: whole again */
  chime__table_destroy(t);
  /* Cut short, then gone: the rows' bytes are not in it. */
  assert_int_equal(truncate(path, 4096), 0);
  refused(&f->tc, CHIME_ECORRUPT, "not in it");
  refused(&f->tc, CHIME_ECORRUPT, path);
  assert_int_equal(unlink(path), 0);
  refused(&f->tc, CHIME_ECORRUPT, "not in it");
  /* Two rows' bytes at one place (another table "u" in the same dir). */
  chime__table_config_t u = f->tc;
  snprintf(u.name, sizeof(u.name), "u");
  t = open_table(&u);
  put(t, 1, 10);
  r = t->oldest;
  t->zext[t->nx[r]].off = t->zext[r].off;
  chime__table_destroy(t);
  refused(&u, CHIME_ECORRUPT, "over another row's");
}

/* A full disk refuses the insert that needed the bytes file to grow,
 * nothing of it stored, naming the file; the items before it stay whole
 * and open again. A 1 MiB tmpfs (root only; skipped elsewhere). */
static void test_full_disk(void **state) {
  fx_t *f = *state;
  mount_small(f);
  f->tc.capacity = 4096; /* rows enough: the bytes file must grow */
  chime__table_t *t = open_table(&f->tc);
  chime__table_stats_t st;
  int rc = 0;
  uint32_t k = 1;
  for (; rc == 0 && k < 4096; k += 8)
    rc = put_rc(t, k, 8);
  assert_int_equal(rc, CHIME_ERESOURCE);
  assert_non_null(strstr(chime_last_error(), "No space left"));
  assert_non_null(strstr(chime_last_error(), "t.bytes"));
  chime__table_get_stats(t, &st);
  assert_int_equal(st.size, k - 9); /* the request that failed: none */
  slot_t s;
  f->tc.sampler = CHIME__SELECTOR_FIFO;
  chime__table_destroy(t);
  t = open_table(&f->tc);
  sample_into(t, &s, (uint32_t)st.size); /* each whole, in order */
  for (uint32_t j = 0; j < st.size; j++)
    assert_int_equal(chime__key_count(s.ws.info[j].key), j + 1);
  slot_fini(&s);
  chime__table_destroy(t);
  assert_int_equal(umount(f->tc.data_dir), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reopen_identical, setup, teardown),
      cmocka_unit_test_setup_teardown(test_extents_reused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_bytes_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
