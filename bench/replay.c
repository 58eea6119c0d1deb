/* chime-bench replay: the table alone (no gRPC, no ring), per selector and
 * table size: inserts per second (requests of 256 samples of 256 B),
 * samples per second into a batch of 256 (what a sampler does per slot),
 * and MutatePriorities updates per second (1024 keys a call). The figures
 * bound what chimed can serve per table; the per-sample cost at the
 * largest size over the smallest shows how sampling scales. Beside each
 * selector, in turns with it, the gather floor: the same copies with no
 * table (random rows of a plain array of as many rows), so that how much
 * of that scaling is the memory's and how much chime's can be read off.
 * On a shared machine the median over windows of 64 batches and the CPU
 * time per sample are the steadier figures. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "measure.h"
#include "replay/table.h"

#define SAMPLE_BYTES 256
#define BATCH 256
#define REQUEST 256
#define KEYS_PER_CALL 1024

typedef struct {
  const char *name;
  chime__selector_kind_t sel;
} selector_t;

static const selector_t selectors[] = {
    {"fifo", CHIME__SELECTOR_FIFO},
    {"lifo", CHIME__SELECTOR_LIFO},
    {"uniform", CHIME__SELECTOR_UNIFORM},
    {"prioritized", CHIME__SELECTOR_PRIORITIZED},
    {"min_heap", CHIME__SELECTOR_MIN_HEAP},
    {"max_heap", CHIME__SELECTOR_MAX_HEAP},
};

typedef struct {
  double insert_per_s, sample_per_s, mutate_per_s;
  /* Per sample: the median over windows of WINDOW batches (a window the
   * scheduler gave to another process's job does not move it), and CPU
   * time over the whole run (time on no CPU is not counted). */
  double median_ns, cpu_ns;
  double floor_median_ns, floor_cpu_ns; /* the gather floor's, alike */
} result_t;

#define WINDOW 64
#define MAX_WINDOWS 4096
/* The table and its floor take turns, each ROUNDS times for a share of
 * the run, so that a load that comes and goes weighs on both alike. */
#define ROUNDS 4

typedef struct {
  uint64_t samples;
  double wall_s, cpu_s;
  int nwin;
  double window[MAX_WINDOWS]; /* ns per sample */
} timing_t;

/* Takes batches with batch(ctx) for `seconds`, or until tm counts
 * max_batches in all; adds them to tm. */
static int time_batches(int (*batch)(void *), void *ctx, uint64_t max_batches,
                        double seconds, timing_t *tm) {
  double c0 = chime__bench_cpu_s(0), t0 = chime__bench_now_s();
  double w0 = t0, dt = 0;
  int n = 0; /* batches in this window */
  while (tm->samples / BATCH < max_batches && dt < seconds) {
    if (batch(ctx) != 0)
      return -1;
    tm->samples += BATCH;
    if (++n == WINDOW) {
      double now = chime__bench_now_s();
      if (tm->nwin < MAX_WINDOWS)
        tm->window[tm->nwin++] = (now - w0) * 1e9 / (WINDOW * BATCH);
      w0 = now;
      dt = now - t0;
      n = 0;
    }
  }
  tm->wall_s += chime__bench_now_s() - t0;
  tm->cpu_s += chime__bench_cpu_s(0) - c0;
  return 0;
}

/* The median over windows; a run too short for one window (a small fifo
 * queue): the mean. */
static double median_ns(timing_t *tm) {
  return tm->nwin > 0 ? chime__bench_median(tm->window, tm->nwin)
                      : tm->wall_s * 1e9 / (double)tm->samples;
}

typedef struct {
  chime__table_t *t;
  const chime_ring_layout_t *lay;
  chime__ring_wslot_t *ws;
} table_batch_t;

static int table_batch(void *ctx) {
  table_batch_t *b = ctx;
  atomic_int stop = 0;
  return chime__table_sample(b->t, b->lay, b->ws, &stop);
}

