/* Raw gRPC C core calls for integration tests (see rawcall.h). */
#include "rawcall.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "chime/chime.h"
#include "chime/errors.h"
#include "harness.h"

enum { TAG_SEND = 1, TAG_RECV, TAG_STATUS, TAG_CLOSE, TAG_START };

#define TAG(t) ((void *)(intptr_t)(t))

static int64_t now_ms(void) {
  gpr_timespec t = gpr_now(GPR_CLOCK_MONOTONIC);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static gpr_timespec in_ms(int ms) {
  if (ms < 0)
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* 0 on success, CHIME_EDISCONNECTED when the op failed (call over),
 * CHIME_ETIMEDOUT when nothing came in time. */
static int pluck(chime__raw_t *r, int tag, int timeout_ms) {
  grpc_event ev =
      grpc_completion_queue_pluck(r->cq, TAG(tag), in_ms(timeout_ms), NULL);
  if (ev.type == GRPC_QUEUE_TIMEOUT)
    return CHIME_ETIMEDOUT;
  if (ev.type != GRPC_OP_COMPLETE)
    return CHIME_EPROTO;
  return ev.success ? 0 : CHIME_EDISCONNECTED;
}

static int batch(chime__raw_t *r, grpc_op *ops, size_t n, int tag) {
  return grpc_call_start_batch(r->call, ops, n, TAG(tag), NULL) == GRPC_CALL_OK
             ? 0
             : CHIME_EPROTO;
}

grpc_channel *chime__raw_channel(const char *addr) {
  grpc_arg args[3];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = 64 << 20;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = 64 << 20;
  args[2].type = GRPC_ARG_INTEGER; /* a connection of its own */
  args[2].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
  args[2].value.integer = 1;
  grpc_channel_args ca = {3, args};
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(addr, cr, &ca);
  grpc_channel_credentials_release(cr);
  return ch;
}

int chime__raw_start(chime__raw_t *r, grpc_channel *ch, const char *method,
                     int deadline_ms) {
  return chime__raw_start_md(r, ch, method, deadline_ms, NULL, 0);
}

int chime__raw_start_md(chime__raw_t *r, grpc_channel *ch, const char *method,
                        int deadline_ms, grpc_metadata *md, size_t nmd) {
  memset(r, 0, sizeof(*r));
  r->details = grpc_empty_slice();
  grpc_metadata_array_init(&r->md_in);
  grpc_metadata_array_init(&r->md_trail);
  r->cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice m = grpc_slice_from_copied_string(method);
  r->call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq, m, NULL,
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                   gpr_time_from_millis(deadline_ms, GPR_TIMESPAN)),
      NULL);
  grpc_slice_unref(m); /* the call keeps its own reference */
  if (r->call == NULL)
    return CHIME_EPROTO;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_INITIAL_METADATA;
  op.data.send_initial_metadata.count = nmd;
  op.data.send_initial_metadata.metadata = md;
  int rc = batch(r, &op, 1, TAG_START);
  return rc != 0 ? rc : pluck(r, TAG_START, -1);
}

int chime__raw_send_bytes(chime__raw_t *r, const void *data, size_t len) {
  grpc_slice s = grpc_slice_from_copied_buffer(data, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  int rc = batch(r, &op, 1, TAG_SEND);
  if (rc == 0)
    rc = pluck(r, TAG_SEND, -1);
  grpc_byte_buffer_destroy(bb);
  return rc;
}

int chime__raw_send(chime__raw_t *r, const ProtobufCMessage *msg) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(len ? len : 1);
  if (buf == NULL)
    return CHIME_ENOMEM;
  protobuf_c_message_pack(msg, buf);
  int rc = chime__raw_send_bytes(r, buf, len);
  free(buf);
  return rc;
}

int chime__raw_close_send(chime__raw_t *r) {
  if (r->closed_send)
    return 0;
  r->closed_send = 1;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  int rc = batch(r, &op, 1, TAG_CLOSE);
  return rc != 0 ? rc : pluck(r, TAG_CLOSE, -1);
}

