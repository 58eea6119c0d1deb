/* Checkpoints in process: CRC-32C, a table written and restored (fifo:
 * the same batches byte for byte; prioritized: keys, priorities, times
 * sampled, insert times; the counts), inserts going on while a checkpoint
 * is written, a flipped byte in any file refused naming the file, a spec
 * that differs refused naming the leaf, a checkpoint without DONE never
 * loaded, keep, and a sequence table refused at restore. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "server/checkpoint.h"
#include "server/crc32c.h"
#include "server/table.h"

#define SB 9 /* "a:u32[2], b:u8[]" */

static char root[256];

static void make_dir(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/%s", root, name);
}

static void rm_rf(const char *path) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
  assert_int_equal(system(cmd), 0);
}

static chime__table_t *new_table(const char *spec, uint64_t cap,
                                 chime__sampler_t s) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, spec, NULL, 0), 0);
  tc.capacity = cap;
  tc.sampler = s;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.seed = 7;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

static void insert_n(chime__table_t *t, uint64_t first, uint32_t n,
                     const double *prio) {
  uint8_t buf[64 * SB];
  uint64_t k;
  assert_true(n <= 64);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t a[2] = {(uint32_t)(first + i) * 10,
                     (uint32_t)(first + i) * 10 + 1};
    memcpy(buf + i * SB, a, 8);
    buf[i * SB + 8] = (uint8_t)(first + i);
  }
  assert_int_equal(chime__table_insert(t, buf, n, prio, &k, NULL, NULL), 0);
}

typedef struct {
  chime_ring_layout_t lay;
  uint8_t *mem;
  chime_ring_wslot_t ws;
} slot_t;

static void slot_init(slot_t *s, const chime__table_t *t, uint32_t batch) {
  assert_int_equal(chime_ring_layout(&s->lay, &chime__table_config(t)->spec,
                                     batch, 2, NULL, 0),
                   0);
  s->mem = aligned_alloc(4096, s->lay.slot_bytes);
  assert_non_null(s->mem);
  memset(s->mem, 0, s->lay.slot_bytes);
  memset(&s->ws, 0, sizeof(s->ws));
  s->ws.base = s->mem;
  for (uint32_t l = 0; l < 2; l++)
    s->ws.leaf[l] = s->mem + s->lay.leaf_offset[l];
  s->ws.info = (chime_sample_info_t *)(s->mem + s->lay.info_offset);
}

static void test_crc32c(void **state) {
  (void)state;
  assert_int_equal(chime__crc32c(0, "123456789", 9), 0xE3069283u);
  uint8_t buf[1000];
  for (int i = 0; i < 1000; i++)
    buf[i] = (uint8_t)(i * 7 + 3);
  uint32_t whole = chime__crc32c(0, buf, sizeof(buf));
  for (size_t cut = 0; cut <= 1000; cut += 37)
    assert_int_equal(
        chime__crc32c(chime__crc32c(0, buf, cut), buf + cut, 1000 - cut),
        whole);
  assert_int_equal(chime__crc32c(0, "", 0), 0);
}

static void write_ok(chime__table_t *t, const char *dir, uint32_t keep,
                     chime__ckpt_result_t *res) {
  char err[512] = "";
  int rc = chime__checkpoint_write(&t, 1, dir, keep, res, err, sizeof(err));
  if (rc != 0)
    fail_msg("checkpoint: %s", err);
}

/* fifo: a restored table hands out the same batches, byte for byte, and
 * keeps the counts and the next key. */
