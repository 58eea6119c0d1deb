/* The server's call machinery alone (src/server/call.c): a grpc_server in
 * this process with a call host of the test's own (call.h: its queues, a
 * handler table that scripts each call from the client's bytes, an
 * admission hook) and raw gRPC calls against it (support/rawcall.c). A
 * unary call answers and ends with its status; a failure carries its code
 * in chime-error beside the status it maps to (or the one asked for); the
 * details are not cut; sends after the status are refused and never drop
 * it; a refused admission, a stopping host and a request larger than its
 * method takes end the call before its handler sees it; messages go out in
 * order with on_sent once the queue drains; a client that cancels ends the
 * handler's call (its receive ends, on_close, sends refused, on_free); an
 * unknown method is UNIMPLEMENTED; the live calls are counted, Insert's
 * apart, and Insert's operations complete on their own queue; an open
 * method (health) skips admission and is still served while stopping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chime/errors.h"
#include "common/clock.h"
#include "rawcall.h"
#include "server/call.h"
#include "wire/method.h"
#include "wire/status.h"

#define LIVENESS_NS (30ull * 1000000000ull)
#define LONG_DETAILS 3000 /* a pinning error names the whole ladder */

/* What the handlers saw, for the test to wait on (under ev_mu). */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static struct {
  int bad; /* a handler met what cannot be: checked by teardown */
  int starts[CHIME__M_COUNT];
  int messages[CHIME__M_COUNT]; /* non-NULL ones */
  int ends;                     /* on_message(NULL) */
  int closes, sent, frees;      /* on_close, on_sent, states freed */
  int admits[CHIME__M_COUNT];
  int late_rc, late_done; /* a send after finish, and that it was tried */
  int close_rc;           /* a send in on_close */
  int insert_on_insert_cq, insert_elsewhere;
} ev;

typedef struct {
  chime__callhost_t host;
  grpc_server *gs;
  grpc_completion_queue *cq, *insert_cq;
  pthread_t cq_thread[2], insert_thread;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  atomic_int stopping;
  char addr[128];
  grpc_channel *ch;
} fix_t;

static fix_t *fx;

static __thread int on_insert_cq; /* this thread drains the insert queue */

static void note(int *field, int v) {
  pthread_mutex_lock(&ev_mu);
  *field += v;
  pthread_cond_broadcast(&ev_cond);
  pthread_mutex_unlock(&ev_mu);
}

static void set(int *field, int v) {
  pthread_mutex_lock(&ev_mu);
  *field = v;
  pthread_cond_broadcast(&ev_cond);
  pthread_mutex_unlock(&ev_mu);
}

/* Waits until *field reaches at least v; fails after LIVENESS_NS. */
static void await_at_least(const int *field, int v) {
  uint64_t t0 = chime__now_ns();
  pthread_mutex_lock(&ev_mu);
  while (*field < v) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&ev_cond, &ev_mu, &ts);
    if (chime__now_ns() - t0 > LIVENESS_NS) {
      pthread_mutex_unlock(&ev_mu);
      fail_msg("waited 30 s for the server's handlers");
    }
  }
  pthread_mutex_unlock(&ev_mu);
}

static int get(const int *field) {
  pthread_mutex_lock(&ev_mu);
  int v = *field;
  pthread_mutex_unlock(&ev_mu);
  return v;
}

