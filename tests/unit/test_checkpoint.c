/* Checkpoints in process: CRC-32C, a table written and restored (fifo:
 * the same batches byte for byte; prioritized: keys, priorities, times
 * sampled, insert times; the counts), inserts going on while a checkpoint
 * is written, a flipped byte in any file refused naming the file, a spec
 * that differs refused naming the leaf, a checkpoint without DONE never
 * loaded, keep; sequence tables: the same batches after a restore, their
 * windows' bookkeeping, appends going on during a checkpoint, a flipped
 * byte and settings that change the items refused; names past 16 digits
 * and a FIFO in place of a file (refused, never waited on). */
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "server/checkpoint.h"
#include "server/keyres.h"
#include "replay/crc32c.h"
#include "replay/table.h"
#include "seq_steps.h"
#include "table_slot.h"

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
                                 chime__selector_kind_t s) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, spec), 0);
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

/* One batch from each of two tables into their cleared slots. */
static void sample_both(chime__table_t *a, slot_t *sa, chime__table_t *b,
                        slot_t *sb) {
  memset(sa->mem, 0, sa->lay.slot_bytes);
  memset(sb->mem, 0, sb->lay.slot_bytes);
  assert_int_equal(chime__table_sample(a, &sa->lay, &sa->ws, NULL), 0);
  assert_int_equal(chime__table_sample(b, &sb->lay, &sb->ws, NULL), 0);
}

static void finish_both(chime__table_t *a, slot_t *sa, chime__table_t *b,
                        slot_t *sb) {
  free(sa->mem);
  free(sb->mem);
  chime__table_destroy(a);
  chime__table_destroy(b);
}

/* Item i of a view: key, insert time and window (table.h). */
static chime__table_view_item_t
vitem(const chime__table_t *t, const chime__table_view_t *v, uint64_t i) {
  chime__table_view_item_t it;
  chime__table_view_item(t, v, i, &it);
  return it;
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
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  slot_t sa, sb;
  slot_init(&sa, a, 8);
  insert_n(a, 1, 40, NULL);
  assert_int_equal(chime__table_sample(a, &sa.lay, &sa.ws, NULL), 0);
  chime__ckpt_result_t res;
  write_ok(a, dir, 3, &res);
  assert_int_equal(res.items, 32);
  assert_int_equal(res.tables, 1);

  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
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
    sample_both(a, &sa, b, &sb);
    if (k == 4) /* the items inserted after the restore: at other times */
      for (int j = 0; j < 8; j++)
        sa.ws.info[j].insert_time_ns = sb.ws.info[j].insert_time_ns = 0;
    assert_memory_equal(sa.mem, sb.mem, sa.lay.slot_bytes);
  }
  finish_both(a, &sa, b, &sb);
}

/* Prioritized: every item's key, insert time, priority and times sampled
 * come back, in insert order. */
