/* chime-bench ring: the same-host data path against one memcpy.
 *
 * For each batch size and each consumer mode (touch every cache line, or
 * not), each run:
 *   memcpy   this thread copies a source buffer into the ring's slots, round
 *            robin, with no ring protocol and no consumer (the limit)
 *   ring     the same copies, each followed by publish; a consumer process
 *            (this binary re-executed, attached by fd) takes, optionally
 *            reads, and releases every batch
 *   paced    one batch at a time, published when the consumer is idle
 *            (asleep in its futex): the publish-to-wake latency
 * Slots are pre-faulted on both sides before anything is timed. GB/s are 1e9
 * batch bytes per second; each figure is the median of --runs runs. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "chime/ring.h"
#include "measure.h"
#include "ring/producer.h"

extern char **environ;

#define MIB (UINT64_C(1) << 20)
#define SAMPLE_BYTES 4096u
#define MAX_RUNS 15
#define MAX_SIZES 8
#define PACED_BATCHES 300u

typedef struct {
  int json;
  int runs;
  uint32_t slots;
  uint64_t run_bytes;
  int nsizes;
  uint64_t sizes[MAX_SIZES];
  int cpu_producer, cpu_consumer; /* -1: let the scheduler place them */
} opts_t;

typedef struct {
  double memcpy_gbps, gbps, batches_per_s;
  double p50_us, p99_us;               /* paced: consumer idle when published */
  double loaded_p50_us, loaded_p99_us; /* during the throughput run */
  double ratio;
  uint64_t producer_wait_ns, consumer_wait_ns;
} result_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double percentile_us(uint64_t *v, uint64_t n, double q) {
  uint64_t i;
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), cmp_u64);
  i = (uint64_t)(q * (double)(n - 1) + 0.5);
  return (double)v[i] / 1000.0;
}

/* ---------------------------------------------------------------- consumer */

/* Reads one word per cache line, as a learner's copy to the GPU would. */
static uint64_t touch_lines(const void *p, uint64_t bytes) {
  const volatile uint64_t *w = p;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < bytes / 8; i += 8)
    sum += w[i];
  return sum;
}

/* ring --consumer FD NONCE_HEX TOUCH N PACED CPU: prints "ready" after
 * pre-faulting, then "done <4 latencies in ns> <checksum>". */
static int pin_cpu(int cpu) {
  cpu_set_t set;
  if (cpu < 0)
    return 0;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set);
}

static int consumer_main(int argc, char **argv) {
  chime_ring_t *ring = NULL;
  uint8_t nonce[16];
  uint64_t n, paced, *lat = NULL, sum = 0, stats[4];
  const chime_ring_layout_t *l;
  int touch, rc = 1;

  if (argc != 8 || strlen(argv[3]) != 32)
    return 2;
  if (pin_cpu(atoi(argv[7])) != 0)
    return 2;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(argv[3] + 2 * i, "%2x", &v) != 1)
      return 2;
    nonce[i] = (uint8_t)v;
  }
  touch = atoi(argv[4]);
  n = strtoull(argv[5], NULL, 10);
  paced = strtoull(argv[6], NULL, 10);
  if (chime_ring_attach(&ring, atoi(argv[2]), nonce) != 0)
    return 3;
  l = chime_ring_layout(ring);
  lat = calloc(n + paced + 1, sizeof(*lat));
  if (lat == NULL)
    goto out;
  /* Map every page now, not inside the timed loop. */
  for (uint32_t s = 0; s < l->slots; s++) {
    const volatile uint8_t *p = chime_ring_slot_base(ring, s);
    for (uint64_t off = 0; off < l->slot_bytes; off += 4096)
      sum += p[off];
  }
  printf("ready\n");
  fflush(stdout);
  for (uint64_t i = 0; i < n + paced; i++) {
    chime_ring_view_t v;
    if (chime_ring_next(ring, &v, 60000) != 0)
      goto out;
    lat[i] = now_ns() - v.info[0].insert_time_ns;
    if (touch)
      sum += touch_lines(v.leaf[0], l->leaf_bytes[0]);
    if (chime_ring_release(ring, v.slot) != 0)
      goto out;
  }
  stats[0] = (uint64_t)(percentile_us(lat + n, paced, 0.50) * 1000);
  stats[1] = (uint64_t)(percentile_us(lat + n, paced, 0.99) * 1000);
  stats[2] = (uint64_t)(percentile_us(lat, n, 0.50) * 1000);
  stats[3] = (uint64_t)(percentile_us(lat, n, 0.99) * 1000);
  printf("done %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
         stats[0], stats[1], stats[2], stats[3], sum);
  fflush(stdout);
  rc = 0;
