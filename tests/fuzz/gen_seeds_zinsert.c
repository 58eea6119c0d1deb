/* fuzz_gen_seeds' zinsert seeds (gen_seeds.h): requests carrying
 * compressed leaves as stored, for fuzz_zinsert's tables. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "chime.pb-c.h"
#include "fuzz_common.h"
#include "gen_seeds.h"

/* --- zinsert: [n][n piece lengths][InsertRequest], table "z" of
 * obs:u8[16,16] (compressed) and id:u32[] --- */

static void put_zinsert(const char *name, const uint8_t *cuts, size_t ncuts,
                        const Chime__V1__InsertRequest *q) {
  uint8_t buf[4096];
  FUZZ_CHECK(chime__v1__insert_request__get_packed_size(q) + 1 + ncuts <=
             sizeof(buf));
  buf[0] = (uint8_t)ncuts;
  memcpy(buf + 1, cuts, ncuts);
  size_t len = chime__v1__insert_request__pack(q, buf + 1 + ncuts);
  fuzz_seed_put("zinsert", name, buf, 1 + ncuts + len);
}

/* Sample j's obs: a flat field and a box that moves with j. */
static void zframe(uint8_t *f, uint32_t j) {
  memset(f, 40, 256);
  for (uint32_t y = j % 10; y < j % 10 + 4; y++)
    memset(f + y * 16 + 3, 200, 5);
}

/* Sample j at data + *at: a zstd frame of its n bytes of obs at raw
 * (nothing when n is 0), its stored size in sizes[j], then its u32 id j. */
static void zseed_put(uint8_t *data, size_t *at, uint32_t *sizes, uint32_t j,
                      const uint8_t *raw, size_t n) {
  size_t k = n > 0 ? ZSTD_compress(data + *at, n, raw, n, 3) : 0;
  FUZZ_CHECK(!ZSTD_isError(k) && (n == 0 || k < n));
  memcpy(data + *at + k, &j, 4);
  sizes[j] = (uint32_t)k;
  *at += k + 4;
}

/* A request of 3 samples (data, len bytes) into table, *leaf stored at
 * sizes. */
static Chime__V1__InsertRequest zseed_request(const char *table, uint8_t *data,
                                              size_t len, uint32_t *leaf,
                                              uint32_t *sizes) {
  Chime__V1__InsertRequest q = CHIME__V1__INSERT_REQUEST__INIT;
  q.table = (char *)table;
  q.count = 3;
  q.data.data = data;
  q.data.len = len;
  q.n_stored_leaves = 1;
  q.stored_leaves = leaf;
  q.n_stored = 3;
  q.stored = sizes;
  return q;
}

/* Table "zr" (obs:u8[<=4,16,16] compressed at each sample's length):
 * samples of 0, 1 and 2 rows, each a frame of its rows; then 2 rows sent
 * as a frame of 1. Table "zs" (steps of obs:u8[16,16]): three steps. */
static void zinsert_more_seeds(void) {
  static uint8_t data[4096], raw[4 * 256], z[4 * 256];
  uint32_t sizes[3], lengths[3] = {0, 1, 2}, leaf0 = 0;
  size_t at = 0;
  for (uint32_t j = 0; j < 3; j++) {
    for (uint32_t r = 0; r < lengths[j]; r++)
      zframe(raw + 256 * r, j + r);
    zseed_put(data, &at, sizes, j, raw, lengths[j] * 256);
  }
  Chime__V1__InsertRequest q = zseed_request("zr", data, at, &leaf0, sizes);
  q.n_lengths = 3;
  q.lengths = lengths;
  put_zinsert("ragged_rows", NULL, 0, &q);
  /* Sample 2 says 2 rows; its frame makes 1. */
  size_t n1 = ZSTD_compress(z, sizeof(z), raw, 256, 3);
  FUZZ_CHECK(!ZSTD_isError(n1));
  at -= sizes[2] + 4;
  memcpy(data + at, z, n1);
  uint32_t two = 2;
  memcpy(data + at + n1, &two, 4);
  sizes[2] = (uint32_t)n1;
  q.data.len = at + n1 + 4;
  put_zinsert("ragged_row_short", NULL, 0, &q);
  /* Three steps of a sequence table. */
  at = 0;
  for (uint32_t j = 0; j < 3; j++) {
    zframe(raw, j);
    zseed_put(data, &at, sizes, j, raw, 256);
  }
  q.table = "zs";
  q.data.len = at;
  q.n_lengths = 0;
  q.lengths = NULL;
  put_zinsert("steps", NULL, 0, &q);
}

void fuzz_zinsert_seeds(void) {
  uint8_t data[2048], raw[256], bomb[256], zeros[65536] = {0};
  uint32_t sizes[3], leaf0 = 0, leaf1 = 1;
  size_t at = 0;
  for (uint32_t j = 0; j < 3; j++) {
    zframe(raw, j);
    zseed_put(data, &at, sizes, j, raw, sizeof(raw));
  }
  Chime__V1__InsertRequest q = zseed_request("z", data, at, &leaf0, sizes);
  put_zinsert("three_frames", NULL, 0, &q);
  const uint8_t cuts[] = {2, 9, 1};
  put_zinsert("three_frames_cut", cuts, 3, &q);
  /* The last frame one byte short. */
  sizes[2]--;
  q.data.len = at - 1;
  memmove(data + at - 5, data + at - 4, 4);
  put_zinsert("frame_cut_short", NULL, 0, &q);
  /* One frame declaring 64 KiB. */
  size_t nb = ZSTD_compress(bomb, sizeof(bomb), zeros, sizeof(zeros), 19);
  FUZZ_CHECK(!ZSTD_isError(nb));
  uint32_t one = 0, bsize = (uint32_t)nb;
  memcpy(data, bomb, nb);
  memcpy(data + nb, &one, 4);
  q.count = 1;
  q.data.len = nb + 4;
  q.n_stored = 1;
  q.stored = &bsize;
  put_zinsert("bomb", NULL, 0, &q);
  /* The leaf raw at its own size, then a size past it. */
  uint32_t full = 256, past = 257;
  zframe(data, 0);
  memcpy(data + 256, &one, 4);
  q.data.len = 260;
  q.stored = &full;
  put_zinsert("raw_at_leaf_size", NULL, 0, &q);
  q.stored = &past;
  q.data.len = 261;
  put_zinsert("size_past_leaf", NULL, 0, &q);
  /* A leaf the table keeps raw, sent "stored". */
  q.stored = &full;
  q.data.len = 260;
  q.stored_leaves = &leaf1;
  put_zinsert("leaf_kept_raw", NULL, 0, &q);
  zinsert_more_seeds();
}
