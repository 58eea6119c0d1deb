/* Checkpoints (checkpoint.h): the directory protocol, the table files, and
 * restore. The tables are written from their own memory: a view pins the
 * items' rows in one short hold of the table's lock, and the bytes are
 * written without it. */
#include "server/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/errfmt.h"
#include "common/spec.h"
#include "replay/crc32c.h"

#define MAGIC "CHIMECKT"
/* 2: sequence tables' steps and windows (a version 1 file holds a
 * sequence table's name and spec only); plain tables' files are the same
 * in both, and version 1 ones still load. */
#define VERSION 2u
#define MIN_VERSION 1u
#define KIND_PLAIN 0u
#define KIND_SEQUENCE 1u
#define DONE_HEAD "chime checkpoint 1\nmanifest_crc32c "
#define MAX_MANIFEST (16u << 20)
#define WBUF (1u << 20)
/* A record's fixed part: key, insert time, priority, times sampled. */
#define REC_FIXED 28u

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err != NULL && errlen > 0)
    vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return code;
}

static uint64_t now_ns(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- writing */

typedef struct {
  int fd;
  uint8_t *buf;
  size_t len;
  uint32_t crc;
  uint64_t total;
  int err; /* errno of the first failed write */
} wr_t;

static void wr_flush(wr_t *w) {
  size_t off = 0;
  while (off < w->len && w->err == 0) {
    ssize_t k = write(w->fd, w->buf + off, w->len - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      w->err = k < 0 ? errno : EIO;
    else
      off += (size_t)k;
  }
  w->len = 0;
}

/* Items written between early unpins (chime__table_view_unpin). */
#define UNPIN_EVERY 1024u

static void wr_raw(wr_t *w, const void *p, size_t n) {
  const uint8_t *s = p;
  w->crc = chime__crc32c(w->crc, p, n);
  w->total += n;
  while (n > 0) {
    size_t take = WBUF - w->len < n ? WBUF - w->len : n;
    memcpy(w->buf + w->len, s, take);
    w->len += take;
    s += take;
    n -= take;
    if (w->len == WBUF)
      wr_flush(w);
  }
}

static void wr_u32(wr_t *w, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  wr_raw(w, b, 4);
}

static void wr_u64(wr_t *w, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  wr_raw(w, b, 8);
}

static void wr_str(wr_t *w, const char *s) {
  wr_u32(w, (uint32_t)strlen(s));
  wr_raw(w, s, strlen(s));
}

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
  wr_t w = {fd, NULL, 0, 0, 0, 0};
  const uint8_t *s = p;
  size_t off = 0;
  while (off < n) {
    ssize_t k = write(fd, s + off, n - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      w.err = k < 0 ? errno : EIO;
      break;
    }
    off += (size_t)k;
  }
  if (w.err == 0 && fsync(fd) != 0)
    w.err = errno;
  if (close(fd) != 0 && w.err == 0)
    w.err = errno;
  return w.err;
}

typedef struct {
  char file[32];
  char name[CHIME_MAX_NAME];
  uint64_t bytes, items;
  uint32_t crc;
} entry_t;

/* A sequence table's part after the items' common fields: its settings
 * and counters, each window's first step (a position-based slot), episode,
 * index and length, then the blocks holding steps, oldest first (steps,
 * links as positions, each step's episode and index, then per leaf the
 * steps' bytes). Windows come first so that their rows go before the
 * blocks are written (windows that leave meanwhile would otherwise hold
 * rows until the end, and new windows could run out of rows); each block
 * goes once written, oldest first, which is the order appends want them
 * back in. An append into a full store waits for the windows' write and
 * one block's (see docs/operations.md for figures). */
static void write_seq(chime__table_t *t, wr_t *w, chime__table_view_t *v) {
  const chime__table_config_t *cfg = chime__table_config(t);
  const chime__steps_view_t *sv = &v->steps;
  const chime_spec_t *spec = &cfg->spec;
  uint64_t mp;
  memcpy(&mp, &v->max_prio, 8);
  wr_u32(w, cfg->sequence_length);
  wr_u32(w, cfg->stride);
  wr_u32(w, cfg->episode_pad ? 1u : 0u);
  wr_u32(w, sv->k);
  wr_u64(w, cfg->capacity_steps);
  wr_u32(w, sv->nused);
  wr_u64(w, sv->next_episode);
  wr_u64(w, v->step_key);
  wr_u64(w, v->windows_dropped);
  wr_u64(w, mp);
  wr_u64(w, sv->abandoned);
  wr_u64(w, sv->evicted);
  for (uint64_t i = 0; i < v->count && w->err == 0; i++) {
    uint64_t pb;
    chime__table_view_item_t it;
    chime__table_view_item(t, v, i, &it);
    memcpy(&pb, &v->prio[i], 8);
    wr_u64(w, it.key);
    wr_u64(w, it.itime);
    wr_u64(w, pb);
    wr_u32(w, v->times[i]);
    wr_u32(w, chime__steps_view_slot(sv, it.slot));
    wr_u64(w, it.episode);
    wr_u32(w, it.first);
    wr_u32(w, it.len);
    if ((i + 1) % UNPIN_EVERY == 0)
      chime__table_view_unpin(t, v, i + 1);
  }
  chime__table_view_unpin(t, v, v->count);
  for (uint32_t pos = 0; pos < sv->nused && w->err == 0; pos++) {
    const uint64_t *ep;
    const uint32_t *idx;
    const uint8_t *leaf[CHIME_MAX_LEAVES];
    uint32_t bn = sv->bn[pos];
    chime__steps_view_block(chime__table_steps(t), sv, pos, &ep, &idx, leaf);
    wr_u32(w, bn);
    wr_u32(w, sv->bnext[pos]);
    wr_u32(w, sv->bprev[pos]);
    for (uint32_t o = 0; o < bn; o++) {
      wr_u64(w, ep[o]);
      wr_u32(w, idx[o]);
    }
    for (uint32_t l = 0; l < spec->nleaves; l++)
      wr_raw(w, leaf[l], (size_t)(bn * chime_leaf_bytes(&spec->leaves[l])));
    chime__table_view_unpin_steps(t, v, pos + 1);
  }
}

/* One table's file: the view taken (the pause), the bytes written from the
 * pinned rows (a sequence table's: from its pinned blocks), the view
 * released, the file fsynced. */
static int write_table(chime__table_t *t, const char *path, wr_t *w, entry_t *e,
                       uint64_t *pause_ns, char *err, size_t errlen) {
  const chime__table_config_t *cfg = chime__table_config(t);
  chime__table_view_t v;
  int seq = cfg->sequence_length > 0;
  char spec[8192];
  if (chime_spec_format(&cfg->spec, spec, sizeof(spec)) != 0)
    return fail(err, errlen, CHIME_EINVAL, "table '%s': spec too long",
                cfg->name);
  int rc = chime__table_view(t, &v);
  if (rc != 0)
    return fail(err, errlen, rc, "table '%s': %s", cfg->name,
                chime_strerror(rc));
  *pause_ns = v.pause_ns;
  w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  w->len = 0;
  w->crc = 0;
  w->total = 0;
  w->err = w->fd < 0 ? errno : 0;
  if (w->fd >= 0) {
    uint32_t nl = cfg->spec.nleaves;
    uint64_t sb = chime_spec_sample_bytes(&cfg->spec);
    wr_raw(w, MAGIC, 8);
    wr_u32(w, VERSION);
    wr_u32(w, seq ? KIND_SEQUENCE : KIND_PLAIN);
    wr_str(w, cfg->name);
    wr_str(w, spec);
    wr_u64(w, v.count);
    wr_u64(w, v.next_key);
    wr_u64(w, v.inserts);
    wr_u64(w, v.samples);
    wr_u64(w, v.left);
    wr_u64(w, v.left_times);
    wr_u64(w, v.rng);
    wr_u64(w, sb); /* a sequence table's: one step's */
    if (seq)
      write_seq(t, w, &v);
    for (uint64_t i = 0; !seq && i < v.count && w->err == 0; i++) {
      uint64_t pb;
      chime__table_view_item_t it;
      chime__table_view_item(t, &v, i, &it);
      memcpy(&pb, &v.prio[i], 8);
      wr_u64(w, it.key);
      wr_u64(w, it.itime);
      wr_u64(w, pb);
      wr_u32(w, v.times[i]);
      for (uint32_t l = 0; l < nl; l++)
        wr_raw(w, chime__table_view_leaf(t, &v, i, l),
               chime_leaf_bytes(&cfg->spec.leaves[l]));
      /* Written (copied into w's buffer): the rows may go, oldest first,
       * so inserts meanwhile reuse them rather than spare rows. */
      if ((i + 1) % UNPIN_EVERY == 0)
        chime__table_view_unpin(t, &v, i + 1);
    }
    uint32_t crc = w->crc;
    wr_u32(w, crc);
    wr_flush(w);
    e->crc = crc;
    e->bytes = w->total;
  }
  e->items = v.count;
  chime__table_view_release(t, &v);
  if (w->fd >= 0) {
    if (w->err == 0 && fsync(w->fd) != 0)
      w->err = errno;
    if (close(w->fd) != 0 && w->err == 0)
      w->err = errno;
  }
  if (w->err != 0)
    return fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", path,
                strerror(w->err));
  snprintf(e->name, sizeof(e->name), "%s", cfg->name);
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

int chime__checkpoint_write(chime__table_t *const *tables, uint32_t ntables,
                            const char *dir, uint32_t keep,
                            chime__ckpt_result_t *out, char *err,
                            size_t errlen) {
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  int rc = 0;
  char tmp[CHIME__MAX_PATH + 64] = "", fin[CHIME__MAX_PATH + 64] = "";
  char p[CHIME__MAX_PATH + 128];
  entry_t *ents = calloc(ntables ? ntables : 1, sizeof(*ents));
  /* Mapped, not malloc'd: glibc keeps a freed MiB in the thread's arena
   * (its mmap threshold rises after the first free), this goes back. */
  void *wbuf = mmap(NULL, WBUF, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  wr_t w = {-1, wbuf == MAP_FAILED ? NULL : wbuf, 0, 0, 0, 0};
  char *manifest = NULL;
  json_t *root = NULL;
  memset(out, 0, sizeof(*out));
  if (ents == NULL || w.buf == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  if (strlen(dir) >= CHIME__MAX_PATH) {
    rc = fail(err, errlen, CHIME_EINVAL, "checkpoint dir too long");
    goto out;
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    rc = fail(err, errlen, CHIME_ESYS, "cannot create '%s': %s", dir,
              strerror(errno));
    goto out;
  }
  uint64_t hi = highest_seq(dir);
  if (hi == UINT64_MAX) {
    /* One more would wrap to 0 and sort below every checkpoint there. */
    rc = fail(err, errlen, CHIME_EOVERFLOW,
              "checkpoint dir '%s' holds ckpt-%llu, the last number there "
              "is: move the checkpoints elsewhere (renumbered from 1) or "
              "remove them",
              dir, (unsigned long long)hi);
    goto out;
  }
  uint64_t seq = hi + 1;
  ckpt_name(tmp, sizeof(tmp), dir, ".tmp-ckpt-", seq);
  ckpt_name(fin, sizeof(fin), dir, "ckpt-", seq);
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
    rc = write_table(tables[i], p, &w, &ents[i], &pause, err, errlen);
    if (rc != 0)
      goto out;
    if (pause > out->pause_ns)
      out->pause_ns = pause;
    out->items += ents[i].items;
    out->bytes += ents[i].bytes;
  }
  root = json_object();
  json_t *arr = json_array();
  json_object_set_new(root, "format", json_string("chime-checkpoint"));
  json_object_set_new(root, "version", json_integer(VERSION));
  json_object_set_new(root, "created_unix_ns",
                      json_integer((json_int_t)now_ns(CLOCK_REALTIME)));
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
  manifest = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  if (manifest == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  size_t mlen = strlen(manifest);
  snprintf(p, sizeof(p), "%s/MANIFEST", tmp);
  int e = write_small(p, manifest, mlen);
  if (e == 0)
    e = fsync_path(tmp, 1);
  if (e != 0) {
    rc = fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", p, strerror(e));
    goto out;
  }
  if (rename(tmp, fin) != 0 || (e = fsync_path(dir, 1)) != 0) {
    rc = fail(err, errlen, CHIME_ESYS, "cannot rename '%s' to '%s': %s", tmp,
              fin, strerror(e ? e : errno));
    goto out;
  }
  char done[128];
  int dl = snprintf(done, sizeof(done), DONE_HEAD "%08x\n",
                    chime__crc32c(0, manifest, mlen));
  snprintf(p, sizeof(p), "%s/DONE", fin);
  e = write_small(p, done, (size_t)dl);
  if (e == 0)
    e = fsync_path(fin, 1);
  if (e != 0) {
    rc = fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", p, strerror(e));
    remove_dir(fin);
    goto out;
  }
  snprintf(out->path, sizeof(out->path), "%s", fin);
  out->tables = ntables;
  prune(dir, keep ? keep : 1);
out:
  if (rc != 0 && tmp[0] != '\0')
    remove_dir(tmp);
  free(manifest);
  json_decref(root);
  if (w.buf != NULL)
    munmap(w.buf, WBUF);
  free(ents);
  out->duration_ns = now_ns(CLOCK_MONOTONIC) - t0;
  return rc;
}

/* ---------------------------------------------------------------- reading */

typedef struct {
  const uint8_t *p;
  size_t n, off;
  int bad;
} rd_t;

static const uint8_t *rd_take(rd_t *r, size_t n) {
  if (r->bad || r->n - r->off < n) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t *s = r->p + r->off;
  r->off += n;
  return s;
}

static uint32_t rd_u32(rd_t *r) {
  const uint8_t *s = rd_take(r, 4);
  uint32_t v = 0;
  for (int i = 0; s != NULL && i < 4; i++)
    v |= (uint32_t)s[i] << (8 * i);
  return v;
}

static uint64_t rd_u64(rd_t *r) {
  const uint8_t *s = rd_take(r, 8);
  uint64_t v = 0;
  for (int i = 0; s != NULL && i < 8; i++)
    v |= (uint64_t)s[i] << (8 * i);
  return v;
}

/* A length-prefixed string of at most max - 1 bytes, no NUL inside. */
static int rd_str(rd_t *r, char *dst, size_t max) {
  uint32_t n = rd_u32(r);
  if (r->bad || n >= max) {
    r->bad = 1;
    return -1;
  }
  const uint8_t *s = rd_take(r, n);
  if (s == NULL || memchr(s, '\0', n) != NULL) {
    r->bad = 1;
    return -1;
  }
  memcpy(dst, s, n);
  dst[n] = '\0';
  return 0;
}

static chime__table_t *find_table(chime__table_t *const *tables, uint32_t n,
                                  const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(chime__table_config(tables[i])->name, name) == 0)
      return tables[i];
  return NULL;
}

/* The checkpoint's spec against the config's, leaf by leaf. */
static int spec_check(const char *table, const chime_spec_t *ck,
                      const chime_spec_t *cf, char *err, size_t errlen) {
  uint32_t n = ck->nleaves > cf->nleaves ? ck->nleaves : cf->nleaves;
  for (uint32_t i = 0; i < n; i++) {
    char a[256], b[256];
    if (i >= cf->nleaves)
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': leaf '%s' (leaf %u) is in the checkpoint but "
                  "not in the config's spec",
                  table, ck->leaves[i].name, i);
    if (i >= ck->nleaves)
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': leaf '%s' (leaf %u) is in the config's spec "
                  "but not in the checkpoint",
                  table, cf->leaves[i].name, i);
    const chime_leaf_t *x = &ck->leaves[i], *y = &cf->leaves[i];
    if (strcmp(x->name, y->name) != 0)
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': leaf %u is '%s' in the checkpoint, '%s' in the "
                  "config",
                  table, i, x->name, y->name);
    chime__leaf_type_text(x, a, sizeof(a));
    chime__leaf_type_text(y, b, sizeof(b));
    if (strcmp(a, b) != 0)
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': leaf '%s' is %s in the checkpoint, %s in the "
                  "config",
                  table, x->name, a, b);
  }
  return 0;
}

