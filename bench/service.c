/* chime-bench service: batches from a table to a learner, against the limits
 * of this machine measured in the same run.
 *
 * Cases, for each batch size (1 MiB and 16 MiB by default):
 *   memcpy        the sampler's work without chime: one thread gathers
 *                 random 64 KiB rows of a 64 MiB table (chimed's table) into
 *                 the slots of a ring as deep as chime's, another reads each
 *                 batch as the learners do and frees its slot
 *   tcp           raw 127.0.0.1 socket, writer thread -> reader thread
 *                 (--tcp-flows N: over N connections; --tcp-rows: written
 *                 from random rows of a table, read into a ring)
 *   grpc_plain    a plain gRPC C core server stream, one message per batch,
 *                 the server in another process (this binary re-executed)
 *                 sending random 64 KiB rows of a 64 MiB table as the
 *                 message's slices (no copy, as chimed sends), the client
 *                 copying each message out of its byte buffer (as a learner
 *                 must)
 *   chime_shm     chimed (same build) with a pre-filled uniform table; the
 *                 learner maps the ring
 *   chime_stream  the same, batches streamed over gRPC into a local ring
 *
 * GB/s are 1e9 bytes of batch payload per second. A run is one round of every
 * case and size (each round's order rotated by one case), so a noisy
 * neighbour hits a case and its baselines alike;
 * each figure is the median over --runs rounds, each ratio the median of the
 * per-round ratios. Every case's receiving side reads every batch the same
 * way (--touch, learn.h) and skips the same warm-up (as many batches as the
 * ring has slots); time and CPU are counted over the same window: from the
 * first batch after the warm-up to the last. With --learners N, a further
 * phase per size runs N shm and N stream learner processes at once against
 * chimed while an actor inserts (fanout.h). With --link NAME (a chime-link
 * running, docs/remote.md) the servers and the tcp sender are on the link's
 * server side and this process on its learner side: memcpy and chime_shm
 * do not run (no shared memory across hosts), tcp, grpc_plain and
 * chime_stream cross the link. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "bench.h"
#include "chime/chime.h"
#include "fanout.h"
#include "learn.h"
#include "measure.h"
#include "netns.h"
#include "spawn.h"

#define MIB (UINT64_C(1) << 20)
#define POOL_BYTES (64 * MIB)
#define SAMPLE_BYTES (64 * 1024)
#define MAX_RUNS 15
#define PLAIN_METHOD "/chime.bench.Plain/Stream"
#define MAX_SIZES 8

enum { C_MEMCPY, C_TCP, C_PLAIN, C_SHM, C_STREAM, NCASES };
static const char *const case_name[NCASES] = {"memcpy", "tcp", "grpc_plain",
                                              "chime_shm", "chime_stream"};

typedef struct {
  int json;
  int runs;
  uint64_t run_bytes; /* payload per run and case */
  int nsizes;
  uint64_t sizes[MAX_SIZES];
  int only_baselines;
  int only; /* --only CASE: that case alone (no ratios), else -1 */
  chime__bench_touch_t touch;
  int learners;              /* --learners N: the fan-out phase, 0: none */
  const char *learner_modes; /* --learner-modes both|shm|stream */
  double seconds;            /* its timed window per size and round */
  const char *link;          /* --link NAME: through chime-link NAME */
} opts_t;

/* Whether case c runs: --only, and no shared memory across a link. */
static int case_runs(const opts_t *o, int c) {
  if (o->link != NULL && (c == C_MEMCPY || c == C_SHM))
    return 0;
  return o->only < 0 || c == o->only;
}

/* A case's timed window: from the first batch after the warm-up to the
 * last. CPU is the bench process's plus the case's server process's (chimed
 * or the grpc_plain server) over the same window, so cpu_s_per_gb counts
 * what gbps counts. */
typedef struct {
  pid_t server; /* 0: none */
  chime__bench_touch_t touch;
  uint64_t warmup; /* batches read before the window opens */
  double t0, t1, cpu0, cpu1;
  double srv0, srv1; /* the server process's part of cpu0, cpu1 */
  /* chime_stream: the round trip its stream measured (ms) and the bytes
   * it keeps in flight (MiB; docs/remote.md) */
  double rtt_ms, window_mib;
} window_t;

static void case_cpu(pid_t server, double *all, double *srv) {
  *srv = server > 0 ? chime__bench_cpu_s(server) : 0;
  *all = chime__bench_cpu_s(0) + *srv;
}

static void window_open(void *arg) {
  window_t *w = arg;
  case_cpu(w->server, &w->cpu0, &w->srv0);
  w->t0 = chime__bench_now_s();
}

static void window_close(void *arg) {
  window_t *w = arg;
  w->t1 = chime__bench_now_s();
  case_cpu(w->server, &w->cpu1, &w->srv1);
}

static uint64_t batches_for(const opts_t *o, uint64_t batch_bytes) {
  uint64_t n = o->run_bytes / batch_bytes;
  return n < 8 ? 8 : n;
}

static void *alloc_touched(size_t len) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, len) != 0)
    return NULL;
  memset(p, 0x5a, len);
  return p;
}

static volatile uint64_t sink;

/* ------------------------------------------------------------------ memcpy */

static uint32_t slots_override; /* --slots */

static uint32_t ring_slots(uint64_t batch_bytes) {
  if (slots_override != 0)
    return slots_override;
  return batch_bytes >= 16 * MIB ? 4 : 8;
}

/* The gather: chimed's uniform sampler copies batch_size random rows of its
 * table into a slot; this does the same copies with nothing around them. */
typedef struct {
  const uint8_t *table;
  uint64_t rows;
  uint8_t *ring;
  uint64_t slots, batch_bytes, total;
  uint64_t rng;
  atomic_uint_fast64_t filled, freed; /* batches, free-running */
  pthread_mutex_t mu;
  pthread_cond_t cv;
} gather_t;

/* xorshift64*, as the table's sampler */
static uint64_t rand64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * UINT64_C(2685821657736338717);
}

static uint64_t gather_rand(gather_t *g) {
  return rand64(&g->rng);
}