static grpc_byte_buffer *bytes_bb(const char *p, size_t n) {
  grpc_slice s = grpc_slice_from_copied_buffer(p, n);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* A message's bytes as a NUL-terminated string (cut at 255). */
static void bb_text(grpc_byte_buffer *bb, char *out, size_t len) {
  grpc_slice s;
  out[0] = '\0';
  if (bb == NULL || chime__bb_read(bb, &s) != 0)
    return;
  size_t n = GRPC_SLICE_LENGTH(s) < len - 1 ? GRPC_SLICE_LENGTH(s) : len - 1;
  memcpy(out, GRPC_SLICE_START_PTR(s), n);
  out[n] = '\0';
  grpc_slice_unref(s);
}

/* --- the handlers: scripted by the client's bytes --- */

/* CMocka's asserts belong to the test's thread: handlers count what
 * cannot be, and teardown checks the count. */
static void expect(int ok) {
  if (!ok)
    note(&ev.bad, 1);
}

static void state_new(chime__call_t *c) {
  void *st = malloc(1); /* freed by on_free: a leak shows under ASan */
  expect(st != NULL);
  chime__call_set_state(c, st);
}

static void u_start(chime__call_t *c) {
  char cmd[256];
  note(&ev.starts[chime__call_method(c)], 1);
  state_new(c);
  bb_text(chime__call_payload(c), cmd, sizeof(cmd));
  if (strncmp(cmd, "echo:", 5) == 0) {
    expect(chime__call_send(c, bytes_bb(cmd + 5, strlen(cmd + 5))) == 0);
    chime__call_finish(c, CHIME_OK, "ok");
  } else if (strcmp(cmd, "fail") == 0) {
    char *x = malloc(LONG_DETAILS + 1);
    memset(x, 'x', LONG_DETAILS);
    x[LONG_DETAILS] = '\0';
    chime__call_finish(c, CHIME_ENOTFOUND, "not here: %s", x);
    free(x);
  } else if (strcmp(cmd, "as") == 0) {
    chime__call_finish_as(c, CHIME_EINVAL, GRPC_STATUS_FAILED_PRECONDITION,
                          "outside the window");
  } else if (strcmp(cmd, "late") == 0) {
    chime__call_finish(c, CHIME_OK, "done");
    set(&ev.late_rc, chime__call_send(c, bytes_bb("x", 1)));
    chime__call_drop_queued(c); /* never the final status */
    note(&ev.late_done, 1);
  } else {
    chime__call_finish(c, CHIME_EINVAL, "unknown command '%s'", cmd);
  }
}

static void s_start(chime__call_t *c) {
  note(&ev.starts[chime__call_method(c)], 1);
  state_new(c);
  chime__call_recv(c);
}

static void s_message(chime__call_t *c, grpc_byte_buffer *bb) {
  char cmd[256];
  if (chime__call_method(c) == CHIME__M_INSERT)
    note(on_insert_cq ? &ev.insert_on_insert_cq : &ev.insert_elsewhere, 1);
  if (bb == NULL) {
    note(&ev.ends, 1);
    chime__call_finish(c, CHIME_OK, "bye");
    return;
  }
  bb_text(bb, cmd, sizeof(cmd));
  grpc_byte_buffer_destroy(bb);
  if (strncmp(cmd, "echo:", 5) == 0) {
    chime__call_send(c, bytes_bb(cmd + 5, strlen(cmd + 5)));
  } else if (strncmp(cmd, "many:", 5) == 0) {
    int n = atoi(cmd + 5);
    for (int i = 0; i < n; i++) {
      char m[32];
      snprintf(m, sizeof(m), "m%d", i);
      expect(chime__call_send(c, bytes_bb(m, strlen(m))) == 0);
    }
  } else if (strcmp(cmd, "fail") == 0) {
    chime__call_finish(c, CHIME_ERESOURCE, "full");
  }
  chime__call_recv(c);
  /* Counted once handled: a test that waits for it finds its sends
   * queued and the next receive asked for. */
  note(&ev.messages[chime__call_method(c)], 1);
}

static void s_close(chime__call_t *c) {
  set(&ev.close_rc, chime__call_send(c, bytes_bb("x", 1)));
  note(&ev.closes, 1);
}

static void s_sent(chime__call_t *c) {
  (void)c;
  note(&ev.sent, 1);
}

static void any_free(chime__call_t *c) {
  void *st = chime__call_state(c);
  if (st != NULL) {
    free(st);
    note(&ev.frees, 1);
  }
}

static void u_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

static const chime__call_vt_t unary_vt = {
    .on_start = u_start, .on_message = u_message, .on_free = any_free};
static const chime__call_vt_t stream_vt = {
    .on_start = s_start,
    .on_message = s_message,
    .on_close = s_close,
    .on_free = any_free,
    .on_sent = s_sent,
};
/* An open method (the health check's kind): no admission, answered while
 * stopping. */
static const chime__call_vt_t open_vt = {.on_start = u_start,
                                         .on_message = u_message,
                                         .on_free = any_free,
                                         .open = 1};
static const chime__call_vt_t *const test_vt[CHIME__M_COUNT] = {
    [CHIME__M_HEALTH] = &open_vt,      [CHIME__M_GETINFO] = &unary_vt,
    [CHIME__M_STATS] = &unary_vt,      [CHIME__M_MUTATE] = &unary_vt,
    [CHIME__M_CHECKPOINT] = &unary_vt, [CHIME__M_INSERT] = &stream_vt,
    [CHIME__M_SUBSCRIBE] = &stream_vt,
};

/* Checkpoint is refused; every other method is let in. */
static int admit(void *arg, int method, const grpc_metadata_array *md,
                 char *err, size_t errlen) {
  (void)md;
  expect(arg == fx);
  note(&ev.admits[method < CHIME__M_COUNT ? method : 0], 1);
  if (method != CHIME__M_CHECKPOINT)
    return 0;
  snprintf(err, errlen, "Checkpoint: role 'actor' may not call it");
  return CHIME_EPERM;
}

/* --- the server --- */

static void *drain_main(void *arg) {
  grpc_completion_queue *cq = arg;
  on_insert_cq = cq == fx->insert_cq;
  for (;;) {
    grpc_event e = grpc_completion_queue_next(
        cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (e.type == GRPC_QUEUE_SHUTDOWN)
      return NULL;
    if (e.type == GRPC_OP_COMPLETE) {
      chime__tag_t *tag = e.tag;
      tag->fn(tag, e.success);
    }
  }
}

static int setup(void **state) {
  (void)state;
  memset(&ev, 0, sizeof(ev));
  fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  pthread_mutex_init(&fx->mu, NULL);
  pthread_cond_init(&fx->cond, NULL);
  grpc_init();
  grpc_arg args[1] = {{.type = GRPC_ARG_INTEGER,
                       .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                       .value.integer = 64 << 20}};
  grpc_channel_args ca = {1, args};
  fx->gs = grpc_server_create(&ca, NULL);
  fx->cq = grpc_completion_queue_create_for_next(NULL);
  fx->insert_cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(fx->gs, fx->cq, NULL);
  fx->host = (chime__callhost_t){
      .srv = NULL,
      .gs = fx->gs,
      .cq = fx->cq,
      .insert_cq = fx->insert_cq,
      .vt = test_vt,
      .admit = admit,
      .admit_arg = fx,
      .stopping = &fx->stopping,
      .mu = &fx->mu,
      .cond = &fx->cond,
  };
  for (int m = 0; m < CHIME__M_COUNT; m++) {
    fx->host.methods[m] = grpc_server_register_method(
        fx->gs, chime__method_path[m], NULL,
        chime__method_one_request(m) ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                                     : GRPC_SRM_PAYLOAD_NONE,
        0);
    assert_non_null(fx->host.methods[m]);
  }
  snprintf(fx->addr, sizeof(fx->addr), "unix:/tmp/chime-test-call-%d.sock",
           (int)getpid());
  unlink(fx->addr + 5);
  grpc_server_credentials *cr = grpc_insecure_server_credentials_create();
  assert_true(grpc_server_add_http2_port(fx->gs, fx->addr, cr) > 0);
  grpc_server_credentials_release(cr);
  grpc_server_start(fx->gs);
  for (int m = 0; m <= CHIME__M_COUNT; m++)
    for (int k = 0; k < 2; k++)
      assert_int_equal(chime__request_call(&fx->host, m), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(
        pthread_create(&fx->cq_thread[i], NULL, drain_main, fx->cq), 0);
  assert_int_equal(
      pthread_create(&fx->insert_thread, NULL, drain_main, fx->insert_cq), 0);
  fx->ch = chime__raw_channel(fx->addr);
  return 0;
}

static uint32_t live_calls(uint32_t *inserts) {
  pthread_mutex_lock(&fx->mu);
  uint32_t n = fx->host.ncalls;
  if (inserts != NULL)
    *inserts = fx->host.insert_calls;
  pthread_mutex_unlock(&fx->mu);
  return n;
}

/* Waits until no call is live (each call ends a little after its
 * client saw the status). */
static void await_no_calls(void) {
  uint64_t t0 = chime__now_ns();
  pthread_mutex_lock(&fx->mu);
  while (fx->host.ncalls > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&fx->cond, &fx->mu, &ts);
    if (chime__now_ns() - t0 > LIVENESS_NS) {
      pthread_mutex_unlock(&fx->mu);
      fail_msg("calls still live after 30 s");
    }
  }
  pthread_mutex_unlock(&fx->mu);
}

static int teardown(void **state) {
  (void)state;
  grpc_channel_destroy(fx->ch);
  await_no_calls();
  /* Every call that reached a handler was freed. */
  int starts = 0;
  for (int m = 0; m < CHIME__M_COUNT; m++)
    starts += get(&ev.starts[m]);
  await_at_least(&ev.frees, starts);
  assert_int_equal(get(&ev.frees), starts);
  grpc_completion_queue *sq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_server_shutdown_and_notify(fx->gs, sq, fx);
  grpc_server_cancel_all_calls(fx->gs);
  grpc_completion_queue_pluck(sq, fx, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_server_destroy(fx->gs);
  grpc_completion_queue_shutdown(sq);
  grpc_completion_queue_destroy(sq);
  grpc_completion_queue_shutdown(fx->cq);
  grpc_completion_queue_shutdown(fx->insert_cq);
  for (int i = 0; i < 2; i++)
    pthread_join(fx->cq_thread[i], NULL);
  pthread_join(fx->insert_thread, NULL);
  grpc_completion_queue_destroy(fx->cq);
  grpc_completion_queue_destroy(fx->insert_cq);
  grpc_shutdown_blocking();
  unlink(fx->addr + 5);
  assert_int_equal(fx->host.ncalls, 0);
  assert_int_equal(ev.bad, 0);
  pthread_mutex_destroy(&fx->mu);
  pthread_cond_destroy(&fx->cond);
  free(fx);
  fx = NULL;
  return 0;
}

/* --- the client --- */

/* One unary call with `payload`: its status, code (chime-error or the
 * status), details and the one answer's bytes. */
typedef struct {
  grpc_status_code status;
  int err;
  char details[LONG_DETAILS + 64];
  char answer[256];
  int answers;
} result_t;

static void unary(const char *method, const void *payload, size_t len,
                  result_t *res) {
  chime__raw_t r;
  grpc_byte_buffer *bb;
  memset(res, 0, sizeof(*res));
  assert_int_equal(chime__raw_start(&r, fx->ch, method, 20000), 0);
  (void)chime__raw_send_bytes(&r, payload, len);
  (void)chime__raw_close_send(&r);
  while (chime__raw_recv(&r, &bb, 20000) == 0 && bb != NULL) {
    bb_text(bb, res->answer, sizeof(res->answer));
    res->answers++;
    grpc_byte_buffer_destroy(bb);
  }
  assert_int_equal(chime__raw_finish(&r, &res->status, res->details,
                                     sizeof(res->details), 20000),
                   0);
  res->err = chime__status_to_err(res->status, &r.md_trail);
  chime__raw_destroy(&r);
}

static void unary_str(int method, const char *cmd, result_t *res) {
  unary(chime__method_path[method], cmd, strlen(cmd), res);
}

static void test_unary_answer(void **state) {
  (void)state;
  result_t res;
  unary_str(CHIME__M_GETINFO, "echo:hello", &res);
  assert_int_equal(res.status, GRPC_STATUS_OK);
  assert_int_equal(res.err, 0);
  assert_string_equal(res.details, "ok");
  assert_int_equal(res.answers, 1);
  assert_string_equal(res.answer, "hello");
  /* The handler that served it is the method's. */
  unary_str(CHIME__M_STATS, "echo:s", &res);
  assert_int_equal(get(&ev.starts[CHIME__M_GETINFO]), 1);
  assert_int_equal(get(&ev.starts[CHIME__M_STATS]), 1);
  assert_int_equal(get(&ev.admits[CHIME__M_STATS]), 1);
}

/* A failure: the status the code maps to, the code itself in
 * chime-error, the details whole however long. */
static void test_unary_failure(void **state) {
  (void)state;
  result_t res;
  unary_str(CHIME__M_GETINFO, "fail", &res);
  assert_int_equal(res.status, chime__status_from_err(CHIME_ENOTFOUND));
  assert_int_equal(res.err, CHIME_ENOTFOUND);
  assert_int_equal(strlen(res.details), strlen("not here: ") + LONG_DETAILS);
  assert_int_equal(res.answers, 0);
  /* finish_as: the protocol's own status, the code still the caller's. */
  unary_str(CHIME__M_MUTATE, "as", &res);
  assert_int_equal(res.status, GRPC_STATUS_FAILED_PRECONDITION);
  assert_int_equal(res.err, CHIME_EINVAL);
  assert_string_equal(res.details, "outside the window");
}

/* After the final status a send is refused and drop_queued keeps the
 * status: the client gets it, nothing more. */
static void test_send_after_finish(void **state) {
  (void)state;
  result_t res;
  set(&ev.late_rc, 1);
  unary_str(CHIME__M_GETINFO, "late", &res);
  assert_int_equal(res.status, GRPC_STATUS_OK);
  assert_string_equal(res.details, "done");
  assert_int_equal(res.answers, 0);
  await_at_least(&ev.late_done, 1); /* the status may come first */
  assert_int_equal(get(&ev.late_rc), CHIME_ECLOSED);
}

/* Refused admission: the code and sentence reach the client, the
 * handler never starts. */
static void test_admission_refused(void **state) {
  (void)state;
  result_t res;
  unary_str(CHIME__M_CHECKPOINT, "echo:x", &res);
  assert_int_equal(res.status, GRPC_STATUS_PERMISSION_DENIED);
  assert_int_equal(res.err, CHIME_EPERM);
  assert_string_equal(res.details, "Checkpoint: role 'actor' may not call it");
  assert_int_equal(get(&ev.admits[CHIME__M_CHECKPOINT]), 1);
  assert_int_equal(get(&ev.starts[CHIME__M_CHECKPOINT]), 0);
}

/* Larger than the method takes: INVALID_ARGUMENT naming the method and
 * both sizes, before the handler sees it (unary: on_start; stream: the
 * message). */
static void test_oversized(void **state) {
  (void)state;
  result_t res;
  unsigned max = chime__method_max_request[CHIME__M_GETINFO];
  assert_true(max > 0);
  char *big = malloc(max + 1);
  memcpy(big, "echo:", 5);
  memset(big + 5, 'y', max - 4);
  unary(chime__method_path[CHIME__M_GETINFO], big, max + 1, &res);
  assert_int_equal(res.err, CHIME_EINVAL);
  assert_int_equal(res.status, GRPC_STATUS_INVALID_ARGUMENT);
  char want[128];
  snprintf(want, sizeof(want),
           "GetInfo: a request of %u bytes; this method takes at most %u",
           max + 1, max);
  assert_string_equal(res.details, want);
  assert_int_equal(get(&ev.starts[CHIME__M_GETINFO]), 0);
  /* Exactly the limit passes. */
  unary(chime__method_path[CHIME__M_GETINFO], big, max, &res);
  assert_int_equal(res.status, GRPC_STATUS_OK);
  free(big);

  unsigned smax = chime__method_max_request[CHIME__M_SUBSCRIBE];
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, fx->ch,
                                    chime__method_path[CHIME__M_SUBSCRIBE],
                                    20000),
                   0);
  assert_int_equal(chime__raw_send_bytes(&r, "echo:a", 6), 0);
  big = calloc(1, smax + 1);
  (void)chime__raw_send_bytes(&r, big, smax + 1);
  free(big);
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(details, "Subscribe: a request of"));
  assert_int_equal(get(&ev.messages[CHIME__M_SUBSCRIBE]), 1); /* the echo */
  chime__raw_destroy(&r);
}

