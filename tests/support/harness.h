/* Test harness: child processes for integration tests.
 *
 * Children are started with posix_spawn (never plain fork: tests are gRPC
 * processes). Each child goes through a trampoline (this test binary re-exec'd)
 * that sets PR_SET_PDEATHSIG so it dies with the test even when the test
 * process is killed by CTest's timeout or crashes; every child is also
 * tracked, and killed and reaped at exit (atexit) and by
 * chime__harness_kill_all() from a CMocka teardown after an assertion failure.
 * Spawn from the main thread: the death signal fires when the spawning thread
 * exits. With CHIME__HARNESS_NOFILE=N in the environment of the spawning
 * process, the child's fd limit (soft and hard) is N.
 * chime-bench starts its children through it too (bench/spawn.c), so it
 * must stay free of CMocka: test assertions belong in the tests.
 */
#ifndef CHIME_TESTS_HARNESS_H
#define CHIME_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  pid_t pid;  /* 0 once reaped */
  int out_fd; /* read end of the child's stdout pipe, or -1 */
  int status; /* waitpid status once reaped */
  int reaped;
  char out_path[512]; /* stdout file when spawned with one, else "" */
} chime__proc_t;

/* Starts argv[0] (a path) with argv. stdout goes to out_path when not NULL,
 * else to a pipe read with chime__proc_read_line(); stderr is inherited so it
 * shows in CTest's output. Returns 0 or a negative CHIME_E* code. */
int chime__proc_spawn(chime__proc_t *p, const char *const argv[],
                      const char *out_path);
/* The same, with stderr to err_path when not NULL (else inherited). */
int chime__proc_spawn_err(chime__proc_t *p, const char *const argv[],
                          const char *out_path, const char *err_path);
/* Waits up to timeout_ms for the child to exit. CHIME_ETIMEDOUT if it did not
 * (the child keeps running). *status gets the waitpid status. */
int chime__proc_wait(chime__proc_t *p, int timeout_ms, int *status);
/* Sends sig, waits up to timeout_ms, then SIGKILLs and reaps. Returns 0 when
 * the child exited within the wait, CHIME_ETIMEDOUT when it had to be
 * killed. */
int chime__proc_stop(chime__proc_t *p, int sig, int timeout_ms, int *status);
/* SIGKILL and reap (NULL-safe, idempotent). Closes the stdout pipe. */
void chime__proc_kill(chime__proc_t *p);
/* Reads stdout lines from the pipe until one starts with prefix; copies the
 * rest of that line (prefix removed, no newline) into buf. CHIME_ETIMEDOUT,
 * CHIME_EDISCONNECTED when the child closed stdout first. */
int chime__proc_read_line(chime__proc_t *p, const char *prefix, char *buf,
                          size_t len, int timeout_ms);
/* Runs argv to its end (up to timeout_ms): its stdout into out and its
 * stderr into err, each NUL-terminated (cut to fit), through files in the
 * tmpdir; *status gets the waitpid status. 0, CHIME_ETIMEDOUT (the child
 * killed) or another CHIME_E* code. */
int chime__proc_run(const char *const argv[], int timeout_ms, char *out,
                    size_t outlen, char *err, size_t errlen, int *status);
/* The last line of the child's stdout file that starts with '{'. */
int chime__proc_last_json(const chime__proc_t *p, char *buf, size_t len);
/* "exit 0", "signal 9 (Killed)", ... for messages. */
const char *chime__status_str(int status, char *buf, size_t len);
/* Kills and reaps every child still tracked. */
void chime__harness_kill_all(void);
/* chime__harness_kill_all as a CMocka teardown (of each test or of a
 * group): a test whose assertion failed leaves no child behind. Returns
 * 0. */
int chime__harness_teardown(void **state);

/* A path to a binary of this build: rel is relative to the build directory
 * ("src/server/chimed"). Uses $CHIME_BUILD_DIR (set by chime_add_test), else
 * the directory above this binary's (<build>/tests/, <build>/bench/). Returns
 * buf, or NULL if the file is not executable. */
const char *chime__harness_bin(const char *rel, char *buf, size_t len);

/* A private temporary directory, created on first use and removed with its
 * files at exit. */
const char *chime__harness_tmpdir(void);
/* Writes text to <tmpdir>/name; the full path goes into path. */
int chime__harness_write_file(const char *name, const char *text, char *path,
                              size_t len);

/* A running chimed. */
typedef struct chime__chimed_s {
  chime__proc_t proc;
  char addr[256];        /* "127.0.0.1:PORT" from its "listening on" line */
  char config_path[512]; /* "" for the built-in default */
} chime__chimed_t;

