/* One client gRPC call (see call.h).
 * The other end of a gRPC call, as the server and as the client drive it:
 * src/server/call.c (one basename, two ends). */
#include <string.h>

#include "client/fork.h"
#include "client/internal.h"

#define TAG(op) ((void *)(intptr_t)((op) + 1))

int chime__rpc_init(chime__rpc_t *r) {
  memset(r, 0, sizeof(*r));
  for (int i = 0; i < CHIME__RPC_NOPS; i++)
    atomic_init(&r->pending[i], 0);
  grpc_metadata_array_init(&r->md_init);
  grpc_metadata_array_init(&r->md_trail);
  r->details = grpc_empty_slice();
  r->status = GRPC_STATUS_UNKNOWN;
  chime__gate_enter();
  r->cq = grpc_completion_queue_create_for_next(NULL);
  chime__gate_leave();
  return r->cq ? 0 : CHIME_ENOMEM;
}

/* Starts ops as one batch counted under `op`. */
static int start(chime__rpc_t *r, chime__rpc_op_t op, const grpc_op *ops,
                 size_t n) {
  atomic_fetch_add(&r->pending[op], 1);
  chime__gate_enter();
  grpc_call_error e = grpc_call_start_batch(r->call, ops, n, TAG(op), NULL);
  chime__gate_leave();
  if (e != GRPC_CALL_OK) {
    atomic_fetch_sub(&r->pending[op], 1);
    return CHIME_EPROTO;
  }
  return 0;
}

int chime__rpc_start(chime__rpc_t *r, chime_client_t *client, int method,
                     gpr_timespec deadline, unsigned flags,
                     grpc_byte_buffer *first) {
  return chime__rpc_start_on(r, client, client->channel, method, deadline,
                             flags, first);
}

int chime__rpc_start_on(chime__rpc_t *r, chime_client_t *client,
                        grpc_channel *channel, int method,
                        gpr_timespec deadline, unsigned flags,
                        grpc_byte_buffer *first) {
  chime__gate_enter();
  r->call = grpc_channel_create_call(
      channel, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq,
      grpc_slice_from_static_string(chime__method_path[method]), NULL, deadline,
      NULL);
  chime__gate_leave();
  if (!r->call) {
    chime__bb_free(first);
    return CHIME_EPROTO;
  }
  grpc_op ops[3];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  /* The client's, alive as long as any of its calls. */
  ops[n].data.send_initial_metadata.count = client->nmd;
  ops[n].data.send_initial_metadata.metadata =
      client->nmd ? &client->auth : NULL;
  if (flags & CHIME__RPC_WAIT_FOR_READY)
    ops[n].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                   GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
  n++;
  if (first) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = first;
    if (flags & CHIME__RPC_LAST)
      ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  }
  r->start_bb = first;
  if (first)
    atomic_fetch_add(&r->pending[CHIME__RPC_SEND], 1);
  int rc = start(r, CHIME__RPC_START, ops, n);
  if (rc) {
    if (first)
      atomic_fetch_sub(&r->pending[CHIME__RPC_SEND], 1);
    chime__bb_free(first);
    r->start_bb = NULL;
    return rc;
  }
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &r->md_trail;
  ops[0].data.recv_status_on_client.status = &r->status;
  ops[0].data.recv_status_on_client.status_details = &r->details;
  return start(r, CHIME__RPC_STATUS, ops, 1);
}

static int send_op(chime__rpc_t *r, grpc_byte_buffer *bb) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  if (atomic_load(&r->pending[CHIME__RPC_SEND])) {
    chime__bb_free(bb);
    return CHIME_EBUSY;
  }
  if (bb) {
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
  } else {
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  }
  r->send_bb = bb;
  int rc = start(r, CHIME__RPC_SEND, &op, 1);
  if (rc && bb) {
    chime__bb_free(bb);
    r->send_bb = NULL;
  }
  return rc;
}

