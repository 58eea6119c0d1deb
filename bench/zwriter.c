/* chime-bench zwriter: writers into a table that keeps its frames
 * zstd-compressed (docs/replay.md, "Compressed leaves"), against libzstd
 * compressing the same frames at the same level on one thread, in one run:
 * frames per second through a writer that compresses before sending
 * (chimed checks each frame and keeps it), through a writer that sends
 * raw (chimed compresses), and through a writer into the same table
 * uncompressed; and the bytes each put on the insert wire per sample
 * (chime_writer_bytes_sent). A writer's rate is timed from its first
 * append until every sample is acked (in the table), against chimed from
 * the same build on 127.0.0.1; libzstd's is ZSTD_compressCCtx one frame a
 * call. Each figure the best of ROUNDS turns, the sides taking turns.
 *
 * The frames are frames.h's, rendered Atari-like screens. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "bench.h"
#include "chime/chime.h"
#include "frames.h"
#include "measure.h"
#include "spawn.h"

#define FRAME CHIME__BENCH_FRAME
#define SAMPLE (FRAME + 8) /* obs, action:i32, reward:f32 */
#define ROUNDS 3

/* This thread's CPU seconds: what a writer's caller spends (the other
 * processes of a busy machine take wall time, not this). */
static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* libzstd alone: frames compressed per second, one frame a call, and CPU
 * per frame (us). */
static double zstd_fps(const uint8_t *frames, uint32_t n, int level,
                       double *us) {
  ZSTD_CCtx *c = ZSTD_createCCtx();
  uint8_t *out = malloc(FRAME);
  if (c == NULL || out == NULL)
    abort();
  double t0 = chime__bench_now_s(), c0 = thread_cpu_s();
  for (uint32_t i = 0; i < n; i++)
    if (ZSTD_isError(ZSTD_compressCCtx(
            c, out, FRAME - 1, frames + (size_t)i * FRAME, FRAME, level)))
      abort(); /* these frames always shrink */
  double fps = n / (chime__bench_now_s() - t0);
  *us = (thread_cpu_s() - c0) / n * 1e6;
  free(out);
  ZSTD_freeCCtx(c);
  return fps;
}

/* One writer (compress on or off) of the n samples into table: frames per
 * second until all are acked, the appending thread's CPU per frame (us;
 * the writer does its work there), and bytes it sent per sample. */
static int writer_run(const char *addr, const char *table, int compress,
                      const uint8_t *samples, uint32_t n, double *fps,
                      double *us, double *bytes) {
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.compress = compress;
  int rc = chime_client_create(&c, addr, NULL);
  if (rc == 0)
    rc = chime_writer_open(&w, c, table, &o);
  double t0 = chime__bench_now_s(), c0 = thread_cpu_s();
  for (uint32_t i = 0; i < n && rc == 0; i++)
    rc = chime_writer_append(w, samples + (size_t)i * SAMPLE, SAMPLE, 1.0);
  if (rc == 0)
    rc = chime_writer_flush(w);
  double dt = chime__bench_now_s() - t0;
  double cpu = thread_cpu_s() - c0;
  if (rc == 0 && chime_writer_acked(w) != n)
    rc = CHIME_EPROTO;
  if (rc == 0) {
    *fps = n / dt;
    *us = cpu / n * 1e6;
    *bytes = (double)chime_writer_bytes_sent(w) / n;
  } else {
    fprintf(stderr, "chime-bench zwriter: %s: %s\n", table, chime_last_error());
  }
  int closed = chime_writer_close(w);
  chime_client_destroy(c);
  return rc ? rc : closed;
}

static double best(double a, double b) {
  return a > b ? a : b;
}

static double least(double a, double b) {
  return a > 0 && a < b ? a : b;
}

/* The writers' figures: compressing, raw into the compressed table, raw
 * into a raw table (frames per second, the best turn; the appending
 * thread's CPU per frame, the least; bytes sent per sample), and
 * libzstd's. */
typedef struct {
  double zstd, zw, rz, raw;
  double zstd_us, zw_us, rz_us, raw_us;
  double zw_bytes, rz_bytes, raw_bytes;
} zw_result_t;

/* only: one writer's ("compressing", "raw", "uncompressed"; NULL: all). */
static int run(const char *addr, const uint8_t *frames, const uint8_t *samples,
               uint32_t n, int level, const char *only, zw_result_t *r) {
  memset(r, 0, sizeof(*r));
  for (int round = 0; round < ROUNDS; round++) {
    double zw = 0, rz = 0, raw = 0, zw_us = 0, rz_us = 0, raw_us = 0, z_us;
    int rc = 0;
    if (only == NULL || !strcmp(only, "compressing"))
      rc = writer_run(addr, "zw", 1, samples, n, &zw, &zw_us, &r->zw_bytes);
    if (rc == 0 && (only == NULL || !strcmp(only, "raw")))
      rc = writer_run(addr, "zw", 0, samples, n, &rz, &rz_us, &r->rz_bytes);
    if (rc == 0 && (only == NULL || !strcmp(only, "uncompressed")))
      rc = writer_run(addr, "raw", 1, samples, n, &raw, &raw_us, &r->raw_bytes);
    if (rc)
      return rc;
    r->zstd = best(r->zstd, zstd_fps(frames, n, level, &z_us));
    r->zw = best(r->zw, zw);
    r->rz = best(r->rz, rz);
    r->raw = best(r->raw, raw);
    r->zstd_us = least(r->zstd_us, z_us);
    r->zw_us = least(r->zw_us, zw_us);
    r->rz_us = least(r->rz_us, rz_us);
    r->raw_us = least(r->raw_us, raw_us);
  }
  return 0;
}

