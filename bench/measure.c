/* chime-bench's clock, medians and process counters (see measure.h). */
#include "measure.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double chime__bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double chime__bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void chime__bench_range(const double *v, int n, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    if (v[i] < *lo)
      *lo = v[i];
    if (v[i] > *hi)
      *hi = v[i];
  }
}

double chime__bench_cpu_s(pid_t pid) {
  clockid_t clk = CLOCK_PROCESS_CPUTIME_ID;
  struct timespec ts;
  if (pid > 0 && clock_getcpuclockid(pid, &clk) != 0)
    return -1;
  if (clock_gettime(clk, &ts) != 0)
    return -1;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int chime__bench_threads(pid_t pid) {
  char path[64], line[256];
  int n = -1;
  snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "Threads: %d", &n) == 1)
      break;
  fclose(f);
  return n;
}
