/* GPU check for page-locked rings (run by scripts/gpu-check.sh on a GPU host).
 *
 * For 16 MiB and 64 MiB batches it pins rings through chime (a producer's
 * mapping, and a consumer's read-only mapping of another ring), asks the
 * runtime with cudaHostGetFlags whether every slot is registered portable, and
 * measures host-to-device copies from a pinned slot, from the same bytes in
 * pageable memory and from cudaMallocHost memory: GB/s, and how long
 * cudaMemcpyAsync takes to return (from pageable memory the driver stages the
 * copy on the calling thread, so the call returns late; from pinned memory it
 * returns at once).
 *
 * Prints one JSON object per line. Exit 0: every check passed; 1: a check
 * failed; 77: no usable GPU or driver here (nothing measured).
 *
 * The CUDA runtime is reached only through the library chime loaded; the few
 * prototypes and constants needed are declared here, so no CUDA headers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlfcn.h>

#include "chime/ring.h"
#include "ring/cudart.h"
#include "ring/pin.h"
#include "ring/producer.h"

#define CUDA_MEMCPY_HOST_TO_DEVICE 1
#define CUDA_MEMCPY_DEVICE_TO_HOST 2
#define ITERS 10

typedef void *cuda_stream_t;

static struct {
  int (*malloc_)(void **ptr, size_t size);
  int (*free_)(void *ptr);
  int (*malloc_host)(void **ptr, size_t size);
  int (*free_host)(void *ptr);
  int (*memcpy_async)(void *dst, const void *src, size_t count, int kind,
                      cuda_stream_t stream);
  int (*memcpy_)(void *dst, const void *src, size_t count, int kind);
  int (*stream_create)(cuda_stream_t *stream);
  int (*stream_synchronize)(cuda_stream_t stream);
  int (*stream_destroy)(cuda_stream_t stream);
  int (*host_get_flags)(unsigned int *flags, void *ptr);
  /* Optional second witness: cudaMemoryTypeHost (1) for registered memory. */
  int (*pointer_get_attributes)(void *attrs, const void *ptr);
} cu;

#define CUDA_MEMORY_TYPE_HOST 1

static int g_failed;

static int resolve(void *handle) {
#define SYM(field, name)                                                       \
  do {                                                                         \
    union {                                                                    \
      void *obj;                                                               \
      __typeof__(cu.field) fn;                                                 \
    } u_;                                                                      \
    u_.obj = dlsym(handle, name);                                              \
    if (u_.obj == NULL) {                                                      \
      printf("{\"check\":\"resolve\",\"ok\":false,\"symbol\":\"%s\"}\n",       \
             name);                                                            \
      return -1;                                                               \
    }                                                                          \
    cu.field = u_.fn;                                                          \
  } while (0)
  SYM(malloc_, "cudaMalloc");
  SYM(free_, "cudaFree");
  SYM(malloc_host, "cudaMallocHost");
  SYM(free_host, "cudaFreeHost");
  SYM(memcpy_async, "cudaMemcpyAsync");
  SYM(memcpy_, "cudaMemcpy");
  SYM(stream_create, "cudaStreamCreate");
  SYM(stream_synchronize, "cudaStreamSynchronize");
  SYM(stream_destroy, "cudaStreamDestroy");
  SYM(host_get_flags, "cudaHostGetFlags");
#undef SYM
  {
    union {
      void *obj;
      __typeof__(cu.pointer_get_attributes) fn;
    } u;

    u.obj = dlsym(handle, "cudaPointerGetAttributes");
    cu.pointer_get_attributes = u.fn;
  }
  return 0;
}

