/* Checkpoints (checkpoint.h): the directory protocol (ckpt-N names,
 * MANIFEST, DONE, fsyncs, the rename, keep) and restore's checks of the
 * files before any is loaded. Each table file's bytes, both directions,
 * are src/replay/ckpt_format.c's; this file creates, fsyncs and names the
 * files and reads them back whole. */
#include "server/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/clock.h"
#include "common/errfmt.h"
#include "replay/crc32c.h"

#define VERSION CHIME__CKPT_VERSION
#define MIN_VERSION CHIME__CKPT_MIN_VERSION
#define DONE_HEAD "chime checkpoint 1\nmanifest_crc32c "
#define MAX_MANIFEST (16u << 20)
#define WBUF CHIME__CKPT_WBUF

#define fail chime__fail

static int fsync_path(const char *path, int dir) {
  int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int e = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return e;
}

/* Writes (create, whole, fsync, close) a small file. */
static int write_small(const char *path, const void *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return errno;
  int e = 0;
  const uint8_t *s = p;
  size_t off = 0;
  while (off < n) {
    ssize_t k = write(fd, s + off, n - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      e = k < 0 ? errno : EIO;
      break;
    }
    off += (size_t)k;
  }
  if (e == 0 && fsync(fd) != 0)
    e = errno;
  if (close(fd) != 0 && e == 0)
    e = errno;
  return e;
}

typedef struct {
  char file[32];
  char name[CHIME_MAX_NAME];
  uint64_t bytes, items;
  uint32_t crc;
} entry_t;

/* One table's file: created, filled (ckpt_format.c), fsynced, closed. */
static int write_table(chime__table_t *t, const char *path, uint8_t *buf,
                       entry_t *e, uint64_t *pause_ns, char *err,
                       size_t errlen) {
  chime__ckpt_file_t f;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", path,
                strerror(errno));
  int rc = chime__checkpoint_write_table(t, fd, buf, path, &f, err, errlen);
  int se = 0;
  if (rc == 0 && fsync(fd) != 0)
    se = errno;
  if (close(fd) != 0 && se == 0)
    se = errno;
  if (rc != 0)
    return rc;
  if (se != 0)
    return fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", path,
                strerror(se));
  *pause_ns = f.pause_ns;
  e->bytes = f.bytes;
  e->items = f.items;
  e->crc = f.crc;
  snprintf(e->name, sizeof(e->name), "%s", chime__table_config(t)->name);
  return 0;
}

/* N of a DIR/ckpt-N as ckpt_name writes it: at least 16 digits (zero-padded
 * below 10^16, as many as it takes above, up to 2^64 - 1), so that names
 * past 9999999999999999 are read like the rest and every name we may write
 * is recognised. Any other spelling (a sign, more leading zeros) is not
 * ours. */
static int ckpt_seq(const char *name, uint64_t *seq) {
  if (strncmp(name, "ckpt-", 5) != 0)
    return 0;
  const char *d = name + 5;
  size_t n = strspn(d, "0123456789");
  if (n < 16 || n > 20 || d[n] != '\0')
    return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned digit = (unsigned)(d[i] - '0');
    if (v > (UINT64_MAX - digit) / 10)
      return 0;
    v = v * 10 + digit;
  }
  char canon[24];
  snprintf(canon, sizeof(canon), "%016llu", (unsigned long long)v);
  if (strcmp(canon, d) != 0)
    return 0;
  *seq = v;
  return 1;
}

/* DIR/<prefix>N, N as ckpt_seq reads it. */
static void ckpt_name(char *out, size_t len, const char *dir,
                      const char *prefix, uint64_t seq) {
  snprintf(out, len, "%s/%s%016llu", dir, prefix, (unsigned long long)seq);
}

