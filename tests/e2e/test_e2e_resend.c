/* Exactly-once Insert against the real chimed: requests resent on a new call
 * by their writer (writer_id, id) are acked with their original keys and not
 * inserted again; one older than the server's window is refused; writer_id 0
 * is not deduplicated. Then the C writer through a loopback proxy that cuts
 * its connection while requests and acks are in flight: every sample lands
 * exactly once; and a writer whose server never comes back gives up after
 * its reconnect timeout. Then which writers the server remembers (issue
 * 20): 20,000 writer ids on one call and thousands more on later calls
 * forget neither a writer idle on its open call nor one whose call just
 * ended; writers per episode go on past the memory's size beside a
 * long-lived one; a writer that was forgotten gets CHIME_EFORGOTTEN
 * (ABORTED on the wire), which the C writer reports as such. Across a
 * crash and --restore: requests acked before the checkpoint and resent
 * are acked with their keys, not inserted again (its writers' windows are
 * in it). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"

#define WINDOW 32 /* CHIME__INSERT_WINDOW */

static chime__chimed_t chimed;
static grpc_channel *ch;

static int setup(void **state) {
  (void)state;
  if (chime__raw_fixture_start(
          &chimed, &ch,
          "{\"tables\": [{\"name\": \"r\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 100000, \"sampler\": \"uniform\"}, "
          "{\"name\": \"f\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 100000, \"sampler\": \"fifo\"}, "
          /* the writer memory's defaults: 4096 writers, 60 s */
          "{\"name\": \"d\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 100000, \"sampler\": \"uniform\"}, "
          "{\"name\": \"e\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 100000, \"sampler\": \"uniform\"}, "
          /* one writer, forgotten as soon as no call carries it */
          "{\"name\": \"tiny\", \"spec\": \"x:u64[]\", "
          "\"capacity\": 1000, \"sampler\": \"uniform\", "
          "\"max_writers\": 1, \"writer_idle_ms\": 0}]}\n") != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  (void)chime__raw_fixture_stop(&chimed, ch);
  return 0;
}

static uint64_t table_size(const char *addr, const char *name) {
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  uint64_t size = UINT64_MAX;
  assert_int_equal(chime_client_create(&c, addr, NULL), 0);
  assert_int_equal(chime_client_info(c, &info), 0);
  for (uint32_t i = 0; i < info->ntables; i++)
    if (strcmp(info->tables[i].name, name) == 0)
      size = info->tables[i].size;
  chime_server_info_free(info);
  chime_client_destroy(c);
  return size;
}

/* Sends request seq of writer to table `table`: count samples valued
 * val.. */
static void send_to(chime__raw_t *r, const char *table, uint64_t writer,
                    uint64_t seq, uint32_t count, uint64_t val) {
  uint64_t data[64];
  assert_true(count <= 64);
  for (uint32_t i = 0; i < count; i++)
    data[i] = val + i;
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = (char *)table;
  req.count = count;
  req.data.data = (uint8_t *)data;
  req.data.len = count * sizeof(uint64_t);
  req.id = seq;
  req.writer_id = writer;
  assert_int_equal(chime__raw_send(r, &req.base), 0);
}

static void send_req(chime__raw_t *r, uint64_t writer, uint64_t seq,
                     uint32_t count, uint64_t val) {
  send_to(r, "r", writer, seq, count, val);
}

/* Receives the next ack and checks it answers seq with count samples;
 * returns its first key. */
static uint64_t recv_ack(chime__raw_t *r, uint64_t seq, uint32_t count) {
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(r, &chime__v1__insert_ack__descriptor, &m, 30000), 0);
  assert_non_null(m);
  Chime__V1__InsertAck *ack = (Chime__V1__InsertAck *)m;
  assert_int_equal(ack->id, seq);
  assert_int_equal(ack->count, count);
  uint64_t k = ack->first_key;
  protobuf_c_message_free_unpacked(m, NULL);
  return k;
}

static void finish_ok(chime__raw_t *r) {
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[512];
  assert_int_equal(chime__raw_finish(r, &st, details, sizeof details, 30000),
                   0);
  if (st != GRPC_STATUS_OK)
    fail_msg("status %d '%s'", (int)st, details);
  chime__raw_destroy(r);
}