/* A sequence table's window record and the fixed part of its section. */
#define WIN_REC 48u

typedef struct {
  uint32_t t, stride, pad, k, nused;
  uint64_t capacity_steps, next_episode, step_key, dropped, abandoned, evicted;
  double max_prio;
  size_t items_at, blocks_at; /* offsets of the windows, the blocks */
} seqhdr_t;

/* A sequence table's section, walked whole (windows and blocks, their
 * sizes); what goes into the table is checked when it goes in. */
static int seq_parse(rd_t *r, uint64_t count, uint64_t sb, uint32_t nl,
                     seqhdr_t *h) {
  h->t = rd_u32(r);
  h->stride = rd_u32(r);
  h->pad = rd_u32(r);
  h->k = rd_u32(r);
  h->capacity_steps = rd_u64(r);
  h->nused = rd_u32(r);
  h->next_episode = rd_u64(r);
  h->step_key = rd_u64(r);
  h->dropped = rd_u64(r);
  uint64_t mp = rd_u64(r);
  memcpy(&h->max_prio, &mp, 8);
  h->abandoned = rd_u64(r);
  h->evicted = rd_u64(r);
  if (r->bad || h->t == 0 || h->stride == 0 || h->stride > h->t || h->pad > 1 ||
      h->k == 0 || h->k > 4096 || nl == 0 || sb == 0)
    return -1;
  h->items_at = r->off;
  if (count > (r->n - r->off) / WIN_REC)
    return -1;
  r->off += (size_t)count * WIN_REC;
  h->blocks_at = r->off;
  for (uint32_t pos = 0; pos < h->nused; pos++) {
    uint32_t bn = rd_u32(r);
    rd_u32(r);
    rd_u32(r);
    if (r->bad || bn == 0 || bn > h->k ||
        (uint64_t)bn * (12 + sb) > r->n - r->off)
      return -1;
    r->off += (size_t)(bn * (12 + sb));
  }
  return r->off == r->n ? 0 : -1;
}

