/* Page-locking through the real chimed and the client library.
 *
 * chimed --pin-host-memory must refuse to start, exit non-zero and print one
 * error naming the CUDA error and every rung of the ladder when: the real
 * runtime is there but no driver (these machines), the runtime fails to
 * initialise (the fake with an init error), or nothing is found at all. With
 * the fake runtime succeeding it starts, pins every ring it creates (and the
 * learner pins its own mapping or local ring), reports the footprint, and
 * unregisters everything while still mapped; with pinning off it maps no CUDA
 * library at all. Skips (77) when chimed is not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "chime/chime.h"
#include "chime/ring.h"
#include "harness.h"

extern char **environ;

#define SPEC "obs:f32[64], action:i32[], reward:f32[]"
#define SLOTS 4
#define BATCH 4

static const char *config =
    "{\"tables\": [{\"name\": \"demo\", \"spec\": \"" SPEC "\", "
    "\"capacity\": 4096, \"min_size\": 1, \"sampler\": \"fifo\"}]}\n";

static char g_chimed[1024];
static char g_chimectl[1024];
static char g_embedded[1024];

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = calloc(1, 1 << 20);
  size_t n = 0;

  if (buf == NULL)
    return NULL;
  if (f != NULL) {
    n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
  }
  buf[n] = '\0';
  return buf;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;

  for (hay = strstr(hay, needle); hay != NULL;
       hay = strstr(hay + strlen(needle), needle))
    n++;
  return n;
}

/* Lines of a fake runtime log that start with word ("register " is not
 * "unregister "). */
static int count_lines(const char *log, const char *word) {
  const char *line = log;
  int n = 0;

  while (line != NULL && *line != '\0') {
    n += strncmp(line, word, strlen(word)) == 0;
    line = strchr(line, '\n');
    if (line != NULL)
      line++;
  }
  return n;
}

static int pid_maps_cudart(pid_t pid) {
  char path[64], *maps;
  int found;

  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  maps = slurp(path);
  assert_non_null(maps);
  assert_non_null(strstr(maps, "chimed")); /* it really is chimed's map */
  found = strstr(maps, "libcudart") != NULL;
  free(maps);
  return found;
}

/* Asserts each NULL-terminated needle occurs in hay, in order. */
static void assert_in_order(const char *hay, ...) {
  const char *at = hay, *needle;
  va_list ap;

  va_start(ap, hay);
  while ((needle = va_arg(ap, const char *)) != NULL) {
    const char *hit = strstr(at, needle);

    if (hit == NULL) {
      va_end(ap);
      fail_msg("missing (in order) \"%s\" in:\n%s", needle, hay);
    }
    at = hit + strlen(needle);
  }
  va_end(ap);
}

