/* Internal: the sentences for Insert requests the table's memory of
 * writers refuses (insertwhy.c; docs/protocol.md, "Exactly once across
 * reconnects"). */
#ifndef CHIME_SERVER_INSERTWHY_H
#define CHIME_SERVER_INSERTWHY_H

#include <stddef.h>
#include <stdint.h>

#include "replay/table.h"
#include "server/call.h"

/* Why the table's memory would not take writer (rc CHIME_EFORGOTTEN or
 * CHIME_ERESOURCE), its request seq, into err. */
void chime__insert_writer_refused(char *err, size_t errlen, chime__table_t *t,
                                  int rc, uint64_t writer, uint64_t seq);
/* Ends call c for a request of dq's writer (count samples) that the table
 * refused (dq->refused set; rc its code), saying what was inserted. */
void chime__insert_finish_refused(chime__call_t *c, chime__table_t *t,
                                  const chime__dedupe_req_t *dq, int rc,
                                  uint32_t count);

#endif