static void test_raw_resend_acked_once(void **state) {
  (void)state;
  const uint64_t w = 0x5eed5eed12345678u;
  uint64_t k[5];
  chime__raw_t r;
  assert_int_equal(table_size(chimed.addr, "r"), 0);

  /* Call A: requests 1..3, two samples each. */
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  for (uint64_t seq = 1; seq <= 3; seq++) {
    send_req(&r, w, seq, 2, seq * 100);
    k[seq] = recv_ack(&r, seq, 2);
  }
  finish_ok(&r);
  assert_int_equal(k[1], 1);
  assert_int_equal(k[2], 3);
  assert_int_equal(k[3], 5);
  assert_int_equal(table_size(chimed.addr, "r"), 6);

  /* Call B: 2 and 3 again (their acks were "lost"), then 4. */
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, w, 2, 2, 200);
  assert_int_equal(recv_ack(&r, 2, 2), k[2]);
  send_req(&r, w, 3, 2, 300);
  assert_int_equal(recv_ack(&r, 3, 2), k[3]);
  send_req(&r, w, 4, 2, 400);
  k[4] = recv_ack(&r, 4, 2);
  finish_ok(&r);
  assert_int_equal(k[4], 7);
  assert_int_equal(table_size(chimed.addr, "r"), 8);

  /* Requests 5 .. WINDOW + 5 push 5 out of the window: resent, it is
   * refused by name, and nothing goes in. */
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  for (uint64_t seq = 5; seq <= WINDOW + 5; seq++) {
    send_req(&r, w, seq, 1, seq * 100);
    recv_ack(&r, seq, 1);
  }
  uint64_t size = table_size(chimed.addr, "r");
  assert_int_equal(size, 8 + WINDOW + 1);
  send_req(&r, w, 5, 1, 500);
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[512];
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof details, 30000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_FAILED_PRECONDITION);
  if (!strstr(details, "request 5 ") || !strstr(details, "window of the last"))
    fail_msg("details '%s'", details);
  assert_int_equal(table_size(chimed.addr, "r"), size);

  /* Still in the window, 6 is acked again on a new call. */
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, w, 6, 1, 600);
  recv_ack(&r, 6, 1);
  finish_ok(&r);
  assert_int_equal(table_size(chimed.addr, "r"), size);

  /* writer_id 0: no dedupe, as before: the same id goes in twice. */
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, 0, 9, 1, 900);
  uint64_t a = recv_ack(&r, 9, 1);
  send_req(&r, 0, 9, 1, 900);
  uint64_t b = recv_ack(&r, 9, 1);
  finish_ok(&r);
  assert_int_equal(b, a + 1);
  assert_int_equal(table_size(chimed.addr, "r"), size + 2);
}

/* Ends the call r and checks it ended with INVALID_ARGUMENT, details
 * holding `want`. */
static void finish_invalid(chime__raw_t *r, const char *want) {
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  char details[512];
  assert_int_equal(chime__raw_finish(r, &st, details, sizeof details, 30000),
                   0);
  chime__raw_destroy(r);
  if (st != GRPC_STATUS_INVALID_ARGUMENT || strstr(details, want) == NULL)
    fail_msg("status %d '%s', want INVALID_ARGUMENT '%s'", (int)st, details,
             want);
}

/* Ids a writer must not send: id 0 with a writer_id (remembered, it would
 * make every later request look like its resend: acked and dropped) and a
 * resend with another count. Both are refused and insert nothing. */
static void test_raw_bad_ids_refused(void **state) {
  (void)state;
  const uint64_t w = 0x0bad1d5000000001u;
  chime__raw_t r;
  uint64_t size = table_size(chimed.addr, "r");
  for (int i = 0; i < 2; i++) { /* refused each time, not remembered */
    assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                     0);
    send_req(&r, w, 0, 1, 100 + (uint64_t)i);
    finish_invalid(&r, "request id 0 of writer 0bad1d5000000001");
  }
  assert_int_equal(table_size(chimed.addr, "r"), size);

  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, w, 1, 2, 100);
  recv_ack(&r, 1, 2);
  send_req(&r, w, 1, 3, 100); /* "resent" with another count */
  finish_invalid(&r, "inserted with 2 samples, resent with 3");
  assert_int_equal(table_size(chimed.addr, "r"), size + 2);
}