/* chimectl [--json] info ADDR; returns its stdout (free it). */
static char *chimectl_info(const char *addr, int as_json) {
  const char *const json_argv[] = {g_chimectl, "--json", "info", addr, NULL};
  const char *const text_argv[] = {g_chimectl, "info", addr, NULL};
  char out[512];
  chime__proc_t p;
  int st = 0;

  if (g_chimectl[0] == '\0')
    return NULL;
  snprintf(out, sizeof out, "%s/chimectl.out", chime__harness_tmpdir());
  assert_int_equal(chime__proc_spawn(&p, as_json ? json_argv : text_argv, out),
                   0);
  assert_int_equal(chime__proc_wait(&p, 30000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return slurp(out);
}

/* The stream's ring as chimectl --json info lists it (a new reference), or
 * NULL. */
static json_t *json_ring(json_t *info, uint64_t stream_id) {
  json_t *rings = json_object_get(info, "rings"), *r;
  size_t i;

  assert_true(json_is_array(rings));
  json_array_foreach(rings, i, r) {
    if ((uint64_t)json_integer_value(json_object_get(r, "stream_id")) ==
        stream_id)
      return json_incref(r);
  }
  return NULL;
}

/* GetInfo and chimectl info (JSON and text) agree on each open stream's
 * ring: its table, and pinned bytes of exactly want[i]; and on the total. */
static void check_info_rings(const char *addr, chime_client_t *client,
                             const uint64_t *ids, const uint64_t *want,
                             size_t n) {
  chime_server_info_t *info = NULL;
  uint64_t total = 0;
  char *text;
  json_error_t jerr;
  json_t *j;

  for (size_t k = 0; k < n; k++)
    total += want[k];
  assert_int_equal(chime_client_info(client, &info), 0);
  assert_int_equal(info->nrings, n);
  assert_int_equal(info->pinned_bytes, total);
  for (size_t k = 0; k < n; k++) {
    const chime_ring_info_t *r = NULL;

    for (uint32_t i = 0; i < info->nrings; i++)
      if (info->rings[i].stream_id == ids[k])
        r = &info->rings[i];
    assert_non_null(r);
    assert_string_equal(r->table, "demo");
    assert_int_equal(r->pinned_bytes, want[k]);
    assert_true(r->bytes > 0);
    assert_true(r->bytes >= want[k]); /* the mapping holds the slots */
  }
  chime_server_info_free(info);

  text = chimectl_info(addr, 1);
  if (text == NULL) {
    fprintf(stderr, "chimectl is not built: only GetInfo checked\n");
    return;
  }
  j = json_loads(text, 0, &jerr);
  if (j == NULL)
    fail_msg("chimectl --json info: %s in:\n%s", jerr.text, text);
  free(text);
  assert_int_equal(json_integer_value(json_object_get(j, "pinned_bytes")),
                   total);
  assert_int_equal(json_array_size(json_object_get(j, "rings")), n);
  {
    json_t *tb = json_array_get(json_object_get(j, "tables"), 0);
    assert_string_equal(json_string_value(json_object_get(tb, "remover")),
                        "fifo");
    assert_int_equal(
        json_integer_value(json_object_get(tb, "max_times_sampled")), 1);
    assert_true(json_real_value(json_object_get(tb, "priority_exponent")) ==
                1.0);
  }
  for (size_t k = 0; k < n; k++) {
    json_t *r = json_ring(j, ids[k]);

    assert_non_null(r);
    assert_string_equal(json_string_value(json_object_get(r, "table")), "demo");
    assert_int_equal(json_integer_value(json_object_get(r, "pinned_bytes")),
                     want[k]);
    assert_true(json_integer_value(json_object_get(r, "bytes")) >=
                (json_int_t)want[k]);
    json_decref(r);
  }
  json_decref(j);

  /* Text: a RINGS table, one row per stream ("ID demo BYTES PINNED"), and a
   * total row whose last column is the pinned total. */
  text = chimectl_info(addr, 0);
  assert_non_null(strstr(text, "\nRINGS\n"));
  {
    /* The table row: name, sampler, remover, exponent, max_times_sampled. */
    char sampler[16] = "", remover[16] = "", exp[16] = "";
    unsigned long long mts = 0;
    const char *at = strstr(text, "\ndemo ");
    assert_non_null(at);
    assert_int_equal(
        sscanf(at, " demo %15s %15s %15s %llu", sampler, remover, exp, &mts),
        4);
    assert_string_equal(sampler, "fifo");
    assert_string_equal(remover, "fifo");
    assert_string_equal(exp, "-");
    assert_int_equal(mts, 1);
  }
  for (size_t k = 0; k < n; k++) {
    char row[128];
    const char *at;
    unsigned long long bytes = 0, pinned = 0;

    snprintf(row, sizeof row, "\n%llu ", (unsigned long long)ids[k]);
    at = strstr(strstr(text, "\nRINGS\n"), row);
    assert_non_null(at);
    assert_int_equal(sscanf(at, " %*u demo %llu %llu", &bytes, &pinned), 2);
    assert_int_equal(pinned, want[k]);
    assert_true(bytes >= want[k]);
  }
  {
    const char *at = strstr(text, "\ntotal ");
    unsigned long long bytes = 0, pinned = 0;

    assert_non_null(at);
    assert_int_equal(sscanf(at, " total %llu %llu", &bytes, &pinned), 2);
    assert_int_equal(pinned, total);
  }
  free(text);
}

/* Starts chimed --pin-host-memory --listen 127.0.0.1:0 with the test's
 * environment minus what the ladder and the fake read, plus vars, stderr to
 * a file; waits for it to exit (it must: it fails at start). Returns its
 * stderr (free it); *status gets the wait status, or -1 if it kept running
 * (then it was killed: a host where pinning works). */
static char *chimed_fails(int *status, ...) {
  static const char *const scrub[] = {
      "CHIME_CUDART=", "CUDA_HOME=",       "CUDA_PATH=",
      "VIRTUAL_ENV=",  "CONDA_PREFIX=",    "PYENV_ROOT=",
      "HOME=",         "CHIME_CUDA_TEST_", "FAKE_CUDART_"};
  char *argv[] = {g_chimed, "--pin-host-memory", "--listen", "127.0.0.1:0",
                  NULL};
  char errpath[512], outpath[512];
  char *envp[256];
  posix_spawn_file_actions_t fa;
  size_t n = 0, i, k;
  va_list ap;
  char *v;
  pid_t pid;
  int st = 0, waited = 0;

  snprintf(errpath, sizeof errpath, "%s/chimed.err", chime__harness_tmpdir());
  snprintf(outpath, sizeof outpath, "%s/chimed.out", chime__harness_tmpdir());
  for (i = 0; environ[i] != NULL && n < 200; i++) {
    int drop = 0;

    for (k = 0; k < sizeof scrub / sizeof scrub[0]; k++)
      drop |= strncmp(environ[i], scrub[k], strlen(scrub[k])) == 0;
    if (!drop)
      envp[n++] = environ[i];
  }
  va_start(ap, status);
  while ((v = va_arg(ap, char *)) != NULL && n < 254)
    envp[n++] = v;
  va_end(ap);
  envp[n] = NULL;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, outpath,
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, errpath,
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_int_equal(posix_spawn(&pid, g_chimed, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);

    if (r == pid)
      break;
    if (waited >= 30000) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      st = -1;
      break;
    }
    chime__sleep_ms(10);
    waited += 10;
  }
  *status = st;
  return slurp(errpath);
}

/* The real runtime, no driver: the error names cudaErrorInsufficientDriver
 * and the whole ladder. */
static void test_real_runtime_no_driver(void **state) {
  char *err;
  int st;

  (void)state;
  err = chimed_fails(&st, (char *)NULL);
  assert_non_null(err);
  /* It started: this host has a driver and a GPU. Or there is no runtime
   * to test at all. */
  if (st == -1 || strstr(err, "no CUDA runtime found") != NULL) {
    fprintf(stderr, "not applicable here: %s\n",
            st == -1 ? "chimed started" : err);
    free(err);
    err = NULL;
  }
  if (err == NULL)
    skip();
  fprintf(stderr, "chimed said: %s", err);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  assert_in_order(err, "page-locking failed: CUDA runtime: ",
                  "cudaErrorInsufficientDriver (35) from cudaFree(NULL) in /",
                  "libcudart.so", "; ladder: [loaded] ", "; [CHIME_CUDART] ",
                  "; [CUDA_HOME]", "; [CUDA_PATH]", "/usr/local/cuda] ",
                  "; [python wheels] ", "; [sonames] ", (char *)NULL);
  assert_non_null(strstr(err, "] loaded /"));
  free(err);
}

static void test_fake_init_failure(void **state) {
  char home[512], v_home[600];
  char *err;
  int st;

  (void)state;
  snprintf(home, sizeof home, "%s/home", chime__harness_tmpdir());
  mkdir(home, 0700);
  snprintf(v_home, sizeof v_home, "HOME=%s", home);
  err = chimed_fails(&st, "CUDA_HOME=" FAKE_CUDART_ROOT,
                     "FAKE_CUDART_INIT_ERROR=100", v_home, (char *)NULL);
  assert_non_null(err);
  assert_true(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 0);
  assert_in_order(
      err,
      "page-locking failed: CUDA runtime: cudaErrorNoDevice (100) "
      "from cudaFree(NULL) in " FAKE_CUDART_ROOT "/lib64/libcudart.so.13",
      "; ladder: [loaded] no libcudart mapped in this process",
      "; [CHIME_CUDART] not set",
      "; [CUDA_HOME=" FAKE_CUDART_ROOT "] loaded " FAKE_CUDART_ROOT
      "/lib64/libcudart.so.13",
      "; [CUDA_PATH] not tried (runtime found earlier)",
      "/usr/local/cuda] not tried (runtime found earlier)",
      "; [python wheels] not tried (runtime found earlier)",
      "; [sonames] not tried (runtime found earlier)", (char *)NULL);
  free(err);
}

static void test_nothing_found(void **state) {
  char root[512], v_root[600], v_home[600], want[2048];
  char *err;
  int st;

  (void)state;
  snprintf(root, sizeof root, "%s/empty-root", chime__harness_tmpdir());
  mkdir(root, 0700);
  snprintf(v_root, sizeof v_root, "CHIME_CUDA_TEST_ROOT=%s", root);
  snprintf(v_home, sizeof v_home, "HOME=%s", root);
  err = chimed_fails(&st, v_root, v_home,
                     "CHIME_CUDA_TEST_SONAMES=libchime-absent-cudart.so.13:"
                     "libchime-absent-cudart.so",
                     (char *)NULL);
  assert_non_null(err);
  assert_true(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 0);
  snprintf(want, sizeof want,
           "; [%s/usr/local/cuda] %s/usr/local/cuda: No such file or "
           "directory",
           root, root);
  assert_in_order(err, "page-locking failed: no CUDA runtime found; ladder: ",
                  "[loaded] no libcudart mapped in this process",
                  "; [CHIME_CUDART] not set", "; [CUDA_HOME] not set",
                  "; [CUDA_PATH] not set", want,
                  "; [python wheels] no Python site directory found",
                  "; [sonames] libchime-absent-cudart.so.13: ",
                  ", libchime-absent-cudart.so: ", (char *)NULL);
  free(err);
}

/* Pinning on, fake runtime: the server pins each ring it creates, a learner
 * pins its own view in both modes, the footprint is reported, and every
 * registration is undone while the memory is still mapped. */
static void test_pins_rings_end_to_end(void **state) {
  const char *const extra[] = {"--pin-host-memory", NULL};
  char srv_log[512], cli_log[512], want[128];
  chime__chimed_t d;
  chime_client_t *client = NULL;
  chime_server_info_t *info = NULL;
  chime_stats_t *stats = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_ring_layout_t lay;
  chime_spec_t spec;
  char *log;
  int rc, st = 0;
  int64_t deadline;

  (void)state;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_ring_layout_compute(&lay, &spec, BATCH, SLOTS), 0);
  snprintf(srv_log, sizeof srv_log, "%s/srv.log", chime__harness_tmpdir());
  snprintf(cli_log, sizeof cli_log, "%s/cli.log", chime__harness_tmpdir());
  setenv("CUDA_HOME", FAKE_CUDART_ROOT, 1);
  setenv("FAKE_CUDART_LOG", srv_log, 1);
  rc = chime__chimed_start(&d, config, extra, 30000);
  setenv("FAKE_CUDART_LOG", cli_log, 1);
  assert_int_equal(rc, 0);
  assert_true(pid_maps_cudart(d.proc.pid));

  assert_int_equal(chime_client_create(&client, d.addr, NULL), 0);
  assert_int_equal(chime_client_info(client, &info), 0);
  assert_int_equal(info->pin_host_memory, 1);
  assert_int_equal(info->pinned_bytes, 0); /* no ring yet */
  chime_server_info_free(info);

  /* shm: the server's ring, and the learner's read-only mapping of it. */
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_SHM;
  so.pin_host_memory = 1;
  rc = chime_stream_open(&s, client, "demo", &so);
  assert_int_equal(rc, 0);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_SHM);
  assert_int_equal(chime_client_stats(client, &stats), 0);
  assert_int_equal(stats->pinned_bytes, (uint64_t)SLOTS * lay.slot_bytes);
  assert_int_equal(stats->nstreams, 1);
  assert_int_equal(stats->streams[0].pinned, 1);
  chime_stats_free(stats);
  log = slurp(cli_log);
  snprintf(want, sizeof want, " %llu 9\n", (unsigned long long)lay.slot_bytes);
  assert_int_equal(count_lines(log, "register "), SLOTS);
  assert_int_equal(count_of(log, want), SLOTS);
  free(log);
  chime_stream_close(s);
  s = NULL;
  log = slurp(cli_log);
  assert_int_equal(count_lines(log, "unregister "), SLOTS);
  assert_int_equal(count_of(log, "unregister-"), 0);
  free(log);

  /* stream mode: the learner's local ring (its own, writable). */
  so.mode = CHIME_MODE_STREAM;
  rc = chime_stream_open(&s, client, "demo", &so);
  assert_int_equal(rc, 0);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  log = slurp(cli_log);
  snprintf(want, sizeof want, " %llu 1\n", (unsigned long long)lay.slot_bytes);
  assert_int_equal(count_of(log, want), SLOTS);
  free(log);
  chime_stream_close(s);
  s = NULL;
  log = slurp(cli_log);
  assert_int_equal(count_lines(log, "unregister "), 2 * SLOTS);
  free(log);

  /* The server pinned both rings (portable) and unregisters each when its
   * stream goes, before unmapping. */
  deadline = chime__now_ms() + 20000;
  for (;;) {
    log = slurp(srv_log);
    if (count_lines(log, "unregister ") >= 2 * SLOTS ||
        chime__now_ms() > deadline)
      break;
    free(log);
    chime__sleep_ms(20);
  }
  assert_int_equal(count_lines(log, "register "), 2 * SLOTS);
  assert_int_equal(count_of(log, want), 2 * SLOTS);
  assert_int_equal(count_lines(log, "unregister "), 2 * SLOTS);
  assert_int_equal(count_of(log, "unregister-"), 0);
  assert_int_equal(count_of(log, "register-fail"), 0);
  free(log);

  chime_client_destroy(client);
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  unsetenv("FAKE_CUDART_LOG");
  unsetenv("CUDA_HOME");
}

