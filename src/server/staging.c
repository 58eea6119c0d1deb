/* Staged insert bytes against their budget, and the Insert calls parked
 * (not read) while the budget is spent. Parked calls are read again in the
 * order they were parked once staged bytes are back under the budget; a
 * call parks behind others already parked, so none is passed over for
 * good. */
#include "server/staging.h"

#include <stdlib.h>
#include <sys/mman.h>

#include "chime/errors.h"

struct chime__parked_s {
  chime__call_t *call;
  uint64_t *slot; /* a read that may reserve (staging.h); NULL: never */
  int always;     /* reserves even when nothing is staged or reserved */
  chime__parked_t *next;
};

/* Requests per run of the "read lately" maximum: the largest of the last
 * 256 to 512 requests is what a read reserves, so one large request does
 * not shrink the reads of small ones for good. */
#define CHIME__STAGING_SEEN_RUN 256

void chime__staging_init(chime__staging_t *g, uint64_t budget,
                         const chime__staging_calls_t *calls) {
  g->calls = calls;
  pthread_mutex_init(&g->mu, NULL);
  g->budget = budget;
  g->bytes = 0;
  g->largest = 0;
  g->parked_total = 0;
  g->reserved = 0;
  g->reads = 0;
  g->seen_cur = g->seen_prev = 0;
  g->seen_n = 0;
  g->peak = 0;
  g->nparked = 0;
  g->head = g->tail = NULL;
}

void chime__staging_fini(chime__staging_t *g) {
  chime__parked_t *p = g->head;
  g->head = g->tail = NULL;
  while (p != NULL) {
    chime__parked_t *n = p->next;
    g->calls->unref(p->call);
    free(p);
    p = n;
  }
  pthread_mutex_destroy(&g->mu);
}

/* Full: another request like the largest seen since staging was last empty
 * would not fit. (Since ever, one request over the budget, which goes in
 * when nothing else is staged, made every later request park all other
 * calls for the life of the process.) */
static int full(const chime__staging_t *g) {
  return g->bytes > 0 &&
         (g->bytes >= g->budget || g->largest > g->budget - g->bytes);
}

/* What a read that may end staged reserves: a request as large as the
 * largest read lately; before any was read, a 64th of the budget. */
static uint64_t estimate(const chime__staging_t *g) {
  uint64_t r = g->seen_cur > g->seen_prev ? g->seen_cur : g->seen_prev;
  if (r == 0)
    r = g->budget / 64;
  return r ? r : 1;
}

/* Whether a read reserves if asked for now (staging.h). */
static int reserves(const chime__staging_t *g, const uint64_t *slot,
                    int always) {
  return slot != NULL && (always || g->bytes + g->reserved > 0);
}

/* Whether a read may be asked for now. */
static int admits(const chime__staging_t *g, const uint64_t *slot, int always) {
  if (full(g))
    return 0;
  if (!reserves(g, slot, always))
    return 1;
  uint64_t held = g->bytes + g->reserved;
  uint64_t r = estimate(g);
  return held == 0 || (held < g->budget && r <= g->budget - held);
}

static void note_peak(chime__staging_t *g) {
  if (g->bytes + g->reserved > g->peak)
    g->peak = g->bytes + g->reserved;
}

/* One reservation per call: its one read in the works. */
static void reserve(chime__staging_t *g, uint64_t *slot, int always) {
  if (!reserves(g, slot, always) || *slot != 0)
    return;
  uint64_t r = estimate(g);
  *slot = r;
  g->reserved += r;
  g->reads++;
  note_peak(g);
}

void chime__staging_recv(chime__staging_t *g, chime__call_t *c) {
  chime__staging_recv_reserved(g, c, NULL, 0);
}

void chime__staging_recv_reserved(chime__staging_t *g, chime__call_t *c,
                                  uint64_t *slot, int always) {
  chime__parked_t *p = NULL;
  pthread_mutex_lock(&g->mu);
  if (!admits(g, slot, always) || g->head != NULL)
    p = malloc(sizeof(*p));
  /* Without memory for the list entry the call is read: one request more
   * beats a call that hangs for good. */
  if (p == NULL)
    reserve(g, slot, always);
  else {
    g->calls->ref(c);
    p->call = c;
    p->slot = slot;
    p->always = always;
    p->next = NULL;
    if (g->tail != NULL)
      g->tail->next = p;
    else
      g->head = p;
    g->tail = p;
    g->nparked++;
    g->parked_total++;
  }
  pthread_mutex_unlock(&g->mu);
  if (p == NULL)
    g->calls->recv(c);
}

