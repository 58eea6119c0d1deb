/* Specs: leaves, dtypes, sizes, and the "name:dtype[dims], ..." text form.
 *
 * Specs come from config files, protobuf messages and ring headers, so every
 * entry point treats its input as untrusted: names are bounded and checked,
 * every size product is overflow-checked, and errors name the leaf. */
#include <stdio.h>
#include <string.h>

#include "chime/spec.h"
#include "common/detail.h"
#include "common/errfmt.h"
#include "common/spec.h"

const char *chime_dtype_name(chime_dtype_t dtype) {
  switch (dtype) {
#define CHIME__DTYPE_NAME(name, value, str, size)                              \
  case CHIME_DTYPE_##name:                                                     \
    return str;
    CHIME_DTYPE_MAP(CHIME__DTYPE_NAME)
#undef CHIME__DTYPE_NAME
  default:
    break;
  }
  return "invalid";
}

size_t chime_dtype_size(chime_dtype_t dtype) {
  switch (dtype) {
#define CHIME__DTYPE_SIZE(name, value, str, size)                              \
  case CHIME_DTYPE_##name:                                                     \
    return size;
    CHIME_DTYPE_MAP(CHIME__DTYPE_SIZE)
#undef CHIME__DTYPE_SIZE
  default:
    break;
  }
  return 0;
}

chime_dtype_t chime_dtype_from_name(const char *name) {
  if (name == NULL)
    return CHIME_DTYPE_INVALID;
#define CHIME__DTYPE_FROM(n, value, str, size)                                 \
  if (strcmp(name, str) == 0)                                                  \
    return CHIME_DTYPE_##n;
  CHIME_DTYPE_MAP(CHIME__DTYPE_FROM)
#undef CHIME__DTYPE_FROM
  return CHIME_DTYPE_INVALID;
}

static int mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_mul_overflow(a, b, out) ? CHIME_EOVERFLOW : 0;
}

/* 0 when the leaf is malformed or its size does not fit in 64 bits. */
uint64_t chime_leaf_bytes(const chime_leaf_t *leaf) {
  uint64_t bytes;
  if (leaf == NULL || leaf->ndim > CHIME_MAX_DIMS)
    return 0;
  bytes = chime_dtype_size(leaf->dtype);
  for (uint32_t d = 0; d < leaf->ndim && bytes != 0; d++) {
    if (leaf->shape[d] == 0 || mul_u64(bytes, leaf->shape[d], &bytes) != 0)
      return 0;
  }
  return bytes;
}

uint64_t chime_leaf_row_bytes(const chime_leaf_t *leaf) {
  uint64_t bytes = chime_leaf_bytes(leaf);
  if (bytes == 0 || leaf->ndim == 0)
    return 0;
  return bytes / leaf->shape[0];
}

uint32_t chime_spec_ragged(const chime_spec_t *spec) {
  uint32_t n = 0;
  if (spec == NULL || spec->nleaves > CHIME_MAX_LEAVES)
    return 0;
  for (uint32_t i = 0; i < spec->nleaves; i++)
    n += spec->leaves[i].ragged != 0;
  return n;
}

uint64_t chime_spec_sample_bytes(const chime_spec_t *spec) {
  uint64_t total = 0;
  if (spec == NULL || spec->nleaves == 0 || spec->nleaves > CHIME_MAX_LEAVES)
    return 0;
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    uint64_t b = chime_leaf_bytes(&spec->leaves[i]);
    if (b == 0 || __builtin_add_overflow(total, b, &total))
      return 0;
  }
  return total;
}

static int name_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '/' || c == '-';
}

