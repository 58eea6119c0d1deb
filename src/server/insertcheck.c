/* Whether an Insert request fits its table: the writer's spec, leaf by
 * leaf, and the request's sizes, with the first difference named for the
 * writer (insertcheck.h). */
#include "server/insertcheck.h"

#include <stdio.h>
#include <string.h>

#include "common/errfmt.h"
#include "common/spec.h"
#include "wire/leaf.h"

/* The writer's leaves as a spec, up to the first one it got wrong (an
 * unknown dtype, too many dims): how many. A name too long for any table's
 * leaf is kept as "", which no leaf is named, so that it differs. */
static uint32_t writer_spec(chime_spec_t *ws, Chime__V1__Leaf **w, size_t nw) {
  uint32_t n = 0;
  for (; n < nw && n < CHIME_MAX_LEAVES; n++) {
    if (chime__leaf_from_msg(&ws->leaves[n], w[n]) != 0)
      break;
    if (w[n]->name != NULL && strlen(w[n]->name) >= CHIME_MAX_NAME)
      ws->leaves[n].name[0] = '\0';
  }
  ws->nleaves = n;
  return n;
}

/* The writer's belief about the spec, leaf by leaf; the first difference is
 * named. */
int chime__insert_check_spec(const chime__table_config_t *tc,
                             Chime__V1__Leaf **w, size_t nw, char *err,
                             size_t errlen) {
  const chime_spec_t *ts = &tc->spec;
  chime_spec_t ws;
  char tt[128], wt[128], pn[CHIME__PRINTABLE_LEN(64)];
  uint32_t i, valid = writer_spec(&ws, w, nw);
  chime__spec_diff_t d = chime__spec_diff(ts, &ws, &i);
  if (d == CHIME__SPEC_SAME && valid == nw)
    return 0;
  if (i >= valid && valid < nw) /* the first leaf it got wrong decides */
    d = valid >= ts->nleaves ? CHIME__SPEC_ONLY_B : CHIME__SPEC_TYPE;
  if (d == CHIME__SPEC_ONLY_B) {
    snprintf(err, errlen,
             "table '%s' has %u leaves; writer has %zu (extra leaf '%s')",
             tc->name, ts->nleaves, nw,
             chime__printable(pn, sizeof(pn), w[i]->name, 64));
    return CHIME_EINVAL;
  }
  const chime_leaf_t *tl = &ts->leaves[i];
  chime__leaf_type_text(tl, tt, sizeof(tt));
  if (d == CHIME__SPEC_ONLY_A) {
    snprintf(err, errlen,
             "leaf '%s': table '%s' expects %llu bytes (%s), writer has no "
             "such leaf (%zu leaves)",
             tl->name, tc->name, (unsigned long long)chime_leaf_bytes(tl), tt,
             nw);
    return CHIME_EINVAL;
  }
  if (i >= valid) {
    snprintf(err, errlen,
             "leaf '%s': table '%s' expects %s, writer has an invalid leaf "
             "(dtype '%s', %zu dims)",
             tl->name, tc->name, tt,
             chime__printable(pn, sizeof(pn), w[i]->dtype, 16), w[i]->n_shape);
    return CHIME_EINVAL;
  }
  const chime_leaf_t *wl = &ws.leaves[i];
  chime__leaf_type_text(wl, wt, sizeof(wt));
  uint64_t tb = chime_leaf_bytes(tl), wb = chime_leaf_bytes(wl);
  if (d == CHIME__SPEC_NAME)
    snprintf(err, errlen,
             "leaf %u: table '%s' expects '%s' (%s, %llu bytes), writer "
             "has '%s' (%s, %llu bytes)",
             i, tc->name, tl->name, tt, (unsigned long long)tb,
             chime__printable(pn, sizeof(pn), w[i]->name ? w[i]->name : "", 64),
             wt, (unsigned long long)wb);
  else
    snprintf(err, errlen,
             "leaf '%s': table '%s' expects %llu bytes (%s), writer has "
             "%llu bytes (%s)",
             tl->name, tc->name, (unsigned long long)tb, tt,
             (unsigned long long)wb, wt);
  return CHIME_EINVAL;
}

