/* chime-link: a network link of given RTT, rate and loss between two
 * network namespaces on this machine, TCP end to end through it
 * (docs/remote.md). It makes NAME-s (the server's side, 10.237.0.1) and
 * NAME-l (the learner's, 10.237.0.2), each with a TUN device chl0 whose
 * other end is this process: every packet one side sends is read here,
 * held as the link would hold it (linkq.h: serialized at the rate behind
 * a bounded queue, delayed by half the RTT, lost at random) and written
 * into the other side. So both ends' TCP see the delay, the rate and the
 * losses (a user-space relay of TCP would not: each of its legs would be
 * loopback).
 *
 *   chime-link NAME [--rtt-ms R] [--rate-mbit M] [--loss P] [--queue-kb K]
 *                   [--mtu BYTES] [--cc ALGORITHM] [--seed S] [--even-loss]
 *
 * --even-loss loses every (1/P)th packet of a direction instead of each at
 * random with probability P: a single flow's throughput under Reno swings
 * with how many losses it happened to draw (+-25% at 15 losses a run), so
 * two flows run one after the other are compared on equal losses.
 *
 * The MTU (default 9000, jumbo frames as in a data centre; 1500 as on the
 * internet; up to 65520) sets what a packet is: loss is per packet, and
 * the forwarder's cost is per packet, so its ceiling rises with it.
 * --cc sets both sides' TCP congestion control (a new namespace takes the
 * host's: bbr here, where Debian's default is cubic, which loss hurts far
 * more; a namespace may only take those the host's
 * net.ipv4.tcp_allowed_congestion_control lists, reno always).
 *
 * Prints "ready 10.237.0.1 10.237.0.2" once both sides are up; run a
 * process on a side with `ip netns exec NAME-s CMD`. SIGUSR1 takes the
 * link down (every packet dropped, as a pulled cable), SIGUSR2 up again;
 * SIGTERM or SIGINT ends it: counts on stderr, the namespaces deleted.
 * Needs root (CAP_NET_ADMIN), iproute2 and /dev/net/tun. */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "linkq.h"

extern char **environ;

#define SERVER_ADDR "10.237.0.1"
#define LEARNER_ADDR "10.237.0.2"
#define DEV "chl0"
#define MAX_MTU 65520
#define BURST 64 /* packets read from one side before looking at the other */

typedef struct pkt_s {
  struct pkt_s *next;
  uint64_t at; /* when it reaches the far side */
  uint32_t len;
  uint8_t data[];
} pkt_t;

/* One direction: packets read from `in`, written to `out` when due. */
typedef struct {
  int in, out;
  chime__linkq_t q;
  pkt_t *head, *tail;
  uint64_t write_errors;
} dir_t;

