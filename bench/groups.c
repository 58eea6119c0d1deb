/* chime-bench groups: a group table against a plain ragged table of the
 * same samples (the replay engine alone, no gRPC): rollouts of a
 * long-tailed length (as chime-bench ragged: 500 / sqrt(u) tokens, cut
 * at 8,192), i32 tokens and f32 logprobs sharing the length, written one
 * sample a request to the plain table and one group of G a request to the
 * group table (group_max G), the same samples in the same order. In one
 * run, in turns: the used bytes per CPU second a uniform sampler delivers
 * into a slot, a batch of B samples against a batch of B / G groups (the
 * same samples a batch), the group batch's learner-side pass included
 * (each ragged leaf's per-sample offsets made from the group leaf,
 * client/group_view.c, as chime_stream_next does). Then the insert CPU of the
 * group table with a zero_variance filter (on a reward leaf no group
 * fails) against without. Medians of the rounds. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "client/group_view.h"
#include "measure.h"
#include "ragged.h"

#define BOUND 8192
#define MAX_ROUNDS 64
#define SPEC "tokens:i32[<=8192], logprobs:f32[<=8192 ~tokens], reward:f32"

typedef struct {
  chime__bench_slot_t s;
  chime__group_view_t *gv;
} slot_t;

static int slot_make(slot_t *s, const chime__table_t *t, uint32_t batch) {
  s->gv = NULL;
  return chime__bench_slot_make(&s->s, t, batch) != 0 ||
                 chime__group_view_new(&s->gv, chime__table_item_spec(t), batch,
                                       1) != 0
             ? -1
             : 0;
}

static chime__table_t *make_table(uint64_t items, uint32_t gmax, int filter) {
  chime__table_config_t tc;
  chime__table_t *t = NULL;
  if (chime__bench_uniform_config(&tc, SPEC, items) != 0)
    return NULL;
  if (gmax > 0) {
    chime_spec_t s;
    if (chime_spec_group(&s, &tc.spec, gmax, NULL, 0) != 0)
      return NULL;
    tc.spec = s;
    tc.group_max = gmax;
  }
  if (filter) {
    tc.nfilters = 1;
    tc.filters[0] =
        (chime__group_filter_t){CHIME__FILTER_ZERO_VARIANCE, 3, 0, 0};
  }
  return chime__table_create(&t, &tc) == 0 ? t : NULL;
}

/* Inserts the groups (gmax > 0: each G samples a request; else each
 * sample a request) of the n sample lengths len; the CPU seconds. */
static int fill(chime__table_t *t, const uint32_t *len, uint64_t n,
                uint32_t gmax, double *secs) {
  uint32_t g = gmax > 0 ? gmax : 1;
  size_t cap = (size_t)g * (8 + (size_t)BOUND * 8 + 4);
  uint8_t *buf = calloc(1, cap);
  uint64_t first;
  if (buf == NULL)
    return -1;
  double t0 = chime__bench_cpu_s(0);
  for (uint64_t j = 0; j + g <= n; j += g) {
    uint32_t rows = 0, at = 0;
    for (uint32_t k = 0; k < g; k++)
      rows += len[j + k];
    if (gmax > 0) /* the group leaf: each sample's two lengths */
      for (uint32_t k = 0; k < g; k++, at += 8) {
        memcpy(buf + at, &len[j + k], 4);
        memcpy(buf + at + 4, &len[j + k], 4);
      }
    at += rows * 8;                             /* tokens and logprobs */
    for (uint32_t k = 0; k < g; k++, at += 4) { /* rewards, never all alike */
      float r = (float)k;
      memcpy(buf + at, &r, 4);
    }
    uint32_t lengths[4] = {g, rows, rows, g};
    chime__span_t sp = {buf, at};
    int rc = gmax > 0 ? chime__table_insert_spans(t, &sp, 1, 1, lengths, NULL,
                                                  &first, NULL, NULL)
                      : chime__table_insert_spans(t, &sp, 1, 1, lengths + 1,
                                                  NULL, &first, NULL, NULL);
    if (rc != 0) {
      free(buf);
      return -1;
    }
  }
  *secs += chime__bench_cpu_s(0) - t0;
  free(buf);
  return 0;
}

/* Samples `batches` batches into s; the used bytes (the leaves' values)
 * summed. A group batch as the learner gets it (group.h). */
static int run(chime__table_t *t, slot_t *s, uint32_t batches, double *secs,
               uint64_t *used) {
  atomic_int stop = 0;
  const chime_spec_t *sp = chime__table_item_spec(t);
  double t0 = chime__bench_cpu_s(0);
  for (uint32_t i = 0; i < batches; i++) {
    if (chime__table_sample(t, &s->s.lay, &s->s.ws, &stop) != 0)
      return -1;
    uint32_t B = s->s.lay.batch_size;
    chime_batch_t b = {.count = B, .nleaves = sp->nleaves};
    for (uint32_t l = 0; l < sp->nleaves; l++) {
      b.leaf[l].name = sp->leaves[l].name;
      b.leaf[l].data = s->s.ws.leaf[l];
      b.leaf[l].offsets = s->s.ws.offsets[l];
      const chime_leaf_t *lf = &sp->leaves[l];
      b.leaf[l].shape[0] = lf->ragged ? (uint64_t)s->s.ws.offsets[l][B] : B;
      if (l > 0 || s->gv == NULL) /* the samples' bytes, as the plain's */
        *used += b.leaf[l].shape[0] *
                 (lf->ragged ? chime_leaf_row_bytes(lf) : chime_leaf_bytes(lf));
    }
    char err[128];
    if (s->gv != NULL &&
        chime__group_view_lend(s->gv, 0, &b, err, sizeof(err)) != 0)
      return -1;
  }
  *secs += chime__bench_cpu_s(0) - t0;
  return 0;
}

