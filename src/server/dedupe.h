/* What a table remembers of its writers' requests, so a request resent on a
 * new call (the writer lost its connection before the ack) is acked again
 * instead of inserted twice. Per writer: the last CHIME__INSERT_WINDOW
 * requests it inserted, {seq, first_key, count}; at most max_writers
 * writers, the least recently used forgotten first. Not thread-safe: the
 * table calls it under its lock, in the same critical section as the
 * insert, so two copies of one request can never both go in.
 *
 * Memory: about 800 bytes per writer remembered (3.2 MiB per table at
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
  /* Out: 1 when the request was inserted before and acked again from
   * memory (nothing inserted). */
  int resent;
  /* Out: 1 when the check refused it (CHIME_EEXIST or CHIME_EINVAL). */
  int refused;
  /* Out, on CHIME_EEXIST: the newest seq remembered for the writer, 0 when
   * the writer was forgotten; on CHIME_EINVAL: the count first sent. */
  uint64_t known;
} chime__dedupe_req_t;

enum { CHIME__DEDUPE_NEW = 1, CHIME__DEDUPE_RESENT = 2 };

int chime__dedupe_create(chime__dedupe_t **out, uint32_t max_writers);
void chime__dedupe_destroy(chime__dedupe_t *d); /* NULL-safe */

/* Looks a request up (q->writer non-zero). Returns
 * - CHIME__DEDUPE_NEW: never inserted: insert it, then
 *   chime__dedupe_record() before the lock is released;
 * - CHIME__DEDUPE_RESENT: inserted before with *first_key (q->resent set);
 * - CHIME_EEXIST: cannot tell (older than the window, or the writer was
 *   forgotten and this is not its first request): refuse it;
 * - CHIME_EINVAL: inserted before with another count;
 * - CHIME_ENOMEM. */
int chime__dedupe_check(chime__dedupe_t *d, chime__dedupe_req_t *q,
                        uint32_t count, uint64_t *first_key);
/* Remembers a request chime__dedupe_check() found new and that went in. */
void chime__dedupe_record(chime__dedupe_t *d, const chime__dedupe_req_t *q,
                          uint32_t count, uint64_t first_key);

#endif
