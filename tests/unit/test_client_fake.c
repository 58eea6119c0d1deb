/* The client against a scripted, misbehaving server (gRPC C core, in this
 * process): what the server says is untrusted input. A wrong layout, an answer
 * that is not Opened, batches beyond the credits given, a shutdown notice,
 * a handoff socket nobody listens on (auto falls back to stream), a handoff
 * that passes a ring with a bad header (the attach error reaches the caller
 * word for word), and Insert
 * acks that do not match their request each give a clear error or the
 * documented behaviour, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/internal.h"
#include "wire/chunk.h"

#define SPEC "obs:f32[64],action:i32[],reward:f32[]"
#define BATCH 4
#define SLOTS 4

typedef enum {
  FAKE_BAD_LAYOUT,  /* Opened whose slot_bytes differs */
  FAKE_NOT_OPENED,  /* first answer is a Notice */
  FAKE_REFUSE,      /* NOT_FOUND status */
  FAKE_OVER_CREDIT, /* SLOTS batches against SLOTS - 1 credits */
  FAKE_NOTICE,      /* one batch, then "shutting down" */
  FAKE_NO_HANDOFF,  /* shm Opened whose socket nobody listens on */
  FAKE_BAD_RING,    /* shm Opened; the handoff passes a ring of zeros */
  FAKE_BAD_CHUNK,   /* a chunk whose total is wrong */
  FAKE_ACK_COUNT,   /* Insert: the second ack claims one sample more */
  FAKE_ACK_KEYS,    /* Insert: the second ack reuses the first one's keys */
  FAKE_ACK_ID,      /* Insert: the second ack repeats the first one's id */
  FAKE_ERROR,       /* GetInfo fails with fake.error (chime-error if with_md) */
  FAKE_OPEN_END,    /* Opened, then at once the status (fake.error, md) */
  FAKE_RECORD_32,   /* Opened for 32-byte sample info records */
  FAKE_RECORD_UNSTATED, /* Opened without info_record_bytes (before 0.2) */
} fake_script_t;

static struct {
  grpc_server *server;
  grpc_completion_queue *cq;
  pthread_t thread;
  char addr[64];
  fake_script_t script;
  sem_t go;       /* FAKE_NOTICE: the test took the batch */
  int subscribes; /* Subscribe calls seen */
  int last_open_mode;
  int error, with_md; /* FAKE_ERROR */
  char boot_id[64], host[256];
  int ring_listen;    /* FAKE_BAD_RING's handoff socket */
  char ring_sock[64]; /* its "@name" */
  pthread_t ring_thread;
} fake;

static void *TAG_NEW = (void *)1, *TAG_OP = (void *)2, *TAG_DONE = (void *)3;

/* Waits for `tag`; 0 when it failed or the server is going away. */
static int wait_tag(void *tag) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        fake.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      return 0;
    if (ev.tag == tag)
      return ev.success;
  }
}

static int op1(grpc_call *call, grpc_op *op) {
  if (grpc_call_start_batch(call, op, 1, TAG_OP, NULL) != GRPC_CALL_OK)
    return 0;
  return wait_tag(TAG_OP);
}

static int send_msg(grpc_call *call, const ProtobufCMessage *m) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = chime__pack(m);
  int ok = op1(call, &op);
  grpc_byte_buffer_destroy(op.data.send_message.send_message);
  return ok;
}

/* A chunk carrying a whole batch of zeros. */
static int send_batch(grpc_call *call, uint64_t seq, uint64_t total,
                      uint64_t claimed_total) {
  uint8_t *msg = calloc(1, CHIME_CHUNK_HEADER_MAX + total);
  size_t h = chime__chunk_header_encode(msg, seq, 0, claimed_total, total);
  grpc_slice s = grpc_slice_from_copied_buffer((char *)msg, h + total);
  free(msg);
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  int ok = op1(call, &op);
  grpc_byte_buffer_destroy(op.data.send_message.send_message);
  return ok;
}

