/* Child processes for integration tests: spawn, read, stop, always clean up.
 * See harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chime/chime.h"
#include "chime/errors.h"

extern char **environ;

#define TRAMPOLINE_ENV "CHIME__HARNESS_PARENT"
#define NOFILE_ENV "CHIME__HARNESS_NOFILE"
#define MAX_TRACKED 256

static pid_t tracked[MAX_TRACKED];
static int cleanup_registered;
static char tmpdir[256];

static void close_from(int lowest) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)lowest, ~0u, 0u) == 0)
    return;
#endif
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return;
  int dfd = dirfd(d);
  int fds[1024];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 1024) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd >= lowest && fd != dfd)
      fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; i++)
    close(fds[i]);
}

/* Runs before main in every test binary. When this process is a trampoline
 * (started by chime__proc_spawn), it arranges to die with the test, then
 * becomes the real child. glibc passes argc/argv/envp to constructors. */
__attribute__((constructor)) static void trampoline(int argc, char **argv,
                                                    char **envp) {
  (void)envp;
  const char *parent = getenv(TRAMPOLINE_ENV);
  if (parent == NULL)
    return;
  long want = strtol(parent, NULL, 10);
  unsetenv(TRAMPOLINE_ENV);
  if (argc < 2) {
    fprintf(stderr, "harness trampoline: no program\n");
    _exit(127);
  }
  /* Dies with the spawning thread; if the parent is already gone, getppid no
   * longer names it and the child must not outlive the test. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != (pid_t)want)
    _exit(127);
  /* Only stdin/stdout/stderr go on: whatever the test runner left open
   * (CTest's log, say) is none of the child's business. */
  close_from(3);
  /* A lowered fd limit, soft and hard, so that raising the soft limit to
   * the hard one (chimed does) cannot undo it. */
  const char *nofile = getenv(NOFILE_ENV);
  if (nofile != NULL) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)strtoul(nofile, NULL, 10);
    unsetenv(NOFILE_ENV);
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      fprintf(stderr, "harness trampoline: setrlimit(%s): %s\n", nofile,
              strerror(errno));
      _exit(127);
    }
  }
  /* execvp: a program named without a slash (`ip`, for chime-bench's
   * `ip netns exec`) is found on PATH; a path is run as it is. */
  execvp(argv[1], argv + 1);
  fprintf(stderr, "harness trampoline: cannot exec %s: %s\n", argv[1],
          strerror(errno));
  _exit(127);
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void cleanup_at_exit(void) {
  chime__harness_kill_all();
  if (tmpdir[0] != '\0')
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void register_cleanup(void) {
  if (!cleanup_registered) {
    cleanup_registered = 1;
    atexit(cleanup_at_exit);
  }
}

static void track(pid_t pid) {
  for (int i = 0; i < MAX_TRACKED; i++) {
    if (tracked[i] == 0) {
      tracked[i] = pid;
      return;
    }
  }
}

static void untrack(pid_t pid) {
  for (int i = 0; i < MAX_TRACKED; i++)
    if (tracked[i] == pid)
      tracked[i] = 0;
}

void chime__harness_kill_all(void) {
  for (int i = 0; i < MAX_TRACKED; i++) {
    if (tracked[i] > 0) {
      kill(tracked[i], SIGKILL);
      while (waitpid(tracked[i], NULL, 0) < 0 && errno == EINTR)
        ;
      tracked[i] = 0;
    }
  }
}

int chime__refusing_addr(char *addr, size_t len) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  snprintf(addr, len, "127.0.0.1:%u", ntohs(sa.sin_port));
  return fd;
}

int chime__harness_teardown(void **state) {
  (void)state;
  chime__harness_kill_all();
  return 0;
}

int64_t chime__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void chime__sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

void chime__skip(const char *why) {
  fprintf(stderr, "SKIP: %s\n", why);
  fflush(stderr);
  exit(77);
}

const char *chime__status_str(int status, char *buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exit %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "status 0x%x", (unsigned)status);
  return buf;
}

int chime__proc_spawn(chime__proc_t *p, const char *const argv[],
                      const char *out_path) {
  return chime__proc_spawn_err(p, argv, out_path, NULL);
}