static int has_done(const char *dir, const char *name) {
  char p[CHIME__MAX_PATH + 64];
  struct stat st;
  snprintf(p, sizeof(p), "%s/%s/DONE", dir, name);
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Removes a flat directory of files (a checkpoint's). */
static void remove_dir(const char *path) {
  DIR *d = opendir(path);
  if (d != NULL) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
        continue;
      char p[CHIME__MAX_PATH + 300];
      snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(path);
}

/* The highest N of DIR/ckpt-N (complete or not, 0: none). */
static uint64_t highest_seq(const char *dir) {
  uint64_t hi = 0, s;
  DIR *d = opendir(dir);
  if (d == NULL)
    return 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (ckpt_seq(de->d_name, &s) && s > hi)
      hi = s;
  closedir(d);
  return hi;
}

static int cmp_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Keeps the newest keep complete checkpoints; removes the older ones,
 * every ckpt-N without DONE (a checkpoint cut short) and .tmp-ckpt-*. */
static void prune(const char *dir, uint32_t keep) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  uint64_t *done = NULL, s;
  size_t n = 0, cap = 0;
  struct dirent *de;
  char p[CHIME__MAX_PATH + 300];
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, ".tmp-ckpt-", 10) == 0) {
      snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
      remove_dir(p);
    } else if (ckpt_seq(de->d_name, &s)) {
      if (!has_done(dir, de->d_name)) {
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        remove_dir(p);
        continue;
      }
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 16;
        uint64_t *nd = realloc(done, nc * sizeof(*nd));
        if (nd == NULL)
          break;
        done = nd;
        cap = nc;
      }
      done[n++] = s;
    }
  }
  closedir(d);
  if (done != NULL)
    qsort(done, n, sizeof(*done), cmp_desc);
  for (size_t i = keep; i < n; i++) {
    ckpt_name(p, sizeof(p), dir, "ckpt-", done[i]);
    remove_dir(p);
  }
  free(done);
}

int chime__checkpoint_latest(const char *dir, char *path, size_t len) {
  uint64_t best = 0, s;
  int found = 0;
  DIR *d = opendir(dir);
  if (d == NULL)
    return CHIME_ENOTFOUND;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (ckpt_seq(de->d_name, &s) && (!found || s > best) &&
        has_done(dir, de->d_name)) {
      best = s;
      found = 1;
    }
  }
  closedir(d);
  if (!found)
    return CHIME_ENOTFOUND;
  ckpt_name(path, len, dir, "ckpt-", best);
  return 0;
}

/* dir made if need be, and the next checkpoint's names in it: tmp, where
 * it is written, and fin, what it is renamed to once whole. */
static int next_names(const char *dir, char *tmp, char *fin, size_t len,
                      char *err, size_t errlen) {
  if (strlen(dir) >= CHIME__MAX_PATH)
    return fail(err, errlen, CHIME_EINVAL, "checkpoint dir too long");
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return fail(err, errlen, CHIME_ESYS, "cannot create '%s': %s", dir,
                strerror(errno));
  uint64_t hi = highest_seq(dir);
  if (hi == UINT64_MAX) /* one more would wrap to 0, below every one there */
    return fail(err, errlen, CHIME_EOVERFLOW,
                "checkpoint dir '%s' holds ckpt-%llu, the last number there "
                "is: move the checkpoints elsewhere (renumbered from 1) or "
                "remove them",
                dir, (unsigned long long)hi);
  ckpt_name(tmp, len, dir, ".tmp-ckpt-", hi + 1);
  ckpt_name(fin, len, dir, "ckpt-", hi + 1);
  return 0;
}

/* The manifest's text: each table file's name, bytes, items and CRC. */
static char *manifest_text(const entry_t *ents, uint32_t ntables) {
  json_t *root = json_object(), *arr = json_array();
  json_object_set_new(root, "format", json_string("chime-checkpoint"));
  json_object_set_new(root, "version", json_integer(VERSION));
  json_object_set_new(
      root, "created_unix_ns",
      json_integer((json_int_t)chime__clock_ns(CLOCK_REALTIME)));
  for (uint32_t i = 0; i < ntables; i++) {
    json_t *e = json_object();
    json_object_set_new(e, "name", json_string(ents[i].name));
    json_object_set_new(e, "file", json_string(ents[i].file));
    json_object_set_new(e, "bytes", json_integer((json_int_t)ents[i].bytes));
    json_object_set_new(e, "items", json_integer((json_int_t)ents[i].items));
    json_object_set_new(e, "crc32c", json_integer(ents[i].crc));
    json_array_append_new(arr, e);
  }
  json_object_set_new(root, "tables", arr);
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(root);
  return text;
}

/* The manifest into tmp, tmp renamed to fin, then fin's DONE: written
 * aside and renamed, so a DONE there is whole even after a power cut (one
 * cut between its create and its write could leave an empty DONE, which
 * `latest` would pick and restore would refuse). */
