/* libFuzzer target: an InsertRequest as the server reads it (src/common/
 * pbread.c + src/server/insertreq.c), from bytes cut into pieces the way
 * gRPC hands a message over.
 *
 * Input: [n][n piece lengths][message] (see fuzz_common.h).
 *
 * Beyond "no crash": the result must not depend on how the message was cut,
 * the data field must lie inside the message and read back byte for byte
 * through the pieces, and a request the reader accepts must be one
 * protobuf-c accepts with the same values, priorities and policy versions
 * and stored leaves included (the reader is allowed to be
 * stricter, never looser). */
#include <stdint.h>
#include <string.h>

#include "chime.pb-c.h"
#include "chime/errors.h"
#include "wire/pbread.h"
#include "fuzz_common.h"
#include "server/insertreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int parse(chime__insert_req_t *q, const chime__span_t *spans,
                 size_t nspans) {
  chime__pb_reader_t r;
  char err[256];
  chime__pb_reader_init(&r, spans, nspans);
  int rc = chime__insert_req_parse(q, &r, err, sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == CHIME_EPROTO || rc == CHIME_ENOMEM);
  return rc;
}

/* The data field, read through the pieces two ways, is the message's bytes. */
static void check_data(const chime__insert_req_t *q, const uint8_t *msg,
                       size_t len, const chime__span_t *spans, size_t nspans) {
  chime__pb_reader_t r;
  chime__pb_reader_init(&r, spans, nspans);
  FUZZ_CHECK(q->data_offset <= len && q->data_len <= len - q->data_offset);
  const uint8_t *want = msg + q->data_offset;

  uint8_t *copy = malloc(q->data_len ? q->data_len : 1);
  FUZZ_CHECK(copy != NULL);
  FUZZ_CHECK(chime__pb_copy(&r, q->data_offset, copy, q->data_len) == 0);
  FUZZ_CHECK(memcmp(copy, want, q->data_len) == 0);
  free(copy);

  size_t n = chime__pb_spans(&r, q->data_offset, q->data_len, NULL, 0);
  FUZZ_CHECK(n <= nspans);
  chime__span_t *parts = malloc((n ? n : 1) * sizeof(*parts));
  FUZZ_CHECK(parts != NULL);
  FUZZ_CHECK(chime__pb_spans(&r, q->data_offset, q->data_len, parts, n) == n);
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    FUZZ_CHECK(parts[i].len > 0 && parts[i].len <= q->data_len - at);
    FUZZ_CHECK(memcmp(parts[i].p, want + at, parts[i].len) == 0);
    at += parts[i].len;
  }
  FUZZ_CHECK(at == q->data_len);
  free(parts);
}

static void check_same(const chime__insert_req_t *a,
                       const chime__insert_req_t *b) {
  FUZZ_CHECK(strcmp(a->table, b->table) == 0);
  FUZZ_CHECK(a->table_too_long == b->table_too_long);
  FUZZ_CHECK(a->count == b->count && a->id == b->id);
  FUZZ_CHECK(a->data_offset == b->data_offset && a->data_len == b->data_len);
  FUZZ_CHECK(a->n_priorities == b->n_priorities && a->n_spec == b->n_spec);
  FUZZ_CHECK(a->n_priorities == 0 ||
             memcmp(a->priorities, b->priorities,
                    a->n_priorities * sizeof(double)) == 0);
  FUZZ_CHECK(a->n_lengths == b->n_lengths);
  FUZZ_CHECK(a->n_lengths == 0 || memcmp(a->lengths, b->lengths,
                                         a->n_lengths * sizeof(uint32_t)) == 0);
  FUZZ_CHECK(a->n_versions == b->n_versions);
  FUZZ_CHECK(
      a->n_versions == 0 ||
      memcmp(a->versions, b->versions, a->n_versions * sizeof(uint64_t)) == 0);
  FUZZ_CHECK(a->n_stored_leaves == b->n_stored_leaves &&
             a->n_stored == b->n_stored);
  FUZZ_CHECK(a->n_stored_leaves == 0 ||
             memcmp(a->stored_leaves, b->stored_leaves,
                    a->n_stored_leaves * sizeof(uint32_t)) == 0);
  FUZZ_CHECK(a->n_stored == 0 ||
             memcmp(a->stored, b->stored, a->n_stored * sizeof(uint32_t)) == 0);
}