int chime__proc_spawn_err(chime__proc_t *p, const char *const argv[],
                          const char *out_path, const char *err_path) {
  int rc = CHIME_ESYS;
  int pipefd[2] = {-1, -1};
  char **child_argv = NULL;
  char **child_env = NULL;
  char parent_env[64];
  posix_spawn_file_actions_t fa;
  int fa_ok = 0;

  memset(p, 0, sizeof(*p));
  p->out_fd = -1;
  register_cleanup();

  size_t argc = 0;
  while (argv[argc] != NULL)
    argc++;
  size_t envc = 0;
  while (environ[envc] != NULL)
    envc++;
  child_argv = calloc(argc + 2, sizeof(*child_argv));
  child_env = calloc(envc + 2, sizeof(*child_env));
  if (child_argv == NULL || child_env == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  child_argv[0] = (char *)"chime-harness-trampoline";
  for (size_t i = 0; i < argc; i++)
    child_argv[i + 1] = (char *)argv[i];
  snprintf(parent_env, sizeof(parent_env), "%s=%ld", TRAMPOLINE_ENV,
           (long)getpid());
  for (size_t i = 0; i < envc; i++)
    child_env[i] = environ[i];
  child_env[envc] = parent_env;

  if (posix_spawn_file_actions_init(&fa) != 0)
    goto out;
  fa_ok = 1;
  if (out_path != NULL) {
    snprintf(p->out_path, sizeof(p->out_path), "%s", out_path);
    if (posix_spawn_file_actions_addopen(
            &fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) != 0)
      goto out;
  } else {
    if (pipe2(pipefd, O_CLOEXEC) != 0)
      goto out;
    if (posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1) != 0)
      goto out;
  }
  if (err_path != NULL &&
      posix_spawn_file_actions_addopen(&fa, 2, err_path,
                                       O_WRONLY | O_CREAT | O_TRUNC, 0600) != 0)
    goto out;
  if (posix_spawn(&p->pid, "/proc/self/exe", &fa, NULL, child_argv,
                  child_env) != 0) {
    p->pid = 0;
    goto out;
  }
  track(p->pid);
  if (pipefd[0] >= 0) {
    p->out_fd = pipefd[0];
    pipefd[0] = -1;
  }
  rc = 0;
out:
  if (fa_ok)
    posix_spawn_file_actions_destroy(&fa);
  if (pipefd[0] >= 0)
    close(pipefd[0]);
  if (pipefd[1] >= 0)
    close(pipefd[1]);
  free(child_argv);
  free(child_env);
  return rc;
}

int chime__proc_wait(chime__proc_t *p, int timeout_ms, int *status) {
  if (p->reaped) {
    if (status != NULL)
      *status = p->status;
    return 0;
  }
  if (p->pid <= 0)
    return CHIME_EINVAL;
  int64_t deadline = chime__now_ms() + timeout_ms;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
      untrack(p->pid);
      p->reaped = 1;
      p->status = st;
      if (status != NULL)
        *status = st;
      return 0;
    }
    if (r < 0 && errno != EINTR)
      return CHIME_ESYS;
    if (chime__now_ms() >= deadline)
      return CHIME_ETIMEDOUT;
    chime__sleep_ms(5);
  }
}

int chime__proc_stop(chime__proc_t *p, int sig, int timeout_ms, int *status) {
  if (!p->reaped && p->pid > 0)
    kill(p->pid, sig);
  int rc = chime__proc_wait(p, timeout_ms, status);
  if (rc == CHIME_ETIMEDOUT) {
    kill(p->pid, SIGKILL);
    (void)chime__proc_wait(p, 60000, status);
  }
  if (p->out_fd >= 0) {
    close(p->out_fd);
    p->out_fd = -1;
  }
  return rc;
}

void chime__proc_kill(chime__proc_t *p) {
  if (p == NULL)
    return;
  if (!p->reaped && p->pid > 0)
    (void)chime__proc_stop(p, SIGKILL, 60000, NULL);
  if (p->out_fd >= 0) {
    close(p->out_fd);
    p->out_fd = -1;
  }
}

int chime__proc_read_line(chime__proc_t *p, const char *prefix, char *buf,
                          size_t len, int timeout_ms) {
  char line[1024];
  size_t n = 0;
  size_t plen = strlen(prefix);
  int64_t deadline = chime__now_ms() + timeout_ms;

  if (p->out_fd < 0)
    return CHIME_EINVAL;
  /* One byte at a time: nothing past the wanted line is consumed. */
  for (;;) {
    int64_t left = deadline - chime__now_ms();
    if (left <= 0)
      return CHIME_ETIMEDOUT;
    struct pollfd pfd = {p->out_fd, POLLIN, 0};
    int pr = poll(&pfd, 1, (int)left);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return CHIME_ESYS;
    if (pr == 0)
      return CHIME_ETIMEDOUT;
    char c;
    ssize_t r = read(p->out_fd, &c, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return CHIME_EDISCONNECTED;
    if (c != '\n') {
      if (n + 1 < sizeof(line))
        line[n++] = c;
      continue;
    }
    line[n] = '\0';
    n = 0;
    if (strncmp(line, prefix, plen) == 0) {
      snprintf(buf, len, "%s", line + plen);
      return 0;
    }
  }
}

int chime__proc_last_json(const chime__proc_t *p, char *buf, size_t len) {
  int rc = CHIME_ENOTFOUND;
  FILE *f = fopen(p->out_path, "r");
  char line[8192];
  if (f == NULL)
    return CHIME_ENOTFOUND;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (line[0] != '{')
      continue;
    line[strcspn(line, "\n")] = '\0';
    snprintf(buf, len, "%s", line);
    rc = 0;
  }
  fclose(f);
  return rc;
}