/* Both sides wait as the ring's do: a short spin, then sleep. */
static void gather_wait(gather_t *g, atomic_uint_fast64_t *ctr, uint64_t want) {
  for (int spin = 0; spin < 200; spin++)
    if (atomic_load_explicit(ctr, memory_order_acquire) >= want)
      return;
  pthread_mutex_lock(&g->mu);
  while (atomic_load_explicit(ctr, memory_order_acquire) < want)
    pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gather_post(gather_t *g, atomic_uint_fast64_t *ctr, uint64_t v) {
  atomic_store_explicit(ctr, v, memory_order_release);
  pthread_mutex_lock(&g->mu);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void *gather_thread(void *arg) {
  gather_t *g = arg;
  uint64_t per_batch = g->batch_bytes / SAMPLE_BYTES;
  for (uint64_t i = 0; i < g->total; i++) {
    gather_wait(g, &g->freed, i + 1 > g->slots ? i + 1 - g->slots : 0);
    uint8_t *slot = g->ring + (i % g->slots) * g->batch_bytes;
    for (uint64_t j = 0; j < per_batch; j++)
      memcpy(slot + j * SAMPLE_BYTES,
             g->table + (gather_rand(g) % g->rows) * SAMPLE_BYTES,
             SAMPLE_BYTES);
    gather_post(g, &g->filled, i + 1);
  }
  return NULL;
}

static int run_memcpy(uint64_t batch_bytes, uint64_t batches, window_t *w,
                      double *gbps) {
  gather_t g;
  pthread_t th;
  int rc = CHIME_ENOMEM;
  memset(&g, 0, sizeof(g));
  g.rows = POOL_BYTES / SAMPLE_BYTES;
  g.slots = ring_slots(batch_bytes);
  g.batch_bytes = batch_bytes;
  g.total = w->warmup + batches;
  g.rng = UINT64_C(0x9e3779b97f4a7c15);
  g.table = alloc_touched(POOL_BYTES);
  g.ring = alloc_touched(g.slots * batch_bytes);
  if (g.table == NULL || g.ring == NULL || batch_bytes % SAMPLE_BYTES != 0)
    goto out;
  atomic_init(&g.filled, 0);
  atomic_init(&g.freed, 0);
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  if (pthread_create(&th, NULL, gather_thread, &g) != 0) {
    rc = CHIME_ESYS;
    goto destroy;
  }
  for (uint64_t i = 0; i < g.total; i++) {
    if (i == w->warmup)
      window_open(w);
    gather_wait(&g, &g.filled, i + 1);
    sink += chime__bench_touch(g.ring + (i % g.slots) * batch_bytes,
                               batch_bytes, w->touch);
    gather_post(&g, &g.freed, i + 1);
  }
  window_close(w);
  pthread_join(th, NULL);
  *gbps = (double)(batch_bytes * batches) / (w->t1 - w->t0) / 1e9;
  rc = 0;
destroy:
  pthread_mutex_destroy(&g.mu);
  pthread_cond_destroy(&g.cv);
out:
  free((void *)g.table);
  free(g.ring);
  return rc;
}

/* --------------------------------------------------------------------- tcp */

/* --tcp-rows: the tcp case does a replay service's memory work, as
 * chimed and grpc_plain do: each batch written from random 64 KiB rows of
 * a 64 MiB table (one writev), read into a ring of as many slots as
 * chime's. Without it the writer sends one buffer again and again and the
 * reader reads into one, both hot in the caches (docs/remote.md). */
static int tcp_rows;

typedef struct {
  int fd;
  uint64_t batch_bytes, batches;
  const uint8_t *buf; /* the batch, or with rows the table */
  uint64_t rows, rng; /* rows > 0: gather random rows of buf */
  struct iovec *iov;  /* batch_bytes / SAMPLE_BYTES of them, with rows */
  int rc;
} tcp_writer_t;

/* One batch: the iovecs over it, advanced past what was written. */
static int write_batch(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t k = writev(fd, iov, n > IOV_MAX ? IOV_MAX : n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return CHIME_ESYS;
    while (n > 0 && (size_t)k >= iov->iov_len) {
      k -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + k;
      iov->iov_len -= (size_t)k;
    }
  }
  return 0;
}

static void *tcp_writer(void *arg) {
  tcp_writer_t *w = arg;
  struct iovec one;
  int n = w->rows > 0 ? (int)(w->batch_bytes / SAMPLE_BYTES) : 1;
  w->rc = 0;
  for (uint64_t i = 0; i < w->batches && w->rc == 0; i++) {
    struct iovec *iov = w->rows > 0 ? w->iov : &one;
    if (w->rows == 0)
      one = (struct iovec){(void *)w->buf, w->batch_bytes};
    for (int j = 0; j < n && w->rows > 0; j++)
      iov[j] = (struct iovec){
          (void *)(w->buf + (rand64(&w->rng) % w->rows) * SAMPLE_BYTES),
          SAMPLE_BYTES};
    w->rc = write_batch(w->fd, iov, n);
  }
  return NULL;
}

/* --tcp-flows N: the tcp case over N connections, batch i on connection
 * i mod N, read in order (what a stream spread over N connections would
 * do: a batch waits for the one before it; docs/remote.md). */
#define MAX_TCP_FLOWS 16
static int tcp_flows = 1;
/* --connections N: the chime_stream case's stream over N connections. */
static uint32_t stream_conns = 1;

/* One connection of the tcp case through the server's side: its two
 * ends, the sending one sfd. */
static int tcp_connect(int lfd, const struct sockaddr_in *sa, int *cfd,
                       int *sfd) {
  *cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*cfd < 0 || connect(*cfd, (const struct sockaddr *)sa, sizeof(*sa)) != 0)
    return CHIME_ESYS;
  *sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  return *sfd < 0 ? CHIME_ESYS : 0;
}

static int read_full(int fd, uint8_t *dst, uint64_t len) {
  uint64_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, dst + got, len - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return CHIME_ESYS;
    got += (uint64_t)n;
  }
  return 0;
}