/* The config's sequence settings against the checkpoint's: T and the
 * episode end shape the items; the steps' blocks must be the same size
 * and fit (stride may differ: it shapes only windows made later). */
static int seq_check(const char *table, const seqhdr_t *h,
                     const chime__table_config_t *cfg, chime__steps_t *st,
                     char *err, size_t errlen) {
  if (h->t != cfg->sequence_length)
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': sequence_length is %u in the checkpoint, %u in "
                "the config",
                table, h->t, cfg->sequence_length);
  if (h->pad != (cfg->episode_pad ? 1u : 0u))
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': episode_end is %s in the checkpoint, %s in the "
                "config",
                table, h->pad ? "pad" : "drop",
                cfg->episode_pad ? "pad" : "drop");
  if (h->k != chime__steps_k(st) || h->nused > chime__steps_nblocks(st))
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': capacity_steps %llu in the checkpoint (%u blocks "
                "of %u steps stored), %llu in the config (%u blocks of %u): "
                "the steps do not fit",
                table, (unsigned long long)h->capacity_steps, h->nused, h->k,
                (unsigned long long)cfg->capacity_steps,
                chime__steps_nblocks(st), chime__steps_k(st));
  return 0;
}

/* Loads a parsed sequence section into t: blocks, then windows. */
static int seq_load(const uint8_t *p, size_t n, const seqhdr_t *h,
                    chime__table_t *t, uint64_t count, const char *fname,
                    const char *name, char *err, size_t errlen) {
  const chime__table_config_t *cfg = chime__table_config(t);
  chime__steps_t *st = chime__table_steps(t);
  uint64_t *ep = malloc(h->k * sizeof(*ep));
  uint32_t *idx = malloc(h->k * sizeof(*idx));
  rd_t r = {p, n, h->blocks_at, 0};
  int rc = 0;
  if (ep == NULL || idx == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  if (chime__steps_restore_begin(st, h->nused) != 0) {
    rc = fail(err, errlen, CHIME_EINVAL, "table '%s': not empty", name);
    goto out;
  }
  for (uint32_t pos = 0; pos < h->nused; pos++) {
    uint32_t bn = rd_u32(&r), next = rd_u32(&r), prev = rd_u32(&r);
    const uint8_t *leaf[CHIME_MAX_LEAVES];
    for (uint32_t o = 0; o < bn; o++) {
      ep[o] = rd_u64(&r);
      idx[o] = rd_u32(&r);
    }
    for (uint32_t l = 0; l < cfg->spec.nleaves; l++)
      leaf[l] =
          rd_take(&r, (size_t)(bn * chime_leaf_bytes(&cfg->spec.leaves[l])));
    if (r.bad || chime__steps_restore_block(st, pos, bn, next, prev, ep, idx,
                                            leaf) != 0) {
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: block %u of table '%s' does not hang together", fname, pos,
                name);
      goto out;
    }
  }
  if (chime__steps_restore_finish(st, h->next_episode, h->abandoned,
                                  h->evicted) != 0) {
    rc = fail(err, errlen, CHIME_ECORRUPT,
              "%s: the blocks of table '%s' do not hang together", fname, name);
    goto out;
  }
  r.off = h->items_at;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t key = rd_u64(&r), itime = rd_u64(&r), pb = rd_u64(&r);
    uint32_t times = rd_u32(&r), slot = rd_u32(&r);
    uint64_t episode = rd_u64(&r);
    uint32_t first = rd_u32(&r), len = rd_u32(&r);
    double prio;
    memcpy(&prio, &pb, 8);
    rc = chime__table_restore_window(t, key, itime, prio, times, slot, episode,
                                     first, len);
    if (rc == CHIME_ENOMEM) {
      rc = fail(err, errlen, CHIME_EINVAL,
                "table '%s': the checkpoint holds %llu windows, more than its "
                "rows hold",
                name, (unsigned long long)count);
      goto out;
    }
    if (rc != 0) {
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: window %llu (key %llu): a duplicate key, a priority the "
                "table cannot use, or steps it does not hold",
                fname, (unsigned long long)i, (unsigned long long)key);
      goto out;
    }
  }
  chime__table_restore_seq_counts(t, h->step_key, h->max_prio, h->dropped);
