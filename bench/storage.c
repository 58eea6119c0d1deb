/* chime-bench storage: a table whose frames are kept zstd-compressed
 * (docs/replay.md, "Compressed leaves") against libzstd itself on the same
 * frames at the same level, in one run: frames compressed per second by a
 * table's inserts (chimed compresses raw samples) over libzstd's
 * ZSTD_compressCCtx one frame a call, frames sampled per second into a
 * slot (the sampler decompresses each) over ZSTD_decompressDCtx one frame
 * a call, and bytes held per sample over raw. The same work on both sides
 * of each ratio: every frame compressed, or decompressed, once.
 *
 * --stacked: the Atari recipe of docs/replay.md ("Frames stored once"): a
 * sequence table of single frames as steps, obs compressed, the frame
 * stack of 4 a window over them (sequence_length 4, stride 1), against
 * the same frames raw stacked 4 to a transition, libzstd's frames, and
 * libzstd's decompression (a window is 4 frames decompressed).

 * The frames are frames.h's, rendered Atari-like screens. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "bench.h"
#include "frames.h"
#include "measure.h"
#include "common/spec.h"
#include "replay/table.h"
#include "replay/zleaf.h"
#include "replay/ztail.h"
#include "ring/extents.h"

#define FRAME CHIME__BENCH_FRAME
#define REQUEST 100
#define BATCH 64
#define ROUNDS 3

typedef struct {
  double zc_fps, zd_fps;   /* libzstd: frames compressed, decompressed */
  double ins_fps, smp_fps; /* the table's, compressed */
  double raw_ins_fps, raw_smp_fps; /* the same table, frames raw */
  double held_per_sample, raw_per_sample, zstd_frame_bytes;
  double wire[3]; /* stream mode a batch: sent, stored, its info */
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

/* A uniform table `name` of obs:u8[84,84], action:i32[], reward:f32[]
 * (obs kept at level, raw when level is 0), seed 3; the size is the
 * caller's. */
static int frames_config(chime__table_config_t *tc, const char *name,
                         int level) {
  memset(tc, 0, sizeof(*tc));
  snprintf(tc->name, sizeof(tc->name), "%s", name);
  if (chime_spec_parse(&tc->spec, "obs:u8[84,84], action:i32[], reward:f32[]"))
    return -1;
  tc->sampler = CHIME__SELECTOR_UNIFORM;
  tc->min_size = 1;
  tc->seed = 3;
  tc->compress[0] = (uint8_t)level;
  return 0;
}

/* batches batches of BATCH items of t sampled into a slot in plain memory:
 * items per second, or -1. */
static double sample_all(chime__table_t *t, uint32_t batches) {
  const chime_spec_t *sp = chime__table_item_spec(t);
  chime_ring_layout_t lay;
  chime__ring_wslot_t ws;
  if (chime_ring_layout_compute(&lay, sp, BATCH, 2))
    return -1;
  uint8_t *mem = aligned_alloc(4096, (lay.slot_bytes + 4095) / 4096 * 4096);
  if (mem == NULL)
    return -1;
  memset(mem, 0, lay.slot_bytes);
  memset(&ws, 0, sizeof(ws));
  ws.base = mem;
  for (uint32_t l = 0; l < sp->nleaves; l++)
    ws.leaf[l] = mem + lay.leaf_offset[l];
  ws.info = (chime_sample_info_t *)(mem + lay.info_offset);
  double t0 = chime__bench_now_s(), rate = -1;
  uint32_t b = 0;
  while (b < batches && chime__table_sample(t, &lay, &ws, NULL) == 0)
    b++;
  if (b == batches)
    rate = (double)batches * BATCH / (chime__bench_now_s() - t0);
  free(mem);
  return rate;
}

/* n samples into t in requests of REQUEST (episodes: as one writer's
 * steps, an episode a game of 500): samples per second, or -1. */
