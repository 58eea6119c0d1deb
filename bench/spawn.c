/* Child processes of chime-bench (see spawn.h). */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "netns.h"

extern char **environ;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *chime__bench_self(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0)
    return NULL;
  buf[n] = '\0';
  return buf;
}

int chime__bench_child_line(chime__bench_child_t *c, const char *prefix,
                            int timeout_ms, char *rest, size_t restlen) {
  char line[512];
  size_t n = 0;
  size_t plen = strlen(prefix);
  long long deadline = now_ms() + timeout_ms;
  if (c->out_fd < 0)
    return CHIME_EDISCONNECTED;
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0)
      return CHIME_ETIMEDOUT;
    struct pollfd pfd = {c->out_fd, POLLIN, 0};
    int pr = poll(&pfd, 1, (int)left);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return pr == 0 ? CHIME_ETIMEDOUT : CHIME_ESYS;
    char ch;
    ssize_t r = read(c->out_fd, &ch, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return CHIME_EDISCONNECTED;
    if (ch != '\n') {
      if (n + 1 < sizeof(line))
        line[n++] = ch;
      continue;
    }
    line[n] = '\0';
    n = 0;
    if (strncmp(line, prefix, plen) == 0) {
      snprintf(rest, restlen, "%s", line + plen);
      return 0;
    }
  }
}

int chime__bench_spawn(chime__bench_child_t *c, const char *const argv[],
                       const char *prefix, int timeout_ms) {
  int rc = CHIME_ESYS;
  int pipefd[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  int fa_ok = 0;

  c->pid = 0;
  c->out_fd = -1;
  c->addr[0] = '\0';
  if (pipe2(pipefd, O_CLOEXEC) != 0)
    goto out;
  if (posix_spawn_file_actions_init(&fa) != 0)
    goto out;
  fa_ok = 1;
  if (posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1) != 0)
    goto out;
  if (posix_spawnp(&c->pid, argv[0], &fa, NULL, (char *const *)argv, environ) !=
      0) {
    c->pid = 0;
    goto out;
  }
  close(pipefd[1]);
  pipefd[1] = -1;
  c->out_fd = pipefd[0];
  pipefd[0] = -1;

  if ((rc = chime__bench_child_line(c, prefix, timeout_ms, c->addr,
                                    sizeof(c->addr))) != 0)
    goto out;
  rc = 0;
out:
  if (fa_ok)
    posix_spawn_file_actions_destroy(&fa);
  if (pipefd[0] >= 0)
    close(pipefd[0]);
  if (pipefd[1] >= 0)
    close(pipefd[1]);
  if (rc != 0 && c->pid > 0)
    (void)chime__bench_child_stop(c, 0);
  return rc;
}

int chime__bench_spawn_server(chime__bench_child_t *c, const char *const argv[],
                              const char *prefix, int timeout_ms) {
  const char *ns = chime__bench_link_server_ns();
  if (ns == NULL)
    return chime__bench_spawn(c, argv, prefix, timeout_ms);
  const char *in_ns[32] = {"ip", "netns", "exec", ns};
  int n = 4;
  for (int i = 0; argv[i] != NULL && n < 31; i++)
    in_ns[n++] = argv[i];
  in_ns[n] = NULL;
  return chime__bench_spawn(c, in_ns, prefix, timeout_ms);
}

int chime__bench_chimed_start(chime__bench_child_t *c,
                              const char *config_json) {
  char self[PATH_MAX], chimed[PATH_MAX + 32];
  memset(c, 0, sizeof(*c));
  c->out_fd = -1;
  if (chime__bench_self(self, sizeof(self)) == NULL)
    return CHIME_ESYS;
  char *slash = strrchr(self, '/');
  if (slash == NULL)
    return CHIME_ENOTFOUND;
  *slash = '\0';
  /* chime-bench lives in <build>/bench/, chimed in <build>/src/server/. */
  snprintf(chimed, sizeof(chimed), "%s/../src/server/chimed", self);
  if (access(chimed, X_OK) != 0) {
    fprintf(stderr, "chime-bench: %s not found (build chimed first)\n", chimed);
    return CHIME_ENOTFOUND;
  }
  snprintf(c->dir, sizeof(c->dir), "/tmp/chime-bench-XXXXXX");
  if (mkdtemp(c->dir) == NULL) {
    c->dir[0] = '\0';
    return CHIME_ESYS;
  }
  snprintf(c->config, sizeof(c->config), "%s/chimed.json", c->dir);
  FILE *f = fopen(c->config, "w");
  if (f == NULL)
    return CHIME_ESYS;
  int ok = fputs(config_json, f) >= 0;
  if (fclose(f) != 0 || !ok)
    return CHIME_ESYS;
  char listen[64];
  snprintf(listen, sizeof(listen), "%s:0", chime__bench_server_host());
  const char *argv[] = {chimed,     "--listen", listen,
                        "--config", c->config,  NULL};
  int rc = chime__bench_spawn_server(c, argv, "listening on ", 30000);
  if (rc != 0)
    fprintf(stderr, "chime-bench: chimed did not start: %s\n",
            chime_strerror(rc));
  return rc;
}

int chime__bench_child_stop(chime__bench_child_t *c, int timeout_ms) {
  int st = 0;
  int rc = 0;
  if (c->pid > 0) {
    kill(c->pid, SIGTERM);
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
      pid_t r = waitpid(c->pid, &st, WNOHANG);
      if (r == c->pid)
        break;
      if (r < 0 && errno != EINTR) {
        rc = CHIME_ESYS;
        break;
      }
      if (now_ms() >= deadline) {
        kill(c->pid, SIGKILL);
        while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
          ;
        rc = CHIME_ETIMEDOUT;
        break;
      }
      struct timespec ts = {0, 5000000};
      nanosleep(&ts, NULL);
    }
    c->pid = 0;
  }
  if (c->out_fd >= 0) {
    close(c->out_fd);
    c->out_fd = -1;
  }
  if (c->config[0] != '\0') {
    unlink(c->config);
    c->config[0] = '\0';
  }
  if (c->dir[0] != '\0') {
    rmdir(c->dir);
    c->dir[0] = '\0';
  }
  return rc != 0 ? rc : st;
}

int chime__bench_chimed_stop(chime__bench_child_t *c, int rc, const char *who,
                             const char *when) {
  /* 30 s, like the tests: gRPC 1.51's grpc_shutdown_blocking now and then
   * waits about 10 s for its executor's poller before chimed can exit. */
  int st = chime__bench_child_stop(c, 30000);
  if (st == 0 || rc != 0)
    return rc;
  if (st > 0 && WIFSIGNALED(st))
    fprintf(stderr, "%s: chimed died of signal %d%s\n", who, WTERMSIG(st),
            when);
  else
    fprintf(stderr, "%s: chimed exited with status %d\n", who,
            st > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : st);
  return CHIME_EPROTO;
}
