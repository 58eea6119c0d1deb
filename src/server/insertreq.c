/* InsertRequest by hand (see insertreq.h). Protobuf rules: a repeated
 * scalar field may come packed or not (and both), a singular field seen
 * twice keeps its last value, unknown fields are skipped; a known field
 * with another wire type is malformed, as protobuf-c has it. */
#include "server/insertreq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"

enum {
  F_TABLE = 1,
  F_COUNT = 2,
  F_DATA = 3,
  F_PRIORITIES = 4,
  F_ID = 5,
  F_SPEC = 6,
  F_WRITER_ID = 7,
  F_END_EPISODE = 8,
  F_LENGTHS = 9,
  F_VERSIONS = 10,
  F_STORED_LEAVES = 11,
  F_STORED = 12,
  F_WARM_START = 13,
  F_HEARTBEAT_MS = 71,
};

static int bad(char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "%s", what);
  return CHIME_EPROTO;
}

static int want_wire(const chime__pb_field_t *f, int wire, char *err,
                     size_t errlen) {
  if (f->wire == wire)
    return 0;
  snprintf(err, errlen, "field %u has wire type %d, expected %d", f->number,
           f->wire, wire);
  return CHIME_EPROTO;
}

static int read_leaf(chime__insert_req_t *q, const chime__pb_reader_t *r,
                     uint64_t offset, uint64_t len, char *err, size_t errlen) {
  uint8_t buf[CHIME__INSERT_LEAF_MAX];
  if (chime__pb_copy(r, offset, buf, len) != 0)
    return bad(err, errlen, "spec leaf outside the message");
  Chime__V1__Leaf *leaf = chime__v1__leaf__unpack(NULL, (size_t)len, buf);
  if (leaf == NULL)
    return bad(err, errlen, "malformed spec leaf");
  q->spec[q->n_spec++] = leaf;
  return 0;
}

/* Priorities, counted on the first pass (out NULL) and decoded on the
 * second. */
static int read_priorities(const chime__pb_reader_t *r,
                           const chime__pb_field_t *f, double *out, size_t *n) {
  uint64_t bits;
  if (f->wire == CHIME__PB_I64) {
    if (out != NULL)
      memcpy(&out[*n], &f->value, sizeof(double));
    (*n)++;
    return 0;
  }
  if (f->wire != CHIME__PB_LEN || f->value % 8 != 0)
    return CHIME_EPROTO;
  if (out == NULL) {
    *n += (size_t)(f->value / 8);
    return 0;
  }
  chime__pb_reader_t sub;
  if (chime__pb_reader_sub(&sub, r, f->offset, f->value) != 0)
    return CHIME_EPROTO;
  while (chime__pb_left(&sub) > 0) {
    if (chime__pb_fixed64(&sub, &bits) != 0)
      return CHIME_EPROTO;
    memcpy(&out[*n], &bits, sizeof(double));
    (*n)++;
  }
  return 0;
}

/* Stores v as out[i], a uint32_t array (width 4) or a uint64_t one. */
static void put_uint(void *out, size_t width, size_t i, uint64_t v) {
  if (width == sizeof(uint32_t))
    ((uint32_t *)out)[i] = (uint32_t)v;
  else
    ((uint64_t *)out)[i] = v;
}

/* Repeated varints (packed or not), each at most max, into out (width
 * bytes each: the lengths are uint32, the versions uint64): counted on the
 * first pass (out NULL) and stored on the second. A value past max is
 * malformed, not cut. */
static int read_varints(const chime__pb_reader_t *r, const chime__pb_field_t *f,
                        void *out, size_t width, uint64_t max, size_t *n) {
  if (f->wire == CHIME__PB_VARINT) {
    if (f->value > max)
      return CHIME_EPROTO;
    if (out != NULL)
      put_uint(out, width, *n, f->value);
    (*n)++;
    return 0;
  }
  if (f->wire != CHIME__PB_LEN)
    return CHIME_EPROTO;
  chime__pb_reader_t sub;
  if (chime__pb_reader_sub(&sub, r, f->offset, f->value) != 0)
    return CHIME_EPROTO;
  while (chime__pb_left(&sub) > 0) {
    uint64_t v;
    if (chime__pb_varint(&sub, &v) != 0 || v > max)
      return CHIME_EPROTO;
    if (out != NULL)
      put_uint(out, width, *n, v);
    (*n)++;
  }
  return 0;
}

/* The repeated fields' counts (versions nver, lengths nlen, stored leaves
 * nsl and their sizes nst) against the request's count and data, before
 * anything is decoded: 0 or CHIME_EPROTO with err filled. */