/* Ends the call with a status once the client closed or cancelled. */
static void finish(grpc_call *call, grpc_status_code st, const char *details,
                   int wait_client) {
  int cancelled = 0;
  grpc_slice d = grpc_slice_from_copied_string(details);
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[0].data.recv_close_on_server.cancelled = &cancelled;
  ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[1].data.send_status_from_server.status = st;
  ops[1].data.send_status_from_server.status_details = &d;
  if (wait_client) {
    /* Only RECV_CLOSE first: the client ends the call (close / cancel). */
    if (grpc_call_start_batch(call, ops, 1, TAG_DONE, NULL) == GRPC_CALL_OK)
      wait_tag(TAG_DONE);
    if (grpc_call_start_batch(call, ops + 1, 1, TAG_OP, NULL) == GRPC_CALL_OK)
      wait_tag(TAG_OP);
  } else if (grpc_call_start_batch(call, ops, 2, TAG_DONE, NULL) ==
             GRPC_CALL_OK) {
    wait_tag(TAG_DONE);
  }
  grpc_slice_unref(d);
}

/* Fails a call the way chimed does (src/server/call.c), or, without the
 * metadata, the way a proxy or an older server would, with details that
 * name other errors: the client must not read them. */
static void fail_call(grpc_call *call, int error, int with_md) {
  int cancelled = 0;
  grpc_slice d = grpc_slice_from_static_string(
      "shutting down: page-lock failed (table 'x' not found)");
  grpc_metadata md;
  chime__err_metadata(&md, error);
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[0].data.recv_close_on_server.cancelled = &cancelled;
  ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[1].data.send_status_from_server.status = chime__status_from_err(error);
  ops[1].data.send_status_from_server.status_details = &d;
  ops[1].data.send_status_from_server.trailing_metadata_count = with_md ? 1 : 0;
  ops[1].data.send_status_from_server.trailing_metadata = &md;
  if (grpc_call_start_batch(call, ops, 2, TAG_DONE, NULL) == GRPC_CALL_OK)
    wait_tag(TAG_DONE);
  grpc_slice_unref(md.value);
}

static void leaf_msgs(const chime_spec_t *spec, Chime__V1__Leaf *leaves,
                      Chime__V1__Leaf **ptrs) {
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    chime__v1__leaf__init(&leaves[i]);
    leaves[i].name = (char *)spec->leaves[i].name;
    leaves[i].dtype = (char *)chime_dtype_name(spec->leaves[i].dtype);
    leaves[i].n_shape = spec->leaves[i].ndim;
    leaves[i].shape = (uint64_t *)spec->leaves[i].shape;
    ptrs[i] = &leaves[i];
  }
}

static void serve_info(grpc_call *call) {
  if (fake.script == FAKE_ERROR) {
    fail_call(call, fake.error, fake.with_md);
    return;
  }
  chime_spec_t spec;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  Chime__V1__Leaf leaves[3], *ptrs[3];
  leaf_msgs(&spec, leaves, ptrs);
  Chime__V1__TableInfo t = CHIME__V1__TABLE_INFO__INIT;
  t.name = "t";
  t.n_spec = 3;
  t.spec = ptrs;
  t.spec_text = SPEC;
  t.capacity = 100;
  t.sampler = "fifo";
  t.min_size = 1;
  t.sample_bytes = chime_spec_sample_bytes(&spec);
  Chime__V1__TableInfo *tp = &t;
  Chime__V1__GetInfoResponse r = CHIME__V1__GET_INFO_RESPONSE__INIT;
  r.version = "fake";
  r.boot_id = fake.boot_id;
  r.hostname = fake.host;
  r.n_tables = 1;
  r.tables = &tp;
  send_msg(call, &r.base);
  finish(call, GRPC_STATUS_OK, "", 0);
}