/* Starts chimed with --listen 127.0.0.1:0 and, when config_json is not NULL,
 * a config file holding it; extra_args (NULL-terminated, may be NULL) are
 * appended. Waits up to timeout_ms for "listening on". CHIME_ENOTFOUND when
 * chimed is not built (callers skip with 77). */
int chime__chimed_start(chime__chimed_t *d, const char *config_json,
                        const char *const extra_args[], int timeout_ms);
/* The same, but exits 77 (a CTest skip) when chimed is not built. */
int chime__chimed_start_or_skip(chime__chimed_t *d, const char *config_json,
                                const char *const extra_args[], int timeout_ms);
/* chime__chimed_start listening on host:0 (NULL: 127.0.0.1) and started through
 * prefix when not NULL (a NULL-terminated argv put before chimed's, as
 * chime-bench's `ip netns exec NS`). */
int chime__chimed_start_on(chime__chimed_t *d, const char *const prefix[],
                           const char *host, const char *config_json,
                           const char *const extra_args[], int timeout_ms);
/* SIGTERM, wait up to timeout_ms, then SIGKILL. As chime__proc_stop. */
int chime__chimed_stop(chime__chimed_t *d, int timeout_ms, int *status);

/* chimed with config_json (no extra args) and a client of it: 0, or the
 * code that failed; exits 77 when chimed is not built. */
typedef struct chime_client_s chime_client_t;
int chime__chimed_start_client(chime__chimed_t *d, const char *config_json,
                               chime_client_t **c);
/* Destroys the client, then stops chimed: 0 only when chimed exited 0 by
 * itself after SIGTERM. */
int chime__chimed_stop_client(chime__chimed_t *d, chime_client_t *c);
/* Waits, up to timeout_ms, until the server behind c holds some insert
 * staged (a request sent and waiting for room, its table full): 0, or -1
 * when none came. */
int chime__wait_staged(chime_client_t *c, int timeout_ms);

/* One chimed of config (a string) and a client of it for a group of tests:
 * defines `chimed`, `client` and the group's `setup` and `teardown` for
 * cmocka_run_group_tests(tests, setup, teardown). */
#define CHIME__CHIMED_GROUP(config)                                            \
  static chime__chimed_t chimed;                                               \
  static chime_client_t *client;                                               \
  static int setup(void **state) {                                             \
    (void)state;                                                               \
    return chime__chimed_start_client(&chimed, config, &client) == 0 ? 0 : -1; \
  }                                                                            \
  static int teardown(void **state) {                                          \
    (void)state;                                                               \
    return chime__chimed_stop_client(&chimed, client);                         \
  }

/* n chimed, shard k's config written by config_of(k, buf, len) (up to
 * 4 KiB), a one-server client of each in direct[k], target set to
 * "addr1,addr2,..." and, when sharded is not NULL, a sharded client of
 * that target in it. 0, or the code that failed; exits 77 when chimed is
 * not built. */
int chime__shards_start(chime__chimed_t *d, int n,
                        void (*config_of)(int k, char *buf, size_t len),
                        chime_client_t **direct, char *target, size_t len,
                        chime_client_t **sharded);
/* Destroys *sharded (may be NULL) and each direct[k] (NULL after), and
 * stops d[k] as chime__chimed_stop_client does, but for those down[k]
 * says are down already (down may be NULL); then kills what is left. 0
 * only when every one stopped exited 0. */
int chime__shards_stop(chime__chimed_t *d, int n, chime_client_t **direct,
                       const int *down, chime_client_t **sharded);

/* Runs argv (a chimed) until its stdout says "listening on", then stops it
 * with SIGTERM and reads what it wrote on stderr into text (len bytes,
 * NUL-terminated). name names its output files in the tmpdir. 0, or
 * CHIME_ETIMEDOUT when it did not listen within timeout_ms. */
int chime__chimed_stderr_at_start(const char *const argv[], const char *name,
                                  char *text, size_t len, int timeout_ms);

/* An address that refuses connections at once: a port of 127.0.0.1 bound
 * and never listened on (nothing else can take it while the socket is
 * open). "127.0.0.1:PORT" into addr; returns the socket, to close at the
 * end, or -1. */
int chime__refusing_addr(char *addr, size_t len);

/* Milliseconds on CLOCK_MONOTONIC, for bounded polling loops. */
int64_t chime__now_ms(void);

void chime__sleep_ms(int ms);

/* Exits 77 (CTest skip) with a reason on stderr. */
void chime__skip(const char *why);

#endif
