/* Child processes of chime-bench (see spawn.h), on the test harness. */
#include "spawn.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/errors.h"
#include "netns.h"

const char *chime__bench_self(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0)
    return NULL;
  buf[n] = '\0';
  return buf;
}

int chime__bench_child_line(chime__bench_child_t *c, const char *prefix,
                            int timeout_ms, char *rest, size_t restlen) {
  if (c->proc.out_fd < 0)
    return CHIME_EDISCONNECTED;
  return chime__proc_read_line(&c->proc, prefix, rest, restlen, timeout_ms);
}

int chime__bench_spawn(chime__bench_child_t *c, const char *const argv[],
                       const char *prefix, int timeout_ms) {
  memset(c, 0, sizeof(*c));
  int rc = chime__proc_spawn(&c->proc, argv, NULL);
  if (rc == 0)
    rc = chime__bench_child_line(c, prefix, timeout_ms, c->addr,
                                 sizeof(c->addr));
  if (rc != 0)
    chime__proc_kill(&c->proc);
  return rc;
}

/* `ip netns exec NS` into the link's server namespace, or NULL. */
static const char *const *server_prefix(const char *in_ns[5]) {
  const char *ns = chime__bench_link_server_ns();
  if (ns == NULL)
    return NULL;
  in_ns[0] = "ip";
  in_ns[1] = "netns";
  in_ns[2] = "exec";
  in_ns[3] = ns;
  in_ns[4] = NULL;
  return in_ns;
}

int chime__bench_spawn_server(chime__bench_child_t *c, const char *const argv[],
                              const char *prefix, int timeout_ms) {
  const char *in_ns[32];
  if (server_prefix(in_ns) == NULL)
    return chime__bench_spawn(c, argv, prefix, timeout_ms);
  int n = 4;
  for (int i = 0; argv[i] != NULL && n < 31; i++)
    in_ns[n++] = argv[i];
  in_ns[n] = NULL;
  return chime__bench_spawn(c, in_ns, prefix, timeout_ms);
}

int chime__bench_chimed_start(chime__bench_child_t *c,
                              const char *config_json) {
  char chimed[PATH_MAX];
  const char *in_ns[5];
  memset(c, 0, sizeof(*c));
  c->proc.out_fd = -1;
  /* chime-bench lives in <build>/bench/, chimed in <build>/src/server/. */
  if (chime__harness_bin("src/server/chimed", chimed, sizeof(chimed)) == NULL) {
    fprintf(stderr, "chime-bench: %s not found (build chimed first)\n", chimed);
    return CHIME_ENOTFOUND;
  }
  int rc = chime__chimed_start_on(c, server_prefix(in_ns),
                                  chime__bench_server_host(), config_json, NULL,
                                  30000);
  if (rc != 0)
    fprintf(stderr, "chime-bench: chimed did not start: %s\n",
            chime_strerror(rc));
  return rc;
}

int chime__bench_child_stop(chime__bench_child_t *c, int timeout_ms) {
  int st = 0;
  if (c->proc.pid <= 0 && !c->proc.reaped)
    return 0;
  int rc = chime__proc_stop(&c->proc, SIGTERM, timeout_ms, &st);
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
