/* InsertRequest read by hand from the received slices: the sample bytes are
 * located, not copied, so the insert copies them once, from the slices
 * straight into the table (see proto/chime.proto). The small fields are
 * decoded here; each Leaf of the optional spec by protobuf-c. */
#ifndef CHIME_SERVER_INSERTREQ_H
#define CHIME_SERVER_INSERTREQ_H

#include <stddef.h>
#include <stdint.h>

#include "chime.pb-c.h"
#include "chime/spec.h"
#include "wire/pbread.h"

/* Longest table name kept; a longer one matches no table. */
#define CHIME__INSERT_TABLE_MAX 255
/* Largest Leaf message accepted in a spec. */
#define CHIME__INSERT_LEAF_MAX 4096

typedef struct {
  char table[CHIME__INSERT_TABLE_MAX + 1]; /* "" when absent */
  int table_too_long;
  uint32_t count;
  uint64_t id;           /* with writer_id: the writer's request sequence */
  uint64_t writer_id;    /* 0: none (no dedupe) */
  int end_episode;       /* a sequence table's: the writer's episode ends */
  int warm_start;        /* past the rate limiter (an import) */
  uint32_t heartbeat_ms; /* the writer asks for heartbeats (0: none) */
  uint64_t data_offset, data_len; /* the data field in the message */
  double *priorities;             /* malloc'd; NULL when none */
  size_t n_priorities;
  uint32_t *lengths; /* ragged leaves' lengths, malloc'd; NULL when none */
  size_t n_lengths;
  uint64_t *versions; /* malloc'd; NULL when none (docs/replay.md) */
  size_t n_versions;
  /* Leaves sent as stored (compressed), their indices in spec order, and
   * each sample's stored size of each (n_stored_leaves per sample),
   * malloc'd; NULL when none (docs/protocol.md, "Compressed leaves"). */
  uint32_t *stored_leaves;
  size_t n_stored_leaves;
  uint32_t *stored;
  size_t n_stored;
  /* The writer's spec: n_spec leaves (more than CHIME_MAX_LEAVES, more
   * than any table has, is refused). */
  Chime__V1__Leaf *spec[CHIME_MAX_LEAVES];
  size_t n_spec;
} chime__insert_req_t;

/* Parses the message r reads. Returns 0, CHIME_EPROTO (malformed, or a
 * spec past its limits: more than CHIME_MAX_LEAVES leaves, a leaf larger
 * than CHIME__INSERT_LEAF_MAX; err says which) or CHIME_ENOMEM. Sizes are
 * checked before anything is decoded, and each field costs the same
 * whatever its size or however often it comes, so the work is linear in
 * the message's fields. Free with chime__insert_req_free, on failure too. */
int chime__insert_req_parse(chime__insert_req_t *q, chime__pb_reader_t *r,
                            char *err, size_t errlen);
void chime__insert_req_free(chime__insert_req_t *q);

#endif
