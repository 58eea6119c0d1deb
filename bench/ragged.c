/* chime-bench ragged: a table of ragged leaves alone (the replay engine,
 * no gRPC), rollouts of a long-tailed length (500 / sqrt(u) tokens, cut at
 * 8,192: mean about 1,000), i32 tokens and f32 logprobs sharing the
 * length. In one run: the bytes the table holds (the allocator's) and the
 * bytes a batch moves into a slot (values and offsets), each over the
 * bytes used; and the used bytes per second a uniform sampler delivers
 * into a slot, over a fixed-shape table of as many items whose samples are
 * the mean used size (the same used bytes a batch), in turns with it, per
 * CPU second of the sampling thread (steadier than wall time on a shared
 * machine; the sampling is one thread). What a stream-mode batch sends
 * (its extents, as chimed's sender computes them) over the bytes used is
 * printed too, and what the slot's prefix would be. On a shared machine
 * the median of the rounds is the figure to read. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "measure.h"
#include "ragged.h"
#include "replay/table.h"
#include "ring/extents.h"
#include "ring/producer.h"

#define BOUND 8192
#define MAX_ROUNDS 64

typedef chime__bench_slot_t slot_t;

int chime__bench_slot_make(slot_t *s, const chime__table_t *t, uint32_t batch) {
  const chime_spec_t *sp = chime__table_item_spec(t);
  memset(s, 0, sizeof(*s));
  if (chime_ring_layout_compute(&s->lay, sp, batch, 2) != 0 ||
      (s->mem = aligned_alloc(4096, s->lay.slot_bytes)) == NULL)
    return -1;
  memset(s->mem, 0, s->lay.slot_bytes); /* touched, as a ring's slot is */
  s->ws.base = s->mem;
  for (uint32_t l = 0; l < sp->nleaves; l++) {
    s->ws.leaf[l] = s->mem + s->lay.leaf_offset[l];
    if (sp->leaves[l].ragged)
      s->ws.offsets[l] = (int64_t *)(s->mem + s->lay.offsets_offset[l]);
  }
  s->ws.info = (chime_sample_info_t *)(s->mem + s->lay.info_offset);
  return 0;
}

int chime__bench_uniform_config(chime__table_config_t *tc, const char *spec,
                                uint64_t items) {
  memset(tc, 0, sizeof(*tc));
  snprintf(tc->name, sizeof(tc->name), "bench");
  tc->capacity = items;
  tc->sampler = CHIME__SELECTOR_UNIFORM;
  tc->min_size = 1;
  tc->seed = 12345;
  return chime_spec_parse(&tc->spec, spec) != 0 ? -1 : 0;
}

static chime__table_t *make_table(const char *spec, uint64_t items) {
  chime__table_config_t tc;
  chime__table_t *t = NULL;
  if (chime__bench_uniform_config(&tc, spec, items) != 0)
    return NULL;
  return chime__table_create(&t, &tc) == 0 ? t : NULL;
}

uint32_t chime__bench_rollout_len(uint64_t *seed) {
  double u = ((double)(chime__bench_rand(seed) >> 11) + 1) * 0x1p-53;
  double v = 500.0 / sqrt(u);
  return v > BOUND ? BOUND : (uint32_t)v;
}

/* Samples `batches` batches; the slot's used bytes (values) summed, and
 * what stream mode sends of each: the extents chimed's sender sends
 * (chime__slot_extents, the very function it uses; computed on the
 * sampler's thread there too, so counted in its time here). */
