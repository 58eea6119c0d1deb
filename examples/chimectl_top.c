/* chimectl top TARGET: per table size, insert/s, sample/s, sampled/inserted
 * and rate-limiter waits; per stream mode, GB/s, batches/s and leases;
 * totals and the server's ring, pinned and staged bytes; over shards a row
 * per shard above them. Every rate is the
 * difference of two Stats snapshots over the time between them (each
 * snapshot stamped at the middle of its call), so a slow call or a late
 * frame does not bend the figures. Live in a terminal (docs/operations.md,
 * "chimectl top"); plain frames for scripts. */
#include "chimectl_top.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "chime/chime.h"

/* A shard of a sharded target: its own Stats, for its row. */
typedef struct {
  const char *addr;  /* the client's: valid while it lives */
  chime_stats_t *st; /* NULL when it did not answer */
  char err[256];
} shard_snap_t;

typedef struct {
  chime_stats_t *st; /* the target's (a sharded client sums its shards) */
  char err[1024];    /* why st is NULL */
  int64_t t_ns;      /* monotonic: the middle of the Stats calls */
  uint32_t nshards;  /* 0: one server, no shard rows */
  shard_snap_t *shards;
} snap_t;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void snap_free(snap_t *s) {
  chime_stats_free(s->st);
  for (uint32_t i = 0; i < s->nshards; i++)
    chime_stats_free(s->shards[i].st);
  free(s->shards);
  memset(s, 0, sizeof(*s));
}

/* The target's Stats and, over shards, each shard's (one call after
 * another: Stats is cheap, and a shard that is down fails the sum too).
 * 0 when anything answered, so that the frame has something to show. */
static int snap_take(chime_client_t *c, snap_t *s) {
  int64_t t0 = now_ns();
  int any = 0;
  memset(s, 0, sizeof(*s));
  if (chime_client_stats(c, &s->st) == 0)
    any = 1;
  else
    snprintf(s->err, sizeof(s->err), "%s", chime_last_error());
  uint32_t n = chime_client_shard(c, 0) != c ? chime_client_nshards(c) : 0;
  if (n > 0 && (s->shards = calloc(n, sizeof(*s->shards))) != NULL)
    s->nshards = n;
  for (uint32_t i = 0; i < s->nshards; i++) {
    shard_snap_t *sh = &s->shards[i];
    sh->addr = chime_client_shard_address(c, i);
    chime_client_t *one = chime_client_shard(c, i);
    if (one != NULL && chime_client_stats(one, &sh->st) == 0)
      any = 1;
    else
      snprintf(sh->err, sizeof(sh->err), "%s",
               one ? chime_last_error() : "gone");
  }
  s->t_ns = t0 + (now_ns() - t0) / 2;
  return any ? 0 : -1;
}

/* -------------------------------------------------------------- terminal */

/* What the signal handlers restore: written before the flags are set. */
static struct termios g_saved, g_raw_attr;
static volatile sig_atomic_t g_raw;    /* stdin is in raw mode now */
static volatile sig_atomic_t g_screen; /* the alternate screen is shown */
static volatile sig_atomic_t g_keys;   /* live with a keyboard: raw mode */
static volatile sig_atomic_t g_live;   /* until top returns: SIGCONT enters */

/* Async-signal-safe: a handler calls it. */
static void term_restore(void) {
  static const char leave[] = "\033[?25h\033[?1049l"; /* cursor, screen */
  if (g_raw) {
    (void)tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
    g_raw = 0;
  }
  if (g_screen) {
    g_screen = 0;
    (void)!write(STDOUT_FILENO, leave, sizeof(leave) - 1);
  }
}

/* Async-signal-safe as well: SIGCONT enters again after a Ctrl-Z. */
static void term_enter(void) {
  static const char enter[] = "\033[?1049h\033[?25l";
  if (g_keys && tcsetattr(STDIN_FILENO, TCSANOW, &g_raw_attr) == 0)
    g_raw = 1;
  (void)!write(STDOUT_FILENO, enter, sizeof(enter) - 1);
  g_screen = 1;
}

/* Signals that end the process: the terminal is given back first, then
 * the signal does what it does by default (SA_RESETHAND: it is raised
 * again as the handler returns), so a shell sees chimectl end by it. */
