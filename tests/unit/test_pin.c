/* Page-locking without a GPU: the ladder, rollback, unregister on destroy and
 * error naming, driven by the fake libcudart this test suite builds.
 *
 * The runtime is loaded once per process, so every scenario that needs a
 * fresh process (a different fake behaviour, or "nothing loaded yet") runs in
 * a child: this binary re-executed with posix_spawn as `test_pin --child
 * <scenario>`, with the environment the scenario needs. The pure ladder is
 * tested in this process with explicit inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chime/ring.h"
#include "ring/cudart.h"
#include "ring/pin.h"
#include "ring/producer.h"

extern char **environ;

#define CHILD_TIMEOUT_MS 60000

static char g_tmp[256];
static const char *g_self;

/* ------------------------------------------------------------- utilities */

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void tmp_cleanup(void) {
  if (g_tmp[0] != '\0')
    nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *tmp_path(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", g_tmp, name);
  return buf;
}

/* mkdir -p */
static void make_dirs(const char *path) {
  char buf[1024];
  char *p;

  snprintf(buf, sizeof buf, "%s", path);
  for (p = buf + 1; *p != '\0'; p++) {
    if (*p == '/') {
      *p = '\0';
      mkdir(buf, 0700);
      *p = '/';
    }
  }
  mkdir(buf, 0700);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf;
  size_t n;

  if (f == NULL)
    return strdup("");
  buf = calloc(1, 1 << 20);
  n = buf != NULL ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  if (buf != NULL)
    buf[n] = '\0';
  fclose(f);
  return buf;
}

static int maps_have_cudart(void) {
  char *maps = read_file("/proc/self/maps");
  int found = strstr(maps, "libcudart") != NULL;

  free(maps);
  return found;
}

/* Asserts that each of the NULL-terminated needles occurs in hay, in order. */
static void assert_in_order(const char *hay, ...) {
  const char *at = hay;
  const char *needle;
  va_list ap;

  va_start(ap, hay);
  while ((needle = va_arg(ap, const char *)) != NULL) {
    const char *hit = strstr(at, needle);

    if (hit == NULL) {
      fprintf(stderr, "missing (in order) \"%s\" in:\n%s\n", needle, hay);
      va_end(ap);
      fail();
    }
    at = hit + strlen(needle);
  }
  va_end(ap);
}

/* Runs argv with the test's own environment minus everything the ladder or
 * the fake reads, plus vars ("K=V" strings), stdout to out_path when not
 * NULL. Returns the exit status; fails the test on a timeout or a signal. */
static int run_proc(char *const argv[], const char *out_path, va_list ap) {
  static const char *const scrub[] = {
      "CHIME_CUDART=", "CUDA_HOME=",  "CUDA_PATH=",  "VIRTUAL_ENV=",
      "CONDA_PREFIX=", "PYENV_ROOT=", "HOME=",       "CHIME_CUDA_TEST_",
      "FAKE_CUDART_",  "LD_PRELOAD=", "CHILD_EXPECT"};
  posix_spawn_file_actions_t fa;
  char *envp[256];
  size_t n = 0, i, k;
  char *v;
  pid_t pid;
  int status = 0, waited_ms = 0, rc;
  struct timespec ts = {0, 10 * 1000 * 1000};

  for (i = 0; environ[i] != NULL && n < 200; i++) {
    int drop = 0;

    for (k = 0; k < sizeof scrub / sizeof scrub[0]; k++)
      drop |= strncmp(environ[i], scrub[k], strlen(scrub[k])) == 0;
    if (!drop)
      envp[n++] = environ[i];
  }
  while ((v = va_arg(ap, char *)) != NULL && n < 254)
    envp[n++] = v;
  envp[n] = NULL;
  posix_spawn_file_actions_init(&fa);
  if (out_path != NULL)
    posix_spawn_file_actions_addopen(&fa, 1, out_path,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  assert_int_equal(rc, 0);
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);

    if (r == pid)
      break;
    assert_true(r == 0);
    if (waited_ms >= CHILD_TIMEOUT_MS) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail_msg("%s timed out", argv[0]);
    }
    nanosleep(&ts, NULL);
    waited_ms += 10;
  }
  if (!WIFEXITED(status))
    fail_msg("%s died by signal %d", argv[0], WTERMSIG(status));
  return WEXITSTATUS(status);
}

/* This binary as `--child scenario`, vars as for run_proc. */
static int run_child(const char *scenario, ...) {
  char *argv[] = {(char *)g_self, "--child", (char *)scenario, NULL};
  va_list ap;
  int rc;

  va_start(ap, scenario);
  rc = run_proc(argv, NULL, ap);
  va_end(ap);
  return rc;
}