/* Adds the call's one receive of initial metadata at op, unless it was
 * asked for already; returns the ops added. */
static size_t add_recv_md(chime__raw_t *r, grpc_op *op) {
  if (r->got_md)
    return 0;
  r->got_md = 1;
  op->op = GRPC_OP_RECV_INITIAL_METADATA;
  op->data.recv_initial_metadata.recv_initial_metadata = &r->md_in;
  return 1;
}

int chime__raw_recv(chime__raw_t *r, grpc_byte_buffer **bb, int timeout_ms) {
  *bb = NULL;
  if (!r->recv_pending) {
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = add_recv_md(r, &ops[0]);
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &r->rbb;
    r->rbb = NULL;
    int rc = batch(r, ops, n, TAG_RECV);
    if (rc != 0)
      return rc;
    r->recv_pending = 1;
  }
  int rc = pluck(r, TAG_RECV, timeout_ms);
  if (rc == CHIME_ETIMEDOUT)
    return rc;
  r->recv_pending = 0;
  *bb = r->rbb;
  r->rbb = NULL;
  /* A failed receive is the end of the stream, like a NULL message. */
  return 0;
}

void *chime__raw_bytes(grpc_byte_buffer *bb, size_t *len) {
  grpc_byte_buffer_reader rd;
  *len = 0;
  if (!grpc_byte_buffer_reader_init(&rd, bb))
    return NULL;
  grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  size_t n = GRPC_SLICE_LENGTH(all);
  void *p = malloc(n ? n : 1);
  if (p != NULL) {
    memcpy(p, GRPC_SLICE_START_PTR(all), n);
    *len = n;
  }
  grpc_slice_unref(all);
  return p;
}

int chime__raw_recv_msg(chime__raw_t *r, const ProtobufCMessageDescriptor *d,
                        ProtobufCMessage **out, int timeout_ms) {
  grpc_byte_buffer *bb;
  *out = NULL;
  int rc = chime__raw_recv(r, &bb, timeout_ms);
  if (rc != 0 || bb == NULL)
    return rc;
  size_t len;
  uint8_t *p = chime__raw_bytes(bb, &len);
  grpc_byte_buffer_destroy(bb);
  if (p == NULL)
    return CHIME_ENOMEM;
  *out = protobuf_c_message_unpack(d, NULL, len, p);
  free(p);
  return *out != NULL ? 0 : CHIME_EPROTO;
}

int chime__raw_finish(chime__raw_t *r, grpc_status_code *status, char *details,
                      size_t len, int timeout_ms) {
  if (!r->finished)
    (void)chime__raw_close_send(r);
  return chime__raw_status(r, status, details, len, timeout_ms);
}

int chime__raw_status(chime__raw_t *r, grpc_status_code *status, char *details,
                      size_t len, int timeout_ms) {
  int rc;
  if (!r->finished) {
    /* The status waits until every message that came was read. */
    grpc_byte_buffer *bb;
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
    do {
      int left = timeout_ms < 0 ? -1 : (int)(deadline - now_ms());
      if (left == 0 || left < -1)
        return CHIME_ETIMEDOUT;
      if ((rc = chime__raw_recv(r, &bb, left)) != 0)
        return rc;
      if (bb != NULL)
        grpc_byte_buffer_destroy(bb);
    } while (bb != NULL);
    if (!r->status_pending) {
      grpc_op ops[2];
      memset(ops, 0, sizeof(ops));
      /* The status is only delivered once initial metadata was asked for. */
      size_t n = add_recv_md(r, &ops[0]);
      ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
      ops[n].data.recv_status_on_client.trailing_metadata = &r->md_trail;
      ops[n].data.recv_status_on_client.status = &r->status;
      ops[n++].data.recv_status_on_client.status_details = &r->details;
      if ((rc = batch(r, ops, n, TAG_STATUS)) != 0)
        return rc;
      r->status_pending = 1;
    }
    if ((rc = pluck(r, TAG_STATUS, timeout_ms)) == CHIME_ETIMEDOUT)
      return rc;
    r->status_pending = 0;
    r->finished = 1;
  }
  if (status != NULL)
    *status = r->status;
  if (details != NULL && len > 0) {
    size_t n = GRPC_SLICE_LENGTH(r->details);
    if (n >= len)
      n = len - 1;
    memcpy(details, GRPC_SLICE_START_PTR(r->details), n);
    details[n] = '\0';
  }
  return 0;
}