static double insert_all(chime__table_t *t, const uint8_t *samples, uint32_t n,
                         int episodes) {
  size_t sb = FRAME + 8;
  double t0 = chime__bench_now_s();
  for (uint32_t j = 0; j < n; j += REQUEST) {
    uint64_t first;
    chime__span_t sp = {samples + (size_t)j * sb, (size_t)REQUEST * sb};
    chime__dedupe_req_t dq = {.writer = 1, .seq = j / REQUEST + 1};
    dq.end_episode = (j + REQUEST) % 500 == 0;
    if (chime__table_insert_spans(t, &sp, 1, REQUEST, NULL, NULL, &first, NULL,
                                  episodes ? &dq : NULL))
      return -1;
  }
  return n / (chime__bench_now_s() - t0);
}

/* The frames table (frames_config, capacity n): frames inserted per
 * second, frames sampled per second, bytes held and inserted per sample. */
/* Stream mode's bytes per batch: the table sampled into a slot that holds
 * obs as it is stored (chime__spec_framed_steps, as chimed's ring for a
 * stream-mode learner; steps: a sequence table's T, its windows' steps
 * stored), and the bytes the sender sends of it (its extents, the tail
 * packed: the frames, a window's step sizes, the raw leaves, the offsets
 * and the info), against the batch's samples as stored (frames and raw
 * leaves) and the info. */
static int wire_bytes(chime__table_t *t, uint32_t steps, uint32_t batches,
                      double *wire, double *stored, double *info) {
  static const uint8_t framed[CHIME_MAX_LEAVES] = {1};
  const chime_spec_t *spec = chime__table_item_spec(t);
  chime_spec_t ws;
  chime_ring_layout_t lay;
  uint64_t other = 0; /* a sample's raw leaves */
  for (uint32_t l = 1; l < spec->nleaves; l++)
    other += chime_leaf_bytes(&spec->leaves[l]);
  if (chime__spec_framed_steps(&ws, spec, framed, steps) ||
      chime_ring_layout_compute(&lay, &ws, BATCH, 2))
    return -1;
  uint8_t *mem = aligned_alloc(4096, (lay.slot_bytes + 4095) / 4096 * 4096);
  chime__ring_wslot_t w;
  memset(&w, 0, sizeof(w));
  w.base = mem;
  for (uint32_t l = 0; l < ws.nleaves; l++) {
    w.leaf[l] = mem + lay.leaf_offset[l];
    if (lay.offsets_offset[l] != 0)
      w.offsets[l] = (int64_t *)(mem + lay.offsets_offset[l]);
  }
  w.info = (chime_sample_info_t *)(mem + lay.info_offset);
  uint64_t sent = 0, held = 0;
  uint64_t tail = chime__slot_tail(&lay, &ws);
  size_t n = (size_t)(chime__slot_send_bytes(&lay) - tail), packed = 0;
  uint8_t *zt = malloc(chime__ztail_bound(n)), *scratch = malloc(n);
  int rc = zt == NULL || scratch == NULL ? -1 : 0;
  for (uint32_t b = 0; rc == 0 && b < batches; b++) {
    chime__extents_t x;
    if (chime__table_sample(t, &lay, &w, NULL) ||
        chime__slot_extents(&lay, &ws, mem, &x, NULL, 0) ||
        chime__ztail_pack(zt, mem + tail, n,
                          BATCH * sizeof(chime_sample_info_t), scratch,
                          &packed)) {
      rc = -1;
      break;
    }
    /* The tail travels packed (replay/ztail.h), as chimed sends it. */
    sent += x.total - n + packed;
    held += (uint64_t)w.offsets[0][BATCH] - (uint64_t)BATCH * 4 * steps +
            BATCH * other;
  }
  free(mem);
  free(zt);
  free(scratch);
  if (rc != 0)
    return -1;
  *wire = (double)sent / batches;
  *stored = (double)held / batches;
  *info = BATCH * sizeof(chime_sample_info_t);
  return 0;
}