/* Names may come from a ring header or a message: never assume a NUL. */
static int name_check(const char *name, char *err, size_t errlen,
                      uint32_t index) {
  size_t len = strnlen(name, CHIME_MAX_NAME);
  if (len == 0) {
    chime__errf(err, errlen, "leaf %u: empty name", index);
    return CHIME_EINVAL;
  }
  if (len == CHIME_MAX_NAME) {
    chime__errf(err, errlen, "leaf %u: name longer than %d bytes", index,
                CHIME_MAX_NAME - 1);
    return CHIME_EINVAL;
  }
  for (size_t i = 0; i < len; i++) {
    if (!name_char_ok(name[i])) {
      chime__errf(err, errlen,
                  "leaf '%s': illegal character in name (allowed: "
                  "A-Z a-z 0-9 _ . / -)",
                  name);
      return CHIME_EINVAL;
    }
  }
  return 0;
}

/* A ragged leaf varies in its first dimension only, so it has one; a
 * shared length points at the leaf that owns it (an earlier ragged one
 * that shares none, of the same bound), so checking a sample's lengths
 * is one comparison per leaf. */
static int ragged_check(const chime_spec_t *spec, uint32_t i, char *err,
                        size_t errlen) {
  const chime_leaf_t *leaf = &spec->leaves[i];
  if (leaf->ragged > 1) {
    chime__errf(err, errlen, "leaf '%s': ragged is %u, not 0 or 1", leaf->name,
                leaf->ragged);
    return CHIME_EINVAL;
  }
  if (leaf->ragged && leaf->ndim == 0) {
    chime__errf(err, errlen,
                "leaf '%s': a ragged leaf needs a first dimension (its bound)",
                leaf->name);
    return CHIME_EINVAL;
  }
  if (leaf->shares == 0)
    return 0;
  if (!leaf->ragged) {
    chime__errf(err, errlen,
                "leaf '%s': only a ragged leaf shares another's length",
                leaf->name);
    return CHIME_EINVAL;
  }
  if (leaf->shares > i) {
    chime__errf(err, errlen,
                "leaf '%s': shares the length of leaf %u, not an earlier one",
                leaf->name, leaf->shares - 1);
    return CHIME_EINVAL;
  }
  const chime_leaf_t *own = &spec->leaves[leaf->shares - 1];
  if (!own->ragged || own->shares != 0) {
    chime__errf(err, errlen, "leaf '%s': shares the length of '%s', which %s",
                leaf->name, own->name,
                own->ragged ? "shares another's" : "is not ragged");
    return CHIME_EINVAL;
  }
  if (own->shape[0] != leaf->shape[0]) {
    chime__errf(err, errlen,
                "leaf '%s': bound %llu differs from '%s''s %llu, whose length "
                "it shares",
                leaf->name, (unsigned long long)leaf->shape[0], own->name,
                (unsigned long long)own->shape[0]);
    return CHIME_EINVAL;
  }
  return 0;
}

int chime__spec_validate(const chime_spec_t *spec, char *err, size_t errlen) {
  uint64_t total = 0;
  if (spec == NULL) {
    chime__errf(err, errlen, "no spec");
    return CHIME_EINVAL;
  }
  if (spec->nleaves == 0) {
    chime__errf(err, errlen, "empty spec: at least one leaf is needed");
    return CHIME_EINVAL;
  }
  if (spec->nleaves > CHIME_MAX_LEAVES) {
    chime__errf(err, errlen, "spec has %u leaves, at most %d allowed",
                spec->nleaves, CHIME_MAX_LEAVES);
    return CHIME_EINVAL;
  }
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    const chime_leaf_t *leaf = &spec->leaves[i];
    uint64_t bytes;
    int rc = name_check(leaf->name, err, errlen, i);
    if (rc != 0)
      return rc;
    for (uint32_t j = 0; j < i; j++) {
      if (strncmp(spec->leaves[j].name, leaf->name, CHIME_MAX_NAME) == 0) {
        chime__errf(err, errlen, "leaf '%s': duplicate name", leaf->name);
        return CHIME_EINVAL;
      }
    }
    if (chime_dtype_size(leaf->dtype) == 0) {
      chime__errf(err, errlen, "leaf '%s': unknown dtype %d", leaf->name,
                  (int)leaf->dtype);
      return CHIME_EINVAL;
    }
    if (leaf->ndim > CHIME_MAX_DIMS) {
      chime__errf(err, errlen, "leaf '%s': %u dims, at most %d allowed",
                  leaf->name, leaf->ndim, CHIME_MAX_DIMS);
      return CHIME_EINVAL;
    }
    for (uint32_t d = 0; d < leaf->ndim; d++) {
      if (leaf->shape[d] == 0) {
        chime__errf(err, errlen, "leaf '%s': dimension %u is zero", leaf->name,
                    d);
        return CHIME_EINVAL;
      }
    }
    rc = ragged_check(spec, i, err, errlen);
    if (rc != 0)
      return rc;
    bytes = chime_leaf_bytes(leaf);
    if (bytes == 0 || __builtin_add_overflow(total, bytes, &total)) {
      chime__errf(err, errlen, "leaf '%s': size overflows 64 bits", leaf->name);
      return CHIME_EINVAL;
    }
  }
  return 0;
}

