/* libFuzzer target: the requests of GetInfo, Stats, MutatePriorities,
 * Subscribe, SetVersion and Export as the server reads them, through the real
 * server in this process (src/server/, instrumented; gRPC itself is not). A
 * client in the same process sends the input's bytes as the call's messages
 * over a real gRPC channel, so each message goes through gRPC's framing to the
 * method's handler (info.c, mutate.c, subscribe.c and stream.c's checks of an
 * Open, the ring it creates, credits in stream mode), exactly as a peer's
 * would.
 *
 * Input: [method][flags][messages...], each message [len lo][len hi][bytes]
 * (a length past the end takes the rest; at most 8 messages).
 *   method % 6: 0 GetInfo, 1 Stats, 2 MutatePriorities, 3 Subscribe,
 *               4 SetVersion, 5 Export (a snapshot streamed back)
 *   flags bit 0: half-close after the messages (else the call is cancelled
 *                once the server has said what it will); unary calls are
 *                always half-closed (gRPC hands the server a unary call
 *                only then)
 *
 * The server has three tables of spec "x:u8[8],y:f32[]" (uniform "u" with
 * max_staleness 2, fifo "q", prioritized "p", capacity 64), refilled every 64
 * inputs, small ring budgets, and listens on 127.0.0.1 with a port of the
 * kernel's choice.
 *
 * Beyond "no crash": every call ends with a status the protocol names for
 * bad input (OK, INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
 * FAILED_PRECONDITION, or CANCELLED / DEADLINE_EXCEEDED from this client),
 * never UNKNOWN or INTERNAL; a failed call carries `chime-error`; its
 * details are one line of printable ASCII; and the server keeps serving:
 * every 64 inputs a GetInfo must succeed and the streams the inputs opened
 * must all have ended. */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "chime/errors.h"
#include "fuzz_common.h"
#include "server/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MESSAGES 8
#define CALL_DEADLINE_MS 10000
/* How long the client waits for more from a call the server has not
 * ended, before it cancels: the server answers at once or not at all. */
#define QUIET_MS 10

static const char *const methods[6] = {
    "/chime.v1.Chime/GetInfo",          "/chime.v1.Chime/Stats",
    "/chime.v1.Chime/MutatePriorities", "/chime.v1.Chime/Subscribe",
    "/chime.v1.Chime/SetVersion",       "/chime.v1.Chime/Export",
};

static const char config[] =
    "{\"listen\": \"127.0.0.1:0\", \"sampler_threads\": 1,"
    " \"budgets\": {\"stream_ring_bytes\": 1048576,"
    "               \"total_ring_bytes\": 4194304},"
    " \"tables\": ["
    "  {\"name\": \"u\", \"spec\": \"x:u8[8],y:f32[]\", \"capacity\": 64,"
    "   \"sampler\": \"uniform\", \"max_staleness\": 2},"
    "  {\"name\": \"q\", \"spec\": \"x:u8[8],y:f32[]\", \"capacity\": 64},"
    "  {\"name\": \"p\", \"spec\": \"x:u8[8],y:f32[]\", \"capacity\": 64,"
    "   \"sampler\": \"prioritized\", \"remover\": \"fifo\"}]}";

static chime_server_t *srv;
static grpc_channel *ch;
static grpc_completion_queue *cq;
static unsigned long inputs;

static gpr_timespec in_ms(int ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* One completion of tag, or 0 when none came within ms. */
static int wait_tag(void *tag, int ms, int *ok) {
  grpc_event ev = grpc_completion_queue_pluck(cq, tag, in_ms(ms), NULL);
  if (ev.type == GRPC_QUEUE_TIMEOUT)
    return 0;
  FUZZ_CHECK(ev.type == GRPC_OP_COMPLETE);
  *ok = ev.success;
  return 1;
}

typedef struct {
  grpc_call *call;
  grpc_metadata_array md, trail;
  grpc_status_code status;
  grpc_slice details;
  grpc_byte_buffer *rbb;
  int recv_pending, status_done;
} call_t;

#define TAG(c, k) ((void *)((uintptr_t)(c) + (k)))

static void call_start(call_t *c, const char *method) {
  memset(c, 0, sizeof(*c));
  grpc_metadata_array_init(&c->md);
  grpc_metadata_array_init(&c->trail);
  grpc_slice m = grpc_slice_from_static_string(method);
  c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m,
                                     NULL, in_ms(CALL_DEADLINE_MS), NULL);
  FUZZ_CHECK(c->call != NULL);
  grpc_op ops[3];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &c->trail;
  ops[1].data.recv_status_on_client.status = &c->status;
  ops[1].data.recv_status_on_client.status_details = &c->details;
  FUZZ_CHECK(grpc_call_start_batch(c->call, ops, 1, TAG(c, 1), NULL) ==
             GRPC_CALL_OK);
  FUZZ_CHECK(grpc_call_start_batch(c->call, ops + 1, 1, TAG(c, 2), NULL) ==
             GRPC_CALL_OK);
  grpc_op md;
  memset(&md, 0, sizeof(md));
  md.op = GRPC_OP_RECV_INITIAL_METADATA;
  md.data.recv_initial_metadata.recv_initial_metadata = &c->md;
  FUZZ_CHECK(grpc_call_start_batch(c->call, &md, 1, TAG(c, 3), NULL) ==
             GRPC_CALL_OK);
  int ok;
  FUZZ_CHECK(wait_tag(TAG(c, 1), CALL_DEADLINE_MS, &ok));
}