out:
  free(ep);
  free(idx);
  return rc;
}

int chime__checkpoint_load_table(const uint8_t *p, size_t n,
                                 chime__table_t *const *tables,
                                 uint32_t ntables, const char *fname,
                                 uint64_t *items, char *err, size_t errlen) {
  char name[CHIME_MAX_NAME], spec_text[8192], perr[256];
  chime_spec_t spec;
  seqhdr_t sh;
  memset(&sh, 0, sizeof(sh));
  *items = 0;
  if (n < 12 || memcmp(p, MAGIC, 8) != 0)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: not a chime checkpoint table file (bad magic)", fname);
  uint32_t stored = (uint32_t)p[n - 4] | (uint32_t)p[n - 3] << 8 |
                    (uint32_t)p[n - 2] << 16 | (uint32_t)p[n - 1] << 24;
  uint32_t crc = chime__crc32c(0, p, n - 4);
  if (crc != stored)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: corrupt (CRC-32C %08x, the file says %08x)", fname, crc,
                stored);
  rd_t r = {p, n - 4, 8, 0};
  uint32_t ver = rd_u32(&r), kind = rd_u32(&r);
  if (!r.bad && (ver < MIN_VERSION || ver > VERSION))
    return fail(err, errlen, CHIME_ECORRUPT, "%s: version %u (this is %u)",
                fname, ver, VERSION);
  rd_str(&r, name, sizeof(name));
  rd_str(&r, spec_text, sizeof(spec_text));
  uint64_t count = rd_u64(&r), next_key = rd_u64(&r), inserts = rd_u64(&r);
  uint64_t samples = rd_u64(&r), left = rd_u64(&r), left_times = rd_u64(&r);
  uint64_t rng = rd_u64(&r), sb = rd_u64(&r);
  if (r.bad || (kind != KIND_PLAIN && kind != KIND_SEQUENCE))
    return fail(err, errlen, CHIME_ECORRUPT, "%s: malformed header", fname);
  if (chime_spec_parse(&spec, spec_text, perr, sizeof(perr)) != 0)
    return fail(err, errlen, CHIME_ECORRUPT, "%s: table '%s': bad spec: %s",
                fname, name, perr);
  uint64_t rec = REC_FIXED + sb;
  /* Version 1 wrote a sequence table's name and spec alone. */
  int old_seq = kind == KIND_SEQUENCE && ver < 2;
  if (!old_seq && sb != chime_spec_sample_bytes(&spec))
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: sample bytes %llu, its spec's %llu", fname,
                (unsigned long long)sb,
                (unsigned long long)chime_spec_sample_bytes(&spec));
  if ((old_seq && count != 0) ||
      (kind == KIND_SEQUENCE && !old_seq &&
       seq_parse(&r, count, sb, spec.nleaves, &sh) != 0) ||
      (kind == KIND_PLAIN &&
       (count > (r.n - r.off) / rec || count * rec != r.n - r.off)))
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: %llu items do not fill its %zu bytes", fname,
                (unsigned long long)count, n);
  if (tables == NULL)
    return 0;
  chime__table_t *t = find_table(tables, ntables, name);
  if (t == NULL)
    return fail(err, errlen, CHIME_EINVAL,
                "%s: table '%s' is in the checkpoint but not in the config",
                fname, name);
  const chime__table_config_t *cfg = chime__table_config(t);
  if (old_seq)
    return fail(err, errlen, CHIME_ENOTSUP,
                "table '%s' is a sequence table in a version 1 checkpoint, "
                "which holds no steps (start without --restore, or drop the "
                "table from the config)",
                name);
  if ((kind == KIND_SEQUENCE) != (cfg->sequence_length > 0))
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s' is a %s table in the checkpoint, a %s table in the "
                "config",
                name, kind == KIND_SEQUENCE ? "sequence" : "plain",
                kind == KIND_SEQUENCE ? "plain" : "sequence");
  int rc = spec_check(name, &spec, &cfg->spec, err, errlen);
  if (rc != 0)
    return rc;
  if (kind == KIND_SEQUENCE) {
    if ((rc = seq_check(name, &sh, cfg, chime__table_steps(t), err, errlen)) !=
            0 ||
        (rc = seq_load(p, n - 4, &sh, t, count, fname, name, err, errlen)) != 0)
      return rc;
    chime__table_restore_counts(t, next_key, inserts, samples, left, left_times,
                                rng);
    *items = count;
    return 0;
  }
  for (uint64_t i = 0; i < count; i++) {
    uint64_t key = rd_u64(&r), itime = rd_u64(&r), pb = rd_u64(&r);
    uint32_t times = rd_u32(&r);
    const uint8_t *sample = rd_take(&r, (size_t)sb);
    double prio;
    memcpy(&prio, &pb, 8);
    if (sample == NULL)
      return fail(err, errlen, CHIME_ECORRUPT, "%s: truncated", fname);
    rc = chime__table_restore_item(t, key, itime, prio, times, sample);
    if (rc == CHIME_ENOMEM)
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': the checkpoint holds %llu items, more than its "
                  "capacity %llu (and spare rows) allow",
                  name, (unsigned long long)count,
                  (unsigned long long)cfg->capacity);
    if (rc != 0)
      return fail(err, errlen, CHIME_ECORRUPT,
                  "%s: item %llu (key %llu): a duplicate key or a priority "
                  "the table cannot use",
                  fname, (unsigned long long)i, (unsigned long long)key);
  }
  chime__table_restore_counts(t, next_key, inserts, samples, left, left_times,
                              rng);
  *items = count;
  return 0;
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

