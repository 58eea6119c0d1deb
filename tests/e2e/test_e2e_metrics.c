/* The Prometheus endpoint of a real chimed: GET /metrics answers text that
 * parses line by line (HELP and TYPE before every family, names and labels
 * as Prometheus wants them, every value a number) with the figures Stats
 * would give, every sample labelled with the server's shard; other paths
 * and methods, garbage requests and a flood of idle connections get an
 * answer or are dropped without harm; a connection trickling a byte at a
 * time is closed at its deadline, and more trickling connections than the
 * cap never hold a scrape out; a bad address is a clear startup error. */
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
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
           "{\"metrics\": \"127.0.0.1:0\", \"shard\": 4, \"checkpoint\": "
           "{\"dir\": "
           "\"%s/ckpt\"}, \"tables\": [{\"name\": \"demo\", "
           "\"spec\": \"x:u64[]\", \"capacity\": 1000, \"sampler\": "
           "\"uniform\"},"
           " {\"name\": \"q.2\", \"spec\": \"x:u64[]\", \"capacity\": 10}]}",
           chime__harness_tmpdir());
  int rc = chime__chimed_start_or_skip(&chimed, cfg, NULL, 30000);
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

/* Reads fd to its end and closes it: the bytes, NUL-terminated, in *len
 * and malloc'd; NULL when a recv failed (a timeout: SO_RCVTIMEO 10 s). */
static char *recv_all(int fd, size_t *lenp) {
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
    if (n < 0) {
      free(buf);
      close(fd);
      return NULL;
    }
    if (n == 0)
      break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  close(fd);
  *lenp = len;
  return buf;
}

/* Sends req as is and reads the whole answer (HTTP/1.0: the server closes).
 * Returns the malloc'd response, "" when the server closed without one. */