void chime__raw_destroy(chime__raw_t *r) {
  if (r == NULL || r->cq == NULL)
    return;
  if (r->call != NULL) {
    if (!r->finished)
      grpc_call_cancel(r->call, NULL);
    if (r->recv_pending)
      (void)pluck(r, TAG_RECV, -1);
    if (r->status_pending)
      (void)pluck(r, TAG_STATUS, -1);
    if (r->rbb != NULL)
      grpc_byte_buffer_destroy(r->rbb);
    grpc_call_unref(r->call);
  }
  grpc_completion_queue_shutdown(r->cq);
  (void)grpc_completion_queue_pluck(r->cq, NULL,
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_completion_queue_destroy(r->cq);
  grpc_metadata_array_destroy(&r->md_in);
  grpc_metadata_array_destroy(&r->md_trail);
  grpc_slice_unref(r->details);
  memset(r, 0, sizeof(*r));
}

int chime__raw_send_one(const char *addr, const char *method,
                        const ProtobufCMessage *msg, grpc_status_code *status,
                        char *details, size_t len) {
  grpc_channel *ch = chime__raw_channel(addr);
  if (ch == NULL)
    return -1;
  chime__raw_t r;
  int rc = chime__raw_start(&r, ch, method, 10000);
  if (rc == 0) {
    rc = chime__raw_send(&r, msg) == 0 &&
                 chime__raw_finish(&r, status, details, len, 10000) == 0
             ? 0
             : -1;
    chime__raw_destroy(&r);
  }
  grpc_channel_destroy(ch);
  return rc == 0 ? 0 : -1;
}

int chime__raw_unary(grpc_channel *ch, const char *method,
                     const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc,
                     ProtobufCMessage **resp, grpc_status_code *status,
                     char *details, size_t len) {
  chime__raw_t r;
  int rc = chime__raw_start(&r, ch, method, 10000);
  *resp = NULL;
  if (rc == 0)
    rc = chime__raw_send(&r, req);
  if (rc == 0)
    rc = chime__raw_close_send(&r);
  /* A failed send still has a status worth reading. */
  if (rc == 0 || rc == CHIME_EDISCONNECTED)
    (void)chime__raw_recv_msg(&r, resp_desc, resp, 10000);
  rc = chime__raw_finish(&r, status, details, len, 10000);
  chime__raw_destroy(&r);
  return rc;
}

int chime__raw_fixture_start(chime__chimed_t *d, grpc_channel **ch,
                             const char *config_json) {
  int rc = chime__chimed_start_or_skip(d, config_json, NULL, 30000);
  if (rc != 0)
    return -1;
  grpc_init();
  *ch = chime__raw_channel(d->addr);
  return *ch != NULL ? 0 : -1;
}

int chime__raw_client_fixture_start(chime__chimed_t *d, grpc_channel **ch,
                                    chime_client_t **client,
                                    const char *config_json) {
  if (chime__raw_fixture_start(d, ch, config_json) != 0)
    return -1;
  return chime_client_create(client, d->addr, NULL) == 0 ? 0 : -1;
}

int chime__raw_client_fixture_stop(chime__chimed_t *d, grpc_channel *ch,
                                   chime_client_t *client) {
  chime_client_destroy(client);
  return chime__raw_fixture_stop(d, ch);
}

int chime__raw_fixture_stop(chime__chimed_t *d, grpc_channel *ch) {
  int st = 0;
  if (ch != NULL)
    grpc_channel_destroy(ch);
  grpc_shutdown_blocking();
  int rc = chime__chimed_stop(d, 20000, &st);
  chime__harness_kill_all();
  return rc == 0 && st == 0 ? 0 : -1;
}