static double now_us(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

/* Prints a JSON string value with the characters JSON needs escaped. */
static void json_str(const char *s) {
  putchar('"');
  for (; *s != '\0'; s++) {
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", (unsigned char)*s);
    else
      putchar(*s);
  }
  putchar('"');
}

/* cudaPointerAttributes.type, or -1 when unknown. The struct starts with
 * {enum cudaMemoryType type; int device; ...}; room is left for the rest. */
static int pointer_type(const void *ptr) {
  _Alignas(16) unsigned char attrs[512];
  int type;

  if (cu.pointer_get_attributes == NULL)
    return -1;
  memset(attrs, 0, sizeof attrs);
  if (cu.pointer_get_attributes(attrs, ptr) != 0)
    return -1;
  memcpy(&type, attrs, sizeof type);
  return type;
}

/* Every slot of ring registered, with the portable flag, first and last
 * byte; pageable memory must not be (so the check can fail). */
static void check_slots(chime_ring_t *ring, const char *side, uint64_t bytes) {
  const chime_ring_layout_t *lay = chime_ring_layout(ring);
  uint32_t i;

  for (i = 0; i < lay->slots; i++) {
    uint8_t *base = chime_ring_slot_base(ring, i);
    unsigned int f0 = 0, f1 = 0;
    int e0 = cu.host_get_flags(&f0, base);
    int e1 = cu.host_get_flags(&f1, base + lay->slot_bytes - 1);
    int ok = e0 == 0 && e1 == 0 &&
             (f0 & CHIME__CUDA_HOST_REGISTER_PORTABLE) != 0 &&
             (f1 & CHIME__CUDA_HOST_REGISTER_PORTABLE) != 0;

    printf("{\"check\":\"slot_flags\",\"side\":\"%s\",\"bytes\":%llu,"
           "\"slot\":%u,\"error\":%d,\"flags\":%u,\"error_last_byte\":%d,"
           "\"pointer_type\":%d,\"ok\":%s}\n",
           side, (unsigned long long)bytes, i, e0, f0, e1, pointer_type(base),
           ok ? "true" : "false");
    g_failed |= !ok;
  }
}

/* For the record (not a pass/fail check): what the runtime says when a
 * consumer's PROT_READ slot is registered without cudaHostRegisterReadOnly,
 * which is why chime adds that flag for a consumer (docs/pinning.md). */
static void probe_read_only(chime_ring_t *cons, uint64_t bytes) {
  const chime__cudart_t *rt = chime__cudart();
  void *slot = chime_ring_slot_base(cons, 0);
  size_t len = (size_t)chime_ring_layout(cons)->slot_bytes;
  char buf[32];
  int e = rt->host_register(slot, len, CHIME__CUDA_HOST_REGISTER_PORTABLE);

  printf("{\"check\":\"consumer_slot_without_read_only_flag\","
         "\"bytes\":%llu,\"info_only\":true,\"error\":%d,\"name\":",
         (unsigned long long)bytes, e);
  json_str(chime__cuda_error_name(rt, e, buf, sizeof buf));
  printf("}\n");
  if (e == 0)
    rt->host_unregister(slot);
}

static void measure(const char *source, const void *src, void *dev,
                    size_t bytes, cuda_stream_t stream) {
  double ret[ITERS], total[ITERS];
  int i, e = 0;

  for (i = 0; i < 2 && e == 0; i++) { /* warm-up */
    e = cu.memcpy_async(dev, src, bytes, CUDA_MEMCPY_HOST_TO_DEVICE, stream);
    if (e == 0)
      e = cu.stream_synchronize(stream);
  }
  for (i = 0; i < ITERS && e == 0; i++) {
    double t0 = now_us(), t1, t2;

    e = cu.memcpy_async(dev, src, bytes, CUDA_MEMCPY_HOST_TO_DEVICE, stream);
    t1 = now_us();
    if (e == 0)
      e = cu.stream_synchronize(stream);
    t2 = now_us();
    ret[i] = t1 - t0;
    total[i] = t2 - t0;
  }
  if (e != 0) {
    char buf[32];

    printf("{\"check\":\"h2d\",\"source\":\"%s\",\"bytes\":%zu,\"ok\":false,"
           "\"cuda_error\":",
           source, bytes);
    json_str(chime__cuda_error_name(chime__cudart(), e, buf, sizeof buf));
    printf("}\n");
    g_failed = 1;
    return;
  }
  qsort(ret, ITERS, sizeof ret[0], cmp_double);
  qsort(total, ITERS, sizeof total[0], cmp_double);
  printf("{\"check\":\"h2d\",\"source\":\"%s\",\"bytes\":%zu,\"iters\":%d,"
         "\"gbps_median\":%.2f,\"gbps_best\":%.2f,"
         "\"async_return_us_median\":%.1f,\"async_return_us_max\":%.1f,"
         "\"copy_us_median\":%.1f,\"ok\":true}\n",
         source, bytes, ITERS, (double)bytes / (total[ITERS / 2] * 1e3),
         (double)bytes / (total[0] * 1e3), ret[ITERS / 2], ret[ITERS - 1],
         total[ITERS / 2]);
}

static void run_size(size_t bytes, cuda_stream_t stream) {
  char spec_text[64];
  chime_spec_t spec;
  chime_ring_t *prod = NULL, *other = NULL, *cons = NULL;
  uint8_t nonce[16];
  void *dev = NULL, *pageable = NULL, *host = NULL;
  uint8_t *slot, *back = NULL;
  unsigned int f = 0;
  int rc, e;

  snprintf(spec_text, sizeof spec_text, "x:u8[%zu]", bytes);
  if (chime_spec_parse(&spec, spec_text) != 0 ||
      chime__ring_create(&prod, &spec, 1, 4) != 0 ||
      chime__ring_create(&other, &spec, 1, 4) != 0) {
    printf("{\"check\":\"ring\",\"ok\":false}\n");
    g_failed = 1;
    goto cleanup;
  }
  /* The consumer side is a second ring, as a learner's mapping is in another
   * process than the server's: each registers only its own view. */
  chime_ring_nonce(other, nonce);
  if (chime_ring_attach(&cons, chime_ring_fd(other), nonce) != 0) {
    printf("{\"check\":\"attach\",\"ok\":false}\n");
    g_failed = 1;
    goto cleanup;
  }
  rc = chime_ring_pin(prod);
  printf("{\"check\":\"pin\",\"side\":\"producer\",\"bytes\":%zu,"
         "\"pinned_bytes\":%llu,\"ok\":%s,\"error\":",
         bytes, (unsigned long long)chime_ring_pinned_bytes(prod),
         rc == 0 ? "true" : "false");
  json_str(rc == 0 ? "" : chime_last_error());
  printf("}\n");
  g_failed |= rc != 0;
  if (rc == 0)
    check_slots(prod, "producer", bytes);
  probe_read_only(cons, bytes);
  rc = chime_ring_pin(cons);
  printf("{\"check\":\"pin\",\"side\":\"consumer\",\"bytes\":%zu,"
         "\"pinned_bytes\":%llu,\"ok\":%s,\"error\":",
         bytes, (unsigned long long)chime_ring_pinned_bytes(cons),
         rc == 0 ? "true" : "false");
  json_str(rc == 0 ? "" : chime_last_error());
  printf("}\n");
  g_failed |= rc != 0;
  if (rc == 0)
    check_slots(cons, "consumer", bytes);

  pageable = malloc(bytes);
  back = malloc(bytes);
  if (pageable == NULL || back == NULL)
    goto cleanup;
  memset(pageable, 0x5a, bytes);
  e = cu.host_get_flags(&f, pageable);
  printf("{\"check\":\"pageable_not_registered\",\"error\":%d,"
         "\"pointer_type\":%d,\"ok\":%s}\n",
         e, pointer_type(pageable), e != 0 ? "true" : "false");
  g_failed |= e == 0;

  /* The same bytes in each source. */
  slot = chime_ring_slot_base(prod, 0);
  memset(slot, 0xa5, bytes);
  memset(chime_ring_slot_base(other, 0), 0xa5, bytes);
  memset(pageable, 0xa5, bytes);
  if ((e = cu.malloc_(&dev, bytes)) != 0 ||
      (e = cu.malloc_host(&host, bytes)) != 0) {
    printf("{\"check\":\"alloc\",\"ok\":false,\"cuda_error\":%d}\n", e);
    g_failed = 1;
    goto cleanup;
  }
  memset(host, 0xa5, bytes);

  measure("pinned_ring_slot", slot, dev, bytes, stream);
  measure("pinned_ring_slot_consumer_ro", chime_ring_slot_base(cons, 0), dev,
          bytes, stream);
  measure("pageable", pageable, dev, bytes, stream);
  measure("cudaMallocHost", host, dev, bytes, stream);

  /* The bytes that arrive are the slot's. */
  e = cu.memcpy_async(dev, slot, bytes, CUDA_MEMCPY_HOST_TO_DEVICE, stream);
  if (e == 0)
    e = cu.stream_synchronize(stream);
  if (e == 0)
    e = cu.memcpy_(back, dev, bytes, CUDA_MEMCPY_DEVICE_TO_HOST);
  rc = e == 0 && memcmp(back, slot, bytes) == 0;
  printf("{\"check\":\"roundtrip\",\"bytes\":%zu,\"ok\":%s}\n", bytes,
         rc ? "true" : "false");
  g_failed |= !rc;
cleanup:
  if (dev != NULL)
    cu.free_(dev);
  if (host != NULL)
    cu.free_host(host);
  free(pageable);
  free(back);
  chime_ring_destroy(cons);
  chime_ring_destroy(other);
  chime_ring_destroy(prod);
}

int main(void) {
  static const size_t sizes[] = {16u << 20, 64u << 20};
  char err[CHIME__CUDA_MSG_MAX * 2];
  cuda_stream_t stream = NULL;
  const chime__cudart_t *rt;
  size_t i;
  int e;

  setvbuf(stdout, NULL, _IOLBF, 0);
  if (chime__cuda_require(err, sizeof err) != 0) {
    int no_gpu = strstr(err, "no CUDA runtime found") != NULL ||
                 strstr(err, "cudaErrorInsufficientDriver") != NULL ||
                 strstr(err, "cudaErrorNoDevice") != NULL;

    printf("{\"check\":\"runtime\",\"ok\":false,\"no_gpu\":%s,\"error\":",
           no_gpu ? "true" : "false");
    json_str(err);
    printf("}\n");
    return no_gpu ? 77 : 1;
  }
  rt = chime__cudart();
  printf("{\"check\":\"runtime\",\"ok\":true,\"path\":");
  json_str(rt->path);
  printf(",\"rung\":");
  json_str(rt->rung);
  printf("}\n");
  if (resolve(rt->handle) != 0)
    return 1;
  if ((e = cu.stream_create(&stream)) != 0) {
    printf("{\"check\":\"stream\",\"ok\":false,\"cuda_error\":%d}\n", e);
    return 1;
  }
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    run_size(sizes[i], stream);
  cu.stream_destroy(stream);
  printf("{\"check\":\"summary\",\"ok\":%s}\n", g_failed ? "false" : "true");
  return g_failed ? 1 : 0;
}