static void serve_subscribe(grpc_call *call, grpc_byte_buffer *first) {
  Chime__V1__SubscribeRequest *req =
      (Chime__V1__SubscribeRequest *)chime__unpack(
          &chime__v1__subscribe_request__descriptor, first);
  assert_non_null(req);
  assert_int_equal(req->kind_case, CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN);
  fake.subscribes++;
  fake.last_open_mode = req->open->mode;
  int mode = req->open->mode;
  chime__v1__subscribe_request__free_unpacked(req, NULL);

  if (fake.script == FAKE_REFUSE) {
    finish(call, GRPC_STATUS_NOT_FOUND, "table 'zz' not found", 0);
    return;
  }
  if (fake.script == FAKE_NOT_OPENED) {
    Chime__V1__Notice n = CHIME__V1__NOTICE__INIT;
    n.message = "hello";
    Chime__V1__SubscribeResponse r = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
    r.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE;
    r.notice = &n;
    send_msg(call, &r.base);
    finish(call, GRPC_STATUS_OK, "", 1);
    return;
  }

  chime_spec_t spec;
  chime_ring_layout_t lay;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  assert_int_equal(chime_ring_layout_compute(&lay, &spec, BATCH, SLOTS), 0);
  /* A server whose records were 32 bytes, consistent in itself: only the
   * record size it states tells the client it cannot read them. */
  uint32_t record = fake.script == FAKE_RECORD_32 ? 32
                    : fake.script == FAKE_RECORD_UNSTATED
                        ? 0
                        : (uint32_t)sizeof(chime_sample_info_t);
  uint64_t send_bytes =
      lay.info_offset +
      BATCH * (record ? record : (uint32_t)sizeof(chime_sample_info_t));
  Chime__V1__Leaf leaves[3], *ptrs[3];
  leaf_msgs(&spec, leaves, ptrs);
  Chime__V1__Layout l = CHIME__V1__LAYOUT__INIT;
  l.slots = SLOTS;
  l.batch_size = BATCH;
  l.slot_bytes = lay.slot_bytes + (fake.script == FAKE_BAD_LAYOUT ? 4096 : 0);
  l.n_leaf_offset = 3;
  l.leaf_offset = lay.leaf_offset;
  l.info_offset = lay.info_offset;
  l.n_spec = 3;
  l.spec = ptrs;
  l.send_bytes = send_bytes;
  l.info_record_bytes = record;
  uint8_t token[16] = {0}, nonce[16] = {0};
  Chime__V1__Handoff h = CHIME__V1__HANDOFF__INIT;
  h.socket_path = fake.script == FAKE_BAD_RING ? fake.ring_sock
                                               : "@chime-fake-nobody-listens";
  h.token.data = token;
  h.token.len = 16;
  h.nonce.data = nonce;
  h.nonce.len = 16;
  h.expires_ms = 5000;
  Chime__V1__Opened o = CHIME__V1__OPENED__INIT;
  o.stream_id = 77;
  o.mode = mode;
  o.layout = &l;
  if (mode == CHIME__V1__MODE__MODE_SHM)
    o.handoff = &h;
  Chime__V1__SubscribeResponse r = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
  r.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED;
  r.opened = &o;
  send_msg(call, &r.base);
  if (fake.script == FAKE_OPEN_END) {
    fail_call(call, fake.error, 1);
    return;
  }

  if (mode == CHIME__V1__MODE__MODE_STREAM) {
    if (fake.script == FAKE_OVER_CREDIT) {
      for (uint64_t i = 0; i < SLOTS; i++)
        send_batch(call, i, send_bytes, send_bytes);
    } else if (fake.script == FAKE_BAD_CHUNK) {
      send_batch(call, 0, send_bytes, send_bytes + 1);
    } else {
      send_batch(call, 0, send_bytes, send_bytes);
    }
    if (fake.script == FAKE_NOTICE) {
      sem_wait(&fake.go);
      Chime__V1__Notice n = CHIME__V1__NOTICE__INIT;
      n.message = "shutting down";
      n.code = GRPC_STATUS_UNAVAILABLE;
      Chime__V1__SubscribeResponse nr = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
      nr.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_NOTICE;
      nr.notice = &n;
      send_msg(call, &nr.base);
      finish(call, GRPC_STATUS_UNAVAILABLE, "shutting down", 0);
      return;
    }
  }
  finish(call, GRPC_STATUS_CANCELLED, "", 1);
}

/* Acks the first request truly and the second as the script says, then waits
 * for the client to give up on the call. */