static const int g_fatal[] = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT, SIGABRT,
                              SIGSEGV, SIGBUS,  SIGFPE, SIGILL};

static void on_fatal(int sig) {
  int saved = errno;
  term_restore();
  (void)raise(sig);
  errno = saved;
}

static void on_cont(int sig);

/* Ctrl-Z: the shell gets its terminal back while top is stopped. */
static void on_tstp(int sig) {
  int saved = errno;
  struct sigaction sa = {.sa_handler = SIG_DFL};
  term_restore();
  sigemptyset(&sa.sa_mask);
  (void)sigaction(SIGTSTP, &sa, NULL);
  (void)raise(sig); /* stops once this handler returns */
  errno = saved;
}

static void on_cont(int sig) {
  int saved = errno;
  struct sigaction sa = {.sa_handler = on_tstp};
  (void)sig;
  sigemptyset(&sa.sa_mask);
  (void)sigaction(SIGTSTP, &sa, NULL);
  if (g_live && !g_screen)
    term_enter();
  errno = saved;
}

/* The live view's terminal: raw stdin (no echo, keys one at a time; Ctrl-C
 * still a signal) when stdin is a terminal, the alternate screen, and the
 * handlers and atexit hook that undo both. */
static void term_live(void) {
  struct sigaction sa = {.sa_handler = on_fatal, .sa_flags = SA_RESETHAND};
  sigemptyset(&sa.sa_mask);
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &g_saved) == 0) {
    g_raw_attr = g_saved;
    g_raw_attr.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    g_raw_attr.c_cc[VMIN] = 0;
    g_raw_attr.c_cc[VTIME] = 0;
    g_keys = 1;
  }
  for (size_t i = 0; i < sizeof(g_fatal) / sizeof(g_fatal[0]); i++)
    (void)sigaction(g_fatal[i], &sa, NULL);
  sa.sa_flags = 0;
  sa.sa_handler = on_tstp;
  (void)sigaction(SIGTSTP, &sa, NULL);
  sa.sa_handler = on_cont;
  (void)sigaction(SIGCONT, &sa, NULL);
  (void)atexit(term_restore);
  g_live = 1;
  term_enter();
}

/* Sleeps until deadline (monotonic ns); with keys, reads them meanwhile: 1
 * when q was pressed, else 0. */
static int wait_until(int64_t deadline) {
  for (int64_t left; (left = deadline - now_ns()) > 0;) {
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int ms = (int)((left + 999999) / 1000000);
    int n = poll(&p, g_keys ? 1 : 0, ms);
    if (n <= 0 || !(p.revents & (POLLIN | POLLHUP)))
      continue; /* a timeout, or EINTR (SIGCONT) */
    char k[64];
    ssize_t got = read(STDIN_FILENO, k, sizeof(k));
    if (got <= 0) {
      g_keys = 0; /* end of input: no more keys, sleep on */
      continue;
    }
    if (memchr(k, 'q', (size_t)got) || memchr(k, 'Q', (size_t)got))
      return 1;
  }
  return 0;
}

/* ----------------------------------------------------------------- frame */

/* b - a per second over dt_s, or -1 when the counter went back (the
 * server restarted between the snapshots). */
static double rate(uint64_t a, uint64_t b, double dt_s) {
  return b < a ? -1 : (double)(b - a) / dt_s;
}

/* A rate cell with prec decimals: "-" where there is none. */
static const char *cell(char *buf, size_t len, int prec, double v) {
  if (v < 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%.*f", prec, v);
  return buf;
}

static const char *human_bytes(char *buf, size_t len, uint64_t v) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = (double)v;
  size_t u = 0;
  while (x >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
    x /= 1024;
    u++;
  }
  snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", x, unit[u]);
  return buf;
}

static const chime_table_stats_t *prev_table(const chime_stats_t *p,
                                             const char *name) {
  for (uint32_t i = 0; p != NULL && i < p->ntables; i++)
    if (strcmp(p->tables[i].name, name) == 0)
      return &p->tables[i];
  return NULL;
}

/* A stream is its id on its server and its table: over shards two servers
 * may number streams alike, so the k-th of a kind pairs with the k-th. */
