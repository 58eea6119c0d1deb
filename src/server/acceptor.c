/* The listener of chime_server_listen (see acceptor.h for why it is ours
 * and not gRPC's). Everything but create and destroy runs on the loop
 * thread. */
#include "common/log.h"
#include "common/errfmt.h"
#include "server/acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "chime/errors.h"
#include "common/clock.h"
#include "common/list.h"
#include "server/accept.h"
#include "server/tls.h"

#define MAX_LISTENERS 8
/* fds kept out of the connection cap: rings, handoff connections, pidfd
 * watches, gRPC's own (epoll, wakeup fds), stdio. */
#define FD_HEADROOM_MIN 64
/* Accepts per wakeup, so one flooded listener cannot starve the others. */
#define ACCEPT_BURST 128
/* Handed connections are checked for closure at most this often. */
#define PRUNE_MS 50
#define REPORT_MS 10000

typedef struct {
  int fd;
  dev_t dev;
  ino_t ino;
} handed_t;

typedef struct pending_s {
  uv_poll_t poll;
  uv_timer_t timer;
  int fd;
  int lfd; /* the listener it came from */
  int handles;
  int hand; /* to gRPC once both handles are closed; else close */
  struct chime__acceptor_s *a;
  chime__link_t link; /* on a->pending */
} pending_t;

typedef struct {
  int fd;
  uv_poll_t poll;
  struct chime__acceptor_s *a;
} listener_t;

struct chime__acceptor_s {
  listener_t ls[MAX_LISTENERS];
  int nls;
  char unix_path[108]; /* unlinked at destroy; "" when none */
  int reserve;         /* /dev/null, given up on EMFILE */
  uint32_t cap;
  uint32_t handshake_ms;
  uint32_t rto_max_ms; /* 0: the kernel's */
  int rto_max_said;    /* the kernel refused it once: said, not again */
  grpc_server *gs;
  grpc_server_credentials *creds;
  void *tls; /* gRPC's external TLS port (server/tls.h), or NULL */

  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t backoff;
  pthread_t th;
  int started;

  chime__list_t pending; /* pending_t's */
  uint32_t npending;
  handed_t *handed; /* cap entries */
  uint32_t nhanded;
  uint64_t last_prune_ms;
  /* Refusals since the last report, and when it was. */
  uint64_t refused_cap, refused_fds, last_report_ms;
};

/* Splits "host:port" / "[v6]:port" / ":port"; host without brackets. */
static int split_host_port(const char *addr, char *host, size_t hostlen,
                           unsigned *port, char *err, size_t errlen) {
  const char *colon = strrchr(addr, ':');
  const char *h = addr;
  size_t hn;
  if (colon == NULL)
    return chime__fail(
        err, errlen, CHIME_EINVAL,
        "listen address '%.64s': expected host:port or unix:/path", addr);
  hn = (size_t)(colon - addr);
  if (hn > 0 && addr[0] == '[') {
    if (addr[hn - 1] != ']')
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "listen address '%.64s': expected [IPv6]:port", addr);
    h = addr + 1;
    hn -= 2;
  }
  if (hn >= hostlen)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "listen address '%.64s': host too long", addr);
  memcpy(host, h, hn);
  host[hn] = '\0';
  const char *p = colon + 1;
  unsigned long v = 0;
  size_t nd = 0;
  for (; p[nd] >= '0' && p[nd] <= '9' && v <= 65535; nd++)
    v = v * 10 + (unsigned long)(p[nd] - '0');
  if (nd == 0 || p[nd] != '\0' || v > 65535)
    return chime__fail(
        err, errlen, CHIME_EINVAL,
        "listen address '%.64s': port '%.16s' must be a number in "
        "0..65535",
        addr, p);
  *port = (unsigned)v;
  return 0;
}