static void serve_insert(grpc_call *call, grpc_byte_buffer *first) {
  grpc_byte_buffer *bb = first;
  uint64_t next_key = 1;
  for (int n = 0; bb; n++) {
    Chime__V1__InsertRequest *req = (Chime__V1__InsertRequest *)chime__unpack(
        &chime__v1__insert_request__descriptor, bb);
    if (bb != first)
      grpc_byte_buffer_destroy(bb);
    bb = NULL;
    assert_non_null(req);
    Chime__V1__InsertAck ack = CHIME__V1__INSERT_ACK__INIT;
    uint64_t req_id = req->id;
    ack.id = req_id;
    ack.count = req->count;
    ack.first_key = next_key;
    next_key += req->count;
    chime__v1__insert_request__free_unpacked(req, NULL);
    if (n == 1 && fake.script == FAKE_ACK_COUNT)
      ack.count++;
    if (n == 1 && fake.script == FAKE_ACK_KEYS)
      ack.first_key = 1;
    if (n == 1 && fake.script == FAKE_ACK_ID)
      ack.id = req_id - 1; /* the first request's */
    send_msg(call, &ack.base);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    if (!op1(call, &op))
      break;
  }
  if (bb)
    grpc_byte_buffer_destroy(bb);
  finish(call, GRPC_STATUS_OK, "", 0);
}

static void *fake_main(void *arg) {
  (void)arg;
  for (;;) {
    grpc_call *call = NULL;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_call_details_init(&details);
    grpc_metadata_array_init(&md);
    if (grpc_server_request_call(fake.server, &call, &details, &md, fake.cq,
                                 fake.cq, TAG_NEW) != GRPC_CALL_OK)
      break;
    int ok = wait_tag(TAG_NEW);
    if (ok) {
      grpc_byte_buffer *first = NULL;
      grpc_op ops[2];
      memset(ops, 0, sizeof(ops));
      ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
      ops[1].op = GRPC_OP_RECV_MESSAGE;
      ops[1].data.recv_message.recv_message = &first;
      if (grpc_call_start_batch(call, ops, 2, TAG_OP, NULL) == GRPC_CALL_OK &&
          wait_tag(TAG_OP) && first) {
        char method[128];
        chime__slice_str(details.method, method, sizeof(method));
        if (!strcmp(method, chime__method_path[CHIME__M_GETINFO]))
          serve_info(call);
        else if (!strcmp(method, chime__method_path[CHIME__M_INSERT]))
          serve_insert(call, first);
        else
          serve_subscribe(call, first);
      }
      if (first)
        grpc_byte_buffer_destroy(first);
    }
    if (call)
      grpc_call_unref(call);
    grpc_call_details_destroy(&details);
    grpc_metadata_array_destroy(&md);
    if (!ok)
      break;
  }
  return NULL;
}

/* FAKE_BAD_RING's handoff: whatever the token, answers 0 and passes a
 * sealed memfd of zeros (no ring header) until the socket is shut down. */
static void *bad_ring_main(void *arg) {
  (void)arg;
  for (;;) {
    int conn = accept(fake.ring_listen, NULL, NULL);
    if (conn < 0)
      break;
    uint8_t req[24]; /* "CHIMEHO1" + a 16-byte token */
    size_t got = 0;
    while (got < sizeof(req)) {
      ssize_t k = read(conn, req + got, sizeof(req) - got);
      if (k <= 0)
        break;
      got += (size_t)k;
    }
    int fd = memfd_create("fake-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && ftruncate(fd, 1 << 20) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0) {
      uint8_t status[4] = {0};
      union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
      } ctrl;
      memset(&ctrl, 0, sizeof(ctrl));
      struct iovec iov = {status, sizeof(status)};
      struct msghdr msg;
      memset(&msg, 0, sizeof(msg));
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = ctrl.buf;
      msg.msg_controllen = sizeof(ctrl.buf);
      struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(c), &fd, sizeof(int));
      if (sendmsg(conn, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof(status))
        fprintf(stderr, "fake handoff: sendmsg failed\n");
    }
    if (fd >= 0)
      close(fd);
    close(conn);
  }
  return NULL;
}

static int bad_ring_start(void) {
  snprintf(fake.ring_sock, sizeof(fake.ring_sock), "@chime-fake-bad-ring-%d",
           (int)getpid());
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  size_t n = strlen(fake.ring_sock);
  memcpy(addr.sun_path, fake.ring_sock, n);
  addr.sun_path[0] = '\0'; /* abstract */
  fake.ring_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fake.ring_listen < 0 ||
      bind(fake.ring_listen, (struct sockaddr *)&addr,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) != 0 ||
      listen(fake.ring_listen, 4) != 0)
    return -1;
  return pthread_create(&fake.ring_thread, NULL, bad_ring_main, NULL) == 0 ? 0
                                                                           : -1;
}