out:
  free(lat);
  chime_ring_destroy(ring);
  return rc;
}

/* ---------------------------------------------------------------- producer */

typedef struct {
  pid_t pid;
  int out;
} child_t;

static int spawn_consumer(child_t *c, chime_ring_t *ring, int touch, uint64_t n,
                          uint64_t paced, int cpu) {
  posix_spawn_file_actions_t fa;
  char self[4096], fdtext[16], hex[33], t[4], ntext[24], ptext[24], ctext[16];
  char *argv[10];
  uint8_t nonce[16];
  int pipefd[2], fd, rc;
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);

  if (len <= 0)
    return -1;
  self[len] = '\0';
  chime_ring_nonce(ring, nonce);
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", nonce[i]);
  fd = fcntl(chime_ring_fd(ring), F_DUPFD, 3); /* inherited: no CLOEXEC */
  if (fd < 0 || pipe2(pipefd, O_CLOEXEC) != 0)
    return -1;
  snprintf(fdtext, sizeof(fdtext), "%d", fd);
  snprintf(t, sizeof(t), "%d", touch);
  snprintf(ntext, sizeof(ntext), "%" PRIu64, n);
  snprintf(ptext, sizeof(ptext), "%" PRIu64, paced);
  argv[0] = self;
  argv[1] = (char *)"ring";
  argv[2] = (char *)"--consumer";
  argv[3] = fdtext;
  argv[4] = hex;
  argv[5] = t;
  argv[6] = ntext;
  argv[7] = ptext;
  argv[8] = ctext;
  argv[9] = NULL;
  snprintf(ctext, sizeof(ctext), "%d", cpu);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  rc = posix_spawn(&c->pid, self, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd);
  close(pipefd[1]);
  c->out = pipefd[0];
  return rc == 0 ? 0 : -1;
}

static int read_line(child_t *c, char *buf, size_t cap, int timeout_ms) {
  size_t used = 0;
  while (used + 1 < cap) {
    struct pollfd p = {c->out, POLLIN, 0};
    ssize_t r;
    if (poll(&p, 1, timeout_ms) != 1)
      return -1;
    r = read(c->out, buf + used, 1);
    if (r <= 0)
      return -1;
    if (buf[used] == '\n')
      break;
    used++;
  }
  buf[used] = '\0';
  return 0;
}