/* tests/gpu/gpu_check with stdout to out_path, vars as for run_proc. */
static int run_gpu_check(const char *out_path, ...) {
  char *argv[] = {GPU_CHECK_FILE, NULL};
  va_list ap;
  int rc;

  va_start(ap, out_path);
  rc = run_proc(argv, out_path, ap);
  va_end(ap);
  return rc;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;

  for (hay = strstr(hay, needle); hay != NULL;
       hay = strstr(hay + strlen(needle), needle))
    n++;
  return n;
}

/* ------------------------------------------------ child side (own process) */

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "child check failed at %s:%d: %s: ", __FILE__, __LINE__, \
              #cond);                                                          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static void child_expect_in_order(const char *hay, const char *list) {
  /* list: needles separated by '\n' */
  char buf[8192];
  const char *at = hay;
  char *save = NULL, *tok;

  snprintf(buf, sizeof buf, "%s", list);
  for (tok = strtok_r(buf, "\n", &save); tok != NULL;
       tok = strtok_r(NULL, "\n", &save)) {
    const char *hit = strstr(at, tok);

    CHECK(hit != NULL, "missing (in order) \"%s\" in:\n%s", tok, hay);
    at = hit + strlen(tok);
  }
}

static void *map_pages(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);

  CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
  return p;
}