/* A stream's messages arrive in the order queued, however many are
 * queued at once; on_sent comes once the queue drained; the handler's
 * failure ends the call with its code. */
static void test_stream_order(void **state) {
  (void)state;
  chime__raw_t r;
  grpc_byte_buffer *bb;
  char text[64];
  assert_int_equal(chime__raw_start(&r, fx->ch,
                                    chime__method_path[CHIME__M_SUBSCRIBE],
                                    20000),
                   0);
  assert_int_equal(chime__raw_send_bytes(&r, "many:300", 8), 0);
  for (int i = 0; i < 300; i++) {
    assert_int_equal(chime__raw_recv(&r, &bb, 20000), 0);
    assert_non_null(bb);
    bb_text(bb, text, sizeof(text));
    grpc_byte_buffer_destroy(bb);
    char want[32];
    snprintf(want, sizeof(want), "m%d", i);
    assert_string_equal(text, want);
  }
  await_at_least(&ev.sent, 1);
  assert_int_equal(chime__raw_send_bytes(&r, "echo:after", 10), 0);
  assert_int_equal(chime__raw_recv(&r, &bb, 20000), 0);
  bb_text(bb, text, sizeof(text));
  grpc_byte_buffer_destroy(bb);
  assert_string_equal(text, "after");
  assert_int_equal(chime__raw_send_bytes(&r, "fail", 4), 0);
  grpc_status_code st;
  char details[64];
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  assert_int_equal(st, chime__status_from_err(CHIME_ERESOURCE));
  assert_int_equal(chime__status_to_err(st, &r.md_trail), CHIME_ERESOURCE);
  assert_string_equal(details, "full");
  chime__raw_destroy(&r);
}