/* 0 once the call is over for sending. */
static int call_send(call_t *c, const uint8_t *p, size_t len) {
  grpc_slice s = grpc_slice_from_copied_buffer((const char *)p, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  FUZZ_CHECK(grpc_call_start_batch(c->call, &op, 1, TAG(c, 4), NULL) ==
             GRPC_CALL_OK);
  int ok;
  FUZZ_CHECK(wait_tag(TAG(c, 4), CALL_DEADLINE_MS, &ok));
  grpc_byte_buffer_destroy(bb);
  return ok;
}

static void call_close_send(call_t *c) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  FUZZ_CHECK(grpc_call_start_batch(c->call, &op, 1, TAG(c, 5), NULL) ==
             GRPC_CALL_OK);
  int ok;
  FUZZ_CHECK(wait_tag(TAG(c, 5), CALL_DEADLINE_MS, &ok));
}

/* Reads what the server sends until it ends the call or is quiet. */
static void call_drain(call_t *c, int quiet_ms) {
  for (int i = 0; i < 64 && !c->status_done; i++) {
    int ok;
    if (!c->recv_pending) {
      grpc_op op;
      memset(&op, 0, sizeof(op));
      op.op = GRPC_OP_RECV_MESSAGE;
      op.data.recv_message.recv_message = &c->rbb;
      FUZZ_CHECK(grpc_call_start_batch(c->call, &op, 1, TAG(c, 6), NULL) ==
                 GRPC_CALL_OK);
      c->recv_pending = 1;
    }
    if (!wait_tag(TAG(c, 6), quiet_ms, &ok))
      return;
    c->recv_pending = 0;
    if (c->rbb == NULL) {
      /* The end of the messages: the status follows. */
      FUZZ_CHECK(wait_tag(TAG(c, 2), CALL_DEADLINE_MS, &ok));
      c->status_done = 1;
      return;
    }
    grpc_byte_buffer_destroy(c->rbb);
    c->rbb = NULL;
  }
}

static int printable_line(grpc_slice s) {
  const uint8_t *p = GRPC_SLICE_START_PTR(s);
  for (size_t i = 0; i < GRPC_SLICE_LENGTH(s); i++)
    if (p[i] < 0x20 || p[i] > 0x7e)
      return 0;
  return 1;
}

static int has_chime_error(const grpc_metadata_array *a) {
  for (size_t i = 0; i < a->count; i++)
    if (grpc_slice_str_cmp(a->metadata[i].key, "chime-error") == 0)
      return 1;
  return 0;
}

/* Ends the call (cancelled unless it is over) and checks its status. */
static grpc_status_code call_end(call_t *c, int cancelled) {
  int ok;
  if (!c->status_done) {
    if (cancelled)
      grpc_call_cancel(c->call, NULL);
    FUZZ_CHECK(wait_tag(TAG(c, 2), CALL_DEADLINE_MS + 5000, &ok));
    c->status_done = 1;
  }
  if (c->recv_pending)
    FUZZ_CHECK(wait_tag(TAG(c, 6), CALL_DEADLINE_MS, &ok));
  if (c->rbb != NULL)
    grpc_byte_buffer_destroy(c->rbb);
  FUZZ_CHECK(wait_tag(TAG(c, 3), CALL_DEADLINE_MS, &ok));
  grpc_status_code st = c->status;
  switch (st) {
  case GRPC_STATUS_OK:
    FUZZ_CHECK(!has_chime_error(&c->trail));
    break;
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_NOT_FOUND:
  case GRPC_STATUS_RESOURCE_EXHAUSTED:
  case GRPC_STATUS_FAILED_PRECONDITION:
    FUZZ_CHECK(has_chime_error(&c->trail));
    FUZZ_CHECK(printable_line(c->details));
    break;
  case GRPC_STATUS_CANCELLED: /* ours */
  case GRPC_STATUS_DEADLINE_EXCEEDED:
    break;
  default:
    fprintf(stderr, "status %d: %.*s\n", (int)st,
            (int)GRPC_SLICE_LENGTH(c->details),
            (const char *)GRPC_SLICE_START_PTR(c->details));
    FUZZ_CHECK(!"a status the protocol does not give for bad input");
  }
  grpc_slice_unref(c->details);
  grpc_metadata_array_destroy(&c->md);
  grpc_metadata_array_destroy(&c->trail);
  grpc_call_unref(c->call);
  return st;
}

