/* Per-writer request memory (see dedupe.h). A writer's window is a ring in
 * insertion order, which is also seq order: a new request must carry a seq
 * above every one remembered, so "older than the newest and not in the
 * window" means the server cannot tell whether it went in, and refuses.
 *
 * A writer no call binds is on one of two lists, newest at the head: idle
 * (by the time it became idle) or closed (by the time it closed); a bound
 * writer is on neither. A new writer's place comes from the tail of closed,
 * then from the tail of idle when that one is old enough: O(1) either way. */
#include "replay/dedupe.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chime/errors.h"
#include "common/clock.h"
#include "common/insert_window.h"

typedef chime__dedupe_entry_t entry_t;

enum { ON_NONE, ON_IDLE, ON_CLOSED };

typedef struct writer_s writer_t;
struct writer_s {
  uint64_t id;
  writer_t *hnext;         /* bucket chain */
  writer_t *newer, *older; /* its list (idle or closed), while on one */
  uint64_t since_ms;       /* idle or closed since */
  uint32_t binds;          /* open calls that carried it */
  uint32_t owner;          /* whose places it counts against (0: nobody's) */
  int on;                  /* ON_* */
  uint32_t head, n;        /* window: win[head .. head + n), oldest first */
  entry_t win[CHIME__INSERT_WINDOW];
};

typedef struct {
  writer_t *newest, *oldest;
} list_t;

struct chime__dedupe_s {
  writer_t **buckets;
  uint32_t mask;
  uint32_t nwriters, max_writers, nbound;
  uint64_t idle_ms;
  list_t idle, closed;
  /* Once a writer was forgotten, or the table restored from a checkpoint
   * (which keeps no writers), an unknown writer may be a forgotten one. */
  uint64_t forgotten, refused, share_refused;
  int restored;
  /* Owners' shares (chime__dedupe_set_owners): held[o] counts owner o's
   * writers on no closed list (bound or idle), owed_total sums over owners
   * 1..nowners what each still lacks of owed_each. nclosed: writers on the
   * closed list, places anyone may take. */
  uint32_t nowners, owed_each, nclosed;
  uint64_t owed_total;
  uint32_t *held;
  uint64_t (*now_ms)(void *);
  void *now_arg;
};

static uint64_t mono_ms(void *arg) {
  (void)arg;
  return (uint64_t)chime__now_ms();
}

int chime__dedupe_create(chime__dedupe_t **out, uint32_t max_writers,
                         uint64_t idle_ms) {
  chime__dedupe_t *d = calloc(1, sizeof(*d));
  uint32_t nb = 16;
  *out = NULL;
  if (d == NULL)
    return CHIME_ENOMEM;
  if (max_writers == 0)
    max_writers = CHIME__INSERT_WRITERS;
  while (nb < max_writers && nb < (1u << 30))
    nb *= 2;
  d->buckets = calloc(nb, sizeof(*d->buckets));
  if (d->buckets == NULL) {
    free(d);
    return CHIME_ENOMEM;
  }
  d->mask = nb - 1;
  d->max_writers = max_writers;
  d->idle_ms = idle_ms;
  d->now_ms = mono_ms;
  *out = d;
  return 0;
}

void chime__dedupe_destroy(chime__dedupe_t *d) {
  if (d == NULL)
    return;
  /* Every writer remembered is in a bucket (bound ones on no list). */
  for (uint32_t i = 0; i <= d->mask; i++)
    for (writer_t *w = d->buckets[i], *next; w != NULL; w = next) {
      next = w->hnext;
      free(w);
    }
  free(d->buckets);
  free(d->held);
  free(d);
}

int chime__dedupe_set_owners(chime__dedupe_t *d, uint32_t nowners,
                             uint32_t reserve_pct) {
  uint64_t each =
      nowners >= 2 ? (uint64_t)d->max_writers * reserve_pct / 100 / nowners : 0;
  if (each == 0)
    return 0; /* one owner (or none) has nobody to keep places for */
  d->held = calloc((size_t)nowners + 1, sizeof(*d->held));
  if (d->held == NULL)
    return CHIME_ENOMEM;
  d->nowners = nowners;
  d->owed_each = (uint32_t)each;
  d->owed_total = each * nowners;
  return 0;
}