static int table_rates(const uint8_t *samples, uint32_t n, int level,
                       double *ins_fps, double *smp_fps, double *held,
                       double *raw, double *wire) {
  chime__table_config_t tc;
  if (frames_config(&tc, "frames", level))
    return -1;
  tc.capacity = n;
  chime__table_t *t = NULL;
  if (chime__table_create(&t, &tc) ||
      (*ins_fps = insert_all(t, samples, n, 0)) < 0)
    return -1;
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  *held = (double)st.stored_bytes / n;
  *raw = (double)st.raw_bytes / n;
  *smp_fps = sample_all(t, n / BATCH);
  int rc = *smp_fps < 0 ? -1 : 0;
  if (rc == 0 && wire != NULL)
    rc = wire_bytes(t, 0, n / BATCH < 50 ? n / BATCH : 50, &wire[0], &wire[1],
                    &wire[2]);
  chime__table_destroy(t);
  return rc;
}

/* This process's resident bytes. */
static double rss_bytes(void) {
  unsigned long size = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return 0;
  if (fscanf(f, "%lu %lu", &size, &res) != 2)
    res = 0;
  fclose(f);
  return (double)res * (double)sysconf(_SC_PAGESIZE);
}

typedef struct {
  double ins_fps, win_fps; /* steps inserted, windows sampled per second */
  double windows, steps;   /* held */
  double stored, frames_z; /* stats' stored bytes; the frames' of them */
  double rss;              /* the process's growth while it filled */
  double wire[3];          /* stream mode a batch: sent, stored, its info */
} stacked_t;

/* The Atari recipe: a uniform sequence table of obs:u8[84,84],
 * action:i32[], reward:f32[] steps (obs kept at level, raw at 0), windows
 * of 4 every step, an episode a game (500 frames); n steps in requests of
 * REQUEST, then windows sampled until 4 per frame were (each frame
 * decompressed about once, as libzstd's side does). */
static int stacked_rates(const uint8_t *samples, uint32_t n, int level,
                         stacked_t *out) {
  chime__table_config_t tc;
  if (frames_config(&tc, "stacked", level))
    return -1;
  tc.capacity_steps = n;
  tc.sequence_length = 4;
  tc.stride = 1;
  tc.initial_priority = 1.0;
  chime__table_t *t = NULL;
  double rss0 = rss_bytes();
  if (chime__table_create(&t, &tc) ||
      (out->ins_fps = insert_all(t, samples, n, 1)) < 0)
    return -1;
  out->rss = rss_bytes() - rss0;
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  out->windows = (double)st.size;
  out->steps = (double)st.steps;
  out->stored = (double)st.stored_bytes;
  out->frames_z = (double)(st.stored_bytes - st.steps * 8); /* but a, r */
  out->win_fps = sample_all(t, n / (4 * BATCH));
  int rc = out->win_fps < 0 ? -1 : 0;
  memset(out->wire, 0, sizeof(out->wire));
  if (rc == 0 && level > 0)
    rc = wire_bytes(t, 4, 50, &out->wire[0], &out->wire[1], &out->wire[2]);
  chime__table_destroy(t);
  return rc;
}

static double best(double a, double b) {
  return a > b ? a : b;
}

/* --stacked: the recipe's figures, each rate the best of ROUNDS turns (the
 * sides taking turns), the bytes from the first turn. */
