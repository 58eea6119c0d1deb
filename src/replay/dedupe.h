/* What a table remembers of its writers' requests, so a request resent on a
 * new call (the writer lost its connection before the ack) is acked again
 * instead of inserted twice. Per writer: the last CHIME__INSERT_WINDOW
 * requests it inserted, {seq, first_key, count}. Not thread-safe: the
 * table calls it under its lock, in the same critical section as the
 * insert, so two copies of one request can never both go in.
 *
 * Which writers are remembered (docs/protocol.md, "Which writers the server
 * remembers"): at most max_writers, and a writer is in one of three states:
 * - bound: an Insert call that carried it is open (chime__dedupe_bind()
 *   when a call first carries it, chime__dedupe_unbind() when that call
 *   ends). Never forgotten.
 * - closed: the last call that carried it ended with the writer's
 *   half-close after its last ack. It is done: forgotten first.
 * - idle: neither, since its last call ended or (used without a call) its
 *   last request. Forgotten only once idle for idle_ms: a writer whose
 *   connection broke comes back within that to resend.
 * A new writer takes a free place, else the place of the writer closed
 * longest ago, else of the writer idle longest if that is idle_ms or more.
 * When every writer remembered is bound or idle for less than idle_ms, the
 * new writer is refused (CHIME_ERESOURCE) and nobody is forgotten: a client
 * that brings many writer ids can fill the memory, but never flush the
 * writers of others out of it.
 *
 * Memory: about 830 bytes per writer remembered (3.3 MiB per table at
 * CHIME__INSERT_WRITERS), allocated as writers appear. */
#ifndef CHIME_SERVER_DEDUPE_H
#define CHIME_SERVER_DEDUPE_H

#include <stdint.h>

typedef struct chime__dedupe_s chime__dedupe_t;

/* A request's origin, and what the table found. */
typedef struct {
  uint64_t writer; /* 0: no dedupe */
  uint64_t seq;
  /* In: a sequence table's episode (the writer's) ends with this request.
   * Carried here because it is part of what a resend must not repeat. */
  int end_episode;
  /* In: the request goes in without asking the rate limiter (a warm
   * start: an import, docs/datasets.md). Not part of what dedupe checks. */
  int warm;
  /* Out: 1 when the request was inserted before and acked again from
   * memory (nothing inserted). */
  int resent;
  /* Out: 1 when the check refused it (any CHIME_E code below but
   * CHIME_ENOMEM). */
  int refused;
  /* Out, on CHIME_EEXIST: the newest seq remembered for the writer; on
   * CHIME_EINVAL: the count first sent. */
  uint64_t known;
} chime__dedupe_req_t;

enum { CHIME__DEDUPE_NEW = 1, CHIME__DEDUPE_RESENT = 2 };

/* max_writers 0: CHIME__INSERT_WRITERS. idle_ms: how long an idle writer is
 * kept for sure (0: a writer no call carries may go as soon as room is
 * needed). */
int chime__dedupe_create(chime__dedupe_t **out, uint32_t max_writers,
                         uint64_t idle_ms);
void chime__dedupe_destroy(chime__dedupe_t *d); /* NULL-safe */
/* Owners' shares of the places (docs/protocol.md, "Which writers the server
 * remembers"): writers are bound by owners 1..nowners (chimed: one per
 * actor token) or by owner 0 (nobody's: no token, admin, in-process).
 * Each of the nowners is owed reserve_pct% of max_writers / nowners places:
 * while it holds fewer (bound or idle writers), an owner that holds its
 * share or more takes a new place only if the free and closed places left
 * after it still cover what the others are owed (else CHIME_ERESOURCE, its
 * writer refused, nobody forgotten). So one owner can hold all but the
 * places others are owed, and another owner's new writer finds one at
 * once. Owner 0 is never held back. Fewer than 2 owners, or a share under
 * one place: nothing changes. Call once, before any writer. 0 or
 * CHIME_ENOMEM. */
int chime__dedupe_set_owners(chime__dedupe_t *d, uint32_t nowners,
                             uint32_t reserve_pct);
/* Tests: the clock idle time is measured with (milliseconds, any origin;
 * default CLOCK_MONOTONIC). */
void chime__dedupe_set_clock(chime__dedupe_t *d, uint64_t (*now_ms)(void *),
                             void *arg);

/* The table was restored from a checkpoint that may lack writers whose
 * requests went in before it (one of format 5 or older keeps none; a newer
 * one those the table remembered, chime__dedupe_copy): from now on an
 * unknown writer past its first request is refused as a forgotten one
 * (CHIME_EFORGOTTEN), as once a writer was forgotten. */
void chime__dedupe_restored(chime__dedupe_t *d);
/* Whether chime__dedupe_restored() was called. */
int chime__dedupe_was_restored(const chime__dedupe_t *d);

