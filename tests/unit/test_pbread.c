/* The hand-written InsertRequest reader (src/wire/pbread.c,
 * src/server/insertreq.c): random requests packed by protobuf-c and cut
 * into random pieces read back field for field; unknown fields and
 * unpacked priorities as protobuf has them; malformed bytes refused; and
 * random, truncated and mutated bytes never crash it and never disagree
 * with protobuf-c where both accept. Limits before work: a spec past
 * CHIME_MAX_LEAVES leaves is refused at the first one too many, and a
 * message of many small fields in many pieces is read in linear time.
 * The MutatePrioritiesRequest reader (src/server/mutatereq.c) the same
 * way against protobuf-c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/errors.h"
#include "wire/pbread.h"
#include "server/insertreq.h"
#include "server/mutatereq.h"
#include "wire/pbwrite.h"

#include <time.h>

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * UINT64_C(2685821657736338717);
}

static uint64_t below(uint64_t n) {
  return n ? rnd() % n : 0;
}

/* Cuts buf into random pieces, some empty (room for 2 * len + 2). */
static size_t cut(const uint8_t *buf, size_t len, chime__span_t *spans) {
  size_t n = 0, pos = 0;
  int empty_ok = 1;
  while (pos < len) {
    size_t take =
        empty_ok && below(4) == 0 ? 0 : 1 + below(below(2) ? 7 : 4096);
    if (take > len - pos)
      take = len - pos;
    spans[n].p = buf + pos;
    spans[n].len = take;
    n++;
    pos += take;
    empty_ok = take > 0;
  }
  if (below(2)) { /* a trailing empty piece */
    spans[n].p = buf + len;
    spans[n].len = 0;
    n++;
  }
  return n;
}

static int parse(const uint8_t *buf, size_t len, chime__insert_req_t *q,
                 chime__span_t **spans_out, chime__pb_reader_t *r) {
  char err[128];
  chime__span_t *spans = malloc((2 * len + 2) * sizeof(*spans));
  assert_non_null(spans);
  size_t n = cut(buf, len, spans);
  chime__pb_reader_init(r, spans, n);
  *spans_out = spans;
  return chime__insert_req_parse(q, r, err, sizeof(err));
}

/* q holds what m holds; its data is found in pieces and whole. */
static void assert_same(const Chime__V1__InsertRequest *m,
                        const chime__insert_req_t *q,
                        const chime__pb_reader_t *r) {
  assert_string_equal(q->table, m->table ? m->table : "");
  assert_int_equal(q->count, m->count);
  assert_int_equal(q->id, m->id);
  assert_int_equal(q->data_len, m->data.len);
  uint8_t *data = malloc(m->data.len + 1);
  assert_non_null(data);
  assert_int_equal(chime__pb_copy(r, q->data_offset, data, q->data_len), 0);
  assert_memory_equal(data, m->data.data, m->data.len);
  /* The pieces in order are the same bytes. */
  size_t ns = chime__pb_spans(r, q->data_offset, q->data_len, NULL, 0);
  chime__span_t *sp = malloc((ns + 1) * sizeof(*sp));
  assert_non_null(sp);
  assert_int_equal(chime__pb_spans(r, q->data_offset, q->data_len, sp, ns), ns);
  size_t pos = 0;
  for (size_t i = 0; i < ns; i++) {
    assert_true(sp[i].len > 0);
    assert_memory_equal(sp[i].p, m->data.data + pos, sp[i].len);
    pos += sp[i].len;
  }
  assert_int_equal(pos, m->data.len);
  free(sp);
  free(data);
  assert_int_equal(q->writer_id, m->writer_id);
  assert_int_equal(q->end_episode, m->end_episode);
  assert_int_equal(q->n_priorities, m->n_priorities);
  if (m->n_priorities > 0)
    assert_memory_equal(q->priorities, m->priorities,
                        m->n_priorities * sizeof(double));
  assert_int_equal(q->n_spec, m->n_spec);
  for (size_t i = 0; i < m->n_spec && i < CHIME_MAX_LEAVES + 1; i++) {
    assert_string_equal(q->spec[i]->name, m->spec[i]->name);
    assert_string_equal(q->spec[i]->dtype, m->spec[i]->dtype);
    assert_int_equal(q->spec[i]->n_shape, m->spec[i]->n_shape);
    for (size_t d = 0; d < m->spec[i]->n_shape; d++)
      assert_int_equal(q->spec[i]->shape[d], m->spec[i]->shape[d]);
  }
}