static int check_counts(const chime__insert_req_t *q, size_t nlen, size_t nver,
                        size_t nsl, size_t nst, char *err, size_t errlen) {
  /* Counts that fit no table are refused before anything is allocated (a
   * 60 MB run of versions for one sample took 480 MB): versions none, one
   * or count; lengths a whole number of at most CHIME_MAX_LEAVES per
   * sample; and no more samples than one data byte or one length each
   * (every leaf of a sample has bytes, a ragged one its length), so that
   * what is decoded stays within a few times the message. */
  if (nver > 1 && nver != q->count) {
    snprintf(err, errlen,
             "%zu versions for %u samples (send none, one for all, or one "
             "per sample)",
             nver, q->count);
    return CHIME_EPROTO;
  }
  if (nlen > 0 && (q->count == 0 || nlen % q->count != 0 ||
                   nlen / q->count > CHIME_MAX_LEAVES)) {
    snprintf(err, errlen,
             "%zu lengths for %u samples (one per ragged leaf of each, at "
             "most %d leaves)",
             nlen, q->count, CHIME_MAX_LEAVES);
    return CHIME_EPROTO;
  }
  if (nver > 1 && (uint64_t)q->count > q->data_len + nlen) {
    snprintf(err, errlen,
             "%u samples in %llu data bytes and %zu lengths: each sample "
             "has at least one of either",
             q->count, (unsigned long long)q->data_len, nlen);
    return CHIME_EPROTO;
  }
  /* Stored leaves: at most one entry per leaf a table has, and sizes for
   * exactly those of each sample (each size costs at least a byte of the
   * message, so they too stay within a few times the message). */
  if (nsl > CHIME_MAX_LEAVES || (uint64_t)q->count * nsl != nst) {
    snprintf(err, errlen,
             "%zu stored sizes for %u samples of %zu stored leaves (one per "
             "stored leaf of each, at most %d leaves)",
             nst, q->count, nsl, CHIME_MAX_LEAVES);
    return CHIME_EPROTO;
  }
  return 0;
}

/* The first pass only notes where the table name and the spec's leaves
 * are and checks their sizes: a field costs the same however often it
 * comes (a singular one keeps its last value), and a spec of more leaves
 * than any table has is refused at the first one too many, before any is
 * decoded (a 50 MB spec of empty leaves took 4 s of CPU, one protobuf-c
 * unpack each). The table name and at most CHIME_MAX_LEAVES leaves are
 * read afterwards. */
/* The second pass: the packed arrays, into q's arrays sized by the
 * first. */
static int read_arrays(chime__insert_req_t *q, chime__pb_reader_t *r, char *err,
                       size_t errlen) {
  chime__pb_field_t f;
  while (chime__pb_next(r, &f) == 1) {
    if (f.number == F_PRIORITIES &&
        read_priorities(r, &f, q->priorities, &q->n_priorities) != 0)
      return bad(err, errlen, "malformed priorities");
    if (f.number == F_LENGTHS &&
        read_varints(r, &f, q->lengths, sizeof(uint32_t), UINT32_MAX,
                     &q->n_lengths) != 0)
      return bad(err, errlen, "malformed lengths");
    if (f.number == F_VERSIONS &&
        read_varints(r, &f, q->versions, sizeof(uint64_t), UINT64_MAX,
                     &q->n_versions) != 0)
      return bad(err, errlen, "malformed versions");
    if (f.number == F_STORED_LEAVES &&
        read_varints(r, &f, q->stored_leaves, sizeof(uint32_t),
                     CHIME_MAX_LEAVES - 1, &q->n_stored_leaves) != 0)
      return bad(err, errlen, "malformed stored_leaves");
    if (f.number == F_STORED && read_varints(r, &f, q->stored, sizeof(uint32_t),
                                             UINT32_MAX, &q->n_stored) != 0)
      return bad(err, errlen, "malformed stored");
  }
  return 0;
}