void chime__staging_forget(chime__staging_t *g, chime__call_t *c) {
  chime__parked_t *found = NULL;
  pthread_mutex_lock(&g->mu);
  for (chime__parked_t **pp = &g->head, *prev = NULL; *pp != NULL;
       prev = *pp, pp = &(*pp)->next) {
    if ((*pp)->call != c)
      continue;
    found = *pp;
    *pp = found->next;
    if (g->tail == found)
      g->tail = prev;
    g->nparked--;
    break;
  }
  pthread_mutex_unlock(&g->mu);
  if (found != NULL) {
    g->calls->unref(found->call);
    free(found);
  }
}

int chime__staging_charge(chime__staging_t *g, uint64_t bytes) {
  uint64_t none = 0;
  return chime__staging_charge_from(g, bytes, &none);
}

int chime__staging_charge_from(chime__staging_t *g, uint64_t bytes,
                               uint64_t *taken) {
  int rc = 0;
  pthread_mutex_lock(&g->mu);
  if (*taken != 0) {
    g->reserved -= *taken < g->reserved ? *taken : g->reserved;
    g->reads -= g->reads > 0;
    *taken = 0;
  }
  if (bytes > g->largest)
    g->largest = bytes;
  if (g->bytes == 0 || (bytes <= g->budget && g->bytes <= g->budget - bytes))
    g->bytes += bytes;
  else
    rc = CHIME_ERESOURCE;
  note_peak(g);
  pthread_mutex_unlock(&g->mu);
  return rc;
}

void chime__staging_seen(chime__staging_t *g, uint64_t bytes) {
  pthread_mutex_lock(&g->mu);
  if (g->seen_n++ == CHIME__STAGING_SEEN_RUN) {
    g->seen_prev = g->seen_cur;
    g->seen_cur = 0;
    g->seen_n = 1;
  }
  if (bytes > g->seen_cur)
    g->seen_cur = bytes;
  pthread_mutex_unlock(&g->mu);
}

uint64_t chime__staging_take(chime__staging_t *g, uint64_t *slot) {
  pthread_mutex_lock(&g->mu);
  uint64_t r = *slot;
  *slot = 0;
  pthread_mutex_unlock(&g->mu);
  return r;
}

/* Gives back staged bytes and reserved bytes (one read fewer when
 * reserved), then reads parked calls while they fit, oldest first. */
static void give_back(chime__staging_t *g, uint64_t bytes, uint64_t reserved) {
  for (;;) {
    chime__parked_t *p = NULL;
    pthread_mutex_lock(&g->mu);
    if (bytes != 0) {
      g->bytes -= bytes < g->bytes ? bytes : g->bytes;
      bytes = 0;
      if (g->bytes == 0)
        g->largest = 0;
    }
    if (reserved != 0) {
      g->reserved -= reserved < g->reserved ? reserved : g->reserved;
      g->reads -= g->reads > 0;
      reserved = 0;
    }
    if (g->head != NULL && admits(g, g->head->slot, g->head->always)) {
      p = g->head;
      g->head = p->next;
      if (g->head == NULL)
        g->tail = NULL;
      g->nparked--;
      reserve(g, p->slot, p->always);
    }
    pthread_mutex_unlock(&g->mu);
    if (p == NULL)
      return;
    g->calls->recv(p->call);
    g->calls->unref(p->call);
    free(p);
  }
}

void chime__staging_release(chime__staging_t *g, uint64_t bytes) {
  give_back(g, bytes, 0);
}

void chime__staging_unreserve_bytes(chime__staging_t *g, uint64_t bytes) {
  give_back(g, 0, bytes);
}

void chime__staging_unreserve(chime__staging_t *g, uint64_t *slot) {
  chime__staging_unreserve_bytes(g, chime__staging_take(g, slot));
}

void chime__staging_get_stats(chime__staging_t *g,
                              chime__staging_stats_t *out) {
  pthread_mutex_lock(&g->mu);
  out->bytes = g->bytes;
  out->budget = g->budget;
  out->parked = g->nparked;
  out->parked_total = g->parked_total;
  out->reserved = g->reserved;
  out->reads = g->reads;
  out->peak = g->peak;
  pthread_mutex_unlock(&g->mu);
}

void *chime__staging_alloc(size_t n) {
  void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void chime__staging_free(void *p, size_t n) {
  if (p != NULL)
    munmap(p, n ? n : 1);
}