static int run_tcp(uint64_t batch_bytes, uint64_t batches, window_t *win,
                   double *gbps) {
  int rc = CHIME_ESYS;
  int lfd = -1, cfd[MAX_TCP_FLOWS], sfd[MAX_TCP_FLOWS];
  int n = tcp_flows, started = 0;
  uint64_t slots = tcp_rows ? ring_slots(batch_bytes) : 1;
  uint64_t per = batch_bytes / SAMPLE_BYTES;
  uint8_t *src = alloc_touched(tcp_rows ? POOL_BYTES : batch_bytes);
  uint8_t *dst = alloc_touched(batch_bytes * slots);
  struct iovec *iov = calloc((size_t)(n * per), sizeof(*iov));
  struct sockaddr_in sa;
  socklen_t slen = sizeof(sa);
  pthread_t th[MAX_TCP_FLOWS];
  tcp_writer_t w[MAX_TCP_FLOWS];
  uint64_t total = win->warmup + batches;

  for (int k = 0; k < n; k++)
    cfd[k] = sfd[k] = -1;
  if (src == NULL || dst == NULL || iov == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, chime__bench_server_host(), &sa.sin_addr);
  lfd = chime__bench_server_socket(SOCK_STREAM);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(lfd, n) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &slen) != 0)
    goto out;
  for (int k = 0; k < n; k++)
    if (tcp_connect(lfd, &sa, &cfd[k], &sfd[k]) != 0)
      goto out;

  /* the server's ends send, as chimed does: connection k the batches
   * k, k + n, ... */
  for (; started < n; started++) {
    uint64_t mine = (total + (uint64_t)(n - 1 - started)) / (uint64_t)n;
    w[started] = (tcp_writer_t){
        .fd = sfd[started],
        .batch_bytes = batch_bytes,
        .batches = mine,
        .buf = src,
        .rows = tcp_rows ? POOL_BYTES / SAMPLE_BYTES : 0,
        .rng = UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)started,
        .iov = iov + (uint64_t)started * per,
    };
    if (pthread_create(&th[started], NULL, tcp_writer, &w[started]) != 0)
      goto out;
  }
  for (uint64_t i = 0; i < total; i++) {
    if (i == win->warmup)
      window_open(win);
    uint8_t *slot = dst + (i % slots) * batch_bytes;
    if (read_full(cfd[i % (uint64_t)n], slot, batch_bytes) != 0)
      goto out;
    sink += chime__bench_touch(slot, batch_bytes, win->touch);
  }
  window_close(win);
  *gbps = (double)(batch_bytes * batches) / (win->t1 - win->t0) / 1e9;
  rc = 0;
out:
  for (int k = 0; k < started; k++) {
    if (rc != 0)
      shutdown(sfd[k], SHUT_RDWR);
    pthread_join(th[k], NULL);
    if (rc == 0 && w[k].rc != 0)
      rc = w[k].rc;
  }
  for (int k = 0; k < n; k++) {
    if (sfd[k] >= 0)
      close(sfd[k]);
    if (cfd[k] >= 0)
      close(cfd[k]);
  }
  if (lfd >= 0)
    close(lfd);
  free(src);
  free(dst);
  free(iov);
  return rc;
}

/* -------------------------------------------------------------- grpc_plain */

static void channel_args(grpc_arg args[2], grpc_channel_args *ca) {
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = 64 << 20;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = 64 << 20;
  ca->num_args = 2;
  ca->args = args;
}

static int cq_wait_s(grpc_completion_queue *cq, void *tag, int64_t seconds) {
  grpc_event ev = grpc_completion_queue_next(
      cq,
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_seconds(seconds, GPR_TIMESPAN)),
      NULL);
  if (ev.type != GRPC_OP_COMPLETE || ev.tag != tag)
    return CHIME_EPROTO;
  return ev.success ? 0 : CHIME_EDISCONNECTED;
}

static int cq_wait(grpc_completion_queue *cq, void *tag) {
  return cq_wait_s(cq, tag, 60);
}

static int start_batch(grpc_call *call, grpc_op *ops, size_t n, void *tag) {
  return grpc_call_start_batch(call, ops, n, tag, NULL) == GRPC_CALL_OK
             ? 0
             : CHIME_EPROTO;
}

