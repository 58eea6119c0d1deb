/* chime-bench bigtable: a table in files (table "data_dir",
 * docs/operations.md "Tables in files") far larger than the memory it may
 * use, sampled uniformly, against a plain pread loop over the same file
 * with the same access pattern (a row drawn uniformly at random, its bytes
 * read whole) in the same run: items per second of each, and their ratio.
 * Every sample is checked (its bytes are its insert index) and the draws
 * binned for a chi-square test of uniformity. Run it in a memory cgroup
 * (scripts/bigtable.sh) so the page cache cannot hold the table: both sides
 * then read from the disk through the same cache.
 *
 * The table is filled once (items whose bytes are their index) and kept:
 * a second run on the same --dir opens it again and goes straight to the
 * sampling, as chimed restarted on its data dir does. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "bench.h"
#include "chime/errors.h"
#include "common/key.h"
#include "frames.h"
#include "measure.h"
#include "replay/table.h"
#include "replay/table_file.h"

#define NBINS 1000
#define FILL 64
#define NFRAMES 500

typedef struct {
  const char *dir, *spec;
  double gib, seconds;
  uint32_t batch, rounds;
  int json, level; /* level: the leaf compressed (--compress), else 0 */
} opts_t;

/* --compress: items are Atari-like frames (frames.h), NFRAMES of them
 * one after another from frame i % NFRAMES, their first 8 bytes i. */
static uint8_t *frames;

typedef struct {
  uint64_t n, bad;
  double s;
} side_t;

static uint64_t rss_kib(const char *what) {
  char line[256];
  uint64_t v = 0;
  size_t n = strlen(what);
  FILE *f = fopen("/proc/self/status", "re");
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, what, n) == 0)
      v = strtoull(line + n + 1, NULL, 10);
  if (f != NULL)
    fclose(f);
  return v;
}

static void frames_from(uint8_t *p, uint64_t ib, uint64_t i) {
  for (uint64_t at = 0, f = i; at < ib; at += CHIME__BENCH_FRAME, f++) {
    uint64_t n = ib - at < CHIME__BENCH_FRAME ? ib - at : CHIME__BENCH_FRAME;
    memcpy(p + at, frames + (f % NFRAMES) * CHIME__BENCH_FRAME, n);
  }
}

/* Item i: every byte (uint8_t)i (frames with --compress), its first 8
 * bytes i itself. */
static void item(uint8_t *p, uint64_t ib, uint64_t i) {
  if (frames != NULL)
    frames_from(p, ib, i);
  else
    memset(p, (int)(i & 0xff), ib);
  memcpy(p, &i, sizeof(i));
}

static int item_ok(const uint8_t *p, uint64_t ib, uint64_t i) {
  uint64_t got;
  memcpy(&got, p, sizeof(got));
  if (frames != NULL) { /* its last frame's bytes */
    uint64_t last = (ib - 1) / CHIME__BENCH_FRAME;
    const uint8_t *f = frames + ((i + last) % NFRAMES) * CHIME__BENCH_FRAME;
    uint64_t at = last * CHIME__BENCH_FRAME;
    return got == i &&
           (ib - at <= 8 || memcmp(p + at + 8, f + 8, ib - at - 8) == 0);
  }
  return got == i && p[ib - 1] == (uint8_t)(i & 0xff);
}

/* A compressed row read whole from the bytes file (its u32 size, then
 * the zstd frame, or the leaf raw), decompressed into out. */
static int zrow_read(int fd, const chime__table_t *t, ZSTD_DCtx *dc, uint64_t r,
                     uint8_t *buf, uint8_t *out, uint64_t ib) {
  uint64_t off;
  uint32_t len, s;
  if (chime__tbl_file_zextent(t, (uint32_t)r, &off, &len) != 0 || len < 4 ||
      pread(fd, buf, len, (off_t)off) != (ssize_t)len)
    return -1;
  memcpy(&s, buf, 4);
  if (s == ib) {
    memcpy(out, buf + 4, ib);
    return 0;
  }
  return ZSTD_decompressDCtx(dc, out, ib, buf + 4, s) == ib ? 0 : -1;
}

