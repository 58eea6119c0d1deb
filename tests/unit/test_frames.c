/* Compressed leaves on the client (src/client/frames.c): a batch that came
 * as the server's slot holds it (obs as its stored bytes, a ragged u8 leaf)
 * unpacked into the local slot, each sample's stored bytes the raw leaf or
 * a zstd frame decompressed; bytes that are no frame of the leaf (garbage,
 * a frame of another size: a bomb) a CHIME_EPROTO naming the batch, leaf
 * and sample, nothing written past the leaf; and Opened's framed leaves
 * checked against the server's spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zstd.h>

#include "client/stream.h"
#include "common/spec.h"
#include "wire/leaf.h"

#define B 3
#define SIDE 8
#define LEAF (SIDE * SIDE)

typedef struct {
  chime_spec_t spec, wspec; /* the learner's, the server's */
  chime_ring_t *ring;       /* local, of spec */
  chime__remote_t r;
  uint8_t *dst; /* a local slot */
  const chime_ring_layout_t *ll;
  uint8_t unframe[CHIME_MAX_LEAVES];
  uint64_t at; /* frames written so far */
} fx_t;

static void fx_setup(fx_t *x) {
  memset(x, 0, sizeof(*x));
  assert_int_equal(chime_spec_parse(&x->spec, "obs:u8[8,8], r:f32[]"), 0);
  x->unframe[0] = 1;
  assert_int_equal(chime__spec_framed(&x->wspec, &x->spec, x->unframe), 0);
  assert_int_equal(chime__ring_create(&x->ring, &x->spec, B, 2), 0);
  x->ll = chime_ring_layout(x->ring);
  assert_int_equal(chime_ring_layout_compute(&x->r.wlay, &x->wspec, B, 2), 0);
  x->r.wire = calloc(1, x->r.wlay.slot_bytes);
  x->r.ring = x->ring;
  x->r.unframe = x->unframe;
  x->r.seq = 7;
  chime__remote_set_spec(&x->r, &x->wspec);
  x->dst = calloc(1, x->ll->slot_bytes);
  memset(x->dst, 0xAB, x->ll->slot_bytes);
  float *r = (float *)(x->r.wire + x->r.wlay.leaf_offset[1]);
  chime_sample_info_t *info =
      (chime_sample_info_t *)(x->r.wire + x->r.wlay.info_offset);
  for (uint32_t j = 0; j < B; j++) {
    r[j] = (float)j + 0.5f;
    info[j].key = 100 + j;
  }
}

static void fx_teardown(fx_t *x) {
  free(x->r.wire);
  free(x->dst);
  chime_ring_destroy(x->ring);
}

static int64_t *offsets(fx_t *x) {
  return (int64_t *)(x->r.wire + x->r.wlay.offsets_offset[0]);
}

/* Sample j's stored bytes. */
static void put(fx_t *x, uint32_t j, const void *p, size_t n) {
  int64_t *o = offsets(x);
  o[j] = (int64_t)x->at;
  memcpy(x->r.wire + x->r.wlay.leaf_offset[0] + x->at, p, n);
  x->at += n;
  o[j + 1] = (int64_t)x->at;
}

/* Sample j's frame: a leaf of n bytes, compressed. */
static void put_frame(fx_t *x, uint32_t j, const uint8_t *leaf, size_t n) {
  uint8_t frame[256];
  size_t z = ZSTD_compress(frame, sizeof(frame), leaf, n, 3);
  assert_false(ZSTD_isError(z));
  assert_true(z < LEAF);
  put(x, j, frame, z);
}

static void leaf_of(uint32_t j, uint8_t *leaf) {
  for (uint32_t k = 0; k < LEAF; k++)
    leaf[k] = (uint8_t)(k / 16 + j);
}

static void test_unpack(void **state) {
  (void)state;
  fx_t x;
  fx_setup(&x);
  uint8_t leaf[B][LEAF];
  for (uint32_t j = 0; j < B; j++)
    leaf_of(j, leaf[j]);
  put(&x, 0, leaf[0], LEAF); /* kept raw: as long as the leaf */
  put_frame(&x, 1, leaf[1], LEAF);
  put_frame(&x, 2, leaf[2], LEAF);
  char err[256] = "";
  assert_int_equal(chime__frames_unpack(&x.r, x.dst, err, sizeof(err)), 0);
  assert_memory_equal(x.dst + x.ll->leaf_offset[0], leaf, sizeof(leaf));
  const float *r = (const float *)(x.dst + x.ll->leaf_offset[1]);
  const chime_sample_info_t *info =
      (const chime_sample_info_t *)(x.dst + x.ll->info_offset);
  for (uint32_t j = 0; j < B; j++) {
    assert_true(r[j] == (float)j + 0.5f);
    assert_int_equal(info[j].key, 100 + j);
  }
  fx_teardown(&x);
}