/* A call carries writer for the first time (its request seq): the writer is
 * bound until chime__dedupe_unbind(). 0, or (nothing bound):
 * - CHIME_EFORGOTTEN: not remembered, seq is not its first request and
 *   writers were forgotten before (or the table was restored): it may be
 *   one of them;
 * - CHIME_ERESOURCE: new, and no place is free or may be taken;
 * - CHIME_ENOMEM. */
int chime__dedupe_bind(chime__dedupe_t *d, uint64_t writer, uint64_t seq);
/* The same for a writer of owner (chime__dedupe_set_owners; a writer keeps
 * the owner it was first taken in for). */
int chime__dedupe_bind_as(chime__dedupe_t *d, uint64_t writer, uint64_t seq,
                          uint32_t owner);
/* The call that bound writer ended; closed: with the writer's half-close
 * after its last ack (it is done). */
void chime__dedupe_unbind(chime__dedupe_t *d, uint64_t writer, int closed);

/* Looks a request up (q->writer non-zero). A writer no call bound is taken
 * in as chime__dedupe_bind() would, and idle from now. Returns
 * - CHIME__DEDUPE_NEW: never inserted: insert it, then
 *   chime__dedupe_record() before the lock is released;
 * - CHIME__DEDUPE_RESENT: inserted before with *first_key (q->resent set);
 * - CHIME_EEXIST: cannot tell (older than the window): refuse it;
 * - CHIME_EINVAL: inserted before with another count;
 * - CHIME_EFORGOTTEN, CHIME_ERESOURCE (a writer not remembered, as
 *   chime__dedupe_bind()), CHIME_ENOMEM. */
int chime__dedupe_check(chime__dedupe_t *d, chime__dedupe_req_t *q,
                        uint32_t count, uint64_t *first_key);
/* Remembers a request chime__dedupe_check() found new and that went in. */
void chime__dedupe_record(chime__dedupe_t *d, const chime__dedupe_req_t *q,
                          uint32_t count, uint64_t first_key);

/* One request remembered: its seq, the key its first item was acked with,
 * its count. */
typedef struct {
  uint64_t seq, first_key;
  uint32_t count;
} chime__dedupe_entry_t;

/* The memory copied for a checkpoint (and read back from one): each writer
 * with requests remembered, its entries [first, first + n) of entries,
 * oldest first; forgot: a writer not in it may have had requests go in
 * (one was forgotten, or the table was restored from a checkpoint that
 * said so or kept no writers). */
typedef struct {
  uint64_t writer;
  uint32_t first, n;
} chime__dedupe_writer_t;
typedef struct {
  chime__dedupe_writer_t *writers;
  chime__dedupe_entry_t *entries;
  uint32_t nwriters, cap; /* cap: writers room (entries: x the window) */
  int forgot;
} chime__dedupe_copy_t;

/* Writers remembered now: a copy of cap writers or more holds them. */
uint32_t chime__dedupe_writers(const chime__dedupe_t *d);
/* Copies the memory into c (its arrays allocated by the caller for c->cap
 * writers): 0, or CHIME_EOVERFLOW when more than c->cap writers have
 * requests remembered (nothing copied). Every writer, bound or not: the
 * copy is what a resend may find. */
int chime__dedupe_copy(const chime__dedupe_t *d, chime__dedupe_copy_t *c);
/* Allocates c's arrays for cap writers (CHIME_ENOMEM); free with
 * chime__dedupe_copy_free (NULL-safe arrays). */
int chime__dedupe_copy_alloc(chime__dedupe_copy_t *c, uint32_t cap);
void chime__dedupe_copy_free(chime__dedupe_copy_t *c);
/* A restored writer (not remembered yet) with its n entries (1 to the
 * window, seq rising): idle from now, as one whose connection broke.
 * CHIME_EEXIST: remembered already; CHIME_ERESOURCE: max_writers are;
 * CHIME_EINVAL: entries that no writer could have; CHIME_ENOMEM. */
int chime__dedupe_load(chime__dedupe_t *d, uint64_t writer,
                       const chime__dedupe_entry_t *e, uint32_t n);
/* Sets or clears what chime__dedupe_restored() set: a checkpoint that
 * kept every writer with requests in it (forgot 0) leaves unknown writers
 * taken as new ones, as on the server it was taken from. */
void chime__dedupe_set_restored(chime__dedupe_t *d, int forgot);

/* Counts since create. */
typedef struct {
  uint32_t writers, bound; /* remembered now, of them bound */
  uint64_t forgotten;      /* places taken from closed or idle writers */
  uint64_t refused;        /* new writers refused: no place */
  uint64_t share_refused;  /* of them, kept out of places others are owed */
} chime__dedupe_stats_t;
void chime__dedupe_stats(const chime__dedupe_t *d, chime__dedupe_stats_t *out);
/* Owner's writers that hold a place (bound or idle); 0 with no shares. */
uint32_t chime__dedupe_owner_held(const chime__dedupe_t *d, uint32_t owner);

#endif
