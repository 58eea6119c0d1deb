/* The CUDA runtime, found by a ladder of places and loaded with dlopen once
 * per process. Nothing here runs unless someone asks for page-locking, so a
 * process that never pins never maps a CUDA library. */
#include "common/errfmt.h"
#include "ring/cudart.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chime/errors.h"
#include "ring/pin.h"

/* A bounded string being appended to; output past the end is dropped, never
 * overrun, and the text stays NUL-terminated. */
typedef struct {
  char *buf;
  size_t cap;
  size_t len;
} sb_t;

static void sb_init(sb_t *sb, char *buf, size_t cap) {
  sb->buf = buf;
  sb->cap = cap;
  sb->len = 0;
  if (cap > 0)
    buf[0] = '\0';
}

__attribute__((format(printf, 2, 3))) static void
sb_printf(sb_t *sb, const char *fmt, ...) {
  va_list ap;
  int n;

  if (sb->cap == 0 || sb->len >= sb->cap - 1)
    return;
  va_start(ap, fmt);
  n = vsnprintf(sb->buf + sb->len, sb->cap - sb->len, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  sb->len += (size_t)n;
  if (sb->len > sb->cap - 1)
    sb->len = sb->cap - 1;
}

/* ------------------------------------------------------------ error names */

/* The codes page-locking and device streams can run into, for runtimes whose
 * cudaGetErrorName is missing or does not know the code (values from
 * driver_types.h). */
static const struct {
  int code;
  const char *name;
} cuda_errors[] = {
    {0, "cudaSuccess"},
    {1, "cudaErrorInvalidValue"},
    {2, "cudaErrorMemoryAllocation"},
    {3, "cudaErrorInitializationError"},
    {4, "cudaErrorCudartUnloading"},
    {34, "cudaErrorStubLibrary"},
    {35, "cudaErrorInsufficientDriver"},
    {36, "cudaErrorCallRequiresNewerDriver"},
    {46, "cudaErrorDevicesUnavailable"},
    {100, "cudaErrorNoDevice"},
    {101, "cudaErrorInvalidDevice"},
    {201, "cudaErrorDeviceUninitialized"},
    {214, "cudaErrorECCUncorrectable"},
    {304, "cudaErrorOperatingSystem"},
    {400, "cudaErrorInvalidResourceHandle"},
    {600, "cudaErrorNotReady"},
    {700, "cudaErrorIllegalAddress"},
    {709, "cudaErrorContextIsDestroyed"},
    {712, "cudaErrorHostMemoryAlreadyRegistered"},
    {713, "cudaErrorHostMemoryNotRegistered"},
    {719, "cudaErrorLaunchFailure"},
    {800, "cudaErrorNotPermitted"},
    {801, "cudaErrorNotSupported"},
    {802, "cudaErrorSystemNotReady"},
    {803, "cudaErrorSystemDriverMismatch"},
    {804, "cudaErrorCompatNotSupportedOnDevice"},
    {999, "cudaErrorUnknown"},
};

const char *chime__cuda_error_name(const chime__cudart_t *rt, int code,
                                   char *buf, size_t len) {
  const char *name = NULL;
  size_t i;

  if (rt != NULL && rt->get_error_name != NULL)
    name = rt->get_error_name(code);
  /* Real runtimes answer "unrecognized error code" rather than NULL. */
  if (name != NULL && strncmp(name, "cudaError", 9) == 0)
    return name;
  if (name != NULL && strcmp(name, "cudaSuccess") == 0)
    return name;
  for (i = 0; i < sizeof cuda_errors / sizeof cuda_errors[0]; i++)
    if (cuda_errors[i].code == code)
      return cuda_errors[i].name;
  snprintf(buf, len, "cudaError%d", code);
  return buf;
}

/* ------------------------------------------------------------- the ladder */

/* Resolves the calls chime needs from a loaded library. Returns the name of
 * the first required symbol that is missing, or NULL when all are there. */
static const char *resolve(chime__cudart_t *rt, void *handle) {
  /* dlsym returns void *; going through a union avoids the pedantic warning
   * about converting an object pointer to a function pointer. */
#define CHIME__SYM(field, name, required)                                      \
  do {                                                                         \
    union {                                                                    \
      void *obj;                                                               \
      __typeof__(rt->field) fn;                                                \
    } u_;                                                                      \
    u_.obj = dlsym(handle, name);                                              \
    if (u_.obj == NULL && (required))                                          \
      return name;                                                             \
    rt->field = u_.fn;                                                         \
  } while (0)
  CHIME__SYM(cuda_free, "cudaFree", 1);
  CHIME__SYM(get_device_count, "cudaGetDeviceCount", 1);
  CHIME__SYM(host_register, "cudaHostRegister", 1);
  CHIME__SYM(host_unregister, "cudaHostUnregister", 1);
  CHIME__SYM(host_get_flags, "cudaHostGetFlags", 1);
  CHIME__SYM(device_synchronize, "cudaDeviceSynchronize", 0);
  CHIME__SYM(get_error_name, "cudaGetErrorName", 0);
  CHIME__SYM(runtime_get_version, "cudaRuntimeGetVersion", 0);
  CHIME__SYM(get_device, "cudaGetDevice", 0);
  CHIME__SYM(set_device, "cudaSetDevice", 0);
  CHIME__SYM(device_get_attribute, "cudaDeviceGetAttribute", 0);
  CHIME__SYM(malloc_, "cudaMalloc", 0);
  CHIME__SYM(memcpy_async, "cudaMemcpyAsync", 0);
  CHIME__SYM(stream_create_with_flags, "cudaStreamCreateWithFlags", 0);
  CHIME__SYM(stream_destroy, "cudaStreamDestroy", 0);
  CHIME__SYM(stream_synchronize, "cudaStreamSynchronize", 0);
  CHIME__SYM(stream_wait_event, "cudaStreamWaitEvent", 0);
  CHIME__SYM(event_create_with_flags, "cudaEventCreateWithFlags", 0);
  CHIME__SYM(event_record, "cudaEventRecord", 0);
  CHIME__SYM(event_query, "cudaEventQuery", 0);
  CHIME__SYM(event_synchronize, "cudaEventSynchronize", 0);
  CHIME__SYM(event_destroy, "cudaEventDestroy", 0);
#undef CHIME__SYM
  rt->handle = handle;
  return NULL;
}

const char *chime__cudart_device_missing(const chime__cudart_t *rt) {
  /* In the order a device stream first needs them. */
  const struct {
    int present;
    const char *name;
  } calls[] = {
      {rt->get_device != NULL, "cudaGetDevice"},
      {rt->set_device != NULL, "cudaSetDevice"},
      {rt->device_get_attribute != NULL, "cudaDeviceGetAttribute"},
      {rt->malloc_ != NULL, "cudaMalloc"},
      {rt->stream_create_with_flags != NULL, "cudaStreamCreateWithFlags"},
      {rt->stream_destroy != NULL, "cudaStreamDestroy"},
      {rt->stream_synchronize != NULL, "cudaStreamSynchronize"},
      {rt->stream_wait_event != NULL, "cudaStreamWaitEvent"},
      {rt->event_create_with_flags != NULL, "cudaEventCreateWithFlags"},
      {rt->event_record != NULL, "cudaEventRecord"},
      {rt->event_query != NULL, "cudaEventQuery"},
      {rt->event_synchronize != NULL, "cudaEventSynchronize"},
      {rt->event_destroy != NULL, "cudaEventDestroy"},
      {rt->memcpy_async != NULL, "cudaMemcpyAsync"},
  };

  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    if (!calls[i].present)
      return calls[i].name;
  return NULL;
}

/* Tries one library. Returns 1 when it was kept in rt, 0 when not (why is
 * appended to sb). noload: it is already mapped, don't load anything new. */
static int try_load(chime__cudart_t *rt, const char *path, const char *rung,
                    int noload, sb_t *sb) {
  void *handle;
  const char *missing;
  const char *why;

  dlerror();
  handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | (noload ? RTLD_NOLOAD : 0));
  if (handle == NULL) {
    why = dlerror();
    if (why == NULL)
      why = noload ? "listed as mapped but not loaded as a library"
                   : "dlopen failed";
    sb_printf(sb, "%s: %s", path, why);
    return 0;
  }
  memset(rt, 0, sizeof *rt);
  missing = resolve(rt, handle);
  if (missing != NULL) {
    sb_printf(sb, "%s: not a CUDA runtime (no %s)", path, missing);
    dlclose(handle);
    memset(rt, 0, sizeof *rt);
    return 0;
  }
  snprintf(rt->path, sizeof rt->path, "%s", path);
  snprintf(rt->rung, sizeof rt->rung, "%s", rung);
  sb_printf(sb, "loaded %s", path);
  return 1;
}

