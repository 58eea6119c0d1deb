/* The budget of staged insert bytes (budgets.staged_insert_bytes): requests
 * copied out of gRPC's buffers to wait for room in a full fifo table. Past
 * the budget, Insert calls are not read any further (parked) until staged
 * bytes go back under it: flow control instead of unbounded memory. A
 * request already read when the budget filled (its call was read before)
 * and that would pass the budget is refused, not staged: staged bytes never
 * exceed the budget, except one request when nothing else is staged (so a
 * request larger than the budget is not refused for ever).
 *
 * A read is budgeted too: gRPC reads a call's next message whole once it is
 * asked for, before chime sees its size, so a read that may end staged (a
 * new call's first, or any while something is staged or reserved) reserves
 * one request of the largest size read lately until its message arrives.
 * Such a read is asked for only while the staged and reserved bytes leave
 * room for it (or nothing is staged or reserved): a burst of new calls is
 * read a budget's worth at a time instead of all at once. */
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
  /* Reads asked for that may end staged: bytes reserved for their
   * messages, and how many. */
  uint64_t reserved;
  uint32_t reads;
  /* The largest request read lately, what a read reserves: the larger of
   * this and the previous run of CHIME__STAGING_SEEN_RUN requests. */
  uint64_t seen_cur, seen_prev;
  uint32_t seen_n;
  uint64_t peak; /* the most staged + reserved at once */
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
/* The same for a read whose message may end staged: always (a new call's
 * first read, or one whose table already has requests waiting), else only
 * while anything is staged or reserved. Such a read is asked for only when
 * the budget has room for the staged and reserved bytes and one more
 * request as large as those read lately (or nothing is staged or
 * reserved), and reserves that much in *slot until its message arrives
 * (chime__staging_take). *slot is the call's, under the budget's lock, 0
 * while it reserves nothing, and stays valid while the call lives (a
 * parked call is held by a reference). */
void chime__staging_recv_reserved(chime__staging_t *g, chime__call_t *c,
                                  uint64_t *slot, int always);
/* Takes what *slot reserves (0 if nothing) and clears it: the read's
 * message arrived. The reservation still counts until the message is
 * staged (chime__staging_charge_from turns it into staged bytes) or given
 * back (chime__staging_unreserve_bytes) once it is refused or in the
 * table. */
uint64_t chime__staging_take(chime__staging_t *g, uint64_t *slot);
/* Gives back a reservation taken (0: none), and reads parked calls that
 * now fit. */
void chime__staging_unreserve_bytes(chime__staging_t *g, uint64_t bytes);
/* The call ended: what *slot still reserves (a read that never completed)
 * goes back. */
void chime__staging_unreserve(chime__staging_t *g, uint64_t *slot);
/* A request of this many bytes was read (what reads reserve follows the
 * largest of late). */
void chime__staging_seen(chime__staging_t *g, uint64_t bytes);
/* The call ended: a parked call is let go (its reference dropped). */
void chime__staging_forget(chime__staging_t *g, chime__call_t *c);

/* Charges bytes when they fit the budget (or nothing is staged): 0, else
 * CHIME_ERESOURCE and nothing charged. */
int chime__staging_charge(chime__staging_t *g, uint64_t bytes);
/* The same for the message of a read that reserved *taken (from
 * chime__staging_take): the reservation is dropped (*taken set to 0) in
 * the same step, so the request never counts twice. */
int chime__staging_charge_from(chime__staging_t *g, uint64_t bytes,
                               uint64_t *taken);
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
  uint64_t reserved, reads, peak;
} chime__staging_stats_t;
void chime__staging_get_stats(chime__staging_t *g, chime__staging_stats_t *out);

#endif