/* --- a loopback TCP proxy the test can cut ---------------------------- */

#define MAX_PAIRS 16

typedef struct {
  int lfd, ctl[2];
  int port, target_port;
  int pair[MAX_PAIRS][2]; /* client side, server side; -1 when free */
  atomic_int accepted, cuts;
  pthread_t th;
} proxy_t;

static void pair_close(proxy_t *p, int i) {
  for (int j = 0; j < 2; j++) {
    if (p->pair[i][j] >= 0) {
      shutdown(p->pair[i][j], SHUT_RDWR);
      close(p->pair[i][j]);
    }
    p->pair[i][j] = -1;
  }
}

static int connect_port(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Copies what one side sent to the other; 0 when that side is gone. */
static int forward(int from, int to) {
  char buf[65536];
  ssize_t n = recv(from, buf, sizeof(buf), 0);
  if (n <= 0)
    return 0;
  for (ssize_t off = 0; off < n;) {
    ssize_t m = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
    if (m <= 0)
      return 0;
    off += m;
  }
  return 1;
}

static void *proxy_main(void *arg) {
  proxy_t *p = arg;
  for (;;) {
    struct pollfd fds[2 + 2 * MAX_PAIRS];
    int idx[2 + 2 * MAX_PAIRS];
    int n = 0;
    fds[n].fd = p->ctl[0];
    fds[n++].events = POLLIN;
    fds[n].fd = p->lfd;
    fds[n++].events = POLLIN;
    for (int i = 0; i < MAX_PAIRS; i++)
      for (int j = 0; j < 2; j++)
        if (p->pair[i][j] >= 0) {
          idx[n] = i * 2 + j;
          fds[n].fd = p->pair[i][j];
          fds[n++].events = POLLIN;
        }
    if (poll(fds, (nfds_t)n, 1000) < 0 && errno != EINTR)
      break;
    if (fds[0].revents) {
      char c = 0;
      if (read(p->ctl[0], &c, 1) != 1 || c == 'q') {
        for (int i = 0; i < MAX_PAIRS; i++)
          pair_close(p, i);
        break;
      }
      /* 'c': cut every connection, whatever is in flight either way. */
      for (int i = 0; i < MAX_PAIRS; i++)
        pair_close(p, i);
      atomic_fetch_add(&p->cuts, 1);
      continue;
    }
    if (fds[1].revents) {
      int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
      int sfd = cfd >= 0 ? connect_port(p->target_port) : -1;
      int slot = -1;
      for (int i = 0; i < MAX_PAIRS && slot < 0; i++)
        if (p->pair[i][0] < 0)
          slot = i;
      if (cfd >= 0 && (sfd < 0 || slot < 0)) {
        close(cfd);
        if (sfd >= 0)
          close(sfd);
      } else if (cfd >= 0) {
        p->pair[slot][0] = cfd;
        p->pair[slot][1] = sfd;
        atomic_fetch_add(&p->accepted, 1);
      }
    }
    for (int k = 2; k < n; k++) {
      int i = idx[k] / 2, j = idx[k] % 2;
      if (!fds[k].revents || p->pair[i][j] < 0)
        continue;
      if (!forward(p->pair[i][j], p->pair[i][1 - j]))
        pair_close(p, i);
    }
  }
  return NULL;
}

static void proxy_start(proxy_t *p, int target_port) {
  memset(p, 0, sizeof(*p));
  memset(p->pair, -1, sizeof(p->pair));
  p->target_port = target_port;
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(p->lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  assert_int_equal(listen(p->lfd, 16), 0);
  assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
  p->port = ntohs(a.sin_port);
  assert_int_equal(pipe2(p->ctl, O_CLOEXEC), 0);
  assert_int_equal(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

static void proxy_cmd(proxy_t *p, char c) {
  assert_int_equal(write(p->ctl[1], &c, 1), 1);
}

/* Cuts every connection and waits until it is done. */
static void proxy_cut(proxy_t *p) {
  int before = atomic_load(&p->cuts);
  proxy_cmd(p, 'c');
  int64_t end = chime__now_ms() + 5000;
  while (atomic_load(&p->cuts) == before && chime__now_ms() < end)
    chime__sleep_ms(1);
  assert_int_equal(atomic_load(&p->cuts), before + 1);
}

static void proxy_stop(proxy_t *p) {
  proxy_cmd(p, 'q');
  pthread_join(p->th, NULL);
  close(p->lfd);
  close(p->ctl[0]);
  close(p->ctl[1]);
}

/* The proxy's port held after it stops: its listening socket kept (a dup
 * taken before the stop) and shut down, so that it listens no more (a
 * connect is refused) but stays bound, and no other process (another
 * test's chimed, under ctest -j) can listen there and answer the writer's
 * reconnects with tables of its own. */
static int hold_port(int lfd) {
  int fd = dup(lfd);
  if (fd < 0)
    fail_msg("cannot hold the proxy's port: %s", strerror(errno));
  return fd;
}

#define N 4000
#define CUTS 4

static void test_writer_resends_after_cut(void **state) {
  (void)state;
  const char *colon = strrchr(chimed.addr, ':');
  assert_non_null(colon);
  proxy_t p;
  proxy_start(&p, atoi(colon + 1));
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", p.port);

  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_client_create(&c, addr, NULL), 0);
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 8;
  o.max_inflight = 16;
  o.timeout_ms = 30000;
  o.reconnect_timeout_ms = 20000;
  assert_int_equal(chime_writer_open(&w, c, "f", &o), 0);
  int cuts = 0;
  for (uint64_t i = 0; i < N; i++) {
    int rc = chime_writer_append(w, &i, sizeof(i), 1.0);
    if (rc != 0)
      fail_msg("append %llu: %s: %s", (unsigned long long)i, chime_err_name(rc),
               chime_last_error());
    /* Right after a request went out: requests and acks are in flight. */
    if (i % (N / CUTS) == N / CUTS / 2) {
      proxy_cut(&p);
      cuts++;
    }
  }
  int rc = chime_writer_flush(w);
  if (rc != 0)
    fail_msg("flush: %s: %s", chime_err_name(rc), chime_last_error());
  assert_int_equal(chime_writer_acked(w), N);
  assert_int_equal(chime_writer_close(w), 0);
  chime_client_destroy(c);
  /* One connection per cut and one more: the writer came back each time. */
  assert_true(atomic_load(&p.accepted) >= cuts + 1);
  proxy_stop(&p);

  /* Every sample exactly once: the table's size, then each value read. */
  assert_int_equal(table_size(chimed.addr, "f"), N);
  uint8_t *seen = calloc(N, 1);
  assert_non_null(seen);
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_batch_t b;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  so.batch_size = 100;
  so.slots = 4;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&s, c, "f", &so), 0);
  uint64_t last_key = 0;
  for (int n = 0; n < N / 100; n++) {
    assert_int_equal(chime_stream_next(s, &b, 30000), 0);
    const uint64_t *v = b.leaf[0].data;
    for (uint32_t j = 0; j < b.count; j++) {
      assert_true(v[j] < N);
      if (seen[v[j]]++)
        fail_msg("sample %llu twice", (unsigned long long)v[j]);
      /* fifo, and no key skipped or repeated */
      assert_int_equal(b.info[j].key, last_key + 1);
      last_key = b.info[j].key;
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  for (uint64_t i = 0; i < N; i++)
    if (!seen[i])
      fail_msg("sample %llu lost", (unsigned long long)i);
  chime_stream_close(s);
  chime_client_destroy(c);
  free(seen);
}

/* The server never comes back: the writer gives up after
 * reconnect_timeout_ms with CHIME_EDISCONNECTED, not after timeout_ms. */
static void test_writer_gives_up_when_server_gone(void **state) {
  (void)state;
  const char *colon = strrchr(chimed.addr, ':');
  proxy_t p;
  proxy_start(&p, atoi(colon + 1));
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", p.port);
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_client_create(&c, addr, NULL), 0);
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.max_batch_samples = 4;
  o.timeout_ms = 30000;
  o.reconnect_timeout_ms = 1500;
  assert_int_equal(chime_writer_open(&w, c, "r", &o), 0);
  for (uint64_t i = 0; i < 8; i++)
    assert_int_equal(chime_writer_append(w, &i, sizeof(i), 1.0), 0);
  assert_int_equal(chime_writer_flush(w), 0);
  int held = hold_port(p.lfd);
  proxy_stop(&p); /* connections and the listener gone */
  shutdown(held, SHUT_RDWR);
  int64_t t0 = chime__now_ms();
  int rc = 0;
  for (uint64_t i = 0; i < 8 && rc == 0; i++)
    rc = chime_writer_append(w, &i, sizeof(i), 1.0);
  if (rc == 0)
    rc = chime_writer_flush(w);
  int64_t took = chime__now_ms() - t0;
  assert_int_equal(rc, CHIME_EDISCONNECTED);
  if (!strstr(chime_last_error(), "not back within 1500 ms"))
    fail_msg("last error '%s'", chime_last_error());
  assert_true(took >= 1400 && took < 10000);
  assert_int_equal(chime_writer_acked(w), 8);
  assert_int_equal(chime_writer_close(w), CHIME_EDISCONNECTED);
  chime_client_destroy(c);
  close(held);
}

/* --- which writers the server remembers (issue 20) --------------------- */

#define CALL_WRITERS 16 /* CHIME__INSERT_CALL_WRITERS */

/* The chime-error a finished raw call carried, 0 when none. */
static int chime_error(const chime__raw_t *r) {
  for (size_t i = 0; i < r->md_trail.count; i++) {
    const grpc_metadata *m = &r->md_trail.metadata[i];
    if (grpc_slice_str_cmp(m->key, "chime-error") == 0) {
      char v[16] = "";
      size_t n = GRPC_SLICE_LENGTH(m->value);
      memcpy(v, GRPC_SLICE_START_PTR(m->value), n < 15 ? n : 15);
      return atoi(v);
    }
  }
  return 0;
}

/* Sends request seq of writer to `table` (one sample valued val) and reads
 * the answer: 0 and *key for an ack, or the call's end as *status, its
 * details and chime-error (the call destroyed). */
static int try_req(chime__raw_t *r, const char *table, uint64_t writer,
                   uint64_t seq, uint64_t val, uint64_t *key,
                   grpc_status_code *status, char *details, size_t len,
                   int *code) {
  send_to(r, table, writer, seq, 1, val);
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(r, &chime__v1__insert_ack__descriptor, &m, 30000), 0);
  if (m != NULL) {
    Chime__V1__InsertAck *ack = (Chime__V1__InsertAck *)m;
    assert_int_equal(ack->id, seq);
    *key = ack->first_key;
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
  }
  assert_int_equal(chime__raw_finish(r, status, details, len, 30000), 0);
  *code = chime_error(r);
  chime__raw_destroy(r);
  return -1;
}

/* The attack: one Insert call of 20,000 one-sample requests with
 * distinct writer ids (any actor token may), then calls of new ids until
 * the memory is full. An earlier writer idle on its open call, and one
 * whose call ended after its ack (it would reconnect and resend), are not
 * forgotten: their next requests and resends are acked as before. The
 * attacker's first call ends after CALL_WRITERS ids (RESOURCE_EXHAUSTED,
 * that call only); later new ids are refused once every place is held by
 * a writer with an open call or one idle for less than writer_idle_ms.
 * Before: the earlier writers were "no longer remembered"
 * (FAILED_PRECONDITION, read as CHIME_EINVAL). */
static void test_writer_ids_flood_forgets_nobody(void **state) {
  (void)state;
  const uint64_t a = 0xa11ce00000000001u, b = 0xb0b0000000000001u;
  uint64_t ka, kb, k;
  grpc_status_code st;
  char details[1024];
  int code = 0;
  chime__raw_t ra, rb, rx;
  assert_int_equal(chime__raw_start(&ra, ch, "/chime.v1.Chime/Insert", 120000),
                   0);
  assert_int_equal(
      try_req(&ra, "d", a, 1, 1, &ka, &st, details, sizeof details, &code), 0);
  assert_int_equal(chime__raw_start(&rb, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(
      try_req(&rb, "d", b, 1, 2, &kb, &st, details, sizeof details, &code), 0);
  chime__raw_destroy(&rb); /* b's call is cancelled: it would resend */

  /* One call, 20,000 writer ids. */
  uint64_t in = 2, sent = 0;
  assert_int_equal(chime__raw_start(&rx, ch, "/chime.v1.Chime/Insert", 120000),
                   0);
  for (uint64_t i = 0; i < 20000; i++, sent++)
    if (try_req(&rx, "d", 0xa77ac00000000000u + i, 1, 100 + i, &k, &st, details,
                sizeof details, &code) != 0)
      break;
  if (sent == 20000)
    chime__raw_destroy(&rx);
  assert_int_equal(sent, CALL_WRITERS);
  assert_int_equal(st, GRPC_STATUS_RESOURCE_EXHAUSTED);
  assert_int_equal(code, CHIME_ERESOURCE);
  if (!strstr(details, "at most 16 writer ids"))
    fail_msg("details '%s'", details);
  in += sent;

  /* Calls of CALL_WRITERS new ids each (ended by cancel: idle, not closed)
   * until the table refuses a new one. */
  uint64_t next = 0xa77ac10000000000u;
  int refused = 0;
  for (int c = 0; c < 20000 / CALL_WRITERS && !refused; c++) {
    assert_int_equal(chime__raw_start(&rx, ch, "/chime.v1.Chime/Insert", 60000),
                     0);
    for (int i = 0; i < CALL_WRITERS && !refused; i++, next++) {
      if (try_req(&rx, "d", next, 1, next, &k, &st, details, sizeof details,
                  &code) != 0)
        refused = 1;
      else
        in++;
    }
    if (!refused)
      chime__raw_destroy(&rx);
  }
  if (!refused)
    fail_msg("20,000 more writer ids taken: the table forgot live writers");
  assert_int_equal(st, GRPC_STATUS_RESOURCE_EXHAUSTED);
  assert_int_equal(code, CHIME_ERESOURCE);
  if (!strstr(details, "not taken") || !strstr(details, "try again later"))
    fail_msg("details '%s'", details);
  assert_int_equal(in, 4096); /* every place held, none taken from another */

  /* The earlier writers are remembered: a's next request on its open call,
   * b's resend on a new call (acked again, not inserted) and its next. */
  assert_int_equal(
      try_req(&ra, "d", a, 2, 3, &k, &st, details, sizeof details, &code), 0);
  finish_ok(&ra);
  assert_int_equal(chime__raw_start(&rb, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(
      try_req(&rb, "d", b, 1, 2, &k, &st, details, sizeof details, &code), 0);
  assert_int_equal(k, kb);
  assert_int_equal(
      try_req(&rb, "d", b, 2, 4, &k, &st, details, sizeof details, &code), 0);
  finish_ok(&rb);
  assert_int_equal(table_size(chimed.addr, "d"), in + 2);
  (void)ka;
}

/* Actors that open a writer per episode: thousands of C writers one after
 * another, each closing, while a long-lived writer sits idle on its open
 * call. Closed writers make room; the long-lived one is never forgotten.
 * Before: after 4096 episodes its next request was refused. */
static void test_writer_per_episode(void **state) {
  (void)state;
  enum { EPISODES = 4200, STEPS = 2 };
  chime_client_t *c = NULL;
  chime_writer_t *w0 = NULL, *w = NULL;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_int_equal(chime_writer_open(&w0, c, "e", NULL), 0);
  uint64_t v = 0;
  assert_int_equal(chime_writer_append(w0, &v, sizeof(v), 1.0), 0);
  assert_int_equal(chime_writer_flush(w0), 0);
  for (int e = 0; e < EPISODES; e++) {
    assert_int_equal(chime_writer_open(&w, c, "e", NULL), 0);
    for (int i = 0; i < STEPS; i++) {
      v++;
      assert_int_equal(chime_writer_append(w, &v, sizeof(v), 1.0), 0);
    }
    int rc = chime_writer_close(w);
    if (rc != 0)
      fail_msg("episode %d: %s", e, chime_err_name(rc));
  }
  v++;
  assert_int_equal(chime_writer_append(w0, &v, sizeof(v), 1.0), 0);
  int rc = chime_writer_flush(w0);
  if (rc != 0)
    fail_msg("the long-lived writer: %s: %s", chime_err_name(rc),
             chime_last_error());
  assert_int_equal(chime_writer_acked(w0), 2);
  assert_int_equal(chime_writer_close(w0), 0);
  chime_client_destroy(c);
  assert_int_equal(table_size(chimed.addr, "e"), 2 + EPISODES * STEPS);
}

/* A writer the server did forget (table "tiny": one writer, none kept once
 * no call carries it): its call was cut, another writer took its place.
 * Its next request ends its call with ABORTED and chime-error
 * CHIME_EFORGOTTEN, which the C writer reports as that, with what is known
 * of its samples, and keeps (the writer is done). */
static void test_forgotten_writer_error(void **state) {
  (void)state;
  const char *colon = strrchr(chimed.addr, ':');
  proxy_t p;
  proxy_start(&p, atoi(colon + 1));
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", p.port);
  chime_client_t *cw = NULL, *c = NULL;
  chime_writer_t *w = NULL, *f = NULL;
  assert_int_equal(chime_client_create(&cw, addr, NULL), 0);
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_int_equal(chime_writer_open(&w, cw, "tiny", NULL), 0);
  uint64_t v = 1;
  assert_int_equal(chime_writer_append(w, &v, sizeof(v), 1.0), 0);
  assert_int_equal(chime_writer_flush(w), 0);
  proxy_cut(&p);
  /* Another writer takes the one place once the server saw w's call end
   * (until then w is bound and the newcomer refused). */
  int rc = CHIME_ERESOURCE;
  int64_t end = chime__now_ms() + 20000;
  while (rc == CHIME_ERESOURCE && chime__now_ms() < end) {
    assert_int_equal(chime_writer_open(&f, c, "tiny", NULL), 0);
    assert_int_equal(chime_writer_append(f, &v, sizeof(v), 1.0), 0);
    rc = chime_writer_flush(f);
    if (rc == CHIME_ERESOURCE && !strstr(chime_last_error(), "not taken"))
      fail_msg("refused: %s", chime_last_error());
    assert_int_equal(chime_writer_close(f), rc);
    if (rc == CHIME_ERESOURCE)
      chime__sleep_ms(10);
  }
  assert_int_equal(rc, 0);
  v = 2;
  rc = chime_writer_append(w, &v, sizeof(v), 1.0);
  if (rc == 0)
    rc = chime_writer_flush(w);
  assert_int_equal(rc, CHIME_EFORGOTTEN);
  const char *e = chime_last_error();
  if (!strstr(e, "insert into 'tiny': writer ") ||
      !strstr(e, "no longer remembered") || !strstr(e, "new writer"))
    fail_msg("last error '%s'", e);
  assert_int_equal(chime_writer_acked(w), 1);
  assert_int_equal(chime_writer_append(w, &v, sizeof(v), 1.0),
                   CHIME_EFORGOTTEN);
  assert_int_equal(chime_writer_close(w), CHIME_EFORGOTTEN);
  chime_client_destroy(cw);
  proxy_stop(&p);

  /* On the wire: ABORTED with chime-error -20. A raw writer, then another
   * in its place once its call ended. */
  chime__raw_t r;
  grpc_status_code st;
  char details[1024];
  int code = 0;
  uint64_t k;
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(
      try_req(&r, "tiny", 0x77, 1, 1, &k, &st, details, sizeof details, &code),
      0);
  finish_ok(&r); /* closed: done */
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(
      try_req(&r, "tiny", 0x78, 1, 1, &k, &st, details, sizeof details, &code),
      0);
  finish_ok(&r);
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(
      try_req(&r, "tiny", 0x77, 2, 1, &k, &st, details, sizeof details, &code),
      -1);
  assert_int_equal(st, GRPC_STATUS_ABORTED);
  assert_int_equal(code, CHIME_EFORGOTTEN);
  if (!strstr(details, "writer 0000000000000077 is no longer remembered"))
    fail_msg("details '%s'", details);
  chime_client_destroy(c);
}

/* A resend across --restore (docs/protocol.md): the checkpoint keeps the
 * writers' windows with the items. A writer acked requests 1 and 2, the
 * checkpoint was taken, then 3 was acked; chimed was killed (SIGKILL)
 * with the writer's call open and restored from the checkpoint. The
 * writer resends 1, 2 and 3 on a new call: 1 and 2 are acked with their
 * original keys and not inserted again, 3 (not in the restored table)
 * goes in, once, under a new key; its next request goes in. A writer the
 * checkpoint did not know goes in as a new one past its first request
 * (no writer had been forgotten before the checkpoint). Before: the checkpoint
 * kept no writer, the resend of request 1 went in again as a new writer's
 * first, 2 and 3 after it (7 items where 4 belong). */
static void test_resend_across_restore(void **state) {
  (void)state;
  const uint64_t w = 0x5e5e;
  char dir[512], cfgj[1024], latest[600];
  snprintf(dir, sizeof(dir), "%s/resend-ckpt", chime__harness_tmpdir());
  snprintf(cfgj, sizeof(cfgj),
           "{\"checkpoint\": {\"dir\": \"%s\"}, \"tables\": [{\"name\": "
           "\"r\", \"spec\": \"x:u64[]\", \"capacity\": 100, \"sampler\": "
           "\"fifo\"}]}\n",
           dir);
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(chime__chimed_start_client(&d, cfgj, &c), 0);
  grpc_channel *dch = chime__raw_channel(d.addr);
  chime__raw_t r;
  assert_int_equal(chime__raw_start(&r, dch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, w, 1, 1, 100);
  uint64_t k1 = recv_ack(&r, 1, 1);
  send_req(&r, w, 2, 2, 101);
  uint64_t k2 = recv_ack(&r, 2, 2);
  chime_checkpoint_result_t cr;
  assert_int_equal(chime_client_checkpoint(c, &cr), 0);
  send_req(&r, w, 3, 1, 103); /* acked after the checkpoint */
  uint64_t k3 = recv_ack(&r, 3, 1);
  chime__proc_kill(&d.proc); /* a crash, the writer's call open */
  chime__raw_destroy(&r);
  grpc_channel_destroy(dch);
  chime_client_destroy(c);

  snprintf(latest, sizeof(latest), "latest");
  const char *args[] = {"--restore", latest, NULL};
  assert_int_equal(chime__chimed_start(&d, cfgj, args, 60000), 0);
  dch = chime__raw_channel(d.addr);
  assert_int_equal(table_size(d.addr, "r"), 3);
  assert_int_equal(chime__raw_start(&r, dch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, w, 1, 1, 100);
  uint64_t got = recv_ack(&r, 1, 1);
  if (got != k1)
    fail_msg("request 1 resent after the restore: acked with key %llu, not "
             "its own %llu (inserted again: the table holds %llu items)",
             (unsigned long long)got, (unsigned long long)k1,
             (unsigned long long)table_size(d.addr, "r"));
  send_req(&r, w, 2, 2, 101);
  assert_int_equal(recv_ack(&r, 2, 2), k2);
  assert_int_equal(table_size(d.addr, "r"), 3);
  send_req(&r, w, 3, 1, 103); /* the restored table lacks it: in, once */
  uint64_t k3b = recv_ack(&r, 3, 1);
  assert_true(k3b > k3); /* keys after a restore are never reissued */
  send_req(&r, w, 3, 1, 103);
  assert_int_equal(recv_ack(&r, 3, 1), k3b);
  send_req(&r, w, 4, 1, 104);
  (void)recv_ack(&r, 4, 1);
  finish_ok(&r);
  assert_int_equal(table_size(d.addr, "r"), 5);
  /* A writer the checkpoint did not know, past its first request: new. */
  assert_int_equal(chime__raw_start(&r, dch, "/chime.v1.Chime/Insert", 60000),
                   0);
  send_req(&r, 0x5e5f, 7, 1, 200);
  (void)recv_ack(&r, 7, 1);
  finish_ok(&r);
  assert_int_equal(table_size(d.addr, "r"), 6);
  grpc_channel_destroy(dch);
  int st;
  chime__chimed_stop(&d, 20000, &st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_raw_resend_acked_once),
      cmocka_unit_test(test_raw_bad_ids_refused),
      cmocka_unit_test(test_writer_resends_after_cut),
      cmocka_unit_test(test_writer_gives_up_when_server_gone),
      cmocka_unit_test(test_writer_ids_flood_forgets_nobody),
      cmocka_unit_test(test_writer_per_episode),
      cmocka_unit_test(test_resend_across_restore),
      cmocka_unit_test(test_forgotten_writer_error),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
