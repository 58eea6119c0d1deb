/* MutatePrioritiesRequest read by hand from its bytes (as insertreq.h does
 * for Insert): protobuf-c keeps a copy of every unknown field and a record
 * of every field it meets, so a 64 MiB request of 2-byte fields cost it
 * seconds and gigabytes before the count of updates could be checked.
 * Here a first pass checks the whole message and counts, holding nothing;
 * the caller checks the counts against its limit, and only then the
 * second pass fills the arrays. Protobuf rules as in insertreq.c: packed
 * and unpacked deletes alike, a singular field seen twice keeps its last
 * value, unknown fields skipped, a known field with another wire type
 * malformed. */
#ifndef CHIME_SERVER_MUTATEREQ_H
#define CHIME_SERVER_MUTATEREQ_H

#include <stddef.h>
#include <stdint.h>

#include "wire/pbread.h"

/* Longest table name kept; a longer one matches no table. */
#define CHIME__MUTATE_TABLE_MAX 255

typedef struct {
  char table[CHIME__MUTATE_TABLE_MAX + 1]; /* "" when absent */
  int table_too_long;
  size_t n_updates, n_deletes;
  /* Filled by chime__mutate_req_decode (malloc'd). */
  uint64_t *keys;
  double *priorities;
  uint64_t *deletes;
} chime__mutate_req_t;

/* The first pass over the message r reads: the table and the counts.
 * CHIME_EPROTO (err says how) when malformed. */
int chime__mutate_req_scan(chime__mutate_req_t *q, const chime__pb_reader_t *r,
                           char *err, size_t errlen);
/* The second pass, after a scan of the same bytes that succeeded: the
 * updates' keys and priorities and the deletes, in message order.
 * CHIME_ENOMEM. */
int chime__mutate_req_decode(chime__mutate_req_t *q,
                             const chime__pb_reader_t *r);
/* NULL-safe on the arrays; q may be reused after. */
void chime__mutate_req_free(chime__mutate_req_t *q);

#endif