static int fill(chime__table_t *t, uint64_t cap, uint64_t ib) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  uint8_t *buf = malloc(FILL * ib);
  if (buf == NULL)
    return -1;
  double t0 = chime__bench_now_s();
  uint64_t from = st.size;
  for (uint64_t i = from; i < cap; i += FILL) {
    uint32_t n = (uint32_t)(cap - i < FILL ? cap - i : FILL);
    for (uint32_t j = 0; j < n; j++)
      item(buf + j * ib, ib, i + j);
    uint64_t key;
    if (chime__table_insert(t, buf, n, NULL, &key, NULL, NULL) != 0) {
      free(buf);
      return -1;
    }
  }
  free(buf);
  double s = chime__bench_now_s() - t0;
  if (cap > from)
    fprintf(stderr,
            "filled %" PRIu64 " items (%.2f GiB) in %.1f s: %.0f MB/s\n",
            cap - from, (double)(cap - from) * ib / (1 << 30), s,
            (double)(cap - from) * ib / s / 1e6);
  else
    fprintf(stderr, "opened full from its file: %" PRIu64 " items\n", cap);
  return 0;
}

/* Batches sampled for o->seconds, each sample checked and binned. */
static int run_table(chime__table_t *t, const opts_t *o, uint64_t cap,
                     uint64_t ib, uint64_t *bins, side_t *out) {
  chime_ring_layout_t lay;
  const chime_spec_t *sp = chime__table_item_spec(t);
  if (chime_ring_layout_compute(&lay, sp, o->batch, 2) != 0)
    return -1;
  uint8_t *mem = aligned_alloc(4096, (lay.slot_bytes + 4095) / 4096 * 4096);
  if (mem == NULL)
    return -1;
  chime__ring_wslot_t ws;
  memset(&ws, 0, sizeof(ws));
  ws.base = mem;
  ws.leaf[0] = mem + lay.leaf_offset[0];
  ws.info = (chime_sample_info_t *)(mem + lay.info_offset);
  double t0 = chime__bench_now_s(), t1 = t0;
  while (t1 - t0 < o->seconds) {
    if (chime__table_sample(t, &lay, &ws, NULL) != 0) {
      free(mem);
      return -1;
    }
    for (uint32_t j = 0; j < o->batch; j++) {
      uint64_t i = chime__key_count(ws.info[j].key) - 1;
      out->bad += i >= cap ||
                  !item_ok((const uint8_t *)ws.leaf[0] + (size_t)j * ib, ib, i);
      bins[i < cap ? i * NBINS / cap : 0]++;
    }
    out->n += o->batch;
    t1 = chime__bench_now_s();
  }
  out->s += t1 - t0;
  free(mem);
  return 0;
}

/* The same draws' pattern by pread: a row at random, its bytes whole
 * (with --compress: its compressed bytes from the bytes file, then
 * decompressed, as the sampler does). */
static int run_pread(int fd, const chime__table_t *t, const opts_t *o,
                     uint64_t cap, uint64_t ib, uint64_t *rng, side_t *out) {
  size_t room = (ib + 4 + 4095) / 4096 * 4096;
  uint8_t *buf = aligned_alloc(4096, room), *raw = aligned_alloc(4096, room);
  ZSTD_DCtx *dc = ZSTD_createDCtx(); /* one for the loop, as a sampler's */
  int rc = buf == NULL || raw == NULL || dc == NULL ? -1 : 0;
  double t0 = chime__bench_now_s(), t1 = t0;
  while (rc == 0 && t1 - t0 < o->seconds) {
    for (uint32_t j = 0; rc == 0 && j < o->batch; j++) {
      uint64_t r = chime__bench_rand(rng) % cap;
      off_t at = (off_t)(CHIME__TBL_FILE_HEADER + r * ib);
      rc = o->level != 0 ? zrow_read(fd, t, dc, r, buf, raw, ib)
                         : -(pread(fd, raw, ib, at) != (ssize_t)ib);
      out->bad += rc == 0 && !item_ok(raw, ib, r);
    }
    out->n += o->batch;
    t1 = chime__bench_now_s();
  }
  out->s += t1 - t0;
  free(buf);
  free(raw);
  ZSTD_freeDCtx(dc);
  return rc;
}