static void noop_destroy(void *p) {
  (void)p;
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* One call: the request says how many messages of how many bytes; the server
 * sends each as slices of random rows of a table as large as chimed's,
 * without copying (as chimed sends from its table's rows): both read the
 * same bytes from memory, not one buffer that stays in cache. A request for
 * 0 messages ends the server. */
static int plain_serve_call(grpc_server *srv, grpc_completion_queue *cq,
                            int *quit) {
  int rc;
  grpc_call *call = NULL;
  grpc_call_details details;
  grpc_metadata_array md;
  grpc_byte_buffer *req = NULL;
  uint8_t *buf = NULL;
  int cancelled = 0;
  uint8_t params[16] = {0};
  grpc_op ops[2];
  grpc_slice rows[POOL_BYTES / SAMPLE_BYTES];
  uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);

  grpc_call_details_init(&details);
  grpc_metadata_array_init(&md);
  if (grpc_server_request_call(srv, &call, &details, &md, cq, cq, (void *)1) !=
      GRPC_CALL_OK) {
    rc = CHIME_EPROTO;
    goto out;
  }
  /* The next call comes after every other case of the round: through a
   * slow lossy link (50 ms, 0.1%) they take minutes, not the 60 s an
   * operation may. */
  if ((rc = cq_wait_s(cq, (void *)1, 3600)) != 0)
    goto out;
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_RECV_MESSAGE;
  ops[1].data.recv_message.recv_message = &req;
  if ((rc = start_batch(call, ops, 2, (void *)2)) != 0 ||
      (rc = cq_wait(cq, (void *)2)) != 0)
    goto out;
  if (req != NULL) {
    grpc_byte_buffer_reader rd;
    if (grpc_byte_buffer_reader_init(&rd, req)) {
      grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
      if (GRPC_SLICE_LENGTH(all) == sizeof(params))
        memcpy(params, GRPC_SLICE_START_PTR(all), sizeof(params));
      grpc_slice_unref(all);
      grpc_byte_buffer_reader_destroy(&rd);
    }
  }
  uint64_t count = get_u64(params), bytes = get_u64(params + 8);
  if (count == 0 || bytes == 0 || bytes > POOL_BYTES ||
      bytes % SAMPLE_BYTES != 0) {
    *quit = 1;
    count = 0;
    bytes = 0;
  } else if ((buf = alloc_touched(POOL_BYTES)) == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  size_t nrows = bytes / SAMPLE_BYTES;
  for (uint64_t i = 0; i < count; i++) {
    for (size_t j = 0; j < nrows; j++) {
      uint64_t row = rand64(&rng) % (POOL_BYTES / SAMPLE_BYTES);
      rows[j] =
          grpc_slice_new(buf + row * SAMPLE_BYTES, SAMPLE_BYTES, noop_destroy);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(rows, nrows);
    for (size_t j = 0; j < nrows; j++)
      grpc_slice_unref(rows[j]);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = bb;
    rc = start_batch(call, ops, 1, (void *)3);
    if (rc == 0)
      rc = cq_wait(cq, (void *)3);
    grpc_byte_buffer_destroy(bb);
    if (rc != 0)
      goto out;
  }
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[0].data.send_status_from_server.status = GRPC_STATUS_OK;
  ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[1].data.recv_close_on_server.cancelled = &cancelled;
  if ((rc = start_batch(call, ops, 2, (void *)4)) == 0)
    rc = cq_wait(cq, (void *)4);
out:
  if (req != NULL)
    grpc_byte_buffer_destroy(req);
  if (call != NULL)
    grpc_call_unref(call);
  grpc_call_details_destroy(&details);
  grpc_metadata_array_destroy(&md);
  /* gRPC may still hold the buffer's slices until the call is gone. */
  free(buf);
  return rc;
}

static int plain_server_main(const char *host) {
  grpc_arg args[2];
  grpc_channel_args ca;
  int quit = 0;
  int rc = 0;

  grpc_init();
  channel_args(args, &ca);
  grpc_server *srv = grpc_server_create(&ca, NULL);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(srv, cq, NULL);
  grpc_server_credentials *cr = grpc_insecure_server_credentials_create();
  char listen[64];
  snprintf(listen, sizeof(listen), "%s:0", host);
  int port = grpc_server_add_http2_port(srv, listen, cr);
  grpc_server_credentials_release(cr);
  if (port <= 0) {
    fprintf(stderr, "grpc_plain server: cannot bind %s\n", listen);
    rc = 1;
  } else {
    grpc_server_start(srv);
    printf("port %d\n", port);
    fflush(stdout);
    while (!quit && rc == 0)
      rc = plain_serve_call(srv, cq, &quit) != 0;
  }
  grpc_server_shutdown_and_notify(srv, cq, (void *)9);
  (void)cq_wait(cq, (void *)9);
  grpc_server_destroy(srv);
  grpc_completion_queue_shutdown(cq);
  while (
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
          .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_shutdown_blocking();
  return rc;
}

/* Asks the server for w->warmup + batches messages and times the last
 * batches, copying each out of its slices into one contiguous buffer and
 * reading it there. w NULL: no warm-up, nothing timed (the quit call). */
static int plain_call(grpc_channel *ch, uint64_t batch_bytes, uint64_t batches,
                      window_t *w, double *gbps) {
  int rc;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string(PLAIN_METHOD), NULL,
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                   gpr_time_from_seconds(300, GPR_TIMESPAN)),
      NULL);
  grpc_metadata_array md_in, md_trail;
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  uint8_t params[16];
  uint8_t *dst = alloc_touched(batch_bytes);
  grpc_op ops[4];
  grpc_byte_buffer *bb = NULL;
  uint64_t got = 0;
  uint64_t warmup = w != NULL ? w->warmup : 0;

  grpc_metadata_array_init(&md_in);
  grpc_metadata_array_init(&md_trail);
  if (dst == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  put_u64(params, warmup + batches);
  put_u64(params + 8, batch_bytes);
  grpc_slice ps = grpc_slice_from_copied_buffer((const char *)params, 16);
  grpc_byte_buffer *req = grpc_raw_byte_buffer_create(&ps, 1);
  grpc_slice_unref(ps);
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
  rc = start_batch(call, ops, 4, (void *)1);
  if (rc == 0)
    rc = cq_wait(cq, (void *)1);
  grpc_byte_buffer_destroy(req);
  if (rc != 0)
    goto out;
  for (uint64_t i = 0; i < warmup + batches; i++) {
    if (i == warmup && w != NULL)
      window_open(w);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_MESSAGE;
    ops[0].data.recv_message.recv_message = &bb;
    if ((rc = start_batch(call, ops, 1, (void *)2)) != 0 ||
        (rc = cq_wait(cq, (void *)2)) != 0)
      goto out;
    if (bb == NULL) {
      rc = CHIME_EDISCONNECTED;
      goto out;
    }
    grpc_byte_buffer_reader rd;
    grpc_slice s;
    uint64_t off = 0;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) {
      rc = CHIME_EPROTO;
      goto out;
    }
    while (grpc_byte_buffer_reader_next(&rd, &s)) {
      size_t n = GRPC_SLICE_LENGTH(s);
      if (off + n <= batch_bytes)
        memcpy(dst + off, GRPC_SLICE_START_PTR(s), n);
      off += n;
      grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    grpc_byte_buffer_destroy(bb);
    bb = NULL;
    if (off != batch_bytes) {
      rc = CHIME_EPROTO;
      goto out;
    }
    sink += chime__bench_touch(dst, batch_bytes,
                               w != NULL ? w->touch : CHIME__BENCH_TOUCH_PAGE);
    if (i >= warmup)
      got += off;
  }
  if (w != NULL)
    window_close(w);
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &md_trail;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &details;
  if ((rc = start_batch(call, ops, 1, (void *)3)) != 0 ||
      (rc = cq_wait(cq, (void *)3)) != 0)
    goto out;
  rc = status == GRPC_STATUS_OK ? 0 : CHIME_EPROTO;
  *gbps = w != NULL && got > 0 ? (double)got / (w->t1 - w->t0) / 1e9 : 0;
out:
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
  if (rc != 0)
    grpc_call_cancel(call, NULL);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
          .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_metadata_array_destroy(&md_in);
  grpc_metadata_array_destroy(&md_trail);
  grpc_slice_unref(details);
  free(dst);
  return rc;
}

typedef struct {
  chime__bench_child_t child;
  grpc_channel *ch;
} plain_t;

static int plain_start(plain_t *p) {
  char self[PATH_MAX];
  grpc_arg args[2];
  grpc_channel_args ca;
  if (chime__bench_self(self, sizeof(self)) == NULL)
    return CHIME_ESYS;
  const char *host = chime__bench_server_host();
  const char *argv[] = {self, "service", "--grpc-plain-server", host, NULL};
  memset(p, 0, sizeof(*p));
  int rc = chime__bench_spawn_server(&p->child, argv, "port ", 30000);
  if (rc != 0)
    return rc;
  char target[300];
  snprintf(target, sizeof(target), "%s:%s", host, p->child.addr);
  channel_args(args, &ca);
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  p->ch = grpc_channel_create(target, cr, &ca);
  grpc_channel_credentials_release(cr);
  return 0;
}

static void plain_stop(plain_t *p) {
  double ignored;
  if (p->ch != NULL) {
    /* count 0 tells the server to quit */
    (void)plain_call(p->ch, 1, 0, NULL, &ignored);
    grpc_channel_destroy(p->ch);
    p->ch = NULL;
  }
  (void)chime__bench_child_stop(&p->child, 5000);
}

/* ------------------------------------------------------------------- chime */

static int chime_run(const char *addr, chime_mode_t mode, uint32_t batch_size,
                     uint32_t slots, uint64_t batches, window_t *w,
                     double *gbps, char *why, size_t whylen) {
  chime__bench_learn_opts_t lo = {
      .addr = addr,
      .table = "bench",
      .mode = mode,
      .batch_size = batch_size,
      .slots = slots,
      .connections = mode == CHIME_MODE_STREAM ? stream_conns : 1,
      .warmup = w->warmup,
      .batches = batches,
      .touch = w->touch,
      .at_start = window_open,
      .at_end = window_close,
      .arg = w,
  };
  chime__bench_learn_result_t lr;
  int rc = chime__bench_learn(&lo, &lr, why, whylen);
  if (rc == 0)
    *gbps = (double)lr.bytes / (lr.t1 - lr.t0) / 1e9;
  w->rtt_ms = (double)lr.rtt_ns / 1e6;
  w->window_mib = (double)lr.window_bytes / (1 << 20);
  return rc;
}

static int prefill(const char *addr, uint64_t samples) {
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  uint8_t *sample = alloc_touched(SAMPLE_BYTES);
  int rc = CHIME_ENOMEM;
  if (sample == NULL)
    goto out;
  if ((rc = chime_client_create(&c, addr, NULL)) != 0 ||
      (rc = chime_writer_open(&w, c, "bench", NULL)) != 0)
    goto out;
  for (uint64_t i = 0; i < samples && rc == 0; i++) {
    memcpy(sample, &i, sizeof(i));
    rc = chime_writer_append(w, sample, SAMPLE_BYTES, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(w);
  if (rc != 0)
    fprintf(stderr, "chime-bench: prefill: %s\n", chime_last_error());
out:;
  int closed = chime_writer_close(w); /* the last flush */
  if (rc == 0)
    rc = closed;
  chime_client_destroy(c);
  free(sample);
  return rc;
}

/* ------------------------------------------------------------------ driver */

typedef struct {
  double v[NCASES][MAX_SIZES][MAX_RUNS];
  double cpu[NCASES][MAX_SIZES][MAX_RUNS];      /* CPU seconds per GB */
  double srv_cpu[NCASES][MAX_SIZES][MAX_RUNS];  /* the server's part */
  double srv_busy[NCASES][MAX_SIZES][MAX_RUNS]; /* server CPU / wall */
  double rtt_ms[MAX_SIZES][MAX_RUNS];           /* chime_stream's window */
  double window_mib[MAX_SIZES][MAX_RUNS];
  chime__bench_fanout_result_t fan[MAX_SIZES][MAX_RUNS];
} results_t;

/* ,"key":median,"key_min":lo,"key_max":hi over the runs, with prec
 * decimals (or the same as text). */
static void emit_stat(const opts_t *o, const char *key, const double *v,
                      int prec) {
  double q[MAX_RUNS], lo, hi;
  memcpy(q, v, sizeof(double) * (size_t)o->runs);
  chime__bench_range(q, o->runs, &lo, &hi);
  double med = chime__bench_median(q, o->runs);
  if (o->json)
    printf(",\"%s\":%.*f,\"%s_min\":%.*f,\"%s_max\":%.*f", key, prec, med, key,
           prec, lo, key, prec, hi);
  else
    printf("  %s %.*f [%.*f, %.*f]", key, prec, med, prec, lo, prec, hi);
}

/* Per-round ratios a / b, each pair measured in the same round. */
static void ratios(const results_t *res, const opts_t *o, int a, int b,
                   int size, double *q) {
  for (int r = 0; r < o->runs; r++)
    q[r] = res->v[a][size][r] / res->v[b][size][r];
}

static void emit_case(const opts_t *o, const results_t *res, int c, int size) {
  uint64_t bb = o->sizes[size];
  double q[MAX_RUNS];
  if (o->json)
    printf("{\"bench\":\"service\",\"case\":\"%s\",\"batch_bytes\":%" PRIu64
           ",\"touch\":\"%s\",\"warmup_batches\":%u,\"tcp_flows\":%d,"
           "\"tcp_rows\":%d,\"connections\":%u",
           case_name[c], bb, chime__bench_touch_name(o->touch), ring_slots(bb),
           tcp_flows, tcp_rows, stream_conns);
  else
    printf("%-13s %5.1f MiB", case_name[c], (double)bb / MIB);
  emit_stat(o, "gbps", res->v[c][size], 3);
  if (c != C_MEMCPY && case_runs(o, C_MEMCPY)) {
    ratios(res, o, c, C_MEMCPY, size, q);
    emit_stat(o, "ratio_vs_memcpy", q, 3);
  }
  if (c >= C_SHM && case_runs(o, C_PLAIN)) {
    ratios(res, o, c, C_PLAIN, size, q);
    emit_stat(o, "ratio_vs_grpc_plain", q, 3);
  }
  if (c >= C_PLAIN && case_runs(o, C_TCP)) {
    ratios(res, o, c, C_TCP, size, q);
    emit_stat(o, "ratio_vs_tcp", q, 3);
  }
  emit_stat(o, "cpu_s_per_gb", res->cpu[c][size], 3);
  if (c >= C_SHM && case_runs(o, C_PLAIN)) {
    for (int r = 0; r < o->runs; r++)
      q[r] = res->cpu[c][size][r] / res->cpu[C_PLAIN][size][r];
    emit_stat(o, "cpu_ratio_vs_grpc_plain", q, 3);
  }
  if (c >= C_PLAIN && case_runs(o, C_TCP)) {
    for (int r = 0; r < o->runs; r++)
      q[r] = res->cpu[c][size][r] / res->cpu[C_TCP][size][r];
    emit_stat(o, "cpu_ratio_vs_tcp", q, 3);
  }
  /* The sending process's share: in grpc_plain and chime_stream one thread
   * of it sends, and a busy near 1.0 says that thread is what bounds the
   * case (docs/benchmarks.md). */
  if (c >= C_PLAIN) {
    emit_stat(o, "server_cpu_s_per_gb", res->srv_cpu[c][size], 3);
    emit_stat(o, "server_busy", res->srv_busy[c][size], 3);
  }
  if (c == C_STREAM) { /* its window, sized to the link (docs/remote.md) */
    emit_stat(o, "stream_rtt_ms", res->rtt_ms[size], 3);
    emit_stat(o, "window_mib", res->window_mib[size], 2);
  }
  if (o->json) {
    if (c == C_MEMCPY || c >= C_SHM)
      printf(",\"batch_size\":%u,\"slots\":%u,\"sample_bytes\":%d,"
             "\"table_bytes\":%" PRIu64,
             (unsigned)(bb / SAMPLE_BYTES), ring_slots(bb), SAMPLE_BYTES,
             POOL_BYTES);
    printf(",\"runs\":%d}", o->runs);
  }
  printf("\n");
  fflush(stdout);
}

static void emit_fanout(const opts_t *o, const results_t *res, int size) {
  uint64_t bb = o->sizes[size];
  double v[12][MAX_RUNS];
  int threads = 0, before = INT_MAX;
  for (int r = 0; r < o->runs; r++) {
    const chime__bench_fanout_result_t *f = &res->fan[size][r];
    v[0][r] = f->gbps;
    v[1][r] = f->shm_gbps;
    v[2][r] = f->stream_gbps;
    v[3][r] = f->ingest_per_s;
    v[4][r] = f->ingest_alone_per_s;
    v[5][r] =
        f->ingest_alone_per_s > 0 ? f->ingest_per_s / f->ingest_alone_per_s : 0;
    v[6][r] = f->chimed_cores;
    v[7][r] = f->learners_cores;
    v[8][r] = f->actor_cores;
    v[9][r] = f->actor_alone_cores;
    v[10][r] = f->actor_runq;
    v[11][r] = f->actor_alone_runq;
    if (f->threads_max > threads)
      threads = f->threads_max;
    if (f->threads_before < before)
      before = f->threads_before;
  }
  /* thread counts: the most seen in any run, the fewest before any */
  if (o->json)
    printf("{\"bench\":\"service\",\"case\":\"learners\",\"learners\":%d,"
           "\"learner_modes\":\"%s\","
           "\"batch_bytes\":%" PRIu64 ",\"touch\":\"%s\",\"seconds\":%.3f,"
           "\"ingest_sample_bytes\":256,\"chimed_threads\":%d,"
           "\"chimed_threads_before\":%d",
           o->learners, o->learner_modes, bb, chime__bench_touch_name(o->touch),
           o->seconds, threads, before);
  else
    printf("learners %dx %s, %.1f MiB: chimed threads %d (%d before)\n ",
           o->learners, o->learner_modes, (double)bb / MIB, threads, before);
  emit_stat(o, "gbps", v[0], 3);
  emit_stat(o, "shm_gbps", v[1], 3);
  emit_stat(o, "stream_gbps", v[2], 3);
  if (!o->json)
    printf("\n ");
  emit_stat(o, "ingest_samples_per_s", v[3], 0);
  emit_stat(o, "ingest_alone_samples_per_s", v[4], 0);
  emit_stat(o, "ingest_ratio_vs_alone", v[5], 3);
  if (!o->json)
    printf("\n ");
  emit_stat(o, "chimed_cpu_cores", v[6], 2);
  emit_stat(o, "learners_cpu_cores", v[7], 2);
  emit_stat(o, "actor_cpu_cores", v[8], 2);
  emit_stat(o, "actor_alone_cpu_cores", v[9], 2);
  emit_stat(o, "actor_runq_cores", v[10], 2);
  emit_stat(o, "actor_alone_runq_cores", v[11], 2);
  if (o->json)
    printf(",\"runs\":%d}", o->runs);
  printf("\n");
  fflush(stdout);
}

static int parse_opts(opts_t *o, int argc, char **argv) {
  *o = (opts_t){.json = 0,
                .runs = 3,
                .run_bytes = 1024 * MIB,
                .nsizes = 2,
                .sizes = {1 * MIB, 16 * MIB},
                .only = -1,
                .touch = CHIME__BENCH_TOUCH_LINE,
                .seconds = 3.0,
                .learner_modes = "both"};
  chime__bench_learner_args_t la = {
      .json = 0, .runs = o->runs, .seconds = o->seconds, .touch = o->touch};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int took = chime__bench_learner_arg(&la, argc, argv, &i, MAX_RUNS);
    if (took < 0)
      return took;
    if (took || strcmp(a, "service") == 0)
      continue;
    if (strcmp(a, "--slots") == 0 && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 2 || v > 64)
        return CHIME_EINVAL;
      slots_override = (uint32_t)v;
    } else if (strcmp(a, "--only") == 0 && i + 1 < argc) {
      const char *name = argv[++i];
      o->only = -1;
      for (int c = 0; c < NCASES; c++)
        if (strcmp(name, case_name[c]) == 0)
          o->only = c;
      if (o->only < 0)
        return CHIME_EINVAL;
    } else if (strcmp(a, "--tcp-flows") == 0 && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 1 || v > MAX_TCP_FLOWS)
        return CHIME_EINVAL;
      tcp_flows = (int)v;
    } else if (strcmp(a, "--connections") == 0 && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 1 || v > CHIME_MAX_CONNECTIONS)
        return CHIME_EINVAL;
      stream_conns = (uint32_t)v;
    } else if (strcmp(a, "--tcp-rows") == 0) {
      tcp_rows = 1;
    } else if (strcmp(a, "--link") == 0 && i + 1 < argc) {
      o->link = argv[++i];
    } else if (strcmp(a, "--baselines") == 0) {
      o->only_baselines = 1;
    } else if (strcmp(a, "--learners") == 0 && i + 1 < argc) {
      o->learners = atoi(argv[++i]);
      if (o->learners < 0 || o->learners > 16)
        return CHIME_EINVAL;
    } else if (strcmp(a, "--learner-modes") == 0 && i + 1 < argc) {
      o->learner_modes = argv[++i];
      if (strcmp(o->learner_modes, "both") != 0 &&
          strcmp(o->learner_modes, "shm") != 0 &&
          strcmp(o->learner_modes, "stream") != 0)
        return CHIME_EINVAL;
    } else if (strcmp(a, "--mib") == 0 && i + 1 < argc) {
      long v = atol(argv[++i]);
      if (v < 1 || v > 65536)
        return CHIME_EINVAL;
      o->run_bytes = (uint64_t)v * MIB;
    } else if (strcmp(a, "--sizes") == 0 && i + 1 < argc) {
      char *p = argv[++i];
      o->nsizes = 0;
      while (*p != '\0' && o->nsizes < MAX_SIZES) {
        char *end;
        long v = strtol(p, &end, 10);
        uint64_t unit = MIB;
        if (end != p && *end == 'k') { /* KiB: a whole number of samples */
          unit = 1024;
          end++;
        }
        uint64_t bytes = (uint64_t)v * unit;
        if (end == p || v < 1 || bytes > 64 * MIB || bytes % SAMPLE_BYTES)
          return CHIME_EINVAL;
        o->sizes[o->nsizes++] = bytes;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
          return CHIME_EINVAL;
      }
    } else {
      return CHIME_EINVAL;
    }
  }
  o->json = la.json;
  o->runs = la.runs;
  o->seconds = la.seconds;
  o->touch = la.touch;
  if (o->only_baselines)
    o->learners = 0;
  return 0;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: chime-bench service [--json] [--runs N] [--mib MIB_PER_RUN]\n"
      "                           [--sizes 1,16] [--slots S] [--baselines]\n"
      "                           [--only CASE] [--touch line|page]\n"
      "                           [--learners N] [--seconds S]\n"
      "                           [--learner-modes both|shm|stream]\n"
      "                           [--link NAME] [--tcp-flows N] [--tcp-rows]\n"
      "                           [--connections N]\n"
      "  batches of each size (MiB, or KiB with k: 64k) through memcpy (a "
      "gather of random\n"
      "  table rows), tcp, grpc_plain, chime_shm and chime_stream; medians\n"
      "  of N runs (default 3) of MIB_PER_RUN MiB each (default 1024); rings\n"
      "  of S slots (default 8 for batches under 16 MiB, else 4); every\n"
      "  receiver reads each batch: one word per 64-byte line (line, the\n"
      "  default) or per 4 KiB page (page).\n"
      "  --learners N: per size and run, also N shm and N stream learner\n"
      "  processes at once for S seconds (default 3) while an actor inserts\n"
      "  256-byte samples: aggregate GB/s, chimed's threads, ingest rate;\n"
      "  --learner-modes shm or stream: N learners of that mode alone\n"
      "  --link NAME: through a running `chime-link NAME` (root): tcp,\n"
      "  grpc_plain and chime_stream from its server side to this process\n"
      "  on its learner side (docs/remote.md)\n"
      "  --tcp-flows N: the tcp case over N connections (batch i on\n"
      "  connection i mod N, read in order; default 1)\n"
      "  --connections N: the chime_stream case's stream over N connections\n"
      "  (chime_stream_opts_t.connections, 1-16; default 1)\n"
      "  --tcp-rows: the tcp case sends random 64 KiB rows of a 64 MiB table\n"
      "  (writev) and reads into a ring of as many slots as chime's\n");
}