/* Pinning off: a runtime is right there, rings get created, and still no
 * CUDA library is mapped in chimed and nothing is reported pinned. */
static void test_off_maps_no_cuda(void **state) {
  chime__chimed_t d;
  chime_client_t *client = NULL;
  chime_server_info_t *info = NULL;
  chime_stats_t *stats = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_stream_local_stats_t ls;
  const uint64_t zero = 0;
  int st = 0;

  (void)state;
  setenv("CUDA_HOME", FAKE_CUDART_ROOT, 1);
  assert_int_equal(chime__chimed_start(&d, config, NULL, 30000), 0);
  unsetenv("CUDA_HOME");
  assert_int_equal(chime_client_create(&client, d.addr, NULL), 0);
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
  assert_int_equal(chime_client_info(client, &info), 0);
  assert_int_equal(info->pin_host_memory, 0);
  assert_int_equal(info->pinned_bytes, 0);
  chime_server_info_free(info);
  /* The ring is listed, with nothing pinned. */
  assert_int_equal(chime_stream_stats(s, &ls), 0);
  check_info_rings(d.addr, client, &ls.stream_id, &zero, 1);
  assert_int_equal(chime_client_stats(client, &stats), 0);
  assert_int_equal(stats->nstreams, 1);
  assert_int_equal(stats->streams[0].pinned, 0);
  assert_int_equal(stats->pinned_bytes, 0);
  chime_stats_free(stats);
  assert_false(pid_maps_cudart(d.proc.pid));
  chime_stream_close(s);
  chime_client_destroy(client);
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Pinning on: each open stream's ring is reported with slots x slot_bytes
 * pinned (two layouts, so the total is a real sum), by GetInfo and by
 * chimectl info, and a closed stream's ring leaves the report. */
static void test_info_reports_ring_footprint(void **state) {
  const char *const extra[] = {"--pin-host-memory", NULL};
  chime__chimed_t d;
  chime_client_t *client = NULL;
  chime_stream_t *a = NULL, *b = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_stream_local_stats_t ls;
  chime_ring_layout_t la, lb;
  chime_spec_t spec;
  uint64_t ids[2], want[2];
  int rc, st = 0;

  (void)state;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_ring_layout_compute(&la, &spec, BATCH, SLOTS), 0);
  assert_int_equal(chime_ring_layout_compute(&lb, &spec, 8 * BATCH, 3), 0);
  assert_true(la.slot_bytes != lb.slot_bytes);
  setenv("CUDA_HOME", FAKE_CUDART_ROOT, 1);
  rc = chime__chimed_start(&d, config, extra, 30000);
  unsetenv("CUDA_HOME");
  assert_int_equal(rc, 0);
  assert_int_equal(chime_client_create(&client, d.addr, NULL), 0);
  check_info_rings(d.addr, client, ids, want, 0);

  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&a, client, "demo", &so), 0);
  so.batch_size = 8 * BATCH;
  so.slots = 3;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&b, client, "demo", &so), 0);
  assert_int_equal(chime_stream_stats(a, &ls), 0);
  ids[0] = ls.stream_id;
  assert_int_equal(chime_stream_stats(b, &ls), 0);
  ids[1] = ls.stream_id;
  assert_true(ids[0] != ids[1]);
  want[0] = (uint64_t)SLOTS * la.slot_bytes;
  want[1] = 3u * lb.slot_bytes;
  check_info_rings(d.addr, client, ids, want, 2);

  /* The server drops a ring once its stream is gone. */
  chime_stream_close(a);
  for (int64_t end = chime__now_ms() + 20000;;) {
    chime_server_info_t *info = NULL;
    uint32_t n;

    assert_int_equal(chime_client_info(client, &info), 0);
    n = info->nrings;
    chime_server_info_free(info);
    if (n == 1 || chime__now_ms() > end)
      break;
    chime__sleep_ms(20);
  }
  check_info_rings(d.addr, client, &ids[1], &want[1], 1);

  chime_stream_close(b);
  chime_client_destroy(client);
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* examples/embedded.c: --pin-host-memory reaches chime_server_create
 * (chime_server_opts_t.pin_host_memory). With a runtime that fails to
 * initialise it exits at create with the whole error; with the fake it pins
 * the ring it serves its own learner from (slots x slot_bytes, 8 default
 * slots); without the flag nothing is pinned and no runtime is loaded. */
