/* The checkpoint table file format alone (src/replay/ckpt_format.c), with
 * no checkpoint directory and no server: a table written into a file and
 * loaded back into a fresh one writes the very same bytes again (plain and
 * sequence tables), the file's size, items and CRC-32C are what the writer
 * reports, and damage is refused naming the file; the shard that wrote a
 * file is recorded and a file goes back into that shard's table only;
 * version 1 and 2 files (tests/fuzz/corpus/checkpoint, from before shards)
 * still load, as shard 0's, and version 5 ones as before (no writers'
 * windows: unknown writers refused past their first request); version 6
 * keeps the writers' windows, so a request resent after a restore is in
 * the table once, and a damaged window is refused. test_checkpoint covers
 * the directory protocol
 * and restore through it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/ckpt_format.h"
#include "replay/crc32c.h"
#include "replay/table.h"
#include "seq_steps.h"

typedef struct {
  uint8_t *p;
  size_t n;
  chime__ckpt_file_t f;
} file_t;

/* t's table file, written into a temporary file and read back whole. */
static void write_file(chime__table_t *t, file_t *out) {
  char err[512] = "";
  FILE *tf = tmpfile();
  assert_non_null(tf);
  uint8_t *buf = malloc(CHIME__CKPT_WBUF);
  assert_non_null(buf);
  int rc = chime__checkpoint_write_table(t, fileno(tf), buf, "tmp", &out->f,
                                         err, sizeof(err));
  if (rc != 0)
    fail_msg("write: %s", err);
  free(buf);
  /* The writer wrote through the fd, not the stream. */
  off_t end = lseek(fileno(tf), 0, SEEK_END);
  assert_true(end > 12);
  out->n = (size_t)end;
  out->p = malloc(out->n);
  assert_non_null(out->p);
  assert_int_equal(pread(fileno(tf), out->p, out->n, 0), (ssize_t)out->n);
  fclose(tf);
  assert_memory_equal(out->p, "CHIMECKT", 8);
  assert_int_equal(out->f.bytes, out->n);
  uint32_t stored =
      (uint32_t)out->p[out->n - 4] | (uint32_t)out->p[out->n - 3] << 8 |
      (uint32_t)out->p[out->n - 2] << 16 | (uint32_t)out->p[out->n - 1] << 24;
  assert_int_equal(stored, chime__crc32c(0, out->p, out->n - 4));
  assert_int_equal(out->f.crc, stored);
}

static chime__table_t *plain_table_of(const char *name, uint32_t shard) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "%s", name);
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2], b:u8[]"), 0);
  tc.capacity = 16;
  tc.sampler = CHIME__SELECTOR_PRIORITIZED;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.seed = 7;
  tc.shard = shard;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

static chime__table_t *plain_table(const char *name) {
  return plain_table_of(name, 0);
}

/* Loads f into t (verifying first, as restore does), expecting rc. */
static int load(const file_t *f, chime__table_t *t, uint64_t *items, char *err,
                size_t errlen) {
  int rc = chime__checkpoint_load_table(f->p, f->n, NULL, 0, "table-000.ckpt",
                                        items, err, errlen);
  if (rc != 0)
    return rc;
  return chime__checkpoint_load_table(f->p, f->n, &t, 1, "table-000.ckpt",
                                      items, err, errlen);
}