int chime__bench_groups(int argc, char **argv) {
  chime__bench_rag_opts_t o = {
      .items = 4096, .batch = 64, .rounds = 9, .group = 8};
  uint32_t per_round = 400;
  if (chime__bench_rag_opts(argc, argv, &o, 1) != 0) {
    fprintf(stderr,
            "usage: chime-bench groups [--json] [--items N (4096 samples)] "
            "[--batch B (64 samples)] [--group G (8)] [--rounds R (9)]\n"
            "  batches of B / G groups of G ragged samples vs batches of B "
            "samples of a plain ragged table, used GB/s per CPU second; a "
            "zero_variance filter's insert CPU\n");
    return 2;
  }
  uint64_t items = o.items;
  uint32_t batch = o.batch, gmax = o.group, rounds = o.rounds;
  int json = o.json;
  if (gmax == 0 || gmax > CHIME_GROUP_MAX || batch % gmax != 0 ||
      items % gmax != 0 || batch > items || rounds == 0 || rounds > MAX_ROUNDS)
    return 2;
  uint32_t *len = malloc(items * sizeof(*len));
  uint64_t seed = 88172645463325252ull;
  for (uint64_t j = 0; len != NULL && j < items; j++)
    len[j] = chime__bench_rollout_len(&seed);
  chime__table_t *pt = make_table(items, 0, 0);
  chime__table_t *gt = make_table(items / gmax, gmax, 0);
  slot_t ps, gs;
  double ins[2] = {0, 0};
  if (len == NULL || pt == NULL || gt == NULL ||
      fill(pt, len, items, 0, &ins[0]) != 0 ||
      fill(gt, len, items, gmax, &ins[1]) != 0 ||
      slot_make(&ps, pt, batch) != 0 || slot_make(&gs, gt, batch / gmax) != 0)
    return 1;
  double s0 = 0, s1 = 0, ratio[MAX_ROUNDS], pg[MAX_ROUNDS], gg[MAX_ROUNDS];
  uint64_t u0 = 0, u1 = 0;
  if (run(pt, &ps, 4, &s0, &u0) != 0 || run(gt, &gs, 4, &s1, &u1) != 0)
    return 1;
  for (uint32_t r = 0; r < rounds; r++) {
    double sp = 0, sg = 0;
    uint64_t up = 0, ug = 0;
    int rc = r % 2 == 0 ? run(pt, &ps, per_round, &sp, &up) ||
                              run(gt, &gs, per_round, &sg, &ug)
                        : run(gt, &gs, per_round, &sg, &ug) ||
                              run(pt, &ps, per_round, &sp, &up);
    if (rc != 0)
      return 1;
    pg[r] = (double)up / sp / 1e9;
    gg[r] = (double)ug / sg / 1e9;
    ratio[r] = gg[r] / pg[r];
  }
  double gmed[3] = {chime__bench_median(ratio, (int)rounds),
                    chime__bench_median(pg, (int)rounds),
                    chime__bench_median(gg, (int)rounds)};
  double rmed = gmed[0], pgm = gmed[1], ggm = gmed[2];
  /* A filter's insert CPU: the group table filled again, with and without
   * a zero_variance filter, in turns, 8 times a round (the later fills
   * evicting the earlier's groups, alike on both). */
  double fr[MAX_ROUNDS];
  for (uint32_t r = 0; r < rounds; r++) {
    double a = 0, b = 0;
    chime__table_t *x = make_table(items / gmax, gmax, 0);
    chime__table_t *y = make_table(items / gmax, gmax, 1);
    for (int rep = 0; rep < 8; rep++)
      if (x == NULL || y == NULL ||
          ((r + (uint32_t)rep) % 2 == 0
               ? fill(x, len, items, gmax, &a) || fill(y, len, items, gmax, &b)
               : fill(y, len, items, gmax, &b) ||
                     fill(x, len, items, gmax, &a)))
        return 1;
    fr[r] = b / a;
    chime__table_destroy(x);
    chime__table_destroy(y);
  }
  double fmed = chime__bench_median(fr, (int)rounds);
  if (json)
    printf("{\"bench\":\"groups\",\"items\":%" PRIu64 ",\"batch\":%u,"
           "\"group\":%u,\"plain_gbps\":%.3f,\"group_gbps\":%.3f,"
           "\"group_over_plain\":%.3f,\"filter_insert_cpu\":%.3f,"
           "\"rounds\":%u}\n",
           items, batch, gmax, pgm, ggm, rmed, fmed, rounds);
  else
    printf("groups: %" PRIu64 " samples (mean tokens as chime-bench ragged), "
           "batches of %u samples: %u groups of %u vs %u plain\n"
           "  delivery: groups %.2f GB/s used, plain ragged %.2f GB/s per "
           "CPU second, ratio %.3f (median of %u rounds)\n"
           "  insert CPU with a zero_variance filter / without: %.3f\n",
           items, batch, batch / gmax, gmax, batch, ggm, pgm, rmed, rounds,
           fmed);
  chime__group_view_free(ps.gv);
  chime__group_view_free(gs.gv);
  free(ps.s.mem);
  free(gs.s.mem);
  free(len);
  chime__table_destroy(pt);
  chime__table_destroy(gt);
  return 0;
}