static int fake_start(void **state) {
  (void)state;
  grpc_init();
  chime__host_identity(fake.boot_id, sizeof(fake.boot_id), fake.host,
                       sizeof(fake.host));
  sem_init(&fake.go, 0, 0);
  fake.server = grpc_server_create(NULL, NULL);
  fake.cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(fake.server, fake.cq, NULL);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(fake.server, "127.0.0.1:0", creds);
  grpc_server_credentials_release(creds);
  if (port <= 0)
    return -1;
  snprintf(fake.addr, sizeof(fake.addr), "127.0.0.1:%d", port);
  grpc_server_start(fake.server);
  if (bad_ring_start() != 0)
    return -1;
  return pthread_create(&fake.thread, NULL, fake_main, NULL) == 0 ? 0 : -1;
}

static int fake_stop(void **state) {
  (void)state;
  grpc_server_shutdown_and_notify(fake.server, fake.cq, TAG_DONE);
  grpc_server_cancel_all_calls(fake.server);
  pthread_join(fake.thread, NULL);
  grpc_completion_queue_shutdown(fake.cq);
  while (grpc_completion_queue_next(fake.cq,
                                    gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
             .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_server_destroy(fake.server);
  grpc_completion_queue_destroy(fake.cq);
  sem_destroy(&fake.go);
  shutdown(fake.ring_listen, SHUT_RDWR); /* ends bad_ring_main's accept */
  pthread_join(fake.ring_thread, NULL);
  close(fake.ring_listen);
  grpc_shutdown_blocking();
  return 0;
}

static int open_as(fake_script_t script, chime_mode_t mode, chime_client_t **c,
                   chime_stream_t **s) {
  fake.script = script;
  assert_int_equal(chime_client_create(c, fake.addr, NULL), 0);
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.batch_size = BATCH;
  o.slots = SLOTS;
  o.mode = mode;
  o.open_timeout_ms = 10000;
  o.max_inflight_bytes = 1; /* the fake's Layout has SLOTS */
  *s = NULL;
  return chime_stream_open(s, *c, "t", &o);
}

static void test_bad_layout(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_BAD_LAYOUT, CHIME_MODE_STREAM, &c, &s),
                   CHIME_EPROTO);
  assert_null(s);
  assert_non_null(strstr(chime_last_error(), "layout differs"));
  chime_client_destroy(c);
}

/* The Layout states 32-byte sample info records: the client cannot read
 * them as its own 80-byte ones and says so, naming both sizes. */
static void test_info_record_size_differs(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_RECORD_32, CHIME_MODE_STREAM, &c, &s),
                   CHIME_EPROTO);
  assert_null(s);
  const char *e = chime_last_error();
  if (!strstr(e, "sample info records are 32 bytes, this library's are 80"))
    fail_msg("last error: '%s'", e);
  chime_client_destroy(c);
}

/* A server before 0.2 does not state the size (0): its records are the
 * 64-byte ones (send_bytes agrees), and its batches are read. */
static void test_info_record_size_unstated(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_RECORD_UNSTATED, CHIME_MODE_STREAM, &c, &s), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(b.count, BATCH);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

static void test_not_opened(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_NOT_OPENED, CHIME_MODE_STREAM, &c, &s),
                   CHIME_EPROTO);
  assert_non_null(strstr(chime_last_error(), "not Opened"));
  chime_client_destroy(c);
}

static void test_refused(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_REFUSE, CHIME_MODE_STREAM, &c, &s),
                   CHIME_ENOTFOUND);
  assert_non_null(strstr(chime_last_error(), "table 'zz' not found"));
  chime_client_destroy(c);
}

/* Takes batches without releasing them (no credit goes back) until next
 * fails with something other than "all slots held" (the stream thread may not
 * have seen the offending chunk yet: poll, for at most 10 s). */
static int next_until_error(chime_stream_t *s, int *got) {
  *got = 0;
  for (int i = 0; i < 1000; i++) {
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 10000);
    if (rc == CHIME_EBUSY) {
      usleep(10000);
      continue;
    }
    if (rc)
      return rc;
    (*got)++;
  }
  return 0;
}

static void test_over_credit(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_OVER_CREDIT, CHIME_MODE_STREAM, &c, &s), 0);
  int got;
  assert_int_equal(next_until_error(s, &got), CHIME_EPROTO);
  assert_true(got <= SLOTS - 1);
  if (!strstr(chime_last_error(), "credits"))
    fail_msg("last error '%s' after %d batches", chime_last_error(), got);
  chime_stream_close(s);
  chime_client_destroy(c);
}

