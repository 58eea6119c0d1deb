/* chime-bench service: batches from a table to a learner, against the limits
 * of this machine measured in the same run.
 *
 * Cases, for each batch size (1 MiB and 16 MiB by default):
 *   memcpy        one thread copies batches from a 64 MiB pool into a
 *                 ring-sized pool (what the sampler does per batch)
 *   tcp           raw 127.0.0.1 socket, writer thread -> reader thread
 *   grpc_plain    a plain gRPC C core server stream, one message per batch,
 *                 the server in another process (this binary re-executed),
 *                 the client copying each message out of its byte buffer
 *                 (as a learner must)
 *   chime_shm     chimed (same build) with a pre-filled uniform table; the
 *                 learner maps the ring
 *   chime_stream  the same, batches streamed over gRPC into a local ring
 *
 * GB/s are 1e9 bytes of batch payload per second. A run is one round of every
 * case and size, so a noisy neighbour hits a case and its baselines alike;
 * each figure is the median over --runs rounds, each ratio the median of the
 * per-round ratios. The learner touches one word per 4 KiB of every batch. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "bench.h"
#include "chime/chime.h"
#include "measure.h"
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
} opts_t;

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

/* What a learner does to prove the batch is there without paying for a copy. */
static uint64_t touch(const void *p, uint64_t len) {
  uint64_t sum = 0;
  const uint8_t *b = p;
  for (uint64_t off = 0; off + 8 <= len; off += 4096) {
    uint64_t w;
    memcpy(&w, b + off, 8);
    sum += w;
  }
  return sum;
}

static volatile uint64_t sink;

/* ------------------------------------------------------------------ memcpy */

static uint32_t slots_override; /* --slots */

static uint32_t ring_slots(uint64_t batch_bytes) {
  if (slots_override != 0)
    return slots_override;
  return batch_bytes >= 16 * MIB ? 4 : 8;
}

static int run_memcpy(uint64_t batch_bytes, uint64_t batches, double *gbps) {
  uint8_t *src = alloc_touched(POOL_BYTES);
  /* the same slot counts as the chime cases' rings */
  uint64_t dst_slots = ring_slots(batch_bytes);
  uint8_t *dst = alloc_touched(dst_slots * batch_bytes);
  uint64_t src_slots = POOL_BYTES / batch_bytes;
  int rc = CHIME_ENOMEM;
  if (src == NULL || dst == NULL || src_slots == 0)
    goto out;
  double t0 = chime__bench_now_s();
  for (uint64_t i = 0; i < batches; i++)
    memcpy(dst + (i % dst_slots) * batch_bytes,
           src + ((i * 7) % src_slots) * batch_bytes, batch_bytes);
  double dt = chime__bench_now_s() - t0;
  sink += dst[batch_bytes / 2];
  *gbps = (double)(batch_bytes * batches) / dt / 1e9;
  rc = 0;
out:
  free(src);
  free(dst);
  return rc;
}

/* --------------------------------------------------------------------- tcp */

typedef struct {
  int fd;
  uint64_t batch_bytes, batches;
  const uint8_t *buf;
  int rc;
} tcp_writer_t;

static void *tcp_writer(void *arg) {
  tcp_writer_t *w = arg;
  w->rc = 0;
  for (uint64_t i = 0; i < w->batches; i++) {
    uint64_t off = 0;
    while (off < w->batch_bytes) {
      ssize_t n = write(w->fd, w->buf + off, w->batch_bytes - off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        w->rc = CHIME_ESYS;
        return NULL;
      }
      off += (uint64_t)n;
    }
  }
  return NULL;
}