/* Sample 1's bytes bad: a clear error, and nothing past obs written. */
static void unpack_refused(fx_t *x) {
  char err[256] = "";
  assert_int_equal(chime__frames_unpack(&x->r, x->dst, err, sizeof(err)),
                   CHIME_EPROTO);
  assert_non_null(strstr(err, "batch 7: leaf 'obs': sample 1"));
  const uint8_t *after = x->dst + x->ll->leaf_offset[0] + B * LEAF;
  for (const uint8_t *p = after; p < x->dst + x->ll->leaf_offset[1]; p++)
    assert_int_equal(*p, 0xAB);
  const uint8_t *r = x->dst + x->ll->leaf_offset[1];
  for (uint32_t k = 0; k < B * 4; k++)
    assert_int_equal(r[k], 0xAB);
}

static void test_unpack_refuses_garbage(void **state) {
  (void)state;
  fx_t x;
  fx_setup(&x);
  uint8_t leaf[LEAF], junk[20];
  leaf_of(0, leaf);
  memset(junk, 0x5A, sizeof(junk));
  put_frame(&x, 0, leaf, LEAF);
  put(&x, 1, junk, sizeof(junk));
  put_frame(&x, 2, leaf, LEAF);
  unpack_refused(&x);
  fx_teardown(&x);
}

/* A frame of a larger leaf (it would write past the sample's place) and
 * of a smaller one. */
static void test_unpack_refuses_other_sizes(void **state) {
  (void)state;
  static uint8_t big[1 << 16];
  const size_t sizes[] = {sizeof(big), LEAF + 1, LEAF - 1};
  for (size_t k = 0; k < 3; k++) {
    fx_t x;
    fx_setup(&x);
    uint8_t leaf[LEAF];
    leaf_of(0, leaf);
    put_frame(&x, 0, leaf, LEAF);
    put_frame(&x, 1, big, sizes[k]);
    put_frame(&x, 2, leaf, LEAF);
    unpack_refused(&x);
    fx_teardown(&x);
  }
}

/* Opened's framed leaves: the raw leaf behind each, by name; the server's
 * spec must be the learner's with those framed. */
static int opened(const char *server_spec, const char *framed, char *err,
                  size_t errlen, chime_stream_t *s) {
  memset(s, 0, sizeof(*s));
  s->opts.batch_size = B;
  s->opts.slots = 2;
  assert_int_equal(chime_spec_parse(&s->spec, server_spec), 0);
  chime_spec_t raw;
  Chime__V1__Leaf m[CHIME_MAX_LEAVES], *mp[CHIME_MAX_LEAVES];
  Chime__V1__Layout l = CHIME__V1__LAYOUT__INIT;
  if (framed != NULL) {
    assert_int_equal(chime_spec_parse(&raw, framed), 0);
    chime__leaf_msgs(&raw, m, mp);
    l.n_framed = raw.nleaves;
    l.framed = mp;
  }
  return chime__frames_opened(s, &l, err, errlen);
}

static void test_opened(void **state) {
  (void)state;
  static chime_stream_t s;
  char err[256] = "";
  assert_int_equal(
      opened("obs:u8[<=64], r:f32[]", "obs:u8[8,8]", err, sizeof(err), &s), 0);
  assert_int_equal(s.nframed, 1);
  assert_int_equal(s.spec.leaves[0].ragged, 0);
  assert_int_equal(s.spec.leaves[0].shape[1], SIDE);
  assert_int_equal(s.wire_spec.leaves[0].ragged, 1);
  /* Not the leaf's bound, no such leaf, a ragged raw leaf. */
  const char *bad[] = {"obs:u8[8,9]", "nope:u8[8,8]", "obs:u8[<=64]",
                       "r:f32[]"};
  for (int k = 0; k < 4; k++)
    assert_int_equal(
        opened("obs:u8[<=64], r:f32[]", bad[k], err, sizeof(err), &s),
        CHIME_EPROTO);
  /* Kept compressed by the learner, sent decompressed by the server. */
  assert_int_equal(opened("obs:u8[8,8], r:f32[]", NULL, err, sizeof(err), &s),
                   0);
  snprintf(s.keep_text, sizeof(s.keep_text), "obs");
  assert_int_equal(
      chime__frames_opened(&s, &(Chime__V1__Layout)CHIME__V1__LAYOUT__INIT, err,
                           sizeof(err)),
      CHIME_ENOTSUP);
  assert_non_null(strstr(err, "leaf 'obs'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unpack),
      cmocka_unit_test(test_unpack_refuses_garbage),
      cmocka_unit_test(test_unpack_refuses_other_sizes),
      cmocka_unit_test(test_opened),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