static int log_append_line(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int log_append_line(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
  strncat(buf, "\n", len - strlen(buf) - 1);
  return n;
}

/* FAKE_CUDART_FAIL_REGISTER_AT=3: two ranges registered, the third refused;
 * exactly those two come off again, newest first; then a clean pin of all
 * five and its unpin. */
static int child_rollback(void) {
  const char *logp = getenv("FAKE_CUDART_LOG");
  chime__range_t r[5];
  char err[CHIME__CUDA_MSG_MAX * 2];
  char want[4096] = "";
  char *got;
  int i, rc;

  for (i = 0; i < 5; i++) {
    r[i].base = map_pages(8192);
    r[i].len = 8192;
  }
  rc = chime__pin_ranges(r, 5, 0, err, sizeof err);
  CHECK(rc == CHIME_ECUDA, "rc %d", rc);
  child_expect_in_order(err, "page-locking failed: \n"
                             "cudaErrorMemoryAllocation (2) from "
                             "cudaHostRegister(8192 bytes, portable)\n"
                             "range 3 of 5\n"
                             "the 2 range(s) registered before it were "
                             "unregistered\n"
                             "ladder: [loaded] \n[CUDA_HOME=");
  log_append_line(want, sizeof want, "register %p 8192 1", r[0].base);
  log_append_line(want, sizeof want, "register %p 8192 1", r[1].base);
  log_append_line(want, sizeof want, "register-fail %p 8192 1", r[2].base);
  log_append_line(want, sizeof want, "unregister %p", r[1].base);
  log_append_line(want, sizeof want, "unregister %p", r[0].base);
  got = read_file(logp);
  CHECK(strcmp(got, want) == 0, "log:\n%s\nwanted:\n%s", got, want);
  free(got);

  /* The counter has passed 3 now: everything registers, read-only too. */
  rc = chime__pin_ranges(r, 5, 1, err, sizeof err);
  CHECK(rc == 0, "rc %d: %s", rc, err);
  for (i = 0; i < 5; i++) {
    unsigned int flags = 0;

    CHECK(chime__cudart()->host_get_flags(&flags, r[i].base) == 0, "flags");
    CHECK(flags == 9, "flags %u", flags);
  }
  chime__unpin_ranges(r, 5);
  for (i = 0; i < 5; i++)
    log_append_line(want, sizeof want, "register %p 8192 9", r[i].base);
  log_append_line(want, sizeof want, "sync");
  for (i = 5; i-- > 0;)
    log_append_line(want, sizeof want, "unregister %p", r[i].base);
  got = read_file(logp);
  CHECK(strcmp(got, want) == 0, "log:\n%s\nwanted:\n%s", got, want);
  free(got);
  return 0;
}

/* cudaFree(NULL) fails: the error names the code, the call, the library and
 * every rung; later calls give the same answer; nothing gets registered. */
static int child_init_error(void) {
  const char *logp = getenv("FAKE_CUDART_LOG");
  char err[CHIME__CUDA_MSG_MAX * 2], err2[CHIME__CUDA_MSG_MAX * 2];
  chime__range_t r;
  char *got;
  int rc;

  rc = chime__cuda_require(err, sizeof err);
  CHECK(rc == CHIME_ECUDA, "rc %d", rc);
  child_expect_in_order(err, getenv("CHILD_EXPECT"));
  CHECK(chime__cudart() == NULL, "runtime handed out after failed init");
  rc = chime__cuda_require(err2, sizeof err2);
  CHECK(rc == CHIME_ECUDA && strcmp(err, err2) == 0, "second call differs");
  r.base = map_pages(4096);
  r.len = 4096;
  rc = chime__pin_ranges(&r, 1, 0, err2, sizeof err2);
  CHECK(rc == CHIME_ECUDA && strcmp(err, err2) == 0, "pin_ranges: %s", err2);
  got = read_file(logp);
  CHECK(got[0] == '\0', "registered anyway:\n%s", got);
  free(got);
  return 0;
}

/* Every rung pointed at nothing (environment only): the error lists them
 * all, in order, and says what each found; nothing gets mapped. */
static int child_not_found(void) {
  char err[CHIME__CUDA_MSG_MAX * 2];
  int rc;

  rc = chime__cuda_require(err, sizeof err);
  CHECK(rc == CHIME_ECUDA, "rc %d", rc);
  child_expect_in_order(err, getenv("CHILD_EXPECT"));
  CHECK(!maps_have_cudart(), "a libcudart got mapped");
  return 0;
}

/* The environment reader finds a wheel layout under a site directory. */
static int child_wheel(void) {
  char err[CHIME__CUDA_MSG_MAX * 2];
  const chime__cudart_t *rt;
  int rc;

  rc = chime__cuda_require(err, sizeof err);
  CHECK(rc == 0, "rc %d: %s", rc, err);
  rt = chime__cudart();
  CHECK(rt != NULL && strcmp(rt->rung, "python wheels") == 0, "rung %s",
        rt != NULL ? rt->rung : "-");
  CHECK(strcmp(rt->path, getenv("CHILD_EXPECT")) == 0, "path %s", rt->path);
  return 0;
}

static chime_ring_t *make_ring(uint32_t slots) {
  chime_spec_t spec;
  chime_ring_t *ring = NULL;
  int rc;

  rc = chime_spec_parse(&spec, "obs:f32[16], act:i32");
  CHECK(rc == 0, "spec %d", rc);
  rc = chime__ring_create(&ring, &spec, 4, slots);
  CHECK(rc == 0, "create %d", rc);
  return ring;
}

static chime_ring_t *attach_ring(chime_ring_t *prod) {
  chime_ring_t *cons = NULL;
  uint8_t nonce[16];
  int rc;

  chime_ring_nonce(prod, nonce);
  rc = chime_ring_attach(&cons, chime_ring_fd(prod), nonce);
  CHECK(rc == 0, "attach %d", rc);
  return cons;
}

/* A ring used without pinning maps no CUDA library; pinning one does (so the
 * first check can fail). */
static int child_off_then_on(void) {
  chime_ring_t *prod = make_ring(4), *cons = attach_ring(prod);
  chime__ring_wslot_t w;
  chime_ring_view_t v;
  uint64_t seq;
  int rc;

  CHECK(chime__ring_acquire(prod, &w, 1000) == 0, "acquire");
  memset(w.base, 7, chime_ring_layout(prod)->slot_bytes);
  CHECK(chime__ring_publish(prod, w.slot, &seq) == 0, "publish");
  CHECK(chime_ring_next(cons, &v, 1000) == 0, "next");
  CHECK(((const uint8_t *)v.leaf[0])[0] == 7, "data");
  CHECK(chime_ring_release(cons, v.slot) == 0, "release");
  CHECK(chime_ring_pinned_bytes(prod) == 0, "pinned without asking");
  chime_ring_destroy(cons);
  chime_ring_destroy(prod);
  CHECK(!maps_have_cudart(), "libcudart mapped with pinning off");
  CHECK(chime__cudart() == NULL, "runtime loaded with pinning off");

  prod = make_ring(2);
  rc = chime_ring_pin(prod);
  CHECK(rc == 0, "pin %d: %s", rc, chime_last_error());
  CHECK(maps_have_cudart(), "pinned but no libcudart mapped");
  chime_ring_destroy(prod);
  return 0;
}

/* Every slot of both sides registered portable (read-only for the consumer),
 * the footprint reported, and destroy unregisters exactly those slots while
 * they are still mapped. */
static int child_ring_pin(void) {
  const char *logp = getenv("FAKE_CUDART_LOG");
  chime_ring_t *prod = make_ring(4), *cons = attach_ring(prod);
  const chime_ring_layout_t *lay = chime_ring_layout(prod);
  char want[8192] = "";
  void *pbase[4], *cbase[4];
  char *got;
  uint32_t i;
  int rc;

  for (i = 0; i < 4; i++) {
    pbase[i] = chime_ring_slot_base(prod, i);
    cbase[i] = chime_ring_slot_base(cons, i);
  }
  rc = chime_ring_pin(prod);
  CHECK(rc == 0, "pin %d: %s", rc, chime_last_error());
  CHECK(chime_ring_pinned_bytes(prod) == 4 * lay->slot_bytes, "bytes %llu",
        (unsigned long long)chime_ring_pinned_bytes(prod));
  CHECK(chime_ring_pinned_bytes(cons) == 0, "consumer pinned by producer");
  rc = chime_ring_pin(prod); /* already pinned: no-op */
  CHECK(rc == 0, "pin again %d: %s", rc, chime_last_error());
  rc = chime_ring_pin(cons);
  CHECK(rc == 0, "pin consumer %d: %s", rc, chime_last_error());
  CHECK(chime_ring_pinned_bytes(cons) == 4 * lay->slot_bytes, "cons bytes");
  for (i = 0; i < 4; i++) {
    unsigned int pf = 0, cf = 0;

    CHECK(chime__cudart()->host_get_flags(&pf, pbase[i]) == 0, "pflags");
    CHECK(chime__cudart()->host_get_flags(&cf, cbase[i]) == 0, "cflags");
    CHECK(pf == 1 && cf == 9, "slot %u flags %u %u", i, pf, cf);
  }
  for (i = 0; i < 4; i++)
    log_append_line(want, sizeof want, "register %p %llu 1", pbase[i],
                    (unsigned long long)lay->slot_bytes);
  for (i = 0; i < 4; i++)
    log_append_line(want, sizeof want, "register %p %llu 9", cbase[i],
                    (unsigned long long)lay->slot_bytes);
  got = read_file(logp);
  CHECK(strcmp(got, want) == 0, "log:\n%s\nwanted:\n%s", got, want);
  free(got);

  chime_ring_destroy(cons);
  log_append_line(want, sizeof want, "sync");
  for (i = 4; i-- > 0;)
    log_append_line(want, sizeof want, "unregister %p", cbase[i]);
  got = read_file(logp);
  CHECK(strcmp(got, want) == 0, "log:\n%s\nwanted:\n%s", got, want);
  free(got);
  chime_ring_destroy(prod);
  log_append_line(want, sizeof want, "sync");
  for (i = 4; i-- > 0;)
    log_append_line(want, sizeof want, "unregister %p", pbase[i]);
  got = read_file(logp);
  CHECK(strcmp(got, want) == 0, "log:\n%s\nwanted:\n%s", got, want);
  free(got);
  return 0;
}

/* The third slot is refused: the call fails, the first two come off again,
 * the ring reports nothing pinned and destroy unregisters nothing more. */
static int child_ring_pin_fail(void) {
  const char *logp = getenv("FAKE_CUDART_LOG");
  chime_ring_t *prod = make_ring(4);
  const chime_ring_layout_t *lay = chime_ring_layout(prod);
  char want[4096] = "";
  unsigned long long sb = (unsigned long long)lay->slot_bytes;
  char *got;
  int rc;

  rc = chime_ring_pin(prod);
  CHECK(rc == CHIME_ECUDA, "rc %d", rc);
  child_expect_in_order(chime_last_error(),
                        "cudaErrorNotSupported (801) from "
                        "cudaHostRegister\nrange 3 of 4\n"
                        "the 2 range(s) registered before it");
  CHECK(chime_ring_pinned_bytes(prod) == 0, "pinned bytes after failure");
  log_append_line(want, sizeof want, "register %p %llu 1",
                  chime_ring_slot_base(prod, 0), sb);
  log_append_line(want, sizeof want, "register %p %llu 1",
                  chime_ring_slot_base(prod, 1), sb);
  log_append_line(want, sizeof want, "register-fail %p %llu 1",
                  chime_ring_slot_base(prod, 2), sb);
  log_append_line(want, sizeof want, "unregister %p",
                  chime_ring_slot_base(prod, 1));
  log_append_line(want, sizeof want, "unregister %p",
                  chime_ring_slot_base(prod, 0));
  chime_ring_destroy(prod);
  got = read_file(logp);
  CHECK(strcmp(got, want) == 0, "log:\n%s\nwanted:\n%s", got, want);
  free(got);
  return 0;
}

static int child_main(const char *scenario) {
  static const struct {
    const char *name;
    int (*fn)(void);
  } scenarios[] = {
      {"rollback", child_rollback},           {"init_error", child_init_error},
      {"not_found", child_not_found},         {"wheel", child_wheel},
      {"off_then_on", child_off_then_on},     {"ring_pin", child_ring_pin},
      {"ring_pin_fail", child_ring_pin_fail},
  };
  size_t i;

  /* Die with the test if CTest kills it. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
    if (strcmp(scenarios[i].name, scenario) == 0)
      return scenarios[i].fn();
  fprintf(stderr, "unknown scenario %s\n", scenario);
  return 2;
}

/* ------------------------------------------------- parent side: children */

static char g_env_home[600], g_env_log[600];

static void set_common_env(void) {
  char p[512];

  snprintf(g_env_home, sizeof g_env_home, "HOME=%s",
           tmp_path("home", p, sizeof p));
  snprintf(g_env_log, sizeof g_env_log, "FAKE_CUDART_LOG=%s",
           tmp_path("fake.log", p, sizeof p));
  remove(p);
}

static void test_rollback(void **state) {
  (void)state;
  set_common_env();
  assert_int_equal(run_child("rollback", "CUDA_HOME=" FAKE_CUDART_ROOT,
                             g_env_home, g_env_log,
                             "FAKE_CUDART_FAIL_REGISTER_AT=3", (char *)NULL),
                   0);
}

static void init_error_case(const char *code, const char *name) {
  char expect[2048];

  set_common_env();
  snprintf(expect, sizeof expect,
           "CHILD_EXPECT=page-locking failed: CUDA runtime: \n"
           "%s (%s) from cudaFree(NULL) in " FAKE_CUDART_ROOT
           "/lib64/libcudart.so.13\n"
           "; ladder: [loaded] no libcudart mapped in this process\n"
           "; [CHIME_CUDART] not set\n"
           "; [CUDA_HOME=" FAKE_CUDART_ROOT "] loaded " FAKE_CUDART_ROOT
           "/lib64/libcudart.so.13\n"
           "; [CUDA_PATH] not tried (runtime found earlier)\n"
           "/usr/local/cuda] not tried (runtime found earlier)\n"
           "; [python wheels] not tried (runtime found earlier)\n"
           "; [sonames] not tried (runtime found earlier)",
           name, code);
  {
    char errvar[64];

    snprintf(errvar, sizeof errvar, "FAKE_CUDART_INIT_ERROR=%s", code);
    assert_int_equal(run_child("init_error", "CUDA_HOME=" FAKE_CUDART_ROOT,
                               g_env_home, g_env_log, errvar, expect,
                               (char *)NULL),
                     0);
  }
}

/* Names from the runtime (35), from chime's table (100: the fake does not
 * know it) and for a code nobody knows. */
static void test_init_error_names(void **state) {
  (void)state;
  init_error_case("35", "cudaErrorInsufficientDriver");
  init_error_case("100", "cudaErrorNoDevice");
  init_error_case("4242", "cudaError4242");
}

static void test_not_found_lists_every_rung(void **state) {
  char root[512], nope[512], nocuda[512], expect[4096];
  char v_root[600], v_explicit[600], v_cuda_path[600];

  (void)state;
  set_common_env();
  tmp_path("empty-root", root, sizeof root);
  make_dirs(root);
  tmp_path("nope/libcudart.so.13", nope, sizeof nope);
  tmp_path("no-cuda", nocuda, sizeof nocuda);
  snprintf(v_root, sizeof v_root, "CHIME_CUDA_TEST_ROOT=%s", root);
  snprintf(v_explicit, sizeof v_explicit, "CHIME_CUDART=%s", nope);
  snprintf(v_cuda_path, sizeof v_cuda_path, "CUDA_PATH=%s", nocuda);
  snprintf(expect, sizeof expect,
           "CHILD_EXPECT=page-locking failed: no CUDA runtime found; ladder: "
           "[loaded] no libcudart mapped in this process\n"
           "; [CHIME_CUDART=%s] %s: No such file or directory\n"
           "; [CUDA_HOME] not set\n"
           "; [CUDA_PATH=%s] %s: No such file or directory\n"
           "; [%s/usr/local/cuda] %s/usr/local/cuda: No such file or "
           "directory\n"
           "; [python wheels] no Python site directory found\n"
           "; [sonames] libchime-absent-cudart.so.13: \n"
           ", libchime-absent-cudart.so: ",
           nope, nope, nocuda, nocuda, root, root);
  assert_int_equal(run_child("not_found", v_root, v_explicit, v_cuda_path,
                             g_env_home,
                             "CHIME_CUDA_TEST_SONAMES="
                             "libchime-absent-cudart.so.13:"
                             "libchime-absent-cudart.so",
                             expect, (char *)NULL),
                   0);
}

static void test_wheel_layout_from_env(void **state) {
  char root[512], lib[700], link[800], v_root[600], expect[900];

  (void)state;
  set_common_env();
  tmp_path("wheel-root", root, sizeof root);
  snprintf(lib, sizeof lib,
           "%s/usr/local/lib/python3.99/dist-packages/nvidia/cu13/lib", root);
  make_dirs(lib);
  snprintf(link, sizeof link, "%s/libcudart.so.13", lib);
  assert_int_equal(symlink(FAKE_CUDART_FILE, link), 0);
  snprintf(v_root, sizeof v_root, "CHIME_CUDA_TEST_ROOT=%s", root);
  snprintf(expect, sizeof expect, "CHILD_EXPECT=%s", link);
  assert_int_equal(run_child("wheel", v_root, g_env_home,
                             "CHIME_CUDA_TEST_SONAMES=libchime-absent.so",
                             expect, (char *)NULL),
                   0);
}

static void test_off_then_on(void **state) {
  (void)state;
  set_common_env();
  assert_int_equal(run_child("off_then_on", "CUDA_HOME=" FAKE_CUDART_ROOT,
                             g_env_home, (char *)NULL),
                   0);
}

static void test_ring_pin(void **state) {
  (void)state;
  set_common_env();
  assert_int_equal(run_child("ring_pin", "CUDA_HOME=" FAKE_CUDART_ROOT,
                             g_env_home, g_env_log, (char *)NULL),
                   0);
}

static void test_ring_pin_fail(void **state) {
  (void)state;
  set_common_env();
  assert_int_equal(run_child("ring_pin_fail", "CUDA_HOME=" FAKE_CUDART_ROOT,
                             g_env_home, g_env_log,
                             "FAKE_CUDART_FAIL_REGISTER_AT=3",
                             "FAKE_CUDART_REGISTER_ERROR=801", (char *)NULL),
                   0);
}

/* The GPU check's whole flow against the fake: every slot of both sides is
 * checked (2 sizes x 2 sides x 4 slots), all four sources are measured, and
 * the check fails when a registration is refused or there is no driver. */
static void test_gpu_check_flow_on_fake(void **state) {
  char out[512];
  char *got;

  (void)state;
  tmp_path("gpu_check.out", out, sizeof out);
  assert_int_equal(
      run_gpu_check(out, "CHIME_CUDART=" FAKE_CUDART_FILE, (char *)NULL), 0);
  got = read_file(out);
  assert_int_equal(count_of(got, "\"check\":\"slot_flags\""), 16);
  assert_int_equal(count_of(got, "\"flags\":1,"), 8);
  assert_int_equal(count_of(got, "\"flags\":9,"), 8);
  assert_int_equal(count_of(got, "\"check\":\"h2d\""), 8);
  assert_int_equal(count_of(got, "\"source\":\"pinned_ring_slot\""), 2);
  assert_int_equal(count_of(got, "\"source\":\"pageable\""), 2);
  assert_int_equal(count_of(got, "\"source\":\"cudaMallocHost\""), 2);
  assert_int_equal(count_of(got, "\"check\":\"roundtrip\",\"bytes\":"
                                 "16777216,\"ok\":true"),
                   1);
  assert_int_equal(count_of(got, "\"ok\":false"), 0);
  assert_non_null(strstr(got, "{\"check\":\"summary\",\"ok\":true}"));
  free(got);

  /* The consumer's second slot is refused (calls: 4 producer slots, the
   * read-only probe, then the consumer's): the check fails, saying so. */
  assert_int_equal(run_gpu_check(out, "CHIME_CUDART=" FAKE_CUDART_FILE,
                                 "FAKE_CUDART_FAIL_REGISTER_AT=7",
                                 (char *)NULL),
                   1);
  got = read_file(out);
  assert_non_null(strstr(got, "\"side\":\"consumer\",\"bytes\":16777216,"
                              "\"pinned_bytes\":0,\"ok\":false"));
  assert_non_null(strstr(got, "range 2 of 4"));
  assert_non_null(strstr(got, "{\"check\":\"summary\",\"ok\":false}"));
  free(got);

  assert_int_equal(run_gpu_check(out, "CHIME_CUDART=" FAKE_CUDART_FILE,
                                 "FAKE_CUDART_INIT_ERROR=35", (char *)NULL),
                   77);
  got = read_file(out);
  assert_non_null(strstr(got, "cudaErrorInsufficientDriver (35)"));
  free(got);
}

/* ---------------------------------------- parent side: the pure ladder */

static const char *const absent_sonames[] = {"libchime-absent-cudart.so.13"};

static void empty_ladder(chime__ladder_t *l) {
  memset(l, 0, sizeof *l);
  l->sonames = absent_sonames;
  l->nsonames = 1;
}

static void test_ladder_order_and_words(void **state) {
  char maps[512], home[512], root[512], site[512], nvdir[700];
  char report[CHIME__CUDA_MSG_MAX], want[4096];
  const char *roots[1], *sites[2];
  chime__ladder_t l;
  chime__cudart_t rt;
  FILE *f;

  (void)state;
  /* A maps file naming a libcudart that is not loaded: that rung says why
   * it could not use it instead of silently moving on. */
  tmp_path("maps", maps, sizeof maps);
  f = fopen(maps, "w");
  assert_non_null(f);
  fprintf(f, "7f0000000000-7f0000001000 r-xp 00000000 fe:00 1 "
             "/usr/lib/libc.so.6\n"
             "7f0000002000-7f0000003000 r-xp 00000000 fe:00 2 "
             "/opt/gone/libcudart.so.12\n");
  fclose(f);
  tmp_path("cuda-home-empty", home, sizeof home);
  make_dirs(home);
  tmp_path("root-absent", root, sizeof root);
  tmp_path("site", site, sizeof site);
  snprintf(nvdir, sizeof nvdir, "%s/nvidia/cuda_runtime/lib", site);
  make_dirs(nvdir);

  empty_ladder(&l);
  l.maps_path = maps;
  l.cuda_home = home;
  roots[0] = root;
  l.roots = roots;
  l.nroots = 1;
  sites[0] = site;
  sites[1] = home; /* no wheel layout at all */
  l.site_dirs = sites;
  l.nsite_dirs = 2;
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report),
                   CHIME_ENOTFOUND);
  assert_null(rt.handle);
  snprintf(want, sizeof want,
           "%s/lib64, %s/lib; [CUDA_PATH] not set; [%s] %s: No such file", home,
           home, root, root);
  assert_in_order(report, "[loaded] /opt/gone/libcudart.so.12: ",
                  "; [CHIME_CUDART] not set; [CUDA_HOME=", home,
                  "] no libcudart.so.13, libcudart.so.12 or libcudart.so in ",
                  want, "; [python wheels] no libcudart.so.13, ", nvdir,
                  "; no nvidia/cu13/lib or nvidia/cuda_runtime/lib under ",
                  home,
                  "; [sonames] libchime-absent-cudart.so.13: ", (char *)NULL);
}