static char *http(const char *req, size_t reqlen) {
  int fd = connect_metrics();
  assert_int_equal(send(fd, req, reqlen, MSG_NOSIGNAL), (ssize_t)reqlen);
  size_t len;
  char *buf = recv_all(fd, &len);
  assert_non_null(buf); /* a timeout (10 s) is a failure */
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
  int samples, unsharded; /* sample lines; those without shard="4" first */
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
    s->samples++;
    if (strncmp(labels, "{shard=\"4\"", strlen("{shard=\"4\"")) != 0) {
      fprintf(stderr, "not labelled shard=\"4\": %s\n", line);
      s->unsharded++;
    }
    if (strcmp(name, "chime_table_inserts_total") == 0 &&
        strcmp(labels, "{shard=\"4\",table=\"demo\"}") == 0)
      s->inserts_demo = v;
    if (strcmp(name, "chime_table_size") == 0 &&
        strcmp(labels, "{shard=\"4\",table=\"demo\"}") == 0)
      s->size_demo = v;
    if (strcmp(name, "chime_table_size") == 0 &&
        strcmp(labels, "{shard=\"4\",table=\"q.2\"}") == 0)
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
  assert_true(seen.samples >= seen.nfamilies);
  assert_int_equal(seen.unsharded, 0);

  assert_int_equal(chime_stream_release(s, &b), 0);
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
  assert_int_equal(chime_client_info(client, &info), 0);
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

/* What src/server/metrics.c promises: a connection is closed this long
 * after its accept, whatever it sends, and at most this many are served
 * at once. */
#define DEADLINE_MS 5000
#define CAP 16

/* A connection that has sent the start of a request and goes on one byte
 * at a time, never finishing its headers. -1 when the connect failed. */
static int trickle_open(void) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)atoi(strrchr(metrics_addr, ':') + 1));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  const char head[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One more byte; 0 while the server keeps the connection, -1 once it has
 * closed it (an end or a reset to read, or a send that fails). */
static int trickle_byte(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 0) > 0) {
    char b[64];
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && errno == EAGAIN))
      return -1;
  }
  return send(fd, "a", 1, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* A byte every 200 ms, far inside libmicrohttpd's idle timeout: the
 * connection is closed by the server at its deadline, not kept for as
 * long as the bytes come (it used to be: the idle timeout restarted with
 * every byte). */
static void test_trickle_closed_at_deadline(void **state) {
  (void)state;
  int fd = trickle_open();
  assert_true(fd >= 0);
  int64_t t0 = chime__now_ms(), closed = -1;
  while (chime__now_ms() - t0 < 3 * DEADLINE_MS) {
    if (trickle_byte(fd) != 0) {
      closed = chime__now_ms() - t0;
      break;
    }
    chime__sleep_ms(200);
  }
  close(fd);
  fprintf(stderr, "trickling connection closed after %lld ms\n",
          (long long)closed);
  assert_true(closed >= 0);
  assert_true(closed >= DEADLINE_MS - 1000 && closed <= DEADLINE_MS + 3000);
}

enum { TRICKLERS = CAP + 8 };

typedef struct {
  int fd[TRICKLERS];
  atomic_int stop;
  atomic_long bytes, closed, reopened, rounds;
} flood_t;

/* Keeps TRICKLERS connections trickling, opening a new one in place of
 * each the server closes, until told to stop. */
static void *flood_main(void *arg) {
  flood_t *f = arg;
  while (!atomic_load(&f->stop)) {
    for (int i = 0; i < TRICKLERS; i++) {
      if (f->fd[i] >= 0 && trickle_byte(f->fd[i]) == 0) {
        atomic_fetch_add(&f->bytes, 1);
        continue;
      }
      if (f->fd[i] >= 0) {
        close(f->fd[i]);
        atomic_fetch_add(&f->closed, 1);
      }
      f->fd[i] = trickle_open();
      if (f->fd[i] >= 0)
        atomic_fetch_add(&f->reopened, 1);
    }
    atomic_fetch_add(&f->rounds, 1);
    chime__sleep_ms(200);
  }
  return NULL;
}

/* One GET /metrics: its response, or NULL when the connection was refused,
 * reset or closed without an answer, or nothing came within 10 s. */
static char *try_get_metrics(void) {
  const char req[] = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  int fd = connect_metrics(); /* SO_RCVTIMEO 10 s */
  if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) !=
      (ssize_t)sizeof(req) - 1) {
    close(fd);
    return NULL;
  }
  size_t len;
  char *buf = recv_all(fd, &len);
  if (buf == NULL)
    return NULL;
  if (len == 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* More trickling connections than the cap, reopened as soon as the server
 * closes one: a scrape still gets its answer within 10 s while they go
 * on (it used to wait behind them for as long as they trickled). */
static void test_trickle_flood_scrape(void **state) {
  (void)state;
  flood_t f;
  memset(&f, 0, sizeof(f));
  for (int i = 0; i < TRICKLERS; i++)
    f.fd[i] = trickle_open();
  atomic_init(&f.stop, 0);
  atomic_init(&f.bytes, 0);
  atomic_init(&f.closed, 0);
  atomic_init(&f.reopened, 0);
  atomic_init(&f.rounds, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, flood_main, &f), 0);
  chime__sleep_ms(1500); /* every slot held, the oldest past any grace */
  long bytes0 = atomic_load(&f.bytes);
  int64_t t0 = chime__now_ms(), took = -1;
  int tries = 0;
  while (took < 0 && chime__now_ms() - t0 < 10000) {
    char *r = try_get_metrics();
    tries++;
    if (r != NULL && status_of(r) == 200 &&
        strstr(body_of(r), "chime_table_size") != NULL)
      took = chime__now_ms() - t0;
    free(r);
    if (took < 0)
      chime__sleep_ms(100);
  }
  /* The trickle goes on past the scrape: a whole round of the flood that
   * began after the answer still trickles (a scrape answered within a
   * millisecond falls between two rounds, 200 ms apart, so the bytes of
   * the scrape's own span alone may be none, as they were once under
   * load). */
  long r0 = atomic_load(&f.rounds);
  int64_t t1 = chime__now_ms();
  while (atomic_load(&f.rounds) < r0 + 2 && chime__now_ms() - t1 < 10000)
    chime__sleep_ms(10);
  long during = atomic_load(&f.bytes) - bytes0;
  atomic_store(&f.stop, 1);
  pthread_join(th, NULL);
  for (int i = 0; i < TRICKLERS; i++)
    if (f.fd[i] >= 0)
      close(f.fd[i]);
  fprintf(stderr,
          "scrape answered after %lld ms (%d tries) beside %d trickling "
          "connections (cap %d): %ld bytes trickled from before it to two "
          "flood rounds after, %ld closed "
          "by the server\n",
          (long long)took, tries, TRICKLERS, CAP, during,
          atomic_load(&f.closed));
  assert_true(took >= 0);
  assert_true(during > 0); /* the trickle went on meanwhile */
  assert_true(atomic_load(&f.rounds) >= r0 + 2);
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
      cmocka_unit_test(test_trickle_closed_at_deadline),
      cmocka_unit_test(test_trickle_flood_scrape),
      cmocka_unit_test(test_bad_address),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
