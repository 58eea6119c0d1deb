/* Per-writer request memory (see dedupe.h). A writer's window is a ring in
 * insertion order, which is also seq order: a new request must carry a seq
 * above every one remembered, so "older than the newest and not in the
 * window" means the server cannot tell whether it went in, and refuses. */
#include "server/dedupe.h"

#include <stdlib.h>

#include "chime/errors.h"
#include "wire/insert.h"

typedef struct {
  uint64_t seq, first_key;
  uint32_t count;
} entry_t;

typedef struct writer_s writer_t;
struct writer_s {
  uint64_t id;
  writer_t *hnext;         /* bucket chain */
  writer_t *newer, *older; /* LRU list */
  uint32_t head, n;        /* window: win[head .. head + n), oldest first */
  entry_t win[CHIME__INSERT_WINDOW];
};

struct chime__dedupe_s {
  writer_t **buckets;
  uint32_t mask;
  uint32_t nwriters, max_writers;
  writer_t *newest, *oldest;
  /* Once a writer was forgotten, an unknown writer may be a forgotten one. */
  uint64_t forgotten;
};

int chime__dedupe_create(chime__dedupe_t **out, uint32_t max_writers) {
  chime__dedupe_t *d = calloc(1, sizeof(*d));
  uint32_t nb = 16;
  *out = NULL;
  if (d == NULL || max_writers == 0) {
    free(d);
    return d == NULL ? CHIME_ENOMEM : CHIME_EINVAL;
  }
  while (nb < max_writers && nb < (1u << 30))
    nb *= 2;
  d->buckets = calloc(nb, sizeof(*d->buckets));
  if (d->buckets == NULL) {
    free(d);
    return CHIME_ENOMEM;
  }
  d->mask = nb - 1;
  d->max_writers = max_writers;
  *out = d;
  return 0;
}

void chime__dedupe_destroy(chime__dedupe_t *d) {
  if (d == NULL)
    return;
  writer_t *w = d->newest;
  while (w != NULL) {
    writer_t *next = w->older;
    free(w);
    w = next;
  }
  free(d->buckets);
  free(d);
}

static writer_t **bucket(chime__dedupe_t *d, uint64_t id) {
  /* Ids are random, but a client may pick them badly: mix anyway. */
  uint64_t h = id * UINT64_C(0x9E3779B97F4A7C15);
  return &d->buckets[(uint32_t)(h >> 32) & d->mask];
}

static void lru_unlink(chime__dedupe_t *d, writer_t *w) {
  if (w->newer != NULL)
    w->newer->older = w->older;
  else
    d->newest = w->older;
  if (w->older != NULL)
    w->older->newer = w->newer;
  else
    d->oldest = w->newer;
  w->newer = w->older = NULL;
}

static void lru_push(chime__dedupe_t *d, writer_t *w) {
  w->older = d->newest;
  w->newer = NULL;
  if (d->newest != NULL)
    d->newest->newer = w;
  else
    d->oldest = w;
  d->newest = w;
}

static writer_t *find(chime__dedupe_t *d, uint64_t id) {
  for (writer_t *w = *bucket(d, id); w != NULL; w = w->hnext)
    if (w->id == id)
      return w;
  return NULL;
}

static void unhash(chime__dedupe_t *d, writer_t *w) {
  writer_t **p = bucket(d, w->id);
  while (*p != w)
    p = &(*p)->hnext;
  *p = w->hnext;
}

/* A new writer, taking the least recently used one's place when full. */
static writer_t *add(chime__dedupe_t *d, uint64_t id) {
  writer_t *w;
  if (d->nwriters == d->max_writers) {
    w = d->oldest;
    lru_unlink(d, w);
    unhash(d, w);
    d->forgotten++;
  } else {
    w = malloc(sizeof(*w));
    if (w == NULL)
      return NULL;
    d->nwriters++;
  }
  w->id = id;
  w->head = w->n = 0;
  writer_t **b = bucket(d, id);
  w->hnext = *b;
  *b = w;
  lru_push(d, w);
  return w;
}

int chime__dedupe_check(chime__dedupe_t *d, chime__dedupe_req_t *q,
                        uint32_t count, uint64_t *first_key) {
  writer_t *w = find(d, q->writer);
  q->resent = q->refused = 0;
  if (w == NULL) {
    /* A writer numbers its requests from 1 and resends only what followed
     * its last ack: an unknown writer past its first request was
     * forgotten, unless nobody ever was. */
    if (q->seq > 1 && d->forgotten > 0) {
      q->known = 0;
      q->refused = 1;
      return CHIME_EEXIST;
    }
    return add(d, q->writer) != NULL ? CHIME__DEDUPE_NEW : CHIME_ENOMEM;
  }
  lru_unlink(d, w);
  lru_push(d, w);
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
