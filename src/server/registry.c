/* The registry of the server's streams: their list, their count and the
 * ring bytes charged to the budgets, under one leaf lock (registry.h). */
#include "server/registry.h"

#include <string.h>
#include <time.h>

#include "chime/chime.h"
#include "common/clock.h"
#include "common/errfmt.h"

void chime__registry_init(chime__registry_t *r, uint64_t stream_budget,
                          uint64_t total_budget) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cond, NULL);
  r->stream_budget = stream_budget;
  r->total_budget = total_budget;
}

void chime__registry_fini(chime__registry_t *r) {
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cond);
}

void chime__registry_set_budgets(chime__registry_t *r, uint64_t stream_budget,
                                 uint64_t total_budget) {
  r->stream_budget = stream_budget;
  r->total_budget = total_budget;
}

int chime__registry_check(chime__registry_t *r, uint64_t bytes, char *err,
                          size_t errlen) {
  if (bytes > r->stream_budget)
    return chime__fail(err, errlen, CHIME_ERESOURCE,
                       "stream needs %llu bytes of ring; per-stream budget is "
                       "%llu bytes",
                       (unsigned long long)bytes,
                       (unsigned long long)r->stream_budget);
  return 0;
}

int chime__registry_enter(chime__registry_t *r, uint64_t bytes, char *err,
                          size_t errlen) {
  pthread_mutex_lock(&r->mu);
  r->count++;
  uint64_t left = r->total_budget - r->ring_bytes;
  if (bytes > left) {
    pthread_mutex_unlock(&r->mu);
    return chime__fail(
        err, errlen, CHIME_ERESOURCE,
        "stream needs %llu bytes of ring; %llu of the total budget of "
        "%llu bytes is left",
        (unsigned long long)bytes, (unsigned long long)left,
        (unsigned long long)r->total_budget);
  }
  /* count includes this one, and streams still draining. */
  if (r->count > CHIME__MAX_STREAMS) {
    pthread_mutex_unlock(&r->mu);
    return chime__fail(err, errlen, CHIME_ERESOURCE,
                       "too many streams: at most %d at once",
                       CHIME__MAX_STREAMS);
  }
  r->ring_bytes += bytes;
  pthread_mutex_unlock(&r->mu);
  return 0;
}

void chime__registry_exit(chime__registry_t *r) {
  pthread_mutex_lock(&r->mu);
  r->count--;
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->mu);
}

void chime__registry_uncharge(chime__registry_t *r, uint64_t bytes) {
  pthread_mutex_lock(&r->mu);
  r->ring_bytes -= bytes;
  pthread_mutex_unlock(&r->mu);
}

uint64_t chime__registry_add(chime__registry_t *r, chime__registry_node_t *node,
                             void *owner) {
  pthread_mutex_lock(&r->mu);
  uint64_t id = ++r->next_id;
  node->owner = owner;
  chime__list_push(&r->list, &node->link);
  node->listed = 1;
  r->listed++;
  pthread_mutex_unlock(&r->mu);
  return id;
}

void chime__registry_remove(chime__registry_t *r,
                            chime__registry_node_t *node) {
  pthread_mutex_lock(&r->mu);
  if (node->listed) {
    chime__list_remove(&r->list, &node->link);
    node->listed = 0;
    r->listed--;
  }
  pthread_mutex_unlock(&r->mu);
}

void chime__registry_lock(chime__registry_t *r) {
  pthread_mutex_lock(&r->mu);
}

void chime__registry_unlock(chime__registry_t *r) {
  pthread_mutex_unlock(&r->mu);
}

/* The node at link k and its stream; NULL at the end. */
static void *at(chime__link_t *k, chime__registry_node_t **it) {
  *it = k != NULL ? CHIME__CONTAINER(k, chime__registry_node_t, link) : NULL;
  return *it != NULL ? (*it)->owner : NULL;
}

void *chime__registry_first(chime__registry_t *r, chime__registry_node_t **it) {
  return at(r->list.head, it);
}

void *chime__registry_next(chime__registry_node_t **it) {
  return at((*it)->link.next, it);
}

uint32_t chime__registry_listed(const chime__registry_t *r) {
  return r->listed;
}

uint64_t chime__registry_ring_bytes(const chime__registry_t *r) {
  return r->ring_bytes;
}

uint32_t chime__registry_count(chime__registry_t *r) {
  pthread_mutex_lock(&r->mu);
  uint32_t n = r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}

uint32_t chime__registry_wait_empty(chime__registry_t *r, int ms) {
  struct timespec dl = chime__clock_after_ms(CLOCK_REALTIME, (uint64_t)ms);
  pthread_mutex_lock(&r->mu);
  while (r->count > 0) {
    if (pthread_cond_timedwait(&r->cond, &r->mu, &dl) != 0)
      break;
  }
  uint32_t n = r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}