/* --- parsing --- */

typedef struct {
  const char *p;
  char *err;
  size_t errlen;
} parser_t;

static void skip_ws(parser_t *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
    ps->p++;
}

/* Copies a token of name characters (or dtype letters) into buf. */
static size_t take_token(parser_t *ps, char *buf, size_t cap) {
  size_t n = 0;
  while (name_char_ok(*ps->p)) {
    if (n + 1 < cap)
      buf[n] = *ps->p;
    n++;
    ps->p++;
  }
  if (cap > 0)
    buf[n < cap ? n : cap - 1] = '\0';
  return n;
}

static int parse_dim(parser_t *ps, const char *leaf, uint64_t *out) {
  uint64_t v = 0;
  int digits = 0;
  while (*ps->p >= '0' && *ps->p <= '9') {
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, (uint64_t)(*ps->p - '0'), &v)) {
      chime__errf(ps->err, ps->errlen, "leaf '%s': dimension overflows 64 bits",
                  leaf);
      return CHIME_EINVAL;
    }
    digits++;
    ps->p++;
  }
  if (digits == 0) {
    chime__errf(ps->err, ps->errlen,
                "leaf '%s': expected a dimension at '%.16s'", leaf, ps->p);
    return CHIME_EINVAL;
  }
  if (v == 0) {
    chime__errf(ps->err, ps->errlen, "leaf '%s': dimension is zero", leaf);
    return CHIME_EINVAL;
  }
  *out = v;
  return 0;
}

/* "~name" at the end of a ragged leaf's shape: the earlier leaf whose
 * length it shares, followed to the one that owns the length. */
static int parse_shares(parser_t *ps, const chime_spec_t *spec,
                        chime_leaf_t *leaf) {
  char other[CHIME_MAX_NAME];
  size_t n;
  ps->p++; /* '~' */
  skip_ws(ps);
  n = take_token(ps, other, sizeof(other));
  if (!leaf->ragged) {
    chime__errf(ps->err, ps->errlen,
                "leaf '%s': only a ragged leaf ([<=N]) shares another's length",
                leaf->name);
    return CHIME_EINVAL;
  }
  for (uint32_t j = 0; n > 0 && n < sizeof(other) && j + 1 < spec->nleaves;
       j++) {
    if (strcmp(spec->leaves[j].name, other) != 0)
      continue;
    const chime_leaf_t *own = &spec->leaves[j];
    leaf->shares = own->shares != 0 ? own->shares : j + 1;
    return 0;
  }
  chime__errf(ps->err, ps->errlen,
              "leaf '%s': shares the length of '%s', which is no earlier leaf",
              leaf->name, other);
  return CHIME_EINVAL;
}

