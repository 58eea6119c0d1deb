/* Prometheus metrics (metrics.h). Names follow Prometheus conventions:
 * counters end in _total, times are in seconds, sizes in bytes. One
 * snapshot of Stats per scrape, taken as the Stats rpc takes it.
 *
 * Connections: libmicrohttpd's own timeout is an idle one, restarted by
 * every byte, so a client sending one byte a second held a connection for
 * ever, and MAX_CONNECTIONS of them held every scrape out. So each
 * connection carries one request (answers say "Connection: close") and
 * gets REQUEST_DEADLINE_MS from its accept, whatever it sends, after
 * which a reaper thread shuts its socket down (libmicrohttpd then sees
 * the end of it and closes it). And past MAX_CONNECTIONS a new connection
 * takes the place of the oldest one whose request is not in yet, once
 * that one has had EVICT_AFTER_MS: the newest is the one most likely to be
 * a scrape (whose request comes with it), a request that is in is being
 * answered and is soon gone, and the grace gives a new connection time to
 * send its request before a newer one may evict it. */
#include "server/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "chime/errors.h"
#include "chime/stats.h"
#include "common/clock.h"
#include "common/errfmt.h"
#include "server/info.h"

/* Connections served at once (docs/operations.md, Prometheus). */
#define MAX_CONNECTIONS 16
/* libmicrohttpd's own cap, above ours so that a new connection is still
 * accepted (and can evict the oldest) while shut-down ones are being
 * closed; it bounds the descriptors the endpoint holds. */
#define ACCEPTED_MAX (2 * MAX_CONNECTIONS)
/* From accept to the end of the answer, whatever the client sends. */
#define REQUEST_DEADLINE_MS 5000
/* How long a new connection is safe from eviction: time to send its
 * request. */
#define EVICT_AFTER_MS 500

typedef struct {
  int used;
  int fd;
  int shut;      /* shut down by us: closing, no longer counted */
  int answering; /* its request is in: never evicted */
  uint64_t start_ms;
} conn_t;

struct chime__metrics_s {
  chime_server_t *srv;
  struct MHD_Daemon *d;
  int fd;
  /* The connections libmicrohttpd has, filled and emptied by its notify
   * callback (its thread), read by the reaper; under mu. A socket is shut
   * down only while its entry is used: libmicrohttpd calls CLOSED before
   * it closes the descriptor, so the number is never someone else's. */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  pthread_t reaper;
  int reaper_live, stop;
  conn_t conns[ACCEPTED_MAX];
};

/* Under mu. The peer sees the connection end; libmicrohttpd, polling the
 * socket, reads its end and closes it. */
static void shut(conn_t *c) {
  shutdown(c->fd, SHUT_RDWR);
  c->shut = 1;
}

