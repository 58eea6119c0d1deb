/* chime-bench sequence: a sequence table alone (no gRPC, no ring), per
 * number of stored steps: steps written per second (4 writers' episodes
 * of 1000 steps interleaved, requests of 64 steps), windows sampled per
 * second into a slot of B windows of T steps (uniform sampler) and the
 * GB/s that is, against a plain table holding items of the same bytes
 * (T steps, as many bytes in all as the steps stored, up to 4 GiB)
 * sampled into the same slot, in turns, medians of 3. Both copy
 * outside the table's lock (a sequence window's first block pinned). */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "measure.h"
#include "server/table.h"

#define T 80
#define STRIDE 40
#define BATCH 32
#define REQUEST 64
#define WRITERS 4
#define EPISODE 1000
/* The plain table holds the bytes of the steps stored, at most this many
 * (both tables are alive at once). */
#define PLAIN_MAX_BYTES (UINT64_C(4) << 30)

typedef struct {
  double write_steps_per_s, write_gb_s;
  double windows_per_s, seq_gb_s, ns_per_batch;
  double plain_items_per_s, plain_gb_s;
  uint64_t plain_items, step_storage;
} result_t;

typedef struct {
  chime_ring_layout_t lay;
  uint8_t *mem;
  chime_ring_wslot_t ws;
} slot_t;

static int slot_init(slot_t *s, const chime_spec_t *spec) {
  if (chime_ring_layout(&s->lay, spec, BATCH, 2, NULL, 0) != 0)
    return -1;
  s->mem = aligned_alloc(4096, s->lay.slot_bytes);
  if (s->mem == NULL)
    return -1;
  memset(s->mem, 0, s->lay.slot_bytes); /* faulted in before timing */
  memset(&s->ws, 0, sizeof(s->ws));
  s->ws.base = s->mem;
  for (uint32_t l = 0; l < spec->nleaves; l++)
    s->ws.leaf[l] = s->mem + s->lay.leaf_offset[l];
  s->ws.info = (chime_sample_info_t *)(s->mem + s->lay.info_offset);
  return 0;
}

#define RUNS 3

static double median3(const double *x) {
  double a = x[0], b = x[1], c = x[2];
  if (a > b) {
    double t = a;
    a = b;
    b = t;
  }
  return c < a ? a : c > b ? b : c;
}

/* Samples batches for `seconds`; returns batches per second. */
static double sample_for(chime__table_t *t, slot_t *s, double seconds) {
  atomic_int stop = 0;
  uint64_t n = 0;
  double t0 = chime__bench_now_s(), dt = 0;
  while (dt < seconds) {
    if (chime__table_sample(t, &s->lay, &s->ws, &stop) != 0)
      return 0;
    if (++n % 16 == 0)
      dt = chime__bench_now_s() - t0;
  }
  return (double)n / (chime__bench_now_s() - t0);
}

static int run_one(uint64_t steps, uint32_t step_bytes, double seconds,
                   int with_plain, result_t *out) {
  char spec[128];
  memset(out, 0, sizeof(*out));
  snprintf(spec, sizeof(spec), "x:u8[%u], id:u64[]", step_bytes - 8);
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "seq");
  if (chime_spec_parse(&tc.spec, spec, NULL, 0) != 0)
    return 1;
  tc.capacity_steps = steps;
  tc.sequence_length = T;
  tc.stride = STRIDE;
  tc.sampler = CHIME__SAMPLER_UNIFORM;
  tc.min_size = 1;
  tc.initial_priority = 1.0;
  tc.seed = 42;
  chime__table_t *t = NULL;
  if (chime__table_create(&t, &tc) != 0) {
    fprintf(stderr, "chime-bench sequence: cannot create %" PRIu64 " steps\n",
            steps);
    return 1;
  }
  uint8_t *req = malloc((size_t)REQUEST * step_bytes);
  for (size_t i = 0; i < (size_t)REQUEST * step_bytes; i++)
    req[i] = (uint8_t)i;
  /* Writes: 4 writers round robin until the store is full once and a
   * quarter (the last quarter evicts). */
  uint64_t seq[WRITERS] = {0}, len[WRITERS] = {0}, written = 0;
  uint64_t target = steps + steps / 4;
  double t0 = chime__bench_now_s();
  for (uint32_t w = 0; written < target; w = (w + 1) % WRITERS) {
    uint64_t k;
    chime__dedupe_req_t dq = {.writer = w + 1, .seq = ++seq[w]};
    len[w] += REQUEST;
    dq.end_episode = len[w] >= EPISODE;
    if (dq.end_episode)
      len[w] = 0;
    if (chime__table_insert(t, req, REQUEST, NULL, &k, NULL, &dq) != 0) {
      fprintf(stderr, "chime-bench sequence: insert failed\n");
      return 1;
    }
    written += REQUEST;
  }
  double dt = chime__bench_now_s() - t0;
  out->write_steps_per_s = (double)written / dt;
  out->write_gb_s = (double)written * step_bytes / dt / 1e9;
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  out->step_storage = st.step_bytes;

  double window_bytes = (double)T * step_bytes;
  chime__table_t *p = NULL;
  slot_t s, ps;
  if (slot_init(&s, chime__table_item_spec(t)) != 0)
    return 1;
  if (with_plain) {
    /* The same bytes in all as the steps stored, in items of T steps (so
     * each window's bytes once), sampled into the same slot. */
    chime__table_config_t pc;
    memset(&pc, 0, sizeof(pc));
    snprintf(pc.name, sizeof(pc.name), "plain");
    snprintf(spec, sizeof(spec), "x:u8[%u,%u], id:u64[%u]", T, step_bytes - 8,
             T);
    if (chime_spec_parse(&pc.spec, spec, NULL, 0) != 0)
      return 1;
    uint64_t items = steps / T;
    if (items * window_bytes > PLAIN_MAX_BYTES)
      items = PLAIN_MAX_BYTES / (uint64_t)window_bytes;
    if (items < BATCH)
      items = BATCH;
    pc.capacity = items;
    pc.sampler = CHIME__SAMPLER_UNIFORM;
    pc.remover = CHIME__SAMPLER_FIFO;
    pc.min_size = 1;
    pc.seed = 42;
    if (chime__table_create(&p, &pc) != 0)
      return 1;
    uint8_t *item = malloc((size_t)window_bytes);
    for (size_t i = 0; i < (size_t)window_bytes; i++)
      item[i] = (uint8_t)i;
    for (uint64_t i = 0; i < items; i++) {
      uint64_t k;
      if (chime__table_insert(p, item, 1, NULL, &k, NULL, NULL) != 0)
        return 1;
    }
    free(item);
    if (slot_init(&ps, &pc.spec) != 0)
      return 1;
    out->plain_items = items;
  }
  /* Both tables alive, measured in turns (the median of each): a machine
   * whose load changes meanwhile weighs on both alike. */
  double sr[RUNS], pr[RUNS];
  for (int r = 0; r < RUNS; r++) {
    sr[r] = sample_for(t, &s, seconds / RUNS);
    pr[r] = p != NULL ? sample_for(p, &ps, seconds / RUNS) : 0;
  }
  double bps = median3(sr), pbps = median3(pr);
  out->windows_per_s = bps * BATCH;
  out->seq_gb_s = out->windows_per_s * window_bytes / 1e9;
  out->ns_per_batch = bps > 0 ? 1e9 / bps : 0;
  out->plain_items_per_s = pbps * BATCH;
  out->plain_gb_s = out->plain_items_per_s * window_bytes / 1e9;
  free(s.mem);
  chime__table_destroy(t);
  if (p != NULL) {
    free(ps.mem);
    chime__table_destroy(p);
  }
  free(req);
  return 0;
}

