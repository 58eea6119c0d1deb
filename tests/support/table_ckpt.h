/* A table's checkpoint file in memory (src/replay/ckpt_format.c), for the
 * replay tests that write one and load it back or damage it
 * (test_table_ragged, test_table_zstd). Include after cmocka.h. */
#ifndef CHIME_TESTS_TABLE_CKPT_H
#define CHIME_TESTS_TABLE_CKPT_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "replay/ckpt_format.h"
#include "replay/table.h"

/* t's checkpoint table file, read back whole into *p (freed by the
 * caller); its length. */
static inline size_t ckpt_write(chime__table_t *t, uint8_t **p) {
  FILE *f = tmpfile();
  assert_non_null(f);
  uint8_t *buf = malloc(CHIME__CKPT_WBUF);
  assert_non_null(buf);
  chime__ckpt_file_t out;
  char err[256] = "";
  if (chime__checkpoint_write_table(t, fileno(f), buf, "tmp", &out, err,
                                    sizeof(err)) != 0)
    fail_msg("write: %s", err);
  free(buf);
  size_t n = (size_t)out.bytes;
  *p = malloc(n);
  assert_non_null(*p);
  assert_int_equal(pread(fileno(f), *p, n, 0), (ssize_t)n);
  fclose(f);
  return n;
}

/* Verifies, then loads p into t (as restore does): 0 or the code, err
 * naming the file "table-000.ckpt". */
static inline int ckpt_load(chime__table_t *t, const uint8_t *p, size_t n,
                            char *err, size_t errlen) {
  uint64_t items;
  int rc = chime__checkpoint_load_table(p, n, NULL, 0, "table-000.ckpt", &items,
                                        err, errlen);
  if (rc == 0)
    rc = chime__checkpoint_load_table(p, n, &t, 1, "table-000.ckpt", &items,
                                      err, errlen);
  return rc;
}

#endif
