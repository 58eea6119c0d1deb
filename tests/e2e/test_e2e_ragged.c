/* Ragged leaves end to end against the real chimed: samples of every
 * length up to the bound (0 and the bound included) written by
 * chime_writer_append_leaves come back in shm and in stream mode as the
 * same packed values and offsets, stream mode moving only the rows used;
 * a sample past its bound or unlike the
 * length it shares is refused by the writer (nothing queued) and by the
 * server (a raw InsertRequest: INVALID_ARGUMENT naming the leaf, nothing
 * inserted), and the server serves on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "chime/ring.h"
#include "harness.h"
#include "streams.h"
#include "rawcall.h"

#define BOUND 300
#define N 40
#define BATCH 8

static const char *config =
    "{\"tables\": [{\"name\": \"rag\", \"spec\": \"tokens:i32[<=300], "
    "lp:f32[<=300 ~tokens], frames:u8[<=4,3], r:f32[]\", \"capacity\": 4096, "
    "\"min_size\": 1, \"sampler\": \"fifo\"},\n"
    "  {\"name\": \"small\", \"spec\": \"tokens:i32[<=300], lp:f32[<=300 "
    "~tokens], frames:u8[<=4,3], r:f32[]\", \"capacity\": 4, \"min_size\": 1, "
    "\"sampler\": \"fifo\"},\n"
    "  {\"name\": \"big\", \"spec\": \"tokens:i32[<=32768], obs:f32[2048]\", "
    "\"capacity\": 256, \"min_size\": 1, \"sampler\": \"fifo\"}]}\n";

CHIME__CHIMED_GROUP(config)

/* Sample i's lengths: tokens and lp share one, 0..BOUND (both ends hit);
 * frames its own, 0..4. */
static uint32_t tok_len(uint64_t i) {
  return i == 1 ? BOUND : (uint32_t)((i * 37) % (BOUND + 1));
}
static uint32_t frame_len(uint64_t i) {
  return (uint32_t)(i % 5);
}

/* Queues samples first..first+n-1 on w (per_message a message). */
static void append_samples(chime_writer_t *w, uint64_t first, uint64_t n) {
  static int32_t tok[BOUND];
  static float lp[BOUND];
  uint8_t frames[4 * 3];
  float r;
  for (uint64_t i = first; i < first + n; i++) {
    for (uint32_t k = 0; k < BOUND; k++) {
      tok[k] = (int32_t)(i * 1000 + k);
      lp[k] = (float)k / 4 + (float)i;
    }
    for (uint32_t k = 0; k < sizeof(frames); k++)
      frames[k] = (uint8_t)(i + k);
    r = (float)i;
    const void *leaves[4] = {tok, lp, frames, &r};
    const uint32_t lengths[4] = {tok_len(i), tok_len(i), frame_len(i), 0};
    int rc = chime_writer_append_leaves(w, leaves, lengths, 1.0);
    if (rc != 0)
      fail_msg("append %llu: %s", (unsigned long long)i, chime_last_error());
  }
}

static chime_writer_t *open_writer_bytes(const char *table,
                                         uint32_t per_message, size_t bytes) {
  chime_writer_t *w = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = per_message;
  wo.max_batch_bytes = bytes;
  assert_int_equal(chime_writer_open(&w, client, table, &wo), 0);
  return w;
}

static chime_writer_t *open_writer(const char *table, uint32_t per_message) {
  return open_writer_bytes(table, per_message, 1u << 20);
}

/* Messages of at most 16 samples, or (small) of about 3 KiB: a sample at
 * its lengths is up to 2.4 KiB, so a message holds one to a few. */
static void insert_sized(uint64_t first, uint64_t n, int small) {
  chime_writer_t *w = open_writer_bytes("rag", 16, small ? 3000 : 1u << 20);
  append_samples(w, first, n);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), n);
  assert_int_equal(chime_writer_close(w), 0);
}