static void test_bad_chunk(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_BAD_CHUNK, CHIME_MODE_STREAM, &c, &s), 0);
  int got;
  assert_int_equal(next_until_error(s, &got), CHIME_EPROTO);
  assert_int_equal(got, 0);
  assert_non_null(strstr(chime_last_error(), "the layout says"));
  chime_stream_close(s);
  chime_client_destroy(c);
}

static void test_notice(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_NOTICE, CHIME_MODE_STREAM, &c, &s), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(b.count, BATCH);
  sem_post(&fake.go);
  chime_batch_t more;
  assert_int_equal(chime_stream_next(s, &more, 10000), CHIME_ESHUTDOWN);
  /* The batch taken before stays readable. */
  const uint8_t *p = b.leaf[0].data;
  assert_int_equal(p[0] | p[b.leaf[0].bytes - 1], 0);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* Every CHIME_E* code a server sends comes back through gRPC exactly, whatever
 * the details say; without chime-error only the status counts (the text
 * that once decided "shutting down" and "page-lock" no longer does). */
static void test_error_codes(void **state) {
  (void)state;
  static const int codes[] = {
#define CODE(name, value, msg) CHIME_##name,
      CHIME_ERRNO_MAP(CODE)
#undef CODE
  };
  chime_client_t *c;
  fake.script = FAKE_ERROR;
  assert_int_equal(chime_client_create(&c, fake.addr, NULL), 0);
  fake.with_md = 1;
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
    chime_server_info_t *info = NULL;
    fake.error = codes[i];
    int rc = chime_client_info(c, &info);
    if (rc != codes[i])
      fail_msg("server sent %s, client returned %s (%s)",
               chime_err_name(codes[i]), chime_err_name(rc),
               chime_last_error());
    assert_null(info);
    assert_non_null(strstr(chime_last_error(), "page-lock failed"));
  }
  fake.with_md = 0;
  chime_server_info_t *info = NULL;
  fake.error = CHIME_ESHUTDOWN;
  assert_int_equal(chime_client_info(c, &info), CHIME_EUNAVAILABLE);
  fake.error = CHIME_ECUDA;
  assert_int_equal(chime_client_info(c, &info), CHIME_EINVAL);
  fake.error = CHIME_ENOTFOUND;
  assert_int_equal(chime_client_info(c, &info), CHIME_ENOTFOUND);
  chime_client_destroy(c);
}

/* The call ends right after Opened, maybe while the client is still opening:
 * the stream reports the server's code (from chime-error, the details say
 * nothing of shutting down) once the learner asks. */
static void test_ends_after_opened(void **state) {
  (void)state;
  static const int codes[] = {CHIME_ESHUTDOWN, CHIME_EPERM};
  for (size_t i = 0; i < 2; i++) {
    chime_client_t *c;
    chime_stream_t *s;
    fake.error = codes[i];
    assert_int_equal(open_as(FAKE_OPEN_END, CHIME_MODE_STREAM, &c, &s), 0);
    chime_batch_t b;
    int rc = chime_stream_next(s, &b, 10000);
    if (rc != codes[i])
      fail_msg("server ended with %s, next returned %s (%s)",
               chime_err_name(codes[i]), chime_err_name(rc),
               chime_last_error());
    assert_non_null(strstr(chime_last_error(), "page-lock failed"));
    chime_stream_close(s);
    chime_client_destroy(c);
  }
}

static void test_auto_falls_back_when_handoff_fails(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  int before = fake.subscribes;
  assert_int_equal(open_as(FAKE_NO_HANDOFF, CHIME_MODE_AUTO, &c, &s), 0);
  assert_int_equal(fake.subscribes, before + 2); /* shm, then stream */
  assert_int_equal(fake.last_open_mode, CHIME__V1__MODE__MODE_STREAM);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  const char *why = chime_stream_fallback_reason(s);
  assert_non_null(why);
  assert_non_null(strstr(why, "shm attach failed: handoff: cannot connect"));
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);

  /* Asked for shm explicitly: no fallback, the attach error. */
  before = fake.subscribes;
  assert_int_equal(open_as(FAKE_NO_HANDOFF, CHIME_MODE_SHM, &c, &s),
                   CHIME_EUNAVAILABLE);
  assert_null(s);
  assert_int_equal(fake.subscribes, before + 1);
  assert_non_null(strstr(chime_last_error(), "handoff"));
  chime_client_destroy(c);
}