/* The leaf that holds byte `off` of a sample. */
static uint32_t leaf_at(const chime_spec_t *s, uint64_t off, uint64_t *start) {
  uint64_t pos = 0;
  for (uint32_t i = 0; i < s->nleaves; i++) {
    uint64_t b = chime_leaf_bytes(&s->leaves[i]);
    if (off < pos + b || i + 1 == s->nleaves) {
      *start = pos;
      return i;
    }
    pos += b;
  }
  *start = 0;
  return 0;
}

int chime__insert_check_size(const chime__table_config_t *tc, uint64_t sb,
                             uint32_t count, uint64_t len, char *err,
                             size_t errlen) {
  uint64_t want;
  char lt[128];
  uint64_t start;
  if (__builtin_mul_overflow((uint64_t)count, sb, &want) || want != len) {
    if (count == 0) {
      snprintf(err, errlen,
               "insert into '%s': count is 0 but data has %llu bytes "
               "(expected %llu bytes per sample)",
               tc->name, (unsigned long long)len, (unsigned long long)sb);
      return CHIME_EINVAL;
    }
    uint64_t per = len / count;
    if (len < want) {
      /* The first missing byte falls in some leaf of some sample. */
      uint64_t off = len % count == 0 ? per : len % sb;
      uint32_t l = leaf_at(&tc->spec, off, &start);
      chime__leaf_type_text(&tc->spec.leaves[l], lt, sizeof(lt));
      snprintf(err, errlen,
               "insert into '%s': leaf '%s' (%s, %llu bytes at offset %llu) "
               "does not fit: expected %llu bytes per sample, got %llu "
               "(%llu bytes for %u samples)",
               tc->name, tc->spec.leaves[l].name, lt,
               (unsigned long long)chime_leaf_bytes(&tc->spec.leaves[l]),
               (unsigned long long)start, (unsigned long long)sb,
               (unsigned long long)per, (unsigned long long)len, count);
    } else {
      uint32_t l = tc->spec.nleaves - 1;
      leaf_at(&tc->spec, sb - 1, &start);
      chime__leaf_type_text(&tc->spec.leaves[l], lt, sizeof(lt));
      snprintf(err, errlen,
               "insert into '%s': expected %llu bytes per sample ending with "
               "leaf '%s' (%s, %llu bytes at offset %llu), got %llu "
               "(%llu bytes for %u samples)",
               tc->name, (unsigned long long)sb, tc->spec.leaves[l].name, lt,
               (unsigned long long)chime_leaf_bytes(&tc->spec.leaves[l]),
               (unsigned long long)start, (unsigned long long)per,
               (unsigned long long)len, count);
    }
    return CHIME_EINVAL;
  }
  return 0;
}

int chime__insert_check_ragged(const chime__table_config_t *tc, uint32_t count,
                               const uint32_t *lengths, size_t n, uint64_t len,
                               char *err, size_t errlen) {
  uint32_t nrag = chime_spec_ragged(&tc->spec);
  uint64_t want;
  char why[256];
  if (nrag == 0 || tc->sequence_length > 0) {
    snprintf(err, errlen,
             "insert into '%s': lengths are for ragged leaves, and the table "
             "has none",
             tc->name);
    return CHIME_EINVAL;
  }
  if (n != (uint64_t)count * nrag) {
    snprintf(err, errlen,
             "insert into '%s': %zu lengths for %u samples of %u ragged "
             "leaves (expected %llu)",
             tc->name, n, count, nrag,
             (unsigned long long)((uint64_t)count * nrag));
    return CHIME_EINVAL;
  }
  /* A group table's groups first: their sizes are what a writer set. */
  for (uint32_t j = 0; tc->group_max > 0 && j < count; j++)
    if (chime__group_count_check(tc->group_max, lengths[(size_t)j * nrag], j,
                                 why, sizeof(why)) != 0) {
      snprintf(err, errlen, "insert into '%s': %s", tc->name, why);
      return CHIME_EINVAL;
    }
  int rc = chime__spec_ragged_bytes(&tc->spec, count, lengths, &want, why,
                                    sizeof(why));
  if (rc != 0) {
    snprintf(err, errlen, "insert into '%s': %s", tc->name, why);
    return CHIME_EINVAL;
  }
  if (want != len) {
    snprintf(err, errlen,
             "insert into '%s': %u samples at their ragged lengths take %llu "
             "bytes, got %llu",
             tc->name, count, (unsigned long long)want,
             (unsigned long long)len);
    return CHIME_EINVAL;
  }
  return 0;
}

