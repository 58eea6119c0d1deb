/* MutatePrioritiesRequest by hand (see mutatereq.h). */
#include "server/mutatereq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"

enum { F_TABLE = 1, F_UPDATES = 2, F_DELETES = 3 };
enum { U_KEY = 1, U_PRIORITY = 2 };

static int bad(char *err, size_t errlen, const char *what) {
  if (err != NULL && errlen > 0)
    snprintf(err, errlen, "%s", what);
  return CHIME_EPROTO;
}

/* One PriorityUpdate; key and priority when not NULL (0 when absent, a
 * field seen twice keeps its last value). */
static int read_update(const chime__pb_reader_t *r, const chime__pb_field_t *f,
                       uint64_t *key, double *priority) {
  chime__pb_reader_t sub;
  chime__pb_field_t g;
  uint64_t k = 0, bits = 0;
  int rc;
  if (chime__pb_reader_sub(&sub, r, f->offset, f->value) != 0)
    return CHIME_EPROTO;
  while ((rc = chime__pb_next(&sub, &g)) == 1) {
    if (g.number == U_KEY) {
      if (g.wire != CHIME__PB_VARINT)
        return CHIME_EPROTO;
      k = g.value;
    } else if (g.number == U_PRIORITY) {
      if (g.wire != CHIME__PB_I64)
        return CHIME_EPROTO;
      bits = g.value;
    }
  }
  if (rc != 0)
    return CHIME_EPROTO;
  if (key != NULL)
    *key = k;
  if (priority != NULL)
    memcpy(priority, &bits, sizeof(*priority));
  return 0;
}

/* Deletes in one field (a varint, or packed varints): counted into *n, and
 * stored from out[*n] on (below cap) when out is not NULL. */
static int read_deletes(const chime__pb_reader_t *r, const chime__pb_field_t *f,
                        uint64_t *out, size_t cap, size_t *n) {
  chime__pb_reader_t sub;
  uint64_t v;
  if (f->wire == CHIME__PB_VARINT) {
    if (out != NULL && *n >= cap)
      return CHIME_EPROTO;
    if (out != NULL)
      out[*n] = f->value;
    (*n)++;
    return 0;
  }
  if (f->wire != CHIME__PB_LEN ||
      chime__pb_reader_sub(&sub, r, f->offset, f->value) != 0)
    return CHIME_EPROTO;
  while (chime__pb_left(&sub) > 0) {
    if (chime__pb_varint(&sub, &v) != 0 || (out != NULL && *n >= cap))
      return CHIME_EPROTO;
    if (out != NULL)
      out[*n] = v;
    (*n)++;
  }
  return 0;
}

int chime__mutate_req_scan(chime__mutate_req_t *q, const chime__pb_reader_t *r,
                           char *err, size_t errlen) {
  chime__pb_reader_t rd = *r;
  chime__pb_field_t f;
  uint64_t table_at = 0, table_len = 0;
  int rc;
  memset(q, 0, sizeof(*q));
  while ((rc = chime__pb_next(&rd, &f)) == 1) {
    switch (f.number) {
    case F_TABLE:
      if (f.wire != CHIME__PB_LEN)
        return bad(err, errlen, "table is not a string");
      table_at = f.offset;
      table_len = f.value;
      break;
    case F_UPDATES:
      if (f.wire != CHIME__PB_LEN || read_update(&rd, &f, NULL, NULL) != 0)
        return bad(err, errlen, "malformed update");
      q->n_updates++;
      break;
    case F_DELETES:
      if (read_deletes(&rd, &f, NULL, 0, &q->n_deletes) != 0)
        return bad(err, errlen, "malformed deletes");
      break;
    default:
      break; /* unknown: already stepped over */
    }
  }
  if (rc != 0)
    return bad(err, errlen, "malformed protobuf");
  q->table_too_long = table_len > CHIME__MUTATE_TABLE_MAX;
  if (q->table_too_long)
    table_len = CHIME__MUTATE_TABLE_MAX;
  chime__pb_copy(&rd, table_at, q->table, table_len);
  q->table[table_len] = '\0';
  if (strlen(q->table) != table_len)
    return bad(err, errlen, "table name holds a NUL byte");
  return 0;
}

int chime__mutate_req_decode(chime__mutate_req_t *q,
                             const chime__pb_reader_t *r) {
  chime__pb_reader_t rd = *r;
  chime__pb_field_t f;
  size_t nu = 0, nd = 0;
  q->keys = malloc((q->n_updates ? q->n_updates : 1) * sizeof(*q->keys));
  q->priorities =
      malloc((q->n_updates ? q->n_updates : 1) * sizeof(*q->priorities));
  q->deletes = malloc((q->n_deletes ? q->n_deletes : 1) * sizeof(*q->deletes));
  if (q->keys == NULL || q->priorities == NULL || q->deletes == NULL)
    return CHIME_ENOMEM;
  /* The same bytes the scan checked and counted: nothing fails here
   * unless they changed. */
  while (chime__pb_next(&rd, &f) == 1) {
    if (f.number == F_UPDATES) {
      if (nu == q->n_updates ||
          read_update(&rd, &f, &q->keys[nu], &q->priorities[nu]) != 0)
        return CHIME_EPROTO;
      nu++;
    } else if (f.number == F_DELETES &&
               read_deletes(&rd, &f, q->deletes, q->n_deletes, &nd) != 0) {
      return CHIME_EPROTO;
    }
  }
  return nu == q->n_updates && nd == q->n_deletes ? 0 : CHIME_EPROTO;
}

void chime__mutate_req_free(chime__mutate_req_t *q) {
  free(q->keys);
  free(q->priorities);
  free(q->deletes);
  q->keys = NULL;
  q->priorities = NULL;
  q->deletes = NULL;
}