static void test_ladder_first_runtime_wins(void **state) {
  char report[CHIME__CUDA_MSG_MAX];
  chime__ladder_t l;
  chime__cudart_t rt;

  (void)state;
  empty_ladder(&l);
  l.explicit_path = FAKE_CUDART_FILE;
  l.cuda_home = FAKE_CUDART_ROOT;
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report), 0);
  assert_non_null(rt.handle);
  assert_non_null(rt.host_register);
  assert_non_null(rt.device_synchronize);
  assert_string_equal(rt.path, FAKE_CUDART_FILE);
  assert_string_equal(rt.rung, "CHIME_CUDART");
  assert_in_order(
      report, "[CHIME_CUDART=" FAKE_CUDART_FILE "] loaded ", FAKE_CUDART_FILE,
      "; [CUDA_HOME] not tried (runtime found earlier)",
      "; [CUDA_PATH] not tried",
      "; [python wheels] not tried (runtime found earlier)",
      "; [sonames] not tried (runtime found earlier)", (char *)NULL);

  /* A directory given as CHIME_CUDART is searched like a lib directory. */
  empty_ladder(&l);
  l.explicit_path = FAKE_CUDART_ROOT "/lib64";
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report), 0);
  assert_string_equal(rt.path, FAKE_CUDART_ROOT "/lib64/libcudart.so.13");

  /* Now it is mapped here: the first rung keeps the mapped copy. */
  empty_ladder(&l);
  l.maps_path = "/proc/self/maps";
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report), 0);
  assert_string_equal(rt.rung, "loaded");
  assert_in_order(report, "[loaded] loaded /", "libcudart.so.13",
                  "; [CHIME_CUDART] not tried", (char *)NULL);
}

