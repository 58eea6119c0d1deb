/* A consumer attaching to a damaged or hostile segment: every header field
 * mutated in turn, sizes and offsets beyond the mapping, overflowing products,
 * a self-consistent header that lies about the file size, unsealed and short
 * files, every single byte of the header flipped, and a producer whose
 * publish words point outside the ring. Attach must fail with CHIME_ECORRUPT
 * (CHIME_EPERM for the nonce) and never crash; run it under ASan. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/ring.h"
#include "ring/ring_internal.h"

#define SPEC "obs:f32[5], x:u8[3,2], done:bool"

typedef struct {
  chime_ring_t *ring;
  uint8_t *image; /* private copy of the whole segment */
  size_t len;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  chime_spec_t spec;
  void *base;
  if (f == NULL || chime_spec_parse(&spec, SPEC) != 0 ||
      chime__ring_create(&f->ring, &spec, 8, 4) != 0)
    return -1;
  base = chime_ring_map_base(f->ring, &f->len);
  f->image = malloc(f->len);
  if (f->image == NULL)
    return -1;
  memcpy(f->image, base, f->len);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  chime_ring_destroy(f->ring);
  free(f->image);
  free(f);
  return 0;
}

/* Writes `len` bytes of img into a fresh memfd of `size` bytes, seals it
 * unless told not to, and attaches. */