static int run_tcp(uint64_t batch_bytes, uint64_t batches, double *gbps) {
  int rc = CHIME_ESYS;
  int lfd = -1, cfd = -1, sfd = -1;
  uint8_t *src = alloc_touched(batch_bytes);
  uint8_t *dst = alloc_touched(batch_bytes);
  struct sockaddr_in sa;
  socklen_t slen = sizeof(sa);
  pthread_t th;
  int started = 0;
  tcp_writer_t w;

  if (src == NULL || dst == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(lfd, 1) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &slen) != 0)
    goto out;
  cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (cfd < 0 || connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
    goto out;
  sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (sfd < 0)
    goto out;

  w = (tcp_writer_t){cfd, batch_bytes, batches, src, 0};
  double t0 = chime__bench_now_s();
  if (pthread_create(&th, NULL, tcp_writer, &w) != 0)
    goto out;
  started = 1;
  uint64_t total = batch_bytes * batches, got = 0, in_batch = 0;
  while (got < total) {
    ssize_t n = read(sfd, dst + in_batch, batch_bytes - in_batch);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      goto out;
    got += (uint64_t)n;
    in_batch = (in_batch + (uint64_t)n) % batch_bytes;
  }
  double dt = chime__bench_now_s() - t0;
  sink += touch(dst, batch_bytes);
  *gbps = (double)total / dt / 1e9;
  rc = 0;
out:
  if (started) {
    if (rc != 0)
      shutdown(cfd, SHUT_RDWR);
    pthread_join(th, NULL);
    if (rc == 0 && w.rc != 0)
      rc = w.rc;
  }
  if (sfd >= 0)
    close(sfd);
  if (cfd >= 0)
    close(cfd);
  if (lfd >= 0)
    close(lfd);
  free(src);
  free(dst);
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

static int cq_wait(grpc_completion_queue *cq, void *tag) {
  grpc_event ev = grpc_completion_queue_next(
      cq,
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_seconds(60, GPR_TIMESPAN)),
      NULL);
  if (ev.type != GRPC_OP_COMPLETE || ev.tag != tag)
    return CHIME_EPROTO;
  return ev.success ? 0 : CHIME_EDISCONNECTED;
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
 * sends them from one buffer, without copying (as chimed sends from slots).
 * A request for 0 messages ends the server. */
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

  grpc_call_details_init(&details);
  grpc_metadata_array_init(&md);
  if (grpc_server_request_call(srv, &call, &details, &md, cq, cq, (void *)1) !=
      GRPC_CALL_OK) {
    rc = CHIME_EPROTO;
    goto out;
  }
  if ((rc = cq_wait(cq, (void *)1)) != 0)
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
  if (count == 0 || bytes == 0 || bytes > (64 << 20)) {
    *quit = 1;
    count = 0;
    bytes = 0;
  } else if ((buf = alloc_touched(bytes)) == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  for (uint64_t i = 0; i < count; i++) {
    grpc_slice s = grpc_slice_new(buf, bytes, noop_destroy);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
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

static int plain_server_main(void) {
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
  int port = grpc_server_add_http2_port(srv, "127.0.0.1:0", cr);
  grpc_server_credentials_release(cr);
  if (port <= 0) {
    fprintf(stderr, "grpc_plain server: cannot bind 127.0.0.1:0\n");
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

/* Asks the server for warmup + batches messages and times the last batches,
 * copying each out of its slices into one contiguous buffer. */
static int plain_call(grpc_channel *ch, uint64_t batch_bytes, uint64_t warmup,
                      uint64_t batches, double *gbps) {
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
  double t0 = 0;
  uint64_t got = 0;

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
    if (i == warmup)
      t0 = chime__bench_now_s();
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
    sink += touch(dst, batch_bytes);
    if (i >= warmup)
      got += off;
  }
  double dt = chime__bench_now_s() - t0;
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &md_trail;
  ops[0].data.recv_status_on_client.status = &status;
  ops[0].data.recv_status_on_client.status_details = &details;
  if ((rc = start_batch(call, ops, 1, (void *)3)) != 0 ||
      (rc = cq_wait(cq, (void *)3)) != 0)
    goto out;
  rc = status == GRPC_STATUS_OK ? 0 : CHIME_EPROTO;
  *gbps = (double)got / dt / 1e9;
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
  const char *argv[] = {self, "service", "--grpc-plain-server", NULL};
  memset(p, 0, sizeof(*p));
  int rc = chime__bench_spawn(&p->child, argv, "port ", 30000);
  if (rc != 0)
    return rc;
  char target[300];
  snprintf(target, sizeof(target), "127.0.0.1:%s", p->child.addr);
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
    (void)plain_call(p->ch, 1, 0, 0, &ignored);
    grpc_channel_destroy(p->ch);
    p->ch = NULL;
  }
  (void)chime__bench_child_stop(&p->child, 5000);
}

/* ------------------------------------------------------------------- chime */

static int chime_run(const char *addr, chime_mode_t mode, uint32_t batch_size,
                     uint32_t slots, uint64_t batches, double *gbps, char *why,
                     size_t whylen) {
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_batch_t b;
  int rc;
  double t0 = 0;
  uint64_t bytes = 0;

  if ((rc = chime_client_create(&c, addr, NULL)) != 0) {
    snprintf(why, whylen, "client: %s", chime_strerror(rc));
    goto out;
  }
  so.batch_size = batch_size;
  so.slots = slots;
  so.mode = mode;
  if ((rc = chime_stream_open(c, "bench", &so, &s)) != 0) {
    snprintf(why, whylen, "open: %s", chime_client_last_error(c));
    goto out;
  }
  if (chime_stream_mode(s) != mode) {
    snprintf(why, whylen, "got mode %s", chime_mode_name(chime_stream_mode(s)));
    rc = CHIME_EPROTO;
    goto out;
  }
  uint64_t warmup = slots;
  for (uint64_t i = 0; i < warmup + batches; i++) {
    if (i == warmup)
      t0 = chime__bench_now_s();
    if ((rc = chime_stream_next(s, &b, 30000)) != 0) {
      snprintf(why, whylen, "next: %s", chime_stream_last_error(s));
      goto out;
    }
    uint64_t n = 0;
    for (uint32_t l = 0; l < b.nleaves; l++) {
      sink += touch(b.leaf[l].data, b.leaf[l].bytes);
      n += b.leaf[l].bytes;
    }
    if (i >= warmup)
      bytes += n;
    if ((rc = chime_batch_release(s, &b)) != 0) {
      snprintf(why, whylen, "release: %s", chime_strerror(rc));
      goto out;
    }
  }
  *gbps = (double)bytes / (chime__bench_now_s() - t0) / 1e9;
out:
  chime_stream_close(s);
  chime_client_destroy(c);
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
      (rc = chime_writer_open(c, "bench", NULL, &w)) != 0)
    goto out;
  for (uint64_t i = 0; i < samples && rc == 0; i++) {
    memcpy(sample, &i, sizeof(i));
    rc = chime_writer_append(w, sample, SAMPLE_BYTES, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(w);
  if (rc != 0)
    fprintf(stderr, "chime-bench: prefill: %s\n",
            w != NULL ? chime_writer_last_error(w)
                      : chime_client_last_error(c));
out:;
  int closed = chime_writer_close(w); /* the last flush */
  if (rc == 0)
    rc = closed;
  chime_client_destroy(c);
  free(sample);
  return rc;
}

/* ------------------------------------------------------------------ driver */

static void emit(const opts_t *o, const char *name, uint64_t batch_bytes,
                 double gbps, double vs_memcpy, double vs_plain,
                 const char *extra) {
  if (o->json) {
    printf("{\"bench\":\"service\",\"case\":\"%s\",\"batch_bytes\":%" PRIu64
           ",\"gbps\":%.3f",
           name, batch_bytes, gbps);
    if (vs_memcpy > 0)
      printf(",\"ratio_vs_memcpy\":%.3f", vs_memcpy);
    if (vs_plain > 0)
      printf(",\"ratio_vs_grpc_plain\":%.3f", vs_plain);
    if (extra != NULL)
      printf(",%s", extra);
    printf("}\n");
  } else {
    printf("%-13s %9.1f MiB %8.3f GB/s", name, (double)batch_bytes / MIB, gbps);
    if (vs_memcpy > 0)
      printf("  %.2fx memcpy", vs_memcpy);
    if (vs_plain > 0)
      printf("  %.2fx grpc_plain", vs_plain);
    printf("\n");
  }
  fflush(stdout);
}

static int parse_opts(opts_t *o, int argc, char **argv) {
  *o = (opts_t){0, 3, 1024 * MIB, 2, {1 * MIB, 16 * MIB}, 0, -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "service") == 0)
      continue;
    if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--slots") == 0 && i + 1 < argc) {
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
    } else if (strcmp(a, "--baselines") == 0) {
      o->only_baselines = 1;
    } else if (strcmp(a, "--runs") == 0 && i + 1 < argc) {
      o->runs = atoi(argv[++i]);
      if (o->runs < 1 || o->runs > MAX_RUNS)
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
        if (end == p || v < 1 || v > 64)
          return CHIME_EINVAL;
        o->sizes[o->nsizes++] = (uint64_t)v * MIB;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
          return CHIME_EINVAL;
      }
    } else {
      return CHIME_EINVAL;
    }
  }
  return 0;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: chime-bench service [--json] [--runs N] [--mib MIB_PER_RUN]\n"
      "                           [--sizes 1,16] [--slots S] [--baselines]\n"
      "                           [--only CASE]\n"
      "  batches of each size (MiB) through memcpy, tcp, grpc_plain,\n"
      "  chime_shm and chime_stream; medians of N runs (default 3) of\n"
      "  MIB_PER_RUN MiB each (default 1024); rings of S slots (default 8\n"
      "  for batches under 16 MiB, else 4)\n");
}