/* Library names tried inside a directory, newest first. */
static const char *const lib_names[] = {"libcudart.so.13", "libcudart.so.12",
                                        "libcudart.so"};
#define NLIB_NAMES (sizeof lib_names / sizeof lib_names[0])

/* Tries the libcudart names in each of dirs. Files that don't exist are
 * summed up in one phrase; a file that exists and fails says why. */
static int try_dirs(chime__cudart_t *rt, const char *const *dirs, size_t ndirs,
                    const char *rung, sb_t *sb) {
  char path[4096];
  struct stat st;
  size_t d, i;
  int said = 0;

  for (d = 0; d < ndirs; d++) {
    for (i = 0; i < NLIB_NAMES; i++) {
      snprintf(path, sizeof path, "%s/%s", dirs[d], lib_names[i]);
      if (stat(path, &st) != 0)
        continue;
      if (said++)
        sb_printf(sb, ", ");
      if (try_load(rt, path, rung, 0, sb))
        return 1;
    }
  }
  sb_printf(sb, "%sno %slibcudart.so.13, libcudart.so.12 or libcudart.so in ",
            said ? ", " : "", said ? "other " : "");
  for (d = 0; d < ndirs; d++)
    sb_printf(sb, "%s%s", d ? ", " : "", dirs[d]);
  return 0;
}