static void test_fifo_roundtrip(void **state) {
  (void)state;
  char dir[300];
  make_dir(dir, sizeof(dir), "fifo");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  slot_t sa, sb;
  slot_init(&sa, a, 8);
  insert_n(a, 1, 40, NULL);
  assert_int_equal(chime__table_sample(a, &sa.lay, &sa.ws, NULL), 0);
  chime__ckpt_result_t res;
  write_ok(a, dir, 3, &res);
  assert_int_equal(res.items, 32);
  assert_int_equal(res.tables, 1);

  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  slot_init(&sb, b, 8);
  uint64_t items = 0;
  char err[512] = "";
  char latest[2048];
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, res.path);
  int rc = chime__checkpoint_restore(&b, 1, latest, &items, err, sizeof(err));
  if (rc != 0)
    fail_msg("restore: %s", err);
  assert_int_equal(items, 32);
  chime__table_stats_t x, y;
  chime__table_get_stats(a, &x);
  chime__table_get_stats(b, &y);
  assert_int_equal(x.size, y.size);
  assert_int_equal(x.inserts, y.inserts);
  assert_int_equal(x.samples, y.samples);
  assert_int_equal(x.left, y.left);
  /* The next key goes on where it was: insert into both, then drain. */
  insert_n(a, 41, 8, NULL);
  insert_n(b, 41, 8, NULL);
  for (int k = 0; k < 5; k++) {
    memset(sa.mem, 0, sa.lay.slot_bytes);
    memset(sb.mem, 0, sb.lay.slot_bytes);
    assert_int_equal(chime__table_sample(a, &sa.lay, &sa.ws, NULL), 0);
    assert_int_equal(chime__table_sample(b, &sb.lay, &sb.ws, NULL), 0);
    if (k == 4) /* the items inserted after the restore: at other times */
      for (int j = 0; j < 8; j++)
        sa.ws.info[j].insert_time_ns = sb.ws.info[j].insert_time_ns = 0;
    assert_memory_equal(sa.mem, sb.mem, sa.lay.slot_bytes);
  }
  free(sa.mem);
  free(sb.mem);
  chime__table_destroy(a);
  chime__table_destroy(b);
}

/* Prioritized: every item's key, insert time, priority and times sampled
 * come back, in insert order. */
static void test_prioritized_bookkeeping(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  make_dir(dir, sizeof(dir), "prio");
  chime__table_t *a =
      new_table("a:u32[2], b:u8[]", 100, CHIME__SAMPLER_PRIORITIZED);
  double prio[50];
  for (int i = 0; i < 50; i++)
    prio[i] = 0.5 + i;
  insert_n(a, 1, 50, prio);
  slot_t s;
  slot_init(&s, a, 16);
  for (int k = 0; k < 4; k++)
    assert_int_equal(chime__table_sample(a, &s.lay, &s.ws, NULL), 0);
  chime__ckpt_result_t res;
  write_ok(a, dir, 3, &res);
  chime__table_t *b =
      new_table("a:u32[2], b:u8[]", 100, CHIME__SAMPLER_PRIORITIZED);
  uint64_t items;
  int rc = chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
  if (rc != 0)
    fail_msg("restore: %s", err);
  chime__table_view_t va, vb;
  assert_int_equal(chime__table_view(a, &va), 0);
  assert_int_equal(chime__table_view(b, &vb), 0);
  assert_int_equal(va.count, 50);
  assert_int_equal(vb.count, 50);
  assert_int_equal(va.next_key, vb.next_key);
  assert_int_equal(va.samples, vb.samples);
  assert_int_equal(va.rng, vb.rng);
  uint64_t sampled = 0;
  for (uint64_t i = 0; i < 50; i++) {
    assert_int_equal(va.key[i], vb.key[i]);
    assert_int_equal(va.itime[i], vb.itime[i]);
    assert_true(va.prio[i] == vb.prio[i]);
    assert_int_equal(va.times[i], vb.times[i]);
    sampled += va.times[i];
    for (uint32_t l = 0; l < 2; l++)
      assert_memory_equal(chime__table_view_leaf(a, &va, i, l),
                          chime__table_view_leaf(b, &vb, i, l), l ? 1 : 8);
  }
  assert_int_equal(sampled, 64); /* times_sampled is not all zero */
  chime__table_view_release(a, &va);
  chime__table_view_release(b, &vb);
  free(s.mem);
  chime__table_destroy(a);
  chime__table_destroy(b);
}

typedef struct {
  chime__table_t *t;
  atomic_int stop;
  _Atomic uint64_t inserted;
} ins_arg_t;

static void *inserter(void *p) {
  ins_arg_t *a = p;
  while (!atomic_load(&a->stop)) {
    insert_n(a->t, atomic_load(&a->inserted) + 1, 16, NULL);
    atomic_fetch_add(&a->inserted, 16);
  }
  return NULL;
}