typedef struct {
  double v[NCASES][MAX_SIZES][MAX_RUNS];
  double cpu[NCASES][MAX_SIZES][MAX_RUNS]; /* CPU seconds per GB */
} results_t;

/* Median over runs of a / b, each pair measured in the same round. */
static double ratio(const results_t *res, const opts_t *o, int a, int b,
                    int size) {
  double q[MAX_RUNS];
  for (int r = 0; r < o->runs; r++)
    q[r] = res->v[a][size][r] / res->v[b][size][r];
  return chime__bench_median(q, o->runs);
}

/* CPU seconds a process has used (all threads); 0 if it cannot be read. */
static double cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  unsigned long long ut = 0, st = 0;
  /* after "pid (comm)": state and 10 fields, then utime and stime */
  if (p == NULL || sscanf(p + 2,
                          "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                          "%llu %llu",
                          &ut, &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU of this process plus the case's server process. */
static double case_cpu(pid_t server) {
  return cpu_s(getpid()) + (server > 0 ? cpu_s(server) : 0);
}

/* One round: every case once for every size, so that a noisy neighbour
 * slows a case and its baselines alike. */
static int round_once(const opts_t *o, int r, plain_t *plain, pid_t chimed_pid,
                      const char *chimed_addr, results_t *res) {
  int rc = 0;
  char why[512] = "";
  for (int i = 0; i < o->nsizes && rc == 0; i++) {
    uint64_t bb = o->sizes[i];
    uint64_t n = batches_for(o, bb);
    uint32_t batch_size = (uint32_t)(bb / SAMPLE_BYTES);
    for (int c = 0; c < NCASES && rc == 0; c++) {
      pid_t server = c == C_PLAIN ? plain->child.pid
                     : c >= C_SHM ? chimed_pid
                                  : 0;
      double *g = &res->v[c][i][r];
      if (c >= C_SHM && chimed_addr == NULL)
        break;
      if (o->only >= 0 && c != o->only)
        continue;
      double c0 = case_cpu(server);
      switch (c) {
      case C_MEMCPY:
        rc = run_memcpy(bb, n, g);
        break;
      case C_TCP:
        rc = run_tcp(bb, n, g);
        break;
      case C_PLAIN:
        rc = plain_call(plain->ch, bb, 2, n, g);
        break;
      default:
        rc = chime_run(chimed_addr,
                       c == C_SHM ? CHIME_MODE_SHM : CHIME_MODE_STREAM,
                       batch_size, ring_slots(bb), n, g, why, sizeof(why));
        break;
      }
      /* the whole case (warm-up and set-up included) per GB timed */
      res->cpu[c][i][r] = (case_cpu(server) - c0) / ((double)(bb * n) / 1e9);
      if (rc != 0 && why[0] == '\0')
        snprintf(why, sizeof(why), "%s: %s", case_name[c], chime_strerror(rc));
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

  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--grpc-plain-server") == 0)
      return plain_server_main();
  if (parse_opts(&o, argc, argv) != 0) {
    usage();
    return 2;
  }
  memset(&chimed, 0, sizeof(chimed));
  grpc_init();
  have_grpc = 1;
  if ((rc = plain_start(&plain)) != 0)
    goto fail;
  have_plain = 1;

  if (!o.only_baselines && (o.only < 0 || o.only >= C_SHM)) {
    /* One uniform table as big as memcpy's source pool, full before
     * sampling starts, so the sampler copies from memory the caches don't
     * hold. */
    char config[1024];
    uint64_t capacity = POOL_BYTES / SAMPLE_BYTES;
    snprintf(config, sizeof(config),
             "{\"budgets\": {\"stream_ring_bytes\": %" PRIu64
             ", \"total_ring_bytes\": %" PRIu64 "},\n"
             " \"tables\": [{\"name\": \"bench\", \"spec\": \"x:u8[%d]\", "
             "\"capacity\": %" PRIu64 ", \"min_size\": %" PRIu64
             ", \"sampler\": \"uniform\"}]}\n",
             (uint64_t)1 << 30, (uint64_t)4 << 30, SAMPLE_BYTES, capacity,
             capacity);
    if ((rc = chime__bench_chimed_start(&chimed, config)) != 0)
      goto fail;
    have_chimed = 1;
    if ((rc = prefill(chimed.addr, capacity)) != 0)
      goto fail;
  }
  for (int r = 0; r < o.runs; r++)
    if ((rc = round_once(&o, r, &plain, have_chimed ? chimed.pid : 0,
                         have_chimed ? chimed.addr : NULL, &res)) != 0)
      goto fail;

  for (int i = 0; i < o.nsizes; i++) {
    uint64_t bb = o.sizes[i];
    for (int c = 0; c < (have_chimed ? NCASES : C_SHM); c++) {
      int all = o.only < 0;
      if (!all && c != o.only)
        continue;
      double g[MAX_RUNS];
      char extra[160];
      memcpy(g, res.v[c][i], sizeof(g));
      extra[0] = '\0';
      if (c >= C_SHM)
        snprintf(extra, sizeof(extra),
                 "\"batch_size\":%u,\"slots\":%u,\"sample_bytes\":%d,",
                 (unsigned)(bb / SAMPLE_BYTES), ring_slots(bb), SAMPLE_BYTES);
      double cpu[MAX_RUNS];
      memcpy(cpu, res.cpu[c][i], sizeof(cpu));
      snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
               "\"cpu_s_per_gb\":%.3f,\"runs\":%d",
               chime__bench_median(cpu, o.runs), o.runs);
      emit(&o, case_name[c], bb, chime__bench_median(g, o.runs),
           c == C_MEMCPY || !all ? 0 : ratio(&res, &o, c, C_MEMCPY, i),
           c >= C_SHM && all ? ratio(&res, &o, c, C_PLAIN, i) : 0, extra);
    }
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