/* The client half-closes: the handler's receive ends (NULL), it finishes,
 * the client reads its status. */
static void test_half_close(void **state) {
  (void)state;
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, fx->ch,
                                    chime__method_path[CHIME__M_SUBSCRIBE],
                                    20000),
                   0);
  grpc_status_code st;
  char details[64];
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_string_equal(details, "bye");
  assert_int_equal(get(&ev.ends), 1);
  chime__raw_destroy(&r);
}

/* The client goes away mid-call: the receive asked for ends (NULL),
 * on_close comes, a send then is refused, and the call is freed. */
static void test_client_cancels(void **state) {
  (void)state;
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, fx->ch,
                                    chime__method_path[CHIME__M_SUBSCRIBE],
                                    20000),
                   0);
  assert_int_equal(chime__raw_send_bytes(&r, "hold", 4), 0);
  await_at_least(&ev.messages[CHIME__M_SUBSCRIBE], 1);
  assert_int_equal(live_calls(NULL), 1);
  set(&ev.close_rc, 1);
  chime__raw_destroy(&r); /* cancels */
  await_at_least(&ev.closes, 1);
  await_at_least(&ev.ends, 1);
  assert_int_equal(get(&ev.close_rc), CHIME_ECLOSED);
  await_at_least(&ev.frees, 1);
  await_no_calls();
}

