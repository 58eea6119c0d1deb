/* Internal: the registry of the server's streams. It owns the list of open
 * streams (for GetInfo, Stats, stop and destroy), the stream count (open
 * ones and ones still draining, capped at CHIME__MAX_STREAMS) and the ring
 * bytes charged against the budgets (budgets.stream_ring_bytes per stream,
 * budgets.total_ring_bytes in all). It knows streams only as nodes with an
 * owner pointer, so it includes nothing of stream.c. Its lock is a leaf:
 * taken after srv->mu when both are held (Stats), never before it. */
#ifndef CHIME_SERVER_REGISTRY_H
#define CHIME_SERVER_REGISTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

/* Each stream has a sampler job and buffers: a cap keeps a flood of opens
 * from exhausting them. */
#define CHIME__MAX_STREAMS 1024

/* A stream's place in the list, embedded in the stream. */
typedef struct chime__registry_node_s {
  chime__link_t link;
  void *owner; /* the stream */
  int listed;
} chime__registry_node_t;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cond; /* count fell */
  chime__list_t list;
  uint32_t count;      /* streams entered and not yet exited */
  uint32_t listed;     /* on the list */
  uint64_t ring_bytes; /* charged now */
  uint64_t next_id;
  uint64_t stream_budget, total_budget;
} chime__registry_t;

void chime__registry_init(chime__registry_t *r, uint64_t stream_budget,
                          uint64_t total_budget);
void chime__registry_fini(chime__registry_t *r);
/* The budgets, once the config is read (before any stream opens). */
void chime__registry_set_budgets(chime__registry_t *r, uint64_t stream_budget,
                                 uint64_t total_budget);

/* Whether one ring of `bytes` fits the per-stream budget: 0, or
 * CHIME_ERESOURCE with err for the client. Checked before anything of the
 * stream is created, so a refused stream costs nothing. */
int chime__registry_check(chime__registry_t *r, uint64_t bytes, char *err,
                          size_t errlen);
/* Counts a new stream (always: chime__registry_exit undoes it, even when
 * this fails), then charges `bytes` of ring if the total budget has them
 * left and the count is within CHIME__MAX_STREAMS. 0, or CHIME_ERESOURCE
 * with err for the client (nothing charged). */
int chime__registry_enter(chime__registry_t *r, uint64_t bytes, char *err,
                          size_t errlen);
/* The stream's memory is gone: it no longer counts (wakes wait_empty). */
void chime__registry_exit(chime__registry_t *r);
/* The ring's charge goes (its last hold): bytes as charged by enter. */
void chime__registry_uncharge(chime__registry_t *r, uint64_t bytes);

/* Lists a stream that is open and returns its id (1, 2, ...). */
uint64_t chime__registry_add(chime__registry_t *r, chime__registry_node_t *node,
                             void *owner);
/* Takes it off the list; nothing when it was not on it. */
void chime__registry_remove(chime__registry_t *r, chime__registry_node_t *node);

/* Walking the list: between lock and unlock the streams listed stay (a
 * stream leaves the list before it can go), first/next walk them and
 * listed/ring_bytes are consistent with the walk. Nothing that takes
 * srv->mu, and no registry call, may run under the lock. */
void chime__registry_lock(chime__registry_t *r);
void chime__registry_unlock(chime__registry_t *r);
void *chime__registry_first(chime__registry_t *r, chime__registry_node_t **it);
void *chime__registry_next(chime__registry_node_t **it);
uint32_t chime__registry_listed(const chime__registry_t *r);
uint64_t chime__registry_ring_bytes(const chime__registry_t *r);

/* The streams counted now (open or draining). */
uint32_t chime__registry_count(chime__registry_t *r);
/* Waits up to ms for the count to reach 0; returns the count then. */
uint32_t chime__registry_wait_empty(chime__registry_t *r, int ms);

#endif
