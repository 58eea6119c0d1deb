/* chime-bench <ring|replay|sequence|service|ingest|...> [--json] [options] */
#include <stdio.h>

#include "common/malloc_tune.h"
#include <string.h>

#include "bench.h"

static int usage(void) {
  fprintf(stderr,
          "usage: chime-bench <command> [--json] [options]\n"
          "  ring      producer thread -> ring -> consumer process, vs memcpy\n"
          "  replay    a table alone, per selector: insert, sample, "
          "mutate rates\n"
          "  sequence  a sequence table alone: steps written, windows "
          "sampled\n"
          "  ragged    a table of ragged leaves: bytes held and moved vs used, "
          "delivery vs a fixed-shape table\n"
          "  storage   a table keeping frames zstd-compressed vs libzstd on "
          "the same frames\n"
          "  bigtable  a table in files larger than memory, sampled, vs a "
          "pread loop over its file\n"
          "  staleness a table's sampling CPU with a staleness gate vs "
          "without (--weight inverse: with staleness weighting vs without)\n"
          "  device    a device stream's copies: registered slot vs "
          "cudaMallocHost, next(), copies hidden (skips without a GPU)\n"
#ifdef CHIME_BENCH_SERVICE
          "  service   table -> learner over chimed (shm, stream), vs limits\n"
          "  ingest    actors -> chimed Insert throughput\n"
          "  shards    4 chimed as one service vs the shards one by one\n"
          "  zwriter   writers into a table keeping frames zstd-compressed "
          "vs libzstd\n"
          "  groups    batches of groups of ragged samples vs a plain ragged "
          "table; a filter's insert CPU\n"
#else
          "  (service, ingest and shards: built only with "
          "CHIME_WITH_SERVICE=ON)\n"
#endif
          "  chime-bench <command> --help for its options\n");
  return 2;
}

int main(int argc, char **argv) {
  /* Every case and its server process alike (the grpc_plain server is this
   * binary again, chimed does the same): both sides of a ratio run with the
   * same allocator settings. */
  chime__malloc_tune();
  if (argc < 2)
    return usage();
  if (strcmp(argv[1], "ring") == 0)
    return chime__bench_ring(argc - 1, argv + 1);
  if (strcmp(argv[1], "replay") == 0)
    return chime__bench_replay(argc - 1, argv + 1);
  if (strcmp(argv[1], "sequence") == 0)
    return chime__bench_sequence(argc - 1, argv + 1);
  if (strcmp(argv[1], "storage") == 0)
    return chime__bench_storage(argc - 1, argv + 1);
  if (strcmp(argv[1], "bigtable") == 0)
    return chime__bench_bigtable(argc - 1, argv + 1);
  if (strcmp(argv[1], "staleness") == 0)
    return chime__bench_staleness(argc - 1, argv + 1);
  if (strcmp(argv[1], "device") == 0)
    return chime__bench_device(argc - 1, argv + 1);
  if (strcmp(argv[1], "ragged") == 0)
    return chime__bench_ragged(argc - 1, argv + 1);
#ifdef CHIME_BENCH_SERVICE
  if (strcmp(argv[1], "service") == 0)
    return chime__bench_service(argc - 1, argv + 1);
  if (strcmp(argv[1], "ingest") == 0)
    return chime__bench_ingest(argc - 1, argv + 1);
  if (strcmp(argv[1], "shards") == 0)
    return chime__bench_shards(argc - 1, argv + 1);
  if (strcmp(argv[1], "zwriter") == 0)
    return chime__bench_zwriter(argc - 1, argv + 1);
  if (strcmp(argv[1], "groups") == 0)
    return chime__bench_groups(argc - 1, argv + 1);
#endif
  return usage();
}
