/* Export (server streaming): a table's items as they were at one instant,
 * streamed oldest first while inserts and samples go on (docs/datasets.md).
 * The snapshot is a checkpoint's view (chime__table_view: the items'
 * bookkeeping copied and their rows pinned in one hold of the table's
 * lock), so every item exported is whole and the count is the table's at
 * that instant. One chunk is in flight at a time: the next is built only
 * once gRPC took the previous one (on_sent), so a slow reader is paced by
 * gRPC's flow control and the call's memory stays one chunk. Rows are let
 * go as their items are sent (chime__table_view_unpin), so inserts during a
 * long export take few spare rows.
 * The other end of the Export stream: src/client/export.c (one basename, two
 * ends). */
#include <stdlib.h>
#include <string.h>

#include "chime.pb-c.h"
#include "common/errfmt.h"
#include "replay/table.h"
#include "server/methods.h"
#include "server/state.h"
#include "wire/leaf.h"
#include "wire/message.h"

/* About this many bytes of items per chunk (at least one item). */
#define EXPORT_CHUNK_BYTES (1u << 20)

typedef struct {
  pthread_mutex_t mu;
  chime__table_t *t;
  chime__table_view_t v;
  int viewing;    /* v holds rows until released */
  uint64_t next;  /* the next item to send */
  uint64_t per;   /* items per chunk */
  uint8_t *data;  /* per samples' bytes */
  uint64_t *keys; /* per */
  double *prio;   /* per */
  int over;       /* the final status is queued */
} export_t;

/* Under st->mu: lets the view's rows go (idempotent). */
static void export_release(export_t *st) {
  if (st->viewing) {
    chime__table_view_release(st->t, &st->v);
    st->viewing = 0;
  }
}

/* Under st->mu: the next chunk of items (or the final status once every
 * item went). */
static void export_next(chime__call_t *c, export_t *st) {
  if (st->over)
    return;
  if (st->next >= st->v.count) {
    export_release(st);
    st->over = 1;
    chime__call_finish(c, CHIME_OK, "%s", "");
    return;
  }
  uint64_t sb = chime__table_sample_bytes(st->t);
  uint64_t n =
      st->v.count - st->next < st->per ? st->v.count - st->next : st->per;
  for (uint64_t j = 0; j < n; j++) {
    uint64_t i = st->next + j;
    chime__table_view_item_t it;
    chime__table_view_item(st->t, &st->v, i, &it);
    st->keys[j] = it.key;
    st->prio[j] = st->v.prio[i];
    int rc = chime__table_view_sample(st->t, &st->v, i, st->data + j * sb);
    if (rc != 0) {
      export_release(st);
      st->over = 1;
      chime__call_finish(c, rc, "export of '%s': item %llu (key %llu): %s",
                         chime__table_config(st->t)->name,
                         (unsigned long long)i, (unsigned long long)it.key,
                         chime_strerror(rc));
      return;
    }
  }
  Chime__V1__ExportChunk ch = CHIME__V1__EXPORT_CHUNK__INIT;
  ch.count = (uint32_t)n;
  ch.data.data = st->data;
  ch.data.len = (size_t)(n * sb);
  ch.n_keys = ch.n_priorities = (size_t)n;
  ch.keys = st->keys;
  ch.priorities = st->prio;
  st->next += n;
  /* Packed (a copy): the rows may go now. */
  int rc = chime__call_send_msg(c, &ch);
  chime__table_view_unpin(st->t, &st->v, st->next);
  if (rc != 0) { /* the call is over: on_close releases the rest */
    st->over = 1;
  }
}

/* The table's spec and the snapshot's count, in the first chunk. */
static int export_head(chime__call_t *c, export_t *st) {
  const chime__table_config_t *tc = chime__table_config(st->t);
  Chime__V1__Leaf leaves[CHIME_MAX_LEAVES], *lp[CHIME_MAX_LEAVES];
  chime__leaf_msgs(&tc->spec, leaves, lp);
  Chime__V1__ExportChunk ch = CHIME__V1__EXPORT_CHUNK__INIT;
  ch.n_spec = tc->spec.nleaves;
  ch.spec = lp;
  ch.total = st->v.count;
  return chime__call_send_msg(c, &ch);
}