void chime__dedupe_set_clock(chime__dedupe_t *d, uint64_t (*now_ms)(void *),
                             void *arg) {
  d->now_ms = now_ms != NULL ? now_ms : mono_ms;
  d->now_arg = arg;
}

static writer_t **bucket(chime__dedupe_t *d, uint64_t id) {
  /* Ids are random, but a client may pick them badly: mix anyway. */
  uint64_t h = id * UINT64_C(0x9E3779B97F4A7C15);
  return &d->buckets[(uint32_t)(h >> 32) & d->mask];
}

/* What owner o still lacks of its share (0 for owner 0, who has none). */
static uint64_t owed(const chime__dedupe_t *d, uint32_t o) {
  if (o == 0 || o > d->nowners || d->held[o] >= d->owed_each)
    return 0;
  return d->owed_each - d->held[o];
}

/* A writer of owner o starts (+1) or stops (-1) holding a place: it is
 * remembered and not closed. */
static void hold(chime__dedupe_t *d, uint32_t o, int delta) {
  if (d->nowners == 0 || o > d->nowners)
    return;
  uint64_t before = owed(d, o);
  d->held[o] += (uint32_t)delta;
  d->owed_total = d->owed_total - before + owed(d, o);
}

static list_t *list_of(chime__dedupe_t *d, const writer_t *w) {
  return w->on == ON_IDLE ? &d->idle : &d->closed;
}

static void list_unlink(chime__dedupe_t *d, writer_t *w) {
  if (w->on == ON_NONE)
    return;
  list_t *l = list_of(d, w);
  if (w->newer != NULL)
    w->newer->older = w->older;
  else
    l->newest = w->older;
  if (w->older != NULL)
    w->older->newer = w->newer;
  else
    l->oldest = w->newer;
  w->newer = w->older = NULL;
  if (w->on == ON_CLOSED) {
    d->nclosed--;
    hold(d, w->owner, +1);
  }
  w->on = ON_NONE;
}

/* Puts w (on no list) at the head of list `on`, since now. */
static void list_push(chime__dedupe_t *d, writer_t *w, int on) {
  w->on = on;
  if (on == ON_CLOSED) {
    d->nclosed++;
    hold(d, w->owner, -1);
  }
  list_t *l = list_of(d, w);
  w->since_ms = d->now_ms(d->now_arg);
  w->older = l->newest;
  w->newer = NULL;
  if (l->newest != NULL)
    l->newest->newer = w;
  else
    l->oldest = w;
  l->newest = w;
}

static writer_t *find(chime__dedupe_t *d, uint64_t id) {
  for (writer_t *w = *bucket(d, id); w != NULL; w = w->hnext)
    if (w->id == id)
      return w;
  return NULL;
}

/* Whether a new writer of owner o would take one of the places kept for
 * other owners that hold less than their share: only an owner at or past
 * its own share is held back, and only when the places anyone may take
 * (free or closed) do not exceed what the others are owed. Owner 0 (no
 * actor token: admin, in-process) is never held back. */
static int over_share(const chime__dedupe_t *d, uint32_t o) {
  if (d->nowners == 0 || o == 0 || o > d->nowners || owed(d, o) > 0 ||
      d->owed_total == 0)
    return 0;
  uint64_t takeable = (uint64_t)(d->max_writers - d->nwriters) + d->nclosed;
  return takeable <= d->owed_total;
}

static void unhash(chime__dedupe_t *d, writer_t *w) {
  writer_t **p = bucket(d, w->id);
  while (*p != w)
    p = &(*p)->hnext;
  *p = w->hnext;
}

/* The writer whose place a new one may take, or NULL: closed first, then
 * idle for idle_ms or more; never a bound one. */
static writer_t *victim(chime__dedupe_t *d) {
  if (d->closed.oldest != NULL)
    return d->closed.oldest;
  writer_t *w = d->idle.oldest;
  if (w != NULL && d->now_ms(d->now_arg) - w->since_ms >= d->idle_ms)
    return w;
  return NULL;
}

