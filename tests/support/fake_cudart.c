/* A stand-in libcudart.so.13 for tests, so every branch of page-locking and
 * of device streams runs without a GPU. It exports the calls chime uses, with
 * the same signatures as the real runtime; its behaviour is read from the
 * environment on every call:
 *
 *   FAKE_CUDART_INIT_ERROR=<code>      cudaFree / cudaGetDeviceCount fail
 *   FAKE_CUDART_DEVICES=<n>            device count (default 1)
 *   FAKE_CUDART_FAIL_REGISTER_AT=<n>   the n-th cudaHostRegister (1-based,
 *                                      counted per process) fails
 *   FAKE_CUDART_REGISTER_ERROR=<code>  with this code (default 2)
 *   FAKE_CUDART_READONLY=<0|1>         what cudaDeviceGetAttribute answers
 *                                      for cudaDevAttrHostRegisterReadOnly-
 *                                      Supported (default 1)
 *   FAKE_CUDART_NO_DEVICE_CALLS=1      the stream and event calls are
 *                                      missing (dlsym finds them, they
 *                                      fail with cudaErrorNotSupported)
 *   FAKE_CUDART_FAIL_COPY_AT=<n>       the n-th cudaMemcpyAsync fails
 *   FAKE_CUDART_COPY_ERROR=<code>      with this code (default 1)
 *   FAKE_CUDART_LOSE_DEVICE_AT=<n>     the device is lost at the n-th
 *                                      cudaEventQuery: it and every later
 *                                      call on the device fail with
 *                                      FAKE_CUDART_LOST_ERROR (default 999);
 *                                      frees and destroys still free
 *   FAKE_CUDART_MANUAL=1               device work runs only when the test
 *                                      says (fake_cudart_run) or a call
 *                                      synchronises; else each
 *                                      cudaEventQuery first runs one
 *                                      operation of every stream
 *   FAKE_CUDART_LOG=<file>             appends one line per call (below)
 *
 * cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel and cuModuleUnload
 * (the driver API's, for chime-bench device's spin kernel) load nothing
 * and queue an empty kernel.
 *
 * The device: cudaMalloc is host memory, so tests read what arrived. Each
 * stream is a queue of operations (copy, event record, wait on an event,
 * a test's "kernel") that run in order at a simulated completion point, not
 * when they are issued: a copy's memcpy happens when it runs, so a source
 * rewritten before then is caught ("copy-src-changed": the bytes differ
 * from those at issue; all of them up to 64 KiB, 4096 spread over a larger
 * one), as a real DMA would read them. Events complete when
 * their record runs; a wait holds its stream until the event it names has.
 * The legacy and per-thread default streams (0, 1, 2) are one stream.
 *
 * Log lines: "register <ptr> <size> <flags>", "register-fail ...",
 * "unregister <ptr>", "unregister-fail <ptr>", "unregister-unmapped <ptr>"
 * (the pages were already unmapped: a real runtime would fault or fail),
 * "sync" (cudaDeviceSynchronize); and for device work: "malloc <ptr> <n>",
 * "free <ptr>", "free-busy <ptr>" (queued work still uses it),
 * "stream-create <s> <flags>", "stream-destroy <s>", "stream-sync <s>",
 * "event-create <e>", "event-destroy <e>", "event-sync <e>",
 * "copy <id> <dst> <src> <n> <stream> <pinned 0|1>" (issued),
 * "copy-done <id>", "copy-src-changed <id>",
 * "copy-fail <code> <dst> <src> <n>" (refused at issue),
 * "record <e> <gen> <stream>", "record-done <e> <gen>",
 * "wait <stream> <e> <gen>", "query <e> <ready|busy|lost>",
 * "kernel <id> <stream> <ptr> <n>", "kernel-done <id> <sum>",
 * "bad-handle <what> <ptr>" (a stream or event not live), and whatever a
 * test writes with fake_cudart_note().
 *
 * Control calls for tests, found with dlsym in the library chime loaded:
 * fake_cudart_run(n) runs up to n operations (n < 0: until nothing can
 * run) and returns how many ran; fake_cudart_count(what) counts live
 * "malloc", "stream", "event", "register" and "pending" operations;
 * fake_cudart_launch(stream, ptr, n) queues a kernel that sums n bytes at
 * ptr when it runs (FNV-1a, shifted right by one) and returns its id;
 * fake_cudart_hold(stream, 1) stops a stream (0 lets it go again), as a
 * learner's stream busy with long work; fake_cudart_kernel_sum(id) is that sum
 * (-1 before); fake_cudart_note(text) appends a line to the log;
 * fake_cudart_reset() restarts the per-process counters (FAIL_*_AT,
 * LOSE_DEVICE_AT) and finds the device again.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_MAX_REGS 8192
#define FAKE_MAX_KERNELS 65536

typedef struct {
  void *ptr;
  size_t size;
  unsigned int flags;
} fake_reg_t;

typedef struct fake_alloc_s {
  void *ptr;
  size_t size;
  struct fake_alloc_s *next;
} fake_alloc_t;

typedef struct fake_event_s {
  unsigned long recorded;  /* gen of the latest record issued */
  unsigned long completed; /* gen of the latest record that ran */
  struct fake_event_s *next;
} fake_event_t;

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_KERNEL };