static int seal(const char *dir, const char *tmp, const char *fin,
                const char *manifest, char *err, size_t errlen) {
  char p[CHIME__MAX_PATH + 128], q[CHIME__MAX_PATH + 128], done[128];
  size_t mlen = strlen(manifest);
  snprintf(p, sizeof(p), "%s/MANIFEST", tmp);
  int e = write_small(p, manifest, mlen);
  if (e == 0)
    e = fsync_path(tmp, 1);
  if (e != 0)
    return fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", p,
                strerror(e));
  if (rename(tmp, fin) != 0 || (e = fsync_path(dir, 1)) != 0)
    return fail(err, errlen, CHIME_ESYS, "cannot rename '%s' to '%s': %s", tmp,
                fin, strerror(e ? e : errno));
  int dl = snprintf(done, sizeof(done), DONE_HEAD "%08x\n",
                    chime__crc32c(0, manifest, mlen));
  snprintf(q, sizeof(q), "%s/DONE.tmp", fin);
  snprintf(p, sizeof(p), "%s/DONE", fin);
  e = write_small(q, done, (size_t)dl);
  if (e == 0 && rename(q, p) != 0)
    e = errno;
  if (e == 0)
    e = fsync_path(fin, 1);
  if (e != 0) {
    remove_dir(fin);
    return fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", p,
                strerror(e));
  }
  return 0;
}

int chime__checkpoint_write(chime__table_t *const *tables, uint32_t ntables,
                            const char *dir, uint32_t keep,
                            chime__ckpt_result_t *out, char *err,
                            size_t errlen) {
  uint64_t t0 = chime__clock_ns(CLOCK_MONOTONIC);
  int rc = 0;
  char tmp[CHIME__MAX_PATH + 64] = "", fin[CHIME__MAX_PATH + 64] = "";
  char p[CHIME__MAX_PATH + 128];
  entry_t *ents = calloc(ntables ? ntables : 1, sizeof(*ents));
  /* Mapped, not malloc'd: glibc keeps a freed MiB in the thread's arena
   * (its mmap threshold rises after the first free), this goes back. */
  void *wbuf = mmap(NULL, WBUF, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint8_t *buf = wbuf == MAP_FAILED ? NULL : wbuf;
  char *manifest = NULL;
  memset(out, 0, sizeof(*out));
  if (ents == NULL || buf == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = next_names(dir, tmp, fin, sizeof(tmp), err, errlen)) != 0) {
    tmp[0] = '\0'; /* nothing made to remove */
    goto out;
  }
  remove_dir(tmp); /* a leftover of a write cut short */
  if (mkdir(tmp, 0755) != 0) {
    rc = fail(err, errlen, CHIME_ESYS, "cannot create '%s': %s", tmp,
              strerror(errno));
    goto out;
  }
  for (uint32_t i = 0; i < ntables; i++) {
    uint64_t pause = 0;
    snprintf(ents[i].file, sizeof(ents[i].file), "table-%03u.ckpt", i);
    snprintf(p, sizeof(p), "%s/%s", tmp, ents[i].file);
    rc = write_table(tables[i], p, buf, &ents[i], &pause, err, errlen);
    if (rc != 0)
      goto out;
    if (pause > out->pause_ns)
      out->pause_ns = pause;
    out->items += ents[i].items;
    out->bytes += ents[i].bytes;
  }
  if ((manifest = manifest_text(ents, ntables)) == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = seal(dir, tmp, fin, manifest, err, errlen)) != 0)
    goto out;
  snprintf(out->path, sizeof(out->path), "%s", fin);
  out->tables = ntables;
  prune(dir, keep ? keep : 1);
out:
  if (rc != 0 && tmp[0] != '\0')
    remove_dir(tmp);
  free(manifest);
  if (buf != NULL)
    munmap(buf, WBUF);
  free(ents);
  out->duration_ns = chime__clock_ns(CLOCK_MONOTONIC) - t0;
  return rc;
}

typedef struct {
  char file[32];
  uint64_t bytes;
  uint32_t crc;
  void *map;
  size_t len;
} mfile_t;

/* read_whole's and open_regular's "not a regular file" (errno values are
 * positive). */
#define E_NOT_REGULAR (-1)

static const char *err_text(int e) {
  return e == E_NOT_REGULAR ? "not a regular file" : strerror(e);
}

/* Opens a checkpoint's file for reading, only when it is a regular file:
 * O_NONBLOCK so that a FIFO (or a device) in its place cannot hold restore
 * in open() waiting for a writer, then fstat on what was opened (a check
 * by name before the open could be raced). O_NONBLOCK changes nothing for
 * a regular file's reads or mapping. The fd, or -1 with *e the errno value
 * or E_NOT_REGULAR. */
