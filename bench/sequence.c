/* chime-bench sequence: a sequence table alone (no gRPC, no ring), per
 * number of stored steps: steps written per second (4 writers' episodes
 * of 1000 steps interleaved, requests of 64 steps), first into the empty
 * store (the fill: every page of it touched for the first time, so the
 * machine's page-fault cost is in it) and then into the full store (every
 * append reuses the oldest block and evicts its windows, as a server does
 * for its life), windows sampled per second into a slot of B windows of
 * T steps (uniform sampler) and the GB/s that is, against a plain table
 * holding items of the same bytes (T steps, as many bytes in all as the
 * steps stored, up to 4 GiB) sampled into the same slot, and the gather
 * floor: B windows of T steps, each one contiguous run at a uniform
 * random step, copied from a plain array of as many steps into a
 * [B, T, step] buffer (no table), all in turns, medians of 3, with the
 * CPU time of each (a ratio of CPU times is steadier than one of wall
 * times on a shared machine). Both tables copy outside their lock (a
 * sequence window's first block pinned). */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "measure.h"
#include "replay/table.h"

#define T 80
#define STRIDE 40
#define BATCH 32
#define REQUEST 64
#define WRITERS 4
#define EPISODE 1000
/* Steps written into the full store: a quarter of its capacity, and at
 * least this many, so that a small store's figure is not a few requests'
 * time. */
#define WRITE_MIN_STEPS 250000
/* The plain table holds the bytes of the steps stored, at most this many
 * (both tables are alive at once). */
#define PLAIN_MAX_BYTES (UINT64_C(4) << 30)
/* The floor's array beside the tables up to this many bytes; a larger
 * one is timed alone once they are freed (two stores of 10 GB do not
 * fit this machine), not in turns with them. */
#define FLOOR_TURNS_MAX_BYTES (UINT64_C(4) << 30)

typedef struct {
  double fill_steps_per_s, fill_gb_s;   /* into the empty store */
  double write_steps_per_s, write_gb_s; /* into the full store */
  uint64_t write_steps;
  double windows_per_s, seq_gb_s, ns_per_batch;
  double plain_items_per_s, plain_gb_s;
  uint64_t plain_items, step_storage;
  double cpu_ns_per_window; /* CPU time over every batch timed */
  double plain_cpu_ns_per_window;
  double floor_windows_per_s, floor_gb_s, floor_cpu_ns_per_window;
  int floor_in_turns;
} result_t;

typedef struct {
  chime_ring_layout_t lay;
  uint8_t *mem;
  chime__ring_wslot_t ws;
} slot_t;