int chime__listen_addr_check(const char *addr, char *err, size_t errlen) {
  char host[256];
  unsigned port;
  struct sockaddr_un su;
  const char *name = NULL;
  if (strncmp(addr, "unix:", 5) == 0)
    name = addr + 5;
  else if (strncmp(addr, "unix-abstract:", 14) == 0)
    name = addr + 14;
  if (name != NULL) {
    /* gRPC binds "unix:" with an empty path as an abstract socket named by
     * sizeof(sun_path) NUL bytes: nobody could mean that. */
    if (name[0] == '\0')
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "listen address '%s': the socket path is empty", addr);
    if (strlen(name) >= sizeof(su.sun_path))
      return chime__fail(
          err, errlen, CHIME_EINVAL,
          "listen address '%.64s...': the socket path must be under "
          "%zu bytes",
          addr, sizeof(su.sun_path));
    return 0;
  }
  return split_host_port(addr, host, sizeof(host), &port, err, errlen);
}

static int listen_fd(chime__acceptor_t *a, int fd) {
  if (listen(fd, SOMAXCONN) != 0)
    return -1;
  a->ls[a->nls].fd = fd;
  a->ls[a->nls].a = a;
  a->nls++;
  return 0;
}

static int bind_unix(chime__acceptor_t *a, const char *addr, char *err,
                     size_t errlen) {
  struct sockaddr_un su;
  int abstract = strncmp(addr, "unix-abstract:", 14) == 0;
  const char *name = addr + (abstract ? 14 : 5);
  size_t n = strlen(name);
  memset(&su, 0, sizeof(su));
  su.sun_family = AF_UNIX;
  memcpy(su.sun_path + abstract, name, n);
  socklen_t len =
      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + abstract + n);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return chime__fail(err, errlen, CHIME_ESYS, "cannot listen on '%s': %s",
                       addr, strerror(errno));
  if (!abstract) {
    /* The caller made sure no live server answers there (as gRPC would,
     * a stale socket file is replaced). */
    struct stat st;
    if (lstat(name, &st) == 0 && S_ISSOCK(st.st_mode))
      unlink(name);
  }
  if (bind(fd, (struct sockaddr *)&su, len) != 0 || listen_fd(a, fd) != 0) {
    int e = errno;
    close(fd);
    return chime__fail(err, errlen, CHIME_ESYS, "cannot listen on '%s': %s",
                       addr, strerror(e));
  }
  if (!abstract)
    snprintf(a->unix_path, sizeof(a->unix_path), "%s", name);
  return 0;
}

/* Every address the host resolves to; ":port" and "[::]:port" are every
 * address of both families (a socket each), as gRPC's own listener took
 * "[::]" (dual-stack): an IPv6-only "[::]" left IPv4 clients refused where
 * ":port" served them. "0.0.0.0:port" is IPv4's only. With port 0 the
 * first bind picks the port and the others reuse it, as gRPC does. */