/* A CUDA installation root: its lib64 and lib directories. */
static int try_root(chime__cudart_t *rt, const char *root, const char *rung,
                    sb_t *sb) {
  char lib64[4096], lib[4096];
  const char *dirs[2];
  struct stat st;

  if (stat(root, &st) != 0) {
    sb_printf(sb, "%s: %s", root, strerror(errno));
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    sb_printf(sb, "%s: not a directory", root);
    return 0;
  }
  snprintf(lib64, sizeof lib64, "%s/lib64", root);
  snprintf(lib, sizeof lib, "%s/lib", root);
  dirs[0] = lib64;
  dirs[1] = lib;
  return try_dirs(rt, dirs, 2, rung, sb);
}

/* Is this /proc/self/maps path a CUDA runtime? Wheels vendor it under
 * hashed names such as libcudart-9335f6a2.so.12. */
static int is_cudart_path(const char *path) {
  const char *base = strrchr(path, '/');

  base = base != NULL ? base + 1 : path;
  return strncmp(base, "libcudart", 9) == 0 && strstr(base, ".so") != NULL &&
         strncmp(base, "libcudart_static", 16) != 0;
}

static int try_mapped(chime__cudart_t *rt, const char *maps_path, sb_t *sb) {
  char line[4608];
  FILE *f;
  int found = 0, kept = 0;

  f = fopen(maps_path, "re");
  if (f == NULL) {
    sb_printf(sb, "%s: %s", maps_path, strerror(errno));
    return 0;
  }
  while (!kept && fgets(line, sizeof line, f) != NULL) {
    char *path = strchr(line, '/');
    char *nl;

    if (path == NULL)
      continue;
    nl = strchr(path, '\n');
    if (nl != NULL)
      *nl = '\0';
    if (!is_cudart_path(path))
      continue;
    if (found++)
      sb_printf(sb, ", ");
    kept = try_load(rt, path, "loaded", 1, sb);
  }
  fclose(f);
  if (!found)
    sb_printf(sb, "no libcudart mapped in this process");
  return kept;
}

/* The wheel layout directories that exist under one site directory. */
static size_t wheel_dirs(const char *site, char dirs[2][4096],
                         const char *dp[2]) {
  /* cu13 wheels ship nvidia/cu13/lib; cu12 ones nvidia/cuda_runtime/lib. */
  static const char *const layouts[] = {"nvidia/cu13/lib",
                                        "nvidia/cuda_runtime/lib"};
  struct stat st;
  size_t k, n = 0;

  for (k = 0; k < 2; k++) {
    snprintf(dirs[n], 4096, "%s/%s", site, layouts[k]);
    if (stat(dirs[n], &st) == 0 && S_ISDIR(st.st_mode)) {
      dp[n] = dirs[n];
      n++;
    }
  }
  return n;
}