/* The ring the handoff passes has no header: the attach's own reason (not
 * just "corrupt") is the fallback reason in auto mode, and the open's error
 * in shm mode. */
static void test_bad_ring_detail_reaches_caller(void **state) {
  (void)state;
  chime_client_t *c;
  chime_stream_t *s;
  assert_int_equal(open_as(FAKE_BAD_RING, CHIME_MODE_AUTO, &c, &s), 0);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  const char *why = chime_stream_fallback_reason(s);
  assert_non_null(why);
  if (!strstr(why, "shm attach failed: ring attach:") ||
      !strstr(why, "bad magic"))
    fail_msg("fallback reason: '%s'", why);
  chime_stream_close(s);
  chime_client_destroy(c);

  assert_int_equal(open_as(FAKE_BAD_RING, CHIME_MODE_SHM, &c, &s),
                   CHIME_ECORRUPT);
  assert_null(s);
  const char *e = chime_last_error();
  if (!strstr(e, "ring attach:") || !strstr(e, "bad magic"))
    fail_msg("last error: '%s'", e);
  chime_client_destroy(c);
}

/* Two requests of two samples: the first ack is true, the second breaks the
 * script's rule. The writer must refuse it and keep counting only the first. */
static void expect_bad_second_ack(fake_script_t script, const char *why) {
  chime_client_t *c;
  chime_writer_t *w;
  fake.script = script;
  assert_int_equal(chime_client_create(&c, fake.addr, NULL), 0);
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 2;
  o.timeout_ms = 10000;
  assert_int_equal(chime_writer_open(&w, c, "t", &o), 0);
  chime_spec_t spec;
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  size_t len = (size_t)chime_spec_sample_bytes(&spec);
  uint8_t *sample = calloc(1, len);
  assert_non_null(sample);
  for (int i = 0; i < 2; i++)
    assert_int_equal(chime_writer_append(w, sample, len, 1.0), 0);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), 2);
  for (int i = 0; i < 2; i++)
    assert_int_equal(chime_writer_append(w, sample, len, 1.0), 0);
  assert_int_equal(chime_writer_flush(w), CHIME_EPROTO);
  assert_int_equal(chime_writer_acked(w), 2);
  const char *e = chime_last_error();
  if (!strstr(e, why))
    fail_msg("last error '%s' does not say '%s'", e, why);
  /* Sticky: the writer stays failed. */
  assert_int_equal(chime_writer_append(w, sample, len, 1.0), CHIME_EPROTO);
  assert_int_equal(chime_writer_close(w), CHIME_EPROTO);
  free(sample);
  chime_client_destroy(c);
}

static void test_ack_wrong_count(void **state) {
  (void)state;
  expect_bad_second_ack(FAKE_ACK_COUNT, "says 3 samples, 2 were sent");
}

static void test_ack_reused_keys(void **state) {
  (void)state;
  expect_bad_second_ack(FAKE_ACK_KEYS,
                        "gives keys from 1 (expected 3 or later");
}

static void test_ack_repeated_id(void **state) {
  (void)state;
  expect_bad_second_ack(FAKE_ACK_ID, "ack for request 1, expected 2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_layout),
      cmocka_unit_test(test_info_record_size_differs),
      cmocka_unit_test(test_info_record_size_unstated),
      cmocka_unit_test(test_not_opened),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_over_credit),
      cmocka_unit_test(test_bad_chunk),
      cmocka_unit_test(test_error_codes),
      cmocka_unit_test(test_notice),
      cmocka_unit_test(test_ends_after_opened),
      cmocka_unit_test(test_auto_falls_back_when_handoff_fails),
      cmocka_unit_test(test_bad_ring_detail_reaches_caller),
      cmocka_unit_test(test_ack_wrong_count),
      cmocka_unit_test(test_ack_reused_keys),
      cmocka_unit_test(test_ack_repeated_id),
  };
  return cmocka_run_group_tests(tests, fake_start, fake_stop);
}