static int parse_sizes(const char *s, uint64_t *sizes, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v < 2 * T)
      return -1;
    sizes[n++] = v;
    if (*end != ',' && *end != '\0')
      return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

int chime__bench_sequence(int argc, char **argv) {
  int json = 0, plain = 1;
  double seconds = 1.0;
  uint32_t step_bytes = 1024;
  uint64_t sizes[4] = {10000, 1000000};
  int nsizes = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--no-plain")) {
      plain = 0;
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      nsizes = parse_sizes(argv[++i], sizes, 4);
      if (nsizes <= 0) {
        fprintf(stderr, "chime-bench sequence: --steps: sizes of at least "
                        "160, comma-separated\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--step-bytes") && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 16 || v > (1 << 20))
        return 2;
      step_bytes = (uint32_t)v;
    } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = atof(argv[++i]);
      if (!(seconds > 0))
        return 2;
    } else {
      fprintf(stderr,
              "usage: chime-bench sequence [--json] [--steps 10000,1000000] "
              "[--step-bytes 1024] [--seconds S] [--no-plain]\n"
              "  a sequence table alone (T = 80, stride 40, B = 32, uniform): "
              "steps written/s,\n"
              "  windows sampled/s and GB/s into a slot, vs a plain table of "
              "items of T steps\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  double first_cost = 0;
  for (int i = 0; i < nsizes; i++) {
    result_t r;
    if (run_one(sizes[i], step_bytes, seconds, plain, &r) != 0)
      return 1;
    double cost = r.windows_per_s > 0 ? 1e9 / r.windows_per_s : 0;
    if (i == 0)
      first_cost = cost;
    double ratio = r.plain_gb_s > 0 ? r.seq_gb_s / r.plain_gb_s : 0;
    if (json)
      printf("{\"bench\":\"sequence\",\"steps\":%" PRIu64
             ",\"step_bytes\":%u,\"sequence_length\":%d,\"stride\":%d,"
             "\"batch\":%d,\"step_storage_bytes\":%" PRIu64
             ",\"write_steps_per_s\":%.0f,\"write_gb_s\":%.2f,"
             "\"windows_per_s\":%.0f,\"sample_gb_s\":%.2f,"
             "\"ns_per_batch\":%.0f,\"plain_items\":%" PRIu64
             ",\"plain_items_per_s\":%.0f,\"plain_gb_s\":%.2f,"
             "\"vs_plain\":%.2f,\"cost_vs_smallest\":%.2f}\n",
             sizes[i], step_bytes, T, STRIDE, BATCH, r.step_storage,
             r.write_steps_per_s, r.write_gb_s, r.windows_per_s, r.seq_gb_s,
             r.ns_per_batch, r.plain_items, r.plain_items_per_s, r.plain_gb_s,
             ratio, cost / first_cost);
    else
      printf("%10" PRIu64 " steps of %u B: write %.2f M steps/s (%.2f GB/s); "
             "sample %.0f windows/s = %.2f GB/s (%.0f us a batch of %d), "
             "plain %.2f GB/s (%.2fx); cost %.2fx the "
             "smallest\n",
             sizes[i], step_bytes, r.write_steps_per_s / 1e6, r.write_gb_s,
             r.windows_per_s, r.seq_gb_s, r.ns_per_batch / 1e3, BATCH,
             r.plain_gb_s, ratio, cost / first_cost);
    fflush(stdout);
  }
  return 0;
}