static int attach_image(const uint8_t *img, size_t len, size_t size, int seal,
                        const uint8_t *nonce) {
  chime_ring_t *ring = NULL;
  int fd = memfd_create("corrupt", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  int rc;
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  if (len > size)
    len = size;
  assert_int_equal(pwrite(fd, img, len, 0), (ssize_t)len);
  if (seal)
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  rc = chime_ring_attach(&ring, fd, nonce);
  if (rc == 0) {
    chime_ring_view_t v;
    /* A header that passed must still be safe to use. */
    int nrc = chime_ring_next(ring, &v, 0);
    assert_true(nrc == CHIME_ETIMEDOUT || nrc == CHIME_ECORRUPT);
    chime_ring_destroy(ring);
  } else {
    assert_null(ring);
  }
  close(fd);
  return rc;
}

typedef void (*mutate_fn)(chime__ring_header_t *h, uint64_t arg);

/* Applies one mutation to a copy of the pristine image and attaches. */
static int attach_mutated(fixture_t *f, mutate_fn fn, uint64_t arg) {
  uint8_t *img = malloc(f->len);
  int rc;
  assert_non_null(img);
  memcpy(img, f->image, f->len);
  fn((chime__ring_header_t *)img, arg);
  rc = attach_image(img, f->len, f->len, 1, NULL);
  free(img);
  return rc;
}

#define MUTATOR(name, stmt)                                                    \
  static void name(chime__ring_header_t *h, uint64_t v) {                      \
    (void)v;                                                                   \
    stmt;                                                                      \
  }

MUTATOR(m_magic, h->magic ^= v)
MUTATOR(m_version, h->version = (uint32_t)v)
MUTATOR(m_header_bytes, h->header_bytes = (uint32_t)v)
MUTATOR(m_total, h->total_bytes = v)
MUTATOR(m_prod, h->prod_offset = v)
MUTATOR(m_queue, h->queue_offset = v)
MUTATOR(m_ctrl, h->ctrl_offset = v)
MUTATOR(m_ctrl_bytes, h->ctrl_bytes = v)
MUTATOR(m_data, h->data_offset = v)
MUTATOR(m_data_bytes, h->data_bytes = v)
MUTATOR(m_page, h->page_size = v)
MUTATOR(m_slots, h->slots = (uint32_t)v)
MUTATOR(m_batch, h->batch_size = (uint32_t)v)
MUTATOR(m_slot_bytes, h->slot_bytes = v)
MUTATOR(m_leaf_off0, h->leaf_offset[0] = v)
MUTATOR(m_leaf_off2, h->leaf_offset[2] = v)
MUTATOR(m_leaf_off_unused, h->leaf_offset[7] = v)
MUTATOR(m_leaf_bytes1, h->leaf_bytes[1] = v)
MUTATOR(m_leaf_bytes_unused, h->leaf_bytes[3] = v)
MUTATOR(m_info, h->info_offset = v)
MUTATOR(m_info_record, h->info_record_bytes = (uint32_t)v)
MUTATOR(m_nleaves, h->nleaves = (uint32_t)v)
MUTATOR(m_dtype, h->leaves[0].dtype = (uint32_t)v)
MUTATOR(m_ndim, h->leaves[1].ndim = (uint32_t)v)
MUTATOR(m_shape0, h->leaves[0].shape[0] = v)
MUTATOR(m_shape_both, (h->leaves[1].shape[0] = v, h->leaves[1].shape[1] = v))
MUTATOR(m_shape_unused_dim, h->leaves[0].shape[3] = v)
MUTATOR(m_name_nonul, memset(h->leaves[0].name, 'a', CHIME__RING_FMT_NAME))
MUTATOR(m_name_dup, strcpy(h->leaves[1].name, "obs"))
MUTATOR(m_name_empty, h->leaves[2].name[0] = '\0')
MUTATOR(m_name_bad, h->leaves[2].name[1] = ' ')
MUTATOR(m_name_tail, h->leaves[0].name[10] = 'z')
MUTATOR(m_unused_leaf, strcpy(h->leaves[5].name, "ghost"))
MUTATOR(m_nonce, h->nonce[v] ^= 0x5a)

static void expect_corrupt(fixture_t *f, const char *what, mutate_fn fn,
                           uint64_t arg) {
  int rc = attach_mutated(f, fn, arg);
  if (rc != CHIME_ECORRUPT)
    fail_msg("%s (%#llx): attach returned %s, expected CHIME_ECORRUPT", what,
             (unsigned long long)arg, chime_err_name(rc));
  /* The reason is kept for the caller's error message. */
  if (strstr(chime_last_error(), "ring") == NULL)
    fail_msg("%s: no reason given ('%s')", what, chime_last_error());
}

static void test_pristine_copy_attaches(void **state) {
  fixture_t *f = *state;
  uint8_t nonce[16];
  chime_ring_nonce(f->ring, nonce);
  assert_int_equal(attach_image(f->image, f->len, f->len, 1, nonce), 0);
}

static void test_each_field(void **state) {
  fixture_t *f = *state;
  const chime__ring_header_t *h = (const chime__ring_header_t *)f->image;
  const uint64_t big = UINT64_MAX, len = f->len;

  expect_corrupt(f, "magic", m_magic, 1);
  assert_non_null(strstr(chime_last_error(), "magic"));
  expect_corrupt(f, "magic", m_magic, big);
  expect_corrupt(f, "version", m_version, 0);
  expect_corrupt(f, "version", m_version, CHIME_RING_VERSION + 1);
  expect_corrupt(f, "header_bytes", m_header_bytes, h->header_bytes + 8);
  expect_corrupt(f, "header_bytes", m_header_bytes, 0);
  expect_corrupt(f, "total_bytes", m_total, len + 4096);
  assert_non_null(strstr(chime_last_error(), "segment has"));
  expect_corrupt(f, "total_bytes", m_total, len - 4096);
  expect_corrupt(f, "total_bytes", m_total, big);
  expect_corrupt(f, "total_bytes", m_total, 0);
  expect_corrupt(f, "prod_offset", m_prod, h->prod_offset + 64);
  expect_corrupt(f, "prod_offset", m_prod, big - 3);
  expect_corrupt(f, "queue_offset", m_queue, len);
  expect_corrupt(f, "ctrl_offset", m_ctrl, len);
  expect_corrupt(f, "ctrl_offset", m_ctrl, big - 4095);
  expect_corrupt(f, "ctrl_bytes", m_ctrl_bytes, big);
  expect_corrupt(f, "ctrl_bytes", m_ctrl_bytes, h->ctrl_bytes * 2);
  expect_corrupt(f, "data_offset", m_data, len);
  expect_corrupt(f, "data_offset", m_data, big - 10);
  expect_corrupt(f, "data_offset", m_data, 0);
  expect_corrupt(f, "data_bytes", m_data_bytes, h->data_bytes * 2);
  expect_corrupt(f, "data_bytes", m_data_bytes, big);
  expect_corrupt(f, "page_size", m_page, h->page_size * 2);
  expect_corrupt(f, "page_size", m_page, 0);
  expect_corrupt(f, "slots", m_slots, 0);
  expect_corrupt(f, "slots", m_slots, 1);
  expect_corrupt(f, "slots", m_slots, 5);
  expect_corrupt(f, "slots", m_slots, UINT32_MAX);
  expect_corrupt(f, "batch_size", m_batch, 0);
  expect_corrupt(f, "batch_size", m_batch, 9);
  expect_corrupt(f, "batch_size", m_batch, UINT32_MAX);
  expect_corrupt(f, "slot_bytes", m_slot_bytes, h->slot_bytes + 4096);
  expect_corrupt(f, "slot_bytes", m_slot_bytes, big);
  expect_corrupt(f, "leaf_offset[0]", m_leaf_off0, len);
  expect_corrupt(f, "leaf_offset[2]", m_leaf_off2, big - 3);
  expect_corrupt(f, "leaf_offset[7] (unused)", m_leaf_off_unused, 64);
  expect_corrupt(f, "leaf_bytes[1]", m_leaf_bytes1, big);
  expect_corrupt(f, "leaf_bytes[1]", m_leaf_bytes1, UINT64_C(1) << 63);
  expect_corrupt(f, "leaf_bytes[3] (unused)", m_leaf_bytes_unused, 8);
  expect_corrupt(f, "info_offset", m_info, big);
  expect_corrupt(f, "info_offset", m_info, len);
  expect_corrupt(f, "info_record_bytes", m_info_record, 32);
  assert_non_null(strstr(chime_last_error(), "32 bytes"));
  expect_corrupt(f, "info_record_bytes", m_info_record, 0);
  expect_corrupt(f, "nleaves", m_nleaves, 0);
  expect_corrupt(f, "nleaves", m_nleaves, 2);
  expect_corrupt(f, "nleaves", m_nleaves, 4);
  expect_corrupt(f, "nleaves", m_nleaves, CHIME_MAX_LEAVES + 1);
  expect_corrupt(f, "nleaves", m_nleaves, UINT32_MAX);
  expect_corrupt(f, "dtype", m_dtype, 0);
  expect_corrupt(f, "dtype", m_dtype, 99);
  expect_corrupt(f, "dtype", m_dtype, CHIME_DTYPE_F64);
  /* The dtype word's flags (ring version 5): a ragged flag the layout
   * does not match, a shared length on a fixed leaf, reserved bits. */
  expect_corrupt(f, "dtype", m_dtype, CHIME_DTYPE_F32 | 0x100u);
  expect_corrupt(f, "dtype", m_dtype, CHIME_DTYPE_F32 | (1u << 16));
  expect_corrupt(f, "dtype", m_dtype, CHIME_DTYPE_F32 | 0x200u);
  expect_corrupt(f, "dtype", m_dtype, CHIME_DTYPE_F32 | (1u << 24));
  expect_corrupt(f, "ndim", m_ndim, CHIME_MAX_DIMS + 1);
  expect_corrupt(f, "ndim", m_ndim, UINT32_MAX);
  expect_corrupt(f, "shape[0]", m_shape0, 0);
  expect_corrupt(f, "shape[0]", m_shape0, 6);
  expect_corrupt(f, "shape[0] (product overflows)", m_shape0,
                 UINT64_C(1) << 62);
  expect_corrupt(f, "shape (2^32 x 2^32 overflows)", m_shape_both,
                 UINT64_C(1) << 32);
  expect_corrupt(f, "name without NUL", m_name_nonul, 0);
  expect_corrupt(f, "duplicate name", m_name_dup, 0);
  expect_corrupt(f, "empty name", m_name_empty, 0);
  expect_corrupt(f, "illegal name", m_name_bad, 0);
  /* The header is canonical: nothing past a name's NUL, an ndim or
   * nleaves may be set. */
  expect_corrupt(f, "byte after a name's NUL", m_name_tail, 0);
  expect_corrupt(f, "unused dim", m_shape_unused_dim, 1);
  expect_corrupt(f, "unused leaf", m_unused_leaf, 0);
}

static void test_nonce_mismatch_is_eperm(void **state) {
  fixture_t *f = *state;
  uint8_t nonce[16];
  uint8_t *img = malloc(f->len);
  chime_ring_nonce(f->ring, nonce);
  assert_non_null(img);
  for (uint64_t i = 0; i < 16; i++) {
    memcpy(img, f->image, f->len);
    m_nonce((chime__ring_header_t *)img, i);
    assert_int_equal(attach_image(img, f->len, f->len, 1, nonce), CHIME_EPERM);
    /* Without an expected nonce there is nothing to compare. */
    assert_int_equal(attach_image(img, f->len, f->len, 1, NULL), 0);
  }
  free(img);
}

/* Spec, layout and regions rewritten consistently for a bigger ring: only
 * the real size of the file gives the lie away. */
static void test_consistent_lie_about_size(void **state) {
  fixture_t *f = *state;
  uint8_t *img = malloc(f->len);
  chime__ring_header_t *h = (chime__ring_header_t *)img;
  chime__ring_regions_t r;
  chime_ring_layout_t l;
  chime_spec_t spec;
  assert_non_null(img);
  memcpy(img, f->image, f->len);
  assert_int_equal(chime_spec_parse(&spec, SPEC), 0);
  spec.leaves[0].shape[0] = 5000;
  h->leaves[0].shape[0] = 5000;
  assert_int_equal(chime_ring_layout_compute(&l, &spec, 8, 4), 0);
  assert_int_equal(chime__ring_regions(&l, h->page_size, &r), 0);
  h->slot_bytes = l.slot_bytes;
  h->info_offset = l.info_offset;
  for (uint32_t i = 0; i < spec.nleaves; i++) {
    h->leaf_offset[i] = l.leaf_offset[i];
    h->leaf_bytes[i] = l.leaf_bytes[i];
  }
  h->prod_offset = r.prod_offset;
  h->queue_offset = r.queue_offset;
  h->ctrl_offset = r.ctrl_offset;
  h->ctrl_bytes = r.ctrl_bytes;
  h->data_offset = r.data_offset;
  h->data_bytes = r.data_bytes;
  h->total_bytes = r.total_bytes;
  assert_true(r.total_bytes > f->len);
  assert_int_equal(attach_image(img, f->len, f->len, 1, NULL), CHIME_ECORRUPT);
  /* The same header over a file of the size it claims is a valid ring. */
  assert_int_equal(attach_image(img, f->len, (size_t)r.total_bytes, 1, NULL),
                   0);
  free(img);
}

/* A ring of another format version (another chime release on one side)
 * is refused by its version, with both versions named, before anything
 * else of its header is read: even when it is shorter than this version's
 * header. */
static void test_other_version_is_refused_by_name(void **state) {
  fixture_t *f = *state;
  const uint32_t others[] = {1, 3, 4, 5, CHIME_RING_VERSION + 1};
  char want[64];
  uint8_t *img = malloc(f->len);
  assert_non_null(img);
  assert_int_equal(CHIME_RING_VERSION, 6);
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
    memcpy(img, f->image, f->len);
    m_version((chime__ring_header_t *)img, others[i]);
    for (int short_file = 0; short_file < 2; short_file++) {
      size_t size = short_file ? 4096 : f->len;
      assert_int_equal(attach_image(img, f->len, size, 1, NULL),
                       CHIME_ECORRUPT);
      const char *e = chime_last_error();
      snprintf(want, sizeof(want), "format version %u, ", others[i]);
      if (strstr(e, want) == NULL || strstr(e, "reads version 6") == NULL)
        fail_msg("version %u (%s file): '%s'", others[i],
                 short_file ? "short" : "whole", e);
    }
  }
  free(img);
}