typedef struct {
  const char *name;
  char ns[2][64]; /* NAME-s, NAME-l */
  int made[2];
  double rtt_ms, rate_mbit, loss;
  uint64_t queue_kb, seed, mtu;
  const char *cc; /* congestion control for both sides, NULL: as is */
  int even_loss;  /* every (1/loss)th packet lost, not at random */
} link_opts_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs `ip ARGS...`; 0 when it exits 0. */
static int ip(const char *const args[]) {
  const char *argv[16] = {"ip"};
  int n = 1;
  for (; args[n - 1] != NULL && n < 15; n++)
    argv[n] = args[n - 1];
  argv[n] = NULL;
  pid_t pid;
  int st;
  if (posix_spawnp(&pid, "ip", NULL, NULL, (char *const *)argv, environ) != 0) {
    fprintf(stderr, "chime-link: cannot run ip (install iproute2): %s\n",
            strerror(errno));
    return -1;
  }
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Opens a TUN device DEV inside namespace ns (this thread enters it for
 * the open and comes back): the device lives there, its fd here. */
static int tun_in(const char *ns) {
  char path[128];
  snprintf(path, sizeof(path), "/run/netns/%s", ns);
  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int there = open(path, O_RDONLY | O_CLOEXEC);
  int fd = -1;
  if (home < 0 || there < 0 || setns(there, CLONE_NEWNET) != 0) {
    fprintf(stderr, "chime-link: cannot enter %s: %s\n", path, strerror(errno));
    goto out;
  }
  fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", DEV);
  if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
    fprintf(stderr, "chime-link: cannot make a TUN device in %s: %s\n", ns,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  if (setns(home, CLONE_NEWNET) != 0) {
    fprintf(stderr, "chime-link: cannot come back from %s: %s\n", ns,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
out:
  if (home >= 0)
    close(home);
  if (there >= 0)
    close(there);
  return fd;
}

/* Writes value into /proc/sys/PATH as seen from namespace ns (a sysctl
 * under net/ is the opener's namespace's). */
static int sysctl_in(const char *ns, const char *path, const char *value) {
  char nspath[128], file[160];
  snprintf(nspath, sizeof(nspath), "/run/netns/%s", ns);
  snprintf(file, sizeof(file), "/proc/sys/%s", path);
  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int there = open(nspath, O_RDONLY | O_CLOEXEC);
  int ok = home >= 0 && there >= 0 && setns(there, CLONE_NEWNET) == 0;
  if (ok) {
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    ok = fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value);
    if (fd >= 0)
      close(fd);
    if (setns(home, CLONE_NEWNET) != 0)
      ok = 0;
  }
  if (!ok)
    fprintf(stderr, "chime-link: cannot set %s to %s in %s: %s%s\n", file,
            value, ns, strerror(errno),
            errno == EPERM ? " (a namespace may take only what the host's "
                             "net.ipv4.tcp_allowed_congestion_control lists)"
                           : "");
  if (home >= 0)
    close(home);
  if (there >= 0)
    close(there);
  return ok ? 0 : -1;
}

/* Addresses and routes of one side: lo and DEV up, DEV point to point. */
static int side_up(const char *ns, const char *self, const char *peer,
                   uint64_t mtu_bytes) {
  char mtu[24];
  snprintf(mtu, sizeof(mtu), "%llu", (unsigned long long)mtu_bytes);
  const char *lo[] = {"-n", ns, "link", "set", "lo", "up", NULL};
  const char *dev[] = {"-n", ns,           "link",  "set", DEV, "mtu",
                       mtu,  "txqueuelen", "10000", "up",  NULL};
  const char *addr[] = {"-n",   ns,   "addr", "add", self,
                        "peer", peer, "dev",  DEV,   NULL};
  return ip(lo) == 0 && ip(dev) == 0 && ip(addr) == 0 ? 0 : -1;
}

static void namespaces_del(link_opts_t *o) {
  for (int i = 0; i < 2; i++)
    if (o->made[i]) {
      const char *del[] = {"netns", "del", o->ns[i], NULL};
      ip(del);
      o->made[i] = 0;
    }
}

static void queue_push(dir_t *d, pkt_t *p) {
  p->next = NULL;
  if (d->tail != NULL)
    d->tail->next = p;
  else
    d->head = p;
  d->tail = p;
}

/* Reads what side d->in has (at most BURST packets) into d's queue. */
static void take(dir_t *d, uint8_t *buf) {
  for (int i = 0; i < BURST; i++) {
    ssize_t n = read(d->in, buf, MAX_MTU + 64);
    if (n <= 0)
      return;
    uint64_t at = chime__linkq_offer(&d->q, now_ns(), (uint32_t)n);
    if (at == 0)
      continue;
    pkt_t *p = malloc(sizeof(*p) + (size_t)n);
    if (p == NULL) {
      d->q.tail_dropped++;
      continue;
    }
    p->at = at;
    p->len = (uint32_t)n;
    memcpy(p->data, buf, (size_t)n);
    queue_push(d, p);
  }
}

/* Writes d's due packets to the far side. */
static void deliver(dir_t *d, uint64_t now) {
  while (d->head != NULL && d->head->at <= now) {
    pkt_t *p = d->head;
    d->head = p->next;
    if (d->head == NULL)
      d->tail = NULL;
    if (write(d->out, p->data, p->len) != (ssize_t)p->len)
      d->write_errors++;
    free(p);
  }
}

static void arm(int tfd, const dir_t dirs[2]) {
  uint64_t at = 0;
  for (int i = 0; i < 2; i++)
    if (dirs[i].head != NULL && (at == 0 || dirs[i].head->at < at))
      at = dirs[i].head->at;
  struct itimerspec its;
  memset(&its, 0, sizeof(its));
  its.it_value.tv_sec = (time_t)(at / 1000000000u);
  its.it_value.tv_nsec = (long)(at % 1000000000u);
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void report(const link_opts_t *o, dir_t dirs[2]) {
  static const char *const what[2] = {"s->l", "l->s"};
  for (int i = 0; i < 2; i++) {
    const chime__linkq_t *q = &dirs[i].q;
    fprintf(stderr,
            "chime-link %s %s: %llu packets (%llu bytes), lost %llu, queue "
            "full %llu, down %llu, write errors %llu\n",
            o->name, what[i], (unsigned long long)q->sent,
            (unsigned long long)q->sent_bytes, (unsigned long long)q->lost,
            (unsigned long long)q->tail_dropped,
            (unsigned long long)q->down_dropped,
            (unsigned long long)dirs[i].write_errors);
  }
}

/* Forwards until SIGTERM/SIGINT. */
static int forward(const link_opts_t *o, int tun_s, int tun_l, int sfd) {
  dir_t dirs[2];
  uint64_t delay = (uint64_t)(o->rtt_ms * 1e6 / 2);
  uint64_t rate = (uint64_t)(o->rate_mbit * 1e6);
  uint64_t queue = o->queue_kb * 1024;
  if (queue == 0) /* a bandwidth-delay product, at least 1 MiB */
    queue = rate / 8 * (uint64_t)(o->rtt_ms + 1) / 1000 > (1u << 20)
                ? rate / 8 * (uint64_t)(o->rtt_ms + 1) / 1000
                : (1u << 20);
  dirs[0] = (dir_t){.in = tun_s, .out = tun_l};
  dirs[1] = (dir_t){.in = tun_l, .out = tun_s};
  chime__linkq_init(&dirs[0].q, delay, rate, queue, o->loss, o->seed);
  chime__linkq_init(&dirs[1].q, delay, rate, queue, o->loss, o->seed * 7 + 1);
  for (int i = 0; i < 2 && o->even_loss && o->loss > 0; i++)
    dirs[i].q.every = (uint64_t)(1.0 / o->loss + 0.5);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  uint8_t *buf = malloc(MAX_MTU + 64);
  int fds[4] = {tun_s, tun_l, tfd, sfd};
  if (ep < 0 || tfd < 0 || buf == NULL)
    return -1;
  for (int i = 0; i < 4; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0)
      return -1;
  }
  printf("ready %s %s\n", SERVER_ADDR, LEARNER_ADDR);
  fflush(stdout);
  for (int running = 1; running;) {
    struct epoll_event evs[4];
    int n = epoll_wait(ep, evs, 4, -1);
    for (int i = 0; i < n; i++) {
      uint32_t k = evs[i].data.u32;
      if (k < 2) {
        take(&dirs[k], buf);
      } else if (k == 2) {
        uint64_t ticks;
        if (read(tfd, &ticks, sizeof(ticks)) < 0) { /* drained */
        }
      } else {
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof(si)) != sizeof(si))
          continue;
        if (si.ssi_signo == SIGUSR1 || si.ssi_signo == SIGUSR2) {
          dirs[0].q.down = dirs[1].q.down = si.ssi_signo == SIGUSR1;
          fprintf(stderr, "chime-link %s: %s\n", o->name,
                  si.ssi_signo == SIGUSR1 ? "down" : "up");
        } else {
          running = 0;
        }
      }
    }
    uint64_t now = now_ns();
    deliver(&dirs[0], now);
    deliver(&dirs[1], now);
    arm(tfd, dirs);
  }
  report(o, dirs);
  for (int i = 0; i < 2; i++)
    while (dirs[i].head != NULL) {
      pkt_t *p = dirs[i].head;
      dirs[i].head = p->next;
      free(p);
    }
  free(buf);
  close(tfd);
  close(ep);
  return 0;
}

static int parse(link_opts_t *o, int argc, char **argv) {
  memset(o, 0, sizeof(*o));
  o->seed = 1;
  o->mtu = 9000;
  if (argc < 2 || argv[1][0] == '-')
    return -1;
  o->name = argv[1];
  if (strlen(o->name) > 40 || strchr(o->name, '/') != NULL)
    return -1;
  snprintf(o->ns[0], sizeof(o->ns[0]), "%s-s", o->name);
  snprintf(o->ns[1], sizeof(o->ns[1]), "%s-l", o->name);
  for (int i = 2; i < argc; i += 2) {
    if (strcmp(argv[i], "--even-loss") == 0) {
      o->even_loss = 1;
      i--; /* a flag: no value */
      continue;
    }
    if (i + 1 >= argc)
      return -1;
    char *end;
    double v = strtod(argv[i + 1], &end);
    if (strcmp(argv[i], "--cc") != 0 && (*end != '\0' || v < 0))
      return -1;
    if (strcmp(argv[i], "--rtt-ms") == 0)
      o->rtt_ms = v;
    else if (strcmp(argv[i], "--rate-mbit") == 0)
      o->rate_mbit = v;
    else if (strcmp(argv[i], "--loss") == 0 && v <= 1)
      o->loss = v;
    else if (strcmp(argv[i], "--queue-kb") == 0)
      o->queue_kb = (uint64_t)v;
    else if (strcmp(argv[i], "--cc") == 0 && strlen(argv[i + 1]) < 32)
      o->cc = argv[i + 1];
    else if (strcmp(argv[i], "--mtu") == 0 && v >= 576 && v <= MAX_MTU)
      o->mtu = (uint64_t)v;
    else if (strcmp(argv[i], "--seed") == 0)
      o->seed = (uint64_t)v;
    else
      return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  link_opts_t o;
  if (parse(&o, argc, argv) != 0) {
    fprintf(stderr, "usage: chime-link NAME [--rtt-ms R] [--rate-mbit M] "
                    "[--loss P] [--queue-kb K] [--mtu BYTES] [--cc ALG] "
                    "[--seed S] [--even-loss]\n");
    return 2;
  }
  /* the signals come through signalfd, blocked before any child runs */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  int rc = 1, tun[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    const char *add[] = {"netns", "add", o.ns[i], NULL};
    if (ip(add) != 0) {
      fprintf(stderr,
              "chime-link: cannot make namespace %s (left by an "
              "earlier run? `ip netns del %s`)\n",
              o.ns[i], o.ns[i]);
      goto out;
    }
    o.made[i] = 1;
    if ((tun[i] = tun_in(o.ns[i])) < 0)
      goto out;
  }
  if (side_up(o.ns[0], SERVER_ADDR, LEARNER_ADDR, o.mtu) != 0 ||
      side_up(o.ns[1], LEARNER_ADDR, SERVER_ADDR, o.mtu) != 0) {
    fprintf(stderr, "chime-link: cannot set up %s\n", DEV);
    goto out;
  }
  for (int i = 0; i < 2 && o.cc != NULL; i++)
    if (sysctl_in(o.ns[i], "net/ipv4/tcp_congestion_control", o.cc) != 0)
      goto out;
  if (sfd >= 0 && forward(&o, tun[0], tun[1], sfd) == 0)
    rc = 0;
out:
  for (int i = 0; i < 2; i++)
    if (tun[i] >= 0)
      close(tun[i]);
  namespaces_del(&o);
  return rc;
}