/* The k-th case of round r. The orders are a Williams design: the sequence
 * 0, 1, n-1, 2, n-2, ... shifted by r, then the same rows reversed, so over
 * 2 * NCASES rounds every case runs right after every other equally often
 * (twice; a rotation of one order keeps each case behind the same one), and
 * what one case leaves behind (a warm or a cold cache, chimed's teardown
 * of the stream before) favours none. */
static int case_at(int r, int k) {
  int row = r % (2 * NCASES);
  if (row >= NCASES) {
    row -= NCASES;
    k = NCASES - 1 - k;
  }
  int base = k % 2 ? (k + 1) / 2 : (NCASES - k / 2) % NCASES;
  return (base + row) % NCASES;
}

/* One round: every case once for every size (in case_at's order), so that
 * a noisy neighbour slows a case and its baselines alike; then the fan-out
 * phase per size. */
static int round_once(const opts_t *o, int r, plain_t *plain, pid_t chimed_pid,
                      const char *chimed_addr, results_t *res) {
  int rc = 0;
  char why[512] = "";
  for (int i = 0; i < o->nsizes && rc == 0; i++) {
    uint64_t bb = o->sizes[i];
    uint64_t n = batches_for(o, bb);
    uint32_t batch_size = (uint32_t)(bb / SAMPLE_BYTES);
    for (int k = 0; k < NCASES && rc == 0; k++) {
      int c = case_at(r, k);
      window_t w = {
          .server = c == C_PLAIN ? plain->child.proc.pid
                    : c >= C_SHM ? chimed_pid
                                 : 0,
          .touch = o->touch,
          .warmup = ring_slots(bb),
      };
      double *g = &res->v[c][i][r];
      if (c >= C_SHM && chimed_addr == NULL)
        continue;
      if (!case_runs(o, c))
        continue;
      switch (c) {
      case C_MEMCPY:
        rc = run_memcpy(bb, n, &w, g);
        break;
      case C_TCP:
        rc = run_tcp(bb, n, &w, g);
        break;
      case C_PLAIN:
        rc = plain_call(plain->ch, bb, n, &w, g);
        break;
      default:
        rc = chime_run(chimed_addr,
                       c == C_SHM ? CHIME_MODE_SHM : CHIME_MODE_STREAM,
                       batch_size, ring_slots(bb), n, &w, g, why, sizeof(why));
        break;
      }
      res->cpu[c][i][r] = (w.cpu1 - w.cpu0) / ((double)(bb * n) / 1e9);
      res->srv_cpu[c][i][r] = (w.srv1 - w.srv0) / ((double)(bb * n) / 1e9);
      res->srv_busy[c][i][r] =
          w.t1 > w.t0 ? (w.srv1 - w.srv0) / (w.t1 - w.t0) : 0;
      if (c == C_STREAM) {
        res->rtt_ms[i][r] = w.rtt_ms;
        res->window_mib[i][r] = w.window_mib;
      }
      if (rc != 0 && why[0] == '\0')
        snprintf(why, sizeof(why), "%s: %s", case_name[c], chime_strerror(rc));
    }
    if (rc == 0 && o->learners > 0 && chimed_addr != NULL) {
      chime__bench_fanout_opts_t fo = {
          .addr = chimed_addr,
          .chimed = chimed_pid,
          .table = "bench",
          .ingest_table = "ingest_256",
          .ingest_sample_bytes = 256,
          .learners = o->learners,
          .modes = o->learner_modes,
          .batch_size = batch_size,
          .slots = ring_slots(bb),
          .warmup = ring_slots(bb),
          .seconds = o->seconds,
          .touch = o->touch,
      };
      rc = chime__bench_fanout(&fo, &res->fan[i][r], why, sizeof(why));
    }
  }
  if (rc != 0)
    fprintf(stderr, "chime-bench service: round %d: %s\n", r + 1, why);
  return rc;
}

