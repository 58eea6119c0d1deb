/* chime-bench's child processes: chimed from the same build, and this binary
 * re-executed for a baseline's server side. Started with posix_spawn, never
 * plain fork: the bench is a gRPC process. */
#ifndef CHIME_BENCH_SPAWN_H
#define CHIME_BENCH_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  pid_t pid;
  int out_fd;     /* the child's stdout, a pipe */
  char addr[256]; /* from its "listening on" / "port" line */
  char dir[256];  /* temp dir holding the config, removed at stop */
  char config[512];
} chime__bench_child_t;

/* Starts argv (argv[0] a path) with stdout on a pipe and waits up to
 * timeout_ms for a line starting with prefix; the rest goes into c->addr. */
int chime__bench_spawn(chime__bench_child_t *c, const char *const argv[],
                       const char *prefix, int timeout_ms);
/* chime__bench_spawn on the server's side of an emulated link (netns.h:
 * `ip netns exec` into it), or as it is without one. */
int chime__bench_spawn_server(chime__bench_child_t *c, const char *const argv[],
                              const char *prefix, int timeout_ms);
/* Reads c's stdout up to timeout_ms for a line starting with prefix and
 * copies the rest of it into rest; lines before it are dropped. */
int chime__bench_child_line(chime__bench_child_t *c, const char *prefix,
                            int timeout_ms, char *rest, size_t restlen);
/* Writes config_json to a temp file and starts ../src/server/chimed (next to
 * this binary's directory) on 127.0.0.1:0 with it (on the server's side of
 * an emulated link, when there is one). */
int chime__bench_chimed_start(chime__bench_child_t *c, const char *config_json);
/* SIGTERM, then SIGKILL after timeout_ms; reaps; removes the temp dir.
 * Returns the exit status or a negative code. */
int chime__bench_child_stop(chime__bench_child_t *c, int timeout_ms);
/* Stops chimed (10 s) after a run that ended with rc. A chimed that did not
 * exit cleanly fails a run that had not failed already: "<who>: chimed died
 * of signal N<when>" or "<who>: chimed exited with status N" on stderr, and
 * CHIME_EPROTO. Otherwise returns rc. */
int chime__bench_chimed_stop(chime__bench_child_t *c, int rc, const char *who,
                             const char *when);
/* This binary's path (for re-exec). */
const char *chime__bench_self(char *buf, size_t len);

#endif