static void test_ladder_wheel_cu12(void **state) {
  char site[512], lib[700], link[800], report[CHIME__CUDA_MSG_MAX];
  const char *sites[2];
  chime__ladder_t l;
  chime__cudart_t rt;

  (void)state;
  tmp_path("site12", site, sizeof site);
  snprintf(lib, sizeof lib, "%s/nvidia/cuda_runtime/lib", site);
  make_dirs(lib);
  snprintf(link, sizeof link, "%s/libcudart.so.12", lib);
  assert_int_equal(symlink(FAKE_CUDART_FILE, link), 0);
  empty_ladder(&l);
  sites[0] = g_tmp; /* a site without wheels comes first */
  sites[1] = site;
  l.site_dirs = sites;
  l.nsite_dirs = 2;
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report), 0);
  assert_string_equal(rt.path, link);
  assert_string_equal(rt.rung, "python wheels");
}

/* A library that loads but is not a CUDA runtime is named as such, and the
 * ladder goes on. */
static void test_ladder_not_a_runtime(void **state) {
  char report[CHIME__CUDA_MSG_MAX];
  chime__ladder_t l;
  chime__cudart_t rt;
  Dl_info info;

  (void)state;
  assert_true(dladdr((void *)(uintptr_t)_cmocka_run_group_tests, &info) != 0);
  assert_non_null(info.dli_fname);
  empty_ladder(&l);
  l.explicit_path = info.dli_fname;
  l.cuda_home = FAKE_CUDART_ROOT;
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report), 0);
  assert_in_order(report, info.dli_fname, ": not a CUDA runtime (no cudaFree)",
                  "; [CUDA_HOME=" FAKE_CUDART_ROOT "] loaded", (char *)NULL);
  assert_string_equal(rt.rung, "CUDA_HOME");
}