static int bind_tcp(chime__acceptor_t *a, const char *addr, int *bound,
                    char *err, size_t errlen) {
  char host[256], pstr[8];
  unsigned port;
  struct addrinfo hints, *res = NULL;
  int rc = split_host_port(addr, host, sizeof(host), &port, err, errlen);
  if (rc != 0)
    return rc;
  if (strcmp(host, "::") == 0)
    host[0] = '\0';
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_ADDRCONFIG;
  snprintf(pstr, sizeof(pstr), "%u", port);
  int gai = getaddrinfo(host[0] ? host : NULL, pstr, &hints, &res);
  if (gai != 0)
    return chime__fail(err, errlen, CHIME_ESYS, "cannot listen on '%s': %s",
                       addr, gai_strerror(gai));
  int e = 0;
  for (struct addrinfo *ai = res; ai != NULL && a->nls < MAX_LISTENERS;
       ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
      continue;
    int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      e = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* IPv4 addresses get their own socket when the host resolves to both. */
    if (ai->ai_family == AF_INET6)
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (*bound != 0) {
      if (ai->ai_family == AF_INET)
        ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)*bound);
      else
        ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port =
            htons((uint16_t)*bound);
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen_fd(a, fd) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
      e = errno;
      if (a->nls > 0 && a->ls[a->nls - 1].fd == fd)
        a->nls--;
      close(fd);
      continue;
    }
    *bound = ntohs(ss.ss_family == AF_INET
                       ? ((struct sockaddr_in *)&ss)->sin_port
                       : ((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  freeaddrinfo(res);
  if (a->nls == 0)
    return chime__fail(err, errlen, CHIME_ESYS, "cannot listen on '%s': %s",
                       addr, strerror(e ? e : EADDRNOTAVAIL));
  return 0;
}

/* What the fd limit leaves for connections after the headroom. */
static uint32_t fd_cap(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return UINT32_MAX;
  uint64_t lim = rl.rlim_cur;
  uint64_t head = lim / 4 > FD_HEADROOM_MIN ? lim / 4 : FD_HEADROOM_MIN;
  if (lim <= head + 1)
    return 1;
  return lim - head > UINT32_MAX ? UINT32_MAX : (uint32_t)(lim - head);
}

int chime__acceptor_create(chime__acceptor_t **out, const char *addr,
                           uint32_t max_connections,
                           uint32_t handshake_timeout_ms, int *port, char *err,
                           size_t errlen) {
  int rc;
  *out = NULL;
  *port = 0;
  rc = chime__listen_addr_check(addr, err, errlen);
  if (rc != 0)
    return rc;
  chime__acceptor_t *a = calloc(1, sizeof(*a));
  if (a == NULL)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  a->reserve = -1;
  uint32_t fc = fd_cap();
  a->cap = max_connections < fc ? max_connections : fc;
  if (a->cap == 0)
    a->cap = 1;
  a->handshake_ms = handshake_timeout_ms;
  a->handed = calloc(a->cap, sizeof(*a->handed));
  a->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (a->handed == NULL || a->reserve < 0) {
    rc = chime__fail(err, errlen, CHIME_ESYS, "cannot listen on '%s': %s", addr,
                     a->handed == NULL ? "out of memory" : strerror(errno));
    goto out;
  }
  if (strncmp(addr, "unix:", 5) == 0 ||
      strncmp(addr, "unix-abstract:", 14) == 0)
    rc = bind_unix(a, addr, err, errlen);
  else
    rc = bind_tcp(a, addr, port, err, errlen);
  if (rc != 0)
    goto out;
  *out = a;
  a = NULL;
out:
  chime__acceptor_destroy(a);
  return rc;
}

uint32_t chime__acceptor_cap(const chime__acceptor_t *a) {
  return a->cap;
}

/* --- on the loop thread --- */

static void report(chime__acceptor_t *a, int force) {
  uint64_t now = (uint64_t)chime__now_ms();
  if (a->refused_cap + a->refused_fds == 0 ||
      (!force && now - a->last_report_ms < REPORT_MS))
    return;
  chime__log(CHIME_LOG_WARN,
             "refused %llu connections at the cap of %u and %llu for "
             "want of file descriptors",
             (unsigned long long)a->refused_cap, a->cap,
             (unsigned long long)a->refused_fds);
  a->refused_cap = a->refused_fds = 0;
  a->last_report_ms = now;
}

/* Drops handed connections gRPC has closed: an fd number that is closed,
 * or reused for another file, no longer names the same socket inode. */
static void prune(chime__acceptor_t *a) {
  struct stat st;
  uint32_t k = 0;
  a->last_prune_ms = (uint64_t)chime__now_ms();
  for (uint32_t i = 0; i < a->nhanded; i++) {
    handed_t *h = &a->handed[i];
    if (fstat(h->fd, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino)
      a->handed[k++] = *h;
  }
  a->nhanded = k;
}

static void pending_closed(uv_handle_t *hd) {
  pending_t *p = hd->data;
  chime__acceptor_t *a = p->a;
  struct stat st;
  if (--p->handles > 0)
    return;
  chime__list_remove(&a->pending, &p->link);
  a->npending--;
  if (p->hand && a->nhanded < a->cap && fstat(p->fd, &st) == 0) {
    a->handed[a->nhanded].fd = p->fd;
    a->handed[a->nhanded].dev = st.st_dev;
    a->handed[a->nhanded].ino = st.st_ino;
    a->nhanded++;
    /* gRPC owns the fd from here, and closes it with the connection. */
    if (a->tls != NULL)
      chime__tls_port_take(a->tls, p->lfd, p->fd);
    else
      grpc_server_add_channel_from_fd(a->gs, p->fd, a->creds);
  } else {
    close(p->fd);
  }
  free(p);
}

static void pending_end(pending_t *p, int hand) {
  if (p->handles < 2 || uv_is_closing((uv_handle_t *)&p->poll))
    return;
  p->hand = hand;
  uv_poll_stop(&p->poll);
  uv_timer_stop(&p->timer);
  uv_close((uv_handle_t *)&p->poll, pending_closed);
  uv_close((uv_handle_t *)&p->timer, pending_closed);
}

static void on_pending_timeout(uv_timer_t *t) {
  pending_end(t->data, 0);
}

/* The first bytes (a client's HTTP/2 preface), or its end. Peeked, so
 * gRPC reads them. */
static void on_pending_readable(uv_poll_t *h, int status, int events) {
  pending_t *p = h->data;
  char c;
  (void)events;
  if (status < 0) {
    pending_end(p, 0);
    return;
  }
  ssize_t n = recv(p->fd, &c, 1, MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  pending_end(p, n > 0);
}

/* Linux 6.15's per-socket cap on the retransmission backoff (not in
 * Debian 12's headers). */
#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif

void chime__acceptor_set_rto_max(chime__acceptor_t *a, uint32_t ms) {
  a->rto_max_ms = ms;
}

/* A link down for a few seconds backs TCP's retransmissions off to
 * seconds apart (0.2, 0.6, 1.4, 3.0, 6.2 s...): capped, the first one
 * after the link is back goes within rto_max_ms (docs/remote.md). */
static void rto_max(chime__acceptor_t *a, int fd) {
  int v = (int)a->rto_max_ms;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (v == 0 || getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) ||
      setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &v, sizeof(v)) == 0)
    return;
  if (errno == ENOPROTOOPT && !a->rto_max_said) { /* TCP, older kernel */
    a->rto_max_said = 1;
    chime__log(CHIME_LOG_INFO,
               "tcp_rto_max_ms: this kernel has no TCP_RTO_MAX_MS (Linux "
               "6.15+): its own retransmission backoff applies");
  }
}

static void take(chime__acceptor_t *a, int lfd, int fd) {
  int one = 1;
  if (a->npending + a->nhanded >= a->cap &&
      (uint64_t)chime__now_ms() - a->last_prune_ms >= PRUNE_MS)
    prune(a);
  pending_t *p =
      a->npending + a->nhanded < a->cap ? calloc(1, sizeof(*p)) : NULL;
  if (p == NULL) {
    close(fd);
    a->refused_cap++;
    report(a, 0);
    return;
  }
  /* Small messages go out at once, as on gRPC's own connections. */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  rto_max(a, fd);
  p->fd = fd;
  p->lfd = lfd;
  p->a = a;
  p->handles = 2;
  chime__list_push(&a->pending, &p->link);
  a->npending++;
  uv_poll_init(&a->loop, &p->poll, fd);
  uv_timer_init(&a->loop, &p->timer);
  p->poll.data = p;
  p->timer.data = p;
  uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT, on_pending_readable);
  uv_timer_start(&p->timer, on_pending_timeout, a->handshake_ms, 0);
}

static void on_accept(uv_poll_t *h, int status, int events);

static void on_backoff(uv_timer_t *t) {
  chime__acceptor_t *a = t->data;
  if (a->reserve < 0)
    a->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int i = 0; i < a->nls; i++)
    uv_poll_start(&a->ls[i].poll, UV_READABLE, on_accept);
}