static int stacked(const uint8_t *frames, const uint8_t *samples, uint32_t n,
                   int level, int json) {
  /* This thread's compression context made before memory is measured. */
  uint8_t *tmp = malloc(FRAME);
  size_t k;
  if (tmp == NULL || chime__zleaf_compress(tmp, frames, FRAME, level, &k))
    return 1;
  free(tmp);
  stacked_t z, r, zr, rr;
  double zd_fps = 0, zbytes = 0, zd;
  for (int round = 0; round < ROUNDS; round++) {
    if (stacked_rates(samples, n, level, &zr) ||
        stacked_rates(samples, n, 0, &rr)) {
      fprintf(stderr, "chime-bench storage: the table failed\n");
      return 1;
    }
    if (round == 0) {
      z = zr;
      r = rr;
    }
    z.ins_fps = best(z.ins_fps, zr.ins_fps);
    z.win_fps = best(z.win_fps, zr.win_fps);
    r.win_fps = best(r.win_fps, rr.win_fps);
    zstd_rates(frames, n, level, &zd, &zbytes);
    zd_fps = best(zd_fps, zd);
  }
  double raw = 4.0 * FRAME + 8; /* a stacked transition: 4 frames, a, r */
  double held = z.stored / z.windows, mem = z.rss / z.windows;
  double rheld = r.stored / r.windows, rmem = r.rss / r.windows;
  double frame = z.frames_z / z.steps; /* its stored size and bytes */
  double smp = z.win_fps * 4 / zd_fps; /* frames into slots vs libzstd's */
  if (json)
    printf("{\"bench\":\"storage_stacked\",\"level\":%d,\"steps\":%.0f,"
           "\"windows\":%.0f,\"raw_per_transition\":%.0f,"
           "\"held_per_transition\":%.1f,\"rss_per_transition\":%.1f,"
           "\"raw_seq_held_per_transition\":%.1f,"
           "\"raw_seq_rss_per_transition\":%.1f,\"frame_held\":%.1f,"
           "\"zstd_frame_bytes\":%.1f,\"frame_vs_zstd\":%.3f,"
           "\"windows_per_s\":%.0f,\"raw_windows_per_s\":%.0f,"
           "\"zstd_decompress_fps\":%.0f,\"sample_vs_zstd_decompress\":%.3f,"
           "\"insert_fps\":%.0f,\"wire_per_batch\":%.0f,"
           "\"stored_per_batch\":%.0f,\"wire_vs_stored\":%.3f}\n",
           level, z.steps, z.windows, raw, held, mem, rheld, rmem, frame,
           zbytes, frame / zbytes, z.win_fps, r.win_fps, zd_fps, smp, z.ins_fps,
           z.wire[0], z.wire[1], z.wire[0] / z.wire[1]);
  else
    printf("storage --stacked: %.0f rendered 84x84 frames as steps, windows "
           "of 4 (stride 1), zstd level %d\n"
           "  a stacked transition raw: %.0f B (4 frames, action, reward)\n"
           "  held per transition: %.1f B of data (1/%.0f of raw), %.1f B of "
           "the process's memory (1/%.0f)\n"
           "  (frames stored once, raw: %.1f B of data, %.1f B of memory)\n"
           "  a frame held: %.1f B (its size and frame), libzstd's frame "
           "%.1f B: %.3fx\n"
           "  sample: %.0f windows/s (%.0f frames/s), libzstd decompress %.0f "
           "frames/s: %.2fx (raw windows: %.0f/s)\n"
           "  insert: %.0f steps/s\n"
           "  stream mode: %.0f B a batch of %d windows on the wire, their "
           "steps as stored %.0f B (%.3fx; raw %.0f B)\n",
           z.steps, level, raw, held, raw / held, mem, raw / mem, rheld, rmem,
           frame, zbytes, frame / zbytes, z.win_fps, z.win_fps * 4, zd_fps, smp,
           r.win_fps, z.ins_fps, z.wire[0], BATCH, z.wire[1],
           z.wire[0] / z.wire[1], BATCH * raw);
  return 0;
}