static void test_init_and_error_names(void **state) {
  char report[CHIME__CUDA_MSG_MAX], err[256], buf[32];
  chime__ladder_t l;
  chime__cudart_t rt;

  (void)state;
  assert_string_equal(chime__cuda_error_name(NULL, 35, buf, sizeof buf),
                      "cudaErrorInsufficientDriver");
  assert_string_equal(chime__cuda_error_name(NULL, 712, buf, sizeof buf),
                      "cudaErrorHostMemoryAlreadyRegistered");
  assert_string_equal(chime__cuda_error_name(NULL, 4242, buf, sizeof buf),
                      "cudaError4242");

  empty_ladder(&l);
  l.explicit_path = FAKE_CUDART_FILE;
  assert_int_equal(chime__cudart_find(&rt, &l, report, sizeof report), 0);
  assert_string_equal(chime__cuda_error_name(&rt, 2, buf, sizeof buf),
                      "cudaErrorMemoryAllocation");
  assert_string_equal(chime__cuda_error_name(&rt, 100, buf, sizeof buf),
                      "cudaErrorNoDevice");

  assert_int_equal(chime__cudart_init(&rt, err, sizeof err), 0);
  setenv("FAKE_CUDART_INIT_ERROR", "100", 1);
  assert_int_equal(chime__cudart_init(&rt, err, sizeof err), CHIME_ECUDA);
  assert_string_equal(err, "cudaErrorNoDevice (100) from cudaFree(NULL)");
  unsetenv("FAKE_CUDART_INIT_ERROR");
  setenv("FAKE_CUDART_DEVICES", "0", 1);
  assert_int_equal(chime__cudart_init(&rt, err, sizeof err), CHIME_ECUDA);
  assert_non_null(strstr(err, "cudaErrorNoDevice (100)"));
  unsetenv("FAKE_CUDART_DEVICES");
}