/* Batch sample j is sample i: its rows at its offsets, values as written. */
static void check_sample(const chime_batch_t *b, uint32_t j, uint64_t i) {
  const chime_batch_leaf_t *t = chime_batch_leaf(b, "tokens");
  const chime_batch_leaf_t *l = chime_batch_leaf(b, "lp");
  const chime_batch_leaf_t *f = chime_batch_leaf(b, "frames");
  const chime_batch_leaf_t *r = chime_batch_leaf(b, "r");
  assert_non_null(t);
  assert_non_null(l);
  assert_non_null(f);
  assert_non_null(r);
  const int64_t *to = chime_batch_offsets(b, "tokens");
  const int64_t *fo = chime_batch_offsets(b, "frames");
  assert_ptr_equal(to, t->offsets);
  assert_null(chime_batch_offsets(b, "r"));
  assert_int_equal(to[j + 1] - to[j], tok_len(i));
  assert_int_equal(l->offsets[j], to[j]);
  assert_int_equal(l->offsets[j + 1], to[j + 1]);
  assert_int_equal(fo[j + 1] - fo[j], frame_len(i));
  const int32_t *tv = t->data;
  const float *lv = l->data;
  const uint8_t *fv = f->data;
  for (int64_t k = 0; k < to[j + 1] - to[j]; k++) {
    assert_int_equal(tv[to[j] + k], (int32_t)(i * 1000 + (uint64_t)k));
    assert_true(lv[to[j] + k] == (float)k / 4 + (float)i);
  }
  for (int64_t k = 0; k < (fo[j + 1] - fo[j]) * 3; k++)
    assert_int_equal(fv[fo[j] * 3 + k], (uint8_t)(i + (uint64_t)k));
  assert_true(((const float *)r->data)[j] == (float)i);
}

/* The bytes a stream-mode batch of size batch sends besides its leaves'
 * used values: its offsets (and the padding between them) and its info,
 * from the layout (docs/ring.md). */
static uint64_t tail_bytes(uint32_t batch) {
  chime_spec_t spec;
  chime_ring_layout_t lay;
  assert_int_equal(chime_spec_parse(&spec,
                                    "tokens:i32[<=300], lp:f32[<=300 ~tokens], "
                                    "frames:u8[<=4,3], r:f32[]"),
                   0);
  assert_int_equal(chime_ring_layout_compute(&lay, &spec, batch, 2), 0);
  return lay.info_offset + (uint64_t)batch * sizeof(chime_sample_info_t) -
         lay.offsets_offset[0];
}

/* Reads samples first..first+n-1 (fifo: in order) in mode; each batch's
 * leaves as documented: values [total, *rest], offsets count + 1. In
 * stream mode a batch moves the rows it uses and no more: what the stream
 * received is exactly its batches' used values, offsets and info (the
 * table holds no more than these n, so no batch is received ahead). */
static void consume_from(const char *table, uint32_t batch, chime_mode_t mode,
                         uint64_t first, uint64_t n) {
  chime_stream_t *s = chime__open_stream(client, table, mode, batch, 4, NULL);
  assert_int_equal(chime_stream_mode(s), mode); /* no fallback */
  int rc;
  uint64_t used = 0;
  for (uint64_t got = 0; got < n; got += batch) {
    chime_batch_t b;
    rc = chime_stream_next(s, &b, 20000);
    if (rc != 0)
      fail_msg("next (%s): %s", chime_mode_name(mode), chime_last_error());
    assert_int_equal(b.count, batch);
    const chime_batch_leaf_t *t = chime_batch_leaf(&b, "tokens");
    const chime_batch_leaf_t *f = chime_batch_leaf(&b, "frames");
    assert_int_equal(t->offsets[0], 0);
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->shape[0], t->offsets[batch]);
    assert_int_equal(t->bytes, t->shape[0] * 4);
    assert_int_equal(f->ndim, 2);
    assert_int_equal(f->shape[0], f->offsets[batch]);
    assert_int_equal(f->shape[1], 3);
    assert_int_equal(b.leaf[3].ndim, 1);
    assert_int_equal(b.leaf[3].shape[0], batch);
    for (uint32_t j = 0; j < batch; j++)
      check_sample(&b, j, first + got + j);
    used += t->bytes + chime_batch_leaf(&b, "lp")->bytes + f->bytes +
            b.leaf[3].bytes + tail_bytes(batch);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  if (mode == CHIME_MODE_STREAM) {
    chime_stream_local_stats_t ls;
    assert_int_equal(chime_stream_stats(s, &ls), 0);
    assert_int_equal(ls.received_bytes, used);
  }
  chime_stream_close(s);
}

static void consume(chime_mode_t mode, uint64_t first, uint64_t n) {
  consume_from("rag", BATCH, mode, first, n);
}

static uint64_t table_size(void) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  assert_int_equal(st->ntables, 3);
  assert_string_equal(st->tables[0].name, "rag");
  uint64_t n = st->tables[0].size;
  chime_stats_free(st);
  return n;
}

static void wait_empty(void) {
  int64_t deadline = chime__now_ms() + 10000;
  while (table_size() != 0) {
    if (chime__now_ms() > deadline)
      fail_msg("table still holds items 10 s after they were read");
    chime__sleep_ms(10);
  }
}