static int parse_shape(parser_t *ps, chime_spec_t *spec, chime_leaf_t *leaf) {
  skip_ws(ps);
  if (*ps->p != '[')
    return 0; /* a scalar: "r:f32" */
  ps->p++;
  skip_ws(ps);
  if (*ps->p == ']') {
    ps->p++;
    return 0;
  }
  for (;;) {
    uint64_t dim;
    int rc;
    skip_ws(ps);
    if (leaf->ndim == CHIME_MAX_DIMS) {
      chime__errf(ps->err, ps->errlen, "leaf '%s': more than %d dims",
                  leaf->name, CHIME_MAX_DIMS);
      return CHIME_EINVAL;
    }
    if (ps->p[0] == '<' && ps->p[1] == '=') {
      if (leaf->ndim > 0) {
        chime__errf(ps->err, ps->errlen,
                    "leaf '%s': only the first dimension may be ragged (<=)",
                    leaf->name);
        return CHIME_EINVAL;
      }
      leaf->ragged = 1;
      ps->p += 2;
      skip_ws(ps);
    }
    rc = parse_dim(ps, leaf->name, &dim);
    if (rc != 0)
      return rc;
    leaf->shape[leaf->ndim++] = dim;
    skip_ws(ps);
    if (*ps->p == '~') {
      rc = parse_shares(ps, spec, leaf);
      if (rc != 0)
        return rc;
      skip_ws(ps);
      if (*ps->p != ']') {
        chime__errf(ps->err, ps->errlen,
                    "leaf '%s': expected ']' after the shared length at "
                    "'%.16s'",
                    leaf->name, ps->p);
        return CHIME_EINVAL;
      }
    }
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == ']') {
      ps->p++;
      return 0;
    }
    chime__errf(ps->err, ps->errlen,
                "leaf '%s': expected ',' or ']' at '%.16s'", leaf->name, ps->p);
    return CHIME_EINVAL;
  }
}

static int parse_leaf(parser_t *ps, chime_spec_t *spec) {
  chime_leaf_t *leaf;
  char dtype[16];
  size_t n;
  uint32_t index = spec->nleaves;

  if (index == CHIME_MAX_LEAVES) {
    chime__errf(ps->err, ps->errlen, "more than %d leaves", CHIME_MAX_LEAVES);
    return CHIME_EINVAL;
  }
  leaf = &spec->leaves[index];
  memset(leaf, 0, sizeof(*leaf));
  skip_ws(ps);
  n = take_token(ps, leaf->name, sizeof(leaf->name));
  if (n == 0) {
    chime__errf(ps->err, ps->errlen,
                "leaf %u: empty or illegal name at '%.16s'", index, ps->p);
    return CHIME_EINVAL;
  }
  if (n >= CHIME_MAX_NAME) {
    chime__errf(ps->err, ps->errlen,
                "leaf %u ('%.16s...'): name longer than %d", index, leaf->name,
                CHIME_MAX_NAME - 1);
    return CHIME_EINVAL;
  }
  skip_ws(ps);
  if (*ps->p != ':') {
    chime__errf(ps->err, ps->errlen,
                "leaf '%s': expected ':' and a dtype at '%.16s'", leaf->name,
                ps->p);
    return CHIME_EINVAL;
  }
  ps->p++;
  skip_ws(ps);
  n = take_token(ps, dtype, sizeof(dtype));
  leaf->dtype =
      n < sizeof(dtype) ? chime_dtype_from_name(dtype) : CHIME_DTYPE_INVALID;
  if (leaf->dtype == CHIME_DTYPE_INVALID) {
    chime__errf(ps->err, ps->errlen,
                "leaf '%s': unknown dtype '%s' (u8 i8 u16 i16 u32 i32 u64 i64 "
                "f16 bf16 f32 f64 bool)",
                leaf->name, dtype);
    return CHIME_EINVAL;
  }
  spec->nleaves++;
  return parse_shape(ps, spec, leaf);
}