static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  chime__metrics_t *m = cls;
  if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    conn_t *c = *socket_context;
    if (c != NULL) {
      pthread_mutex_lock(&m->mu);
      c->used = 0;
      pthread_mutex_unlock(&m->mu);
      *socket_context = NULL;
    }
    return;
  }
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  *socket_context = NULL;
  if (ci == NULL)
    return;
  int fd = ci->connect_fd;
  uint64_t now = (uint64_t)chime__now_ms();
  pthread_mutex_lock(&m->mu);
  conn_t *mine = NULL, *oldest = NULL;
  unsigned live = 0;
  for (size_t i = 0; i < ACCEPTED_MAX; i++) {
    conn_t *c = &m->conns[i];
    if (!c->used) {
      if (mine == NULL)
        mine = c;
      continue;
    }
    if (c->shut)
      continue;
    live++;
    if (!c->answering && (oldest == NULL || c->start_ms < oldest->start_ms))
      oldest = c;
  }
  if (mine == NULL) { /* cannot happen below ACCEPTED_MAX: refused */
    shutdown(fd, SHUT_RDWR);
  } else {
    mine->used = 1;
    mine->fd = fd;
    mine->shut = 0;
    mine->answering = 0;
    mine->start_ms = now;
    *socket_context = mine;
    if (live >= MAX_CONNECTIONS) {
      if (oldest != NULL && now - oldest->start_ms >= EVICT_AFTER_MS)
        shut(oldest);
      else
        shut(mine);
    }
    pthread_cond_signal(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
}

/* Shuts down every connection at its deadline. */
static void *reaper_main(void *arg) {
  chime__metrics_t *m = arg;
  pthread_setname_np(pthread_self(), "chime-metrics");
  pthread_mutex_lock(&m->mu);
  while (!m->stop) {
    uint64_t now = (uint64_t)chime__now_ms(), next = UINT64_MAX;
    for (size_t i = 0; i < ACCEPTED_MAX; i++) {
      conn_t *c = &m->conns[i];
      if (!c->used || c->shut)
        continue;
      uint64_t due = c->start_ms + REQUEST_DEADLINE_MS;
      if (due <= now)
        shut(c);
      else if (due < next)
        next = due;
    }
    if (next == UINT64_MAX) {
      pthread_cond_wait(&m->cv, &m->mu);
      continue;
    }
    struct timespec ts = chime__clock_after_ms(CLOCK_MONOTONIC, next - now);
    pthread_cond_timedwait(&m->cv, &m->mu, &ts);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

/* A growing text buffer; out of memory sticks. */
typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} text_t;

static void put(text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *fmt, ...) {
  for (;;) {
    if (t->oom)
      return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = 1;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)n;
    char *p = realloc(t->p, cap);
    if (p == NULL) {
      t->oom = 1;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
}

/* A label value: backslash, quote and newline escaped. */
static void put_label(text_t *t, const char *v) {
  for (; *v != '\0'; v++) {
    if (*v == '\\' || *v == '"')
      put(t, "\\%c", *v);
    else if (*v == '\n')
      put(t, "\\n");
    else
      put(t, "%c", *v);
  }
}

static void head(text_t *t, const char *name, const char *type,
                 const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One field of a stats list (chime/stats.h) in its message. */
typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_NONE } kind_t;
typedef enum { UNIT_COUNT, UNIT_NS, UNIT_BYTES, UNIT_FLAG } unit_t;

typedef struct {
  const char *field, *help;
  kind_t kind;
  unit_t unit;
  size_t off, size; /* of the field in the message: 4 or 8 bytes */
} metric_t;

#define METRIC(msg, type, name, kind, unit, help)                              \
  {#name,                                                                      \
   help,                                                                       \
   KIND_##kind,                                                                \
   UNIT_##unit,                                                                \
   offsetof(msg, name),                                                        \
   sizeof(((msg *)0)->name)},
#define TABLE_METRIC(type, name, kind, unit, help)                             \
  METRIC(Chime__V1__TableStats, type, name, kind, unit, help)
#define STREAM_METRIC(type, name, kind, unit, help)                            \
  METRIC(Chime__V1__StreamStats, type, name, kind, unit, help)
#define SERVER_METRIC(type, name, kind, unit, help)                            \
  METRIC(Chime__V1__StatsResponse, type, name, kind, unit, help)
static const metric_t table_metrics[] = {
    CHIME_TABLE_STATS_FIELDS(TABLE_METRIC)};
static const metric_t stream_metrics[] = {
    CHIME_STREAM_STATS_FIELDS(STREAM_METRIC)};
static const metric_t server_metrics[] = {
    CHIME_SERVER_STATS_FIELDS(SERVER_METRIC)};

static int ends_with(const char *s, size_t n, const char *end) {
  size_t e = strlen(end);
  return n >= e && memcmp(s + n - e, end, e) == 0;
}

/* The metric's name from the field's (chime/stats.h): an NS field's
 * _ns becomes _seconds, a BYTES field ends in _bytes, a gauge drops a
 * trailing _total and a counter gains one. */
static void metric_name(char *buf, size_t len, const char *prefix,
                        const metric_t *m) {
  size_t n = strlen(m->field);
  if (m->kind == KIND_GAUGE && ends_with(m->field, n, "_total"))
    n -= strlen("_total");
  if (m->unit == UNIT_NS && ends_with(m->field, n, "_ns"))
    n -= strlen("_ns");
  snprintf(buf, len, "%s%.*s%s%s", prefix, (int)n, m->field,
           m->unit == UNIT_NS ? "_seconds"
           : m->unit == UNIT_BYTES && !ends_with(m->field, n, "bytes")
               ? "_bytes"
               : "",
           m->kind == KIND_COUNTER ? "_total" : "");
}

static void put_value(text_t *t, const void *msg, const metric_t *m) {
  const char *p = (const char *)msg + m->off;
  uint64_t v;
  if (m->size == sizeof(uint32_t)) {
    uint32_t u;
    memcpy(&u, p, sizeof(u));
    v = u;
  } else {
    memcpy(&v, p, sizeof(v));
  }
  if (m->unit == UNIT_NS)
    put(t, " %.9f\n", (double)v * 1e-9);
  else
    put(t, " %llu\n", (unsigned long long)v);
}

static const char *mode_name(Chime__V1__Mode m) {
  return m == CHIME__V1__MODE__MODE_SHM ? "shm" : "stream";
}

/* Every sample's labels open with the server's shard (0: unsharded), so
 * that series scraped from many shards stay apart and sum by table. */
static void table_labels(text_t *t, uint32_t shard, const void *msg) {
  const Chime__V1__TableStats *m = msg;
  put(t, "{shard=\"%u\",table=\"", shard);
  put_label(t, m->name);
  put(t, "\"}");
}

static void stream_labels(text_t *t, uint32_t shard, const void *msg) {
  const Chime__V1__StreamStats *s = msg;
  put(t, "{shard=\"%u\",stream=\"%llu\",table=\"", shard,
      (unsigned long long)s->stream_id);
  put_label(t, s->table);
  put(t, "\",mode=\"%s\"}", mode_name(s->mode));
}

static void server_labels(text_t *t, uint32_t shard, const void *msg) {
  (void)msg;
  put(t, "{shard=\"%u\"}", shard);
}

static const void *table_at(const Chime__V1__StatsResponse *r, size_t i) {
  return r->tables[i];
}

static const void *stream_at(const Chime__V1__StatsResponse *r, size_t i) {
  return r->streams[i];
}

static const void *server_at(const Chime__V1__StatsResponse *r, size_t i) {
  (void)i;
  return r;
}

/* One family per metric of a list (HELP, TYPE), and its value in each of
 * the n messages at(r, i), labelled by labels. */
static void
families(text_t *t, const char *prefix, const metric_t *ms, size_t nm,
         const Chime__V1__StatsResponse *r, uint32_t shard,
         const void *(*at)(const Chime__V1__StatsResponse *r, size_t i),
         size_t n, void (*labels)(text_t *t, uint32_t shard, const void *msg)) {
  char name[128];
  for (size_t k = 0; k < nm; k++) {
    const metric_t *m = &ms[k];
    if (m->kind == KIND_NONE)
      continue;
    metric_name(name, sizeof(name), prefix, m);
    head(t, name, m->kind == KIND_COUNTER ? "counter" : "gauge", m->help);
    for (size_t i = 0; i < n; i++) {
      const void *msg = at(r, i);
      put(t, "%s", name);
      labels(t, shard, msg);
      put_value(t, msg, m);
    }
  }
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Per compressed leaf of each table (TableStats.leaf_bytes), labelled by
 * table and leaf: a family each, written even when no table compresses
 * (HELP and TYPE only), so a dashboard's queries always name a family. */
static void leaf_families(text_t *t, const Chime__V1__StatsResponse *r,
                          uint32_t shard) {
  static const struct {
    const char *name, *type, *help;
  } fam[] = {
      {"chime_table_leaf_raw_bytes", "gauge",
       "Bytes of a compressed leaf of the items held, as inserted."},
      {"chime_table_leaf_stored_bytes", "gauge",
       "Bytes the table keeps for a compressed leaf (u32 sizes included)."},
      {"chime_table_leaf_stored_raw_total", "counter",
       "A compressed leaf's values kept raw: compression did not shrink "
       "them."},
  };
  size_t leaves = 0;
  for (size_t i = 0; i < r->n_tables; i++)
    leaves += r->tables[i]->n_leaf_bytes;
  if (leaves == 0) /* no compressed leaf: no families without a sample */
    return;
  for (size_t f = 0; f < N(fam); f++) {
    head(t, fam[f].name, fam[f].type, fam[f].help);
    for (size_t i = 0; i < r->n_tables; i++)
      for (size_t k = 0; k < r->tables[i]->n_leaf_bytes; k++) {
        const Chime__V1__LeafBytes *lb = r->tables[i]->leaf_bytes[k];
        uint64_t v = f == 0   ? lb->raw_bytes
                     : f == 1 ? lb->stored_bytes
                              : lb->stored_raw;
        put(t, "%s{shard=\"%u\",table=\"", fam[f].name, shard);
        put_label(t, r->tables[i]->name);
        put(t, "\",leaf=\"");
        put_label(t, lb->leaf);
        put(t, "\"} %llu\n", (unsigned long long)v);
      }
  }
}

char *chime__metrics_format(const Chime__V1__StatsResponse *r, uint32_t shard) {
  text_t t = {malloc(4096), 0, 4096, 0};
  if (t.p == NULL)
    return NULL;
  t.p[0] = '\0';
  families(&t, "chime_table_", table_metrics, N(table_metrics), r, shard,
           table_at, r->n_tables, table_labels);
  leaf_families(&t, r, shard);
  families(&t, "chime_stream_", stream_metrics, N(stream_metrics), r, shard,
           stream_at, r->n_streams, stream_labels);
  head(&t, "chime_streams", "gauge", "Streams open now.");
  put(&t, "chime_streams{shard=\"%u\"} %zu\n", shard, r->n_streams);
  families(&t, "chime_", server_metrics, N(server_metrics), r, shard, server_at,
           1, server_labels);
  head(&t, "chime_checkpoints_total", "counter",
       "Checkpoints written since start.");
  put(&t, "chime_checkpoints_total{shard=\"%u\"} %llu\n", shard,
      (unsigned long long)r->checkpoints);
  head(&t, "chime_checkpoint_failures_total", "counter",
       "Checkpoints that failed since start.");
  put(&t, "chime_checkpoint_failures_total{shard=\"%u\"} %llu\n", shard,
      (unsigned long long)r->checkpoint_failures);
  if (r->checkpoint_last_unix_ns != 0) { /* absent until the first one */
    double age = (double)chime__clock_ns(CLOCK_REALTIME) / 1e9 -
                 (double)r->checkpoint_last_unix_ns / 1e9;
    head(&t, "chime_checkpoint_age_seconds", "gauge",
         "Seconds since the last checkpoint was written.");
    put(&t, "chime_checkpoint_age_seconds{shard=\"%u\"} %.3f\n", shard,
        age > 0 ? age : 0.0);
    head(&t, "chime_checkpoint_last_duration_seconds", "gauge",
         "How long the last checkpoint took, DONE included.");
    put(&t, "chime_checkpoint_last_duration_seconds{shard=\"%u\"} %.6f\n",
        shard, (double)r->checkpoint_last_duration_ns / 1e9);
    head(&t, "chime_checkpoint_last_pause_seconds", "gauge",
         "The longest hold of one table's lock in the last checkpoint.");
    put(&t, "chime_checkpoint_last_pause_seconds{shard=\"%u\"} %.6f\n", shard,
        (double)r->checkpoint_last_pause_ns / 1e9);
  }
  if (t.oom) {
    free(t.p);
    return NULL;
  }
  return t.p;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code,
                             const char *type, char *body, int owned) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      strlen(body), body,
      owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (resp == NULL) {
    if (owned)
      free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  /* One request per connection: its deadline is the request's. */
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result r = MHD_queue_response(conn, code, resp);
  MHD_destroy_response(resp);
  return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **state) {
  chime__metrics_t *m = cls;
  (void)version;
  (void)upload;
  if (*state == NULL) { /* headers only so far: answer once they are in */
    *state = m;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci != NULL && ci->socket_context != NULL) {
      pthread_mutex_lock(&m->mu);
      ((conn_t *)ci->socket_context)->answering = 1;
      pthread_mutex_unlock(&m->mu);
    }
    return MHD_YES;
  }
  if (*upload_size != 0) {
    *upload_size = 0; /* a body is not expected: ignored */
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
    return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                 "only GET /metrics\n", 0);
  if (strcmp(url, "/metrics") != 0)
    return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                 "not found: try /metrics\n", 0);
  chime__stats_snap_t snap;
  if (chime__stats_snap(m->srv, &snap) != 0)
    return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                 "out of memory\n", 0);
  char *body = chime__metrics_format(&snap.r, m->srv->cfg.shard);
  chime__stats_snap_done(m->srv, &snap);
  if (body == NULL)
    return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                 "out of memory\n", 0);
  return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
               body, 1);
}