/* Finds and checks the table: 0, or the call finished. */
static chime__table_t *export_table(chime__call_t *c,
                                    const Chime__V1__ExportRequest *req) {
  const char *name = req->table != NULL ? req->table : "";
  char pn[CHIME__PRINTABLE_LEN(64)];
  chime__table_t *t = chime__server_table(chime__call_server(c), name, NULL);
  if (t == NULL) {
    chime__call_finish(c, CHIME_ENOTFOUND, "export: table '%s' not found",
                       chime__printable(pn, sizeof(pn), name, 64));
    return NULL;
  }
  const chime__table_config_t *tc = chime__table_config(t);
  if (tc->sequence_length > 0 || chime_spec_ragged(&tc->spec) > 0) {
    chime__call_finish(c, CHIME_ENOTSUP,
                       "export: table '%s' is a %s table; export takes plain "
                       "tables with fixed leaves (docs/datasets.md)",
                       tc->name,
                       tc->sequence_length > 0 ? "sequence" : "ragged");
    return NULL;
  }
  return t;
}

static void export_on_start(chime__call_t *c) {
  ProtobufCMessage *m = NULL;
  grpc_byte_buffer *bb = chime__call_payload(c);
  if (bb == NULL ||
      chime__msg_unpack(&chime__v1__export_request__descriptor, bb, &m) != 0) {
    chime__call_finish(c, CHIME_EINVAL, "malformed ExportRequest");
    return;
  }
  chime__table_t *t = export_table(c, (const Chime__V1__ExportRequest *)m);
  protobuf_c_message_free_unpacked(m, NULL);
  if (t == NULL)
    return;
  export_t *st = calloc(1, sizeof(*st));
  uint64_t sb = chime__table_sample_bytes(t);
  uint64_t per = EXPORT_CHUNK_BYTES / (sb ? sb : 1);
  per = per ? per : 1;
  if (st != NULL) {
    st->t = t;
    st->per = per;
    st->data = malloc((size_t)(per * sb));
    st->keys = malloc((size_t)per * sizeof(uint64_t));
    st->prio = malloc((size_t)per * sizeof(double));
  }
  int rc =
      st == NULL || st->data == NULL || st->keys == NULL || st->prio == NULL
          ? CHIME_ENOMEM
          : chime__table_view(t, &st->v);
  if (rc != 0) {
    if (st != NULL) {
      free(st->data);
      free(st->keys);
      free(st->prio);
    }
    free(st);
    chime__call_finish(c, rc, "export of '%s': %s",
                       chime__table_config(t)->name, chime_strerror(rc));
    return;
  }
  pthread_mutex_init(&st->mu, NULL);
  st->viewing = 1;
  chime__call_set_state(c, st);
  pthread_mutex_lock(&st->mu);
  if (export_head(c, st) != 0) {
    export_release(st);
    st->over = 1;
  }
  pthread_mutex_unlock(&st->mu);
  /* A stop that came before the state was there found nothing to end. */
  if (atomic_load(&chime__call_server(c)->stopping))
    chime__call_stop(c);
}

static export_t *export_state(chime__call_t *c) {
  chime__call_lock(c);
  export_t *st = chime__call_state(c);
  chime__call_unlock(c);
  return st;
}

static void export_on_sent(chime__call_t *c) {
  export_t *st = export_state(c);
  if (st == NULL)
    return;
  pthread_mutex_lock(&st->mu);
  export_next(c, st);
  pthread_mutex_unlock(&st->mu);
}

static void export_on_close(chime__call_t *c) {
  export_t *st = export_state(c);
  if (st == NULL)
    return;
  pthread_mutex_lock(&st->mu);
  export_release(st);
  st->over = 1;
  pthread_mutex_unlock(&st->mu);
}

static void export_on_stop(chime__call_t *c) {
  export_t *st = export_state(c);
  if (st == NULL)
    return;
  pthread_mutex_lock(&st->mu);
  export_release(st);
  if (!st->over) {
    st->over = 1;
    chime__call_drop_queued(c);
    chime__call_finish(c, CHIME_ESHUTDOWN, "shutting down");
  }
  pthread_mutex_unlock(&st->mu);
}

static void export_on_free(chime__call_t *c) {
  export_t *st = chime__call_state(c);
  if (st == NULL)
    return;
  export_release(st);
  pthread_mutex_destroy(&st->mu);
  free(st->data);
  free(st->keys);
  free(st->prio);
  free(st);
}

static void export_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

const chime__call_vt_t chime__export_vt = {
    .on_start = export_on_start,
    .on_message = export_on_message,
    .on_close = export_on_close,
    .on_stop = export_on_stop,
    .on_free = export_on_free,
    .on_sent = export_on_sent,
};