int chime__rpc_send(chime__rpc_t *r, grpc_byte_buffer *bb) {
  return send_op(r, bb);
}

int chime__rpc_half_close(chime__rpc_t *r) {
  return send_op(r, NULL);
}

int chime__rpc_recv(chime__rpc_t *r) {
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (!r->md_asked) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &r->md_init;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &r->recv_bb;
  int rc = start(r, CHIME__RPC_RECV, ops, n);
  if (rc == 0)
    r->md_asked = 1;
  return rc;
}

int chime__rpc_next(chime__rpc_t *r, gpr_timespec deadline, chime__rpc_op_t *op,
                    int *ok) {
  grpc_event ev = chime__gate_next(r->cq, deadline);
  if (ev.type == GRPC_QUEUE_TIMEOUT)
    return CHIME_ETIMEDOUT;
  if (ev.type != GRPC_OP_COMPLETE)
    return CHIME_EPROTO;
  chime__rpc_op_t done = (chime__rpc_op_t)((intptr_t)ev.tag - 1);
  /* The message goes before the count drops: a sender that sees no send
   * in flight may set send_bb at once. */
  if (done == CHIME__RPC_START && r->start_bb) {
    chime__bb_free(r->start_bb);
    r->start_bb = NULL;
    atomic_fetch_sub(&r->pending[CHIME__RPC_SEND], 1);
  } else if (done == CHIME__RPC_SEND && r->send_bb) {
    chime__bb_free(r->send_bb);
    r->send_bb = NULL;
  }
  atomic_fetch_sub(&r->pending[done], 1);
  *op = done;
  *ok = ev.success;
  return 0;
}

int chime__rpc_pending(const chime__rpc_t *r, chime__rpc_op_t op) {
  return atomic_load(&r->pending[op]);
}

int chime__rpc_busy(const chime__rpc_t *r) {
  for (int i = 0; i < CHIME__RPC_NOPS; i++)
    if (atomic_load(&r->pending[i]))
      return 1;
  return 0;
}

int chime__rpc_result(const chime__rpc_t *r, char *text, size_t len) {
  if (text)
    chime__slice_str(r->details, text, len);
  return chime__status_to_err(r->status, &r->md_trail);
}

void chime__rpc_cancel(chime__rpc_t *r) {
  if (r->call) {
    chime__gate_enter();
    grpc_call_cancel(r->call, NULL);
    chime__gate_leave();
  }
}

void chime__rpc_drain(chime__rpc_t *r) {
  chime__rpc_cancel(r);
  while (chime__rpc_busy(r)) {
    chime__rpc_op_t op;
    int ok;
    chime__rpc_next(r, gpr_inf_future(GPR_CLOCK_MONOTONIC), &op, &ok);
  }
  chime__bb_free(r->recv_bb);
  r->recv_bb = NULL;
}

void chime__rpc_reset(chime__rpc_t *r) {
  chime__rpc_drain(r);
  chime__gate_enter();
  if (r->call)
    grpc_call_unref(r->call);
  r->call = NULL;
  grpc_metadata_array_destroy(&r->md_init);
  grpc_metadata_array_destroy(&r->md_trail);
  grpc_metadata_array_init(&r->md_init);
  grpc_metadata_array_init(&r->md_trail);
  grpc_slice_unref(r->details);
  r->details = grpc_empty_slice();
  chime__gate_leave();
  r->status = GRPC_STATUS_UNKNOWN;
  r->md_asked = 0;
}

void chime__rpc_destroy(chime__rpc_t *r) {
  if (!r->cq && !r->call)
    return;
  chime__rpc_reset(r);
  chime__cq_destroy(r->cq);
  r->cq = NULL;
  chime__gate_enter();
  grpc_metadata_array_destroy(&r->md_init);
  grpc_metadata_array_destroy(&r->md_trail);
  grpc_slice_unref(r->details);
  chime__gate_leave();
  r->details = grpc_empty_slice();
}