static void test_prioritized_bookkeeping(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  make_dir(dir, sizeof(dir), "prio");
  chime__table_t *a =
      new_table("a:u32[2], b:u8[]", 100, CHIME__SELECTOR_PRIORITIZED);
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
      new_table("a:u32[2], b:u8[]", 100, CHIME__SELECTOR_PRIORITIZED);
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
    assert_int_equal(vitem(a, &va, i).key, vitem(b, &vb, i).key);
    assert_int_equal(vitem(a, &va, i).itime, vitem(b, &vb, i).itime);
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
  ins_arg_t arg = {new_table("a:u32[2], b:u8[]", 4096, CHIME__SELECTOR_UNIFORM),
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
        new_table("a:u32[2], b:u8[]", 4096, CHIME__SELECTOR_UNIFORM);
    uint64_t items;
    int rc =
        chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
    if (rc != 0)
      fail_msg("restore: %s", err);
    chime__table_view_t v;
    assert_int_equal(chime__table_view(b, &v), 0);
    assert_int_equal(v.count, items);
    for (uint64_t i = 0; i < v.count; i++) {
      assert_int_equal(vitem(b, &v, i).key, v.next_key - v.count + i);
      const uint8_t *bb = chime__table_view_leaf(b, &v, i, 1);
      assert_int_equal(*bb, (uint8_t)vitem(b, &v, i).key);
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
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
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
          new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
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
  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
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
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  insert_n(a, 1, 5, NULL);
  chime__ckpt_result_t res;
  write_ok(a, dir, 3, &res);
  const char *specs[] = {"a:u32[3], b:u8[]", "a:u32[2], b:i8[]",
                         "a:u32[2], c:u8[]", "a:u32[2]",
                         "a:u32[2], b:u8[], c:f32[]"};
  const char *names[] = {"'a'", "'b'", "'b'", "'b'", "'c'"};
  for (size_t i = 0; i < 5; i++) {
    chime__table_t *b = new_table(specs[i], 64, CHIME__SELECTOR_FIFO);
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
/* Key reservation files (server/keyres.h): none reads 0; a write only
 * raises the bound; a file of anything else is refused naming it; a table
 * with a reservation hook calls it before issuing keys past the bound,
 * about CHIME__KEY_RESERVE_AHEAD ahead, and a failing hook refuses the
 * insert with nothing of it in; chime__table_keys_from only raises. */
static int hook_calls, hook_rc;
static uint64_t hook_upto;
static int hook(void *ctx, const chime__table_t *t, uint64_t upto) {
  (void)ctx;
  (void)t;
  hook_calls++;
  hook_upto = upto;
  return hook_rc;
}

static void test_key_reservations(void **state) {
  (void)state;
  char dir[300], err[512] = "", p[400];
  uint64_t n = 9;
  make_dir(dir, sizeof(dir), "keyres");
  assert_int_equal(chime__keyres_read(dir, "t", &n, err, sizeof(err)), 0);
  assert_int_equal(n, 0);
  assert_int_equal(chime__keyres_write(dir, "t", 100, err, sizeof(err)), 0);
  assert_int_equal(chime__keyres_write(dir, "t", 50, err, sizeof(err)), 0);
  assert_int_equal(chime__keyres_read(dir, "t", &n, err, sizeof(err)), 0);
  assert_int_equal(n, 100);
  snprintf(p, sizeof(p), "%s/keys-bad", dir);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs("chime-keys 1 12x\n", f);
  fclose(f);
  assert_int_equal(chime__keyres_read(dir, "bad", &n, err, sizeof(err)),
                   CHIME_ECORRUPT);
  assert_non_null(strstr(err, "keys-bad: not a key reservation file"));

  chime__table_t *t = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  chime__table_set_key_reserve(t, hook, NULL, 1);
  hook_calls = 0;
  hook_rc = 0;
  insert_n(t, 1, 3, NULL); /* keys 1..3: past 1, reserved ahead */
  assert_int_equal(hook_calls, 1);
  assert_int_equal(hook_upto, 4 + CHIME__KEY_RESERVE_AHEAD);
  insert_n(t, 4, 3, NULL);
  assert_int_equal(hook_calls, 1);
  chime__table_keys_from(t, 5); /* lower: no change */
  assert_int_equal(chime__table_key_pos(t), 7);
  chime__table_keys_from(t, hook_upto); /* a restore past the bound */
  hook_rc = CHIME_ESYS;
  uint64_t k;
  uint8_t x[SB] = {0};
  assert_int_equal(chime__table_insert(t, x, 1, NULL, &k, NULL, NULL),
                   CHIME_ESYS);
  assert_int_equal(hook_calls, 2);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  assert_int_equal(st.inserts, 6);
  chime__table_destroy(t);
}

static void test_keep_and_done(void **state) {
  (void)state;
  char dir[300], err[512] = "", p[2200], latest[2048];
  make_dir(dir, sizeof(dir), "keep");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
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
  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
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

/* Spare rows (taken while stream-mode batches pin rows) are given back
 * by trim once free, and taken again later with their bytes intact; a
 * trim while spare rows hold items leaves those alone. */
static void check_items(chime__table_t *t, uint64_t first, uint64_t n) {
  chime__table_view_t v;
  assert_int_equal(chime__table_view(t, &v), 0);
  assert_int_equal(v.count, n);
  for (uint64_t i = 0; i < n; i++) {
    uint32_t a[2];
    assert_int_equal(vitem(t, &v, i).key, first + i);
    memcpy(a, chime__table_view_leaf(t, &v, i, 0), 8);
    assert_int_equal(a[0], (uint32_t)(first + i) * 10);
    assert_int_equal(a[1], (uint32_t)(first + i) * 10 + 1);
    assert_int_equal(*chime__table_view_leaf(t, &v, i, 1),
                     (uint8_t)(first + i));
  }
  chime__table_view_release(t, &v);
}

static void no_wake(chime__table_waiter_t *w) {
  (void)w;
}

/* Rows pinned by stream-mode batches (as a stream's sender holds them)
 * while every item is evicted: the new items take spare rows. */
static void take_spares(chime__table_t *t, uint64_t *next) {
  slot_t s;
  chime__table_pins_t pins[32];
  static uint32_t rows[32][64];
  chime__table_waiter_t w = {.fn = no_wake};
  slot_init(&s, t, 64);
  for (int k = 0; k < 32; k++) {
    pins[k].rows = rows[k];
    pins[k].times = NULL;
    pins[k].n = 0;
    pins[k].given_back = 0;
    assert_int_equal(chime__table_try_sample_pinned(t, &s.lay, &s.ws, &pins[k],
                                                    UINT64_MAX, &w),
                     0);
  }
  for (int k = 0; k < 32; k++, *next += 64)
    insert_n(t, *next, 64, NULL);
  chime__table_trim_spares(t); /* spares in use: nothing to give back */
  check_items(t, *next - 2048, 2048);
  for (int k = 0; k < 32; k++)
    chime__table_unpin(t, &pins[k]);
  free(s.mem);
}

static void test_trim_spares(void **state) {
  (void)state;
  /* 2048 items of 9 bytes: the spare rows span whole pages. */
  chime__table_t *t =
      new_table("a:u32[2], b:u8[]", 2048, CHIME__SELECTOR_UNIFORM);
  uint64_t next = 1;
  for (int k = 0; k < 32; k++, next += 64)
    insert_n(t, next, 64, NULL);
  for (int round = 0; round < 3; round++) {
    take_spares(t, &next);
    /* The items in spare rows leave; rows under the capacity take the
     * new ones; then the spare rows are all free. */
    for (int k = 0; k < 32; k++, next += 64)
      insert_n(t, next, 64, NULL);
    chime__table_trim_spares(t);
    check_items(t, next - 2048, 2048);
  }
  chime__table_destroy(t);
}

/* --- sequence tables --- */

static void seq_cfg(chime__table_config_t *tc, uint64_t steps, uint32_t t,
                    uint32_t stride, int pad, chime__selector_kind_t s) {
  seq_table_cfg(tc, "s", steps, t, stride, pad, s);
  tc->priority_exponent = 1.0;
  tc->seed = 11;
}

static chime__table_t *seq_table(const chime__table_config_t *tc) {
  chime__table_t *t;
  assert_int_equal(chime__table_create(&t, tc), 0);
  return t;
}

/* Window j of a batch holds its episode's steps first_step.. in order. */
static void seq_check_window(const slot_t *s, uint32_t tl, uint32_t j) {
  const chime_sample_info_t *in = &s->ws.info[j];
  const uint32_t *id = (const uint32_t *)s->ws.leaf[0] + (size_t)j * tl * 2;
  const uint8_t *x = (const uint8_t *)s->ws.leaf[1] + (size_t)j * tl * 3;
  assert_true(in->length >= 1 && in->length <= tl);
  for (uint32_t i = 0; i < in->length; i++) {
    assert_int_equal(id[2 * i], id[0]);
    assert_int_equal(id[2 * i + 1], in->first_step + i);
    assert_int_equal(x[3 * i],
                     (uint8_t)(id[0] * 31 + (in->first_step + i) * 7));
  }
}

static void restore_ok(chime__table_t *t, const char *path, uint64_t *items) {
  char err[512] = "";
  int rc = chime__checkpoint_restore(&t, 1, path, items, err, sizeof(err));
  if (rc != 0)
    fail_msg("restore: %s", err);
}

/* Three writers interleaved over a store turned over several times (so
 * blocks wrap round the ring and episodes span blocks), episodes ended
 * padded and one left open, batches sampled out: the restored table has
 * the same windows, steps and counts, hands out the same batches byte for
 * byte, and goes on with the same keys and episode ids. The open
 * episode's complete windows come back; its tail makes none. */
static void fill_seq(chime__table_t *t, seq_writer_t *w) {
  for (int round = 0; round < 60; round++) {
    for (int k = 0; k < 3; k++) {
      uint32_t n = (uint32_t)(1 + (round * 7 + k * 5) % 13);
      assert_int_equal(seq_append(t, &w[k], n, (round + k) % 4 == 3 && k != 2),
                       0);
    }
  }
}

static void test_sequence_roundtrip(void **state) {
  (void)state;
  char dir[300];
  make_dir(dir, sizeof(dir), "seq");
  chime__table_config_t tc;
  seq_cfg(&tc, 256, 4, 2, 1, CHIME__SELECTOR_FIFO);
  chime__table_t *a = seq_table(&tc), *b = seq_table(&tc);
  seq_writer_t w[3] = {{1, 0, 1, 0}, {2, 0, 2, 0}, {3, 0, 3, 0}};
  fill_seq(a, w);
  slot_t sa, sb;
  slot_init(&sa, a, 4);
  slot_init(&sb, b, 4);
  for (int k = 0; k < 3; k++)
    assert_int_equal(chime__table_sample(a, &sa.lay, &sa.ws, NULL), 0);
  chime__ckpt_result_t res;
  write_ok(a, dir, 2, &res);
  uint64_t items = 0;
  restore_ok(b, res.path, &items);
  chime__table_stats_t x, y;
  chime__table_get_stats(a, &x);
  chime__table_get_stats(b, &y);
  assert_true(x.size > 20);
  assert_int_equal(items, x.size);
  assert_int_equal(x.size, y.size);
  assert_int_equal(x.inserts, y.inserts);
  assert_int_equal(x.samples, y.samples);
  assert_int_equal(x.left, y.left);
  assert_int_equal(x.left_times_sampled, y.left_times_sampled);
  assert_int_equal(x.steps, y.steps);
  assert_int_equal(x.steps_inserted, y.steps_inserted);
  assert_int_equal(y.episodes_open, 0); /* the open episode is over */
  assert_true(x.episodes_open > 0);
  /* Drain both: the same batches. */
  while (x.size >= 4) {
    sample_both(a, &sa, b, &sb);
    assert_memory_equal(sa.mem, sb.mem, sa.lay.slot_bytes);
    for (uint32_t j = 0; j < 4; j++)
      seq_check_window(&sb, 4, j);
    chime__table_get_stats(a, &x);
  }
  /* New writers go on with the same keys and episode ids. */
  seq_writer_t na = {9, 0, 9000, 0}, nb = na;
  assert_int_equal(seq_append(a, &na, 12, 1), 0);
  assert_int_equal(seq_append(b, &nb, 12, 1), 0);
  sample_both(a, &sa, b, &sb);
  for (int j = 0; j < 4; j++) {
    if (sa.ws.info[j].episode_id == sb.ws.info[j].episode_id &&
        sa.ws.info[j].key == sb.ws.info[j].key)
      sa.ws.info[j].insert_time_ns = sb.ws.info[j].insert_time_ns = 0;
  }
  assert_memory_equal(sa.mem, sb.mem, sa.lay.slot_bytes);
  finish_both(a, &sa, b, &sb);
}

/* A table of tc filled by three writers (fill_seq), checkpointed into
 * dir (300 bytes: ROOT/name). */
static chime__table_t *seq_checkpointed(const chime__table_config_t *tc,
                                        const char *name, char *dir,
                                        chime__ckpt_result_t *res) {
  make_dir(dir, 300, name);
  chime__table_t *a = seq_table(tc);
  seq_writer_t w[3] = {{1, 0, 1, 0}, {2, 0, 2, 0}, {3, 0, 3, 0}};
  fill_seq(a, w);
  write_ok(a, dir, 2, res);
  return a;
}

/* A checkpoint restored into a sequence table in files (data_dir, fresh):
 * its step store and windows go into the file, and a table opened again
 * on it hands out the same batches as the table checkpointed. */
static void sequence_into_files(const char *name, int level) {
  char dir[300];
  chime__table_config_t tc, tf;
  chime__ckpt_result_t res;
  seq_cfg(&tc, 256, 4, 2, 1, CHIME__SELECTOR_FIFO);
  tc.compress[1] = (uint8_t)level; /* x: its steps in the bytes file */
  chime__table_t *a = seq_checkpointed(&tc, name, dir, &res);
  tf = tc;
  snprintf(tf.data_dir, sizeof(tf.data_dir), "%s/data", dir);
  chime__table_t *b = seq_table(&tf);
  uint64_t items = 0;
  restore_ok(b, res.path, &items);
  chime__table_destroy(b);
  b = seq_table(&tf); /* opened again from its file */
  chime__table_stats_t x, y;
  chime__table_get_stats(a, &x);
  chime__table_get_stats(b, &y);
  assert_true(x.size > 20);
  assert_int_equal(y.size, x.size);
  assert_int_equal(y.steps, x.steps);
  slot_t sa, sb;
  slot_init(&sa, a, 4);
  slot_init(&sb, b, 4);
  while (x.size >= 4) {
    sample_both(a, &sa, b, &sb);
    assert_memory_equal(sa.mem, sb.mem, sa.lay.slot_bytes);
    chime__table_get_stats(a, &x);
  }
  finish_both(a, &sa, b, &sb);
  rm_rf(dir);
}

static void test_sequence_into_files(void **state) {
  (void)state;
  sequence_into_files("seqfile", 0);
  sequence_into_files("seqfile-z", 3);
}

/* A sequence table that holds steps but no window (an episode shorter than
 * T, open) takes no checkpoint: the error says what it holds and that a
 * restore needs an empty table, and the table is left as it was. */
static void test_sequence_into_steps_refused(void **state) {
  (void)state;
  char dir[300], err[512] = "";
  chime__table_config_t tc;
  chime__ckpt_result_t res;
  seq_cfg(&tc, 256, 4, 2, 1, CHIME__SELECTOR_FIFO);
  chime__table_t *a = seq_checkpointed(&tc, "seqsteps", dir, &res);
  chime__table_t *b = seq_table(&tc);
  seq_writer_t w = {7, 0, 7, 0};
  assert_int_equal(seq_append(b, &w, 2, 0), 0);
  uint64_t items = 0;
  assert_int_equal(
      chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err)),
      CHIME_EEXIST);
  if (strstr(err, "already holds 2 steps") == NULL ||
      strstr(err, "restores into an empty table") == NULL)
    fail_msg("the error does not say why: %s", err);
  chime__table_stats_t y;
  chime__table_get_stats(b, &y);
  assert_int_equal(y.size, 0);
  assert_int_equal(y.steps, 2);
  chime__table_destroy(a);
  chime__table_destroy(b);
  rm_rf(dir);
}

/* Prioritized, priorities mutated, "max" initial priority: every window's
 * bookkeeping comes back in insert order, and two tables restored from one
 * checkpoint hand out the same batches (the random state is saved). */
static void test_sequence_prioritized(void **state) {
  (void)state;
  char dir[300];
  make_dir(dir, sizeof(dir), "seqprio");
  chime__table_config_t tc;
  seq_cfg(&tc, 512, 5, 1, 0, CHIME__SELECTOR_PRIORITIZED);
  tc.initial_priority_max = 1;
  chime__table_t *a = seq_table(&tc);
  seq_writer_t w[3] = {{1, 0, 1, 0}, {2, 0, 2, 0}, {3, 0, 3, 0}};
  fill_seq(a, w);
  slot_t s;
  slot_init(&s, a, 8);
  for (int k = 0; k < 5; k++)
    assert_int_equal(chime__table_sample(a, &s.lay, &s.ws, NULL), 0);
  uint64_t keys[2] = {s.ws.info[0].key, s.ws.info[1].key};
  double prios[2] = {7.5, 0.25};
  chime__table_mutated_t mo;
  assert_int_equal(chime__table_mutate(a, keys, prios, 2, NULL, 0, &mo), 0);
  chime__ckpt_result_t res;
  write_ok(a, dir, 2, &res);
  chime__table_t *b1 = seq_table(&tc), *b2 = seq_table(&tc);
  uint64_t items;
  restore_ok(b1, res.path, &items);
  restore_ok(b2, res.path, &items);
  chime__table_view_t va, vb;
  assert_int_equal(chime__table_view(a, &va), 0);
  assert_int_equal(chime__table_view(b1, &vb), 0);
  assert_int_equal(va.count, vb.count);
  assert_int_equal(va.count, items);
  assert_int_equal(va.next_key, vb.next_key);
  assert_int_equal(va.rng, vb.rng);
  assert_int_equal(va.step_key, vb.step_key);
  assert_true(va.max_prio == vb.max_prio && vb.max_prio == 7.5);
  for (uint64_t i = 0; i < va.count; i++) {
    chime__table_view_item_t x = vitem(a, &va, i), y = vitem(b1, &vb, i);
    assert_int_equal(x.key, y.key);
    assert_int_equal(x.itime, y.itime);
    assert_true(va.prio[i] == vb.prio[i]);
    assert_int_equal(va.times[i], vb.times[i]);
    assert_int_equal(x.episode, y.episode);
    assert_int_equal(x.first, y.first);
    assert_int_equal(x.len, y.len);
  }
  chime__table_view_release(a, &va);
  chime__table_view_release(b1, &vb);
  slot_t s1, s2;
  slot_init(&s1, b1, 8);
  slot_init(&s2, b2, 8);
  for (int k = 0; k < 20; k++) {
    assert_int_equal(chime__table_sample(b1, &s1.lay, &s1.ws, NULL), 0);
    assert_int_equal(chime__table_sample(b2, &s2.lay, &s2.ws, NULL), 0);
    assert_memory_equal(s1.mem, s2.mem, s1.lay.slot_bytes);
    for (uint32_t j = 0; j < 8; j++)
      seq_check_window(&s1, 5, j);
  }
  free(s.mem);
  free(s1.mem);
  free(s2.mem);
  chime__table_destroy(a);
  chime__table_destroy(b1);
  chime__table_destroy(b2);
}

/* A flipped byte anywhere in a sequence table's file is refused naming
 * it; settings that change the items are refused naming them. */
static void test_sequence_refusals(void **state) {
  (void)state;
  char dir[300], err[512], p[2200];
  chime__table_config_t tc, bad;
  chime__ckpt_result_t res;
  /* Blocks of 256 steps (fewer in stores of under 16 blocks). */
  seq_cfg(&tc, 4096, 4, 2, 1, CHIME__SELECTOR_UNIFORM);
  chime__table_t *a = seq_checkpointed(&tc, "seqbad", dir, &res);
  snprintf(p, sizeof(p), "%s/table-000.ckpt", res.path);
  long n = file_size(p);
  for (long at = 0; at < n; at += (n / 41) + 1) {
    flip(p, at);
    chime__table_t *b = seq_table(&tc);
    uint64_t items;
    err[0] = '\0';
    int rc =
        chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
    if (rc == 0 || strstr(err, "table-000.ckpt") == NULL)
      fail_msg("byte %ld: rc %d, '%s'", at, rc, err);
    chime__table_destroy(b);
    flip(p, at);
  }
  struct {
    const char *what;
    int rc;
  } cases[] = {{"sequence_length", CHIME_EINVAL},
               {"episode_end", CHIME_EINVAL},
               {"capacity_steps", CHIME_EINVAL},
               {"leaf 'x'", CHIME_EINVAL},
               {"plain", CHIME_EINVAL}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    bad = tc;
    if (c == 0)
      bad.sequence_length = 5;
    else if (c == 1)
      bad.episode_pad = 0;
    else if (c == 2)
      bad.capacity_steps = 64;
    else if (c == 3)
      assert_int_equal(chime_spec_parse(&bad.spec, "id:u32[2], x:u8[4]"), 0);
    chime__table_t *b;
    if (c == 4) {
      bad.capacity_steps = bad.sequence_length = bad.stride = 0;
      bad.capacity = 64;
    }
    assert_int_equal(chime__table_create(&b, &bad), 0);
    uint64_t items;
    err[0] = '\0';
    int rc =
        chime__checkpoint_restore(&b, 1, res.path, &items, err, sizeof(err));
    if (rc != cases[c].rc || strstr(err, cases[c].what) == NULL)
      fail_msg("case %s: rc %d, '%s'", cases[c].what, rc, err);
    chime__table_destroy(b);
  }
  /* A larger store with blocks of the same size takes the steps. */
  bad = tc;
  bad.capacity_steps = 8192;
  chime__table_t *b = seq_table(&bad);
  uint64_t items;
  restore_ok(b, res.path, &items);
  chime__table_stats_t x, y;
  chime__table_get_stats(a, &x);
  chime__table_get_stats(b, &y);
  assert_int_equal(x.size, y.size);
  assert_int_equal(x.steps, y.steps);
  chime__table_destroy(b);
  chime__table_destroy(a);
}

typedef struct {
  chime__table_t *t;
  atomic_int stop;
  _Atomic uint64_t appended;
} seq_ins_t;

static void *seq_inserter(void *p) {
  seq_ins_t *a = p;
  seq_writer_t w[2] = {{1, 0, 1, 0}, {2, 0, 2, 0}};
  for (uint32_t k = 0; !atomic_load(&a->stop); k++) {
    uint32_t n = 1 + k % 29;
    assert_int_equal(seq_append(a->t, &w[k % 2], n, k % 7 == 6), 0);
    atomic_fetch_add(&a->appended, n);
  }
  return NULL;
}

/* Steps go on being appended (the store turning over, so appends want
 * the blocks the checkpoint holds) while checkpoints are written: each
 * restores, its windows whole and consistent, and appends went on. */
static void test_sequence_inserts_continue(void **state) {
  (void)state;
  char dir[300];
  make_dir(dir, sizeof(dir), "seqbusy");
  chime__table_config_t tc;
  seq_cfg(&tc, 4096, 8, 4, 1, CHIME__SELECTOR_UNIFORM);
  seq_ins_t arg = {seq_table(&tc), 0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, seq_inserter, &arg), 0);
  while (atomic_load(&arg.appended) < 3 * 4096)
    sched_yield();
  uint64_t before = atomic_load(&arg.appended);
  for (int k = 0; k < 8 || atomic_load(&arg.appended) == before; k++) {
    chime__ckpt_result_t res;
    write_ok(arg.t, dir, 2, &res);
    chime__table_t *b = seq_table(&tc);
    uint64_t items;
    restore_ok(b, res.path, &items);
    assert_true(items > 0);
    slot_t s;
    slot_init(&s, b, 16);
    for (int j = 0; j < 4; j++) {
      assert_int_equal(chime__table_sample(b, &s.lay, &s.ws, NULL), 0);
      for (uint32_t i = 0; i < 16; i++)
        seq_check_window(&s, 8, i);
    }
    free(s.mem);
    chime__table_destroy(b);
  }
  atomic_store(&arg.stop, 1);
  pthread_join(th, NULL);
  assert_true(atomic_load(&arg.appended) > before);
  chime__table_destroy(arg.t);
}

/* With CHIME_CKPT_MEASURE=1: a sequence table of 10^6 steps of 64 B
 * (T 80; stride 40, then 1: 25,000 and 10^6 windows) checkpointed alone
 * and with a thread appending steps meanwhile; prints the pause (the lock
 * held for the view), the write, and the longest append call. */
typedef struct {
  chime__table_t *t;
  atomic_int stop;
  _Atomic uint64_t appended, worst_ns;
} meas_t;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void meas_append(chime__table_t *t, uint64_t writer, uint64_t *seq,
                        uint32_t n, int end) {
  static uint8_t buf[64 * 64];
  uint64_t key;
  chime__dedupe_req_t dq = {.writer = writer, .seq = ++*seq};
  dq.end_episode = end;
  assert_int_equal(chime__table_insert(t, buf, n, NULL, &key, NULL, &dq), 0);
}

static void *meas_inserter(void *p) {
  meas_t *m = p;
  uint64_t seq[4] = {0, 0, 0, 0};
  for (uint32_t k = 0; !atomic_load(&m->stop); k++) {
    uint64_t t0 = mono_ns();
    meas_append(m->t, 11 + k % 4, &seq[k % 4], 64, k % 50 == 49);
    uint64_t d = mono_ns() - t0;
    if (d > atomic_load(&m->worst_ns))
      atomic_store(&m->worst_ns, d);
    atomic_fetch_add(&m->appended, 64);
  }
  return NULL;
}

static void test_measure_sequence(void **state) {
  (void)state;
  if (getenv("CHIME_CKPT_MEASURE") == NULL)
    skip();
  char dir[300];
  make_dir(dir, sizeof(dir), "measure");
  uint32_t strides[2] = {40, 1};
  for (int si = 0; si < 2; si++) {
    chime__table_config_t tc;
    memset(&tc, 0, sizeof(tc));
    snprintf(tc.name, sizeof(tc.name), "m");
    assert_int_equal(chime_spec_parse(&tc.spec, "obs:u8[64]"), 0);
    tc.capacity_steps = 1000000;
    tc.sequence_length = 80;
    tc.stride = strides[si];
    tc.sampler = CHIME__SELECTOR_UNIFORM;
    tc.min_size = 1;
    tc.priority_exponent = 1.0;
    tc.initial_priority = 1.0;
    meas_t m = {seq_table(&tc), 0, 0, 0};
    uint64_t seq[4] = {0, 0, 0, 0};
    for (uint32_t k = 0; k < 1200000 / 64; k++)
      meas_append(m.t, 1 + k % 4, &seq[k % 4], 64, k % 50 == 49);
    for (int busy = 0; busy < 2; busy++) {
      pthread_t th;
      if (busy)
        assert_int_equal(pthread_create(&th, NULL, meas_inserter, &m), 0);
      for (int rep = 0; rep < 3; rep++) {
        uint64_t before = atomic_load(&m.appended);
        atomic_store(&m.worst_ns, 0);
        chime__ckpt_result_t res;
        write_ok(m.t, dir, 1, &res);
        fprintf(stderr,
                "stride %u%s: %llu windows, %.1f MB, pause %.3f ms, write "
                "%.3f s, %llu steps appended meanwhile, longest append "
                "%.3f ms\n",
                strides[si], busy ? " (appending)" : "",
                (unsigned long long)res.items, (double)res.bytes / 1e6,
                (double)res.pause_ns / 1e6, (double)res.duration_ns / 1e9,
                (unsigned long long)(atomic_load(&m.appended) - before),
                (double)atomic_load(&m.worst_ns) / 1e6);
      }
      if (busy) {
        atomic_store(&m.stop, 1);
        pthread_join(th, NULL);
        atomic_store(&m.stop, 0);
      }
    }
    chime__table_destroy(m.t);
  }
  rm_rf(dir);
}

/* With CHIME_CKPT_SEEDS=DIR, writes fuzz_checkpoint's seeds of the
 * current version there (tests/fuzz/corpus/checkpoint/ *_v6: sequence
 * tables, plain ones, ragged ones, their writers' windows; the older
 * versions' seeds, named for their version or with no suffix, stay as
 * they were): its flags byte (bit 4: its ragged
 * spec, bit 2: a sequence table, bit 1: prioritized, bit 0: fix the CRC), then
 * the table file of a table as that target makes it. */
static void write_seed(const char *out, const char *name, uint8_t flags,
                       chime__table_t *t) {
  char dir[300], p[2200];
  make_dir(dir, sizeof(dir), name);
  chime__ckpt_result_t res;
  write_ok(t, dir, 1, &res);
  snprintf(p, sizeof(p), "%s/table-000.ckpt", res.path);
  FILE *in = fopen(p, "rb");
  assert_non_null(in);
  snprintf(p, sizeof(p), "%s/%s", out, name);
  FILE *o = fopen(p, "wb");
  assert_non_null(o);
  fputc(flags, o);
  int ch;
  while ((ch = fgetc(in)) != EOF)
    fputc(ch, o);
  fclose(in);
  fclose(o);
}

static void test_fuzz_seeds(void **state) {
  (void)state;
  const char *out = getenv("CHIME_CKPT_SEEDS");
  if (out == NULL)
    skip();
  for (int prio = 0; prio < 2; prio++) {
    for (int fill = 0; fill < 2; fill++) {
      chime__table_config_t tc;
      memset(&tc, 0, sizeof(tc));
      snprintf(tc.name, sizeof(tc.name), "t");
      assert_int_equal(chime_spec_parse(&tc.spec, "x:u64[], y:u8[4]"), 0);
      tc.capacity_steps = 64;
      tc.sequence_length = 4;
      tc.stride = 2;
      tc.episode_pad = 1;
      tc.initial_priority = 1.0;
      tc.min_size = 1;
      tc.priority_exponent = 1.0;
      tc.sampler = prio ? CHIME__SELECTOR_PRIORITIZED : CHIME__SELECTOR_FIFO;
      chime__table_t *t = seq_table(&tc);
      uint8_t step[12 * 16];
      for (int k = 0; fill && k < 12; k++) {
        uint32_t n = (uint32_t)(1 + (k * 5) % 16);
        for (uint32_t i = 0; i < n * 12; i++)
          step[i] = (uint8_t)(k * 16 + i);
        chime__dedupe_req_t dq = {.writer = (uint64_t)(1 + k % 3),
                                  .seq = (uint64_t)(1 + k)};
        dq.end_episode = k % 4 == 1;
        uint64_t key;
        assert_int_equal(chime__table_insert(t, step, n, NULL, &key, NULL, &dq),
                         0);
      }
      char name[64];
      snprintf(name, sizeof(name), "seq_%s_%s_v6",
               prio ? "prioritized" : "fifo", fill ? "wrapped" : "empty");
      write_seed(out, name, (uint8_t)(4 | (prio ? 2 : 0)), t);
      if (fill && !prio) {
        snprintf(name, sizeof(name), "seq_fifo_wrapped_v6_fixcrc");
        write_seed(out, name, 5, t);
      }
      chime__table_destroy(t);
    }
  }
  /* Plain tables of fuzz_checkpoint's spec, and (flag bit 4) of its
   * ragged one, 5 items with versions, lengths 0 to the bound. */
  for (int rag = 0; rag < 2; rag++) {
    for (int prio = 0; prio < 2; prio++) {
      chime__table_t *t = new_table(
          rag ? "x:u64[], t:i32[<=8], l:f32[<=8 ~t]" : "x:u64[], y:u8[4]", 16,
          prio ? CHIME__SELECTOR_PRIORITIZED : CHIME__SELECTOR_FIFO);
      uint8_t buf[5 * (8 + 64)];
      uint32_t lens[10];
      uint64_t ver[5] = {3, 4, 4, 6, 7}, at = 0, key;
      double pr[5] = {1, 2, 0.5, 3, 1};
      for (uint32_t j = 0; j < 5; j++) {
        uint32_t n = rag ? (j * 5) % 9 : 0;
        lens[2 * j] = lens[2 * j + 1] = n;
        uint64_t b = 8 + (rag ? 8 * (uint64_t)n : 4);
        for (uint64_t i = 0; i < b; i++)
          buf[at + i] = (uint8_t)(j * 16 + i);
        at += b;
      }
      chime__span_t sp = {buf, (size_t)at};
      chime__table_versions_t v = {ver, 5};
      assert_int_equal(chime__table_insert_versioned(t, &sp, 1, 5,
                                                     rag ? lens : NULL, pr, &v,
                                                     &key, NULL, NULL, 0),
                       0);
      char name[64];
      snprintf(name, sizeof(name), "%s%s_5_v6", rag ? "ragged_" : "",
               prio ? "prioritized" : "fifo");
      write_seed(out, name, (uint8_t)((rag ? 16 : 0) | (prio ? 2 : 0)), t);
      if (rag && !prio)
        write_seed(out, "ragged_fifo_5_v6_fixcrc", 17, t);
      chime__table_destroy(t);
    }
  }
  /* Writers' windows (version 6): writer 0x11's requests 1..3 and
   * 0x22's 5 and 9, an item each. */
  chime__table_t *t = new_table("x:u64[], y:u8[4]", 16, CHIME__SELECTOR_FIFO);
  for (int j = 0; j < 5; j++) {
    uint8_t row[12] = {(uint8_t)j};
    uint64_t key;
    chime__dedupe_req_t dq = {.writer = j < 3 ? 0x11 : 0x22,
                              .seq = j < 3 ? (uint64_t)(j + 1)
                                           : 5u + 4u * (j - 3)};
    assert_int_equal(chime__table_insert(t, row, 1, NULL, &key, NULL, &dq), 0);
  }
  write_seed(out, "fifo_writers_v6", 0, t);
  write_seed(out, "fifo_writers_v6_fixcrc", 1, t);
  chime__table_destroy(t);
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
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 8, CHIME__SELECTOR_FIFO);
  chime__ckpt_result_t res;
  assert_int_equal(
      chime__checkpoint_write(&a, 1, dir, 1, &res, err, sizeof(err)),
      CHIME_ESYS);
  assert_non_null(strstr(err, dir));
  chime__table_destroy(a);
}

/* The name of a checkpoint dir: its last path component. */
static const char *base_of(const char *path) {
  const char *b = strrchr(path, '/');
  return b != NULL ? b + 1 : path;
}

/* Sequence numbers past 16 digits: after a complete
 * ckpt-9999999999999999 the next checkpoints are ckpt-10000000000000000
 * and ckpt-10000000000000001 (each found as the highest, so none reuses a
 * name), latest is the newest, keep prunes by number, not by name order;
 * at 2^64 - 1 the next checkpoint is refused by name, not wrapped to 0. */
static void test_names_past_16_digits(void **state) {
  (void)state;
  char dir[300], p[2200], q[2200], latest[2048], err[512] = "";
  make_dir(dir, sizeof(dir), "wide");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  chime__ckpt_result_t r0, r1, r2, r3;
  insert_n(a, 1, 1, NULL);
  write_ok(a, dir, 3, &r0);
  snprintf(p, sizeof(p), "%s/ckpt-9999999999999999", dir);
  assert_int_equal(rename(r0.path, p), 0);
  insert_n(a, 2, 1, NULL);
  write_ok(a, dir, 3, &r1);
  assert_string_equal(base_of(r1.path), "ckpt-10000000000000000");
  insert_n(a, 3, 1, NULL);
  write_ok(a, dir, 3, &r2);
  assert_string_equal(base_of(r2.path), "ckpt-10000000000000001");
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, r2.path);
  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  uint64_t items = 0;
  restore_ok(b, latest, &items);
  assert_int_equal(items, 3);
  chime__table_destroy(b);
  /* keep 2: the 16-digit one is the oldest and goes, though its name
   * sorts last. */
  write_ok(a, dir, 2, &r3);
  assert_string_equal(base_of(r3.path), "ckpt-10000000000000002");
  struct stat st;
  assert_int_not_equal(stat(p, &st), 0);
  assert_int_equal(stat(r2.path, &st), 0);
  assert_int_equal(count_ckpts(dir), 2);
  /* Today's 16-digit names and the wider ones side by side: a name with
   * more leading zeros than that is not one of ours and is left alone. */
  snprintf(q, sizeof(q), "%s/ckpt-00000000000000000005", dir);
  assert_int_equal(mkdir(q, 0755), 0);
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, r3.path);
  assert_int_equal(rmdir(q), 0);
  /* The last number. */
  snprintf(q, sizeof(q), "%s/ckpt-18446744073709551615", dir);
  assert_int_equal(rename(r3.path, q), 0);
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, q);
  chime__ckpt_result_t r4;
  assert_int_equal(
      chime__checkpoint_write(&a, 1, dir, 2, &r4, err, sizeof(err)),
      CHIME_EOVERFLOW);
  assert_non_null(strstr(err, "ckpt-18446744073709551615"));
  assert_int_equal(chime__checkpoint_latest(dir, latest, sizeof(latest)), 0);
  assert_string_equal(latest, q);
  chime__table_destroy(a);
}