/* Takes in a writer not remembered (on no list yet), or says why not. */
static int add(chime__dedupe_t *d, uint64_t id, uint64_t seq, uint32_t owner,
               writer_t **out) {
  writer_t *w;
  /* A writer numbers its requests from 1 and resends only what followed
   * its last ack: an unknown writer past its first request was forgotten,
   * unless nobody ever was (nor were all, by a restore). */
  if (seq > 1 && (d->forgotten > 0 || d->restored))
    return CHIME_EFORGOTTEN;
  if (over_share(d, owner)) {
    d->refused++;
    d->share_refused++;
    return CHIME_ERESOURCE;
  }
  if (d->nwriters == d->max_writers) {
    w = victim(d);
    if (w == NULL) {
      d->refused++;
      return CHIME_ERESOURCE;
    }
    list_unlink(d, w);
    hold(d, w->owner, -1);
    unhash(d, w);
    d->forgotten++;
  } else {
    w = malloc(sizeof(*w));
    if (w == NULL)
      return CHIME_ENOMEM;
    d->nwriters++;
  }
  w->id = id;
  w->newer = w->older = NULL;
  w->on = ON_NONE;
  w->binds = 0;
  w->owner = owner <= d->nowners ? owner : 0;
  hold(d, w->owner, +1);
  w->head = w->n = 0;
  writer_t **b = bucket(d, id);
  w->hnext = *b;
  *b = w;
  *out = w;
  return 0;
}

void chime__dedupe_restored(chime__dedupe_t *d) {
  d->restored = 1;
}

int chime__dedupe_was_restored(const chime__dedupe_t *d) {
  return d->restored;
}

int chime__dedupe_bind(chime__dedupe_t *d, uint64_t writer, uint64_t seq) {
  return chime__dedupe_bind_as(d, writer, seq, 0);
}

int chime__dedupe_bind_as(chime__dedupe_t *d, uint64_t writer, uint64_t seq,
                          uint32_t owner) {
  writer_t *w = find(d, writer);
  if (w == NULL) {
    int rc = add(d, writer, seq, owner, &w);
    if (rc != 0)
      return rc;
  }
  list_unlink(d, w);
  if (w->binds++ == 0)
    d->nbound++;
  return 0;
}

void chime__dedupe_unbind(chime__dedupe_t *d, uint64_t writer, int closed) {
  writer_t *w = find(d, writer);
  if (w == NULL || w->binds == 0)
    return; /* never bound: nothing to undo */
  if (--w->binds > 0)
    return;
  d->nbound--;
  list_push(d, w, closed ? ON_CLOSED : ON_IDLE);
}

int chime__dedupe_check(chime__dedupe_t *d, chime__dedupe_req_t *q,
                        uint32_t count, uint64_t *first_key) {
  writer_t *w = find(d, q->writer);
  q->resent = q->refused = 0;
  if (w == NULL) {
    int rc = add(d, q->writer, q->seq, 0, &w);
    if (rc != 0) {
      q->refused = rc != CHIME_ENOMEM;
      return rc;
    }
  }
  if (w->binds == 0) {
    /* Used without a call (in-process callers): idle from now. */
    list_unlink(d, w);
    list_push(d, w, ON_IDLE);
  }
  if (w->n == 0)
    return CHIME__DEDUPE_NEW;
  const entry_t *newest = &w->win[(w->head + w->n - 1) % CHIME__INSERT_WINDOW];
  if (q->seq > newest->seq)
    return CHIME__DEDUPE_NEW;
  for (uint32_t i = 0; i < w->n; i++) {
    const entry_t *e = &w->win[(w->head + i) % CHIME__INSERT_WINDOW];
    if (e->seq != q->seq)
      continue;
    if (e->count != count) {
      q->known = e->count;
      q->refused = 1;
      return CHIME_EINVAL;
    }
    *first_key = e->first_key;
    q->resent = 1;
    return CHIME__DEDUPE_RESENT;
  }
  q->known = newest->seq;
  q->refused = 1;
  return CHIME_EEXIST;
}

