/* chime-bench storage: a table whose frames are kept zstd-compressed
 * (docs/replay.md, "Compressed leaves") against libzstd itself on the same
 * frames at the same level, in one run: frames compressed per second by a
 * table's inserts (chimed compresses raw samples) over libzstd's
 * ZSTD_compressCCtx one frame a call, frames sampled per second into a
 * slot (the sampler decompresses each) over ZSTD_decompressDCtx one frame
 * a call, and bytes held per sample over raw. The same work on both sides
 * of each ratio: every frame compressed, or decompressed, once.
 * The frames are frames.h's, rendered Atari-like screens. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "bench.h"
#include "frames.h"
#include "measure.h"
#include "replay/table.h"

#define FRAME CHIME__BENCH_FRAME
#define REQUEST 100
#define BATCH 64
#define ROUNDS 3

typedef struct {
  double zc_fps, zd_fps;   /* libzstd: frames compressed, decompressed */
  double ins_fps, smp_fps; /* the table's, compressed */
  double raw_ins_fps, raw_smp_fps; /* the same table, frames raw */
  double held_per_sample, raw_per_sample, zstd_frame_bytes;
} result_t;

static double zstd_rates(const uint8_t *frames, uint32_t n, int level,
                         double *dec_fps, double *bytes_per_frame) {
  ZSTD_CCtx *c = ZSTD_createCCtx();
  ZSTD_DCtx *d = ZSTD_createDCtx();
  size_t cap = ZSTD_compressBound(FRAME);
  uint8_t *z = malloc((size_t)n * cap), *out = malloc(FRAME);
  size_t *len = malloc(n * sizeof(*len)), total = 0;
  memset(z, 0, (size_t)n * cap); /* no page faults in the timing */
  double t0 = chime__bench_now_s();
  for (uint32_t i = 0; i < n; i++) {
    /* Into one buffer, then kept, as the table packs a request. */
    len[i] = ZSTD_compressCCtx(c, out, FRAME - 1, frames + (size_t)i * FRAME,
                               FRAME, level);
    if (ZSTD_isError(len[i]))
      abort(); /* these frames always shrink */
    memcpy(z + i * cap, out, len[i]);
    total += len[i];
  }
  double comp = n / (chime__bench_now_s() - t0);
  t0 = chime__bench_now_s();
  for (uint32_t i = 0; i < n; i++)
    if (ZSTD_decompressDCtx(d, out, FRAME, z + i * cap, len[i]) != FRAME)
      abort(); /* our own frames: never */
  *dec_fps = n / (chime__bench_now_s() - t0);
  *bytes_per_frame = (double)total / n;
  free(z);
  free(out);
  free(len);
  ZSTD_freeCCtx(c);
  ZSTD_freeDCtx(d);
  return comp;
}

/* A uniform table of obs:u8[84,84], action:i32[], reward:f32[] (obs kept
 * at level, raw when level is 0): frames inserted per second, frames
 * sampled per second, bytes held and inserted per sample. */
static int table_rates(const uint8_t *samples, uint32_t n, int level,
                       double *ins_fps, double *smp_fps, double *held,
                       double *raw) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "frames");
  if (chime_spec_parse(&tc.spec, "obs:u8[84,84], action:i32[], reward:f32[]",
                       NULL, 0))
    return -1;
  tc.capacity = n;
  tc.sampler = CHIME__SAMPLER_UNIFORM;
  tc.min_size = 1;
  tc.seed = 3;
  tc.compress[0] = (uint8_t)level;
  chime__table_t *t = NULL;
  if (chime__table_create(&t, &tc))
    return -1;
  size_t sb = FRAME + 8;
  double t0 = chime__bench_now_s();
  for (uint32_t j = 0; j < n; j += REQUEST) {
    uint64_t first;
    chime__span_t sp = {samples + (size_t)j * sb, (size_t)REQUEST * sb};
    if (chime__table_insert_spans(t, &sp, 1, REQUEST, NULL, NULL, &first, NULL,
                                  NULL))
      return -1;
  }
  *ins_fps = n / (chime__bench_now_s() - t0);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  *held = (double)st.stored_bytes / n;
  *raw = (double)st.raw_bytes / n;
  chime_ring_layout_t lay;
  if (chime_ring_layout(&lay, &tc.spec, BATCH, 2, NULL, 0))
    return -1;
  uint8_t *mem = aligned_alloc(4096, (lay.slot_bytes + 4095) / 4096 * 4096);
  chime__ring_wslot_t ws;
  memset(&ws, 0, sizeof(ws));
  ws.base = mem;
  for (uint32_t l = 0; l < tc.spec.nleaves; l++)
    ws.leaf[l] = mem + lay.leaf_offset[l];
  ws.info = (chime_sample_info_t *)(mem + lay.info_offset);
  uint32_t batches = n / BATCH;
  t0 = chime__bench_now_s();
  for (uint32_t b = 0; b < batches; b++)
    if (chime__table_sample(t, &lay, &ws, NULL))
      return -1;
  *smp_fps = (double)batches * BATCH / (chime__bench_now_s() - t0);
  free(mem);
  chime__table_destroy(t);
  return 0;
}