static void test_pin_ranges_bad_args(void **state) {
  chime__range_t r = {NULL, 4096};
  char err[256];

  (void)state;
  assert_int_equal(chime__pin_ranges(NULL, 1, 0, err, sizeof err),
                   CHIME_EINVAL);
  assert_int_equal(chime__pin_ranges(&r, 1, 0, err, sizeof err), CHIME_EINVAL);
  assert_non_null(strstr(err, "range 0 is empty"));
  assert_int_equal(chime_ring_pin(NULL), CHIME_EINVAL);
  assert_int_equal(chime_ring_pinned_bytes(NULL), 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pin_ranges_bad_args),
      cmocka_unit_test(test_ladder_order_and_words),
      cmocka_unit_test(test_ladder_first_runtime_wins),
      cmocka_unit_test(test_ladder_wheel_cu12),
      cmocka_unit_test(test_ladder_not_a_runtime),
      cmocka_unit_test(test_init_and_error_names),
      cmocka_unit_test(test_rollback),
      cmocka_unit_test(test_init_error_names),
      cmocka_unit_test(test_not_found_lists_every_rung),
      cmocka_unit_test(test_wheel_layout_from_env),
      cmocka_unit_test(test_off_then_on),
      cmocka_unit_test(test_ring_pin),
      cmocka_unit_test(test_ring_pin_fail),
      cmocka_unit_test(test_gpu_check_flow_on_fake),
  };
  char self[4096];
  ssize_t n;
  int rc;

  if (argc == 3 && strcmp(argv[1], "--child") == 0)
    return child_main(argv[2]);
  n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return 1;
  self[n] = '\0';
  g_self = self;
  snprintf(g_tmp, sizeof g_tmp, "/tmp/chime-test-pin-XXXXXX");
  if (mkdtemp(g_tmp) == NULL)
    return 1;
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  tmp_cleanup();
  return rc;
}
