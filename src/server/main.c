/* chimed: flags, the embedded server on its own grpc_server, and a libuv loop
 * that turns SIGINT/SIGTERM into a graceful stop. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "chime/chime.h"
#include "common/malloc_tune.h"
#include "server/config.h"

static const char usage[] =
    "usage: chimed [--config FILE] [--listen ADDR] [--metrics ADDR]\n"
    "              [--pin-host-memory] [--restore DIR|latest] [--shard N]\n"
    "              [--help] [--version]\n"
    "  --config FILE      JSON configuration (see docs/operations.md);\n"
    "                     without it: table 'demo' on 127.0.0.1:50051\n"
    "  --listen ADDR      host:port (port 0 picks one) or unix:/path;\n"
    "                     overrides the config\n"
    "  --metrics ADDR     serve Prometheus metrics on http://ADDR/metrics\n"
    "                     (host:port; overrides the config's \"metrics\")\n"
    "  --pin-host-memory  page-lock every ring with the CUDA runtime\n"
    "  --restore DIR|latest  load a checkpoint before serving: its directory,\n"
    "                     or the newest complete one in checkpoint.dir\n"
    "  --shard N          this server's shard, 1..65535, carried by every key\n"
    "                     it issues (overrides the config's \"shard\"; one "
    "per\n"
    "                     server of a sharded deployment)\n"
    "Prints 'listening on ADDR' once serving (then 'metrics on ADDR' when\n"
    "metrics are on); exits 0 after SIGINT/SIGTERM.\n";

/* The library's log, as chimed's stderr has always read: "chimed: ",
 * "warning: " for a warning, the line. */
static void log_stderr(chime_log_level_t level, const char *msg, void *arg) {
  (void)arg;
  fprintf(stderr, "chimed: %s%s\n", level == CHIME_LOG_WARN ? "warning: " : "",
          msg);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  fprintf(stderr, "chimed: shutting down\n");
  uv_stop(h->loop);
}

/* --shard's value: a decimal 1..65535, nothing else (no sign, no
 * spaces, no trailing text). -1 when it is not one. */
static int shard_value(const char *s) {
  long v = 0;
  if (*s == '\0' || strlen(s) > 5)
    return -1;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9')
      return -1;
    v = v * 10 + (*s - '0');
  }
  return v >= 1 && v <= 65535 ? (int)v : -1;
}

/* Accepts "--name VALUE" and "--name=VALUE". */
static int flag_value(int argc, char **argv, int *i, const char *name,
                      const char **out) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0)
    return 0;
  if (argv[*i][n] == '=') {
    *out = argv[*i] + n + 1;
    return 1;
  }
  if (argv[*i][n] != '\0')
    return 0;
  if (*i + 1 >= argc)
    return -1;
  *out = argv[++*i];
  return 1;
}

/* Once chime_server_stop() has returned, the graceful stop is over: clients
 * have their statuses and acked inserts are done. What is left is gRPC's own
 * teardown, and gRPC 1.51's grpc_shutdown_blocking() now and then waits ~10 s
 * for a TCP backup poller's epoll timeout. Past this bound chimed exits
 * anyway; _exit skips gRPC's C++ destructors, which must not run while its
 * threads do. */
#define TEARDOWN_BOUND_S 2
static atomic_int torn_down;

static void *teardown_watchdog(void *arg) {
  (void)arg;
  sleep(TEARDOWN_BOUND_S);
  if (!atomic_load(&torn_down)) {
    fprintf(stderr, "chimed: gRPC teardown still running after %d s; exiting\n",
            TEARDOWN_BOUND_S);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
  }
  return NULL;
}

/* Every connection, ring, handoff and learner watch costs an fd, and the
 * usual soft limit (1024) is a quarter of what a busy server needs; the
 * hard limit is what the administrator allows. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
    return;
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    fprintf(stderr, "chimed: cannot raise the fd limit from %llu to %llu\n",
            (unsigned long long)was, (unsigned long long)rl.rlim_max);
}

static void close_handle(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

int main(int argc, char **argv) {
  chime__malloc_tune();
  chime_set_logger(log_stderr, NULL);
  chime_server_opts_t opts = CHIME_SERVER_OPTS_INIT;
  chime_server_t *srv = NULL;
  char bound[300];
  int rc;
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("chimed %s\n", CHIME_VERSION_STRING);
      return 0;
    }
    if (strcmp(argv[i], "--pin-host-memory") == 0) {
      opts.pin_host_memory = 1;
      continue;
    }
    if ((r = flag_value(argc, argv, &i, "--config", &v)) != 0) {
      if (r < 0)
        goto bad;
      opts.config_path = v;
      continue;
    }
    if ((r = flag_value(argc, argv, &i, "--listen", &v)) != 0) {
      if (r < 0)
        goto bad;
      opts.listen = v;
      continue;
    }
    if ((r = flag_value(argc, argv, &i, "--restore", &v)) != 0) {
      if (r < 0)
        goto bad;
      opts.restore = v;
      continue;
    }
    if ((r = flag_value(argc, argv, &i, "--metrics", &v)) != 0) {
      if (r < 0)
        goto bad;
      opts.metrics = v;
      continue;
    }
    if ((r = flag_value(argc, argv, &i, "--shard", &v)) != 0) {
      if (r < 0)
        goto bad;
      if ((opts.shard = shard_value(v)) < 0) {
        char what[64];
        snprintf(what, sizeof(what), "--shard '%.32s'", v);
        fprintf(stderr, "chimed: " CHIME__SHARD_RANGE_ERROR "\n", what);
        return 2;
      }
      continue;
    }
  bad:
    fprintf(stderr, "chimed: bad argument '%s'\n%s", argv[i], usage);
    return 2;
  }

  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  uv_loop_t *loop = uv_default_loop();
  uv_signal_t sigint, sigterm;
  uv_signal_init(loop, &sigint);
  uv_signal_init(loop, &sigterm);
  uv_signal_start(&sigint, on_signal, SIGINT);
  uv_signal_start(&sigterm, on_signal, SIGTERM);

  rc = chime_server_create(&srv, &opts);
  if (rc != 0) {
    fprintf(stderr, "chimed: %s\n", chime_last_error());
    return rc == CHIME_EINVAL ? 2 : 1;
  }
  rc = chime_server_listen(srv, bound, sizeof(bound));
  if (rc != 0) {
    fprintf(stderr, "chimed: %s\n", chime_last_error());
    chime_server_destroy(srv);
    return 1;
  }
  printf("listening on %s\n", bound);
  if (chime_server_metrics_address(srv)[0] != '\0')
    printf("metrics on %s\n", chime_server_metrics_address(srv));
  fflush(stdout);

  uv_run(loop, UV_RUN_DEFAULT);
  chime_server_stop(srv); /* the graceful part, not bounded by the watchdog */
  pthread_t watchdog;
  if (pthread_create(&watchdog, NULL, teardown_watchdog, NULL) == 0)
    pthread_detach(watchdog);
  chime_server_destroy(srv);
  atomic_store(&torn_down, 1);
  uv_walk(loop, close_handle, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
  return 0;
}