static void random_name(char *buf, size_t max) {
  size_t n = below(max);
  for (size_t i = 0; i < n; i++)
    buf[i] = (char)('a' + below(26));
  buf[n] = '\0';
}

/* A random request; pack it into *out (malloc'd). */
static size_t random_request(Chime__V1__InsertRequest *m, uint8_t **out) {
  static char table[64];
  static uint8_t data[200000];
  static double prio[64];
  static char names[20][16];
  static uint64_t shapes[20][4];
  static Chime__V1__Leaf leaves[20];
  static Chime__V1__Leaf *lp[20];
  static const char *const dtypes[] = {"f32", "u8", "i64", "bogus", ""};
  chime__v1__insert_request__init(m);
  random_name(table, below(4) ? 20 : 1);
  m->table = table;
  m->count = (uint32_t)(below(3) ? below(1000) : rnd());
  m->id = below(2) ? rnd() : below(100);
  m->writer_id = below(2) ? rnd() : 0;
  m->end_episode = below(2) != 0;
  m->data.len = below(4) ? below(2000) : below(sizeof(data));
  for (size_t i = 0; i < m->data.len; i++)
    data[i] = (uint8_t)rnd();
  m->data.data = data;
  m->n_priorities = below(3) ? 0 : below(64);
  for (size_t i = 0; i < m->n_priorities; i++) {
    uint64_t bits = rnd();
    memcpy(&prio[i], &bits, sizeof(double));
  }
  m->priorities = prio;
  m->n_spec = below(3) ? 0 : below(20);
  for (size_t i = 0; i < m->n_spec; i++) {
    chime__v1__leaf__init(&leaves[i]);
    random_name(names[i], 15);
    leaves[i].name = names[i];
    leaves[i].dtype = (char *)dtypes[below(5)];
    leaves[i].n_shape = below(5);
    for (size_t d = 0; d < leaves[i].n_shape; d++)
      shapes[i][d] = below(2) ? below(100) : rnd();
    leaves[i].shape = shapes[i];
    lp[i] = &leaves[i];
  }
  m->spec = lp;
  size_t len = chime__v1__insert_request__get_packed_size(m);
  *out = malloc(len + 64);
  assert_non_null(*out);
  assert_int_equal(chime__v1__insert_request__pack(m, *out), len);
  return len;
}

static void test_round_trip(void **state) {
  (void)state;
  for (int it = 0; it < 2000; it++) {
    Chime__V1__InsertRequest m;
    uint8_t *buf;
    size_t len = random_request(&m, &buf);
    chime__insert_req_t q;
    chime__span_t *spans;
    chime__pb_reader_t r;
    assert_int_equal(parse(buf, len, &q, &spans, &r), 0);
    assert_same(&m, &q, &r);
    chime__insert_req_free(&q);
    free(spans);
    free(buf);
  }
}

/* Unknown fields of every wire type are skipped; priorities sent unpacked
 * and packed, in two runs, read as one list; a field seen twice keeps its
 * last value - all as protobuf-c reads the same bytes. */