int chime__insert_req_parse(chime__insert_req_t *q, chime__pb_reader_t *r,
                            char *err, size_t errlen) {
  chime__pb_reader_t start = *r;
  chime__pb_field_t f;
  int rc;
  size_t nprio = 0, nleaves = 0, nlen = 0, nver = 0, nsl = 0, nst = 0;
  uint64_t table_at = 0, table_len = 0;
  uint64_t leaf_at[CHIME_MAX_LEAVES], leaf_len[CHIME_MAX_LEAVES];
  memset(q, 0, sizeof(*q));
  while ((rc = chime__pb_next(r, &f)) == 1) {
    switch (f.number) {
    case F_TABLE:
      if ((rc = want_wire(&f, CHIME__PB_LEN, err, errlen)) != 0)
        return rc;
      table_at = f.offset;
      table_len = f.value;
      break;
    case F_COUNT:
      if ((rc = want_wire(&f, CHIME__PB_VARINT, err, errlen)) != 0)
        return rc;
      q->count = (uint32_t)f.value; /* uint32: the low 32 bits */
      break;
    case F_DATA:
      if ((rc = want_wire(&f, CHIME__PB_LEN, err, errlen)) != 0)
        return rc;
      q->data_offset = f.offset;
      q->data_len = f.value;
      break;
    case F_PRIORITIES:
      if (read_priorities(r, &f, NULL, &nprio) != 0)
        return bad(err, errlen, "malformed priorities");
      break;
    case F_VERSIONS:
      if (read_varints(r, &f, NULL, sizeof(uint64_t), UINT64_MAX, &nver) != 0)
        return bad(err, errlen, "malformed versions");
      break;
    case F_ID:
      if ((rc = want_wire(&f, CHIME__PB_VARINT, err, errlen)) != 0)
        return rc;
      q->id = f.value;
      break;
    case F_WRITER_ID:
      if ((rc = want_wire(&f, CHIME__PB_I64, err, errlen)) != 0)
        return rc;
      q->writer_id = f.value;
      break;
    case F_END_EPISODE:
      if ((rc = want_wire(&f, CHIME__PB_VARINT, err, errlen)) != 0)
        return rc;
      q->end_episode = f.value != 0;
      break;
    case F_WARM_START:
      if ((rc = want_wire(&f, CHIME__PB_VARINT, err, errlen)) != 0)
        return rc;
      q->warm_start = f.value != 0;
      break;
    case F_HEARTBEAT_MS:
      if ((rc = want_wire(&f, CHIME__PB_VARINT, err, errlen)) != 0)
        return rc;
      q->heartbeat_ms = f.value > UINT32_MAX ? UINT32_MAX : (uint32_t)f.value;
      break;
    case F_LENGTHS:
      if (read_varints(r, &f, NULL, sizeof(uint32_t), UINT32_MAX, &nlen) != 0)
        return bad(err, errlen, "malformed lengths");
      break;
    case F_STORED_LEAVES:
      if (read_varints(r, &f, NULL, sizeof(uint32_t), CHIME_MAX_LEAVES - 1,
                       &nsl) != 0)
        return bad(err, errlen, "malformed stored_leaves");
      break;
    case F_STORED:
      if (read_varints(r, &f, NULL, sizeof(uint32_t), UINT32_MAX, &nst) != 0)
        return bad(err, errlen, "malformed stored");
      break;
    case F_SPEC:
      if ((rc = want_wire(&f, CHIME__PB_LEN, err, errlen)) != 0)
        return rc;
      if (f.value > CHIME__INSERT_LEAF_MAX)
        return bad(err, errlen, "spec leaf larger than 4096 bytes");
      if (nleaves == CHIME_MAX_LEAVES) {
        snprintf(err, errlen,
                 "spec of more than %d leaves (a table has at most %d)",
                 CHIME_MAX_LEAVES, CHIME_MAX_LEAVES);
        return CHIME_EPROTO;
      }
      leaf_at[nleaves] = f.offset;
      leaf_len[nleaves++] = f.value;
      break;
    default:
      break; /* unknown: already stepped over */
    }
  }
  if (rc != 0)
    return bad(err, errlen, "malformed protobuf");
  q->table_too_long = table_len > CHIME__INSERT_TABLE_MAX;
  if (q->table_too_long)
    table_len = CHIME__INSERT_TABLE_MAX;
  chime__pb_copy(r, table_at, q->table, table_len);
  q->table[table_len] = '\0';
  if (strlen(q->table) != table_len)
    return bad(err, errlen, "table name holds a NUL byte");
  for (size_t i = 0; i < nleaves; i++)
    if ((rc = read_leaf(q, r, leaf_at[i], leaf_len[i], err, errlen)) != 0)
      return rc;
  if (nprio == 0 && nlen == 0 && nver == 0 && nsl == 0 && nst == 0)
    return 0;
  if ((rc = check_counts(q, nlen, nver, nsl, nst, err, errlen)) != 0)
    return rc;
  if ((nprio > 0 && (q->priorities = malloc(nprio * sizeof(double))) == NULL) ||
      (nlen > 0 && (q->lengths = malloc(nlen * sizeof(uint32_t))) == NULL) ||
      (nver > 0 && (q->versions = malloc(nver * sizeof(uint64_t))) == NULL) ||
      (nsl > 0 &&
       (q->stored_leaves = malloc(nsl * sizeof(uint32_t))) == NULL) ||
      (nst > 0 && (q->stored = malloc(nst * sizeof(uint32_t))) == NULL))
    return CHIME_ENOMEM;
  *r = start;
  return read_arrays(q, r, err, errlen);
}

void chime__insert_req_free(chime__insert_req_t *q) {
  for (size_t i = 0; i < q->n_spec; i++)
    chime__v1__leaf__free_unpacked(q->spec[i], NULL);
  free(q->priorities);
  free(q->lengths);
  free(q->versions);
  free(q->stored_leaves);
  free(q->stored);
  memset(q, 0, sizeof(*q));
}
