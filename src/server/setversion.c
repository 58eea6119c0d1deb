/* SetVersion (unary): a process other than a stream's learner (a trainer)
 * reports its policy version for one table; the table's newest version
 * rises to it and, with max_staleness, the items it leaves too far behind
 * leave (chime__table_set_version, docs/replay.md). A stream's learner
 * says the same on its stream (subscribe.c, VersionReport). */
#include <string.h>

#include "chime.pb-c.h"
#include "common/errfmt.h"
#include "replay/table.h"
#include "server/state.h"
#include "wire/message.h"

static void setversion_on_start(chime__call_t *c) {
  ProtobufCMessage *m = NULL;
  grpc_byte_buffer *bb = chime__call_payload(c);
  if (bb == NULL ||
      chime__msg_unpack(&chime__v1__set_version_request__descriptor, bb, &m) !=
          0) {
    chime__call_finish(c, CHIME_EINVAL, "malformed SetVersionRequest");
    return;
  }
  const Chime__V1__SetVersionRequest *req =
      (const Chime__V1__SetVersionRequest *)m;
  const char *name = req->table != NULL ? req->table : "";
  chime__table_t *t = chime__server_table(chime__call_server(c), name, NULL);
  if (t == NULL) {
    char pn[CHIME__PRINTABLE_LEN(64)];
    chime__call_finish(c, CHIME_ENOTFOUND, "table '%s' not found",
                       chime__printable(pn, sizeof(pn), name, 64));
    goto out;
  }
  /* A version lower than the newest known is allowed and changes nothing:
   * another process may be behind this one. */
  Chime__V1__SetVersionResponse resp = CHIME__V1__SET_VERSION_RESPONSE__INIT;
  chime__table_stats_t st;
  (void)chime__table_set_version(t, req->version, NULL);
  chime__table_get_stats(t, &st);
  resp.newest_version = st.newest_version;
  resp.removed_stale = st.removed_stale;
  chime__call_send_msg(c, &resp);
  chime__call_finish(c, CHIME_OK, "%s", "");
out:
  protobuf_c_message_free_unpacked(m, NULL);
}

static void setversion_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

const chime__call_vt_t chime__setversion_vt = {
    .on_start = setversion_on_start,
    .on_message = setversion_on_message,
};
