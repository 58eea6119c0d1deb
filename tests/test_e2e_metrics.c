/* The Prometheus endpoint of a real chimed: GET /metrics answers text that
 * parses line by line (HELP and TYPE before every family, names and labels
 * as Prometheus wants them, every value a number) with the figures Stats
 * would give; other paths and methods, garbage requests and a flood of
 * idle connections get an answer or are dropped without harm; a bad
 * address is a clear startup error. */
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

static chime__chimed_t chimed;
static char metrics_addr[128];
static chime_client_t *client;

static int setup(void **state) {
  (void)state;
  static char cfg[1024];
  snprintf(cfg, sizeof(cfg),
           "{\"metrics\": \"127.0.0.1:0\", \"checkpoint\": {\"dir\": "
           "\"%s/ckpt\"}, \"tables\": [{\"name\": \"demo\", "
           "\"spec\": \"x:u64[]\", \"capacity\": 1000, \"sampler\": "
           "\"uniform\"},"
           " {\"name\": \"q.2\", \"spec\": \"x:u64[]\", \"capacity\": 10}]}",
           chime__harness_tmpdir());
  int rc = chime__chimed_start(&chimed, cfg, NULL, 30000);
  if (rc == CHIME_ENOTFOUND)
    chime__skip("chimed is not built");
  if (rc != 0)
    return -1;
  if (chime__proc_read_line(&chimed.proc, "metrics on ", metrics_addr,
                            sizeof(metrics_addr), 10000) != 0)
    return -1;
  return chime_client_create(&client, chimed.addr, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return chime__chimed_stop_client(&chimed, client);
}

static int connect_metrics(void) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  const char *colon = strrchr(metrics_addr, ':');
  assert_non_null(colon);
  a.sin_port = htons((uint16_t)atoi(colon + 1));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  return fd;
}

/* Sends req as is and reads the whole answer (HTTP/1.0: the server closes).
 * Returns the malloc'd response, "" when the server closed without one. */
static char *http(const char *req, size_t reqlen) {
  int fd = connect_metrics();
  assert_int_equal(send(fd, req, reqlen, MSG_NOSIGNAL), (ssize_t)reqlen);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    if (len + 1 == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
    if (n < 0 && errno == EINTR)
      continue;
    assert_true(n >= 0); /* a timeout (10 s) is a failure */
    if (n == 0)
      break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  close(fd);
  return buf;
}

static char *get(const char *path) {
  char req[256];
  int n =
      snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
  return http(req, (size_t)n);
}

static int status_of(const char *resp) {
  int code = 0;
  if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1)
    return -1;
  return code;
}

static const char *body_of(const char *resp) {
  const char *b = strstr(resp, "\r\n\r\n");
  assert_non_null(b);
  return b + 4;
}

static int name_char(int c, int first) {
  return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

/* One sample line: name, optional {k="v",...}, a space, a number. Fills
 * name (up to 127 chars) and the label text; returns the value. */
static double parse_sample(const char *line, char *name, char *labels) {
  const char *p = line;
  size_t n = 0;
  assert_true(name_char((unsigned char)*p, 1));
  while (name_char((unsigned char)*p, 0) && n < 127)
    name[n++] = *p++;
  name[n] = '\0';
  labels[0] = '\0';
  if (*p == '{') {
    const char *start = p;
    p++;
    while (*p != '}') {
      assert_true(name_char((unsigned char)*p, 1));
      while (name_char((unsigned char)*p, 0))
        p++;
      assert_int_equal(*p++, '=');
      assert_int_equal(*p++, '"');
      while (*p != '"') {
        assert_true(*p != '\0' && *p != '\n');
        if (*p == '\\') {
          p++;
          assert_true(*p == '\\' || *p == '"' || *p == 'n');
        }
        p++;
      }
      p++;
      if (*p == ',')
        p++;
      else
        assert_int_equal(*p, '}');
    }
    p++;
    snprintf(labels, 512, "%.*s", (int)(p - start), start);
  }
  assert_int_equal(*p++, ' ');
  char *end;
  errno = 0;
  double v = strtod(p, &end);
  assert_int_equal(errno, 0);
  assert_true(end != p && *end == '\0');
  return v;
}

typedef struct {
  double inserts_demo, size_demo, streams, batches_total, checkpoints;
  int saw_ckpt_age;
  int saw_q2, nfamilies;
} seen_t;

/* Every line of the exposition checked; what the test looks for noted. */
static void parse_all(const char *body, seen_t *s) {
  char typed[64][128];
  int ntyped = 0;
  memset(s, 0, sizeof(*s));
  char *copy = strdup(body);
  assert_non_null(copy);
  for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    char name[128], labels[512], kind[32];
    if (strncmp(line, "# HELP ", 7) == 0) {
      assert_true(name_char((unsigned char)line[7], 1));
      continue;
    }
    if (strncmp(line, "# TYPE ", 7) == 0) {
      assert_int_equal(sscanf(line + 7, "%127s %31s", name, kind), 2);
      assert_true(strcmp(kind, "gauge") == 0 || strcmp(kind, "counter") == 0);
      if (strcmp(kind, "counter") == 0)
        assert_non_null(strstr(name, "_total"));
      assert_true(ntyped < 64);
      snprintf(typed[ntyped++], sizeof(typed[0]), "%s", name);
      continue;
    }
    assert_true(line[0] != '#');
    double v = parse_sample(line, name, labels);
    assert_true(v >= 0);
    assert_true(ntyped > 0);
    assert_string_equal(name, typed[ntyped - 1]); /* in its family */
    if (strcmp(name, "chime_table_inserts_total") == 0 &&
        strcmp(labels, "{table=\"demo\"}") == 0)
      s->inserts_demo = v;
    if (strcmp(name, "chime_table_size") == 0 &&
        strcmp(labels, "{table=\"demo\"}") == 0)
      s->size_demo = v;
    if (strcmp(name, "chime_table_size") == 0 &&
        strcmp(labels, "{table=\"q.2\"}") == 0)
      s->saw_q2 = 1;
    if (strcmp(name, "chime_streams") == 0)
      s->streams = v;
    if (strcmp(name, "chime_checkpoints_total") == 0)
      s->checkpoints = v;
    if (strcmp(name, "chime_checkpoint_age_seconds") == 0)
      s->saw_ckpt_age = 1;
    if (strcmp(name, "chime_stream_batches_total") == 0)
      s->batches_total += v;
  }
  s->nfamilies = ntyped;
  free(copy);
}