/* Inserts go on while checkpoints are written: every checkpoint is a
 * consistent prefix (its items are keys next_key - count .. next_key - 1
 * of a uniform table that evicts the oldest) and restores. */
static void test_inserts_continue(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  make_dir(dir, sizeof(dir), "busy");
  ins_arg_t arg = {new_table("a:u32[2], b:u8[]", 4096, CHIME__SAMPLER_UNIFORM),
                   0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, inserter, &arg), 0);
  while (atomic_load(&arg.inserted) == 0)
    sched_yield();
  uint64_t before = atomic_load(&arg.inserted);
  /* At least 10, and until inserts went on while they were written. */
  for (int k = 0; k < 10 || atomic_load(&arg.inserted) == before; k++) {
    chime__ckpt_result_t res;
    write_ok(arg.t, dir, 2, &res);
    chime__table_t *b =
        new_table("a:u32[2], b:u8[]", 4096, CHIME__SAMPLER_UNIFORM);
    uint64_t items;
    int rc =
        chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
    if (rc != 0)
      fail_msg("restore: %s", err);
    chime__table_view_t v;
    assert_int_equal(chime__table_view(b, &v), 0);
    assert_int_equal(v.count, items);
    for (uint64_t i = 0; i < v.count; i++) {
      assert_int_equal(v.key[i], v.next_key - v.count + i);
      const uint8_t *bb = chime__table_view_leaf(b, &v, i, 1);
      assert_int_equal(*bb, (uint8_t)v.key[i]);
    }
    chime__table_view_release(b, &v);
    chime__table_destroy(b);
  }
  atomic_store(&arg.stop, 1);
  pthread_join(th, NULL);
  assert_true(atomic_load(&arg.inserted) > before);
  chime__table_destroy(arg.t);
}

static long file_size(const char *p) {
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  return (long)st.st_size;
}

static void flip(const char *p, long at) {
  int fd = open(p, O_RDWR);
  uint8_t c;
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, &c, 1, at), 1);
  c ^= 0x20;
  assert_int_equal(pwrite(fd, &c, 1, at), 1);
  close(fd);
}

/* A flipped byte anywhere in any file: refused, naming the file. */
static void test_flipped_byte_refused(void **state) {
  (void)state;
  char dir[300], err[512];
  make_dir(dir, sizeof(dir), "flip");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  insert_n(a, 1, 20, NULL);
  chime__ckpt_result_t res;
  write_ok(a, dir, 3, &res);
  const char *files[] = {"table-000.ckpt", "MANIFEST", "DONE"};
  for (size_t f = 0; f < 3; f++) {
    char p[2200];
    snprintf(p, sizeof(p), "%s/%s", res.path, files[f]);
    long n = file_size(p);
    for (long at = 0; at < n; at += (n / 23) + 1) {
      flip(p, at);
      chime__table_t *b =
          new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
      uint64_t items;
      err[0] = '\0';
      int rc =
          chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
      if (rc == 0 || strstr(err, files[f]) == NULL)
        fail_msg("%s byte %ld: rc %d, '%s'", files[f], at, rc, err);
      chime__table_destroy(b);
      flip(p, at); /* back as it was */
    }
  }
  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  uint64_t items;
  assert_int_equal(
      chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err)), 0);
  assert_int_equal(items, 20);
  chime__table_destroy(b);
  chime__table_destroy(a);
}

static void test_spec_mismatch_names_leaf(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  make_dir(dir, sizeof(dir), "spec");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  insert_n(a, 1, 5, NULL);
  chime__ckpt_result_t res;
  write_ok(a, dir, 3, &res);
  const char *specs[] = {"a:u32[3], b:u8[]", "a:u32[2], b:i8[]",
                         "a:u32[2], c:u8[]", "a:u32[2]",
                         "a:u32[2], b:u8[], c:f32[]"};
  const char *names[] = {"'a'", "'b'", "'b'", "'b'", "'c'"};
  for (size_t i = 0; i < 5; i++) {
    chime__table_t *b = new_table(specs[i], 64, CHIME__SAMPLER_FIFO);
    uint64_t items;
    int rc =
        chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
    assert_int_equal(rc, CHIME_EINVAL);
    if (strstr(err, names[i]) == NULL || strstr(err, "leaf") == NULL)
      fail_msg("spec %s: '%s'", specs[i], err);
    chime__table_destroy(b);
  }
  chime__table_destroy(a);
}