static void pause_accepting(chime__acceptor_t *a) {
  for (int i = 0; i < a->nls; i++)
    uv_poll_stop(&a->ls[i].poll);
  chime__accept_pause(&a->backoff, on_backoff);
}

static void on_accept(uv_poll_t *h, int status, int events) {
  listener_t *l = h->data;
  chime__acceptor_t *a = l->a;
  (void)status;
  (void)events;
  for (int i = 0; i < ACCEPT_BURST; i++) {
    int fd;
    chime__accept_t r = chime__accept_next(l->fd, &fd);
    if (r == CHIME__ACCEPT_OK) {
      take(a, l->fd, fd);
      continue;
    }
    if (r == CHIME__ACCEPT_AGAIN)
      continue;
    if (r == CHIME__ACCEPT_EMPTY)
      break;
    if ((errno == EMFILE || errno == ENFILE) && a->reserve >= 0) {
      /* Out of fds: the reserve makes room to take the connection off the
       * backlog and close it, so its client hears a refusal now and the
       * backlog cannot fill with connections nobody will take. */
      close(a->reserve);
      a->reserve = -1;
      fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0)
        close(fd);
      a->refused_fds++;
      report(a, 0);
      a->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (a->reserve >= 0)
        continue;
    }
    /* No reserve, or no memory: the connection stays readable; pause
     * instead of spinning. */
    pause_accepting(a);
    break;
  }
}