/* A listening TCP socket on "host:port" ("[v6]:port" for IPv6). */
static int listen_on(const char *addr, char *bound, size_t boundlen, char *err,
                     size_t errlen) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr || colon[1] == '\0' ||
      (size_t)(colon - addr) >= sizeof(host))
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "metrics address '%s': want host:port", addr);
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = '\0';
  if (host[0] == '[' && host[strlen(host) - 1] == ']') {
    memmove(host, host + 1, strlen(host));
    host[strlen(host) - 1] = '\0';
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int g = getaddrinfo(host, colon + 1, &hints, &res);
  if (g != 0)
    return chime__fail(err, errlen, CHIME_EINVAL, "metrics address '%s': %s",
                       addr, gai_strerror(g));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      listen(fd, 64) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    freeaddrinfo(res);
    return chime__fail(err, errlen, CHIME_ESYS,
                       "metrics: cannot listen on %s: %s", addr, strerror(e));
  }
  freeaddrinfo(res);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  char h[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
      inet_ntop(AF_INET6, &a6->sin6_addr, h, sizeof(h));
      port = ntohs(a6->sin6_port);
      snprintf(bound, boundlen, "[%s]:%d", h, port);
    } else {
      struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
      inet_ntop(AF_INET, &a4->sin_addr, h, sizeof(h));
      port = ntohs(a4->sin_port);
      snprintf(bound, boundlen, "%s:%d", h, port);
    }
  }
  return fd;
}

