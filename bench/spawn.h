/* chime-bench's child processes: chimed from the same build, and this binary
 * re-executed for a baseline's server side or a learner. They are the test
 * harness's children (tests/support/harness.h: posix_spawn through a
 * trampoline that ties each to the bench's life, tracked and killed at
 * exit); what is the bench's own is the emulated link's server namespace
 * (netns.h) and how a chimed that did not exit cleanly fails a run. */
#ifndef CHIME_BENCH_SPAWN_H
#define CHIME_BENCH_SPAWN_H

#include <stddef.h>

#include "harness.h"

/* A child: proc (its pid and stdout pipe) and, in addr, the rest of its
 * ready line ("listening on ", "port ", "ready"). */
typedef chime__chimed_t chime__bench_child_t;

/* Starts argv (argv[0] a path, or a name on PATH) with stdout on a pipe and
 * waits up to timeout_ms for a line starting with prefix; the rest goes into
 * c->addr. */
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
/* Starts chimed of this build (chime__harness_bin) on the server host's
 * port 0 with config_json (on the server's side of an emulated link, when
 * there is one). */
int chime__bench_chimed_start(chime__bench_child_t *c, const char *config_json);
/* SIGTERM, then SIGKILL after timeout_ms; reaps. Returns the exit status,
 * or a negative code (CHIME_ETIMEDOUT when it had to be killed); 0 for a
 * child never started. */
int chime__bench_child_stop(chime__bench_child_t *c, int timeout_ms);
/* Stops chimed (30 s) after a run that ended with rc. A chimed that did not
 * exit cleanly fails a run that had not failed already: "<who>: chimed died
 * of signal N<when>" or "<who>: chimed exited with status N" on stderr, and
 * CHIME_EPROTO. Otherwise returns rc. */
int chime__bench_chimed_stop(chime__bench_child_t *c, int rc, const char *who,
                             const char *when);
/* This binary's path (for re-exec). */
const char *chime__bench_self(char *buf, size_t len);

#endif