static int run(chime__table_t *t, slot_t *s, int ragged, uint32_t batches,
               uint64_t fixed_bytes, double *secs, uint64_t *used,
               uint64_t *moved, uint64_t *sent) {
  atomic_int stop = 0;
  const chime_spec_t *spec = chime__table_item_spec(t);
  chime__extents_t ext;
  double t0 = chime__bench_cpu_s(0);
  for (uint32_t i = 0; i < batches; i++) {
    if (chime__table_sample(t, &s->lay, &s->ws, &stop) != 0 ||
        chime__slot_extents(&s->lay, spec, s->mem, &ext, NULL, 0) != 0)
      return -1;
    *sent += ext.total;
    uint32_t B = s->lay.batch_size;
    if (ragged) {
      uint64_t rows = (uint64_t)s->ws.offsets[0][B];
      *used += rows * 8;                              /* tokens and logprobs */
      *moved += rows * 8 + 2 * (uint64_t)(B + 1) * 8; /* and offsets */
    } else {
      *used += (uint64_t)B * fixed_bytes;
      *moved += (uint64_t)B * fixed_bytes;
    }
  }
  *secs += chime__bench_cpu_s(0) - t0;
  return 0;
}

int chime__bench_rag_opts(int argc, char **argv, chime__bench_rag_opts_t *o,
                          int groups) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      o->json = 1;
    else if (!strcmp(argv[i], "--items") && i + 1 < argc)
      o->items = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      o->batch = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      o->rounds = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (groups && !strcmp(argv[i], "--group") && i + 1 < argc)
      o->group = (uint32_t)strtoul(argv[++i], NULL, 10);
    else
      return -1;
  }
  return 0;
}