static void test_embedded_pins(void **state) {
  char cfg[512], errpath[512], logpath[512], line[1024], want[64];
  char *text;
  const char *pin_argv[] = {
      g_embedded, "--config",          cfg, "--batches", "2", "--batch-size",
      "4",        "--pin-host-memory", NULL};
  const char *off_argv[] = {g_embedded, "--config",     cfg, "--batches",
                            "2",        "--batch-size", "4", NULL};
  chime_ring_layout_t lay;
  chime_spec_t spec;
  chime__proc_t p;
  uint8_t sample[264] = {0};
  int st = 0;

  (void)state;
  if (g_embedded[0] == '\0')
    skip();
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_ring_layout_compute(&lay, &spec, BATCH, 8), 0);
  assert_int_equal(lay.slot_bytes % 4096, 0);
  assert_int_equal(
      chime__harness_write_file("embedded.json", config, cfg, sizeof cfg), 0);
  snprintf(errpath, sizeof errpath, "%s/embedded.err", chime__harness_tmpdir());
  snprintf(logpath, sizeof logpath, "%s/embedded.log", chime__harness_tmpdir());

  /* The option is honoured at create: a runtime that fails stops it. */
  setenv("CUDA_HOME", FAKE_CUDART_ROOT, 1);
  setenv("FAKE_CUDART_INIT_ERROR", "100", 1);
  assert_int_equal(chime__proc_spawn_err(&p, pin_argv, NULL, errpath), 0);
  unsetenv("FAKE_CUDART_INIT_ERROR");
  assert_int_equal(chime__proc_wait(&p, 30000, &st), 0);
  chime__proc_kill(&p);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  text = slurp(errpath);
  assert_in_order(
      text,
      "chime-embedded: page-locking failed: CUDA runtime: "
      "cudaErrorNoDevice (100) from cudaFree(NULL) in " FAKE_CUDART_ROOT,
      "; [sonames] not tried (runtime found earlier)", (char *)NULL);
  free(text);

  for (int pin = 1; pin >= 0; pin--) {
    chime_client_t *client = NULL;
    chime_writer_t *w = NULL;

    unlink(logpath);
    setenv("FAKE_CUDART_LOG", logpath, 1);
    assert_int_equal(chime__proc_spawn(&p, pin ? pin_argv : off_argv, NULL), 0);
    unsetenv("FAKE_CUDART_LOG");
    assert_int_equal(
        chime__proc_read_line(&p, "listening on ", line, sizeof line, 30000),
        0);
    /* Two batches' worth: the embedded learner takes them and exits. */
    assert_int_equal(chime_client_create(&client, line, NULL), 0);
    assert_int_equal(chime_writer_open(&w, client, "demo", NULL), 0);
    for (int i = 0; i < 2 * BATCH; i++)
      assert_int_equal(chime_writer_append(w, sample, sizeof sample, 1.0), 0);
    assert_int_equal(chime_writer_close(w), 0);
    chime_client_destroy(client);
    assert_int_equal(chime__proc_read_line(&p, "{", line, sizeof line, 30000),
                     0);
    fprintf(stderr, "chime-embedded%s: {%s\n", pin ? " --pin-host-memory" : "",
            line);
    snprintf(want, sizeof want, "\"pinned_bytes\":%llu}",
             pin ? 8ull * lay.slot_bytes : 0ull);
    assert_non_null(strstr(line, "\"batches\":2,"));
    assert_non_null(strstr(line, want));
    assert_int_equal(chime__proc_wait(&p, 30000, &st), 0);
    chime__proc_kill(&p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    text = slurp(logpath);
    assert_int_equal(count_lines(text, "register "), pin ? 8 : 0);
    assert_int_equal(count_lines(text, "unregister "), pin ? 8 : 0);
    assert_int_equal(count_of(text, "unregister-"), 0);
    free(text);
  }
  unsetenv("CUDA_HOME");
}