static int slot_init(slot_t *s, const chime_spec_t *spec) {
  if (chime_ring_layout_compute(&s->lay, spec, BATCH, 2) != 0)
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

typedef struct {
  uint64_t batches;
  double cpu_s;
} spent_t;

/* Takes batches with batch(ctx) for `seconds`; returns batches per
 * second (0: a batch failed) and adds the batches and their CPU time to
 * *sp. */
static double time_for(int (*batch)(void *), void *ctx, double seconds,
                       spent_t *sp) {
  uint64_t n = 0;
  double c0 = chime__bench_cpu_s(0), t0 = chime__bench_now_s(), dt = 0;
  while (dt < seconds) {
    if (batch(ctx) != 0)
      return 0;
    if (++n % 16 == 0)
      dt = chime__bench_now_s() - t0;
  }
  dt = chime__bench_now_s() - t0;
  sp->batches += n;
  sp->cpu_s += chime__bench_cpu_s(0) - c0;
  return (double)n / dt;
}

typedef struct {
  chime__table_t *t;
  slot_t *s;
} table_batch_t;

static int table_batch(void *ctx) {
  table_batch_t *b = ctx;
  atomic_int stop = 0;
  return chime__table_sample(b->t, &b->s->lay, &b->s->ws, &stop);
}

/* The gather floor: a batch's copies with nothing around them (no lock,
 * no windows, no blocks, no info): BATCH windows of T consecutive steps,
 * each starting at a uniform random step (xorshift64*, as the table's
 * draws), from a plain anonymous mapping of the steps stored (4 KiB
 * pages, as the step store), written once before timing as writes fill
 * the store, into a [BATCH, T, step] buffer. */
typedef struct {
  uint8_t *steps, *dst;
  uint64_t nsteps, seed;
  size_t bytes, step_bytes;
} floor_t;

static int floor_batch(void *ctx) {
  floor_t *f = ctx;
  size_t wb = T * f->step_bytes;
  for (size_t j = 0; j < BATCH; j++) {
    uint64_t first = chime__bench_rand(&f->seed) % (f->nsteps - T + 1);
    memcpy(f->dst + j * wb, f->steps + first * f->step_bytes, wb);
  }
  return 0;
}

static int floor_init(floor_t *f, uint64_t steps, uint32_t step_bytes) {
  f->nsteps = steps;
  f->seed = 43;
  f->step_bytes = step_bytes;
  f->bytes = (size_t)steps * step_bytes;
  f->steps = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  f->dst = aligned_alloc(4096, (size_t)BATCH * T * step_bytes);
  if (f->steps == MAP_FAILED || f->dst == NULL)
    return -1;
  memset(f->steps, 1, f->bytes);
  memset(f->dst, 0, (size_t)BATCH * T * step_bytes);
  return 0;
}

static void floor_free(floor_t *f) {
  munmap(f->steps, f->bytes);
  free(f->dst);
}

/* The bench's actors: WRITERS writers' episodes of EPISODE steps,
 * interleaved a request of REQUEST steps at a time. */
typedef struct {
  chime__table_t *t;
  const uint8_t *req;
  uint64_t seq[WRITERS], len[WRITERS];
  uint32_t next;
} writers_t;

/* Writes at least n steps, in whole requests: returns how many (0: an
 * insert failed) and their wall time in *seconds. */
static uint64_t write_steps(writers_t *wr, uint64_t n, double *seconds) {
  double t0 = chime__bench_now_s();
  uint64_t written = 0;
  for (; written < n; written += REQUEST) {
    uint32_t w = wr->next;
    uint64_t k;
    wr->next = (w + 1) % WRITERS;
    chime__dedupe_req_t dq = {.writer = w + 1, .seq = ++wr->seq[w]};
    wr->len[w] += REQUEST;
    dq.end_episode = wr->len[w] >= EPISODE;
    if (dq.end_episode)
      wr->len[w] = 0;
    if (chime__table_insert(wr->t, wr->req, REQUEST, NULL, &k, NULL, &dq) !=
        0) {
      fprintf(stderr, "chime-bench sequence: insert failed\n");
      return 0;
    }
  }
  *seconds = chime__bench_now_s() - t0;
  return written;
}

static int run_one(uint64_t steps, uint32_t step_bytes, double seconds,
                   int with_plain, result_t *out) {
  char spec[128];
  memset(out, 0, sizeof(*out));
  snprintf(spec, sizeof(spec), "x:u8[%u], id:u64[]", step_bytes - 8);
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "seq");
  if (chime_spec_parse(&tc.spec, spec) != 0)
    return 1;
  tc.capacity_steps = steps;
  tc.sequence_length = T;
  tc.stride = STRIDE;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
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
  /* Writes: 4 writers round robin, first until the store is full (the
   * fill), then a quarter of its capacity more, at least WRITE_MIN_STEPS,
   * each append reusing the oldest block (the writes). */
  writers_t wr = {.t = t, .req = req};
  double fill_s = 0, write_s = 0;
  uint64_t filled = write_steps(&wr, steps, &fill_s);
  out->write_steps = write_steps(
      &wr, steps / 4 > WRITE_MIN_STEPS ? steps / 4 : WRITE_MIN_STEPS, &write_s);
  if (filled == 0 || out->write_steps == 0)
    return 1;
  out->fill_steps_per_s = (double)filled / fill_s;
  out->fill_gb_s = (double)filled * step_bytes / fill_s / 1e9;
  out->write_steps_per_s = (double)out->write_steps / write_s;
  out->write_gb_s = (double)out->write_steps * step_bytes / write_s / 1e9;
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
    if (chime_spec_parse(&pc.spec, spec) != 0)
      return 1;
    uint64_t items = steps / T;
    if (items * window_bytes > PLAIN_MAX_BYTES)
      items = PLAIN_MAX_BYTES / (uint64_t)window_bytes;
    if (items < BATCH)
      items = BATCH;
    pc.capacity = items;
    pc.sampler = CHIME__SELECTOR_UNIFORM;
    pc.remover = CHIME__SELECTOR_FIFO;
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
  /* Both tables and the floor alive, measured in turns (the median of
   * each): a machine whose load changes meanwhile weighs on all alike. */
  floor_t fl = {0};
  out->floor_in_turns = (uint64_t)steps * step_bytes <= FLOOR_TURNS_MAX_BYTES;
  if (out->floor_in_turns && floor_init(&fl, steps, step_bytes) != 0)
    return 1;
  table_batch_t sb = {t, &s}, pb = {p, &ps};
  spent_t sp = {0}, fsp = {0}, psp = {0};
  double sr[RUNS], pr[RUNS], fr[RUNS];
  for (int r = 0; r < RUNS; r++) {
    sr[r] = time_for(table_batch, &sb, seconds / RUNS, &sp);
    pr[r] = p != NULL ? time_for(table_batch, &pb, seconds / RUNS, &psp) : 0;
    if (out->floor_in_turns)
      fr[r] = time_for(floor_batch, &fl, seconds / RUNS, &fsp);
  }
  double bps = median3(sr), pbps = median3(pr);
  out->windows_per_s = bps * BATCH;
  out->seq_gb_s = out->windows_per_s * window_bytes / 1e9;
  out->ns_per_batch = bps > 0 ? 1e9 / bps : 0;
  out->cpu_ns_per_window = sp.cpu_s * 1e9 / (double)(sp.batches * BATCH);
  out->plain_cpu_ns_per_window =
      psp.batches > 0 ? psp.cpu_s * 1e9 / (double)(psp.batches * BATCH) : 0;
  out->plain_items_per_s = pbps * BATCH;
  out->plain_gb_s = out->plain_items_per_s * window_bytes / 1e9;
  free(s.mem);
  chime__table_destroy(t);
  if (p != NULL) {
    free(ps.mem);
    chime__table_destroy(p);
  }
  if (!out->floor_in_turns) {
    if (floor_init(&fl, steps, step_bytes) != 0)
      return 1;
    for (int r = 0; r < RUNS; r++)
      fr[r] = time_for(floor_batch, &fl, seconds / RUNS, &fsp);
  }
  floor_free(&fl);
  out->floor_windows_per_s = median3(fr) * BATCH;
  out->floor_gb_s = out->floor_windows_per_s * window_bytes / 1e9;
  out->floor_cpu_ns_per_window =
      fsp.cpu_s * 1e9 / (double)(fsp.batches * BATCH);
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
      fprintf(
          stderr,
          "usage: chime-bench sequence [--json] [--steps 10000,1000000] "
          "[--step-bytes 1024] [--seconds S] [--no-plain]\n"
          "  a sequence table alone (T = 80, stride 40, B = 32, uniform): "
          "steps written/s\n"
          "  into the empty store (fill) and into the full one (write),\n"
          "  windows sampled/s and GB/s into a slot, vs a plain table of "
          "items of T steps\n"
          "  and vs the gather floor (the same windows' bytes copied from a "
          "plain array)\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  double first_cost = 0, first_cpu = 0, first_fcost = 0, first_fcpu = 0;
  for (int i = 0; i < nsizes; i++) {
    result_t r;
    if (run_one(sizes[i], step_bytes, seconds, plain, &r) != 0)
      return 1;
    double cost = r.windows_per_s > 0 ? 1e9 / r.windows_per_s : 0;
    double fcost = 1e9 / r.floor_windows_per_s;
    if (i == 0) {
      first_cost = cost;
      first_cpu = r.cpu_ns_per_window;
      first_fcost = fcost;
      first_fcpu = r.floor_cpu_ns_per_window;
    }
    double ratio = r.plain_gb_s > 0 ? r.seq_gb_s / r.plain_gb_s : 0;
    /* Like work (the same bytes a window), so CPU per window compares. */
    double cpu_ratio = r.plain_cpu_ns_per_window > 0
                           ? r.cpu_ns_per_window / r.plain_cpu_ns_per_window
                           : 0;
    if (json)
      printf("{\"bench\":\"sequence\",\"steps\":%" PRIu64
             ",\"step_bytes\":%u,\"sequence_length\":%d,\"stride\":%d,"
             "\"batch\":%d,\"step_storage_bytes\":%" PRIu64
             ",\"fill_steps_per_s\":%.0f,\"fill_gb_s\":%.2f,"
             "\"write_steps\":%" PRIu64 ",\"write_steps_per_s\":%.0f,"
             "\"write_gb_s\":%.2f,"
             "\"windows_per_s\":%.0f,\"sample_gb_s\":%.2f,"
             "\"ns_per_batch\":%.0f,\"plain_items\":%" PRIu64
             ",\"plain_items_per_s\":%.0f,\"plain_gb_s\":%.2f,"
             "\"plain_cpu_ns_per_window\":%.0f,"
             "\"vs_plain\":%.2f,\"cpu_vs_plain\":%.2f,"
             "\"cost_vs_smallest\":%.2f,"
             "\"cpu_ns_per_window\":%.0f,\"cpu_cost_vs_smallest\":%.2f,"
             "\"floor_in_turns\":%s,\"floor_windows_per_s\":%.0f,"
             "\"floor_gb_s\":%.2f,\"floor_cost_vs_smallest\":%.2f,"
             "\"floor_cpu_ns_per_window\":%.0f,"
             "\"floor_cpu_cost_vs_smallest\":%.2f,\"cost_vs_floor\":%.2f,"
             "\"cpu_vs_floor\":%.2f}\n",
             sizes[i], step_bytes, T, STRIDE, BATCH, r.step_storage,
             r.fill_steps_per_s, r.fill_gb_s, r.write_steps,
             r.write_steps_per_s, r.write_gb_s, r.windows_per_s, r.seq_gb_s,
             r.ns_per_batch, r.plain_items, r.plain_items_per_s, r.plain_gb_s,
             r.plain_cpu_ns_per_window, ratio, cpu_ratio, cost / first_cost,
             r.cpu_ns_per_window, r.cpu_ns_per_window / first_cpu,
             r.floor_in_turns ? "true" : "false", r.floor_windows_per_s,
             r.floor_gb_s, fcost / first_fcost, r.floor_cpu_ns_per_window,
             r.floor_cpu_ns_per_window / first_fcpu, cost / fcost,
             r.cpu_ns_per_window / r.floor_cpu_ns_per_window);
    else
      printf("%10" PRIu64 " steps of %u B: fill %.2f M steps/s (%.2f GB/s), "
             "write %.2f M steps/s (%.2f GB/s); "
             "sample %.0f windows/s = %.2f GB/s (%.0f us a batch of %d), "
             "plain %.2f GB/s (%.2fx, CPU %.2fx); cost %.2fx the smallest, "
             "CPU %.2fx; floor %.2f GB/s, cost %.2fx the smallest%s; chime "
             "%.2fx the floor, CPU %.2fx\n",
             sizes[i], step_bytes, r.fill_steps_per_s / 1e6, r.fill_gb_s,
             r.write_steps_per_s / 1e6, r.write_gb_s, r.windows_per_s,
             r.seq_gb_s, r.ns_per_batch / 1e3, BATCH, r.plain_gb_s, ratio,
             cpu_ratio, cost / first_cost, r.cpu_ns_per_window / first_cpu,
             r.floor_gb_s, fcost / first_fcost,
             r.floor_in_turns ? "" : " (timed after)", cost / fcost,
             r.cpu_ns_per_window / r.floor_cpu_ns_per_window);
    fflush(stdout);
  }
  return 0;
}
