/* The checkpoint table file format alone (src/replay/ckpt_format.c), with
 * no checkpoint directory and no server: a table written into a file and
 * loaded back into a fresh one writes the very same bytes again (plain and
 * sequence tables), the file's size, items and CRC-32C are what the writer
 * reports, and damage is refused naming the file. test_checkpoint covers
 * the directory protocol and restore through it. */
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

static chime__table_t *plain_table(const char *name) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "%s", name);
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2], b:u8[]", NULL, 0), 0);
  tc.capacity = 16;
  tc.sampler = CHIME__SAMPLER_PRIORITIZED;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.seed = 7;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
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
  /* The header, 12 records of 28 + 9 bytes, the CRC. */
  char spec[256];
  assert_int_equal(
      chime_spec_format(&chime__table_config(a)->spec, spec, sizeof(spec)), 0);
  assert_int_equal(fa.n, 8 + 4 + 4 + (4 + 1) + (4 + strlen(spec)) + 8 * 8 +
                             12 * (28 + 9) + 4);
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
  seq_table_cfg(&tc, "s", 64, 4, 2, 1, CHIME__SAMPLER_FIFO);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_roundtrip),
      cmocka_unit_test(test_sequence_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