static int child_finish(child_t *c, int kill_it) {
  int status = 0;
  if (c->pid > 0) {
    if (kill_it)
      kill(c->pid, SIGKILL);
    waitpid(c->pid, &status, 0);
  }
  if (c->out >= 0)
    close(c->out);
  c->pid = 0;
  c->out = -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void warm_slots(chime_ring_t *ring) {
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  for (uint32_t s = 0; s < l->slots; s++)
    memset(chime_ring_slot_base(ring, s), 0, l->slot_bytes);
}

/* The limit: the same copies into the same warm slots, nothing else. */
static double run_memcpy(chime_ring_t *ring, const uint8_t *src, uint64_t bb,
                         uint64_t n) {
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  uint64_t t0 = now_ns(), t1;
  for (uint64_t i = 0; i < n; i++) {
    uint8_t *dst = chime_ring_slot_base(ring, (uint32_t)(i % l->slots));
    memcpy(dst + l->leaf_offset[0], src, bb);
    ((chime_sample_info_t *)(dst + l->info_offset))->insert_time_ns = now_ns();
  }
  t1 = now_ns();
  return (double)(n * bb) / (double)(t1 - t0);
}

static int produce(chime_ring_t *ring, const uint8_t *src, uint64_t bb) {
  chime__ring_wslot_t w;
  int rc = chime__ring_acquire(ring, &w, 60000);
  if (rc != 0)
    return rc;
  if (src != NULL)
    memcpy(w.leaf[0], src, bb);
  w.info[0].insert_time_ns = now_ns();
  return chime__ring_publish(ring, w.slot, NULL);
}

static int run_once(const opts_t *o, uint64_t bb, int touch, const uint8_t *src,
                    result_t *r) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;
  chime_ring_stats_t st;
  child_t c = {0, -1};
  uint64_t n = o->run_bytes / bb, t0, t1, lat[4], sum;
  char line[256];
  int rc = -1;

  if (n < 16)
    n = 16;
  snprintf(line, sizeof(line), "x:u8[%u]", SAMPLE_BYTES);
  if (chime_spec_parse(&spec, line) != 0 ||
      chime__ring_create(&ring, &spec, (uint32_t)(bb / SAMPLE_BYTES),
                         o->slots) != 0) {
    fprintf(stderr,
            "chime-bench ring: cannot create a ring of %" PRIu64
            " byte batches\n",
            bb);
    goto out;
  }
  warm_slots(ring);
  r->memcpy_gbps = run_memcpy(ring, src, bb, n);
  warm_slots(ring);

  if (spawn_consumer(&c, ring, touch, n, PACED_BATCHES, o->cpu_consumer) != 0 ||
      read_line(&c, line, sizeof(line), 30000) != 0 ||
      strcmp(line, "ready") != 0) {
    fprintf(stderr, "chime-bench ring: consumer did not start\n");
    goto out;
  }
  t0 = now_ns();
  for (uint64_t i = 0; i < n; i++)
    if (produce(ring, src, bb) != 0)
      goto out;
  /* Done when the consumer has given every batch back. */
  do {
    chime_ring_stats(ring, &st);
    if (st.released < n)
      sched_yield();
  } while (st.released < n);
  t1 = now_ns();
  r->gbps = (double)(n * bb) / (double)(t1 - t0);
  r->batches_per_s = (double)n * 1e9 / (double)(t1 - t0);
  r->ratio = r->gbps / r->memcpy_gbps;
  r->producer_wait_ns = st.producer_wait_ns;
  r->consumer_wait_ns = st.consumer_wait_ns;

  /* Paced: publish only when the consumer has released the last batch and
   * had time to fall asleep, so each sample is a futex wake. */
  for (uint64_t i = 0; i < PACED_BATCHES; i++) {
    do {
      chime_ring_stats(ring, &st);
      if (st.released < n + i)
        sched_yield();
    } while (st.released < n + i);
    sleep_us(200);
    if (produce(ring, NULL, bb) != 0)
      goto out;
  }
  if (read_line(&c, line, sizeof(line), 60000) != 0 ||
      sscanf(line,
             "done %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
             &lat[0], &lat[1], &lat[2], &lat[3], &sum) != 5) {
    fprintf(stderr, "chime-bench ring: consumer failed\n");
    goto out;
  }
  r->p50_us = (double)lat[0] / 1000;
  r->p99_us = (double)lat[1] / 1000;
  r->loaded_p50_us = (double)lat[2] / 1000;
  r->loaded_p99_us = (double)lat[3] / 1000;
  rc = child_finish(&c, 0);
out:
  if (c.pid > 0)
    child_finish(&c, 1);
  chime_ring_destroy(ring);
  return rc;
}

static void emit(const opts_t *o, uint64_t bb, int touch, const result_t *r) {
  char cpus[32] = "any";
  if (o->cpu_producer >= 0)
    snprintf(cpus, sizeof(cpus), "%d,%d", o->cpu_producer, o->cpu_consumer);
  if (o->json) {
    printf("{\"bench\":\"ring\",\"batch_bytes\":%" PRIu64
           ",\"touch\":%s,\"gbps\":%.3f,\"batches_per_s\":%.1f,"
           "\"p50_us\":%.2f,\"p99_us\":%.2f,\"memcpy_gbps\":%.3f,"
           "\"ratio_vs_memcpy\":%.3f,\"loaded_p50_us\":%.2f,"
           "\"loaded_p99_us\":%.2f,\"slots\":%u,\"runs\":%d,\"cpus\":\"%s\","
           "\"producer_wait_ms\":%.2f,\"consumer_wait_ms\":%.2f}\n",
           bb, touch ? "true" : "false", r->gbps, r->batches_per_s, r->p50_us,
           r->p99_us, r->memcpy_gbps, r->ratio, r->loaded_p50_us,
           r->loaded_p99_us, o->slots, o->runs, cpus, r->producer_wait_ns / 1e6,
           r->consumer_wait_ns / 1e6);
  } else {
    printf("ring %9" PRIu64 " B touch=%d  %6.2f GB/s  %9.0f batch/s  "
           "memcpy %6.2f GB/s  ratio %.3f  wake p50 %7.2f us p99 %7.2f us  "
           "(loaded p50 %.1f us p99 %.1f us)\n",
           bb, touch, r->gbps, r->batches_per_s, r->memcpy_gbps, r->ratio,
           r->p50_us, r->p99_us, r->loaded_p50_us, r->loaded_p99_us);
  }
  fflush(stdout);
}