/* What protobuf-c makes of the same bytes. */
static void check_protobuf_c(const chime__insert_req_t *q, const uint8_t *msg,
                             size_t len) {
  Chime__V1__InsertRequest *m =
      chime__v1__insert_request__unpack(NULL, len, msg);
  FUZZ_CHECK(m != NULL);
  if (!q->table_too_long)
    FUZZ_CHECK(strcmp(q->table, m->table) == 0);
  FUZZ_CHECK(q->count == m->count && q->id == m->id);
  FUZZ_CHECK(q->writer_id == m->writer_id);
  FUZZ_CHECK(q->data_len == m->data.len);
  FUZZ_CHECK(m->data.len == 0 ||
             memcmp(msg + q->data_offset, m->data.data, m->data.len) == 0);
  FUZZ_CHECK(q->n_priorities == m->n_priorities);
  FUZZ_CHECK(q->n_priorities == 0 ||
             memcmp(q->priorities, m->priorities,
                    q->n_priorities * sizeof(double)) == 0);
  FUZZ_CHECK(q->n_spec == m->n_spec);
  /* A length past 32 bits we refuse, so every one here fits both. */
  FUZZ_CHECK(q->n_lengths == m->n_lengths);
  FUZZ_CHECK(q->n_lengths == 0 || memcmp(q->lengths, m->lengths,
                                         q->n_lengths * sizeof(uint32_t)) == 0);
  FUZZ_CHECK(q->n_versions == m->n_versions);
  FUZZ_CHECK(
      q->n_versions == 0 ||
      memcmp(q->versions, m->versions, q->n_versions * sizeof(uint64_t)) == 0);
  /* Stored leaves and sizes: ours are at most 63 and 32 bits, refused
   * past that, so every one here fits protobuf-c's uint32 alike. */
  FUZZ_CHECK(q->n_stored_leaves == m->n_stored_leaves);
  FUZZ_CHECK(q->n_stored_leaves == 0 ||
             memcmp(q->stored_leaves, m->stored_leaves,
                    q->n_stored_leaves * sizeof(uint32_t)) == 0);
  FUZZ_CHECK(q->n_stored == m->n_stored);
  FUZZ_CHECK(q->n_stored == 0 ||
             memcmp(q->stored, m->stored, q->n_stored * sizeof(uint32_t)) == 0);
  chime__v1__insert_request__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_piece_t pieces[FUZZ_MAX_PIECES];
  chime__span_t spans[FUZZ_MAX_PIECES];
  const uint8_t *msg;
  size_t len, n = fuzz_message(data, size, pieces, spans, &msg, &len);
  if (n == 0)
    return 0;

  chime__insert_req_t cut, whole;
  int rc = parse(&cut, spans, n);
  /* The same bytes in one piece. */
  uint8_t *flat = malloc(len ? len : 1);
  FUZZ_CHECK(flat != NULL);
  memcpy(flat, msg, len);
  chime__span_t one = {flat, len};
  int rc_whole = parse(&whole, &one, 1);
  if (rc != CHIME_ENOMEM && rc_whole != CHIME_ENOMEM)
    FUZZ_CHECK(rc == rc_whole);
  if (rc == 0 && rc_whole == 0) {
    check_same(&cut, &whole);
    check_data(&cut, flat, len, spans, n);
    check_protobuf_c(&cut, flat, len);
  }
  chime__insert_req_free(&cut);
  chime__insert_req_free(&whole);
  free(flat);
  fuzz_pieces_free(pieces, n);
  return 0;
}