static void on_async(uv_async_t *as) {
  chime__acceptor_t *a = as->data;
  CHIME__LIST_EACH(l, &a->pending)
    pending_end(CHIME__CONTAINER(l, pending_t, link), 0);
  for (int i = 0; i < a->nls; i++)
    uv_close((uv_handle_t *)&a->ls[i].poll, NULL);
  uv_close((uv_handle_t *)&a->backoff, NULL);
  uv_close((uv_handle_t *)&a->async, NULL);
  report(a, 1);
}

static void *loop_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-accept");
  chime__acceptor_t *a = arg;
  uv_run(&a->loop, UV_RUN_DEFAULT);
  return NULL;
}

int chime__acceptor_start(chime__acceptor_t *a, grpc_server *gs, void *tls) {
  if (a == NULL || a->started)
    return CHIME_EINVAL;
  a->gs = gs;
  a->tls = tls;
  a->creds = grpc_insecure_server_credentials_create();
  if (a->creds == NULL || uv_loop_init(&a->loop) != 0)
    return CHIME_ESYS;
  for (int i = 0; i < a->nls; i++) {
    uv_poll_init(&a->loop, &a->ls[i].poll, a->ls[i].fd);
    a->ls[i].poll.data = &a->ls[i];
    uv_poll_start(&a->ls[i].poll, UV_READABLE, on_accept);
  }
  uv_timer_init(&a->loop, &a->backoff);
  a->backoff.data = a;
  uv_async_init(&a->loop, &a->async, on_async);
  a->async.data = a;
  a->started = 1;
  if (pthread_create(&a->th, NULL, loop_main, a) != 0) {
    on_async(&a->async);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    a->started = 0;
    return CHIME_ESYS;
  }
  a->started = 2;
  return 0;
}

void chime__acceptor_destroy(chime__acceptor_t *a) {
  if (a == NULL)
    return;
  if (a->started == 2) {
    uv_async_send(&a->async);
    pthread_join(a->th, NULL);
    uv_loop_close(&a->loop);
  }
  for (int i = 0; i < a->nls; i++)
    close(a->ls[i].fd);
  if (a->unix_path[0] != '\0')
    unlink(a->unix_path);
  if (a->reserve >= 0)
    close(a->reserve);
  if (a->creds != NULL)
    grpc_server_credentials_release(a->creds);
  free(a->handed);
  free(a);
}