static uint32_t u32_at(const uint8_t *p, size_t off) {
  uint32_t v;
  memcpy(&v, p + off, sizeof(v));
  return v;
}

static uint64_t u64_at(const uint8_t *p, size_t off) {
  uint64_t v;
  memcpy(&v, p + off, sizeof(v));
  return v;
}

/* The header as docs/ring.md describes it, byte offsets and all: what a
 * reader in another language relies on. No public struct is involved. */
static void test_header_bytes_as_documented(void **state) {
  fixture_t *f = *state;
  const uint8_t *b = f->image;
  const size_t leaf = 136, leaves = 1152;

  assert_int_equal(u64_at(b, 0), CHIME_RING_MAGIC);
  assert_memory_equal(b, "CHIMERNG", 8);
  assert_int_equal(u32_at(b, 8), 6);           /* version */
  assert_int_equal(u32_at(b, 12), 9856);       /* header bytes */
  assert_int_equal(u64_at(b, 16), f->len);     /* total bytes */
  assert_int_equal(u64_at(b, 24), 9856);       /* producer words */
  assert_int_equal(u64_at(b, 32), 9856 + 128); /* publish queue */
  /* Regions on host pages: the queue of 4 entries ends at 10048. */
  const uint64_t page = chime__page_size();
  assert_int_equal(u64_at(b, 72), page);
  assert_int_equal(u64_at(b, 40), (10048 + page - 1) / page * page);
  assert_int_equal(u64_at(b, 48), page); /* consumer words + 4 counters */
  assert_int_equal(u64_at(b, 56), u64_at(b, 40) + page);
  assert_int_equal(u64_at(b, 56) + u64_at(b, 64), f->len);
  assert_int_equal(u32_at(b, 96), 4);        /* slots */
  assert_int_equal(u32_at(b, 100), 8);       /* batch size */
  assert_int_equal(u64_at(b, 104), 4096);    /* slot bytes */
  assert_int_equal(u64_at(b, 64), 4 * 4096); /* data bytes */
  assert_int_equal(u32_at(b, 120), 80);      /* sample info record bytes */
  assert_int_equal(u32_at(b, 124), 3);       /* leaves */
  /* obs:f32[5] at 0 (160 bytes), x:u8[3,2] at 192 (48), done:bool at 256
   * (8), the info at 320. */
  assert_int_equal(u64_at(b, 112), 320);
  assert_int_equal(u64_at(b, 128 + 0), 0);
  assert_int_equal(u64_at(b, 128 + 8), 192);
  assert_int_equal(u64_at(b, 128 + 16), 256);
  assert_int_equal(u64_at(b, 128 + 24), 0); /* unused */
  assert_int_equal(u64_at(b, 640 + 0), 160);
  assert_int_equal(u64_at(b, 640 + 8), 48);
  assert_int_equal(u64_at(b, 640 + 16), 8);
  assert_string_equal((const char *)b + leaves, "obs");
  assert_int_equal(u32_at(b, leaves + 64), CHIME_DTYPE_F32);
  assert_int_equal(u32_at(b, leaves + 68), 1);
  assert_int_equal(u64_at(b, leaves + 72), 5);
  assert_string_equal((const char *)b + leaves + leaf, "x");
  assert_int_equal(u32_at(b, leaves + leaf + 64), CHIME_DTYPE_U8);
  assert_int_equal(u32_at(b, leaves + leaf + 68), 2);
  assert_int_equal(u64_at(b, leaves + leaf + 72), 3);
  assert_int_equal(u64_at(b, leaves + leaf + 80), 2);
  assert_string_equal((const char *)b + leaves + 2 * leaf, "done");
  assert_int_equal(u32_at(b, leaves + 2 * leaf + 64), CHIME_DTYPE_BOOL);
  assert_int_equal(u32_at(b, leaves + 2 * leaf + 68), 0);
  /* Everything past the third leaf is zero. */
  for (size_t off = leaves + 3 * leaf; off < 9856; off++)
    if (b[off] != 0)
      fail_msg("header byte %zu is %#x", off, b[off]);
}

