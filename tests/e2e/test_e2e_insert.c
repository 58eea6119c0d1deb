/* Insert against the real chimed, read by hand from the received slices: a
 * 4 MiB request (many slices) with unknown fields and unpacked priorities
 * lands byte for byte; malformed requests are INVALID_ARGUMENT naming what
 * is wrong, and the server keeps serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"
#include "wire/pbwrite.h"

#define SAMPLE 65536
#define COUNT 64

static chime__chimed_t chimed;
static grpc_channel *ch;

static int setup(void **state) {
  (void)state;
  if (chime__raw_fixture_start(
          &chimed, &ch,
          "{\"tables\": [{\"name\": \"t\", \"spec\": \"x:u8[65536]\", "
          "\"capacity\": 128, \"sampler\": \"fifo\"}]}\n") != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  (void)chime__raw_fixture_stop(&chimed, ch);
  return 0;
}

static uint8_t pattern(size_t i) {
  return (uint8_t)(i * 7 + i / 65536);
}

/* Sends bytes as one Insert message and returns the status; *ack is the
 * answer when there was one. */
static grpc_status_code insert_bytes(const uint8_t *msg, size_t len,
                                     Chime__V1__InsertAck **ack, char *details,
                                     size_t dlen) {
  chime__raw_t r;
  ProtobufCMessage *m = NULL;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 60000),
                   0);
  assert_int_equal(chime__raw_send_bytes(&r, msg, len), 0);
  assert_int_equal(
      chime__raw_recv_msg(&r, &chime__v1__insert_ack__descriptor, &m, 30000),
      0);
  *ack = (Chime__V1__InsertAck *)m;
  assert_int_equal(chime__raw_finish(&r, &st, details, dlen, 30000), 0);
  chime__raw_destroy(&r);
  return st;
}

static void test_big_request_lands_whole(void **state) {
  (void)state;
  size_t cap = (size_t)COUNT * SAMPLE + 1024;
  uint8_t *msg = malloc(cap);
  size_t n = 0;
  char details[512];
  Chime__V1__InsertAck *ack = NULL;
  assert_non_null(msg);
  msg[n++] = (15 << 3) | 0; /* unknown varint field first */
  n += chime__pb_put_varint(msg + n, 12345);
  msg[n++] = (1 << 3) | 2;
  n += chime__pb_put_varint(msg + n, 1);
  msg[n++] = 't';
  msg[n++] = (2 << 3) | 0;
  n += chime__pb_put_varint(msg + n, COUNT);
  msg[n++] = (3 << 3) | 2;
  n += chime__pb_put_varint(msg + n, (uint64_t)COUNT * SAMPLE);
  for (size_t i = 0; i < (size_t)COUNT * SAMPLE; i++)
    msg[n++] = pattern(i);
  for (int i = 0; i < COUNT; i++) { /* priorities, unpacked */
    double p = 1.0 + i;
    msg[n++] = (4 << 3) | 1;
    memcpy(msg + n, &p, 8);
    n += 8;
  }
  msg[n++] = (5 << 3) | 0;
  n += chime__pb_put_varint(msg + n, 77);
  assert_true(n <= cap);
  assert_int_equal(insert_bytes(msg, n, &ack, details, sizeof details),
                   GRPC_STATUS_OK);
  assert_non_null(ack);
  assert_int_equal(ack->id, 77);
  assert_int_equal(ack->count, COUNT);
  assert_int_equal(ack->first_key, 1);
  protobuf_c_message_free_unpacked(&ack->base, NULL);
  free(msg);

  /* Read it back through a stream: every byte where it belongs. */
  chime_client_t *client = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_batch_t b;
  assert_int_equal(chime_client_create(&client, chimed.addr, NULL), 0);
  so.batch_size = COUNT;
  so.slots = 2;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&s, client, "t", &so), 0);
  assert_int_equal(chime_stream_next(s, &b, 30000), 0);
  assert_int_equal(b.count, COUNT);
  assert_int_equal(b.leaf[0].bytes, (uint64_t)COUNT * SAMPLE);
  const uint8_t *got = b.leaf[0].data;
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)COUNT * SAMPLE; i++)
    bad += got[i] != pattern(i);
  assert_int_equal(bad, 0);
  assert_int_equal(b.info[0].key, 1);
  assert_int_equal(b.info[COUNT - 1].key, COUNT);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(client);
}

static void test_malformed_requests(void **state) {
  (void)state;
  static const struct {
    const char *what, *says;
    uint8_t bytes[8];
    size_t len;
  } cases[] = {
      {"count as LEN", "wire type", {0x0a, 1, 't', 0x12, 0x00}, 5},
      {"data past the end",
       "malformed protobuf",
       {0x0a, 1, 't', 0x1a, 9, 1},
       6},
      {"group", "malformed protobuf", {0x0a, 1, 't', (7 << 3) | 3}, 4},
      {"odd packed priorities",
       "priorities",
       {0x0a, 1, 't', 0x22, 3, 1, 2, 3},
       8},
  };
  char details[512];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    Chime__V1__InsertAck *ack = NULL;
    grpc_status_code st = insert_bytes(cases[i].bytes, cases[i].len, &ack,
                                       details, sizeof details);
    if (st != GRPC_STATUS_INVALID_ARGUMENT ||
        strstr(details, "malformed InsertRequest") == NULL ||
        strstr(details, cases[i].says) == NULL)
      fail_msg("%s: status %d '%s'", cases[i].what, (int)st, details);
    assert_null(ack);
  }
  /* Still serving: a small valid request is acked. */
  uint8_t ok[SAMPLE + 32];
  size_t n = 0;
  Chime__V1__InsertAck *ack = NULL;
  ok[n++] = 0x0a;
  ok[n++] = 1;
  ok[n++] = 't';
  ok[n++] = 0x10;
  ok[n++] = 1;
  ok[n++] = 0x1a;
  n += chime__pb_put_varint(ok + n, SAMPLE);
  memset(ok + n, 5, SAMPLE);
  n += SAMPLE;
  assert_int_equal(insert_bytes(ok, n, &ack, details, sizeof details),
                   GRPC_STATUS_OK);
  assert_non_null(ack);
  assert_int_equal(ack->count, 1);
  protobuf_c_message_free_unpacked(&ack->base, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_big_request_lands_whole),
      cmocka_unit_test(test_malformed_requests),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