static int try_wheels(chime__cudart_t *rt, const chime__ladder_t *l, sb_t *sb) {
  char dirs[2][4096];
  const char *dp[2];
  size_t s, n, bare = 0;
  int said = 0;

  if (l->nsite_dirs == 0) {
    sb_printf(sb, "no Python site directory found");
    return 0;
  }
  for (s = 0; s < l->nsite_dirs; s++) {
    n = wheel_dirs(l->site_dirs[s], dirs, dp);
    if (n == 0)
      continue;
    if (said++)
      sb_printf(sb, "; ");
    if (try_dirs(rt, dp, n, "python wheels", sb))
      return 1;
  }
  for (s = 0; s < l->nsite_dirs; s++) {
    if (wheel_dirs(l->site_dirs[s], dirs, dp) != 0)
      continue;
    if (bare++ == 0)
      sb_printf(sb, "%sno nvidia/cu13/lib or nvidia/cuda_runtime/lib under ",
                said ? "; " : "");
    else
      sb_printf(sb, ", ");
    sb_printf(sb, "%s", l->site_dirs[s]);
  }
  return 0;
}

static int try_sonames(chime__cudart_t *rt, const chime__ladder_t *l,
                       sb_t *sb) {
  size_t i;

  if (l->nsonames == 0) {
    sb_printf(sb, "no sonames to try");
    return 0;
  }
  for (i = 0; i < l->nsonames; i++) {
    if (i)
      sb_printf(sb, ", ");
    if (try_load(rt, l->sonames[i], "sonames", 0, sb))
      return 1;
  }
  return 0;
}

/* An explicit CHIME_CUDART: a library file, or a directory holding one. */
static int try_explicit(chime__cudart_t *rt, const char *path, sb_t *sb) {
  struct stat st;
  const char *dirs[1];

  if (stat(path, &st) != 0) {
    sb_printf(sb, "%s: %s", path, strerror(errno));
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    dirs[0] = path;
    return try_dirs(rt, dirs, 1, "CHIME_CUDART", sb);
  }
  return try_load(rt, path, "CHIME_CUDART", 0, sb);
}

int chime__cudart_find(chime__cudart_t *rt, const chime__ladder_t *l,
                       char *report, size_t len) {
  sb_t sb;
  int kept = 0;
  size_t i;

  sb_init(&sb, report, len);
  memset(rt, 0, sizeof *rt);

  sb_printf(&sb, "[loaded] ");
  if (l->maps_path == NULL)
    sb_printf(&sb, "not checked");
  else
    kept = try_mapped(rt, l->maps_path, &sb);

#define CHIME__ENV_RUNG(label, value, attempt)                                 \
  do {                                                                         \
    if (kept)                                                                  \
      sb_printf(&sb, "; [%s] not tried (runtime found earlier)", label);       \
    else if ((value) == NULL || (value)[0] == '\0')                            \
      sb_printf(&sb, "; [%s] not set", label);                                 \
    else {                                                                     \
      sb_printf(&sb, "; [%s=%s] ", label, value);                              \
      kept = (attempt);                                                        \
    }                                                                          \
  } while (0)
  CHIME__ENV_RUNG("CHIME_CUDART", l->explicit_path,
                  try_explicit(rt, l->explicit_path, &sb));
  CHIME__ENV_RUNG("CUDA_HOME", l->cuda_home,
                  try_root(rt, l->cuda_home, "CUDA_HOME", &sb));
  CHIME__ENV_RUNG("CUDA_PATH", l->cuda_path,
                  try_root(rt, l->cuda_path, "CUDA_PATH", &sb));
#undef CHIME__ENV_RUNG

  for (i = 0; i < l->nroots; i++) {
    sb_printf(&sb, "; [%s] ", l->roots[i]);
    if (kept)
      sb_printf(&sb, "not tried (runtime found earlier)");
    else
      kept = try_root(rt, l->roots[i], l->roots[i], &sb);
  }

  sb_printf(&sb, "; [python wheels] ");
  if (kept)
    sb_printf(&sb, "not tried (runtime found earlier)");
  else
    kept = try_wheels(rt, l, &sb);

  sb_printf(&sb, "; [sonames] ");
  if (kept)
    sb_printf(&sb, "not tried (runtime found earlier)");
  else
    kept = try_sonames(rt, l, &sb);

  return kept ? 0 : CHIME_ENOTFOUND;
}

