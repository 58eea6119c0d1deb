/* chime-bench ingest: samples per second into a table through one Insert
 * stream (the client writer), against chimed from the same build on
 * 127.0.0.1. Timed from the first append until every sample is acked (in the
 * table). Uniform tables evict the oldest item when full, so the stream never
 * waits for room. Figures are medians of --runs runs. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "chime/chime.h"
#include "measure.h"
#include "spawn.h"

#define MAX_RUNS 15

typedef struct {
  const char *table;
  uint32_t sample_bytes;
  uint64_t samples; /* per run */
} ingest_case_t;

static int ingest_run(const char *addr, const ingest_case_t *ic,
                      const chime_writer_opts_t *wo, double *per_s) {
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  uint8_t *sample = calloc(1, ic->sample_bytes);
  char why[128] = ""; /* a failure that is not a chime call's */
  int rc = CHIME_ENOMEM;
  if (sample == NULL) {
    snprintf(why, sizeof(why), "out of memory");
    goto out;
  }
  if ((rc = chime_client_create(&c, addr, NULL)) != 0 ||
      (rc = chime_writer_open(&w, c, ic->table, wo)) != 0)
    goto out;
  double t0 = chime__bench_now_s();
  for (uint64_t i = 0; i < ic->samples && rc == 0; i++) {
    memcpy(sample, &i, sizeof(i));
    rc = chime_writer_append(w, sample, ic->sample_bytes, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(w);
  double dt = chime__bench_now_s() - t0;
  if (rc == 0 && chime_writer_acked(w) != ic->samples) {
    snprintf(why, sizeof(why),
             "%" PRIu64 " of %" PRIu64 " samples acked after flush",
             chime_writer_acked(w), ic->samples);
    rc = CHIME_EPROTO;
  }
  if (rc == 0)
    *per_s = (double)ic->samples / dt;
out:
  if (rc != 0)
    fprintf(stderr, "chime-bench ingest: %s: %s\n", ic->table,
            why[0] ? why : chime_last_error());
  int closed = chime_writer_close(w); /* the last flush */
  if (rc == 0)
    rc = closed;
  chime_client_destroy(c);
  free(sample);
  return rc;
}

static void usage(void) {
  fprintf(stderr,
          "usage: chime-bench ingest [--json] [--runs N] [--scale S]\n"
          "                          [--addr ADDR [--only 256|64k]]\n"
          "  256-byte and 64 KiB samples through one Insert stream;\n"
          "  --scale multiplies the samples per run (default 1);\n"
          "  --addr: into a running chimed that has the tables ingest_256\n"
          "  and ingest_64k (as below) instead of one of its own\n"
          "  (python/bench.py compares its Python writer with this)\n");
}

int chime__bench_ingest(int argc, char **argv) {
  int json = 0, runs = 3;
  double scale = 1.0;
  const char *addr = NULL, *only = NULL;
  chime__bench_child_t chimed;
  int rc = 0, started = 0;
  ingest_case_t cases[] = {
      {"ingest_256", 256, 1500000},
      {"ingest_64k", 65536, 8192},
  };
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;

  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "ingest") == 0)
      continue;
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
      if (runs < 1 || runs > MAX_RUNS) {
        usage();
        return 2;
      }
    } else if (strcmp(argv[i], "--addr") == 0 && i + 1 < argc) {
      addr = argv[++i];
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
      if (strcmp(only, "256") != 0 && strcmp(only, "64k") != 0) {
        usage();
        return 2;
      }
    } else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = atof(argv[++i]);
      if (!(scale > 0 && scale <= 100)) {
        usage();
        return 2;
      }
    } else {
      usage();
      return 2;
    }
  }
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    cases[k].samples = (uint64_t)((double)cases[k].samples * scale);
    if (cases[k].samples < 16)
      cases[k].samples = 16;
  }

  /* min_size above capacity: nothing samples, the tables only take inserts. */
  const char *config =
      "{\"tables\": [\n"
      "  {\"name\": \"ingest_256\", \"spec\": \"x:u8[256]\", \"capacity\": "
      "65536, \"min_size\": 65536, \"sampler\": \"uniform\"},\n"
      "  {\"name\": \"ingest_64k\", \"spec\": \"x:u8[65536]\", \"capacity\": "
      "512, \"min_size\": 512, \"sampler\": \"uniform\"}]}\n";
  if (addr == NULL) {
    if ((rc = chime__bench_chimed_start(&chimed, config)) != 0)
      goto out;
    started = 1;
    addr = chimed.addr;
  }
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    double v[MAX_RUNS];
    if (only != NULL && strcmp(cases[k].table + strlen("ingest_"), only) != 0)
      continue;
    for (int r = 0; r < runs; r++)
      if ((rc = ingest_run(addr, &cases[k], &wo, &v[r])) != 0)
        goto out;
    double per_s = chime__bench_median(v, runs);
    double gbps = per_s * cases[k].sample_bytes / 1e9;
    uint64_t per_msg = wo.max_batch_bytes / cases[k].sample_bytes;
    if (per_msg > wo.max_batch_samples)
      per_msg = wo.max_batch_samples;
    if (per_msg == 0)
      per_msg = 1;
    if (json)
      printf("{\"bench\":\"ingest\",\"case\":\"insert\",\"sample_bytes\":%u,"
             "\"samples_per_s\":%.0f,\"gbps\":%.3f,\"samples\":%" PRIu64
             ",\"samples_per_message\":%" PRIu64 ",\"max_inflight\":%u}\n",
             cases[k].sample_bytes, per_s, gbps, cases[k].samples, per_msg,
             wo.max_inflight);
    else
      printf("insert %6u-byte samples: %12.0f samples/s %8.3f GB/s\n",
             cases[k].sample_bytes, per_s, gbps);
    fflush(stdout);
  }
out:
  if (started)
    rc = chime__bench_chimed_stop(&chimed, rc, "chime-bench ingest", "");
  return rc == 0 ? 0 : 1;
}