static int open_regular(const char *path, struct stat *st, int *e) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    *e = errno;
    return -1;
  }
  if (fstat(fd, st) != 0) {
    *e = errno;
    close(fd);
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *e = E_NOT_REGULAR;
    close(fd);
    return -1;
  }
  return fd;
}

/* 0, or an errno value or E_NOT_REGULAR (err_text names it). */
static int read_whole(const char *path, char **out, size_t *len, size_t max) {
  struct stat st;
  int e = 0;
  int fd = open_regular(path, &st, &e);
  if (fd < 0)
    return e;
  if ((uint64_t)st.st_size > max) {
    close(fd);
    return EFBIG;
  }
  char *b = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (b != NULL && got < (size_t)st.st_size) {
    ssize_t k = read(fd, b + got, (size_t)st.st_size - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  close(fd);
  if (b == NULL || got != (size_t)st.st_size) {
    free(b);
    return b == NULL ? ENOMEM : EIO;
  }
  b[got] = '\0';
  *out = b;
  *len = got;
  return 0;
}

/* A file name the manifest may use: table-NNN.ckpt, nothing else. */
static int file_name_ok(const char *s) {
  unsigned u;
  int end = 0;
  return sscanf(s, "table-%3u.ckpt%n", &u, &end) == 1 && end == 14 &&
         s[end] == '\0';
}

/* DONE's CRC-32C of the manifest into *mcrc: the marker exactly as
 * written (DONE_HEAD, 8 lowercase hex digits, a newline). */
static int read_done(const char *path, uint32_t *mcrc, char *err,
                     size_t errlen) {
  char p[CHIME__MAX_PATH + 64], *done = NULL;
  size_t dlen = 0;
  int e;
  snprintf(p, sizeof(p), "%s/DONE", path);
  if ((e = read_whole(p, &done, &dlen, 4096)) != 0)
    return e == ENOENT ? fail(err, errlen, CHIME_ENOTFOUND,
                              "checkpoint '%s' has no DONE marker: it is "
                              "incomplete (or not a checkpoint) and is never "
                              "loaded",
                              path)
                       : fail(err, errlen,
                              e == E_NOT_REGULAR ? CHIME_ECORRUPT : CHIME_ESYS,
                              "cannot read '%s': %s", p, err_text(e));
  *mcrc = 0;
  int hex_ok = dlen == strlen(DONE_HEAD) + 9 &&
               strncmp(done, DONE_HEAD, strlen(DONE_HEAD)) == 0 &&
               done[dlen - 1] == '\n';
  for (size_t k = strlen(DONE_HEAD); hex_ok && k < dlen - 1; k++) {
    char ch = done[k];
    int d = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                     : -1;
    hex_ok = d >= 0;
    *mcrc = *mcrc << 4 | (uint32_t)(d & 15);
  }
  free(done);
  return hex_ok
             ? 0
             : fail(err, errlen, CHIME_ECORRUPT, "%s: corrupt DONE marker", p);
}

/* The manifest's table files (name, bytes, CRC) into *files, checked
 * against DONE's mcrc: *nfiles of them, the caller frees *files. */
static int read_manifest(const char *path, uint32_t mcrc, mfile_t **files,
                         size_t *nfiles, char *err, size_t errlen) {
  char p[CHIME__MAX_PATH + 64], *manifest = NULL;
  size_t mlen = 0, i;
  json_t *root = NULL, *ent;
  int e, rc = 0;
  snprintf(p, sizeof(p), "%s/MANIFEST", path);
  if ((e = read_whole(p, &manifest, &mlen, MAX_MANIFEST)) != 0)
    return fail(err, errlen,
                e == ENOENT || e == E_NOT_REGULAR ? CHIME_ECORRUPT : CHIME_ESYS,
                "cannot read '%s': %s", p, err_text(e));
  uint32_t crc = chime__crc32c(0, manifest, mlen);
  if (crc != mcrc) {
    rc = fail(err, errlen, CHIME_ECORRUPT,
              "%s: corrupt (CRC-32C %08x, DONE says %08x)", p, crc, mcrc);
    goto out;
  }
  json_error_t je;
  root = json_loadb(manifest, mlen, JSON_REJECT_DUPLICATES, &je);
  json_t *arr = root ? json_object_get(root, "tables") : NULL;
  json_t *ver = root ? json_object_get(root, "version") : NULL;
  if (!json_is_array(arr) || !json_is_integer(ver) ||
      json_integer_value(ver) < MIN_VERSION ||
      json_integer_value(ver) > VERSION) {
    rc = fail(err, errlen, CHIME_ECORRUPT, "%s: not a version %u manifest", p,
              VERSION);
    goto out;
  }
  if ((*files = calloc(json_array_size(arr) + 1, sizeof(**files))) == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  json_array_foreach(arr, i, ent) {
    json_t *f = json_object_get(ent, "file");
    json_t *b = json_object_get(ent, "bytes");
    json_t *c = json_object_get(ent, "crc32c");
    if (!json_is_string(f) || !file_name_ok(json_string_value(f)) ||
        !json_is_integer(b) || json_integer_value(b) < 12 ||
        !json_is_integer(c) || json_integer_value(c) < 0 ||
        json_integer_value(c) > 0xffffffffll) {
      rc =
          fail(err, errlen, CHIME_ECORRUPT, "%s: entry %zu is malformed", p, i);
      goto out;
    }
    mfile_t *m = &(*files)[(*nfiles)++];
    snprintf(m->file, sizeof(m->file), "%s", json_string_value(f));
    m->bytes = (uint64_t)json_integer_value(b);
    m->crc = (uint32_t)json_integer_value(c);
  }
out:
  json_decref(root);
  free(manifest);
  return rc;
}

/* Table file m mapped, its size, CRC and every record checked (a dry
 * load into no table): whole and intact before any item goes in. */
static int map_checked(const char *path, mfile_t *m, char *err, size_t errlen) {
  char p[CHIME__MAX_PATH + 64];
  struct stat st;
  int e;
  snprintf(p, sizeof(p), "%s/%s", path, m->file);
  int fd = open_regular(p, &st, &e);
  if (fd < 0)
    return fail(err, errlen, CHIME_ECORRUPT, "cannot open '%s': %s", p,
                err_text(e));
  if ((uint64_t)st.st_size != m->bytes) {
    close(fd);
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: %lld bytes, the manifest says %llu", p,
                (long long)st.st_size, (unsigned long long)m->bytes);
  }
  m->map = mmap(NULL, (size_t)m->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m->map == MAP_FAILED) {
    m->map = NULL;
    return fail(err, errlen, CHIME_ESYS, "cannot map '%s': %s", p,
                strerror(errno));
  }
  m->len = (size_t)m->bytes;
  madvise(m->map, m->len, MADV_SEQUENTIAL);
  uint32_t crc;
  int rc = chime__checkpoint_check_crc(m->map, m->len, p, &crc, err, errlen);
  if (rc != 0)
    return rc;
  if (crc != m->crc)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: corrupt (CRC-32C %08x, the manifest says %08x)", p, crc,
                m->crc);
  uint64_t ignored;
  return chime__checkpoint_load_checked(m->map, m->len, NULL, 0, p, &ignored,
                                        err, errlen);
}

int chime__checkpoint_restore(chime__table_t *const *tables, uint32_t ntables,
                              const char *path, uint64_t *items, char *err,
                              size_t errlen) {
  char p[CHIME__MAX_PATH + 64];
  mfile_t *files = NULL;
  size_t nfiles = 0, i;
  uint32_t mcrc = 0;
  *items = 0;
  if (strlen(path) >= CHIME__MAX_PATH)
    return fail(err, errlen, CHIME_EINVAL, "checkpoint path too long");
  int rc = read_done(path, &mcrc, err, errlen);
  if (rc == 0)
    rc = read_manifest(path, mcrc, &files, &nfiles, err, errlen);
  for (i = 0; rc == 0 && i < nfiles; i++)
    rc = map_checked(path, &files[i], err, errlen);
  for (i = 0; rc == 0 && i < nfiles; i++) {
    uint64_t got = 0;
    snprintf(p, sizeof(p), "%s/%s", path, files[i].file);
    rc = chime__checkpoint_load_checked(files[i].map, files[i].len, tables,
                                        ntables, p, &got, err, errlen);
    *items += got;
  }
  for (i = 0; files != NULL && i < nfiles; i++)
    if (files[i].map != NULL)
      munmap(files[i].map, files[i].len);
  free(files);
  return rc;
}