static void test_scrape_matches_stats(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "demo", NULL), 0);
  for (uint64_t x = 0; x < 100; x++)
    assert_int_equal(chime_writer_append(w, &x, sizeof x, 1.0), 0);
  assert_int_equal(chime_writer_close(w), 0);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 10;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  chime_batch_t b;
  assert_int_equal(chime_stream_open(&s, client, "demo", &so), 0);
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(chime_client_checkpoint(client, NULL), 0);

  char *resp = get("/metrics");
  assert_int_equal(status_of(resp), 200);
  assert_non_null(strstr(resp, "text/plain; version=0.0.4"));
  seen_t seen;
  parse_all(body_of(resp), &seen);
  free(resp);
  assert_int_equal((int)seen.inserts_demo, 100);
  assert_int_equal((int)seen.size_demo, 100);
  assert_int_equal((int)seen.streams, 1);
  assert_true(seen.batches_total >= 1);
  assert_true(seen.saw_q2);
  assert_int_equal((int)seen.checkpoints, 1);
  assert_true(seen.saw_ckpt_age);
  assert_true(seen.nfamilies >= 20);

  assert_int_equal(chime_batch_release(s, &b), 0);
  chime_stream_close(s);
}

static void test_bad_requests_answered(void **state) {
  (void)state;
  char *r = get("/");
  assert_int_equal(status_of(r), 404);
  free(r);
  r = get("/metrics/../etc/passwd");
  assert_int_equal(status_of(r), 404);
  free(r);
  const char post[] = "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc";
  r = http(post, sizeof(post) - 1);
  assert_int_equal(status_of(r), 405);
  free(r);
  /* Not HTTP at all: an error status or a closed connection. */
  const char junk[] = "\x01\x02\x03 garbage \xff\xfe\r\n\r\n";
  r = http(junk, sizeof(junk) - 1);
  assert_true(r[0] == '\0' || status_of(r) >= 400);
  free(r);
  r = get("/metrics");
  assert_int_equal(status_of(r), 200);
  free(r);
}

/* Idle connections past the endpoint's limit leave the gRPC service
 * alone, and scrapes work again once they are gone. */
static void test_idle_flood(void **state) {
  (void)state;
  int fds[40];
  for (int i = 0; i < 40; i++)
    fds[i] = connect_metrics();
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(&info, client), 0);
  chime_server_info_free(info);
  for (int i = 0; i < 40; i++)
    close(fds[i]);
  int ok = 0;
  for (int64_t end = chime__now_ms() + 20000; !ok && chime__now_ms() < end;) {
    char *r = get("/metrics");
    ok = status_of(r) == 200;
    free(r);
    if (!ok)
      chime__sleep_ms(100);
  }
  assert_true(ok);
}

/* A metrics address that is not host:port stops chimed at start (exit 2),
 * saying so. */
static void test_bad_address(void **state) {
  (void)state;
  const char *args[] = {"--metrics", "nonsense", NULL};
  chime__chimed_t d;
  int rc = chime__chimed_start(&d, NULL, args, 5000);
  assert_int_not_equal(rc, 0);
  int st = -1;
  assert_int_equal(chime__proc_wait(&d.proc, 10000, &st), 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scrape_matches_stats),
      cmocka_unit_test(test_bad_requests_answered),
      cmocka_unit_test(test_idle_flood),
      cmocka_unit_test(test_bad_address),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