typedef struct {
  chime__table_t *t;
  const char *path;
  int rc;
  char err[512];
  atomic_int done;
} restore_job_t;

static void *restore_main(void *arg) {
  restore_job_t *j = arg;
  uint64_t items = 0;
  j->rc = chime__checkpoint_restore(&j->t, 1, j->path, &items, j->err,
                                    sizeof(j->err));
  atomic_store(&j->done, 1);
  return NULL;
}

/* Restore with a FIFO in place of `file` (DONE, MANIFEST or a table's):
 * refused at once naming the file, never a wait in open() for a writer
 * that never comes. Without that, the test opens the FIFO's other end
 * after 10 s so that the thread can be joined, and fails. */
static void restore_with_fifo(const char *ckpt, const char *file) {
  char p[2200], saved[2300];
  snprintf(p, sizeof(p), "%s/%s", ckpt, file);
  snprintf(saved, sizeof(saved), "%s.saved", p);
  assert_int_equal(rename(p, saved), 0);
  assert_int_equal(mkfifo(p, 0600), 0);
  restore_job_t j = {.path = ckpt, .rc = 1};
  j.t = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  atomic_init(&j.done, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, restore_main, &j), 0);
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (!atomic_load(&j.done) && now.tv_sec - t0.tv_sec < 10);
  int hung = !atomic_load(&j.done);
  if (hung) {
    int w = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0)
      close(w);
  }
  pthread_join(th, NULL);
  chime__table_destroy(j.t);
  assert_int_equal(unlink(p), 0);
  assert_int_equal(rename(saved, p), 0);
  if (hung)
    fail_msg("restore blocked on a FIFO in place of %s", file);
  assert_int_equal(j.rc, CHIME_ECORRUPT);
  if (strstr(j.err, file) == NULL ||
      strstr(j.err, "not a regular file") == NULL)
    fail_msg("%s: '%s'", file, j.err);
}