/* Every table gets 32 items (uniform and prioritized evict the oldest). */
static void refill(void) {
  uint8_t data[32 * 12];
  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = (uint8_t)i;
  const char *tables[] = {"u", "q", "p"};
  for (int t = 0; t < 3; t++) {
    Chime__V1__InsertRequest q = CHIME__V1__INSERT_REQUEST__INIT;
    q.table = (char *)tables[t];
    q.count = 32;
    q.data.data = data;
    q.data.len = sizeof(data);
    uint8_t buf[1024];
    size_t len = chime__v1__insert_request__get_packed_size(&q);
    FUZZ_CHECK(len <= sizeof(buf));
    chime__v1__insert_request__pack(&q, buf);
    call_t c;
    call_start(&c, "/chime.v1.Chime/Insert");
    FUZZ_CHECK(call_send(&c, buf, len));
    call_close_send(&c);
    /* A full fifo table leaves the request waiting: cancelled then. */
    call_drain(&c, 200);
    grpc_status_code st = call_end(&c, 1);
    FUZZ_CHECK(st == GRPC_STATUS_OK || st == GRPC_STATUS_CANCELLED);
  }
}

/* The server still serves, and every stream the inputs opened ended. */
static void check_alive(void) {
  call_t c;
  call_start(&c, methods[0]);
  FUZZ_CHECK(call_send(&c, (const uint8_t *)"", 0));
  call_close_send(&c);
  call_drain(&c, CALL_DEADLINE_MS);
  FUZZ_CHECK(call_end(&c, 0) == GRPC_STATUS_OK);
  int left = 1;
  for (int i = 0; i < 1000 && left; i++) {
    left = chime__registry_count(&srv->streams) > 0;
    if (left)
      usleep(10000);
  }
  FUZZ_CHECK(!left);
}

static void setup(void) {
  char path[] = "/tmp/chime-fuzz-requests-XXXXXX";
  char bound[256];
  int fd = mkstemp(path);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(write(fd, config, sizeof(config) - 1) ==
             (ssize_t)(sizeof(config) - 1));
  close(fd);
  chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
  o.config_path = path;
  if (chime_server_create(&srv, &o) != 0 ||
      chime_server_listen(srv, bound, sizeof(bound)) != 0) {
    fprintf(stderr, "fuzz_requests: %s\n", chime_last_error());
    abort();
  }
  unlink(path);
  grpc_init();
  grpc_arg args[2];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = 64 << 20;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = 64 << 20;
  grpc_channel_args ca = {2, args};
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  ch = grpc_channel_create(bound, cr, &ca);
  grpc_channel_credentials_release(cr);
  cq = grpc_completion_queue_create_for_pluck(NULL);
  refill();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (srv == NULL)
    setup();
  if (size < 2)
    return 0;
  const char *method = methods[data[0] % 6];
  int half_close = (data[1] & 1) || data[0] % 6 != 3;
  size_t pos = 2;
  call_t c;
  call_start(&c, method);
  for (int i = 0; i < MAX_MESSAGES && pos < size; i++) {
    size_t len = size - pos < 2 ? 0 : (size_t)data[pos] | data[pos + 1] << 8;
    pos += size - pos < 2 ? size - pos : 2;
    if (len > size - pos)
      len = size - pos;
    if (!call_send(&c, data + pos, len))
      break;
    pos += len;
  }
  if (half_close)
    call_close_send(&c);
  call_drain(&c, QUIET_MS);
  call_end(&c, 1);
  if (++inputs % 64 == 0) {
    check_alive();
    refill();
  }
  return 0;
}
