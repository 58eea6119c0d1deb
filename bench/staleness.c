/* chime-bench staleness: what a staleness gate costs the sampler (issue
 * 25's target: CPU per sample with max_staleness set, versions advancing
 * and removals happening, within 1.1x of the same table without it, at
 * 10^6 items). Two tables of the same selector and size, one with
 * max_staleness, take the same inserts (requests of 256 samples of 256 B,
 * the version rising by one every capacity / (max_staleness + 1)
 * inserts, so the gated table drops a version's worth of items at each
 * rise and the other evicts by its remover) and are sampled in batches of
 * 256, in turns, ROUNDS rounds of a share of the run each, so that a load
 * that comes and goes weighs on both alike. The figure is the sampling's
 * CPU time per sample (the inserts, and the gated table's removals at a
 * rise, are timed apart); the ratio gated / plain is the target's.
 * --weight inverse: what staleness weighting costs a prioritized table
 * (docs/replay.md, "Staleness weighting"): both tables are gated at
 * max_staleness, the second ("weighted") weighs its draws by 1 / (s + 1),
 * so the ratio is the weighting's alone. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "measure.h"
#include "replay/table.h"

#define SAMPLE_BYTES 256
#define BATCH 256
#define REQUEST 256
#define ROUNDS 8
/* Per step: this many requests inserted, then as many batches sampled. */
#define STEP_REQUESTS 4

typedef struct {
  chime__table_t *t;
  uint64_t version, inserted, per_version;
  double sample_cpu_s, insert_cpu_s;
  uint64_t samples;
  uint64_t worst_staleness; /* over every sample drawn */
} side_t;

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int make(side_t *s, chime__selector_kind_t sel, uint64_t items,
                uint64_t max_staleness, uint64_t per_version,
                chime__stale_weight_t weight) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  memset(s, 0, sizeof(*s));
  snprintf(tc.name, sizeof(tc.name), "bench");
  if (chime_spec_parse(&tc.spec, "x:u8[248], id:u64[]") != 0)
    return -1;
  tc.capacity = items;
  tc.min_size = 1;
  tc.sampler = sel;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.priority_exponent = 0.6;
  tc.max_staleness = max_staleness;
  tc.staleness_weight = weight;
  tc.seed = 42;
  s->per_version = per_version;
  s->version = 1;
  return chime__table_create(&s->t, &tc);
}

static int insert(side_t *s, const uint8_t *req, const double *prio,
                  uint32_t n) {
  uint64_t k;
  chime__span_t sp = {req, (size_t)n * SAMPLE_BYTES};
  chime__table_versions_t v = {&s->version, 1};
  double c0 = thread_cpu_s();
  int rc = chime__table_insert_versioned(s->t, &sp, 1, n, NULL, prio, &v, &k,
                                         NULL, NULL, 0);
  s->insert_cpu_s += thread_cpu_s() - c0;
  s->inserted += n;
  if (s->inserted >= s->per_version) { /* the next policy */
    s->inserted = 0;
    s->version++;
  }
  return rc;
}

static int sample(side_t *s, const chime_ring_layout_t *lay,
                  chime__ring_wslot_t *ws) {
  atomic_int stop = 0;
  double c0 = thread_cpu_s();
  int rc = chime__table_sample(s->t, lay, ws, &stop);
  s->sample_cpu_s += thread_cpu_s() - c0;
  s->samples += BATCH;
  for (uint32_t j = 0; j < BATCH; j++)
    if (ws->info[j].staleness > s->worst_staleness)
      s->worst_staleness = ws->info[j].staleness;
  return rc;
}

