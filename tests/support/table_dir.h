/* Tables in files for the in-process tests (test_table_file,
 * test_table_bytes): a fixture of a temporary directory and a table
 * config named "t" whose data dir is DIR/data, the table opened (failing
 * the test with the detail), and a create refused with its detail
 * checked. Include after cmocka.h. */
#ifndef CHIME_TESTS_TABLE_DIR_H
#define CHIME_TESTS_TABLE_DIR_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "chime/errors.h"
#include "replay/table.h"

typedef struct {
  char dir[64];
  chime__table_config_t tc;
} fx_t;

/* The fixture with spec (the rest of tc 0), in *state; 0 or -1. */
static inline int tdir_setup(void **state, const char *spec) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  snprintf(f->dir, sizeof(f->dir), "/tmp/chime-tfile-XXXXXX");
  if (mkdtemp(f->dir) == NULL || chime_spec_parse(&f->tc.spec, spec) != 0) {
    free(f);
    return -1;
  }
  snprintf(f->tc.name, sizeof(f->tc.name), "t");
  snprintf(f->tc.data_dir, sizeof(f->tc.data_dir), "%s/data", f->dir);
  *state = f;
  return 0;
}

static inline int teardown(void **state) {
  fx_t *f = *state;
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "chmod -R u+w %s; rm -rf %s", f->dir, f->dir);
  int rc = system(cmd);
  free(f);
  return rc == 0 ? 0 : -1;
}

static inline chime__table_t *open_table(const chime__table_config_t *tc) {
  chime__table_t *t = NULL;
  int rc = chime__table_create(&t, tc);
  if (rc != 0)
    fail_msg("create: %s: %s", chime_err_name(rc), chime_last_error());
  return t;
}

/* The data dir a 1 MiB tmpfs (a full disk soon): the test skipped where
 * mount is not allowed (not root). umount it at the test's end. */
static inline void mount_small(fx_t *f) {
  assert_int_equal(mkdir(f->tc.data_dir, 0755), 0);
  if (mount("chime-full", f->tc.data_dir, "tmpfs", 0, "size=1m") != 0) {
    fprintf(stderr, "skipped: cannot mount a small tmpfs (%s): not root?\n",
            strerror(errno));
    skip();
  }
}

/* Creating it fails with want, the detail holding needle. */
static inline void refused(const chime__table_config_t *tc, int want,
                           const char *needle) {
  chime__table_t *t = NULL;
  int rc = chime__table_create(&t, tc);
  if (rc != want)
    fail_msg("create: %s (want %s): %s", chime_err_name(rc),
             chime_err_name(want), chime_last_error());
  assert_null(t);
  if (strstr(chime_last_error(), needle) == NULL)
    fail_msg("'%s' lacks '%s'", chime_last_error(), needle);
}

#endif