/* A directory path of about 3 KiB holding a link to the fake runtime, so
 * the pinning error (which names the library and the ladder) is longer than
 * any fixed buffer below CHIME__PIN_ERRLEN and than gRPC's default 8 KiB of
 * metadata. */
static void long_runtime_dir(char *dir, size_t len) {
  char part[241];
  size_t n;

  memset(part, 'd', sizeof part - 1);
  part[sizeof part - 1] = '\0';
  n = (size_t)snprintf(dir, len, "%s", chime__harness_tmpdir());
  for (int i = 0; i < 13; i++) {
    n += (size_t)snprintf(dir + n, len - n, "/%02d%s", i, part + 2);
    assert_true(n < len);
    assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
  }
}

/* The error of a failed second registration through the runtime in dir,
 * whole: every part in order up to the ladder's last rung, and nothing
 * secret. */
static void assert_whole_pin_error(int rc, const char *err, const char *prefix,
                                   const char *flags, const char *dir) {
  static char head[512], lib[4200], rung[8500];
  const char *tail = "; [sonames] not tried (runtime found earlier)";

  fprintf(stderr, "open: %s (%zu bytes): %.300s...\n", chime_err_name(rc),
          strlen(err), err);
  assert_int_equal(rc, CHIME_ECUDA);
  assert_true(strlen(err) > 3 * strlen(dir)); /* it names dir 3 times */
  snprintf(head, sizeof head,
           "%spage-locking failed: cudaErrorMemoryAllocation (2) from "
           "cudaHostRegister(",
           prefix);
  snprintf(lib, sizeof lib, "%s/libcudart.so.13", dir);
  snprintf(rung, sizeof rung, "[CHIME_CUDART=%s] loaded %s", dir, lib);
  assert_true(strncmp(err, head, strlen(head)) == 0);
  assert_in_order(err, head, flags, ") for range 2 of 4 in ", lib,
                  "; the 1 range(s) registered before it were unregistered",
                  "; ladder: [loaded] ", rung, "; [CUDA_HOME] ",
                  "; [python wheels] ", (char *)NULL);
  assert_true(strlen(err) > strlen(tail));
  assert_string_equal(err + strlen(err) - strlen(tail), tail);
  assert_null(strstr(err, "memfd"));
  assert_null(strstr(err, "token"));
  assert_null(strstr(err, "/proc/"));
}