int chime__cudart_init(const chime__cudart_t *rt, char *err, size_t len) {
  char nbuf[32];
  int e, count = 0;

  /* cudaFree(NULL) is the documented way to force the lazy initialisation,
   * so driver and device problems surface here rather than at a register. */
  e = rt->cuda_free(NULL);
  if (e != CHIME__CUDA_SUCCESS) {
    snprintf(err, len, "%s (%d) from cudaFree(NULL)",
             chime__cuda_error_name(rt, e, nbuf, sizeof nbuf), e);
    return CHIME_ECUDA;
  }
  e = rt->get_device_count(&count);
  if (e != CHIME__CUDA_SUCCESS) {
    snprintf(err, len, "%s (%d) from cudaGetDeviceCount",
             chime__cuda_error_name(rt, e, nbuf, sizeof nbuf), e);
    return CHIME_ECUDA;
  }
  if (count <= 0) {
    snprintf(err, len, "cudaErrorNoDevice (100): cudaGetDeviceCount found %d",
             count);
    return CHIME_ECUDA;
  }
  return 0;
}

/* ---------------------------------------------------- the real environment */

#define MAX_SITE_DIRS 32

struct chime__ladder_env_s {
  const char *roots[1];
  const char *sonames[8];
  const char *site_ptrs[MAX_SITE_DIRS];
  char root[4096];
  char sonames_buf[1024];
  char sites[MAX_SITE_DIRS][4096];
  size_t nsites;
};

static void add_sites(chime__ladder_env_t *env, const char *pattern) {
  glob_t g;
  size_t i, j;
  struct stat st;

  memset(&g, 0, sizeof g);
  if (glob(pattern, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g) != 0)
    goto cleanup;
  for (i = 0; i < g.gl_pathc && env->nsites < MAX_SITE_DIRS; i++) {
    const char *p = g.gl_pathv[i];
    int dup = 0;

    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
      continue;
    for (j = 0; j < env->nsites; j++)
      dup |= strcmp(env->sites[j], p) == 0;
    if (dup || strlen(p) >= sizeof env->sites[0])
      continue;
    snprintf(env->sites[env->nsites], sizeof env->sites[0], "%s", p);
    env->site_ptrs[env->nsites] = env->sites[env->nsites];
    env->nsites++;
  }
cleanup:
  globfree(&g);
}

int chime__ladder_from_env(chime__ladder_env_t **out, chime__ladder_t *l) {
  /* Most specific first: an active environment, then the user's, then the
   * system's. The system paths move under CHIME_CUDA_TEST_ROOT in tests. */
  static const char *const system_sites[] = {
      "/usr/local/lib/python3*/dist-packages",
      "/usr/local/lib/python3*/site-packages", "/usr/lib/python3/dist-packages",
      "/usr/lib/python3*/dist-packages", "/usr/lib/python3*/site-packages"};
  chime__ladder_env_t *env;
  const char *test_root = getenv("CHIME_CUDA_TEST_ROOT");
  const char *test_sonames = getenv("CHIME_CUDA_TEST_SONAMES");
  const char *v;
  char pattern[4200];
  size_t i;
  char *save = NULL, *tok;

  *out = NULL;
  env = calloc(1, sizeof *env);
  if (env == NULL)
    return CHIME_ENOMEM;
  if (test_root == NULL)
    test_root = "";

  memset(l, 0, sizeof *l);
  l->maps_path = "/proc/self/maps";
  l->explicit_path = getenv("CHIME_CUDART");
  l->cuda_home = getenv("CUDA_HOME");
  l->cuda_path = getenv("CUDA_PATH");

  snprintf(env->root, sizeof env->root, "%s/usr/local/cuda", test_root);
  env->roots[0] = env->root;
  l->roots = env->roots;
  l->nroots = 1;

  if ((v = getenv("VIRTUAL_ENV")) != NULL && v[0] != '\0') {
    snprintf(pattern, sizeof pattern, "%s/lib/python3*/site-packages", v);
    add_sites(env, pattern);
  }
  if ((v = getenv("CONDA_PREFIX")) != NULL && v[0] != '\0') {
    snprintf(pattern, sizeof pattern, "%s/lib/python3*/site-packages", v);
    add_sites(env, pattern);
  }
  if ((v = getenv("HOME")) != NULL && v[0] != '\0') {
    snprintf(pattern, sizeof pattern, "%s/.local/lib/python3*/site-packages",
             v);
    add_sites(env, pattern);
  }
  if ((v = getenv("PYENV_ROOT")) != NULL && v[0] != '\0')
    snprintf(pattern, sizeof pattern,
             "%s/versions/*/lib/python3*/site-packages", v);
  else if ((v = getenv("HOME")) != NULL && v[0] != '\0')
    snprintf(pattern, sizeof pattern,
             "%s/.pyenv/versions/*/lib/python3*/site-packages", v);
  else
    pattern[0] = '\0';
  if (pattern[0] != '\0')
    add_sites(env, pattern);
  for (i = 0; i < sizeof system_sites / sizeof system_sites[0]; i++) {
    snprintf(pattern, sizeof pattern, "%s%s", test_root, system_sites[i]);
    add_sites(env, pattern);
  }
  l->site_dirs = env->site_ptrs;
  l->nsite_dirs = env->nsites;

  if (test_sonames != NULL) {
    size_t n = 0;

    snprintf(env->sonames_buf, sizeof env->sonames_buf, "%s", test_sonames);
    for (tok = strtok_r(env->sonames_buf, ":", &save); tok != NULL && n < 8;
         tok = strtok_r(NULL, ":", &save))
      env->sonames[n++] = tok;
    l->nsonames = n;
  } else {
    for (i = 0; i < NLIB_NAMES; i++)
      env->sonames[i] = lib_names[i];
    l->nsonames = NLIB_NAMES;
  }
  l->sonames = env->sonames;
  *out = env;
  return 0;
}