static void test_restore_fifo_refused(void **state) {
  (void)state;
  char dir[300];
  make_dir(dir, sizeof(dir), "fifo-files");
  chime__table_t *a = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  insert_n(a, 1, 5, NULL);
  chime__ckpt_result_t res;
  write_ok(a, dir, 1, &res);
  restore_with_fifo(res.path, "table-000.ckpt");
  restore_with_fifo(res.path, "MANIFEST");
  restore_with_fifo(res.path, "DONE");
  chime__table_t *b = new_table("a:u32[2], b:u8[]", 64, CHIME__SELECTOR_FIFO);
  uint64_t items = 0;
  restore_ok(b, res.path, &items); /* the real files are back */
  assert_int_equal(items, 5);
  chime__table_destroy(b);
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
      cmocka_unit_test(test_key_reservations),
      cmocka_unit_test(test_trim_spares),
      cmocka_unit_test(test_sequence_roundtrip),
      cmocka_unit_test(test_sequence_into_files),
      cmocka_unit_test(test_sequence_into_steps_refused),
      cmocka_unit_test(test_sequence_prioritized),
      cmocka_unit_test(test_sequence_refusals),
      cmocka_unit_test(test_sequence_inserts_continue),
      cmocka_unit_test(test_write_failure_named),
      cmocka_unit_test(test_names_past_16_digits),
      cmocka_unit_test(test_restore_fifo_refused),
      cmocka_unit_test(test_fuzz_seeds),
      cmocka_unit_test(test_measure_sequence),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rm_rf(root);
  return rc;
}
