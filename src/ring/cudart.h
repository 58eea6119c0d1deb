/* Internal: finding, loading and naming the errors of the CUDA runtime.
 *
 * chime never links libcudart: it is dlopen'd on the first request to
 * page-lock memory, by climbing a ladder of places (docs/pinning.md). The
 * ladder is a pure function of a chime__ladder_t so tests can point every
 * rung anywhere; chime__ladder_from_env() is the one place that reads the
 * real environment. chime__cuda_require() (pin.h) runs it once per process.
 */
#ifndef CHIME_CUDART_H
#define CHIME_CUDART_H

#include <stddef.h>

/* The few values of the CUDA runtime API chime uses (driver_types.h). */
#define CHIME__CUDA_SUCCESS 0
#define CHIME__CUDA_HOST_REGISTER_PORTABLE 0x01u
#define CHIME__CUDA_HOST_REGISTER_MAPPED 0x02u
#define CHIME__CUDA_HOST_REGISTER_READ_ONLY 0x08u
#define CHIME__CUDA_ERROR_NOT_READY 600
#define CHIME__CUDA_MEMCPY_HOST_TO_DEVICE 1
#define CHIME__CUDA_STREAM_NON_BLOCKING 0x01u
#define CHIME__CUDA_EVENT_DISABLE_TIMING 0x02u
/* cudaDevAttrHostRegisterReadOnlySupported (CUDA 11.1+) */
#define CHIME__CUDA_ATTR_HOST_REGISTER_READ_ONLY 113

/* Room for the ladder's report and the error built from it. */
#define CHIME__CUDA_MSG_MAX 8192

/* One loaded runtime. The handle is never closed: CUDA does not survive
 * being unloaded while a context exists. Optional entries may be NULL. */
typedef struct {
  void *handle;
  char path[4096]; /* as passed to dlopen (or found in /proc/self/maps) */
  char rung[64];   /* "CUDA_HOME", "sonames", ... */
  int (*cuda_free)(void *ptr);
  int (*get_device_count)(int *count);
  int (*host_register)(void *ptr, size_t size, unsigned int flags);
  int (*host_unregister)(void *ptr);
  int (*host_get_flags)(unsigned int *flags, void *ptr);
  int (*device_synchronize)(void);          /* optional */
  const char *(*get_error_name)(int error); /* optional */
  int (*runtime_get_version)(int *version); /* optional */
  /* Device streams (src/client/device.c), all optional: a runtime without
   * them still page-locks; chime__cudart_device_missing() names the first
   * one a device stream lacks. Streams and events are opaque handles. */
  int (*get_device)(int *device);
  int (*set_device)(int device);
  int (*device_get_attribute)(int *value, int attr, int device);
  int (*malloc_)(void **ptr, size_t size);
  int (*memcpy_async)(void *dst, const void *src, size_t count, int kind,
                      void *stream);
  int (*stream_create_with_flags)(void **stream, unsigned int flags);
  int (*stream_destroy)(void *stream);
  int (*stream_synchronize)(void *stream);
  int (*stream_wait_event)(void *stream, void *event, unsigned int flags);
  int (*event_create_with_flags)(void **event, unsigned int flags);
  int (*event_record)(void *event, void *stream);
  int (*event_query)(void *event);
  int (*event_synchronize)(void *event);
  int (*event_destroy)(void *event);
} chime__cudart_t;

/* The name of the first call a device stream needs that rt lacks
 * ("cudaEventQuery"), or NULL when it has them all. */
const char *chime__cudart_device_missing(const chime__cudart_t *rt);

/* Where to look, in ladder order. NULL strings and empty lists are rungs that
 * are "not set" or "found nothing"; every rung is always reported. */
typedef struct {
  const char *maps_path;     /* "/proc/self/maps": already-loaded libcudart */
  const char *explicit_path; /* $CHIME_CUDART: a file or a directory */
  const char *cuda_home;     /* $CUDA_HOME */
  const char *cuda_path;     /* $CUDA_PATH */
  const char *const *roots;  /* {"/usr/local/cuda"} */
  size_t nroots;
  const char *const *site_dirs; /* Python site directories that exist */
  size_t nsite_dirs;
  const char *const *sonames; /* {"libcudart.so.13", ".so.12", ".so"} */
  size_t nsonames;
} chime__ladder_t;

/* Climbs the ladder and keeps the first library that loads and exports the
 * runtime calls chime needs. report gets one "[rung] what happened" entry per
 * rung, in order, "; "-separated, including rungs not tried. Returns 0, or
 * CHIME_ENOTFOUND when no rung produced a runtime. */
int chime__cudart_find(chime__cudart_t *rt, const chime__ladder_t *ladder,
                       char *report, size_t len);

/* Initialises the runtime (cudaFree(NULL)) and checks there is a device.
 * Returns 0, or CHIME_ECUDA with err like "cudaErrorNoDevice (100) from
 * cudaFree(NULL)". */
int chime__cudart_init(const chime__cudart_t *rt, char *err, size_t len);

/* "cudaErrorInsufficientDriver" for 35: asks the runtime (rt may be NULL),
 * falls back to chime's own table, then to "cudaError<code>" written to buf
 * (at least 32 bytes). */
const char *chime__cuda_error_name(const chime__cudart_t *rt, int code,
                                   char *buf, size_t len);

/* The real environment as a ladder: CHIME_CUDART, CUDA_HOME, CUDA_PATH,
 * /usr/local/cuda, the Python site directories that exist (virtualenv, conda,
 * ~/.local, pyenv, /usr/local/lib, /usr/lib) and the sonames. Two test-only
 * variables re-point the fixed rungs: CHIME_CUDA_TEST_ROOT (a directory the
 * fixed paths are looked up under instead of /) and CHIME_CUDA_TEST_SONAMES
 * (a ':'-separated list replacing the sonames). Free with
 * chime__ladder_env_free(). */
typedef struct chime__ladder_env_s chime__ladder_env_t;
int chime__ladder_from_env(chime__ladder_env_t **out, chime__ladder_t *ladder);
void chime__ladder_env_free(chime__ladder_env_t *env);

/* The runtime loaded by a successful chime__cuda_require(), else NULL. */
const chime__cudart_t *chime__cudart(void);
/* The ladder report of the process's chime__cuda_require() ("" before). */
const char *chime__cudart_ladder_report(void);

#endif