static void test_bad_files(void **state) {
  fixture_t *f = *state;
  chime_ring_t *ring = NULL;
  int p[2];
  assert_int_equal(attach_image(f->image, f->len, f->len, 0, NULL),
                   CHIME_ECORRUPT); /* not sealed */
  assert_int_equal(attach_image(f->image, f->len, f->len - 4096, 1, NULL),
                   CHIME_ECORRUPT); /* truncated */
  assert_int_equal(attach_image(f->image, f->len, f->len + 4096, 1, NULL),
                   CHIME_ECORRUPT); /* grown */
  assert_int_equal(attach_image(f->image, f->len, 100, 1, NULL),
                   CHIME_ECORRUPT); /* shorter than a header */
  assert_int_equal(attach_image(f->image, f->len, 0, 1, NULL),
                   CHIME_ECORRUPT); /* empty */
  assert_int_equal(pipe(p), 0);
  assert_int_equal(chime_ring_attach(&ring, p[0], NULL), CHIME_ECORRUPT);
  close(p[0]);
  close(p[1]);
  assert_int_equal(chime_ring_attach(&ring, 12345, NULL), CHIME_EINVAL);
  assert_null(ring);
}

/* Every byte of the header flipped in turn: the header is canonical (a
 * flipped name byte is never a legal name character), so each flip is
 * refused, the nonce's with CHIME_EPERM. */