/* Live calls are counted while open, Insert's apart, and an Insert
 * call's operations complete on the insert queue's thread. */
static void test_live_calls_and_insert_queue(void **state) {
  (void)state;
  chime__raw_t a, b;
  uint32_t inserts;
  assert_int_equal(
      chime__raw_start(&a, fx->ch, chime__method_path[CHIME__M_INSERT], 20000),
      0);
  assert_int_equal(chime__raw_send_bytes(&a, "hold", 4), 0);
  await_at_least(&ev.messages[CHIME__M_INSERT], 1);
  assert_int_equal(chime__raw_start(&b, fx->ch,
                                    chime__method_path[CHIME__M_SUBSCRIBE],
                                    20000),
                   0);
  assert_int_equal(chime__raw_send_bytes(&b, "hold", 4), 0);
  await_at_least(&ev.messages[CHIME__M_SUBSCRIBE], 1);
  assert_int_equal(live_calls(&inserts), 2);
  assert_int_equal(inserts, 1);
  grpc_status_code st;
  assert_int_equal(chime__raw_finish(&a, &st, NULL, 0, 20000), 0);
  assert_int_equal(st, GRPC_STATUS_OK);
  chime__raw_destroy(&a);
  assert_int_equal(get(&ev.insert_elsewhere), 0);
  assert_true(get(&ev.insert_on_insert_cq) >= 2); /* "hold", then the end */
  assert_int_equal(chime__raw_finish(&b, &st, NULL, 0, 20000), 0);
  chime__raw_destroy(&b);
  await_no_calls();
  live_calls(&inserts);
  assert_int_equal(inserts, 0);
}