static const chime_stream_stats_t *
prev_stream(const chime_stats_t *p, const chime_stats_t *c, uint32_t at) {
  const chime_stream_stats_t *s = &c->streams[at];
  uint32_t nth = 0;
  for (uint32_t i = 0; i < at; i++)
    nth += c->streams[i].stream_id == s->stream_id &&
           strcmp(c->streams[i].table, s->table) == 0;
  for (uint32_t i = 0; p != NULL && i < p->nstreams; i++)
    if (p->streams[i].stream_id == s->stream_id &&
        strcmp(p->streams[i].table, s->table) == 0 && nth-- == 0)
      return &p->streams[i];
  return NULL;
}

#define TABLE_HEAD "%-16s %10s %10s %11s %11s %11s %11s %11s\n"
#define STREAM_HEAD "%-8s %-16s %-7s %10s %11s %7s\n"

/* The tables' rows and their totals. */
static void tables_frame(FILE *f, const snap_t *a, const snap_t *b, double dt) {
  char c[5][32];
  double ti = 0, ts = 0, twi = 0, tws = 0;
  uint64_t tsize = 0, tcap = 0, tins = 0, tsmp = 0;
  fprintf(f, TABLE_HEAD, "TABLE", "SIZE", "CAPACITY", "INSERT/S", "SAMPLE/S",
          "SAMPLED/INS", "RL_INS_WAIT", "RL_SMP_WAIT");
  for (uint32_t i = 0; i < b->st->ntables; i++) {
    const chime_table_stats_t *t = &b->st->tables[i];
    const chime_table_stats_t *p = prev_table(a->st, t->name);
    double ins = -1, smp = -1, wi = -1, ws = -1;
    if (p != NULL) {
      ins = rate(p->inserts, t->inserts, dt);
      smp = rate(p->samples, t->samples, dt);
      /* Wait seconds per second: callers waiting on the limiter, on
       * average over the interval (1.0: one waited all along). */
      wi = rate(p->rate_insert_wait_ns, t->rate_insert_wait_ns, dt) / 1e9;
      ws = rate(p->rate_sample_wait_ns, t->rate_sample_wait_ns, dt) / 1e9;
    }
    double ratio = t->inserts ? (double)t->samples / (double)t->inserts : -1;
    fprintf(f, "%-16s %10" PRIu64 " %10" PRIu64 " %11s %11s %11s %11s %11s\n",
            t->name, t->size, t->capacity, cell(c[0], sizeof(c[0]), 1, ins),
            cell(c[1], sizeof(c[1]), 1, smp),
            cell(c[2], sizeof(c[2]), 2, ratio),
            cell(c[3], sizeof(c[3]), 2, wi < 0 ? -1 : wi),
            cell(c[4], sizeof(c[4]), 2, ws < 0 ? -1 : ws));
    tsize += t->size;
    tcap += t->capacity;
    tins += t->inserts;
    tsmp += t->samples;
    ti += ins > 0 ? ins : 0;
    ts += smp > 0 ? smp : 0;
    twi += wi > 0 ? wi : 0;
    tws += ws > 0 ? ws : 0;
  }
  fprintf(
      f, "%-16s %10" PRIu64 " %10" PRIu64 " %11.1f %11.1f %11s %11.2f %11.2f\n",
      "total", tsize, tcap, ti, ts,
      cell(c[2], sizeof(c[2]), 2, tins ? (double)tsmp / (double)tins : -1), twi,
      tws);
}

/* Group tables whose admission filters dropped groups (docs/replay.md,
 * "Admission filters"): per reason, in all and per second; nothing when
 * no table dropped any. */
static void drops_frame(FILE *f, const snap_t *a, const snap_t *b, double dt) {
  char c[32];
  int head = 0;
  for (uint32_t i = 0; i < b->st->ntables; i++) {
    const chime_table_stats_t *t = &b->st->tables[i];
    const chime_table_stats_t *p = prev_table(a->st, t->name);
    uint64_t n = t->dropped_zero_variance + t->dropped_mean_outside;
    if (n == 0)
      continue;
    if (!head++)
      fprintf(f, "\n%-16s %14s %14s %11s\n", "GROUPS DROPPED", "ZERO_VARIANCE",
              "MEAN_OUTSIDE", "DROPPED/S");
    double r =
        p == NULL
            ? -1
            : rate(p->dropped_zero_variance + p->dropped_mean_outside, n, dt);
    fprintf(f, "%-16s %14" PRIu64 " %14" PRIu64 " %11s\n", t->name,
            t->dropped_zero_variance, t->dropped_mean_outside,
            cell(c, sizeof(c), 1, r));
  }
}