/* Bytes on disk of the file at path (allocated blocks), 0 without. */
static uint64_t disk_bytes(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

/* Chi-square of the bins against uniform draws (bins of cap / NBINS rows,
 * the last ones a row more or less), and its Wilson-Hilferty z. */
static double chi_z(const uint64_t *bins, uint64_t cap, uint64_t n,
                    double *chi2) {
  double c = 0;
  for (uint64_t b = 0; b < NBINS; b++) {
    uint64_t lo = (b * cap + NBINS - 1) / NBINS;
    uint64_t hi = ((b + 1) * cap + NBINS - 1) / NBINS;
    double e = (double)n * (double)(hi - lo) / (double)cap;
    c += ((double)bins[b] - e) * ((double)bins[b] - e) / e;
  }
  *chi2 = c;
  double k = NBINS - 1;
  return (cbrt(c / k) - (1 - 2 / (9 * k))) / sqrt(2 / (9 * k));
}

static int parse(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.spec = "obs:u8[84,84,4]",
                .gib = 4,
                .seconds = 10,
                .batch = 32,
                .rounds = 3};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0) {
      o->json = 1;
      continue;
    }
    if (v == NULL)
      return -1;
    i++;
    if (strcmp(a, "--dir") == 0)
      o->dir = v;
    else if (strcmp(a, "--spec") == 0)
      o->spec = v;
    else if (strcmp(a, "--gib") == 0)
      o->gib = atof(v);
    else if (strcmp(a, "--seconds") == 0)
      o->seconds = atof(v);
    else if (strcmp(a, "--batch") == 0)
      o->batch = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(a, "--rounds") == 0)
      o->rounds = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(a, "--compress") == 0)
      o->level = atoi(v);
    else
      return -1;
  }
  return o->dir == NULL || !(o->gib > 0) || o->batch == 0 || o->rounds == 0 ? -1
                                                                            : 0;
}

/* The table's files under its data dir: the main file, or (main 0) the
 * bytes file, into buf. */
static void file_path(const chime__table_config_t *tc, int main, char *buf,
                      size_t len) {
  snprintf(buf, len, "%s/%s.%s", tc->data_dir, tc->name,
           main ? "table" : "bytes");
}

static void report(const opts_t *o, const chime__table_config_t *tc,
                   uint64_t cap, uint64_t ib, const side_t *tb,
                   const side_t *pr, double ratio, double chi2, double z) {
  double trate = tb->n / tb->s, prate = pr->n / pr->s;
  char p1[CHIME__MAX_DATA_DIR + 80], p2[CHIME__MAX_DATA_DIR + 80];
  file_path(tc, 1, p1, sizeof(p1));
  file_path(tc, 0, p2, sizeof(p2));
  uint64_t d1 = disk_bytes(p1), d2 = disk_bytes(p2);
  if (o->json) {
    printf("{\"bench\":\"bigtable\",\"items\":%" PRIu64
           ",\"item_bytes\":%" PRIu64
           ",\"table_items_per_s\":%.0f,\"pread_items_per_s\":%.0f,\"ratio\":"
           "%.3f,\"chi2\":%.1f,\"chi2_z\":%.2f,\"bad\":%" PRIu64
           ",\"rss_anon_kib\":%" PRIu64
           ",\"compress\":%d,\"table_file_disk\":%" PRIu64
           ",\"bytes_file_disk\":%" PRIu64 "}\n",
           cap, ib, trate, prate, ratio, chi2, z, tb->bad + pr->bad,
           rss_kib("RssAnon"), o->level, d1, d2);
    return;
  }
  printf("on disk: %s %.1f MB, %s %.1f MB (raw items %.2f GiB)\n", p1, d1 / 1e6,
         p2, d2 / 1e6, (double)cap * ib / (1 << 30));
  printf("table: %" PRIu64 " items of %" PRIu64 " B (%.2f GiB) in %s\n", cap,
         ib, (double)cap * ib / (1 << 30), o->dir);
  printf("sampled (uniform, batch %u): %.0f items/s, %.0f MB/s\n", o->batch,
         trate, trate * ib / 1e6);
  printf("pread loop (same rows' pattern): %.0f items/s, %.0f MB/s\n", prate,
         prate * ib / 1e6);
  printf("ratio (table / pread, median of %u rounds): %.2fx\n", o->rounds,
         ratio);
  printf("uniform: chi2 %.1f over %d bins (z %.2f); bad samples %" PRIu64 "\n",
         chi2, NBINS - 1, z, tb->bad + pr->bad);
  printf("chime-bench's own memory: RssAnon %" PRIu64 " KiB, RssFile %" PRIu64
         " KiB\n",
         rss_kib("RssAnon"), rss_kib("RssFile"));
}

