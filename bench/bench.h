/* chime-bench subcommands. Each gets argv[0] = its own name ("ring") and the
 * options after it, prints one result per line (one JSON object per line with
 * --json), and returns a process exit code. */
#ifndef CHIME_BENCH_H
#define CHIME_BENCH_H

int chime__bench_ring(int argc, char **argv);
int chime__bench_replay(int argc, char **argv);
int chime__bench_sequence(int argc, char **argv);
int chime__bench_staleness(int argc, char **argv);
int chime__bench_device(int argc, char **argv);
int chime__bench_ragged(int argc, char **argv);
int chime__bench_storage(int argc, char **argv);
int chime__bench_bigtable(int argc, char **argv);
#ifdef CHIME_BENCH_SERVICE
int chime__bench_service(int argc, char **argv);
int chime__bench_ingest(int argc, char **argv);
int chime__bench_shards(int argc, char **argv);
int chime__bench_zwriter(int argc, char **argv);
int chime__bench_groups(int argc, char **argv);
#endif

#endif