int chime__spec_parse(chime_spec_t *spec, const char *text, char *err,
                      size_t errlen) {
  parser_t ps = {text, err, errlen};
  int rc;

  if (spec == NULL || text == NULL) {
    chime__errf(err, errlen, "no spec text");
    return CHIME_EINVAL;
  }
  memset(spec, 0, sizeof(*spec));
  skip_ws(&ps);
  if (*ps.p == '\0') {
    chime__errf(err, errlen, "empty spec: at least one leaf is needed");
    rc = CHIME_EINVAL;
    goto out;
  }
  for (;;) {
    rc = parse_leaf(&ps, spec);
    if (rc != 0)
      goto out;
    skip_ws(&ps);
    if (*ps.p == '\0')
      break;
    if (*ps.p != ',') {
      chime__errf(err, errlen, "leaf '%s': unexpected '%.16s' after the leaf",
                  spec->leaves[spec->nleaves - 1].name, ps.p);
      rc = CHIME_EINVAL;
      goto out;
    }
    ps.p++;
  }
  rc = chime__spec_validate(spec, err, errlen);
out:
  if (rc != 0)
    memset(spec, 0, sizeof(*spec));
  return rc;
}

int chime_spec_parse(chime_spec_t *spec, const char *text) {
  char err[512];
  int rc = chime__spec_parse(spec, text, err, sizeof(err));
  return rc == 0 ? 0 : chime__detail(rc, err);
}

int chime_spec_validate(const chime_spec_t *spec) {
  char err[512];
  int rc = chime__spec_validate(spec, err, sizeof(err));
  return rc == 0 ? 0 : chime__detail(rc, err);
}

/* "f32[<=8192 ~tokens]": a leaf's type as the text form writes it (spec
 * NULL: no shared length named). snprintf's return. */
static int format_type(const chime_spec_t *spec, const chime_leaf_t *leaf,
                       char *buf, size_t len) {
  int n = snprintf(buf, len, "%s[", chime_dtype_name(leaf->dtype));
  for (uint32_t d = 0;
       d < leaf->ndim && d < CHIME_MAX_DIMS && n >= 0 && (size_t)n < len; d++)
    n += snprintf(buf + n, len - (size_t)n, "%s%s%llu", d ? "," : "",
                  d == 0 && leaf->ragged ? "<=" : "",
                  (unsigned long long)leaf->shape[d]);
  if (n >= 0 && (size_t)n < len && spec != NULL && leaf->shares != 0 &&
      leaf->shares <= spec->nleaves)
    n += snprintf(buf + n, len - (size_t)n, " ~%s",
                  spec->leaves[leaf->shares - 1].name);
  if (n >= 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n, "]");
  return n;
}

/* Canonical form: no spaces but before a shared length's '~', scalars as
 * "name:dtype[]". CHIME_EOVERFLOW when buf is too small (buf then holds a
 * truncated, NUL-terminated prefix). */
int chime_spec_format(const chime_spec_t *spec, char *buf, size_t len) {
  size_t used = 0;
  char err[512];
  int rc = chime__spec_validate(spec, err, sizeof(err));
  if (buf == NULL || len == 0)
    return chime__detail(CHIME_EINVAL, "spec format: no buffer");
  buf[0] = '\0';
  if (rc != 0)
    return chime__detail(rc, err);
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    const chime_leaf_t *leaf = &spec->leaves[i];
    int n = snprintf(buf + used, len - used, "%s%s:", i ? "," : "", leaf->name);
    if (n < 0 || (size_t)n >= len - used)
      return chime__detailf(CHIME_EOVERFLOW,
                            "spec format: %zu bytes are too few", len);
    used += (size_t)n;
    n = format_type(spec, leaf, buf + used, len - used);
    if (n < 0 || (size_t)n >= len - used)
      return chime__detailf(CHIME_EOVERFLOW,
                            "spec format: %zu bytes are too few", len);
    used += (size_t)n;
  }
  return 0;
}

static int same_type(const chime_leaf_t *a, const chime_leaf_t *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->ndim > CHIME_MAX_DIMS ||
      a->ragged != b->ragged || a->shares != b->shares)
    return 0;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d])
      return 0;
  return 1;
}