static int count_ckpts(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  assert_non_null(d);
  while ((de = readdir(d)) != NULL)
    n += strncmp(de->d_name, "ckpt-", 5) == 0 ||
         strncmp(de->d_name, ".tmp-", 5) == 0;
  closedir(d);
  return n;
}

/* keep prunes; a checkpoint without DONE is never loaded (latest passes
 * over it, restore refuses it) and the next checkpoint removes it. */
static void test_keep_and_done(void **state) {
  (void)state;
  char dir[300], err[512] = "", p[2200], latest[2048];
  make_dir(dir, sizeof(dir), "keep");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  chime__ckpt_result_t res[5];
  for (int k = 0; k < 5; k++) {
    insert_n(a, (uint64_t)k + 1, 1, NULL);
    write_ok(a, dir, 3, &res[k]);
  }
  assert_int_equal(count_ckpts(dir), 3);
  snprintf(p, sizeof(p), "%s/DONE", res[4].path);
  assert_int_equal(unlink(p), 0);
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, res[3].path);
  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SAMPLER_FIFO);
  uint64_t items;
  assert_int_equal(
      chime__checkpoint_restore(&b, 1, res[4].path, &items, err, sizeof(err)),
      CHIME_ENOTFOUND);
  assert_non_null(strstr(err, "DONE"));
  assert_int_equal(
      chime__checkpoint_restore(&b, 1, latest, &items, err, sizeof(err)), 0);
  assert_int_equal(items, 4);
  chime__table_destroy(b);
  /* A leftover temporary directory, as a crash leaves it. */
  snprintf(p, sizeof(p), "%s/.tmp-ckpt-0000000000000099", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  chime__ckpt_result_t r6;
  write_ok(a, dir, 2, &r6);
  assert_int_equal(count_ckpts(dir), 2);
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, r6.path);
  chime__table_destroy(a);
}

/* A sequence table is written as its spec; restore refuses it. */
static void test_sequence_refused(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  make_dir(dir, sizeof(dir), "seq");
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "s");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:f32[2]", NULL, 0), 0);
  tc.capacity_steps = 256;
  tc.sequence_length = 4;
  tc.stride = 1;
  tc.sampler = CHIME__SAMPLER_UNIFORM;
  tc.min_size = 1;
  tc.initial_priority = 1.0;
  chime__table_t *a, *b;
  assert_int_equal(chime__table_create(&a, &tc), 0);
  assert_int_equal(chime__table_create(&b, &tc), 0);
  chime__ckpt_result_t res;
  write_ok(a, dir, 1, &res);
  uint64_t items;
  assert_int_equal(
      chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err)),
      CHIME_ENOTSUP);
  assert_non_null(strstr(err, "sequence"));
  chime__table_destroy(a);
  chime__table_destroy(b);
}

/* A checkpoint that cannot be written fails naming the path (a file where
 * the directory should be). */
static void test_write_failure_named(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  make_dir(dir, sizeof(dir), "not-a-dir");
  FILE *f = fopen(dir, "w");
  assert_non_null(f);
  fclose(f);
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 8, CHIME__SAMPLER_FIFO);
  chime__ckpt_result_t res;
  assert_int_equal(
      chime__checkpoint_write(&a, 1, dir, 1, &res, err, sizeof(err)),
      CHIME_ESYS);
  assert_non_null(strstr(err, dir));
  chime__table_destroy(a);
}

int main(void) {
  snprintf(root, sizeof(root), "/tmp/chime-test-ckpt-%d", (int)getpid());
  mkdir(root, 0755);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c),
      cmocka_unit_test(test_fifo_roundtrip),
      cmocka_unit_test(test_prioritized_bookkeeping),
      cmocka_unit_test(test_inserts_continue),
      cmocka_unit_test(test_flipped_byte_refused),
      cmocka_unit_test(test_spec_mismatch_names_leaf),
      cmocka_unit_test(test_keep_and_done),
      cmocka_unit_test(test_sequence_refused),
      cmocka_unit_test(test_write_failure_named),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rm_rf(root);
  return rc;
}