/* A method chime does not know: UNIMPLEMENTED, CHIME_ENOTSUP. */
static void test_unknown_method(void **state) {
  (void)state;
  result_t res;
  unary("/chime.v1.Chime/Nope", "x", 1, &res);
  assert_int_equal(res.status, GRPC_STATUS_UNIMPLEMENTED);
  assert_int_equal(res.err, CHIME_ENOTSUP);
  assert_non_null(strstr(res.details, "unknown method"));
}

/* Stopping: a new call is told "shutting down" (UNAVAILABLE,
 * CHIME_ESHUTDOWN) before admission or its handler, and its method is not
 * asked for again: once the calls already asked for are used up, a call
 * waits unanswered until its deadline. */
static void test_stopping(void **state) {
  (void)state;
  result_t res;
  atomic_store(&fx->stopping, 1);
  for (int k = 0; k < 2; k++) {
    unary_str(CHIME__M_STATS, "echo:x", &res);
    assert_int_equal(res.status, GRPC_STATUS_UNAVAILABLE);
    assert_int_equal(res.err, CHIME_ESHUTDOWN);
    assert_string_equal(res.details, "shutting down");
  }
  assert_int_equal(get(&ev.starts[CHIME__M_STATS]), 0);
  assert_int_equal(get(&ev.admits[CHIME__M_STATS]), 0);
  chime__raw_t r;
  assert_int_equal(
      chime__raw_start(&r, fx->ch, chime__method_path[CHIME__M_STATS], 1000),
      0);
  (void)chime__raw_send_bytes(&r, "echo:x", 6);
  grpc_status_code st;
  assert_int_equal(chime__raw_finish(&r, &st, NULL, 0, 20000), 0);
  assert_int_equal(st, GRPC_STATUS_DEADLINE_EXCEEDED);
  chime__raw_destroy(&r);
}

/* An open method skips admission, and while stopping it is still
 * answered by its handler and asked for again (a probe sees the stop
 * rather than a hang). */
static void test_open_method(void **state) {
  (void)state;
  result_t res;
  unary_str(CHIME__M_HEALTH, "echo:up", &res);
  assert_int_equal(res.status, GRPC_STATUS_OK);
  assert_string_equal(res.answer, "up");
  assert_int_equal(get(&ev.admits[CHIME__M_HEALTH]), 0);
  atomic_store(&fx->stopping, 1);
  for (int k = 0; k < 5; k++) { /* more than the two asked for at start */
    unary_str(CHIME__M_HEALTH, "echo:stopping", &res);
    assert_int_equal(res.status, GRPC_STATUS_OK);
    assert_string_equal(res.answer, "stopping");
  }
  assert_int_equal(get(&ev.starts[CHIME__M_HEALTH]), 6);
  assert_int_equal(get(&ev.admits[CHIME__M_HEALTH]), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unary_answer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unary_failure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_send_after_finish, setup, teardown),
      cmocka_unit_test_setup_teardown(test_admission_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_half_close, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_cancels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_live_calls_and_insert_queue, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_unknown_method, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stopping, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_method, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