/* Leaf l's raw bytes in sample j: a ragged leaf's at the sample's length
 * (its lengths checked there to be count of nrag each). */
static uint64_t leaf_raw(const chime_spec_t *s, const chime__insert_req_t *q,
                         uint32_t j, uint32_t l, uint32_t nrag) {
  const chime_leaf_t *lf = &s->leaves[l];
  if (!lf->ragged)
    return chime_leaf_bytes(lf);
  uint32_t k = 0;
  for (uint32_t i = 0; i < l; i++)
    k += s->leaves[i].ragged != 0;
  return (uint64_t)q->lengths[(size_t)j * nrag + k] * chime_leaf_row_bytes(lf);
}

/* The request's stored leaves against the table's compressed ones, and
 * what its data would take raw (*raw_len): each stored leaf's stored bytes
 * traded for the leaf's own (a ragged one's at the sample's length). */
static int check_stored(const chime__table_config_t *tc,
                        const chime__insert_req_t *q, uint64_t *raw_len,
                        char *err, size_t errlen) {
  const chime_spec_t *s = &tc->spec;
  uint32_t nrag = chime_spec_ragged(s);
  uint64_t sent = 0, raw = 0;
  for (size_t k = 0; k < q->n_stored_leaves; k++) {
    uint32_t l = q->stored_leaves[k];
    if (l >= s->nleaves || tc->compress[l] == 0 ||
        (k > 0 && l <= q->stored_leaves[k - 1])) {
      snprintf(err, errlen,
               "insert into '%s': stored_leaves names leaf %u%s%s%s: only the "
               "leaves the table compresses, each once, in spec order, may "
               "be sent stored",
               tc->name, l, l < s->nleaves ? " ('" : "",
               l < s->nleaves ? s->leaves[l].name : "",
               l < s->nleaves ? "')" : "");
      return CHIME_EINVAL;
    }
    if (s->leaves[l].ragged && q->n_lengths != (size_t)q->count * nrag) {
      snprintf(err, errlen,
               "insert into '%s': ragged leaf '%s' sent stored: %zu lengths "
               "for %u samples of %u ragged leaves",
               tc->name, s->leaves[l].name, q->n_lengths, q->count, nrag);
      return CHIME_EINVAL;
    }
  }
  for (uint32_t j = 0; j < q->count; j++)
    for (size_t k = 0; k < q->n_stored_leaves; k++) {
      const chime_leaf_t *lf = &s->leaves[q->stored_leaves[k]];
      uint32_t st = q->stored[(size_t)j * q->n_stored_leaves + k];
      uint64_t lb = leaf_raw(s, q, j, q->stored_leaves[k], nrag);
      if (st > lb) {
        snprintf(err, errlen,
                 "insert into '%s': leaf '%s' of sample %u: %u stored bytes, "
                 "more than the leaf's %llu%s",
                 tc->name, lf->name, j, st, (unsigned long long)lb,
                 lf->ragged ? " at its length" : "");
        return CHIME_EINVAL;
      }
      sent += st;
      if (__builtin_add_overflow(raw, lb, &raw)) {
        snprintf(err, errlen, "insert into '%s': %u samples past any size",
                 tc->name, q->count);
        return CHIME_EINVAL;
      }
    }
  if (sent > q->data_len) {
    snprintf(err, errlen,
             "insert into '%s': the stored leaves take %llu bytes, more than "
             "the request's %llu",
             tc->name, (unsigned long long)sent,
             (unsigned long long)q->data_len);
    return CHIME_EINVAL;
  }
  if (__builtin_add_overflow(q->data_len - sent, raw, raw_len)) {
    snprintf(err, errlen, "insert into '%s': %u samples past any size",
             tc->name, q->count);
    return CHIME_EINVAL;
  }
  return 0;
}

int chime__insert_check_data(const chime__table_config_t *tc, uint64_t sb,
                             const chime__insert_req_t *q, char *err,
                             size_t errlen) {
  uint64_t len = q->data_len;
  if (q->n_stored_leaves > 0 && check_stored(tc, q, &len, err, errlen) != 0)
    return CHIME_EINVAL;
  if (q->n_lengths > 0 || chime_spec_ragged(&tc->spec) > 0)
    return chime__insert_check_ragged(tc, q->count, q->lengths, q->n_lengths,
                                      len, err, errlen);
  return chime__insert_check_size(tc, sb, q->count, len, err, errlen);
}
