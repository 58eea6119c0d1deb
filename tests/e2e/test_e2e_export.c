/* Export against the real chimed (docs/datasets.md): a table's snapshot
 * comes back whole and in order through chime_client_export (spec and
 * total first, then every item with its key and priority; compressed
 * leaves decompressed), an empty table is a head and nothing else, a
 * caller's fn that stops the export ends it with its code, and bad
 * requests are refused clearly (malformed, oversized, unknown table, a
 * sequence table) with nothing streamed. Insert's warm_start passes a rate
 * limiter that stalls an ordinary insert. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"

static chime__chimed_t chimed;
static grpc_channel *ch;
static chime_client_t *client;

static int setup(void **state) {
  (void)state;
  return chime__raw_client_fixture_start(
      &chimed, &ch, &client,
      "{\"tables\": [{\"name\": \"p\", "
      "\"spec\": \"x:u64[], y:f32[2], pad:u8[112]\", "
      "\"capacity\": 100000, \"sampler\": \"uniform\"},\n"
      " {\"name\": \"z\", \"spec\": \"x:u64[], obs:u8[512]\", "
      "\"capacity\": 1000, \"sampler\": \"uniform\", "
      "\"compress\": {\"obs\": 3}},\n"
      " {\"name\": \"e\", \"spec\": \"x:u64[]\", \"capacity\": 10},\n"
      " {\"name\": \"lim\", \"spec\": \"x:u64[]\", \"capacity\": 1000, "
      "\"sampler\": \"uniform\", \"samples_per_insert\": 1.0, "
      "\"min_size\": 2, \"error_buffer\": 2},\n"
      " {\"name\": \"s\", \"spec\": \"t:u32[]\", \"capacity_steps\": 64, "
      "\"sequence_length\": 4, \"sampler\": \"fifo\"}]}\n");
}

static int teardown(void **state) {
  (void)state;
  return chime__raw_client_fixture_stop(&chimed, ch, client);
}

/* What an export saw, and when fn stops it. */
typedef struct {
  uint32_t heads, chunks;
  uint64_t total, items, sample_bytes;
  uint8_t *data; /* every item's bytes, in order */
  uint64_t *keys;
  double *prio;
  uint32_t stop_after; /* data chunks; 0: never */
} seen_t;

static int collect(void *ctx, const chime_export_chunk_t *c) {
  seen_t *s = ctx;
  if (c->count == 0) {
    s->heads++;
    s->total = c->total;
    s->sample_bytes = chime_spec_sample_bytes(c->spec);
    s->data = malloc((size_t)(c->total * s->sample_bytes) + 1);
    s->keys = malloc((size_t)c->total * 8 + 8);
    s->prio = malloc((size_t)c->total * 8 + 8);
    return s->data && s->keys && s->prio ? 0 : CHIME_ENOMEM;
  }
  if (s->items + c->count > s->total)
    return CHIME_EPROTO;
  memcpy(s->data + s->items * s->sample_bytes, c->data,
         (size_t)(c->count * s->sample_bytes));
  memcpy(s->keys + s->items, c->keys, (size_t)c->count * 8);
  memcpy(s->prio + s->items, c->priorities, (size_t)c->count * 8);
  s->items += c->count;
  s->chunks++;
  return s->stop_after && s->chunks == s->stop_after ? CHIME_ECLOSED : 0;
}

static void seen_free(seen_t *s) {
  free(s->data);
  free(s->keys);
  free(s->prio);
}