static void test_every_header_byte(void **state) {
  fixture_t *f = *state;
  uint8_t nonce[16];
  uint8_t *img = malloc(f->len);
  const size_t nonce_at = offsetof(chime__ring_header_t, nonce);
  chime_ring_nonce(f->ring, nonce);
  assert_non_null(img);
  memcpy(img, f->image, f->len);
  for (size_t off = 0; off < sizeof(chime__ring_header_t); off++) {
    int rc;
    img[off] ^= 0xA5;
    rc = attach_image(img, f->len, f->len, 1, nonce);
    img[off] ^= 0xA5;
    if (rc !=
        (off >= nonce_at && off < nonce_at + 16 ? CHIME_EPERM : CHIME_ECORRUPT))
      fail_msg("flip at header byte %zu: %s", off, chime_err_name(rc));
  }
  free(img);
}

/* The producer's publish words are checked before use too. */
static void test_hostile_publish_words(void **state) {
  fixture_t *f = *state;
  uint8_t *base = chime_ring_map_base(f->ring, NULL);
  chime__ring_header_t *h = (chime__ring_header_t *)base;
  chime__ring_prod_t *prod = (chime__ring_prod_t *)(base + h->prod_offset);
  chime__ring_pubent_t *q = (chime__ring_pubent_t *)(base + h->queue_offset);
  chime_ring_t *cons = NULL;
  chime__ring_wslot_t w;
  chime_ring_view_t v;
  uint64_t pub;

  assert_int_equal(chime_ring_attach(&cons, chime_ring_fd(f->ring), NULL), 0);
  assert_int_equal(chime__ring_acquire(f->ring, &w, 0), 0);
  assert_int_equal(chime__ring_publish(f->ring, w.slot, NULL), 0);

  atomic_store(&q[0].slot, 4); /* slot index out of range */
  assert_int_equal(chime_ring_next(cons, &v, 0), CHIME_ECORRUPT);
  atomic_store(&q[0].slot, UINT32_MAX);
  assert_int_equal(chime_ring_next(cons, &v, 0), CHIME_ECORRUPT);
  atomic_store(&q[0].slot, w.slot);
  atomic_store(&q[0].seq, 7); /* stale or foreign entry */
  assert_int_equal(chime_ring_next(cons, &v, 0), CHIME_ECORRUPT);
  atomic_store(&q[0].seq, 0);
  pub = atomic_load(&prod->pub);
  atomic_store(&prod->pub, pub + 100); /* more published than slots */
  assert_int_equal(chime_ring_next(cons, &v, 0), CHIME_ECORRUPT);
  atomic_store(&prod->pub, pub);
  assert_int_equal(chime_ring_next(cons, &v, 0), 0);
  assert_int_equal(v.slot, w.slot);
  /* The same slot published again while we hold it: refused. */
  atomic_store(&q[1].slot, w.slot);
  atomic_store(&q[1].seq, 1);
  atomic_store(&prod->pub, pub + 1);
  assert_int_equal(chime_ring_next(cons, &v, 0), CHIME_ECORRUPT);
  chime_ring_destroy(cons);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pristine_copy_attaches, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_each_field, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nonce_mismatch_is_eperm, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_consistent_lie_about_size, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_other_version_is_refused_by_name,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_header_bytes_as_documented, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_header_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_publish_words, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
