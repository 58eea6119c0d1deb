/* Internal: the one clock helper: times in ns and ms, and the timespecs
 * that futexes and pthread_cond_timedwait take. */
#ifndef CHIME_COMMON_CLOCK_H
#define CHIME_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#define CHIME__NS_PER_S UINT64_C(1000000000)
#define CHIME__NS_PER_MS UINT64_C(1000000)

/* Nanoseconds on clk (CLOCK_MONOTONIC, or CLOCK_REALTIME where a wall
 * time or a condition variable's clock is meant). */
static inline uint64_t chime__clock_ns(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (uint64_t)ts.tv_sec * CHIME__NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline uint64_t chime__now_ns(void) {
  return chime__clock_ns(CLOCK_MONOTONIC);
}

/* Monotonic milliseconds; signed, so that deadlines can be subtracted and
 * a negative difference read as "past". */
static inline int64_t chime__now_ms(void) {
  return (int64_t)(chime__now_ns() / CHIME__NS_PER_MS);
}

/* Monotonic seconds, for durations that are printed. */
static inline double chime__now_s(void) {
  return (double)chime__now_ns() / (double)CHIME__NS_PER_S;
}

/* ns as a timespec: an absolute time on some clock, or a timeout. */
static inline struct timespec chime__ts_from_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / CHIME__NS_PER_S),
                        (long)(ns % CHIME__NS_PER_S)};
  return ts;
}

/* The time ms from now on clk, as an absolute timespec (a condition
 * variable's deadline on its clock). */
static inline struct timespec chime__clock_after_ms(clockid_t clk,
                                                    uint64_t ms) {
  return chime__ts_from_ns(chime__clock_ns(clk) + ms * CHIME__NS_PER_MS);
}

#endif
