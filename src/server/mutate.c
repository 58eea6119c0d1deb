/* MutatePriorities (unary): new priorities and deletes by key for one
 * table (chime__table_mutate does the work under the table's lock). */
#include <stdlib.h>

#include "chime.pb-c.h"
#include "common/errfmt.h"
#include "server/server.h"
#include "server/table.h"

/* A request this large would be a client's mistake, not a workload: it is
 * refused rather than held in memory whole. */
#define MAX_KEYS (1u << 20)

static void mutate_on_start(chime__call_t *c) {
  grpc_slice sl;
  Chime__V1__MutatePrioritiesRequest *req = NULL;
  uint64_t *keys = NULL;
  double *prios = NULL;
  if (c->payload == NULL || chime__bb_read(c->payload, &sl) != 0) {
    chime__call_finish(c, CHIME_EINVAL, "unreadable MutatePrioritiesRequest");
    return;
  }
  req = chime__v1__mutate_priorities_request__unpack(
      NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
  grpc_slice_unref(sl);
  if (req == NULL) {
    chime__call_finish(c, CHIME_EINVAL, "malformed MutatePrioritiesRequest");
    return;
  }
  const char *tname = req->table ? req->table : "";
  chime__table_t *t = chime__server_table(c->srv, tname, NULL);
  if (t == NULL) {
    char pn[CHIME__PRINTABLE_LEN(64)];
    chime__call_finish(c, CHIME_ENOTFOUND, "table '%s' not found",
                       chime__printable(pn, sizeof(pn), tname, 64));
    goto out;
  }
  if (req->n_updates > MAX_KEYS || req->n_deletes > MAX_KEYS) {
    chime__call_finish(c, CHIME_EINVAL,
                       "MutatePriorities on '%s': %zu updates and %zu deletes; "
                       "at most %u of each in one request",
                       chime__table_config(t)->name, req->n_updates,
                       req->n_deletes, MAX_KEYS);
    goto out;
  }
  keys = malloc((req->n_updates ? req->n_updates : 1) * sizeof(*keys));
  prios = malloc((req->n_updates ? req->n_updates : 1) * sizeof(*prios));
  if (keys == NULL || prios == NULL) {
    chime__call_finish(c, CHIME_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < req->n_updates; i++) {
    keys[i] = req->updates[i]->key;
    prios[i] = req->updates[i]->priority;
  }
  chime__table_mutated_t m;
  int rc = chime__table_mutate(t, keys, prios, req->n_updates, req->deletes,
                               req->n_deletes, &m);
  if (rc != 0) { /* CHIME_EINVAL: a priority; the table says which */
    char why[320] = "a priority is NaN, infinite or negative";
    (void)chime__table_check_priorities(t, prios, req->n_updates, why,
                                        sizeof(why));
    chime__call_finish(c, rc,
                       "MutatePriorities on '%s': %s; nothing was changed",
                       chime__table_config(t)->name, why);
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
  free(keys);
  free(prios);
  chime__v1__mutate_priorities_request__free_unpacked(req, NULL);
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
