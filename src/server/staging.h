/* The budget of staged insert bytes (budgets.staged_insert_bytes): requests
 * copied out of gRPC's buffers to wait for room in a full fifo table. Past
 * the budget, Insert calls are not read any further (parked) until staged
 * bytes go back under it: flow control instead of unbounded memory. A
 * request already read when the budget filled (its call was read before)
 * and that would pass the budget is refused, not staged: staged bytes never
 * exceed the budget, except one request when nothing else is staged (so a
 * request larger than the budget is not refused for ever). */
#ifndef CHIME_SERVER_STAGING_H
#define CHIME_SERVER_STAGING_H

#include <pthread.h>
#include <stdint.h>

/* state.h embeds the budget, so only the call type is named here. */
typedef struct chime__call_s chime__call_t;

/* What the budget does to an Insert call, handed to it at init (the
 * server's are call.h's functions; test_staging gives its own): a parked
 * call is held by a reference, and read once there is room. */
typedef struct {
  void (*ref)(chime__call_t *c);
  void (*unref)(chime__call_t *c);
  /* Asks for the call's next message. */
  void (*recv)(chime__call_t *c);
} chime__staging_calls_t;

typedef struct chime__parked_s chime__parked_t;

typedef struct chime__staging_s {
  const chime__staging_calls_t *calls;
  pthread_mutex_t mu;
  uint64_t budget;
  uint64_t bytes;        /* staged now */
  uint64_t largest;      /* the largest request offered so far */
  uint64_t parked_total; /* calls ever parked */
  uint32_t nparked;
  chime__parked_t *head, *tail; /* parked calls, oldest first */
} chime__staging_t;

void chime__staging_init(chime__staging_t *g, uint64_t budget,
                         const chime__staging_calls_t *calls);
/* Drops the reference of every call still parked. */
void chime__staging_fini(chime__staging_t *g);

/* Reads the call's next message when the budget has room; else parks the
 * call (taking a reference) and reads it once staged bytes go back under
 * the budget. */
void chime__staging_recv(chime__staging_t *g, chime__call_t *c);
/* The call ended: a parked call is let go (its reference dropped). */
void chime__staging_forget(chime__staging_t *g, chime__call_t *c);

/* Charges bytes when they fit the budget (or nothing is staged): 0, else
 * CHIME_ERESOURCE and nothing charged. */
int chime__staging_charge(chime__staging_t *g, uint64_t bytes);
/* Gives bytes back and reads parked calls while the budget has room. */
void chime__staging_release(chime__staging_t *g, uint64_t bytes);

/* Memory for a staged request's samples (n bytes, 0 allowed), mapped on
 * its own rather than taken from malloc's arenas, and given back to the
 * system by chime__staging_free: chimed keeps up to 256 MiB of freed
 * memory per arena for gRPC's buffers (common/malloc_tune.h), so staged
 * copies freed there stayed resident after they went in, and the budget
 * said less than chimed held. NULL when out of memory. */
void *chime__staging_alloc(size_t n);
/* NULL-safe; n as given to chime__staging_alloc. */
void chime__staging_free(void *p, size_t n);

typedef struct {
  uint64_t bytes, budget, parked, parked_total;
} chime__staging_stats_t;
void chime__staging_get_stats(chime__staging_t *g, chime__staging_stats_t *out);

#endif