/* The server pins each ring it creates; when that fails the learner gets
 * the CUDA error (the server's paths stay in the server's log) and the
 * server keeps serving; a learner's own pinning error reaches it whole
 * (CUDA error, library, every rung), not a prefix of it, and no secret. */
static void test_ring_pin_error_reaches_client(void **state) {
  const char *const extra[] = {"--pin-host-memory", NULL};
  static char dir[4096], lib[4200];
  chime__chimed_t d;
  chime_client_t *client = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  int rc, st = 0;

  (void)state;
  long_runtime_dir(dir, sizeof dir);
  snprintf(lib, sizeof lib, "%s/libcudart.so.13", dir);
  assert_true(symlink(FAKE_CUDART_FILE, lib) == 0 || errno == EEXIST);
  setenv("CHIME_CUDART", dir, 1);
  setenv("FAKE_CUDART_FAIL_REGISTER_AT", "2", 1); /* mid-ring: rollback */
  rc = chime__chimed_start(&d, config, extra, 30000);
  unsetenv("FAKE_CUDART_FAIL_REGISTER_AT");
  unsetenv("CHIME_CUDART");
  assert_int_equal(rc, 0);

  assert_int_equal(chime_client_create(&client, d.addr, NULL), 0);
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_SHM;
  rc = chime_stream_open(&s, client, "demo", &so);
  assert_null(s);
  /* The server's report names its library paths: the learner gets the CUDA
   * error and a pointer to the server's log (test_e2e_budget checks that
   * log), never the paths. */
  assert_int_equal(rc, CHIME_ECUDA);
  assert_non_null(strstr(chime_last_error(),
                         "page-locking the ring failed on the server: "
                         "cudaErrorMemoryAllocation (2); see the server log"));
  assert_null(strstr(chime_last_error(), "dddd"));

  /* Still serving, and the next ring pins (the fake fails one call only). */
  rc = chime_stream_open(&s, client, "demo", &so);
  assert_int_equal(rc, 0);
  chime_stream_close(s);
  s = NULL;

  /* The learner's own pinning of its read-only mapping, failing the same
   * way in this process: its last error holds all of that too. This test
   * runs before any other that pins in this process (the ladder runs once
   * per process). */
  setenv("CHIME_CUDART", dir, 1);
  setenv("FAKE_CUDART_FAIL_REGISTER_AT", "2", 1);
  so.pin_host_memory = 1;
  rc = chime_stream_open(&s, client, "demo", &so);
  unsetenv("FAKE_CUDART_FAIL_REGISTER_AT");
  unsetenv("CHIME_CUDART");
  assert_null(s);
  assert_whole_pin_error(rc, chime_last_error(),
                         "pin_host_memory: ", "portable|read-only", dir);
  chime_client_destroy(client);
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_real_runtime_no_driver,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_fake_init_failure,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_nothing_found, chime__harness_teardown),
      cmocka_unit_test_teardown(test_off_maps_no_cuda, chime__harness_teardown),
      /* Before any other test that pins in this process. */
      cmocka_unit_test_teardown(test_ring_pin_error_reaches_client,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_pins_rings_end_to_end,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_info_reports_ring_footprint,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_embedded_pins, chime__harness_teardown),
  };

  if (chime__harness_bin("src/server/chimed", g_chimed, sizeof g_chimed) ==
      NULL) {
    fprintf(stderr, "skip: chimed is not built\n");
    return 77;
  }
  if (chime__harness_bin("examples/chimectl", g_chimectl, sizeof g_chimectl) ==
      NULL)
    g_chimectl[0] = '\0';
  if (chime__harness_bin("examples/chime-embedded", g_embedded,
                         sizeof g_embedded) == NULL)
    g_embedded[0] = '\0';
  return cmocka_run_group_tests(tests, NULL, NULL);
}
