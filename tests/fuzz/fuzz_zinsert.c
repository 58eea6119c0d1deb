/* libFuzzer target: an InsertRequest carrying compressed leaves as stored
 * (stored_leaves / stored, docs/protocol.md "Compressed leaves"), through
 * what chimed does with it: the strict reader (src/server/insertreq.c), the
 * check against its table (src/server/insertcheck.c) and the insert into a
 * table that keeps 'obs' compressed (src/replay/table_insert.c, zleaf.c), from
 * bytes cut into pieces the way gRPC hands a message over.
 *
 * Input: [n][n piece lengths][message] (fuzz_common.h), as fuzz_insertreq.
 *
 * Beyond "no crash": a refusal is CHIME_EINVAL with a sentence (the leaf
 * named when a stored leaf is what is wrong) and leaves the table as it
 * was; a request goes in exactly when every stored leaf is one whole zstd
 * frame that decompresses to exactly its leaf's bytes, or the leaf raw at
 * its own size (chime__zleaf_check, asked on its own), and then all its
 * samples count as inserted.
 *
 * The request's table name picks the table: "zr" one whose compressed
 * obs is ragged (obs:u8[<=4,16,16], each sample's frame of its rows at
 * its length), "zs" a sequence table of such steps (windows of 2), any
 * other "z".
 *
 * Seeds (tests/fuzz/corpus/zinsert): requests of good frames, one cut,
 * one declaring more than its leaf, a stored size past the leaf, a leaf
 * sent raw, a leaf the table keeps raw named; ragged rows at their
 * lengths, one row short; steps; a ragged request of no samples naming
 * a stored leaf (nothing to check, so it goes in). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "fuzz_common.h"
#include "replay/table.h"
#include "replay/zleaf.h"
#include "server/insertcheck.h"
#include "server/insertreq.h"
#include "wire/pbread.h"

#define OBS 256 /* obs:u8[16,16] */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ROWS 4 /* zr's bound */

/* The table a request names: "zr", "zs" or (any other name) "z". */
static chime__table_t *table(const char *name) {
  static chime__table_t *t[3];
  static const char *names[3] = {"z", "zr", "zs"};
  int k = name != NULL && strcmp(name, "zr") == 0   ? 1
          : name != NULL && strcmp(name, "zs") == 0 ? 2
                                                    : 0;
  if (t[k] != NULL)
    return t[k];
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "%s", names[k]);
  FUZZ_CHECK(chime_spec_parse(&tc.spec, k == 1
                                            ? "obs:u8[<=4,16,16], id:u32[]"
                                            : "obs:u8[16,16], id:u32[]") == 0);
  tc.capacity = 32;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.remover = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.seed = 7;
  tc.compress[0] = 3;
  if (k == 2) {
    tc.capacity_steps = 64;
    tc.sequence_length = 2;
    tc.stride = 1;
    tc.initial_priority = 1.0;
  }
  FUZZ_CHECK(chime__table_create(&t[k], &tc) == 0);
  return t[k];
}

/* Whether every stored leaf of the request (data flat, checked sizes) is
 * one the table must take: its frame of the leaf's bytes (zr: the
 * sample's rows at its length). */
static int all_frames_good(const chime__insert_req_t *q, const uint8_t *d,
                           int ragged) {
  uint8_t scratch[ROWS * OBS];
  size_t at = 0;
  for (uint32_t j = 0; j < q->count; j++) {
    size_t n = ragged ? (size_t)q->lengths[j] * OBS : OBS;
    if (q->n_stored_leaves == 1) {
      uint32_t s = q->stored[j];
      if (chime__zleaf_check(d + at, s, n, scratch) != 0)
        return 0;
      at += s;
    } else {
      at += n;
    }
    at += 4; /* id */
  }
  FUZZ_CHECK(at == q->data_len);
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_piece_t pieces[FUZZ_MAX_PIECES];
  chime__span_t spans[FUZZ_MAX_PIECES];
  const uint8_t *msg;
  size_t len, n = fuzz_message(data, size, pieces, spans, &msg, &len);
  if (n == 0)
    return 0;

  chime__insert_req_t q;
  chime__pb_reader_t r;
  char err[1024] = "", prefix[64];
  chime__pb_reader_init(&r, spans, n);
  int rc = chime__insert_req_parse(&q, &r, err, sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == CHIME_EPROTO || rc == CHIME_ENOMEM);
  chime__table_t *t = table(rc == 0 ? q.table : NULL);
  const chime__table_config_t *tc = chime__table_config(t);
  int ragged = tc->sequence_length == 0 && tc->spec.leaves[0].ragged;
  snprintf(prefix, sizeof(prefix), "insert into '%s': ", tc->name);
  /* Versions and priorities are fuzz_insertreq's business. */
  int other = rc != 0 || q.n_versions > 1 || q.n_priorities != 0;
  if (!other)
    rc = chime__insert_check_data(tc, chime__table_sample_bytes(t), &q, err,
                                  sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == CHIME_EINVAL || rc == CHIME_EPROTO ||
             rc == CHIME_ENOMEM);
  if (!other && rc == CHIME_EINVAL)
    FUZZ_CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
  if (!other && rc == 0) {
    /* Sizes checked: the data is exactly the samples' bytes. */
    uint8_t *flat = malloc(q.data_len ? q.data_len : 1);
    FUZZ_CHECK(flat != NULL);
    FUZZ_CHECK(chime__pb_copy(&r, q.data_offset, flat, q.data_len) == 0);
    int good = all_frames_good(&q, flat, ragged);
    free(flat);
    chime__span_t few[FUZZ_MAX_PIECES];
    size_t nd =
        chime__pb_spans(&r, q.data_offset, q.data_len, few, FUZZ_MAX_PIECES);
    FUZZ_CHECK(nd <= FUZZ_MAX_PIECES);
    chime__table_stats_t a, b;
    chime__table_get_stats(t, &a);
    char why[256] = "";
    chime__table_stored_t zs = {
        q.stored_leaves, q.n_stored_leaves, q.stored, why, sizeof(why), NULL};
    uint64_t first = 0;
    /* A sequence table's steps go to a writer's episode. */
    static uint64_t seq;
    chime__dedupe_req_t dq = {.writer = 1, .seq = ++seq};
    int ins = chime__table_insert_stored(
        t, few, nd, q.count, ragged ? q.lengths : NULL, NULL, NULL, &first,
        NULL, tc->sequence_length > 0 ? &dq : NULL, 1, &zs);
    chime__table_get_stats(t, &b);
    FUZZ_CHECK(ins == 0 || ins == CHIME_EINVAL || ins == CHIME_ENOMEM);
    if (ins == CHIME_EINVAL) {
      FUZZ_CHECK(!good);
      FUZZ_CHECK(strstr(why, "leaf 'obs' of sample ") != NULL);
      FUZZ_CHECK(a.inserts == b.inserts && a.stored_bytes == b.stored_bytes &&
                 a.steps_inserted == b.steps_inserted);
    }
    if (ins == 0) {
      FUZZ_CHECK(good);
      if (tc->sequence_length > 0) { /* steps in; windows count inserts */
        FUZZ_CHECK(b.steps_inserted == a.steps_inserted + q.count);
      } else {
        FUZZ_CHECK(b.inserts == a.inserts + q.count);
        FUZZ_CHECK(b.size <= tc->capacity);
      }
    }
  }
  chime__insert_req_free(&q);
  fuzz_pieces_free(pieces, n);
  return 0;
}