static void test_export_is_the_table(void **state) {
  (void)state;
  enum { N = 20000, SB = 128 }; /* 3 chunks of about 1 MiB */
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "p", NULL), 0);
  for (uint64_t i = 0; i < N; i++) {
    uint8_t sample[SB];
    float y[2] = {(float)i, -(float)i};
    memcpy(sample, &i, 8);
    memcpy(sample + 8, y, 8);
    memset(sample + 16, (int)(i & 0xff), SB - 16);
    assert_int_equal(chime_writer_append(w, sample, SB, 1.0 + (double)i), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
  seen_t s = {0};
  assert_int_equal(chime_client_export(client, "p", collect, &s), 0);
  assert_int_equal(s.heads, 1);
  assert_int_equal(s.total, N);
  assert_int_equal(s.items, N);
  assert_true(s.chunks >= 3);
  for (uint64_t i = 0; i < N; i++) {
    uint64_t x;
    float y[2];
    const uint8_t *p = s.data + i * SB;
    memcpy(&x, p, 8);
    memcpy(y, p + 8, 8);
    assert_int_equal(x, i);
    assert_int_equal(p[SB - 1], (uint8_t)(i & 0xff));
    assert_true(y[0] == (float)i && y[1] == -(float)i);
    assert_true(s.prio[i] == 1.0 + (double)i);
    assert_int_equal(s.keys[i], i + 1); /* keys from 1, oldest first */
  }
  seen_free(&s);
}

static void test_export_compressed_leaves_raw(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  uint8_t sample[8 + 512];
  assert_int_equal(chime_writer_open(&w, client, "z", NULL), 0);
  for (uint64_t i = 0; i < 50; i++) {
    memcpy(sample, &i, 8);
    for (int k = 0; k < 512; k++)
      sample[8 + k] = (uint8_t)((k / 64) * (int)i);
    assert_int_equal(chime_writer_append(w, sample, sizeof sample, 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
  seen_t s = {0};
  assert_int_equal(chime_client_export(client, "z", collect, &s), 0);
  assert_int_equal(s.items, 50);
  for (uint64_t i = 0; i < 50; i++) {
    const uint8_t *p = s.data + i * sizeof sample;
    uint64_t x;
    memcpy(&x, p, 8);
    assert_int_equal(x, i);
    for (int k = 0; k < 512; k++)
      assert_int_equal(p[8 + k], (uint8_t)((k / 64) * (int)i));
  }
  seen_free(&s);
}

static void test_export_empty_and_stopped(void **state) {
  (void)state;
  seen_t s = {0};
  assert_int_equal(chime_client_export(client, "e", collect, &s), 0);
  assert_int_equal(s.heads, 1);
  assert_int_equal(s.total, 0);
  assert_int_equal(s.chunks, 0);
  seen_free(&s);
  /* fn's code ends it, after its first chunk of several. */
  seen_t t = {.stop_after = 1};
  assert_int_equal(chime_client_export(client, "p", collect, &t),
                   CHIME_ECLOSED);
  assert_int_equal(t.chunks, 1);
  assert_true(t.items < t.total);
  seen_free(&t);
  /* The server let the call's rows go: the table still answers. */
  seen_t u = {0};
  assert_int_equal(chime_client_export(client, "p", collect, &u), 0);
  assert_int_equal(u.items, u.total);
  seen_free(&u);
}

/* A raw Export call with req (or bytes): its status and details, and
 * whether any chunk came first. */
static grpc_status_code raw_export(const void *bytes, size_t len,
                                   const char *table, char *details,
                                   size_t dlen, int *chunks) {
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_OK;
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Export", 20000),
                   0);
  if (bytes != NULL) {
    assert_int_equal(chime__raw_send_bytes(&r, bytes, len), 0);
  } else {
    Chime__V1__ExportRequest req = CHIME__V1__EXPORT_REQUEST__INIT;
    req.table = (char *)table;
    assert_int_equal(chime__raw_send(&r, &req.base), 0);
  }
  assert_int_equal(chime__raw_close_send(&r), 0);
  *chunks = 0;
  for (;;) {
    grpc_byte_buffer *bb = NULL;
    if (chime__raw_recv(&r, &bb, 20000) != 0 || bb == NULL)
      break;
    grpc_byte_buffer_destroy(bb);
    ++*chunks;
  }
  assert_int_equal(chime__raw_status(&r, &st, details, dlen, 20000), 0);
  chime__raw_destroy(&r);
  return st;
}

static void test_export_refusals(void **state) {
  (void)state;
  char d[512];
  int chunks;
  static const uint8_t junk[] = {0x0a, 0x40, 'x'}; /* a string cut short */
  assert_int_equal(raw_export(junk, sizeof junk, NULL, d, sizeof d, &chunks),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(d, "malformed ExportRequest"));
  assert_int_equal(chunks, 0);
  static uint8_t big[8192];
  memset(big, 0, sizeof big);
  assert_int_equal(raw_export(big, sizeof big, NULL, d, sizeof d, &chunks),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(d, "at most"));
  assert_int_equal(raw_export(NULL, 0, "nope", d, sizeof d, &chunks),
                   GRPC_STATUS_NOT_FOUND);
  assert_non_null(strstr(d, "'nope' not found"));
  assert_int_equal(raw_export(NULL, 0, "s", d, sizeof d, &chunks),
                   GRPC_STATUS_UNIMPLEMENTED);
  assert_non_null(strstr(d, "sequence table"));
  assert_int_equal(chunks, 0);
  seen_t s = {0};
  assert_int_equal(chime_client_export(client, "s", collect, &s),
                   CHIME_ENOTSUP);
  assert_non_null(strstr(chime_last_error(), "sequence table"));
  assert_int_equal(chime_client_export(client, NULL, collect, &s),
                   CHIME_EINVAL);
  seen_free(&s);
}

/* samples_per_insert 1, min_size 2, error_buffer 2, nobody sampling: an
 * ordinary writer's inserts stop after a few (its flush times out); a
 * warm-start writer's 500 all go in. */
static void test_warm_start_passes_the_limiter(void **state) {
  (void)state;
  chime_writer_opts_t o = CHIME_WRITER_OPTS_INIT;
  o.warm_start = 1;
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "lim", &o), 0);
  for (uint64_t i = 0; i < 500; i++)
    assert_int_equal(chime_writer_append(w, &i, 8, 1.0), 0);
  assert_int_equal(chime_writer_close(w), 0);
  seen_t s = {0};
  assert_int_equal(chime_client_export(client, "lim", collect, &s), 0);
  assert_int_equal(s.total, 500);
  seen_free(&s);
  o.warm_start = 0;
  o.timeout_ms = 500;
  assert_int_equal(chime_writer_open(&w, client, "lim", &o), 0);
  uint64_t x = 7;
  assert_int_equal(chime_writer_append(w, &x, 8, 1.0), 0);
  assert_int_equal(chime_writer_flush(w), CHIME_ETIMEDOUT);
  /* Its error again, at once: the insert never went in. */
  assert_int_equal(chime_writer_close(w), CHIME_ETIMEDOUT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_export_is_the_table),
      cmocka_unit_test(test_export_compressed_leaves_raw),
      cmocka_unit_test(test_export_empty_and_stopped),
      cmocka_unit_test(test_export_refusals),
      cmocka_unit_test(test_warm_start_passes_the_limiter),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