typedef struct fake_op_s {
  int kind;
  unsigned long id; /* copy or kernel number */
  void *dst;
  const void *src;
  size_t n;
  uint64_t sum; /* a copy's source at issue */
  fake_event_t *ev;
  unsigned long gen;
  struct fake_op_s *next;
} fake_op_t;

typedef struct fake_stream_s {
  unsigned int flags;
  int held; /* fake_cudart_hold: nothing of it runs */
  fake_op_t *head, *tail;
  struct fake_stream_s *next;
} fake_stream_t;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_reg_t fake_regs[FAKE_MAX_REGS];
static size_t fake_nregs;
static unsigned long fake_register_calls;
static unsigned long fake_copy_calls, fake_query_calls, fake_ids;
static int fake_lost;
static fake_alloc_t *fake_allocs;
static fake_event_t *fake_events;
static fake_stream_t *fake_streams;
static fake_stream_t fake_default_stream;
static int64_t fake_kernel_sums[FAKE_MAX_KERNELS];
static __thread int fake_current_device;

int cudaRuntimeGetVersion(int *version);
int cudaFree(void *ptr);
int cudaMalloc(void **ptr, size_t size);
int cudaMallocHost(void **ptr, size_t size);
int cudaFreeHost(void *ptr);
int cudaMemcpy(void *dst, const void *src, size_t count, int kind);
int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
                    void *stream);
int cudaStreamCreate(void **stream);
int cudaStreamCreateWithFlags(void **stream, unsigned int flags);
int cudaStreamSynchronize(void *stream);
int cudaStreamDestroy(void *stream);
int cudaStreamWaitEvent(void *stream, void *event, unsigned int flags);
int cudaEventCreateWithFlags(void **event, unsigned int flags);
int cudaEventRecord(void *event, void *stream);
int cudaEventQuery(void *event);
int cudaEventSynchronize(void *event);
int cudaEventDestroy(void *event);
int cudaGetDevice(int *device);
int cudaSetDevice(int device);
int cudaDeviceGetAttribute(int *value, int attr, int device);
int cudaGetDeviceCount(int *count);
int cudaHostRegister(void *ptr, size_t size, unsigned int flags);
int cudaHostUnregister(void *ptr);
int cudaHostGetFlags(unsigned int *flags, void *ptr);
int cudaDeviceSynchronize(void);
const char *cudaGetErrorName(int error);
const char *cudaGetErrorString(int error);
int cuModuleLoadData(void **module, const void *image);
int cuModuleGetFunction(void **fn, void *module, const char *name);
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, void *stream,
                   void **params, void **extra);