int chime__bench_storage(int argc, char **argv) {
  int json = 0, level = 3, stack = 0;
  uint32_t n = 20000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--stacked"))
      stack = 1;
    else if (!strcmp(argv[i], "--level") && i + 1 < argc)
      level = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--frames") && i + 1 < argc)
      n = (uint32_t)strtoul(argv[++i], NULL, 10) / REQUEST * REQUEST;
    else {
      fprintf(stderr, "usage: chime-bench storage [--json] [--level 3] "
                      "[--frames 20000] [--stacked]\n"
                      "  a table keeping 84x84 frames zstd-compressed vs "
                      "libzstd on the same frames\n"
                      "  --stacked: frames as sequence steps, the stack of 4 "
                      "a window over them\n");
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
  if (stack) {
    int rc = stacked(frames, samples, n, level, json);
    free(frames);
    free(samples);
    return rc;
  }
  /* Each figure the best of ROUNDS turns, the sides taking turns. */
  result_t r;
  memset(&r, 0, sizeof(r));
  for (int round = 0; round < ROUNDS; round++) {
    double zd, ins, smp, rins, rsmp, rheld, rraw;
    if (table_rates(samples, n, level, &ins, &smp, &r.held_per_sample,
                    &r.raw_per_sample, r.wire) ||
        table_rates(samples, n, 0, &rins, &rsmp, &rheld, &rraw, NULL)) {
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
  /* Stream mode: a batch's bytes sent over its samples as stored, and
   * over those and the sample info every batch carries. */
  double wire_vs_stored = r.wire[0] / r.wire[1];
  double wire_vs_with_info = r.wire[0] / (r.wire[1] + r.wire[2]);
  if (json)
    printf("{\"bench\":\"storage\",\"level\":%d,\"frames\":%" PRIu32
           ",\"raw_per_sample\":%.1f,\"held_per_sample\":%.1f,"
           "\"zstd_frame_bytes\":%.1f,\"held_frame_vs_zstd\":%.3f,"
           "\"insert_vs_zstd_compress\":%.3f,"
           "\"sample_vs_zstd_decompress\":%.3f,"
           "\"sample_vs_raw_table\":%.3f,\"zstd_compress_gbs\":%.3f,"
           "\"zstd_decompress_gbs\":%.3f,\"wire_per_batch\":%.0f,"
           "\"stored_per_batch\":%.0f,\"wire_vs_stored\":%.3f,"
           "\"wire_vs_stored_and_info\":%.3f,\"wire_vs_raw\":%.4f}\n",
           level, n, r.raw_per_sample, r.held_per_sample, r.zstd_frame_bytes,
           vs_zstd, r.ins_fps / r.zc_fps, r.smp_fps / r.zd_fps,
           r.smp_fps / r.raw_smp_fps, r.zc_fps * FRAME / 1e9,
           r.zd_fps * FRAME / 1e9, r.wire[0], r.wire[1], wire_vs_stored,
           wire_vs_with_info, r.wire[0] / (BATCH * r.raw_per_sample));
  else
    printf("storage: %" PRIu32 " rendered 84x84 frames, zstd level %d\n"
           "  held per sample %.1f B of %.1f raw (1/%.0f); the frame %.1f B, "
           "libzstd's %.1f B (%.3fx)\n"
           "  insert: %.0f frames/s, libzstd compress %.0f frames/s "
           "(%.2f GB/s): %.2fx\n"
           "  sample: %.0f frames/s, libzstd decompress %.0f frames/s "
           "(%.2f GB/s): %.2fx (a raw table: %.0f frames/s)\n"
           "  stream mode: %.0f B a batch of %d on the wire, its samples as "
           "stored %.0f B (%.3fx; %.3fx of those and the sample info)\n",
           n, level, r.held_per_sample, r.raw_per_sample, 1 / held_ratio,
           frame_held, r.zstd_frame_bytes, vs_zstd, r.ins_fps, r.zc_fps,
           r.zc_fps * FRAME / 1e9, r.ins_fps / r.zc_fps, r.smp_fps, r.zd_fps,
           r.zd_fps * FRAME / 1e9, r.smp_fps / r.zd_fps, r.raw_smp_fps,
           r.wire[0], BATCH, r.wire[1], wire_vs_stored, wire_vs_with_info);
  free(frames);
  free(samples);
  return 0;
}
