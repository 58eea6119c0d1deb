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
  chime__parked_t *next;
};

void chime__staging_init(chime__staging_t *g, uint64_t budget,
                         const chime__staging_calls_t *calls) {
  g->calls = calls;
  pthread_mutex_init(&g->mu, NULL);
  g->budget = budget;
  g->bytes = 0;
  g->largest = 0;
  g->parked_total = 0;
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

void chime__staging_recv(chime__staging_t *g, chime__call_t *c) {
  chime__parked_t *p = NULL;
  pthread_mutex_lock(&g->mu);
  if (full(g) || g->head != NULL)
    p = malloc(sizeof(*p));
  if (p != NULL) {
    g->calls->ref(c);
    p->call = c;
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
  /* Without memory for the list entry the call is read: one request more
   * beats a call that hangs for good. */
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
  int rc = 0;
  pthread_mutex_lock(&g->mu);
  if (bytes > g->largest)
    g->largest = bytes;
  if (g->bytes == 0 || (bytes <= g->budget && g->bytes <= g->budget - bytes))
    g->bytes += bytes;
  else
    rc = CHIME_ERESOURCE;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

void chime__staging_release(chime__staging_t *g, uint64_t bytes) {
  for (;;) {
    chime__parked_t *p = NULL;
    pthread_mutex_lock(&g->mu);
    if (bytes != 0) {
      g->bytes -= bytes < g->bytes ? bytes : g->bytes;
      bytes = 0;
      if (g->bytes == 0)
        g->largest = 0;
    }
    if (!full(g) && g->head != NULL) {
      p = g->head;
      g->head = p->next;
      if (g->head == NULL)
        g->tail = NULL;
      g->nparked--;
    }
    pthread_mutex_unlock(&g->mu);
    if (p == NULL)
      return;
    g->calls->recv(p->call);
    g->calls->unref(p->call);
    free(p);
  }
}

void chime__staging_get_stats(chime__staging_t *g,
                              chime__staging_stats_t *out) {
  pthread_mutex_lock(&g->mu);
  out->bytes = g->bytes;
  out->budget = g->budget;
  out->parked = g->nparked;
  out->parked_total = g->parked_total;
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