void chime__dedupe_record(chime__dedupe_t *d, const chime__dedupe_req_t *q,
                          uint32_t count, uint64_t first_key) {
  writer_t *w = find(d, q->writer);
  if (w == NULL)
    return; /* not after a check that found it new */
  entry_t *e;
  if (w->n == CHIME__INSERT_WINDOW) {
    e = &w->win[w->head];
    w->head = (w->head + 1) % CHIME__INSERT_WINDOW;
  } else {
    e = &w->win[(w->head + w->n) % CHIME__INSERT_WINDOW];
    w->n++;
  }
  e->seq = q->seq;
  e->first_key = first_key;
  e->count = count;
}

uint32_t chime__dedupe_writers(const chime__dedupe_t *d) {
  return d->nwriters;
}

int chime__dedupe_copy_alloc(chime__dedupe_copy_t *c, uint32_t cap) {
  memset(c, 0, sizeof(*c));
  size_t m = cap ? cap : 1;
  c->writers = malloc(m * sizeof(*c->writers));
  c->entries = malloc(m * CHIME__INSERT_WINDOW * sizeof(*c->entries));
  if (c->writers == NULL || c->entries == NULL) {
    chime__dedupe_copy_free(c);
    return CHIME_ENOMEM;
  }
  /* Touched here, so that no page fault lengthens the copy's hold of the
   * table's lock (docs/operations.md, Checkpoints: the pause). */
  memset(c->writers, 0, m * sizeof(*c->writers));
  memset(c->entries, 0, m * CHIME__INSERT_WINDOW * sizeof(*c->entries));
  c->cap = cap;
  return 0;
}

void chime__dedupe_copy_free(chime__dedupe_copy_t *c) {
  free(c->writers);
  free(c->entries);
  memset(c, 0, sizeof(*c));
}

int chime__dedupe_copy(const chime__dedupe_t *d, chime__dedupe_copy_t *c) {
  uint32_t nw = 0, ne = 0;
  c->forgot = d->forgotten > 0 || d->restored;
  for (uint32_t b = 0; b <= d->mask; b++)
    for (const writer_t *w = d->buckets[b]; w != NULL; w = w->hnext) {
      if (w->n == 0) /* nothing of it went in */
        continue;
      if (nw == c->cap) {
        c->nwriters = 0;
        return CHIME_EOVERFLOW;
      }
      c->writers[nw++] = (chime__dedupe_writer_t){w->id, ne, w->n};
      for (uint32_t i = 0; i < w->n; i++)
        c->entries[ne++] = w->win[(w->head + i) % CHIME__INSERT_WINDOW];
    }
  c->nwriters = nw;
  return 0;
}

int chime__dedupe_load(chime__dedupe_t *d, uint64_t writer,
                       const chime__dedupe_entry_t *e, uint32_t n) {
  writer_t *w;
  if (writer == 0 || n == 0 || n > CHIME__INSERT_WINDOW)
    return CHIME_EINVAL;
  for (uint32_t i = 0; i < n; i++)
    if (e[i].seq == 0 || (i > 0 && e[i].seq <= e[i - 1].seq))
      return CHIME_EINVAL;
  if (find(d, writer) != NULL)
    return CHIME_EEXIST;
  if (d->nwriters == d->max_writers)
    return CHIME_ERESOURCE; /* nobody's place is taken for it */
  /* Its first request, as add() wants a new writer's: not refused as a
   * forgotten one, which it is not. No token's (owner 0): a checkpoint
   * does not say whose it was, so it counts against no token's share. */
  int rc = add(d, writer, 1, 0, &w);
  if (rc != 0)
    return rc;
  memcpy(w->win, e, n * sizeof(*e));
  w->n = n;
  list_push(d, w, ON_IDLE);
  return 0;
}

void chime__dedupe_set_restored(chime__dedupe_t *d, int forgot) {
  d->restored = forgot != 0;
}

void chime__dedupe_stats(const chime__dedupe_t *d, chime__dedupe_stats_t *out) {
  out->writers = d->nwriters;
  out->bound = d->nbound;
  out->forgotten = d->forgotten;
  out->refused = d->refused;
  out->share_refused = d->share_refused;
}

uint32_t chime__dedupe_owner_held(const chime__dedupe_t *d, uint32_t owner) {
  return d->nowners != 0 && owner <= d->nowners ? d->held[owner] : 0;
}