/* The whole file at path into buf (len bytes with the NUL). */
static int read_whole(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return CHIME_ENOTFOUND;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
  return 0;
}

int chime__proc_run(const char *const argv[], int timeout_ms, char *out,
                    size_t outlen, char *err, size_t errlen, int *status) {
  static int run;
  char op[600], ep[600];
  chime__proc_t p;
  snprintf(op, sizeof(op), "%s/run-%d.out", chime__harness_tmpdir(), run);
  snprintf(ep, sizeof(ep), "%s/run-%d.err", chime__harness_tmpdir(), run++);
  int rc = chime__proc_spawn_err(&p, argv, op, ep);
  if (rc == 0 && (rc = chime__proc_wait(&p, timeout_ms, status)) != 0)
    chime__proc_kill(&p);
  if (rc == 0 && (rc = read_whole(op, out, outlen)) == 0)
    rc = read_whole(ep, err, errlen);
  return rc;
}

const char *chime__harness_bin(const char *rel, char *buf, size_t len) {
  const char *dir = getenv("CHIME_BUILD_DIR");
  if (dir != NULL && dir[0] != '\0') {
    snprintf(buf, len, "%s/%s", dir, rel);
  } else {
    /* Tests live in <build>/tests/, chime-bench in <build>/bench/. */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
      return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
      return NULL;
    *slash = '\0';
    snprintf(buf, len, "%s/../%s", self, rel);
  }
  return access(buf, X_OK) == 0 ? buf : NULL;
}

const char *chime__harness_tmpdir(void) {
  if (tmpdir[0] == '\0') {
    register_cleanup();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/chime-test-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
      tmpdir[0] = '\0';
      return NULL;
    }
  }
  return tmpdir;
}