int chime__bench_zwriter(int argc, char **argv) {
  int json = 0, level = 3;
  uint32_t n = 20000;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--level") && i + 1 < argc)
      level = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--frames") && i + 1 < argc)
      n = (uint32_t)strtoul(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: chime-bench zwriter [--json] [--level 3] "
                      "[--frames 20000]\n"
                      "       [--only compressing|raw|uncompressed]\n"
                      "  writers of 84x84 frames into a table that keeps them "
                      "zstd-compressed vs libzstd\n");
      return 2;
    }
  }
  if (level < 1 || level > 22 || n < 1000 || n > 1000000) {
    fprintf(stderr, "chime-bench zwriter: --level 1..22, --frames "
                    "1000..1000000\n");
    return 2;
  }
  uint8_t *frames = malloc((size_t)n * FRAME);
  uint8_t *samples = malloc((size_t)n * SAMPLE);
  if (frames == NULL || samples == NULL)
    abort();
  chime__bench_frames(frames, n);
  for (uint32_t k = 0; k < n; k++) {
    uint8_t *s = samples + (size_t)k * SAMPLE;
    memcpy(s, frames + (size_t)k * FRAME, FRAME);
    int32_t action = (int32_t)(k % 6);
    float reward = (float)(k % 50 == 0);
    memcpy(s + FRAME, &action, 4);
    memcpy(s + FRAME + 4, &reward, 4);
  }
  /* No stream: nothing samples, the tables only take
   * inserts (the oldest leave once full). */
  char config[1024];
  snprintf(config, sizeof(config),
           "{\"tables\": [\n"
           "  {\"name\": \"zw\", \"spec\": \"obs:u8[84,84], action:i32[], "
           "reward:f32[]\", \"capacity\": %" PRIu32 ", \"min_size\": %" PRIu32
           ", \"sampler\": \"uniform\", \"compress\": {\"obs\": %d}},\n"
           "  {\"name\": \"raw\", \"spec\": \"obs:u8[84,84], action:i32[], "
           "reward:f32[]\", \"capacity\": %" PRIu32 ", \"min_size\": %" PRIu32
           ", \"sampler\": \"uniform\"}]}\n",
           n, n, level, n, n);
  chime__bench_child_t chimed;
  zw_result_t r;
  int rc = chime__bench_chimed_start(&chimed, config);
  if (rc == 0)
    rc = run(chimed.addr, frames, samples, n, level, only, &r);
  rc = chime__bench_chimed_stop(&chimed, rc, "chime-bench zwriter", "");
  free(frames);
  free(samples);
  if (rc)
    return 1;
  if (json)
    printf("{\"bench\":\"zwriter\",\"level\":%d,\"frames\":%" PRIu32
           ",\"zstd_compress_fps\":%.0f,\"compressing_writer_fps\":%.0f,"
           "\"compressing_writer_vs_zstd\":%.3f,\"raw_writer_fps\":%.0f,"
           "\"raw_writer_vs_zstd\":%.3f,\"raw_table_writer_fps\":%.0f,"
           "\"zstd_us\":%.2f,\"compressing_writer_us\":%.2f,"
           "\"raw_writer_us\":%.2f,\"raw_table_writer_us\":%.2f,"
           "\"wire_bytes_compressing\":%.1f,\"wire_bytes_raw\":%.1f,"
           "\"wire_bytes_raw_table\":%.1f}\n",
           level, n, r.zstd, r.zw, r.zw / r.zstd, r.rz, r.rz / r.zstd, r.raw,
           r.zstd_us, r.zw_us, r.rz_us, r.raw_us, r.zw_bytes, r.rz_bytes,
           r.raw_bytes);
  else
    printf("zwriter: %" PRIu32 " rendered 84x84 frames, zstd level %d\n"
           "  libzstd compress: %.0f frames/s (%.2f GB/s), %.2f us CPU a "
           "frame\n"
           "  writer compressing: %.0f frames/s: %.2fx libzstd; %.2f us CPU "
           "a frame (%.2fx); %.1f B on the wire a sample\n"
           "  writer raw, chimed compressing: %.0f frames/s: %.2fx "
           "libzstd; %.2f us CPU a frame; %.1f B a sample\n"
           "  writer into the table uncompressed: %.0f frames/s; %.2f us "
           "CPU a frame; %.1f B a sample\n",
           n, level, r.zstd, r.zstd * FRAME / 1e9, r.zstd_us, r.zw,
           r.zw / r.zstd, r.zw_us, r.zstd_us / r.zw_us, r.zw_bytes, r.rz,
           r.rz / r.zstd, r.rz_us, r.rz_bytes, r.raw, r.raw_us, r.raw_bytes);
  return 0;
}
