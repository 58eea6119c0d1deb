/* A stand-in libcudart.so.13 for tests, so every branch of page-locking runs
 * without a GPU. It exports the calls chime uses, with the same signatures as
 * the real runtime; its behaviour is read from the environment on every call:
 *
 *   FAKE_CUDART_INIT_ERROR=<code>      cudaFree / cudaGetDeviceCount fail
 *   FAKE_CUDART_DEVICES=<n>            device count (default 1)
 *   FAKE_CUDART_FAIL_REGISTER_AT=<n>   the n-th cudaHostRegister (1-based,
 *                                      counted per process) fails
 *   FAKE_CUDART_REGISTER_ERROR=<code>  with this code (default 2)
 *   FAKE_CUDART_LOG=<file>             appends "register <ptr> <size> <flags>",
 *                                      "register-fail <ptr> <size> <flags>",
 *                                      "unregister <ptr>", "sync" lines;
 *                                      "unregister-unmapped <ptr>" when the
 *                                      pages were already unmapped (a real
 *                                      runtime would fault or fail there)
 *
 * It also has just enough of a "device" (host memory behind cudaMalloc,
 * cudaMemcpy[Async] as memcpy, streams that are already done) for
 * tests/gpu/gpu_check to run its whole flow without a GPU.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_MAX_REGS 8192

typedef struct {
  void *ptr;
  size_t size;
  unsigned int flags;
} fake_reg_t;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_reg_t fake_regs[FAKE_MAX_REGS];
static size_t fake_nregs;
static unsigned long fake_register_calls;

int cudaRuntimeGetVersion(int *version);
int cudaFree(void *ptr);
int cudaMalloc(void **ptr, size_t size);
int cudaMallocHost(void **ptr, size_t size);
int cudaFreeHost(void *ptr);
int cudaMemcpy(void *dst, const void *src, size_t count, int kind);
int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
                    void *stream);
int cudaStreamCreate(void **stream);
int cudaStreamSynchronize(void *stream);
int cudaStreamDestroy(void *stream);
int cudaGetDeviceCount(int *count);
int cudaHostRegister(void *ptr, size_t size, unsigned int flags);
int cudaHostUnregister(void *ptr);
int cudaHostGetFlags(unsigned int *flags, void *ptr);
int cudaDeviceSynchronize(void);
const char *cudaGetErrorName(int error);
const char *cudaGetErrorString(int error);

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

int cudaRuntimeGetVersion(int *version) {
  *version = 13000;
  return 0;
}

int cudaFree(void *ptr) {
  if (ptr != NULL) {
    free(ptr);
    return 0;
  }
  return (int)env_long("FAKE_CUDART_INIT_ERROR", 0);
}

int cudaMalloc(void **ptr, size_t size) {
  *ptr = malloc(size);
  return *ptr != NULL ? 0 : 2;
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

int cudaMemcpy(void *dst, const void *src, size_t count, int kind) {
  (void)kind;
  memcpy(dst, src, count);
  return 0;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
                    void *stream) {
  (void)stream;
  return cudaMemcpy(dst, src, count, kind);
}

int cudaStreamCreate(void **stream) {
  static int fake_stream;

  *stream = &fake_stream;
  return 0;
}

int cudaStreamSynchronize(void *stream) {
  (void)stream;
  return 0;
}

int cudaStreamDestroy(void *stream) {
  (void)stream;
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
  fake_log("sync");
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
