/* chime_client_export: a table's snapshot read chunk by chunk from the
 * Export stream (server/export.c, docs/datasets.md). Each chunk is checked
 * against the head's spec and total before the caller sees it: a server
 * that breaks the contract is CHIME_EPROTO, never a read past a buffer.
 * The other end of the Export stream: src/server/export.c (one basename, two
 * ends). */
#include <stdio.h>
#include <string.h>

#include "client/fork.h"
#include "client/internal.h"

typedef struct {
  chime__rpc_t r;
  int made;
  const char *table;
  chime_spec_t spec;
  uint64_t sample_bytes, total, got;
  int head_seen;
  char err[CHIME__ERRLEN];
} export_call_t;

/* Waits for the receive asked for: the message (NULL: the stream ended),
 * or CHIME_ETIMEDOUT when none came within timeout_ms. */
static int recv_one(export_call_t *x, int timeout_ms, grpc_byte_buffer **out) {
  *out = NULL;
  if (chime__rpc_recv(&x->r))
    return chime__fail(x->err, sizeof(x->err), CHIME_EPROTO,
                       "export of '%s': receive refused", x->table);
  gpr_timespec dl = chime__deadline_ms(timeout_ms);
  while (chime__rpc_pending(&x->r, CHIME__RPC_RECV)) {
    chime__rpc_op_t op;
    int ok;
    if (chime__rpc_next(&x->r, dl, &op, &ok) == CHIME_ETIMEDOUT)
      return chime__fail(x->err, sizeof(x->err), CHIME_ETIMEDOUT,
                         "export of '%s': no chunk within %d ms", x->table,
                         timeout_ms);
  }
  *out = x->r.recv_bb;
  x->r.recv_bb = NULL;
  return 0;
}

/* One chunk, checked, handed to fn. */
static int take_chunk(export_call_t *x, const Chime__V1__ExportChunk *ch,
                      uint32_t shard, chime_export_fn fn, void *ctx) {
  chime_export_chunk_t out = {.shard = shard, .spec = &x->spec};
  if (!x->head_seen) {
    if (chime__spec_from_leaves(&x->spec, ch->spec, ch->n_spec, x->err,
                                sizeof(x->err)) != 0 ||
        ch->count != 0)
      return chime__fail(x->err, sizeof(x->err), CHIME_EPROTO,
                         "export of '%s': first chunk without a valid spec",
                         x->table);
    x->head_seen = 1;
    x->total = ch->total;
    x->sample_bytes = chime_spec_sample_bytes(&x->spec);
  } else if (ch->n_spec != 0 || ch->count == 0 ||
             ch->data.len != (uint64_t)ch->count * x->sample_bytes ||
             ch->n_keys != ch->count || ch->n_priorities != ch->count ||
             ch->count > x->total - x->got) {
    return chime__fail(x->err, sizeof(x->err), CHIME_EPROTO,
                       "export of '%s': a chunk of %u items that breaks the "
                       "stream's contract (after %llu of %llu)",
                       x->table, ch->count, (unsigned long long)x->got,
                       (unsigned long long)x->total);
  }
  out.total = x->total;
  out.count = ch->count;
  out.data = ch->data.data;
  out.keys = ch->keys;
  out.priorities = ch->priorities;
  x->got += ch->count;
  int rc = fn(ctx, &out);
  if (rc != 0)
    snprintf(x->err, sizeof(x->err), "export of '%s': stopped by the caller",
             x->table);
  return rc;
}

/* The final status, once the stream ended. */
static int finish(export_call_t *x) {
  while (chime__rpc_busy(&x->r)) {
    chime__rpc_op_t op;
    int ok;
    chime__rpc_next(&x->r, gpr_inf_future(GPR_CLOCK_MONOTONIC), &op, &ok);
  }
  char text[CHIME__ERRLEN];
  int rc = chime__rpc_result(&x->r, text, sizeof(text));
  if (rc)
    return chime__fail(x->err, sizeof(x->err), rc, "export of '%s': %s",
                       x->table, text[0] ? text : chime_strerror(rc));
  if (!x->head_seen || x->got != x->total)
    return chime__fail(x->err, sizeof(x->err), CHIME_EPROTO,
                       "export of '%s': the stream ended after %llu of %llu "
                       "items",
                       x->table, (unsigned long long)x->got,
                       (unsigned long long)x->total);
  return 0;
}

/* One server's snapshot (an unsharded client, or one shard's). */
static int export_one(chime_client_t *client, const char *table, uint32_t shard,
                      chime_export_fn fn, void *ctx) {
  export_call_t x = {.table = table};
  Chime__V1__ExportRequest req = CHIME__V1__EXPORT_REQUEST__INIT;
  req.table = (char *)table;
  int rc = chime__fork_check(client->fork_gen, client->pid, "client", x.err,
                             sizeof(x.err));
  if (rc)
    return chime__detail(rc, x.err);
  grpc_byte_buffer *send = chime__pack(&req.base);
  if (chime__rpc_init(&x.r) || send == NULL) {
    chime__bb_free(send);
    chime__rpc_destroy(&x.r);
    return chime__detail(CHIME_ENOMEM, "export: out of memory");
  }
  if (chime__rpc_start(&x.r, client, CHIME__M_EXPORT,
                       gpr_inf_future(GPR_CLOCK_MONOTONIC), CHIME__RPC_LAST,
                       send)) {
    rc = chime__fail(x.err, sizeof(x.err), CHIME_EPROTO,
                     "export of '%s': start refused", table);
    goto out;
  }
  for (;;) {
    grpc_byte_buffer *bb;
    if ((rc = recv_one(&x, client->timeout_ms, &bb)) != 0)
      goto out;
    if (bb == NULL)
      break;
    ProtobufCMessage *m =
        chime__unpack(&chime__v1__export_chunk__descriptor, bb);
    chime__bb_free(bb);
    if (m == NULL) {
      rc = chime__fail(x.err, sizeof(x.err), CHIME_EPROTO,
                       "export of '%s': malformed chunk", table);
      goto out;
    }
    rc = take_chunk(&x, (const Chime__V1__ExportChunk *)m, shard, fn, ctx);
    protobuf_c_message_free_unpacked(m, NULL);
    if (rc)
      goto out;
  }
  rc = finish(&x);
out:
  if (rc)
    chime__rpc_cancel(&x.r);
  chime__rpc_destroy(&x.r);
  return rc ? chime__detail(rc, x.err) : 0;
}

int chime_client_export(chime_client_t *client, const char *table,
                        chime_export_fn fn, void *ctx) {
  if (!client || !table || !fn)
    return chime__detail(CHIME_EINVAL,
                         "chime_client_export: needs a client, table and fn");
  uint32_t n = chime_client_nshards(client);
  for (uint32_t i = 0; i < n; i++) {
    int rc = export_one(chime_client_shard(client, i), table, i, fn, ctx);
    if (rc)
      return rc;
  }
  return 0;
}
