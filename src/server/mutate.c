/* MutatePriorities (unary): new priorities and deletes by key for one
 * table (chime__table_mutate does the work under the table's lock). The
 * request is read by hand (mutatereq.h), its counts checked before
 * anything is decoded. */
#include <stdlib.h>
#include <string.h>

#include "chime.pb-c.h"
#include "common/errfmt.h"
#include "common/key.h"
#include "server/mutatereq.h"
#include "replay/table.h"
#include "server/state.h"

/* A request this large would be a client's mistake, not a workload: it is
 * refused rather than held in memory whole. */
#define MAX_KEYS (1u << 20)

static void mutate_on_start(chime__call_t *c) {
  grpc_slice sl;
  chime__mutate_req_t req;
  char why[128];
  memset(&req, 0, sizeof(req));
  grpc_byte_buffer *bb = chime__call_payload(c);
  if (bb == NULL || chime__bb_read(bb, &sl) != 0) {
    chime__call_finish(c, CHIME_EINVAL, "unreadable MutatePrioritiesRequest");
    return;
  }
  chime__span_t span = {GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl)};
  chime__pb_reader_t r;
  chime__pb_reader_init(&r, &span, 1);
  if (chime__mutate_req_scan(&req, &r, why, sizeof(why)) != 0) {
    chime__call_finish(c, CHIME_EINVAL, "malformed MutatePrioritiesRequest: %s",
                       why);
    goto out;
  }
  chime__table_t *t =
      req.table_too_long
          ? NULL
          : chime__server_table(chime__call_server(c), req.table, NULL);
  if (t == NULL) {
    char pn[CHIME__PRINTABLE_LEN(64)];
    chime__call_finish(c, CHIME_ENOTFOUND, "table '%s' not found",
                       chime__printable(pn, sizeof(pn), req.table, 64));
    goto out;
  }
  if (req.n_updates > MAX_KEYS || req.n_deletes > MAX_KEYS) {
    chime__call_finish(c, CHIME_EINVAL,
                       "MutatePriorities on '%s': %zu updates and %zu deletes; "
                       "at most %u of each in one request",
                       chime__table_config(t)->name, req.n_updates,
                       req.n_deletes, MAX_KEYS);
    goto out;
  }
  if (chime__mutate_req_decode(&req, &r) != 0) {
    chime__call_finish(c, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  chime__table_mutated_t m;
  uint64_t foreign = 0;
  if (chime__table_check_keys(t, req.keys, req.n_updates, &foreign) != 0 ||
      chime__table_check_keys(t, req.deletes, req.n_deletes, &foreign) != 0) {
    /* Another shard's item: a sharded client sends each key to the shard
     * its top bits name (docs/protocol.md, Keys). */
    chime__call_finish(c, CHIME_EINVAL,
                       "MutatePriorities on '%s': key %llu was issued by "
                       "shard %u (its top 16 bits), and this server is shard "
                       "%u; nothing was changed",
                       chime__table_config(t)->name,
                       (unsigned long long)foreign, chime__key_shard(foreign),
                       chime__table_config(t)->shard);
    goto out;
  }
  int rc = chime__table_mutate(t, req.keys, req.priorities, req.n_updates,
                               req.deletes, req.n_deletes, &m);
  if (rc != 0) { /* CHIME_EINVAL: a priority; the table says which */
    char bad[320] = "a priority is NaN, infinite or negative";
    (void)chime__table_check_priorities(t, req.priorities, req.n_updates, bad,
                                        sizeof(bad));
    chime__call_finish(c, rc,
                       "MutatePriorities on '%s': %s; nothing was changed",
                       chime__table_config(t)->name, bad);
    goto out;
  }
  Chime__V1__MutatePrioritiesResponse resp =
      CHIME__V1__MUTATE_PRIORITIES_RESPONSE__INIT;
  resp.updated = m.updated;
  resp.deleted = m.deleted;
  resp.unknown = m.unknown;
  chime__call_send_msg(c, &resp);
  chime__call_finish(c, CHIME_OK, "%s", "");
out:
  chime__mutate_req_free(&req);
  grpc_slice_unref(sl);
}

static void mutate_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

const chime__call_vt_t chime__mutate_vt = {
    .on_start = mutate_on_start,
    .on_message = mutate_on_message,
};