static void test_plain_roundtrip(void **state) {
  (void)state;
  char err[512] = "";
  chime__table_t *a = plain_table("t"), *b = plain_table("t");
  uint8_t rows[12 * 9];
  double prio[12];
  uint64_t key, items = 0;
  for (int i = 0; i < 12; i++) {
    for (int k = 0; k < 9; k++)
      rows[i * 9 + k] = (uint8_t)(i * 13 + k);
    prio[i] = 0.5 + i;
  }
  assert_int_equal(chime__table_insert(a, rows, 12, prio, &key, NULL, NULL), 0);
  file_t fa, fb;
  write_file(a, &fa);
  assert_int_equal(fa.f.items, 12);
  /* The header (the newest version, then no compressed leaves: a u32 0),
   * 12 records of 28 + 8 (the
   * item's version) + 9 bytes, the CRC. */
  char spec[256];
  assert_int_equal(
      chime_spec_format(&chime__table_config(a)->spec, spec, sizeof(spec)), 0);
  assert_int_equal(fa.n, 8 + 4 + 4 + 4 + (4 + 1) + (4 + strlen(spec)) + 8 * 8 +
                             8 + 4 /* no compressed leaves */ +
                             8 /* no writers */ + 8 /* pace_ahead */ +
                             12 * (28 + 8 + 9) + 4);
  if (load(&fa, b, &items, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  assert_int_equal(items, 12);
  write_file(b, &fb);
  assert_int_equal(fb.n, fa.n);
  assert_memory_equal(fb.p, fa.p, fa.n);
  free(fb.p);

  /* A flipped byte: the CRC-32C refuses it, naming the file. */
  chime__table_t *c = plain_table("t");
  fa.p[fa.n / 2] ^= 0x10;
  assert_int_equal(load(&fa, c, &items, err, sizeof(err)), CHIME_ECORRUPT);
  assert_non_null(strstr(err, "table-000.ckpt"));
  fa.p[fa.n / 2] ^= 0x10;
  /* Cut short, and not a table file at all. */
  assert_int_equal(
      load(&(file_t){fa.p, fa.n - 9, fa.f}, c, &items, err, sizeof(err)),
      CHIME_ECORRUPT);
  assert_int_equal(load(&(file_t){(uint8_t *)"CHIMECKX0000", 12, fa.f}, c,
                        &items, err, sizeof(err)),
                   CHIME_ECORRUPT);
  /* Intact, but for a table the config lacks. */
  chime__table_t *d = plain_table("other");
  assert_int_equal(load(&fa, d, &items, err, sizeof(err)), CHIME_EINVAL);
  assert_non_null(strstr(err, "not in the config"));
  /* Nothing went into c or d. */
  assert_int_equal(load(&fa, c, &items, err, sizeof(err)), 0);
  assert_int_equal(items, 12);
  free(fa.p);
  chime__table_destroy(a);
  chime__table_destroy(b);
  chime__table_destroy(c);
  chime__table_destroy(d);
}

static void test_sequence_roundtrip(void **state) {
  (void)state;
  char err[512] = "";
  chime__table_config_t tc;
  chime__table_t *a, *b, *c;
  seq_table_cfg(&tc, "s", 64, 4, 2, 1, CHIME__SELECTOR_FIFO);
  assert_int_equal(chime__table_create(&a, &tc), 0);
  assert_int_equal(chime__table_create(&b, &tc), 0);
  seq_writer_t w1 = {.id = 1, .tag = 1}, w2 = {.id = 2, .tag = 2};
  /* Two writers' episodes, some ended, enough steps to evict blocks. */
  for (int k = 0; k < 20; k++)
    assert_int_equal(
        seq_append(a, k % 2 ? &w1 : &w2, (uint32_t)(1 + k % 7), k % 5 == 4), 0);
  file_t fa, fb;
  uint64_t items = 0;
  write_file(a, &fa);
  assert_true(fa.f.items > 0);
  if (load(&fa, b, &items, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  assert_int_equal(items, fa.f.items);
  write_file(b, &fb);
  assert_int_equal(fb.n, fa.n);
  assert_memory_equal(fb.p, fa.p, fa.n);
  free(fb.p);
  /* A sequence file into a plain table of the same name is refused. */
  c = plain_table("s");
  assert_int_equal(load(&fa, c, &items, err, sizeof(err)), CHIME_EINVAL);
  assert_non_null(strstr(err, "sequence"));
  free(fa.p);
  chime__table_destroy(a);
  chime__table_destroy(b);
  chime__table_destroy(c);
}

/* The u32 at off in f, little-endian. */
static uint32_t file_u32(const file_t *f, size_t off) {
  return (uint32_t)f->p[off] | (uint32_t)f->p[off + 1] << 8 |
         (uint32_t)f->p[off + 2] << 16 | (uint32_t)f->p[off + 3] << 24;
}

/* Rewrites f's CRC-32C trailer after an edit. */
static void fix_crc(file_t *f) {
  uint32_t c = chime__crc32c(0, f->p, f->n - 4);
  for (int i = 0; i < 4; i++)
    f->p[f->n - 4 + i] = (uint8_t)(c >> (8 * i));
}

/* A table file records its shard (after the version and kind): it goes
 * back into a table of that shard, byte for byte, and into one of any
 * other shard (unsharded included) never, the error naming both; a key
 * of another shard inside a file is damage. */
static void test_shard_recorded(void **state) {
  (void)state;
  char err[512] = "";
  chime__table_t *a = plain_table_of("t", 6), *b = plain_table_of("t", 6);
  uint8_t rows[3 * 9] = {0};
  uint64_t key, items = 0;
  assert_int_equal(chime__table_insert(a, rows, 3, NULL, &key, NULL, NULL), 0);
  assert_true(key == chime__key_make(6, 1));
  file_t fa, fb;
  write_file(a, &fa);
  assert_int_equal(file_u32(&fa, 8), CHIME__CKPT_VERSION);
  assert_int_equal(CHIME__CKPT_VERSION, 7);
  assert_int_equal(file_u32(&fa, 16), 6);
  if (load(&fa, b, &items, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  assert_int_equal(items, 3);
  write_file(b, &fb);
  assert_memory_equal(fb.p, fa.p, fa.n);
  free(fb.p);
  const uint32_t others[] = {0, 7, 65535};
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
    chime__table_t *c = plain_table_of("t", others[i]);
    char want[32];
    assert_int_equal(load(&fa, c, &items, err, sizeof(err)), CHIME_EINVAL);
    snprintf(want, sizeof(want), "shard %u", others[i]);
    if (strstr(err, "shard 6") == NULL || strstr(err, want) == NULL)
      fail_msg("into shard %u: '%s'", others[i], err);
    chime__table_stats_t st;
    chime__table_get_stats(c, &st);
    assert_int_equal(st.size, 0);
    chime__table_destroy(c);
  }
  /* The last record's key (its first 8 bytes) made shard 5's. */
  size_t last = fa.n - 4 - (28 + 8 + 9);
  fa.p[last + 6] = 5;
  fix_crc(&fa);
  chime__table_t *d = plain_table_of("t", 6);
  assert_int_equal(load(&fa, d, &items, err, sizeof(err)), CHIME_ECORRUPT);
  assert_non_null(strstr(err, "table-000.ckpt"));
  free(fa.p);
  chime__table_destroy(a);
  chime__table_destroy(b);
  chime__table_destroy(d);

  /* A sequence table's too: its windows' and steps' keys are shard 2's. */
  chime__table_config_t tc;
  chime__table_t *sa, *sb, *sc;
  seq_table_cfg(&tc, "s", 64, 4, 2, 1, CHIME__SELECTOR_FIFO);
  tc.shard = 2;
  assert_int_equal(chime__table_create(&sa, &tc), 0);
  assert_int_equal(chime__table_create(&sb, &tc), 0);
  tc.shard = 0;
  assert_int_equal(chime__table_create(&sc, &tc), 0);
  seq_writer_t w = {.id = 1, .tag = 1};
  for (int k = 0; k < 6; k++)
    assert_int_equal(seq_append(sa, &w, 5, k % 2), 0);
  write_file(sa, &fa);
  assert_int_equal(file_u32(&fa, 16), 2);
  if (load(&fa, sb, &items, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  assert_true(items > 0);
  assert_int_equal(load(&fa, sc, &items, err, sizeof(err)), CHIME_EINVAL);
  assert_non_null(strstr(err, "shard 2"));
  free(fa.p);
  chime__table_destroy(sa);
  chime__table_destroy(sb);
  chime__table_destroy(sc);
}

/* A table that issued its shard's last key: its next key is the next
 * shard's first, which a file may hold; restored, it still refuses
 * inserts. */
static void test_exhausted_roundtrip(void **state) {
  (void)state;
  char err[512] = "";
  const uint32_t shards[] = {4, 65535};
  for (size_t i = 0; i < 2; i++) {
    chime__table_t *a = plain_table_of("t", shards[i]);
    chime__table_t *b = plain_table_of("t", shards[i]);
    uint8_t row[9] = {0};
    uint64_t key, items = 0;
    chime__table_restore_counts(
        a, chime__key_make(shards[i], CHIME__KEY_MAX_COUNT), 0, 0, 0, 0, 0);
    assert_int_equal(chime__table_insert(a, row, 1, NULL, &key, NULL, NULL), 0);
    assert_int_equal(chime__table_insert(a, row, 1, NULL, &key, NULL, NULL),
                     CHIME_EOVERFLOW);
    file_t fa;
    write_file(a, &fa);
    if (load(&fa, b, &items, err, sizeof(err)) != 0)
      fail_msg("load: %s", err);
    assert_int_equal(items, 1);
    assert_int_equal(chime__table_insert(b, row, 1, NULL, &key, NULL, NULL),
                     CHIME_EOVERFLOW);
    free(fa.p);
    chime__table_destroy(a);
    chime__table_destroy(b);
  }
}

/* One item of writer w's request seq into t: its first key; *resent. */
static uint64_t insert_req(chime__table_t *t, uint64_t w, uint64_t seq,
                           int *resent, int *rc) {
  uint8_t row[9] = {(uint8_t)w, (uint8_t)seq};
  double prio = 1.0;
  uint64_t key = 0;
  chime__dedupe_req_t dq = {.writer = w, .seq = seq};
  *rc = chime__table_insert(t, row, 1, &prio, &key, NULL, &dq);
  *resent = dq.resent;
  return key;
}

static uint64_t size_of(chime__table_t *t) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  return st.size;
}

/* The writers section's offset in a plain_table("t") file. */
static size_t writers_at(chime__table_t *t) {
  char spec[256];
  assert_int_equal(
      chime_spec_format(&chime__table_config(t)->spec, spec, sizeof(spec)), 0);
  /* past the newest version and no compressed leaves (a u32 0) */
  return 8 + 4 + 4 + 4 + (4 + 1) + (4 + strlen(spec)) + 8 * 8 + 8 + 4;
}

/* The writers' windows (version 6) go with the items: after a restore a
 * resent request whose items the file holds is acked with its first key
 * again and not inserted twice (before: inserted again as a new writer's
 * first request, or refused past it); one above the window goes in; a
 * writer the file lacks is a new one when no writer had been forgotten,
 * refused past its first request when one had; a window that does not
 * hang together is refused naming the file. */
static void test_writers_roundtrip(void **state) {
  (void)state;
  char err[512] = "";
  chime__table_t *a = plain_table("t"), *b = plain_table("t");
  uint64_t k[4], items;
  int resent, rc;
  for (uint64_t seq = 1; seq <= 3; seq++) {
    k[seq] = insert_req(a, 0xA, seq, &resent, &rc);
    assert_int_equal(rc, 0);
  }
  file_t fa;
  write_file(a, &fa);
  if (load(&fa, b, &items, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  assert_int_equal(items, 3);
  for (uint64_t seq = 1; seq <= 3; seq++) {
    uint64_t key = insert_req(b, 0xA, seq, &resent, &rc);
    assert_int_equal(rc, 0);
    if (!resent || key != k[seq])
      fail_msg("request %llu resent after the restore: %s with key %llu "
               "(acked with %llu)",
               (unsigned long long)seq, resent ? "acked again" : "inserted",
               (unsigned long long)key, (unsigned long long)k[seq]);
  }
  assert_int_equal(size_of(b), 3);
  assert_int_equal(chime__table_writers_restored(b), 0);
  (void)insert_req(b, 0xA, 4, &resent, &rc);
  assert_int_equal(rc, 0);
  assert_false(resent);
  (void)insert_req(b, 0xC, 5, &resent, &rc); /* nobody was forgotten */
  assert_int_equal(rc, 0);
  assert_int_equal(size_of(b), 5);
  chime__table_destroy(b);

  /* Damage in the section, the CRC made right: refused, naming it. */
  size_t at = writers_at(a);
  assert_int_equal(file_u32(&fa, at), 0);     /* flags */
  assert_int_equal(file_u32(&fa, at + 4), 1); /* one writer */
  static const struct {
    size_t off;
    uint8_t byte;
  } bad[] = {{0, 7},              /* flags unknown */
             {4, 200},            /* more writers than bytes */
             {8, 0},              /* writer 0xA -> 0 */
             {16, 33},            /* 33 requests */
             {20 + 20, 1},        /* request 2's id -> 1, not rising */
             {20 + 8 + 6, 0x7f}}; /* request 1's key: another shard */
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint8_t old = fa.p[at + bad[i].off];
    fa.p[at + bad[i].off] = bad[i].byte;
    fix_crc(&fa);
    chime__table_t *c = plain_table("t");
    assert_int_equal(load(&fa, c, &items, err, sizeof(err)), CHIME_ECORRUPT);
    if (!strstr(err, "table-000.ckpt") || !strstr(err, "writers' windows"))
      fail_msg("damage %zu: '%s'", i, err);
    assert_int_equal(size_of(c), 0);
    chime__table_destroy(c);
    fa.p[at + bad[i].off] = old;
  }
  fix_crc(&fa);
  free(fa.p);
  chime__table_destroy(a);

  /* A table that had forgotten a writer (one place, none kept idle): the
   * restored one refuses unknown writers past their first request. */
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2], b:u8[]"), 0);
  tc.capacity = 16;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.max_writers = 1;
  tc.writer_idle_ms = 0;
  assert_int_equal(chime__table_create(&a, &tc), 0);
  assert_int_equal(chime__table_create(&b, &tc), 0);
  (void)insert_req(a, 0x1, 1, &resent, &rc);
  uint64_t k2 = insert_req(a, 0x2, 1, &resent, &rc); /* 0x1 forgotten */
  assert_int_equal(rc, 0);
  write_file(a, &fa);
  if (load(&fa, b, &items, err, sizeof(err)) != 0)
    fail_msg("load: %s", err);
  assert_int_equal(chime__table_writers_restored(b), 1);
  assert_int_equal(insert_req(b, 0x2, 1, &resent, &rc), k2);
  assert_int_equal(rc, 0);
  assert_true(resent);
  (void)insert_req(b, 0x1, 2, &resent, &rc);
  assert_int_equal(rc, CHIME_EFORGOTTEN);
  assert_int_equal(size_of(b), 2);
  free(fa.p);
  chime__table_destroy(a);
  chime__table_destroy(b);
}

/* tests/fuzz/corpus/checkpoint holds files of versions 1 (plain tables)
 * and 2 (sequence tables), written before shards: each still loads into
 * the fuzz target's table as shard 0's, and into a shard's table never. */
static void test_old_versions_load(void **state) {
  (void)state;
  const char *srcdir = getenv("CHIME_SOURCE_DIR");
  static const struct {
    const char *name;
    uint32_t version;
    uint64_t items;
  } files[] = {{"fifo_empty", 1, 0},       {"fifo_5", 1, 5},
               {"prioritized_16", 1, 16},  {"seq_fifo_empty", 2, 0},
               {"seq_fifo_wrapped", 2, 0}, {"seq_prioritized_wrapped", 2, 0},
               {"fifo_5_v5", 5, 5},        {"seq_fifo_wrapped_v5", 5, 0}};
  if (srcdir == NULL)
    skip();
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    char path[1024], err[512] = "";
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/checkpoint/%s", srcdir,
             files[i].name);
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    uint8_t raw[8192];
    size_t n = fread(raw, 1, sizeof(raw), in);
    fclose(in);
    assert_true(n > 13 && n < sizeof(raw));
    /* fuzz_checkpoint's input: a flags byte (bit 0: fix the CRC; bit 1:
     * prioritized; bit 2: a sequence table), then the file. */
    uint8_t flags = raw[0];
    file_t f = {raw + 1, n - 1, {0}};
    if (flags & 1)
      fix_crc(&f);
    assert_int_equal(file_u32(&f, 8), files[i].version);
    for (uint32_t shard = 0; shard < 2; shard++) {
      chime__table_config_t tc;
      chime__table_t *t;
      memset(&tc, 0, sizeof(tc));
      snprintf(tc.name, sizeof(tc.name), "t");
      assert_int_equal(chime_spec_parse(&tc.spec, "x:u64[], y:u8[4]"), 0);
      tc.capacity = 16;
      if (flags & 4) {
        tc.capacity = 0;
        tc.capacity_steps = 64;
        tc.sequence_length = 4;
        tc.stride = 2;
        tc.episode_pad = 1;
        tc.initial_priority = 1.0;
      }
      tc.sampler =
          (flags & 2) ? CHIME__SELECTOR_PRIORITIZED : CHIME__SELECTOR_FIFO;
      tc.min_size = 1;
      tc.priority_exponent = 1.0;
      tc.seed = 1;
      tc.shard = shard * 9;
      assert_int_equal(chime__table_create(&t, &tc), 0);
      uint64_t items = 0;
      int rc = load(&f, t, &items, err, sizeof(err));
      if (shard == 0) {
        if (rc != 0)
          fail_msg("%s: %s", files[i].name, err);
        if (files[i].items > 0)
          assert_int_equal(items, files[i].items);
        /* No writers in it: unknown ones may have had requests go in. */
        assert_int_equal(chime__table_writers_restored(t), 1);
        if (strncmp(files[i].name, "seq_", 4) == 0 &&
            strstr(files[i].name, "wrapped") != NULL)
          assert_true(items > 0);
      } else {
        assert_int_equal(rc, CHIME_EINVAL);
        if (strstr(err, "shard 0") == NULL || strstr(err, "shard 9") == NULL)
          fail_msg("%s into shard 9: '%s'", files[i].name, err);
      }
      chime__table_destroy(t);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_roundtrip),
      cmocka_unit_test(test_sequence_roundtrip),
      cmocka_unit_test(test_shard_recorded),
      cmocka_unit_test(test_exhausted_roundtrip),
      cmocka_unit_test(test_old_versions_load),
      cmocka_unit_test(test_writers_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