/* The gather floor: a sample's copy with nothing around it (no lock, no
 * bookkeeping, no sample info). BATCH rows of SAMPLE_BYTES drawn
 * uniformly (xorshift64*, as the table's draws) from a plain anonymous
 * mapping of `items` rows (4 KiB pages, as the table's rows), written
 * once before timing as inserts write the table's, are copied into a
 * buffer the size of a ring slot. A batch's rows are drawn first and
 * each is asked for FLOOR_AHEAD rows ahead of its copy, as the table's
 * copy does: the fastest plain gather here at the sizes that miss (a
 * loop without it took 1.6x the CPU at 10^6 items and 2.2x at 10^7, in
 * turns; 0.83x at 10^4, so the floor's ratio is, if anything, low). */
#define FLOOR_AHEAD 8

typedef struct {
  uint8_t *rows, *slot;
  uint64_t items, seed;
} floor_t;

static int floor_batch(void *ctx) {
  floor_t *f = ctx;
  const uint8_t *src[BATCH];
  for (int j = 0; j < BATCH; j++)
    src[j] = f->rows + chime__bench_rand(&f->seed) % f->items * SAMPLE_BYTES;
  for (int j = 0; j < BATCH + FLOOR_AHEAD; j++) {
    if (j < BATCH)
      for (int b = 0; b < SAMPLE_BYTES; b += 64)
        __builtin_prefetch(src[j] + b);
    if (j >= FLOOR_AHEAD)
      memcpy(f->slot + (size_t)(j - FLOOR_AHEAD) * SAMPLE_BYTES,
             src[j - FLOOR_AHEAD], SAMPLE_BYTES);
  }
  return 0;
}

/* One selector at one size. */
static int run_one(const selector_t *s, uint64_t items, double seconds,
                   int huge_floor, result_t *out) {
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "bench");
  if (chime_spec_parse(&tc.spec, "x:u8[248], id:u64[]") != 0)
    return 1;
  tc.capacity = items;
  tc.min_size = 1;
  tc.sampler = s->sel;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.priority_exponent = 0.6;
  /* fifo is a queue (each item sampled once); the others keep items. */
  tc.max_times_sampled = s->sel == CHIME__SELECTOR_FIFO ? 1 : 0;
  tc.seed = 42;
  chime__table_t *t = NULL;
  if (chime__table_create(&t, &tc) != 0) {
    fprintf(stderr,
            "chime-bench replay: cannot create a table of %" PRIu64 " items\n",
            items);
    return 1;
  }
  uint8_t *req = malloc((size_t)REQUEST * SAMPLE_BYTES);
  double *prio = malloc(REQUEST * sizeof(double));
  uint64_t seed = 7;
  for (size_t i = 0; i < (size_t)REQUEST * SAMPLE_BYTES; i++)
    req[i] = (uint8_t)i;

  /* Inserts: fill the table. */
  double t0 = chime__bench_now_s();
  for (uint64_t n = 0; n < items; n += REQUEST) {
    uint32_t c = items - n < REQUEST ? (uint32_t)(items - n) : REQUEST;
    for (uint32_t i = 0; i < c; i++)
      prio[i] = (double)(chime__bench_rand(&seed) % 1000000) / 1000.0;
    uint64_t k;
    if (chime__table_insert(t, req, c, prio, &k, NULL, NULL) != 0) {
      fprintf(stderr, "chime-bench replay: insert failed\n");
      return 1;
    }
  }
  out->insert_per_s = (double)items / (chime__bench_now_s() - t0);

  /* Samples into a batch buffer laid out as a ring slot. */
  chime_ring_layout_t lay;
  if (chime_ring_layout_compute(&lay, &tc.spec, BATCH, 2) != 0)
    return 1;
  uint8_t *slot = aligned_alloc(4096, lay.slot_bytes);
  chime__ring_wslot_t ws;
  memset(&ws, 0, sizeof(ws));
  ws.base = slot;
  for (uint32_t l = 0; l < tc.spec.nleaves; l++)
    ws.leaf[l] = slot + lay.leaf_offset[l];
  ws.info = (chime_sample_info_t *)(slot + lay.info_offset);
  uint64_t max_batches =
      s->sel == CHIME__SELECTOR_FIFO ? items / BATCH : UINT64_MAX;
  table_batch_t tb = {t, &lay, &ws};

  size_t floor_bytes = (size_t)items * SAMPLE_BYTES;
  floor_t fl = {.items = items, .seed = 43};
  fl.rows = mmap(NULL, floor_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  fl.slot = aligned_alloc(4096, lay.slot_bytes);
  if (fl.rows == MAP_FAILED || fl.slot == NULL) {
    fprintf(stderr, "chime-bench replay: no memory for the floor\n");
    return 1;
  }
  if (huge_floor)
    madvise(fl.rows, floor_bytes, MADV_HUGEPAGE);
  memset(fl.rows, 1, floor_bytes);
  memset(fl.slot, 0, lay.slot_bytes);

  /* Samples into a batch buffer laid out as a ring slot, and the floor,
   * in turns. */
  static timing_t tt, ft;
  memset(&tt, 0, sizeof(tt));
  memset(&ft, 0, sizeof(ft));
  for (int r = 0; r < ROUNDS; r++)
    if (time_batches(table_batch, &tb, max_batches, seconds / ROUNDS, &tt) ||
        time_batches(floor_batch, &fl, UINT64_MAX, seconds / ROUNDS, &ft))
      return 1;
  out->sample_per_s = (double)tt.samples / tt.wall_s;
  out->cpu_ns = tt.cpu_s * 1e9 / (double)tt.samples;
  out->median_ns = median_ns(&tt);
  out->floor_cpu_ns = ft.cpu_s * 1e9 / (double)ft.samples;
  out->floor_median_ns = median_ns(&ft);
  munmap(fl.rows, floor_bytes);
  free(fl.slot);

  /* MutatePriorities: 1024 random live keys a call (not for fifo, whose
   * queue sampling drained and which has no use for priorities). */
  uint64_t keys[KEYS_PER_CALL];
  double prios[KEYS_PER_CALL];
  uint64_t first = 1;
  uint64_t updates = 0;
  t0 = chime__bench_now_s();
  double dt = 0;
  while (s->sel != CHIME__SELECTOR_FIFO && dt < seconds / 2) {
    for (int i = 0; i < KEYS_PER_CALL; i++) {
      keys[i] = first + chime__bench_rand(&seed) % items;
      prios[i] = (double)(chime__bench_rand(&seed) % 1000000) / 1000.0;
    }
    chime__table_mutated_t m;
    if (chime__table_mutate(t, keys, prios, KEYS_PER_CALL, NULL, 0, &m) != 0)
      break;
    updates += m.updated;
    dt = chime__bench_now_s() - t0;
  }
  out->mutate_per_s = dt > 0 ? (double)updates / dt : 0;
  free(slot);
  free(req);
  free(prio);
  chime__table_destroy(t);
  return 0;
}