static int bench_size(const opts_t *o, uint64_t bb, int touch) {
  double f[8][MAX_RUNS];
  result_t r, med;
  uint8_t *src = malloc(bb);

  if (src == NULL)
    return 1;
  for (uint64_t i = 0; i < bb; i++)
    src[i] = (uint8_t)(i * 131u + 7u);
  for (int k = 0; k < o->runs; k++) {
    memset(&r, 0, sizeof(r));
    if (run_once(o, bb, touch, src, &r) != 0) {
      free(src);
      return 1;
    }
    f[0][k] = r.memcpy_gbps;
    f[1][k] = r.gbps;
    f[2][k] = r.batches_per_s;
    f[3][k] = r.p50_us;
    f[4][k] = r.p99_us;
    f[5][k] = r.ratio;
    f[6][k] = r.loaded_p50_us;
    f[7][k] = r.loaded_p99_us;
  }
  med = r;
  med.memcpy_gbps = chime__bench_median(f[0], o->runs);
  med.gbps = chime__bench_median(f[1], o->runs);
  med.batches_per_s = chime__bench_median(f[2], o->runs);
  med.p50_us = chime__bench_median(f[3], o->runs);
  med.p99_us = chime__bench_median(f[4], o->runs);
  med.ratio = chime__bench_median(f[5], o->runs);
  med.loaded_p50_us = chime__bench_median(f[6], o->runs);
  med.loaded_p99_us = chime__bench_median(f[7], o->runs);
  emit(o, bb, touch, &med);
  free(src);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: chime-bench ring [--json] [--runs N] [--slots S]\n"
          "                        [--mib MIB_PER_RUN] [--sizes B1,B2,...]\n"
          "                        [--cpus PRODUCER,CONSUMER]\n"
          "  batch sizes in bytes, multiples of 4096 (default "
          "65536,1048576,16777216);\n"
          "  medians of N runs (default 3) of MIB_PER_RUN MiB each (default "
          "2048)\n");
}

static int parse_opts(opts_t *o, int argc, char **argv) {
  *o = (opts_t){0, 3, 8, 2048 * MIB, 3, {65536, MIB, 16 * MIB}, -1, -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--runs") == 0 && i + 1 < argc) {
      o->runs = atoi(argv[++i]);
      if (o->runs < 1 || o->runs > MAX_RUNS)
        return -1;
    } else if (strcmp(a, "--slots") == 0 && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 2 || v > 64)
        return -1;
      o->slots = (uint32_t)v;
    } else if (strcmp(a, "--mib") == 0 && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 1 || v > 65536)
        return -1;
      o->run_bytes = (uint64_t)v * MIB;
    } else if (strcmp(a, "--cpus") == 0 && i + 1 < argc) {
      if (sscanf(argv[++i], "%d,%d", &o->cpu_producer, &o->cpu_consumer) != 2 ||
          o->cpu_producer < 0 || o->cpu_consumer < 0 ||
          o->cpu_producer >= CPU_SETSIZE || o->cpu_consumer >= CPU_SETSIZE)
        return -1;
    } else if (strcmp(a, "--sizes") == 0 && i + 1 < argc) {
      char *p = argv[++i], *end;
      o->nsizes = 0;
      while (*p != '\0') {
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || o->nsizes == MAX_SIZES || v == 0 ||
            v % SAMPLE_BYTES != 0 || v / SAMPLE_BYTES > CHIME_RING_MAX_BATCH ||
            (*end != ',' && *end != '\0'))
          return -1;
        o->sizes[o->nsizes++] = v;
        p = *end == ',' ? end + 1 : end;
      }
      if (o->nsizes == 0)
        return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

int chime__bench_ring(int argc, char **argv) {
  opts_t o;
  if (argc > 1 && strcmp(argv[1], "--consumer") == 0)
    return consumer_main(argc, argv);
  if (parse_opts(&o, argc, argv) != 0) {
    usage();
    return 2;
  }
  if (pin_cpu(o.cpu_producer) != 0) {
    fprintf(stderr, "chime-bench ring: cannot run on cpu %d\n", o.cpu_producer);
    return 2;
  }
  for (int i = 0; i < o.nsizes; i++)
    for (int touch = 0; touch <= 1; touch++)
      if (bench_size(&o, o.sizes[i], touch) != 0)
        return 1;
  return 0;
}