static void metrics_free(chime__metrics_t *m) {
  if (m->reaper_live) {
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->reaper, NULL);
  }
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

int chime__metrics_start(chime__metrics_t **out, chime_server_t *srv,
                         const char *addr, char *bound, size_t boundlen,
                         char *err, size_t errlen) {
  *out = NULL;
  chime__metrics_t *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return chime__fail(err, errlen, CHIME_ENOMEM, "metrics: out of memory");
  m->srv = srv;
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&m->reaper, NULL, reaper_main, m) != 0) {
    metrics_free(m);
    return chime__fail(err, errlen, CHIME_ESYS,
                       "metrics: cannot start a thread");
  }
  m->reaper_live = 1;
  m->fd = listen_on(addr, bound, boundlen, err, errlen);
  if (m->fd < 0) {
    int rc = m->fd;
    metrics_free(m);
    return rc;
  }
  /* The idle timeout too, in whole seconds: it can only come first for a
   * connection the reaper has already shut. */
  m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0,
                          NULL, NULL, on_request, m, MHD_OPTION_LISTEN_SOCKET,
                          (MHD_socket)m->fd, MHD_OPTION_CONNECTION_LIMIT,
                          (unsigned)ACCEPTED_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned)((REQUEST_DEADLINE_MS + 999) / 1000),
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
                          MHD_OPTION_END);
  if (m->d == NULL) {
    close(m->fd);
    metrics_free(m);
    return chime__fail(err, errlen, CHIME_ESYS,
                       "metrics: cannot start the HTTP "
                       "server on %s",
                       addr);
  }
  *out = m;
  return 0;
}

void chime__metrics_stop(chime__metrics_t *m) {
  if (m == NULL)
    return;
  MHD_stop_daemon(m->d); /* closes the listening socket it was given */
  metrics_free(m);
}