/* With name: 1 when the comma-separated list names it, else 0. Without:
 * 0 when every name in the list is a selector's, else -1. */
static int selector_listed(const char *list, const char *name) {
  const size_t nsel = sizeof(selectors) / sizeof(selectors[0]);
  for (const char *s = list; *s != '\0';) {
    size_t len = strcspn(s, ",");
    if (name != NULL && strlen(name) == len && !strncmp(s, name, len))
      return 1;
    size_t k = 0;
    while (k < nsel && !(strlen(selectors[k].name) == len &&
                         !strncmp(s, selectors[k].name, len)))
      k++;
    if (k == nsel)
      return -1;
    s += len + (s[len] == ',');
  }
  return 0;
}

static int parse_sizes(const char *s, uint64_t *sizes, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v < BATCH)
      return -1;
    sizes[n++] = v;
    s = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0')
      return -1;
  }
  return n;
}

int chime__bench_replay(int argc, char **argv) {
  int json = 0, huge_floor = 0;
  double seconds = 1.0;
  uint64_t sizes[4] = {10000, 1000000};
  int nsizes = 2;
  const char *only = NULL; /* comma-separated selector names, NULL: all */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--huge-floor")) {
      huge_floor = 1; /* what huge pages would take off the floor */
    } else if (!strcmp(argv[i], "--items") && i + 1 < argc) {
      nsizes = parse_sizes(argv[++i], sizes, 4);
      if (nsizes <= 0) {
        fprintf(stderr,
                "chime-bench replay: --items: sizes of at least "
                "%d, comma-separated\n",
                BATCH);
        return 2;
      }
    } else if (!strcmp(argv[i], "--selectors") && i + 1 < argc) {
      only = argv[++i];
      if (selector_listed(only, NULL) != 0) {
        fprintf(stderr, "chime-bench replay: --selectors: names of fifo, "
                        "lifo, uniform, prioritized, min_heap, max_heap\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = atof(argv[++i]);
      if (!(seconds > 0))
        return 2;
    } else {
      fprintf(stderr,
              "usage: chime-bench replay [--json] [--items 10000,1000000] "
              "[--seconds S]\n"
              "                          [--selectors uniform,prioritized] "
              "[--huge-floor]\n"
              "  per selector and table size (items of 256 B): inserts/s, "
              "samples/s into\n"
              "  batches of 256, MutatePriorities updates/s (1024 keys a "
              "call),\n"
              "  and the gather floor: the same row copies from a plain array "
              "(--huge-floor:\n"
              "  on huge pages)\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  for (size_t k = 0; k < sizeof(selectors) / sizeof(selectors[0]); k++) {
    if (only != NULL && selector_listed(only, selectors[k].name) != 1)
      continue;
    double first_cost = 0, first_median = 0, first_cpu = 0;
    double first_fmedian = 0, first_fcpu = 0;
    for (int i = 0; i < nsizes; i++) {
      result_t r;
      if (run_one(&selectors[k], sizes[i], seconds, huge_floor, &r) != 0)
        return 1;
      double cost = 1e9 / r.sample_per_s; /* ns per sample */
      if (i == 0) {
        first_cost = cost;
        first_median = r.median_ns;
        first_cpu = r.cpu_ns;
        first_fmedian = r.floor_median_ns;
        first_fcpu = r.floor_cpu_ns;
      }
      char mut[32] = "null"; /* fifo: no priorities to mutate */
      if (r.mutate_per_s > 0)
        snprintf(mut, sizeof(mut), "%.0f", r.mutate_per_s);
      if (json)
        printf("{\"bench\":\"replay\",\"selector\":\"%s\",\"items\":%" PRIu64
               ",\"sample_bytes\":%d,\"batch\":%d,\"insert_per_s\":%.0f,"
               "\"sample_per_s\":%.0f,\"mutate_per_s\":%s,"
               "\"ns_per_sample\":%.1f,\"cost_vs_smallest\":%.2f,"
               "\"median_ns_per_sample\":%.1f,\"median_cost_vs_smallest\":"
               "%.2f,\"cpu_ns_per_sample\":%.1f,\"cpu_cost_vs_smallest\":"
               "%.2f,\"huge_floor\":%s,\"floor_median_ns_per_sample\":%.1f,"
               "\"floor_median_cost_vs_smallest\":%.2f,"
               "\"floor_cpu_ns_per_sample\":%.1f,"
               "\"floor_cpu_cost_vs_smallest\":%.2f,"
               "\"median_vs_floor\":%.2f,\"cpu_vs_floor\":%.2f}\n",
               selectors[k].name, sizes[i], SAMPLE_BYTES, BATCH, r.insert_per_s,
               r.sample_per_s, mut, cost, cost / first_cost, r.median_ns,
               r.median_ns / first_median, r.cpu_ns, r.cpu_ns / first_cpu,
               huge_floor ? "true" : "false", r.floor_median_ns,
               r.floor_median_ns / first_fmedian, r.floor_cpu_ns,
               r.floor_cpu_ns / first_fcpu, r.median_ns / r.floor_median_ns,
               r.cpu_ns / r.floor_cpu_ns);
      else
        printf("%-12s %10" PRIu64 " items: insert %6.2f M/s, sample %6.2f "
               "M/s (%.0f ns, %.2fx the smallest; median %.0f ns, %.2fx; "
               "CPU %.0f ns, %.2fx), mutate %s/s; floor median %.0f ns, "
               "%.2fx, CPU %.0f ns, %.2fx; CPU %.2fx the floor\n",
               selectors[k].name, sizes[i], r.insert_per_s / 1e6,
               r.sample_per_s / 1e6, cost, cost / first_cost, r.median_ns,
               r.median_ns / first_median, r.cpu_ns, r.cpu_ns / first_cpu, mut,
               r.floor_median_ns, r.floor_median_ns / first_fmedian,
               r.floor_cpu_ns, r.floor_cpu_ns / first_fcpu,
               r.cpu_ns / r.floor_cpu_ns);
      fflush(stdout);
    }
  }
  return 0;
}
