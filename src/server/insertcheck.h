/* Internal: whether an Insert request fits its table (insertcheck.c). */
#ifndef CHIME_SERVER_INSERTCHECK_H
#define CHIME_SERVER_INSERTCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "chime.pb-c.h"
#include "replay/table.h"
#include "server/insertreq.h"

/* The writer's belief about the spec (w, nw leaves) against the table's:
 * 0, or CHIME_EINVAL with the first difference named in err. */
int chime__insert_check_spec(const chime__table_config_t *tc,
                             Chime__V1__Leaf **w, size_t nw, char *err,
                             size_t errlen);
/* count samples in len bytes against the table's sample of sb bytes: 0, or
 * CHIME_EINVAL naming the leaf where they part. */
int chime__insert_check_size(const chime__table_config_t *tc, uint64_t sb,
                             uint32_t count, uint64_t len, char *err,
                             size_t errlen);
/* A request's ragged lengths (n of them) and its len bytes of count
 * samples against the table's spec (chime__spec_ragged_bytes): 0, or
 * CHIME_EINVAL saying what is wrong (lengths for a table without ragged
 * leaves, too few or many lengths, a length past its bound or unlike the one
 * it shares, bytes unlike the lengths'). */
int chime__insert_check_ragged(const chime__table_config_t *tc, uint32_t count,
                               const uint32_t *lengths, size_t n, uint64_t len,
                               char *err, size_t errlen);

/* A request's data against its table: its stored leaves (those it sends
 * compressed: each one the table compresses, in spec order, each stored
 * size at most its leaf's bytes; docs/protocol.md, "Compressed leaves"),
 * then its bytes as chime__insert_check_ragged (a table with ragged leaves,
 * or a request with lengths) or chime__insert_check_size would see them
 * raw. 0, or CHIME_EINVAL naming the leaf (and the sample) in err. */
int chime__insert_check_data(const chime__table_config_t *tc, uint64_t sb,
                             const chime__insert_req_t *q, char *err,
                             size_t errlen);

#endif