int chime__harness_write_file(const char *name, const char *text, char *path,
                              size_t len) {
  const char *dir = chime__harness_tmpdir();
  if (dir == NULL)
    return CHIME_ESYS;
  snprintf(path, len, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return CHIME_ESYS;
  int ok = fputs(text, f) >= 0;
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : CHIME_ESYS;
}

int chime__chimed_start(chime__chimed_t *d, const char *config_json,
                        const char *const extra_args[], int timeout_ms) {
  return chime__chimed_start_on(d, NULL, NULL, config_json, extra_args,
                                timeout_ms);
}

int chime__chimed_start_on(chime__chimed_t *d, const char *const prefix[],
                           const char *host, const char *config_json,
                           const char *const extra_args[], int timeout_ms) {
  char bin[PATH_MAX], listen[300];
  const char *argv[64];
  size_t n = 0;
  int rc;

  memset(d, 0, sizeof(*d));
  d->proc.out_fd = -1;
  if (chime__harness_bin("src/server/chimed", bin, sizeof(bin)) == NULL)
    return CHIME_ENOTFOUND;
  for (size_t i = 0; prefix != NULL && prefix[i] != NULL && n < 16; i++)
    argv[n++] = prefix[i];
  snprintf(listen, sizeof(listen), "%s:0", host != NULL ? host : "127.0.0.1");
  argv[n++] = bin;
  argv[n++] = "--listen";
  argv[n++] = listen;
  if (config_json != NULL) {
    static unsigned counter;
    char name[64];
    snprintf(name, sizeof(name), "chimed-%u.json", counter++);
    rc = chime__harness_write_file(name, config_json, d->config_path,
                                   sizeof(d->config_path));
    if (rc != 0)
      return rc;
    argv[n++] = "--config";
    argv[n++] = d->config_path;
  }
  for (size_t i = 0; extra_args != NULL && extra_args[i] != NULL && n < 63; i++)
    argv[n++] = extra_args[i];
  argv[n] = NULL;

  rc = chime__proc_spawn(&d->proc, argv, NULL);
  if (rc != 0)
    return rc;
  rc = chime__proc_read_line(&d->proc, "listening on ", d->addr,
                             sizeof(d->addr), timeout_ms);
  if (rc != 0) {
    int st = 0;
    char sbuf[64];
    chime__proc_stop(&d->proc, SIGKILL, 10000, &st);
    fprintf(stderr, "harness: chimed did not say 'listening on' (%s; %s)\n",
            chime_strerror(rc), chime__status_str(st, sbuf, sizeof(sbuf)));
  }
  return rc;
}

int chime__chimed_stderr_at_start(const char *const argv[], const char *name,
                                  char *text, size_t len, int timeout_ms) {
  char out[1024], errp[1024];
  snprintf(out, sizeof out, "%s/%s.out", chime__harness_tmpdir(), name);
  snprintf(errp, sizeof errp, "%s/%s.err", chime__harness_tmpdir(), name);
  chime__proc_t p;
  int rc = chime__proc_spawn_err(&p, argv, out, errp);
  if (rc != 0)
    return rc;
  int64_t end = chime__now_ms() + timeout_ms;
  for (rc = CHIME_ETIMEDOUT; chime__now_ms() <= end; chime__sleep_ms(20)) {
    FILE *f = fopen(out, "r");
    size_t n = f ? fread(text, 1, len - 1, f) : 0;
    if (f)
      fclose(f);
    text[n] = '\0';
    if (strstr(text, "listening on") != NULL) {
      rc = 0;
      break;
    }
  }
  int status = 0;
  chime__proc_stop(&p, SIGTERM, 20000, &status);
  FILE *f = fopen(errp, "r");
  size_t n = f ? fread(text, 1, len - 1, f) : 0;
  if (f)
    fclose(f);
  text[n] = '\0';
  return rc;
}

int chime__chimed_stop(chime__chimed_t *d, int timeout_ms, int *status) {
  return chime__proc_stop(&d->proc, SIGTERM, timeout_ms, status);
}

int chime__chimed_start_or_skip(chime__chimed_t *d, const char *config_json,
                                const char *const extra_args[],
                                int timeout_ms) {
  int rc = chime__chimed_start(d, config_json, extra_args, timeout_ms);
  if (rc == CHIME_ENOTFOUND)
    chime__skip("chimed is not built");
  return rc;
}

int chime__chimed_start_client(chime__chimed_t *d, const char *config_json,
                               chime_client_t **c) {
  int rc = chime__chimed_start_or_skip(d, config_json, NULL, 30000);
  return rc != 0 ? rc : chime_client_create(c, d->addr, NULL);
}

int chime__wait_staged(chime_client_t *c, int timeout_ms) {
  int64_t deadline = chime__now_ms() + timeout_ms;
  for (;;) {
    chime_stats_t *st = NULL;
    uint64_t staged = 0;
    if (chime_client_stats(c, &st) == 0)
      staged = st->staged_insert_bytes;
    chime_stats_free(st);
    if (staged > 0)
      return 0;
    if (chime__now_ms() > deadline)
      return -1;
    chime__sleep_ms(10);
  }
}

int chime__chimed_stop_client(chime__chimed_t *d, chime_client_t *c) {
  int st = -1;
  chime_client_destroy(c);
  int rc = chime__chimed_stop(d, 20000, &st);
  return rc != 0 ? rc : (WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1);
}

int chime__shards_start(chime__chimed_t *d, int n,
                        void (*config_of)(int k, char *buf, size_t len),
                        chime_client_t **direct, char *target, size_t len,
                        chime_client_t **sharded) {
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    char config[4096];
    config_of(k, config, sizeof config);
    int rc = chime__chimed_start_client(&d[k], config, &direct[k]);
    if (rc != 0)
      return rc;
    int w = snprintf(target + at, len - at, "%s%s", k ? "," : "", d[k].addr);
    if (w < 0 || (size_t)w >= len - at)
      return CHIME_EINVAL;
    at += (size_t)w;
  }
  return sharded ? chime_client_create(sharded, target, NULL) : 0;
}

int chime__shards_stop(chime__chimed_t *d, int n, chime_client_t **direct,
                       const int *down, chime_client_t **sharded) {
  int rc = 0;
  if (sharded) {
    chime_client_destroy(*sharded);
    *sharded = NULL;
  }
  for (int k = 0; k < n; k++) {
    if (down != NULL && down[k]) {
      chime_client_destroy(direct[k]);
    } else if (chime__chimed_stop_client(&d[k], direct[k]) != 0) {
      rc = -1;
    }
    direct[k] = NULL;
  }
  chime__harness_kill_all();
  return rc;
}