static void test_protobuf_rules(void **state) {
  uint8_t buf[512];
  size_t n = 0;
  double p[3] = {1.5, -2.25, 1e300};
  (void)state;
  n += chime__pb_put_tag(buf + n, 100, CHIME__PB_VARINT);
  n += chime__pb_put_varint(buf + n, UINT64_MAX);
  n += chime__pb_put_tag(buf + n, 2, CHIME__PB_VARINT); /* count = 7, later 9 */
  n += chime__pb_put_varint(buf + n, 7);
  n += chime__pb_put_tag(buf + n, 4, CHIME__PB_I64); /* one unpacked priority */
  memcpy(buf + n, &p[0], 8);
  n += 8;
  n += chime__pb_put_tag(buf + n, 101, CHIME__PB_I64);
  n += 8;
  n += chime__pb_put_tag(buf + n, 102, CHIME__PB_LEN);
  n += chime__pb_put_varint(buf + n, 5);
  memcpy(buf + n, "hello", 5);
  n += 5;
  n += chime__pb_put_tag(buf + n, 103, CHIME__PB_I32);
  n += 4;
  n += chime__pb_put_tag(buf + n, 4, CHIME__PB_LEN); /* two packed */
  n += chime__pb_put_varint(buf + n, 16);
  memcpy(buf + n, &p[1], 16);
  n += 16;
  n += chime__pb_put_tag(buf + n, 1, CHIME__PB_LEN);
  n += chime__pb_put_varint(buf + n, 4);
  memcpy(buf + n, "demo", 4);
  n += 4;
  n += chime__pb_put_tag(buf + n, 3, CHIME__PB_LEN);
  n += chime__pb_put_varint(buf + n, 3);
  memcpy(buf + n, "abc", 3);
  n += 3;
  n += chime__pb_put_tag(buf + n, 2, CHIME__PB_VARINT);
  n += chime__pb_put_varint(buf + n, UINT64_C(0x100000009)); /* uint32: 9 */
  for (int it = 0; it < 200; it++) {
    Chime__V1__InsertRequest *m =
        chime__v1__insert_request__unpack(NULL, n, buf);
    assert_non_null(m);
    assert_int_equal(m->count, 9);
    assert_int_equal(m->n_priorities, 3);
    chime__insert_req_t q;
    chime__span_t *spans;
    chime__pb_reader_t r;
    assert_int_equal(parse(buf, n, &q, &spans, &r), 0);
    assert_same(m, &q, &r);
    assert_memory_equal(q.priorities, p, sizeof(p));
    chime__insert_req_free(&q);
    free(spans);
    chime__v1__insert_request__free_unpacked(m, NULL);
  }
}

static int parse_once(const uint8_t *buf, size_t len) {
  chime__insert_req_t q;
  chime__span_t *spans;
  chime__pb_reader_t r;
  int rc = parse(buf, len, &q, &spans, &r);
  chime__insert_req_free(&q);
  free(spans);
  return rc;
}