static void test_shm_and_stream_deliver_the_same(void **state) {
  (void)state;
  insert_sized(0, N, 0);
  consume(CHIME_MODE_SHM, 0, N);
  wait_empty();
  insert_sized(0, N, 1);
  consume(CHIME_MODE_STREAM, 0, N);
  wait_empty();
}

/* An InsertRequest with these lengths for one sample, sent raw: the
 * server's status and its details. */
static grpc_status_code raw_insert(const uint32_t *lengths, size_t n,
                                   size_t data_len, char *details,
                                   size_t dlen) {
  uint8_t *data = calloc(1, data_len + 1);
  assert_non_null(data);
  Chime__V1__InsertRequest q = CHIME__V1__INSERT_REQUEST__INIT;
  q.table = "rag";
  q.count = 1;
  q.data.data = data;
  q.data.len = data_len;
  q.n_lengths = n;
  q.lengths = (uint32_t *)lengths;
  grpc_status_code st;
  assert_int_equal(chime__raw_send_one(chimed.addr, "/chime.v1.Chime/Insert",
                                       &q.base, &st, details, dlen),
                   0);
  free(data);
  return st;
}

static void test_refused_nothing_inserted(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  static int32_t tok[BOUND + 1];
  static float lp[BOUND + 1];
  uint8_t frames[5 * 3] = {0};
  float r = 0;
  const void *leaves[4] = {tok, lp, frames, &r};
  assert_int_equal(chime_writer_open(&w, client, "rag", NULL), 0);
  /* The writer refuses before anything is queued. */
  const uint32_t too_long[4] = {BOUND + 1, BOUND + 1, 0, 0};
  assert_int_equal(chime_writer_append_leaves(w, leaves, too_long, 1.0),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "more than its bound 300"));
  const uint32_t unlike[4] = {3, 4, 0, 0};
  assert_int_equal(chime_writer_append_leaves(w, leaves, unlike, 1.0),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "share a length"));
  const uint32_t frames_long[4] = {1, 1, 5, 0};
  assert_int_equal(chime_writer_append_leaves(w, leaves, frames_long, 1.0),
                   CHIME_EINVAL);
  /* A ragged table's sample is not one flat block of bytes. */
  uint8_t flat[64] = {0};
  assert_int_equal(chime_writer_append(w, flat, sizeof(flat), 1.0),
                   CHIME_EINVAL);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), 0);
  assert_int_equal(chime_writer_close(w), 0);

  /* The server refuses what a writer never sends. */
  char details[512];
  const uint32_t l1[3] = {BOUND + 1, BOUND + 1, 0};
  assert_int_equal(
      raw_insert(l1, 3, (BOUND + 1) * 8 + 4, details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  if (strstr(details, "leaf 'tokens': sample 0 has 301 rows, more than its "
                      "bound 300") == NULL)
    fail_msg("too long: '%s'", details);
  const uint32_t l2[3] = {3, 4, 0};
  assert_int_equal(raw_insert(l2, 3, 7 * 4 + 4, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  if (strstr(details, "share a length") == NULL)
    fail_msg("unlike: '%s'", details);
  const uint32_t l3[2] = {3, 3};
  assert_int_equal(raw_insert(l3, 2, 6 * 4 + 4, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  if (strstr(details, "2 lengths for 1 samples of 3 ragged leaves") == NULL)
    fail_msg("too few lengths: '%s'", details);
  const uint32_t l4[3] = {3, 3, 1};
  assert_int_equal(raw_insert(l4, 3, 100, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  if (strstr(details, "take 31 bytes, got 100") == NULL)
    fail_msg("wrong size: '%s'", details);
  assert_int_equal(raw_insert(NULL, 0, 100, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  assert_int_equal(table_size(), 0);
  /* A good one, raw: in, and read back. */
  assert_int_equal(raw_insert(l4, 3, 31, details, sizeof(details)),
                   GRPC_STATUS_OK);
  assert_int_equal(table_size(), 1);
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 1;
  so.slots = 2;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "rag", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 20000), 0);
  assert_int_equal(chime_batch_offsets(&b, "tokens")[1], 3);
  assert_int_equal(chime_batch_offsets(&b, "frames")[1], 1);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  /* The server serves on. */
  wait_empty();
  insert_sized(100, BATCH, 0);
  consume(CHIME_MODE_SHM, 100, BATCH);
}

/* A request that waits for room (a full fifo table) is staged, lengths
 * and all, and goes in as it came once a learner makes room. */
static void test_staged_insert(void **state) {
  (void)state;
  chime_writer_t *w = open_writer("small", 2);
  append_samples(w, 200, 4); /* the table's capacity */
  assert_int_equal(chime_writer_flush(w), 0);
  append_samples(w, 204, 2 * BATCH - 4); /* sent, and waiting for room */
  if (chime__wait_staged(client, 10000) != 0)
    fail_msg("no insert staged 10 s after the table filled");
  consume_from("small", 2, CHIME_MODE_SHM, 200, 2 * BATCH);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), 2 * BATCH);
  assert_int_equal(chime_writer_close(w), 0);
}

/* Batches of about 1 MiB used, up to 2 MiB at the bound: each goes in
 * chunks (896 KiB), the ragged rows cut between them, and obs's 8 KiB rows
 * sent from the table's memory (runs of 4 KiB or more are): values and
 * offsets as written, and only the bytes used received. */
#define BIG_BOUND 32768
#define BIG_ITEMS 64
#define BIG_BATCH 16

static uint32_t big_len(uint64_t i) {
  return i == 3 ? BIG_BOUND : (uint32_t)((i * 7919) % (BIG_BOUND + 1));
}

static void test_stream_batches_of_many_chunks(void **state) {
  (void)state;
  static int32_t tok[BIG_BOUND];
  static float obs[2048];
  chime_writer_t *w = open_writer("big", 4);
  for (uint64_t i = 0; i < BIG_ITEMS; i++) {
    for (uint32_t k = 0; k < BIG_BOUND; k++)
      tok[k] = (int32_t)(i * 100000 + k);
    for (uint32_t k = 0; k < 2048; k++)
      obs[k] = (float)i + (float)k / 8;
    const void *leaves[2] = {tok, obs};
    const uint32_t lengths[2] = {big_len(i), 0};
    assert_int_equal(chime_writer_append_leaves(w, leaves, lengths, 1.0), 0);
  }
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_close(w), 0);

  chime_spec_t spec;
  chime_ring_layout_t lay;
  assert_int_equal(
      chime_spec_parse(&spec, "tokens:i32[<=32768], obs:f32[2048]"), 0);
  assert_int_equal(chime_ring_layout_compute(&lay, &spec, BIG_BATCH, 2), 0);
  uint64_t tail = lay.info_offset +
                  (uint64_t)BIG_BATCH * sizeof(chime_sample_info_t) -
                  lay.offsets_offset[0];

  chime_stream_t *s =
      chime__open_stream(client, "big", CHIME_MODE_STREAM, BIG_BATCH, 4, NULL);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM); /* no fallback */
  uint64_t used = 0, prefix = 0;
  for (uint64_t got = 0; got < BIG_ITEMS; got += BIG_BATCH) {
    chime_batch_t b;
    if (chime_stream_next(s, &b, 20000) != 0)
      fail_msg("next: %s", chime_last_error());
    const chime_batch_leaf_t *t = chime_batch_leaf(&b, "tokens");
    const chime_batch_leaf_t *o = chime_batch_leaf(&b, "obs");
    const int64_t *to = chime_batch_offsets(&b, "tokens");
    assert_int_equal(to[0], 0);
    for (uint32_t j = 0; j < BIG_BATCH; j++) {
      uint64_t i = got + j;
      assert_int_equal(to[j + 1] - to[j], big_len(i));
      const int32_t *tv = (const int32_t *)t->data + to[j];
      for (uint32_t k = 0; k < big_len(i); k++)
        if (tv[k] != (int32_t)(i * 100000 + k))
          fail_msg("sample %llu token %u", (unsigned long long)i, k);
      const float *ov = (const float *)o->data + (size_t)j * 2048;
      for (uint32_t k = 0; k < 2048; k++)
        assert_true(ov[k] == (float)i + (float)k / 8);
    }
    used += t->bytes + o->bytes + tail;
    prefix += lay.info_offset + BIG_BATCH * sizeof(chime_sample_info_t);
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_local_stats_t ls;
  assert_int_equal(chime_stream_stats(s, &ls), 0);
  assert_int_equal(ls.received_bytes, used);
  assert_true(used < prefix * 3 / 4); /* the bound's room stayed home */
  chime_stream_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shm_and_stream_deliver_the_same),
      cmocka_unit_test(test_refused_nothing_inserted),
      cmocka_unit_test(test_staged_insert),
      cmocka_unit_test(test_stream_batches_of_many_chunks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