int chime__bench_staleness(int argc, char **argv) {
  uint64_t items = 1000000, max_staleness = 8;
  double seconds = 8;
  int json = 0, weight = 0; /* --weight inverse */
  chime__selector_kind_t sel = CHIME__SELECTOR_UNIFORM;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--items") && i + 1 < argc) {
      items = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--max-staleness") && i + 1 < argc) {
      max_staleness = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--selector") && i + 1 < argc) {
      sel = chime__selector_kind_parse(argv[++i]);
    } else if (!strcmp(argv[i], "--weight") && i + 1 < argc &&
               (!strcmp(argv[i + 1], "inverse") ||
                !strcmp(argv[i + 1], "none"))) {
      weight = !strcmp(argv[++i], "inverse");
      sel = weight ? CHIME__SELECTOR_PRIORITIZED : sel;
    } else {
      fprintf(stderr,
              "usage: chime-bench staleness [--json] [--items N (1000000)] "
              "[--max-staleness S (8)] [--seconds T (8)] [--selector "
              "uniform|prioritized|lifo|min_heap|max_heap (uniform)] "
              "[--weight inverse|none (none; inverse: prioritized)]\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  if (items < BATCH || max_staleness == 0 || sel == 0 ||
      sel == CHIME__SELECTOR_FIFO ||
      (weight && sel != CHIME__SELECTOR_PRIORITIZED)) {
    fprintf(stderr,
            "chime-bench staleness: items >= %d, max-staleness > 0, "
            "a selector that keeps items (not fifo; prioritized with a "
            "weight)\n",
            BATCH);
    return 2;
  }
  uint64_t per_version = items / (max_staleness + 1);
  if (per_version == 0)
    per_version = 1;
  side_t plain, gated;
  uint8_t *req = malloc((size_t)REQUEST * SAMPLE_BYTES);
  double *prio = malloc(REQUEST * sizeof(double));
  uint64_t seed = 7;
  if (req == NULL || prio == NULL ||
      make(&plain, sel, items, weight ? max_staleness : 0, per_version,
           CHIME__STALE_WEIGHT_NONE) != 0 ||
      make(&gated, sel, items, max_staleness, per_version,
           weight ? CHIME__STALE_WEIGHT_INVERSE : CHIME__STALE_WEIGHT_NONE) !=
          0) {
    fprintf(stderr, "chime-bench staleness: cannot make the tables\n");
    return 1;
  }
  for (size_t i = 0; i < (size_t)REQUEST * SAMPLE_BYTES; i++)
    req[i] = (uint8_t)i;
  /* Both full: the plain one's items, and the gated one's last
   * max_staleness + 1 versions' worth. */
  for (uint64_t n = 0; n < items; n += REQUEST) {
    for (uint32_t i = 0; i < REQUEST; i++)
      prio[i] = (double)(chime__bench_rand(&seed) % 1000000) / 1000.0;
    if (insert(&plain, req, prio, REQUEST) ||
        insert(&gated, req, prio, REQUEST))
      return 1;
  }
  chime_ring_layout_t lay;
  if (chime_ring_layout_compute(&lay, chime__table_item_spec(plain.t), BATCH,
                                2) != 0)
    return 1;
  uint8_t *slot = aligned_alloc(4096, lay.slot_bytes);
  chime__ring_wslot_t ws;
  memset(&ws, 0, sizeof(ws));
  ws.base = slot;
  for (uint32_t l = 0; l < 2; l++)
    ws.leaf[l] = slot + lay.leaf_offset[l];
  ws.info = (chime_sample_info_t *)(slot + lay.info_offset);
  plain.sample_cpu_s = gated.sample_cpu_s = 0;
  plain.insert_cpu_s = gated.insert_cpu_s = 0;
  plain.samples = gated.samples = 0;
  chime__table_stats_t st0;
  chime__table_get_stats(gated.t, &st0);
  for (int r = 0; r < ROUNDS; r++) {
    side_t *order[2] = {r % 2 ? &gated : &plain, r % 2 ? &plain : &gated};
    for (int k = 0; k < 2; k++) {
      side_t *s = order[k];
      double t0 = chime__bench_now_s();
      while (chime__bench_now_s() - t0 < seconds / ROUNDS / 2) {
        for (int q = 0; q < STEP_REQUESTS; q++) {
          for (uint32_t i = 0; i < REQUEST; i++)
            prio[i] = (double)(chime__bench_rand(&seed) % 1000000) / 1000.0;
          if (insert(s, req, prio, REQUEST))
            return 1;
        }
        for (int q = 0; q < STEP_REQUESTS; q++)
          if (sample(s, &lay, &ws))
            return 1;
      }
    }
  }
  chime__table_stats_t sp, sg;
  chime__table_get_stats(plain.t, &sp);
  chime__table_get_stats(gated.t, &sg);
  double pn = plain.sample_cpu_s * 1e9 / (double)plain.samples;
  double gn = gated.sample_cpu_s * 1e9 / (double)gated.samples;
  /* With --weight, both are gated: the second is weighted. */
  const char *a = weight ? "unweighted" : "plain";
  const char *b = weight ? "weighted" : "gated";
  if (json) {
    printf("{\"bench\": \"staleness\", \"weight\": \"%s\", "
           "\"selector\": \"%s\", \"items\": "
           "%" PRIu64 ", \"max_staleness\": %" PRIu64
           ", \"plain_cpu_ns_per_sample\": %.1f, \"gated_cpu_ns_per_sample\": "
           "%.1f, \"ratio\": %.3f, \"gated_removed_stale\": %" PRIu64
           ", \"gated_size\": %" PRIu64 ", \"plain_size\": %" PRIu64
           ", \"versions\": %" PRIu64 ", \"gated_worst_staleness\": %" PRIu64
           ", \"plain_insert_cpu_ns\": %.1f, \"gated_insert_cpu_ns\": %.1f}\n",
           weight ? "inverse" : "none", chime__selector_kind_name(sel), items,
           max_staleness, pn, gn, gn / pn, sg.removed_stale - st0.removed_stale,
           sg.size, sp.size, gated.version, gated.worst_staleness,
           plain.insert_cpu_s * 1e9 / (double)plain.samples,
           gated.insert_cpu_s * 1e9 / (double)gated.samples);
  } else {
    printf("staleness %s, %s table of %" PRIu64 " items, max_staleness %" PRIu64
           ", %d rounds in turns\n",
           weight ? "weight 1 / (s + 1), both gated" : "gate",
           chime__selector_kind_name(sel), items, max_staleness, ROUNDS);
    printf("  sampling CPU per sample: %s %.1f ns, %s %.1f ns: %.3fx%s\n", a,
           pn, b, gn, gn / pn, weight ? "" : " (target <= 1.1x)");
    printf("  %s: %" PRIu64 " items removed stale during the run, size %" PRIu64
           " (%s %" PRIu64 "), version %" PRIu64
           ", worst staleness sampled %" PRIu64 "\n",
           b, sg.removed_stale - st0.removed_stale, sg.size, a, sp.size,
           gated.version, gated.worst_staleness);
    printf("  insert CPU per sample (removals included): %s %.1f ns, "
           "%s %.1f ns\n",
           a, plain.insert_cpu_s * 1e9 / (double)plain.samples, b,
           gated.insert_cpu_s * 1e9 / (double)gated.samples);
  }
  free(slot);
  free(req);
  free(prio);
  chime__table_destroy(plain.t);
  chime__table_destroy(gated.t);
  return 0;
}