int chime__bench_service(int argc, char **argv) {
  opts_t o;
  plain_t plain;
  chime__bench_child_t chimed;
  int have_plain = 0, have_chimed = 0, have_grpc = 0;
  int rc = 0;
  static results_t res;

  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--grpc-plain-server") == 0)
      return plain_server_main(i + 1 < argc ? argv[i + 1] : "127.0.0.1");
    if (strcmp(argv[i], "--learner") == 0)
      return chime__bench_learner_main(argc - i, argv + i);
  }
  if (parse_opts(&o, argc, argv) != 0) {
    usage();
    return 2;
  }
  memset(&chimed, 0, sizeof(chimed));
  if (o.link != NULL && (rc = chime__bench_link_enter(o.link)) != 0)
    return 1;
  grpc_init();
  have_grpc = 1;
  if ((rc = plain_start(&plain)) != 0)
    goto fail;
  have_plain = 1;

  if (!o.only_baselines && (o.only < 0 || o.only >= C_SHM || o.learners > 0)) {
    /* One uniform table as big as memcpy's gather table, full before
     * sampling starts, so the sampler copies from memory the caches don't
     * hold; with --learners, a table for the actor's 256-byte samples that
     * nothing samples (min_size above what it holds never matters: no
     * stream opens on it). */
    char config[1024];
    uint64_t capacity = POOL_BYTES / SAMPLE_BYTES;
    snprintf(config, sizeof(config),
             "{\"budgets\": {\"stream_ring_bytes\": %" PRIu64
             ", \"total_ring_bytes\": %" PRIu64 "},\n"
             " \"tables\": [{\"name\": \"bench\", \"spec\": \"x:u8[%d]\", "
             "\"capacity\": %" PRIu64 ", \"min_size\": %" PRIu64
             ", \"sampler\": \"uniform\"}%s]}\n",
             (uint64_t)1 << 30, (uint64_t)4 << 30, SAMPLE_BYTES, capacity,
             capacity,
             o.learners > 0
                 ? ",\n  {\"name\": \"ingest_256\", \"spec\": \"x:u8[256]\", "
                   "\"capacity\": 65536, \"min_size\": 65536, "
                   "\"sampler\": \"uniform\"}"
                 : "");
    if ((rc = chime__bench_chimed_start(&chimed, config)) != 0)
      goto fail;
    have_chimed = 1;
    if ((rc = prefill(chimed.addr, capacity)) != 0)
      goto fail;
  }
  for (int r = 0; r < o.runs; r++)
    if ((rc = round_once(&o, r, &plain, have_chimed ? chimed.proc.pid : 0,
                         have_chimed ? chimed.addr : NULL, &res)) != 0)
      goto fail;

  for (int i = 0; i < o.nsizes; i++) {
    for (int c = 0; c < (have_chimed ? NCASES : C_SHM); c++)
      if (case_runs(&o, c))
        emit_case(&o, &res, c, i);
    if (have_chimed && o.learners > 0)
      emit_fanout(&o, &res, i);
  }
  rc = 0;
fail:
  if (have_plain)
    plain_stop(&plain);
  if (have_chimed)
    rc = chime__bench_chimed_stop(&chimed, rc, "chime-bench", " at shutdown");
  if (have_grpc)
    grpc_shutdown_blocking();
  if (rc != 0)
    fprintf(stderr, "chime-bench service: %s\n", chime_strerror(rc));
  return rc == 0 ? 0 : 1;
}
