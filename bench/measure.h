/* chime-bench's clock and medians, shared by every subcommand so that their
 * figures are timed and summarised the same way. */
#ifndef CHIME_BENCH_MEASURE_H
#define CHIME_BENCH_MEASURE_H

/* Monotonic seconds. */
double chime__bench_now_s(void);
/* The median of v[0..n-1] (n >= 1); sorts v in place. */
double chime__bench_median(double *v, int n);

#endif