void chime__ladder_env_free(chime__ladder_env_t *env) {
  free(env);
}

/* ------------------------------------------------ once per process */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Set once require_once() finished, so chime__cudart() can answer without
 * loading anything. */
static atomic_int g_done;
static int g_rc;
static chime__cudart_t g_rt;
static char g_report[CHIME__CUDA_MSG_MAX];
static char g_msg[CHIME__PIN_ERRLEN];
_Static_assert(CHIME__PIN_ERRLEN >= 2 * CHIME__CUDA_MSG_MAX,
               "a pinning error is a sentence plus the ladder report");

static void require_once(void) {
  chime__ladder_env_t *env = NULL;
  chime__ladder_t ladder;
  char init_err[256];
  char ver[32] = "";
  int v = 0;
  sb_t msg;

  sb_init(&msg, g_msg, sizeof g_msg);

  g_rc = chime__ladder_from_env(&env, &ladder);
  if (g_rc != 0) {
    sb_printf(&msg, "page-locking failed: out of memory");
    goto cleanup;
  }
  g_rc = chime__cudart_find(&g_rt, &ladder, g_report, sizeof g_report);
  if (g_rc != 0) {
    g_rc = CHIME_ECUDA;
    sb_printf(&msg, "page-locking failed: no CUDA runtime found; ladder: %s",
              g_report);
    goto cleanup;
  }
  if (g_rt.runtime_get_version != NULL && g_rt.runtime_get_version(&v) == 0)
    snprintf(ver, sizeof ver, " (runtime %d.%d)", v / 1000, v % 1000 / 10);
  g_rc = chime__cudart_init(&g_rt, init_err, sizeof init_err);
  if (g_rc != 0) {
    sb_printf(&msg, "page-locking failed: CUDA runtime: %s in %s%s; ladder: %s",
              init_err, g_rt.path, ver, g_report);
    goto cleanup;
  }
cleanup:
  chime__ladder_env_free(env);
  atomic_store_explicit(&g_done, 1, memory_order_release);
}

int chime__cuda_require(char *err, size_t errlen) {
  pthread_once(&g_once, require_once);
  if (g_rc != 0 && err != NULL && errlen > 0)
    snprintf(err, errlen, "%s", g_msg);
  return g_rc;
}

const chime__cudart_t *chime__cudart(void) {
  if (!atomic_load_explicit(&g_done, memory_order_acquire))
    return NULL;
  return g_rc == 0 ? &g_rt : NULL;
}

const char *chime__cudart_ladder_report(void) {
  if (!atomic_load_explicit(&g_done, memory_order_acquire))
    return "";
  return g_report;
}