int chime__checkpoint_restore(chime__table_t *const *tables, uint32_t ntables,
                              const char *path, uint64_t *items, char *err,
                              size_t errlen) {
  char p[CHIME__MAX_PATH + 64];
  char *done = NULL, *manifest = NULL;
  size_t dlen = 0, mlen = 0;
  mfile_t *files = NULL;
  size_t nfiles = 0;
  json_t *root = NULL;
  int rc = 0, e;
  *items = 0;
  if (strlen(path) >= CHIME__MAX_PATH)
    return fail(err, errlen, CHIME_EINVAL, "checkpoint path too long");
  snprintf(p, sizeof(p), "%s/DONE", path);
  if ((e = read_whole(p, &done, &dlen, 4096)) != 0) {
    rc = e == ENOENT ? fail(err, errlen, CHIME_ENOTFOUND,
                            "checkpoint '%s' has no DONE marker: it is "
                            "incomplete (or not a checkpoint) and is never "
                            "loaded",
                            path)
                     : fail(err, errlen,
                            e == E_NOT_REGULAR ? CHIME_ECORRUPT : CHIME_ESYS,
                            "cannot read '%s': %s", p, err_text(e));
    goto out;
  }
  uint32_t mcrc = 0;
  int hex_ok = dlen == strlen(DONE_HEAD) + 9 &&
               strncmp(done, DONE_HEAD, strlen(DONE_HEAD)) == 0 &&
               done[dlen - 1] == '\n';
  /* Exactly as written: 8 lowercase hex digits. */
  for (size_t k = strlen(DONE_HEAD); hex_ok && k < dlen - 1; k++) {
    char ch = done[k];
    int d = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                     : -1;
    hex_ok = d >= 0;
    mcrc = mcrc << 4 | (uint32_t)(d & 15);
  }
  if (!hex_ok) {
    rc = fail(err, errlen, CHIME_ECORRUPT, "%s: corrupt DONE marker", p);
    goto out;
  }
  snprintf(p, sizeof(p), "%s/MANIFEST", path);
  if ((e = read_whole(p, &manifest, &mlen, MAX_MANIFEST)) != 0) {
    rc = fail(err, errlen,
              e == ENOENT || e == E_NOT_REGULAR ? CHIME_ECORRUPT : CHIME_ESYS,
              "cannot read '%s': %s", p, err_text(e));
    goto out;
  }
  if (chime__crc32c(0, manifest, mlen) != mcrc) {
    rc = fail(err, errlen, CHIME_ECORRUPT,
              "%s: corrupt (CRC-32C %08x, DONE says %08x)", p,
              chime__crc32c(0, manifest, mlen), mcrc);
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
  files = calloc(json_array_size(arr) + 1, sizeof(*files));
  if (files == NULL) {
    rc = fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  size_t i;
  json_t *ent;
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
    mfile_t *m = &files[nfiles++];
    snprintf(m->file, sizeof(m->file), "%s", json_string_value(f));
    m->bytes = (uint64_t)json_integer_value(b);
    m->crc = (uint32_t)json_integer_value(c);
  }
  /* Every file whole and intact before any item goes in. */
  for (i = 0; i < nfiles; i++) {
    mfile_t *m = &files[i];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", path, m->file);
    int fd = open_regular(p, &st, &e);
    if (fd < 0) {
      rc = fail(err, errlen, CHIME_ECORRUPT, "cannot open '%s': %s", p,
                err_text(e));
      goto out;
    }
    if ((uint64_t)st.st_size != m->bytes) {
      close(fd);
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: %lld bytes, the manifest says %llu", p,
                (long long)st.st_size, (unsigned long long)m->bytes);
      goto out;
    }
    m->map = mmap(NULL, (size_t)m->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
      m->map = NULL;
      rc = fail(err, errlen, CHIME_ESYS, "cannot map '%s': %s", p,
                strerror(errno));
      goto out;
    }
    m->len = (size_t)m->bytes;
    madvise(m->map, m->len, MADV_SEQUENTIAL);
    const uint8_t *fp = m->map;
    uint32_t crc = chime__crc32c(0, fp, m->len - 4);
    uint32_t stored = (uint32_t)fp[m->len - 4] | (uint32_t)fp[m->len - 3] << 8 |
                      (uint32_t)fp[m->len - 2] << 16 |
                      (uint32_t)fp[m->len - 1] << 24;
    if (crc != stored || crc != m->crc) {
      rc = fail(err, errlen, CHIME_ECORRUPT,
                "%s: corrupt (CRC-32C %08x; the file says %08x, the manifest "
                "%08x)",
                p, crc, stored, m->crc);
      goto out;
    }
    uint64_t ignored;
    rc = chime__checkpoint_load_table(fp, m->len, NULL, 0, p, &ignored, err,
                                      errlen);
    if (rc != 0)
      goto out;
  }
  for (i = 0; i < nfiles; i++) {
    uint64_t got = 0;
    snprintf(p, sizeof(p), "%s/%s", path, files[i].file);
    rc = chime__checkpoint_load_table(files[i].map, files[i].len, tables,
                                      ntables, p, &got, err, errlen);
    if (rc != 0)
      goto out;
    *items += got;
  }
out:
  for (i = 0; files != NULL && i < nfiles; i++)
    if (files[i].map != NULL)
      munmap(files[i].map, files[i].len);
  free(files);
  json_decref(root);
  free(manifest);
  free(done);
  return rc;
}