int chime__bench_bigtable(int argc, char **argv) {
  opts_t o;
  chime__table_config_t tc;
  chime__table_t *t = NULL;
  char path[CHIME__MAX_DATA_DIR + 80];
  if (parse(argc, argv, &o) != 0) {
    fprintf(stderr, "usage: chime-bench bigtable --dir DIR [--gib 4] [--spec "
                    "obs:u8[84,84,4]] [--batch 32] [--seconds 10] [--rounds "
                    "3] [--compress LEVEL] [--json]\n  (one fixed-shape leaf; "
                    "--compress: Atari-like frames, the leaf compressed; run "
                    "it in a memory cgroup: scripts/bigtable.sh)\n");
    return 2;
  }
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "bigtable");
  snprintf(tc.data_dir, sizeof(tc.data_dir), "%s", o.dir);
  if (chime_spec_parse(&tc.spec, o.spec) != 0 || tc.spec.nleaves != 1 ||
      chime_spec_ragged(&tc.spec) > 0) {
    fprintf(stderr, "bigtable: --spec: one fixed-shape leaf\n");
    return 2;
  }
  uint64_t ib = chime_spec_sample_bytes(&tc.spec);
  uint64_t cap = (uint64_t)(o.gib * (double)(UINT64_C(1) << 30)) / ib;
  tc.capacity = cap;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.seed = 0; /* from the clock: each run its own draws */
  tc.compress[0] = (uint8_t)o.level;
  if (o.level != 0 &&
      (frames = malloc((size_t)NFRAMES * CHIME__BENCH_FRAME)) == NULL)
    return 1;
  if (frames != NULL)
    chime__bench_frames(frames, NFRAMES);
  double t0 = chime__bench_now_s();
  int rc = chime__table_create(&t, &tc);
  if (rc != 0) {
    fprintf(stderr, "bigtable: %s\n", chime_last_error());
    return 1;
  }
  fprintf(stderr, "table made or opened in %.3f s\n",
          chime__bench_now_s() - t0);
  int fd = -1;
  file_path(&tc, o.level == 0, path, sizeof(path));
  if (fill(t, cap, ib) != 0 || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    fprintf(stderr, "bigtable: fill or open: %s\n", strerror(errno));
    chime__table_destroy(t);
    return 1;
  }
  /* Both sides start from a cold cache: the file's pages written back and
   * dropped (a run before this one, in another cgroup, may have left them
   * cached outside this one's limit). */
  (void)fdatasync(fd);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  uint64_t *bins = calloc(NBINS, sizeof(*bins)), rng = 99;
  double *ratios = calloc(o.rounds, sizeof(*ratios));
  side_t tb = {0}, pr = {0};
  rc = bins == NULL || ratios == NULL;
  /* Alternating, so both sides meet the same cache and disk. */
  for (uint32_t r = 0; rc == 0 && r < o.rounds; r++) {
    side_t a = {0}, b = {0};
    rc = run_pread(fd, t, &o, cap, ib, &rng, &b) != 0 ||
         run_table(t, &o, cap, ib, bins, &a) != 0;
    ratios[r] = (a.n / a.s) / (b.n / b.s);
    tb.n += a.n, tb.s += a.s, tb.bad += a.bad;
    pr.n += b.n, pr.s += b.s, pr.bad += b.bad;
    fprintf(stderr, "round %u: table %.0f items/s, pread %.0f items/s: %.2fx\n",
            r, a.n / a.s, b.n / b.s, ratios[r]);
  }
  if (rc == 0) {
    double chi2, z = chi_z(bins, cap, tb.n, &chi2);
    report(&o, &tc, cap, ib, &tb, &pr,
           chime__bench_median(ratios, (int)o.rounds), chi2, z);
    rc = tb.bad + pr.bad != 0 || fabs(z) > 5;
  }
  free(bins);
  free(ratios);
  free(frames);
  close(fd);
  chime__table_destroy(t);
  return rc;
}