/* The streams' rows and their totals. */
static void streams_frame(FILE *f, const snap_t *a, const snap_t *b,
                          double dt) {
  char c[2][32];
  double tgb = 0, tbat = 0;
  uint64_t tleases = 0;
  fprintf(f, STREAM_HEAD, "STREAM", "TABLE", "MODE", "GB/S", "BATCHES/S",
          "LEASES");
  for (uint32_t i = 0; i < b->st->nstreams; i++) {
    const chime_stream_stats_t *s = &b->st->streams[i];
    const chime_stream_stats_t *p = prev_stream(a->st, b->st, i);
    double gb = p ? rate(p->bytes, s->bytes, dt) : -1;
    double bat = p ? rate(p->batches, s->batches, dt) : -1;
    fprintf(f, "%-8" PRIu64 " %-16s %-7s %10s %11s %7" PRIu32 "\n",
            s->stream_id, s->table, chime_mode_name((chime_mode_t)s->mode),
            cell(c[0], sizeof(c[0]), 3, gb < 0 ? -1 : gb / 1e9),
            cell(c[1], sizeof(c[1]), 1, bat), s->leases);
    tgb += gb > 0 ? gb / 1e9 : 0;
    tbat += bat > 0 ? bat : 0;
    tleases += s->leases;
  }
  if (b->st->nstreams == 0)
    fprintf(f, "(no streams)\n");
  fprintf(f, "%-8s %-16s %-7s %10.3f %11.1f %7" PRIu64 "\n", "total", "", "",
          tgb, tbat, tleases);
}

static const shard_snap_t *prev_shard(const snap_t *a, const char *addr) {
  for (uint32_t i = 0; addr != NULL && i < a->nshards; i++)
    if (a->shards[i].addr != NULL && !strcmp(a->shards[i].addr, addr) &&
        a->shards[i].st != NULL)
      return &a->shards[i];
  return NULL;
}

/* A sharded target's row per shard: its tables and streams as one. */
static void shards_frame(FILE *f, const snap_t *a, const snap_t *b, double dt) {
  int aw = (int)strlen("ADDRESS");
  for (uint32_t i = 0; i < b->nshards; i++)
    if (b->shards[i].addr != NULL && (int)strlen(b->shards[i].addr) > aw)
      aw = (int)strlen(b->shards[i].addr);
  fprintf(f, "%-*s %10s %11s %11s %10s %7s\n", aw, "ADDRESS", "SIZE",
          "INSERT/S", "SAMPLE/S", "GB/S", "STREAMS");
  for (uint32_t i = 0; i < b->nshards; i++) {
    const shard_snap_t *s = &b->shards[i], *p = prev_shard(a, s->addr);
    const char *addr = s->addr ? s->addr : "?";
    if (s->st == NULL) {
      fprintf(f, "%-*s error: %s\n", aw, addr, s->err);
      continue;
    }
    uint64_t now[4] = {0}, was[4] = {0}; /* size, inserts, samples, bytes */
    const chime_stats_t *st[2] = {s->st, p ? p->st : NULL};
    uint64_t *v[2] = {now, was};
    for (int k = 0; k < 2 && st[k] != NULL; k++) {
      for (uint32_t t = 0; t < st[k]->ntables; t++) {
        v[k][0] += st[k]->tables[t].size;
        v[k][1] += st[k]->tables[t].inserts;
        v[k][2] += st[k]->tables[t].samples;
      }
      for (uint32_t t = 0; t < st[k]->nstreams; t++)
        v[k][3] += st[k]->streams[t].bytes;
    }
    char c[3][32];
    double gb = p ? rate(was[3], now[3], dt) : -1;
    fprintf(
        f, "%-*s %10" PRIu64 " %11s %11s %10s %7" PRIu32 "\n", aw, addr, now[0],
        cell(c[0], sizeof(c[0]), 1, p ? rate(was[1], now[1], dt) : -1),
        cell(c[1], sizeof(c[1]), 1, p ? rate(was[2], now[2], dt) : -1),
        cell(c[2], sizeof(c[2]), 3, gb < 0 ? -1 : gb / 1e9), s->st->nstreams);
  }
  fprintf(f, "\n");
}