int cuModuleUnload(void *module);
long fake_cudart_run(long max_ops);
long fake_cudart_count(const char *what);
long fake_cudart_launch(void *stream, const void *ptr, size_t n);
int fake_cudart_hold(void *stream, int on);
int64_t fake_cudart_kernel_sum(long id);
void fake_cudart_note(const char *text);
void fake_cudart_reset(void);

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);

  return v != NULL && v[0] != '\0' ? strtol(v, NULL, 0) : dflt;
}

__attribute__((format(printf, 1, 2))) static void fake_log(const char *fmt,
                                                           ...) {
  const char *path = getenv("FAKE_CUDART_LOG");
  FILE *f;
  va_list ap;

  if (path == NULL || path[0] == '\0')
    return;
  f = fopen(path, "a");
  if (f == NULL)
    return;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

/* ------------------------------------------------------------ the device */

static int lost_error(void) {
  return (int)env_long("FAKE_CUDART_LOST_ERROR", 999);
}

/* The stream calls exist but fail, as in a runtime built without them. */
static int no_device_calls(void) {
  return env_long("FAKE_CUDART_NO_DEVICE_CALLS", 0) != 0;
}

static uint64_t sum_bytes(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t s = 1469598103934665603ull; /* FNV-1a */

  for (size_t i = 0; i < n; i++)
    s = (s ^ b[i]) * 1099511628211ull;
  return s;
}

/* What a copy's source looked like: every byte of a small one; of a large
 * one (tests/gpu/gpu_check copies 64 MiB) 4096 bytes spread over it, which
 * a producer that rewrites the slot still changes. */
static uint64_t src_digest(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t s = 1469598103934665603ull;
  size_t step;

  if (n <= 65536)
    return sum_bytes(p, n);
  step = n / 4096;
  for (size_t i = 0; i < n; i += step)
    s = (s ^ b[i]) * 1099511628211ull;
  return s;
}

static fake_stream_t *find_stream(void *handle) {
  if ((uintptr_t)handle <= 2)
    return &fake_default_stream;
  for (fake_stream_t *s = fake_streams; s != NULL; s = s->next)
    if (s == handle)
      return s;
  fake_log("bad-handle stream %p", handle);
  return NULL;
}

static fake_event_t *find_event(void *handle) {
  for (fake_event_t *e = fake_events; e != NULL; e = e->next)
    if (e == handle)
      return e;
  fake_log("bad-handle event %p", handle);
  return NULL;
}

static void push_op(fake_stream_t *s, fake_op_t *op) {
  op->next = NULL;
  if (s->tail != NULL)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
}

static int is_registered(const void *ptr, size_t n) {
  for (size_t i = 0; i < fake_nregs; i++) {
    const char *a = fake_regs[i].ptr, *b = ptr;

    if (b >= a && b + n <= a + fake_regs[i].size)
      return 1;
  }
  return 0;
}

/* Runs the operation at the head of s if it can run. 1 when one ran. */
static int step(fake_stream_t *s) {
  fake_op_t *op = s->head;

  if (op == NULL || s->held)
    return 0;
  if (op->kind == OP_WAIT && op->ev != NULL && op->ev->completed < op->gen)
    return 0;
  switch (op->kind) {
  case OP_COPY:
    if (src_digest(op->src, op->n) != op->sum)
      fake_log("copy-src-changed %lu", op->id);
    memcpy(op->dst, op->src, op->n);
    fake_log("copy-done %lu", op->id);
    break;
  case OP_RECORD:
    if (op->ev == NULL)
      break;
    if (op->ev->completed < op->gen)
      op->ev->completed = op->gen;
    fake_log("record-done %p %lu", (void *)op->ev, op->gen);
    break;
  case OP_KERNEL:
    if (op->id < FAKE_MAX_KERNELS)
      fake_kernel_sums[op->id] = (int64_t)(sum_bytes(op->src, op->n) >> 1);
    fake_log("kernel-done %lu %lld", op->id,
             (long long)(sum_bytes(op->src, op->n) >> 1));
    break;
  default:
    break;
  }
  s->head = op->next;
  if (s->head == NULL)
    s->tail = NULL;
  free(op);
  return 1;
}

/* One operation of every stream that can run one. */
static long round_all(void) {
  long ran = step(&fake_default_stream);

  for (fake_stream_t *s = fake_streams; s != NULL; s = s->next)
    ran += step(s);
  return ran;
}

static long run_all(long max_ops) {
  long ran = 0, r;

  while ((max_ops < 0 || ran < max_ops) && (r = round_all()) > 0)
    ran += r;
  return ran;
}

/* Runs everything that can run until done() says so or nothing can. */
static void run_until(int (*done)(void *), void *arg) {
  while (!done(arg) && round_all() > 0) {
  }
}

static int stream_empty(void *arg) {
  return ((fake_stream_t *)arg)->head == NULL;
}

static int event_done(void *arg) {
  fake_event_t *e = arg;

  return e->completed >= e->recorded;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  const char *x = a, *y = b;

  return a != NULL && b != NULL && x < y + bn && y < x + an;
}

/* Queued work reads or writes [p, p + n). */
static int alloc_busy(const void *p, size_t n) {
  fake_stream_t *s = &fake_default_stream;

  for (; s != NULL; s = s == &fake_default_stream ? fake_streams : s->next)
    for (fake_op_t *op = s->head; op != NULL; op = op->next)
      if ((op->kind == OP_COPY || op->kind == OP_KERNEL) &&
          (overlaps(op->dst, op->n, p, n) || overlaps(op->src, op->n, p, n)))
        return 1;
  return 0;
}

/* An event going away: queued records and waits naming it forget it (the
 * waits count as passed), so none reads freed memory. */
static void forget_event(const fake_event_t *e) {
  for (fake_op_t *op = fake_default_stream.head; op != NULL; op = op->next)
    if (op->ev == e)
      op->ev = NULL;
  for (fake_stream_t *s = fake_streams; s != NULL; s = s->next)
    for (fake_op_t *op = s->head; op != NULL; op = op->next)
      if (op->ev == e)
        op->ev = NULL;
}

/* ------------------------------------------------------------- the calls */

int cudaRuntimeGetVersion(int *version) {
  *version = 13000;
  return 0;
}

int cudaFree(void *ptr) {
  if (ptr != NULL) {
    size_t n = 1;

    pthread_mutex_lock(&fake_lock);
    for (fake_alloc_t **a = &fake_allocs; *a != NULL; a = &(*a)->next) {
      if ((*a)->ptr == ptr) {
        fake_alloc_t *gone = *a;
        n = gone->size;
        *a = gone->next;
        free(gone);
        break;
      }
    }
    if (alloc_busy(ptr, n))
      fake_log("free-busy %p", ptr);
    fake_log("free %p", ptr);
    pthread_mutex_unlock(&fake_lock);
    free(ptr);
    return fake_lost ? lost_error() : 0;
  }
  return (int)env_long("FAKE_CUDART_INIT_ERROR", 0);
}

int cudaMalloc(void **ptr, size_t size) {
  fake_alloc_t *a;

  *ptr = NULL;
  if (fake_lost)
    return lost_error();
  a = calloc(1, sizeof *a);
  if (a == NULL || (*ptr = malloc(size ? size : 1)) == NULL) {
    free(a);
    return 2;
  }
  pthread_mutex_lock(&fake_lock);
  a->ptr = *ptr;
  a->size = size;
  a->next = fake_allocs;
  fake_allocs = a;
  fake_log("malloc %p %zu", *ptr, size);
  pthread_mutex_unlock(&fake_lock);
  return 0;
}

/* Page-locked host memory: registered portable, like the real thing. */
int cudaMallocHost(void **ptr, size_t size) {
  int rc;

  *ptr = NULL;
  if (posix_memalign(ptr, 4096, size) != 0)
    return 2;
  rc = cudaHostRegister(*ptr, size, 1);
  if (rc != 0) {
    free(*ptr);
    *ptr = NULL;
  }
  return rc;
}

int cudaFreeHost(void *ptr) {
  int rc = cudaHostUnregister(ptr);

  free(ptr);
  return rc;
}

/* Synchronous: waits for all device work first, as the legacy stream. */
int cudaMemcpy(void *dst, const void *src, size_t count, int kind) {
  (void)kind;
  pthread_mutex_lock(&fake_lock);
  run_all(-1);
  pthread_mutex_unlock(&fake_lock);
  memcpy(dst, src, count);
  return 0;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
                    void *stream) {
  long fail_at = env_long("FAKE_CUDART_FAIL_COPY_AT", 0);
  fake_stream_t *s;
  fake_op_t *op;
  int rc = 0;

  (void)kind;
  pthread_mutex_lock(&fake_lock);
  fake_copy_calls++;
  if (fake_lost) {
    rc = lost_error();
    fake_log("copy-fail %d %p %p %zu", rc, dst, src, count);
    goto out;
  }
  if (fail_at > 0 && fake_copy_calls == (unsigned long)fail_at) {
    rc = (int)env_long("FAKE_CUDART_COPY_ERROR", 1);
    fake_log("copy-fail %d %p %p %zu", rc, dst, src, count);
    goto out;
  }
  if ((s = find_stream(stream)) == NULL) {
    rc = 400; /* cudaErrorInvalidResourceHandle */
    goto out;
  }
  op = calloc(1, sizeof *op);
  if (op == NULL) {
    rc = 2;
    goto out;
  }
  op->kind = OP_COPY;
  op->id = ++fake_ids;
  op->dst = dst;
  op->src = src;
  op->n = count;
  op->sum = src_digest(src, count);
  fake_log("copy %lu %p %p %zu %p %d", op->id, dst, src, count, stream,
           is_registered(src, count));
  push_op(s, op);
out:
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaStreamCreateWithFlags(void **stream, unsigned int flags) {
  fake_stream_t *s;

  *stream = NULL;
  if (no_device_calls())
    return 801;
  if (fake_lost)
    return lost_error();
  s = calloc(1, sizeof *s);
  if (s == NULL)
    return 2;
  s->flags = flags;
  pthread_mutex_lock(&fake_lock);
  s->next = fake_streams;
  fake_streams = s;
  fake_log("stream-create %p %u", (void *)s, flags);
  pthread_mutex_unlock(&fake_lock);
  *stream = s;
  return 0;
}

int cudaStreamCreate(void **stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

int cudaStreamSynchronize(void *stream) {
  fake_stream_t *s;
  int rc = 0;

  pthread_mutex_lock(&fake_lock);
  fake_log("stream-sync %p", stream);
  if ((s = find_stream(stream)) == NULL)
    rc = 400;
  else
    run_until(stream_empty, s);
  pthread_mutex_unlock(&fake_lock);
  return rc != 0 ? rc : fake_lost ? lost_error() : 0;
}

int cudaStreamDestroy(void *stream) {
  int rc = 400;

  pthread_mutex_lock(&fake_lock);
  for (fake_stream_t **p = &fake_streams; *p != NULL; p = &(*p)->next) {
    if (*p == stream) {
      fake_stream_t *s = *p;
      /* Work still queued completes first, as CUDA does. */
      run_until(stream_empty, s);
      *p = s->next;
      while (s->head != NULL) { /* blocked for good: dropped */
        fake_op_t *op = s->head;
        s->head = op->next;
        free(op);
      }
      free(s);
      rc = 0;
      break;
    }
  }
  fake_log(rc == 0 ? "stream-destroy %p" : "bad-handle stream %p", stream);
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaStreamWaitEvent(void *stream, void *event, unsigned int flags) {
  fake_stream_t *s;
  fake_event_t *e;
  fake_op_t *op;
  int rc = 0;

  (void)flags;
  if (no_device_calls())
    return 801;
  pthread_mutex_lock(&fake_lock);
  if (fake_lost) {
    rc = lost_error();
    goto out;
  }
  if ((s = find_stream(stream)) == NULL || (e = find_event(event)) == NULL) {
    rc = 400;
    goto out;
  }
  fake_log("wait %p %p %lu", stream, event, e->recorded);
  if (e->recorded == 0)
    goto out; /* never recorded: nothing to wait for */
  op = calloc(1, sizeof *op);
  if (op == NULL) {
    rc = 2;
    goto out;
  }
  op->kind = OP_WAIT;
  op->ev = e;
  op->gen = e->recorded;
  push_op(s, op);
out:
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaEventCreateWithFlags(void **event, unsigned int flags) {
  fake_event_t *e;

  (void)flags;
  *event = NULL;
  if (no_device_calls())
    return 801;
  if (fake_lost)
    return lost_error();
  e = calloc(1, sizeof *e);
  if (e == NULL)
    return 2;
  pthread_mutex_lock(&fake_lock);
  e->next = fake_events;
  fake_events = e;
  fake_log("event-create %p", (void *)e);
  pthread_mutex_unlock(&fake_lock);
  *event = e;
  return 0;
}

int cudaEventRecord(void *event, void *stream) {
  fake_stream_t *s;
  fake_event_t *e;
  fake_op_t *op;
  int rc = 0;

  pthread_mutex_lock(&fake_lock);
  if (fake_lost) {
    rc = lost_error();
    goto out;
  }
  if ((s = find_stream(stream)) == NULL || (e = find_event(event)) == NULL) {
    rc = 400;
    goto out;
  }
  op = calloc(1, sizeof *op);
  if (op == NULL) {
    rc = 2;
    goto out;
  }
  op->kind = OP_RECORD;
  op->ev = e;
  op->gen = ++e->recorded;
  fake_log("record %p %lu %p", event, op->gen, stream);
  push_op(s, op);
out:
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaEventQuery(void *event) {
  long lose_at = env_long("FAKE_CUDART_LOSE_DEVICE_AT", 0);
  fake_event_t *e;
  int rc;

  pthread_mutex_lock(&fake_lock);
  fake_query_calls++;
  if (lose_at > 0 && fake_query_calls >= (unsigned long)lose_at)
    fake_lost = 1;
  if (fake_lost) {
    rc = lost_error();
    fake_log("query %p lost", event);
    goto out;
  }
  if ((e = find_event(event)) == NULL) {
    rc = 400;
    goto out;
  }
  if (!env_long("FAKE_CUDART_MANUAL", 0))
    round_all();
  rc = event_done(e) ? 0 : 600; /* cudaErrorNotReady */
  fake_log("query %p %s", event, rc == 0 ? "ready" : "busy");
out:
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaEventSynchronize(void *event) {
  fake_event_t *e;
  int rc = 0;

  pthread_mutex_lock(&fake_lock);
  fake_log("event-sync %p", event);
  if ((e = find_event(event)) == NULL)
    rc = 400;
  else
    run_until(event_done, e);
  pthread_mutex_unlock(&fake_lock);
  return rc != 0 ? rc : fake_lost ? lost_error() : 0;
}

int cudaEventDestroy(void *event) {
  int rc = 400;

  pthread_mutex_lock(&fake_lock);
  for (fake_event_t **p = &fake_events; *p != NULL; p = &(*p)->next) {
    if (*p == event) {
      fake_event_t *e = *p;
      /* CUDA lets an event go with work pending; a queued wait or record
       * on it here would be a dangling pointer, so it runs first. */
      run_until(event_done, e);
      forget_event(e);
      *p = e->next;
      free(e);
      rc = 0;
      break;
    }
  }
  fake_log(rc == 0 ? "event-destroy %p" : "bad-handle event %p", event);
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaGetDevice(int *device) {
  *device = fake_current_device;
  return 0;
}

int cudaSetDevice(int device) {
  if (device < 0 || device >= env_long("FAKE_CUDART_DEVICES", 1))
    return 101; /* cudaErrorInvalidDevice */
  fake_current_device = device;
  return 0;
}

int cudaDeviceGetAttribute(int *value, int attr, int device) {
  if (device < 0 || device >= env_long("FAKE_CUDART_DEVICES", 1))
    return 101;
  *value = attr == 113 ? (int)env_long("FAKE_CUDART_READONLY", 1) : 1;
  return 0;
}

int cudaGetDeviceCount(int *count) {
  int e = (int)env_long("FAKE_CUDART_INIT_ERROR", 0);

  if (e != 0)
    return e;
  *count = (int)env_long("FAKE_CUDART_DEVICES", 1);
  return 0;
}

int cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  long fail_at = env_long("FAKE_CUDART_FAIL_REGISTER_AT", 0);
  int rc = 0;
  size_t i;

  pthread_mutex_lock(&fake_lock);
  fake_register_calls++;
  if (fail_at > 0 && fake_register_calls == (unsigned long)fail_at) {
    rc = (int)env_long("FAKE_CUDART_REGISTER_ERROR", 2);
    fake_log("register-fail %p %zu %u", ptr, size, flags);
    goto out;
  }
  for (i = 0; i < fake_nregs; i++) {
    char *a = fake_regs[i].ptr, *b = ptr;

    if (b < a + fake_regs[i].size && a < b + size) {
      rc = 712; /* cudaErrorHostMemoryAlreadyRegistered */
      fake_log("register-fail %p %zu %u", ptr, size, flags);
      goto out;
    }
  }
  if (fake_nregs == FAKE_MAX_REGS) {
    rc = 2;
    goto out;
  }
  fake_regs[fake_nregs].ptr = ptr;
  fake_regs[fake_nregs].size = size;
  fake_regs[fake_nregs].flags = flags;
  fake_nregs++;
  fake_log("register %p %zu %u", ptr, size, flags);
out:
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

/* mincore fails with ENOMEM for an address that is not mapped. */
static int is_mapped(void *ptr) {
  long page = sysconf(_SC_PAGESIZE);
  unsigned char vec;
  void *base = (void *)((unsigned long)ptr & ~(unsigned long)(page - 1));

  return mincore(base, 1, &vec) == 0;
}

int cudaHostUnregister(void *ptr) {
  int rc = 713; /* cudaErrorHostMemoryNotRegistered */
  size_t i;

  pthread_mutex_lock(&fake_lock);
  if (!is_mapped(ptr))
    fake_log("unregister-unmapped %p", ptr);
  for (i = 0; i < fake_nregs; i++) {
    if (fake_regs[i].ptr == ptr) {
      fake_regs[i] = fake_regs[--fake_nregs];
      rc = 0;
      break;
    }
  }
  fake_log(rc == 0 ? "unregister %p" : "unregister-fail %p", ptr);
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaHostGetFlags(unsigned int *flags, void *ptr) {
  int rc = 1; /* cudaErrorInvalidValue, as for pageable memory */
  size_t i;

  pthread_mutex_lock(&fake_lock);
  for (i = 0; i < fake_nregs; i++) {
    char *a = fake_regs[i].ptr, *b = ptr;

    if (b >= a && b < a + fake_regs[i].size) {
      *flags = fake_regs[i].flags;
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

int cudaDeviceSynchronize(void) {
  pthread_mutex_lock(&fake_lock);
  fake_log("sync");
  run_all(-1);
  pthread_mutex_unlock(&fake_lock);
  return 0;
}

/* Knows only a few names, like an old runtime, so chime's own table gets
 * exercised for the rest. */
const char *cudaGetErrorName(int error) {
  switch (error) {
  case 0:
    return "cudaSuccess";
  case 2:
    return "cudaErrorMemoryAllocation";
  case 35:
    return "cudaErrorInsufficientDriver";
  }
  return "unrecognized error code";
}

const char *cudaGetErrorString(int error) {
  return error == 0 ? "no error" : "fake error";
}

/* The driver API calls chime-bench device launches its spin kernel with
 * (the real ones are libcuda's): a kernel here is an empty operation on its
 * stream. */
static char fake_module, fake_function;

int cuModuleLoadData(void **module, const void *image) {
  (void)image;
  *module = &fake_module;
  return 0;
}

int cuModuleGetFunction(void **fn, void *module, const char *name) {
  (void)module;
  (void)name;
  *fn = &fake_function;
  return 0;
}

int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, void *stream,
                   void **params, void **extra) {
  (void)fn, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
  (void)shmem, (void)params, (void)extra;
  return fake_cudart_launch(stream, NULL, 0) > 0 ? 0 : 400;
}

int cuModuleUnload(void *module) {
  (void)module;
  return 0;
}

/* ----------------------------------------------------- control for tests */

long fake_cudart_run(long max_ops) {
  long ran;

  pthread_mutex_lock(&fake_lock);
  ran = run_all(max_ops);
  pthread_mutex_unlock(&fake_lock);
  return ran;
}

long fake_cudart_count(const char *what) {
  long n = 0;

  pthread_mutex_lock(&fake_lock);
  if (strcmp(what, "malloc") == 0) {
    for (fake_alloc_t *a = fake_allocs; a != NULL; a = a->next)
      n++;
  } else if (strcmp(what, "stream") == 0) {
    for (fake_stream_t *s = fake_streams; s != NULL; s = s->next)
      n++;
  } else if (strcmp(what, "event") == 0) {
    for (fake_event_t *e = fake_events; e != NULL; e = e->next)
      n++;
  } else if (strcmp(what, "register") == 0) {
    n = (long)fake_nregs;
  } else if (strcmp(what, "pending") == 0) {
    for (fake_op_t *op = fake_default_stream.head; op != NULL; op = op->next)
      n++;
    for (fake_stream_t *s = fake_streams; s != NULL; s = s->next)
      for (fake_op_t *op = s->head; op != NULL; op = op->next)
        n++;
  } else {
    n = -1;
  }
  pthread_mutex_unlock(&fake_lock);
  return n;
}

long fake_cudart_launch(void *stream, const void *ptr, size_t n) {
  fake_stream_t *s;
  fake_op_t *op;
  long id = -1;

  pthread_mutex_lock(&fake_lock);
  if ((s = find_stream(stream)) == NULL || (op = calloc(1, sizeof *op)) == NULL)
    goto out;
  op->kind = OP_KERNEL;
  op->id = ++fake_ids;
  op->src = ptr;
  op->n = n;
  if (op->id < FAKE_MAX_KERNELS)
    fake_kernel_sums[op->id] = -1;
  fake_log("kernel %lu %p %p %zu", op->id, stream, ptr, n);
  push_op(s, op);
  id = (long)op->id;
out:
  pthread_mutex_unlock(&fake_lock);
  return id;
}

int fake_cudart_hold(void *stream, int on) {
  fake_stream_t *s;

  pthread_mutex_lock(&fake_lock);
  s = find_stream(stream);
  if (s != NULL)
    s->held = on;
  pthread_mutex_unlock(&fake_lock);
  return s != NULL ? 0 : 400;
}

int64_t fake_cudart_kernel_sum(long id) {
  int64_t v = -1;

  pthread_mutex_lock(&fake_lock);
  if (id > 0 && id < FAKE_MAX_KERNELS)
    v = fake_kernel_sums[id];
  pthread_mutex_unlock(&fake_lock);
  return v;
}

void fake_cudart_note(const char *text) {
  pthread_mutex_lock(&fake_lock);
  fake_log("%s", text);
  pthread_mutex_unlock(&fake_lock);
}

void fake_cudart_reset(void) {
  pthread_mutex_lock(&fake_lock);
  fake_copy_calls = 0;
  fake_query_calls = 0;
  fake_register_calls = 0;
  fake_lost = 0;
  pthread_mutex_unlock(&fake_lock);
}