chime__spec_diff_t chime__spec_diff(const chime_spec_t *a,
                                    const chime_spec_t *b, uint32_t *at) {
  uint32_t i = 0;
  for (; i < a->nleaves && i < b->nleaves; i++) {
    *at = i;
    if (strcmp(a->leaves[i].name, b->leaves[i].name) != 0)
      return CHIME__SPEC_NAME;
    if (!same_type(&a->leaves[i], &b->leaves[i]))
      return CHIME__SPEC_TYPE;
  }
  *at = i;
  return i < a->nleaves   ? CHIME__SPEC_ONLY_A
         : i < b->nleaves ? CHIME__SPEC_ONLY_B
                          : CHIME__SPEC_SAME;
}

void chime__leaf_type_text(const chime_leaf_t *l, char *buf, size_t len) {
  (void)format_type(NULL, l, buf, len);
}

int chime__spec_ragged_bytes(const chime_spec_t *spec, uint32_t count,
                             const uint32_t *lengths, uint64_t *bytes,
                             char *err, size_t errlen) {
  uint32_t nrag = chime_spec_ragged(spec);
  uint64_t fixed = 0, total;
  uint32_t kof[CHIME_MAX_LEAVES]; /* leaf -> its index among ragged ones */
  *bytes = 0;
  if (nrag > 0 && lengths == NULL && count > 0) {
    chime__errf(err, errlen, "a spec with ragged leaves needs their lengths");
    return CHIME_EINVAL;
  }
  for (uint32_t i = 0, k = 0; i < spec->nleaves; i++) {
    const chime_leaf_t *l = &spec->leaves[i];
    if (l->ragged)
      kof[i] = k++;
    else
      fixed += chime_leaf_bytes(l);
  }
  if (__builtin_mul_overflow(fixed, (uint64_t)count, &total))
    return CHIME_EOVERFLOW;
  for (uint32_t j = 0; nrag > 0 && j < count; j++) {
    const uint32_t *len = lengths + (size_t)j * nrag;
    for (uint32_t i = 0; i < spec->nleaves; i++) {
      const chime_leaf_t *l = &spec->leaves[i];
      if (!l->ragged)
        continue;
      uint32_t n = len[kof[i]];
      if (n > l->shape[0]) {
        chime__errf(
            err, errlen,
            "leaf '%s': sample %u has %u rows, more than its bound %llu",
            l->name, j, n, (unsigned long long)l->shape[0]);
        return CHIME_EINVAL;
      }
      if (l->shares != 0 && n != len[kof[l->shares - 1]]) {
        chime__errf(err, errlen,
                    "leaf '%s': sample %u has %u rows, '%s' %u: they share a "
                    "length",
                    l->name, j, n, spec->leaves[l->shares - 1].name,
                    len[kof[l->shares - 1]]);
        return CHIME_EINVAL;
      }
      /* n <= the bound: n * row bytes <= the leaf's bytes, < 2^64 */
      if (__builtin_add_overflow(total, n * chime_leaf_row_bytes(l), &total))
        return CHIME_EOVERFLOW;
    }
  }
  *bytes = total;
  return 0;
}

int chime__spec_framed(chime_spec_t *out, const chime_spec_t *in,
                       const uint8_t framed[CHIME_MAX_LEAVES]) {
  return chime__spec_framed_steps(out, in, framed, 0);
}

int chime__spec_framed_steps(chime_spec_t *out, const chime_spec_t *in,
                             const uint8_t framed[CHIME_MAX_LEAVES],
                             uint32_t steps) {
  *out = *in;
  for (uint32_t i = 0; i < in->nleaves; i++) {
    if (!framed[i])
      continue;
    uint64_t n = chime_leaf_bytes(&in->leaves[i]) + 4 * (uint64_t)steps;
    if (in->leaves[i].ragged || n == 4 * (uint64_t)steps || n > UINT32_MAX ||
        (steps != 0 &&
         (in->leaves[i].ndim < 1 || in->leaves[i].shape[0] != steps)))
      return CHIME_EINVAL;
    chime_leaf_t *l = &out->leaves[i];
    l->dtype = CHIME_DTYPE_U8;
    l->ndim = 1;
    memset(l->shape, 0, sizeof(l->shape));
    l->shape[0] = n;
    l->ragged = 1;
    l->shares = 0;
  }
  return 0;
}