static double best(double a, double b) {
  return a > b ? a : b;
}

int chime__bench_storage(int argc, char **argv) {
  int json = 0, level = 3;
  uint32_t n = 20000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--level") && i + 1 < argc)
      level = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--frames") && i + 1 < argc)
      n = (uint32_t)strtoul(argv[++i], NULL, 10) / REQUEST * REQUEST;
    else {
      fprintf(stderr, "usage: chime-bench storage [--json] [--level 3] "
                      "[--frames 20000]\n"
                      "  a table keeping 84x84 frames zstd-compressed vs "
                      "libzstd on the same frames\n");
      return 2;
    }
  }
  if (level < 1 || level > 22 || n < 10 * BATCH) {
    fprintf(stderr, "chime-bench storage: --level 1..22, --frames >= %d\n",
            10 * BATCH);
    return 2;
  }
  uint8_t *frames = malloc((size_t)n * FRAME);
  uint8_t *samples = malloc((size_t)n * (FRAME + 8));
  chime__bench_frames(frames, n);
  for (uint32_t k = 0; k < n; k++) {
    uint8_t *s = samples + (size_t)k * (FRAME + 8);
    memcpy(s, frames + (size_t)k * FRAME, FRAME);
    int32_t action = (int32_t)(k % 6);
    float reward = (float)(k % 50 == 0);
    memcpy(s + FRAME, &action, 4);
    memcpy(s + FRAME + 4, &reward, 4);
  }
  /* Each figure the best of ROUNDS turns, the sides taking turns. */
  result_t r;
  memset(&r, 0, sizeof(r));
  for (int round = 0; round < ROUNDS; round++) {
    double zd, ins, smp, rins, rsmp, rheld, rraw;
    if (table_rates(samples, n, level, &ins, &smp, &r.held_per_sample,
                    &r.raw_per_sample) ||
        table_rates(samples, n, 0, &rins, &rsmp, &rheld, &rraw)) {
      fprintf(stderr, "chime-bench storage: the table failed\n");
      return 1;
    }
    double zc = zstd_rates(frames, n, level, &zd, &r.zstd_frame_bytes);
    r.zc_fps = best(r.zc_fps, zc);
    r.zd_fps = best(r.zd_fps, zd);
    r.ins_fps = best(r.ins_fps, ins);
    r.smp_fps = best(r.smp_fps, smp);
    r.raw_ins_fps = best(r.raw_ins_fps, rins);
    r.raw_smp_fps = best(r.raw_smp_fps, rsmp);
  }
  double held_ratio = r.held_per_sample / r.raw_per_sample;
  /* A sample holds the frame's stored size (4 B), action and reward. */
  double frame_held = r.held_per_sample - 12;
  double vs_zstd = frame_held / r.zstd_frame_bytes;
  if (json)
    printf("{\"bench\":\"storage\",\"level\":%d,\"frames\":%" PRIu32
           ",\"raw_per_sample\":%.1f,\"held_per_sample\":%.1f,"
           "\"zstd_frame_bytes\":%.1f,\"held_frame_vs_zstd\":%.3f,"
           "\"insert_vs_zstd_compress\":%.3f,"
           "\"sample_vs_zstd_decompress\":%.3f,"
           "\"sample_vs_raw_table\":%.3f,\"zstd_compress_gbs\":%.3f,"
           "\"zstd_decompress_gbs\":%.3f}\n",
           level, n, r.raw_per_sample, r.held_per_sample, r.zstd_frame_bytes,
           vs_zstd, r.ins_fps / r.zc_fps, r.smp_fps / r.zd_fps,
           r.smp_fps / r.raw_smp_fps, r.zc_fps * FRAME / 1e9,
           r.zd_fps * FRAME / 1e9);
  else
    printf("storage: %" PRIu32 " rendered 84x84 frames, zstd level %d\n"
           "  held per sample %.1f B of %.1f raw (1/%.0f); the frame %.1f B, "
           "libzstd's %.1f B (%.3fx)\n"
           "  insert: %.0f frames/s, libzstd compress %.0f frames/s "
           "(%.2f GB/s): %.2fx\n"
           "  sample: %.0f frames/s, libzstd decompress %.0f frames/s "
           "(%.2f GB/s): %.2fx (a raw table: %.0f frames/s)\n",
           n, level, r.held_per_sample, r.raw_per_sample, 1 / held_ratio,
           frame_held, r.zstd_frame_bytes, vs_zstd, r.ins_fps, r.zc_fps,
           r.zc_fps * FRAME / 1e9, r.ins_fps / r.zc_fps, r.smp_fps, r.zd_fps,
           r.zd_fps * FRAME / 1e9, r.smp_fps / r.zd_fps, r.raw_smp_fps);
  free(frames);
  free(samples);
  return 0;
}