/* One frame from snapshots a (before) and b into f: over shards a row per
 * shard first; when the target's Stats failed, why (the shard rows say
 * which shard). */
static void frame(FILE *f, const char *target, const snap_t *a, const snap_t *b,
                  int live) {
  char when[32], r[32], p[32], sb[32], sg[32];
  time_t wall = time(NULL);
  struct tm tm;
  double dt = (double)(b->t_ns - a->t_ns) / 1e9;
  strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&wall, &tm));
  fprintf(f, "chimectl top %s  %s  over %.2f s%s\n\n", target, when, dt,
          live ? "  (q quits)" : "");
  if (b->nshards > 0)
    shards_frame(f, a, b, dt);
  const chime_stats_t *s = b->st;
  if (s == NULL) {
    fprintf(f, "error: %s\n", b->err);
    return;
  }
  tables_frame(f, a, b, dt);
  drops_frame(f, a, b, dt);
  fprintf(f, "\n");
  streams_frame(f, a, b, dt);
  fprintf(f,
          "\nrings %s, pinned %s, staged inserts %s of %s, insert calls "
          "parked %" PRIu32 "\n",
          human_bytes(r, sizeof(r), s->ring_bytes_total),
          human_bytes(p, sizeof(p), s->pinned_bytes),
          human_bytes(sb, sizeof(sb), s->staged_insert_bytes),
          human_bytes(sg, sizeof(sg), s->staged_insert_budget),
          s->insert_calls_parked);
}

/* Writes the frame at once (one write: no half-drawn screen). */
static int show(const char *target, const snap_t *a, const snap_t *b,
                int live) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL)
    return -1;
  if (live)
    fputs("\033[H\033[2J", f);
  frame(f, target, a, b, live);
  if (!live)
    fputs("\n", f);
  int rc = fclose(f) != 0 || fwrite(buf, 1, len, stdout) != len ||
                   fflush(stdout) != 0
               ? -1
               : 0;
  free(buf);
  return rc;
}

int chime__top_run(chime_client_t *c, const char *target,
                   const chime__top_opts_t *o) {
  int exit_code = 1, live = o->iterations == 0 && isatty(STDOUT_FILENO);
  snap_t a = {0}, b = {0};
  int64_t step = (int64_t)o->interval_ms * 1000000;
  if (snap_take(c, &a) != 0) {
    /* As info and stats: a server that does not answer is 1; 2 is for
     * command-line mistakes. */
    fprintf(stderr, "chimectl: top %s: %s\n", target, a.err);
    goto cleanup;
  }
  if (live) {
    term_live();
    /* Rates need a second snapshot: say so rather than a blank screen. */
    printf("\033[H\033[2Jchimectl top %s: the first rates in %.1f s\n", target,
           (double)o->interval_ms / 1000);
    fflush(stdout);
  }
  exit_code = 0;
  int64_t next = a.t_ns + step;
  for (uint64_t n = 0; o->iterations == 0 || n < o->iterations; n++) {
    if (wait_until(next))
      break;
    next += step;
    if (next < now_ns()) /* fell behind (a slow call): keep the pace */
      next = now_ns() + step;
    (void)snap_take(c, &b);
    if (b.st == NULL && !live)
      exit_code = 1; /* the frame says why */
    if (show(target, &a, &b, live) != 0) {
      exit_code = 1; /* stdout is gone: nobody sees more frames */
      break;
    }
    /* Rates go on from the last snapshot the target answered. */
    if (b.st != NULL || a.st == NULL) {
      snap_free(&a);
      a = b;
      memset(&b, 0, sizeof(b));
    } else {
      snap_free(&b);
    }
  }

cleanup:
  g_live = 0;
  term_restore();
  snap_free(&a);
  snap_free(&b);
  return exit_code;
}
