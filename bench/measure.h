/* chime-bench's clock, medians and process counters, shared by every
 * subcommand so that their figures are timed and summarised the same way. */
#ifndef CHIME_BENCH_MEASURE_H
#define CHIME_BENCH_MEASURE_H

#include <stdint.h>
#include <sys/types.h>

/* Monotonic seconds (CLOCK_MONOTONIC: the same clock in every process). */
double chime__bench_now_s(void);
/* The median of v[0..n-1] (n >= 1); sorts v in place. */
double chime__bench_median(double *v, int n);
/* The smallest and largest of v[0..n-1] (n >= 1). */
void chime__bench_range(const double *v, int n, double *lo, double *hi);
/* CPU seconds used so far by every thread of process pid (0: this process),
 * from its CPU-time clock (nanoseconds, not /proc's clock ticks); -1 if it
 * cannot be read. */
double chime__bench_cpu_s(pid_t pid);
/* xorshift64*, the generator of the table's draws: the next number of
 * the sequence seeded by *s (non-zero). */
static inline uint64_t chime__bench_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * UINT64_C(2685821657736338717);
}
/* The Threads: line of /proc/<pid>/status; -1 if it cannot be read. */
int chime__bench_threads(pid_t pid);

#endif