static void test_malformed(void **state) {
  (void)state;
  static const struct {
    const char *what;
    uint8_t bytes[16];
    size_t len;
  } cases[] = {
      {"field number 0", {0x00, 0x01}, 2},
      {"start group", {(2 << 3) | 3}, 1},
      {"end group", {(2 << 3) | 4}, 1},
      {"wire type 6", {(2 << 3) | 6, 0}, 2},
      {"wire type 7", {(2 << 3) | 7, 0}, 2},
      {"truncated tag", {0x80}, 1},
      {"truncated varint", {0x10, 0xff, 0xff}, 3},
      {"11-byte varint",
       {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
       12},
      {"varint past 64 bits",
       {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
       11},
      {"truncated fixed64", {0x21, 1, 2, 3}, 4},
      {"truncated fixed32", {(9 << 3) | 5, 1, 2}, 3},
      {"length past the end", {0x1a, 0x05, 'a', 'b'}, 4},
      {"huge length", {0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f}, 6},
      {"count as LEN", {0x12, 0x00}, 2},
      {"data as varint", {0x18, 0x01}, 2},
      {"table as fixed64", {0x09, 1, 2, 3, 4, 5, 6, 7, 8}, 9},
      {"packed priorities of 7 bytes", {0x22, 7, 1, 2, 3, 4, 5, 6, 7}, 9},
      {"priorities as varint", {0x20, 0x01}, 2},
      {"table with a NUL", {0x0a, 0x03, 'a', 0, 'b'}, 5},
      {"spec leaf not a Leaf", {0x32, 0x02, 0x0a, 0x05}, 4},
      {"tag beyond 32 bits", {0xf8, 0xff, 0xff, 0xff, 0xff, 0x01}, 6},
      /* protobuf-c refuses it (found by tests/fuzz/fuzz_insertreq) */
      {"tag padded to 6 bytes", {0x90, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01}, 7},
      {"length padded to 6 bytes",
       {0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
       7},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    for (int it = 0; it < 20; it++) {
      int rc = parse_once(cases[i].bytes, cases[i].len);
      if (rc != CHIME_EPROTO)
        fail_msg("%s: parsed (%d)", cases[i].what, rc);
    }
  }
  /* Nothing at all is an empty request. */
  assert_int_equal(parse_once((const uint8_t *)"", 0), 0);
}

/* Random bytes, every prefix of valid requests, and valid requests with
 * bytes flipped: never a crash, and where protobuf-c accepts too, the same
 * fields. */
static void test_fuzz(void **state) {
  (void)state;
  uint8_t junk[512];
  for (int it = 0; it < 20000; it++) {
    size_t len = below(sizeof(junk));
    for (size_t i = 0; i < len; i++)
      junk[i] = (uint8_t)(below(4) ? rnd() : below(0x40));
    (void)parse_once(junk, len);
  }
  for (int it = 0; it < 300; it++) {
    Chime__V1__InsertRequest m;
    uint8_t *buf;
    size_t len = random_request(&m, &buf);
    if (len > 4096)
      len = 4096; /* the prefixes that matter: headers and leaves */
    for (size_t cutlen = 0; cutlen < len; cutlen += 1 + below(8))
      (void)parse_once(buf, cutlen);
    for (int f = 0; f < 20; f++) {
      size_t at = below(len);
      uint8_t was = buf[at];
      buf[at] = (uint8_t)rnd();
      Chime__V1__InsertRequest *ref =
          chime__v1__insert_request__unpack(NULL, len, buf);
      chime__insert_req_t q;
      chime__span_t *spans;
      chime__pb_reader_t r;
      int rc = parse(buf, len, &q, &spans, &r);
      if (rc == 0 && ref != NULL && ref->n_spec <= CHIME_MAX_LEAVES + 1)
        assert_same(ref, &q, &r);
      chime__insert_req_free(&q);
      free(spans);
      if (ref != NULL)
        chime__v1__insert_request__free_unpacked(ref, NULL);
      buf[at] = was;
    }
    free(buf);
  }
}

/* The generic reader on its own: fields, sub-readers and copies across
 * pieces. */
static void test_reader(void **state) {
  uint8_t buf[64];
  size_t n = 0;
  chime__span_t sp[80];
  chime__pb_reader_t r, sub;
  chime__pb_field_t f;
  uint64_t v;
  (void)state;
  n += chime__pb_put_tag(buf + n, 7, CHIME__PB_LEN);
  n += chime__pb_put_varint(buf + n, 10);
  size_t inner = n;
  n += chime__pb_put_varint(buf + n, 300);
  n += chime__pb_put_varint(buf + n, UINT64_MAX); /* 10 bytes */
  assert_int_equal(n - inner, 12);                /* 2 + 10 */
  buf[1] = 12;                                    /* the length, fixed up */
  n += chime__pb_put_tag(buf + n, 536870911, CHIME__PB_I32);
  memcpy(buf + n, "\x01\x02\x03\x04", 4);
  n += 4;
  for (size_t i = 0; i < n; i++) { /* one byte a piece */
    sp[i].p = buf + i;
    sp[i].len = 1;
  }
  chime__pb_reader_init(&r, sp, n);
  assert_int_equal(chime__pb_next(&r, &f), 1);
  assert_int_equal(f.number, 7);
  assert_int_equal(f.wire, CHIME__PB_LEN);
  assert_int_equal(f.value, 12);
  assert_int_equal(f.offset, inner);
  assert_int_equal(chime__pb_reader_sub(&sub, &r, f.offset, f.value), 0);
  assert_int_equal(chime__pb_varint(&sub, &v), 0);
  assert_int_equal(v, 300);
  assert_int_equal(chime__pb_varint(&sub, &v), 0);
  assert_true(v == UINT64_MAX);
  assert_int_equal(chime__pb_left(&sub), 0);
  assert_int_equal(chime__pb_varint(&sub, &v), CHIME_EPROTO);
  assert_int_equal(chime__pb_next(&r, &f), 1);
  assert_int_equal(f.number, 536870911);
  assert_int_equal(f.wire, CHIME__PB_I32);
  assert_int_equal(f.value, 0x04030201);
  assert_int_equal(chime__pb_next(&r, &f), 0);
  uint8_t out[12];
  assert_int_equal(chime__pb_copy(&r, inner, out, 12), 0);
  assert_memory_equal(out, buf + inner, 12);
  assert_int_equal(chime__pb_copy(&r, n - 1, out, 2), CHIME_EPROTO);
  assert_int_equal(chime__pb_reader_sub(&sub, &r, n, 1), CHIME_EPROTO);
  assert_int_equal(chime__pb_spans(&r, inner, 12, NULL, 0), 12);
}

/* A spec of CHIME_MAX_LEAVES leaves is read; one more is refused at that
 * leaf, naming the limit: the bytes after it, which do not parse, are
 * never looked at (the error would say so), so a spec of millions of
 * leaves costs the same as one of 65. */
static void test_spec_limit(void **state) {
  (void)state;
  static uint8_t buf[6 + 2 * (CHIME_MAX_LEAVES + 1) + 2];
  size_t n = 0;
  char err[128] = "";
  n += chime__pb_put_tag(buf + n, 1, CHIME__PB_LEN);
  n += chime__pb_put_varint(buf + n, 4);
  memcpy(buf + n, "demo", 4);
  n += 4;
  for (int i = 0; i < CHIME_MAX_LEAVES; i++) {
    n += chime__pb_put_tag(buf + n, 6, CHIME__PB_LEN);
    n += chime__pb_put_varint(buf + n, 0);
  }
  chime__insert_req_t q;
  chime__span_t one = {buf, n};
  chime__pb_reader_t r;
  chime__pb_reader_init(&r, &one, 1);
  assert_int_equal(chime__insert_req_parse(&q, &r, err, sizeof(err)), 0);
  assert_int_equal(q.n_spec, CHIME_MAX_LEAVES);
  assert_string_equal(q.table, "demo");
  chime__insert_req_free(&q);
  n += chime__pb_put_tag(buf + n, 6, CHIME__PB_LEN);
  n += chime__pb_put_varint(buf + n, 0);
  buf[n++] = (2 << 3) | 7; /* wire type 7: malformed, if it were read */
  buf[n++] = 0;
  one.len = n;
  chime__pb_reader_init(&r, &one, 1);
  assert_int_equal(chime__insert_req_parse(&q, &r, err, sizeof(err)),
                   CHIME_EPROTO);
  if (strstr(err, "more than 64 leaves") == NULL)
    fail_msg("refused as '%s'", err);
  chime__insert_req_free(&q);
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 300,000 table names and 300,000 empty runs of packed priorities, one
 * byte a piece: each field is found from where the reader is, not from
 * the message's start (that was 300,000 x 1.5 million pieces walked, hours
 * of work; a generous bound on a liveness check here). */
static void test_many_fields_many_pieces(void **state) {
  (void)state;
  enum { N = 300000 };
  size_t cap = (size_t)N * 5 + 16, n = 0;
  uint8_t *buf = malloc(cap);
  assert_non_null(buf);
  for (int i = 0; i < N; i++) {
    n += chime__pb_put_tag(buf + n, 1, CHIME__PB_LEN);
    n += chime__pb_put_varint(buf + n, 1);
    buf[n++] = (uint8_t)('a' + i % 26);
    n += chime__pb_put_tag(buf + n, 4, CHIME__PB_LEN);
    n += chime__pb_put_varint(buf + n, 0);
  }
  chime__span_t *sp = malloc(n * sizeof(*sp));
  assert_non_null(sp);
  for (size_t i = 0; i < n; i++) {
    sp[i].p = buf + i;
    sp[i].len = 1;
  }
  chime__insert_req_t q;
  chime__pb_reader_t r;
  char err[128] = "";
  double t0 = mono_s();
  chime__pb_reader_init(&r, sp, n);
  assert_int_equal(chime__insert_req_parse(&q, &r, err, sizeof(err)), 0);
  double took = mono_s() - t0;
  fprintf(stderr, "%zu bytes in %zu pieces read in %.3f s\n", n, n, took);
  char last[2] = {(char)('a' + (N - 1) % 26), '\0'};
  assert_string_equal(q.table, last);
  assert_int_equal(q.n_priorities, 0);
  assert_true(took < 10.0);
  chime__insert_req_free(&q);
  free(sp);
  free(buf);
}

static int mutate_parse(const uint8_t *buf, size_t len,
                        chime__mutate_req_t *q) {
  char err[128];
  chime__span_t *spans = malloc((2 * len + 2) * sizeof(*spans));
  assert_non_null(spans);
  size_t n = cut(buf, len, spans);
  chime__pb_reader_t r;
  chime__pb_reader_init(&r, spans, n);
  int rc = chime__mutate_req_scan(q, &r, err, sizeof(err));
  if (rc == 0)
    rc = chime__mutate_req_decode(q, &r);
  free(spans);
  return rc;
}

static void assert_same_mutate(const Chime__V1__MutatePrioritiesRequest *m,
                               const chime__mutate_req_t *q) {
  assert_string_equal(q->table, m->table ? m->table : "");
  assert_int_equal(q->n_updates, m->n_updates);
  for (size_t i = 0; i < m->n_updates; i++) {
    assert_true(q->keys[i] == m->updates[i]->key);
    assert_memory_equal(&q->priorities[i], &m->updates[i]->priority, 8);
  }
  assert_int_equal(q->n_deletes, m->n_deletes);
  if (m->n_deletes > 0)
    assert_memory_equal(q->deletes, m->deletes, m->n_deletes * 8);
}

/* Random MutatePrioritiesRequests packed by protobuf-c read back the
 * same; unpacked deletes, unknown fields and a field seen twice as
 * protobuf-c reads them; malformed bytes refused; mutated bytes never
 * disagree with protobuf-c where both accept. */
static void test_mutate_reader(void **state) {
  (void)state;
  static Chime__V1__PriorityUpdate ups[200];
  static Chime__V1__PriorityUpdate *up[200];
  static uint64_t dels[300];
  static char table[40];
  for (int it = 0; it < 1000; it++) {
    Chime__V1__MutatePrioritiesRequest m =
        CHIME__V1__MUTATE_PRIORITIES_REQUEST__INIT;
    random_name(table, 30);
    m.table = table;
    m.n_updates = below(200);
    for (size_t i = 0; i < m.n_updates; i++) {
      chime__v1__priority_update__init(&ups[i]);
      ups[i].key = below(2) ? rnd() : below(100);
      ups[i].priority = (double)rnd() / 1e9;
      up[i] = &ups[i];
    }
    m.updates = up;
    m.n_deletes = below(300);
    for (size_t i = 0; i < m.n_deletes; i++)
      dels[i] = below(2) ? rnd() : below(1000);
    m.deletes = dels;
    size_t len = chime__v1__mutate_priorities_request__get_packed_size(&m);
    uint8_t *buf = malloc(len + 1);
    assert_non_null(buf);
    assert_int_equal(chime__v1__mutate_priorities_request__pack(&m, buf), len);
    chime__mutate_req_t q;
    assert_int_equal(mutate_parse(buf, len, &q), 0);
    assert_same_mutate(&m, &q);
    chime__mutate_req_free(&q);
    /* Mutated bytes: never a crash, the same as protobuf-c where both
     * accept. */
    for (int f = 0; f < 10 && len > 0; f++) {
      size_t at = below(len);
      uint8_t was = buf[at];
      buf[at] = (uint8_t)rnd();
      Chime__V1__MutatePrioritiesRequest *ref =
          chime__v1__mutate_priorities_request__unpack(NULL, len, buf);
      int rc = mutate_parse(buf, len, &q);
      if (rc == 0 && ref != NULL && !q.table_too_long)
        assert_same_mutate(ref, &q);
      chime__mutate_req_free(&q);
      if (ref != NULL)
        chime__v1__mutate_priorities_request__free_unpacked(ref, NULL);
      buf[at] = was;
    }
    free(buf);
  }

  /* Unpacked deletes around a packed run, an unknown field of each wire
   * type, an update with an unknown field and its key twice, the table
   * twice. */
  uint8_t b[256];
  size_t n = 0;
  double p = 2.5;
  n += chime__pb_put_tag(b + n, 1, CHIME__PB_LEN);
  n += chime__pb_put_varint(b + n, 1);
  b[n++] = 'x';
  n += chime__pb_put_tag(b + n, 3, CHIME__PB_VARINT);
  n += chime__pb_put_varint(b + n, 7);
  n += chime__pb_put_tag(b + n, 3, CHIME__PB_LEN);
  n += chime__pb_put_varint(b + n, 3);
  n += chime__pb_put_varint(b + n, 300); /* 2 bytes */
  n += chime__pb_put_varint(b + n, 1);
  n += chime__pb_put_tag(b + n, 100, CHIME__PB_I64);
  n += 8;
  n += chime__pb_put_tag(b + n, 101, CHIME__PB_I32);
  n += 4;
  n += chime__pb_put_tag(b + n, 102, CHIME__PB_VARINT);
  n += chime__pb_put_varint(b + n, 5);
  n += chime__pb_put_tag(b + n, 2, CHIME__PB_LEN);
  size_t at = n++;
  n += chime__pb_put_tag(b + n, 1, CHIME__PB_VARINT);
  n += chime__pb_put_varint(b + n, 11);
  n += chime__pb_put_tag(b + n, 9, CHIME__PB_VARINT);
  n += chime__pb_put_varint(b + n, 1);
  n += chime__pb_put_tag(b + n, 2, CHIME__PB_I64);
  memcpy(b + n, &p, 8);
  n += 8;
  n += chime__pb_put_tag(b + n, 1, CHIME__PB_VARINT);
  n += chime__pb_put_varint(b + n, 12);
  b[at] = (uint8_t)(n - at - 1);
  n += chime__pb_put_tag(b + n, 3, CHIME__PB_VARINT);
  n += chime__pb_put_varint(b + n, 9);
  n += chime__pb_put_tag(b + n, 1, CHIME__PB_LEN);
  n += chime__pb_put_varint(b + n, 4);
  memcpy(b + n, "demo", 4);
  n += 4;
  Chime__V1__MutatePrioritiesRequest *ref =
      chime__v1__mutate_priorities_request__unpack(NULL, n, b);
  assert_non_null(ref);
  assert_int_equal(ref->n_deletes, 4);
  chime__mutate_req_t q;
  for (int it = 0; it < 50; it++) {
    assert_int_equal(mutate_parse(b, n, &q), 0);
    assert_same_mutate(ref, &q);
    assert_string_equal(q.table, "demo");
    assert_true(q.keys[0] == 12 && q.priorities[0] == 2.5);
    chime__mutate_req_free(&q);
  }
  chime__v1__mutate_priorities_request__free_unpacked(ref, NULL);

  static const struct {
    const char *what;
    uint8_t bytes[16];
    size_t len;
  } bad[] = {
      {"table as varint", {0x08, 0x01}, 2},
      {"update as varint", {0x10, 0x01}, 2},
      {"update with a key of wire type 1", {0x12, 0x09, 0x09}, 3},
      {"update truncated", {0x12, 0x02, 0x08}, 3},
      {"deletes as fixed64", {0x19, 1, 2, 3, 4, 5, 6, 7, 8}, 9},
      {"packed deletes with a cut varint", {0x1a, 0x01, 0x80}, 3},
      {"table with a NUL", {0x0a, 0x02, 'a', 0}, 4},
      {"truncated", {0x0a, 0x05, 'a'}, 3},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int rc = mutate_parse(bad[i].bytes, bad[i].len, &q);
    chime__mutate_req_free(&q);
    if (rc != CHIME_EPROTO)
      fail_msg("%s: parsed (%d)", bad[i].what, rc);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reader),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_protobuf_rules),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_fuzz),
      cmocka_unit_test(test_spec_limit),
      cmocka_unit_test(test_many_fields_many_pieces),
      cmocka_unit_test(test_mutate_reader),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