int chime__bench_ragged(int argc, char **argv) {
  chime__bench_rag_opts_t o = {.items = 4096, .batch = 64, .rounds = 9};
  uint32_t per_round = 200;
  if (chime__bench_rag_opts(argc, argv, &o, 0) != 0) {
    fprintf(stderr,
            "usage: chime-bench ragged [--json] [--items N (4096)] "
            "[--batch B (64)] [--rounds R (9)]\n"
            "  rollouts of a long-tailed length (mean ~1,000 tokens, max "
            "8,192): bytes held and moved over bytes used; used GB/s "
            "delivered over a fixed-shape table of the same used bytes\n");
    return 2;
  }
  uint64_t items = o.items;
  uint32_t batch = o.batch, rounds = o.rounds;
  int json = o.json;
  if (items == 0 || batch == 0 || batch > items || rounds == 0 ||
      rounds > MAX_ROUNDS)
    return 2;
  chime__table_t *rt =
      make_table("tokens:i32[<=8192], logprobs:f32[<=8192 ~tokens]", items);
  if (rt == NULL)
    return 1;
  /* Insert: one sample a request, as writers' appends arrive. */
  uint64_t seed = 88172645463325252ull, total_rows = 0, first;
  uint8_t *buf = malloc((size_t)BOUND * 8);
  if (buf == NULL)
    return 1;
  for (uint32_t k = 0; k < BOUND; k++) {
    int32_t v = (int32_t)k;
    memcpy(buf + 4 * k, &v, 4);
  }
  for (uint64_t j = 0; j < items; j++) {
    uint32_t n = chime__bench_rollout_len(&seed), lengths[2] = {n, n};
    chime__span_t sp = {buf, (size_t)n * 8};
    if (chime__table_insert_spans(rt, &sp, 1, 1, lengths, NULL, &first, NULL,
                                  NULL) != 0)
      return 1;
    total_rows += n;
  }
  chime__table_stats_t st;
  chime__table_get_stats(rt, &st);
  double mean_len = (double)total_rows / (double)items;
  /* Two i32 per token, as the ragged leaves: rows aligned alike. */
  uint64_t fixed_words = (uint64_t)llround(mean_len * 2);
  uint64_t fixed_bytes = fixed_words * 4;
  char spec[64];
  snprintf(spec, sizeof(spec), "x:i32[%" PRIu64 "]", fixed_words);
  chime__table_t *ft = make_table(spec, items);
  if (ft == NULL)
    return 1;
  uint8_t *one = calloc(1, fixed_bytes);
  for (uint64_t j = 0; one != NULL && j < items; j++)
    if (chime__table_insert(ft, one, 1, NULL, &first, NULL, NULL) != 0)
      return 1;
  slot_t rs, fs;
  if (one == NULL || chime__bench_slot_make(&rs, rt, batch) != 0 ||
      chime__bench_slot_make(&fs, ft, batch) != 0)
    return 1;
  /* Warm both (pages of the slots and the tables' first touches). */
  double s0 = 0, s1 = 0;
  uint64_t u0 = 0, u1 = 0, m0 = 0, m1 = 0, x0 = 0, x1 = 0;
  if (run(rt, &rs, 1, 4, 0, &s0, &u0, &m0, &x0) != 0 ||
      run(ft, &fs, 0, 4, fixed_bytes, &s1, &u1, &m1, &x1) != 0)
    return 1;
  double ratio[MAX_ROUNDS], rg[MAX_ROUNDS], fg[MAX_ROUNDS];
  uint64_t used = 0, moved = 0, sent = 0, fused = 0, fsent = 0;
  for (uint32_t r = 0; r < rounds; r++) {
    double sr = 0, sf = 0;
    uint64_t ur = 0, uf = 0, mf = 0;
    /* In turns, the order alternating, so drifts of a shared machine fall
     * on both. */
    if (r % 2 == 0) {
      if (run(rt, &rs, 1, per_round, 0, &sr, &ur, &moved, &sent) != 0 ||
          run(ft, &fs, 0, per_round, fixed_bytes, &sf, &uf, &mf, &fsent) != 0)
        return 1;
    } else {
      if (run(ft, &fs, 0, per_round, fixed_bytes, &sf, &uf, &mf, &fsent) != 0 ||
          run(rt, &rs, 1, per_round, 0, &sr, &ur, &moved, &sent) != 0)
        return 1;
    }
    used += ur;
    fused += uf;
    rg[r] = (double)ur / sr / 1e9;
    fg[r] = (double)uf / sf / 1e9;
    ratio[r] = rg[r] / fg[r];
  }
  double held = (double)st.ragged_alloc_bytes / (double)st.ragged_bytes;
  double moved_ratio = (double)moved / (double)used;
  double send = (double)sent / (double)used;
  double fsend = (double)fsent / (double)fused;
  /* What a batch sent before it sent only its extents: the slot's prefix. */
  double prefix = (double)chime__slot_send_bytes(&rs.lay) /
                  ((double)used / (double)(rounds * per_round));
  double rmed = chime__bench_median(ratio, (int)rounds);
  double rgm = chime__bench_median(rg, (int)rounds);
  double fgm = chime__bench_median(fg, (int)rounds);
  if (json)
    printf("{\"bench\":\"ragged\",\"items\":%" PRIu64 ",\"batch\":%u,"
           "\"mean_tokens\":%.1f,\"held_over_used\":%.4f,"
           "\"moved_over_used\":%.4f,\"stream_sent_over_used\":%.4f,"
           "\"fixed_stream_sent_over_used\":%.4f,"
           "\"prefix_over_used\":%.2f,"
           "\"ragged_gbps\":%.3f,\"fixed_gbps\":%.3f,"
           "\"ragged_over_fixed\":%.3f,\"rounds\":%u}\n",
           items, batch, mean_len, held, moved_ratio, send, fsend, prefix, rgm,
           fgm, rmed, rounds);
  else
    printf("ragged: %" PRIu64 " items, mean %.0f tokens (max %d), batch %u\n"
           "  held / used   %.4fx (allocator's bytes over the rows used; "
           "padded to the bound: %.2fx)\n"
           "  moved / used  %.4fx (shm: values and offsets into the slot)\n"
           "  stream sent / used  %.4fx (its extents: offsets, info, rows "
           "used; the slot's prefix would be %.2fx; fixed-shape %.4fx)\n"
           "  delivery: ragged %.2f GB/s used, fixed-shape %.2f GB/s "
           "(x:i32[%" PRIu64 "]) per CPU second, ratio %.3f (median of %u "
           "rounds)\n",
           items, mean_len, BOUND, batch, held, (double)BOUND / mean_len,
           moved_ratio, send, prefix, fsend, rgm, fgm, fixed_words, rmed,
           rounds);
  free(rs.mem);
  free(fs.mem);
  free(one);
  free(buf);
  chime__table_destroy(rt);
  chime__table_destroy(ft);
  return 0;
}
