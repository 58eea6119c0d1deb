/* Checkpoint table files (ckpt_format.h): one idea, a table's bytes in
 * the checkpoint format and back, both directions here so that the writer
 * and the reader cannot drift apart. The writer works from the table's
 * view (its rows pinned, the lock not held); the reader verifies a whole
 * file before anything goes into a table. */
#include "replay/ckpt_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "common/errfmt.h"
#include "common/key.h"
#include "common/spec.h"
#include "replay/ckpt_io.h"
#include "replay/ckpt_seq.h"
#include "replay/ckpt_writers.h"
#include "replay/crc32c.h"
#include "replay/zleaf.h"

#define MAGIC "CHIMECKT"
#define VERSION CHIME__CKPT_VERSION
#define MIN_VERSION CHIME__CKPT_MIN_VERSION
#define KIND_PLAIN 0u
#define KIND_SEQUENCE 1u
/* A record's fixed part: key, insert time, priority, times sampled. */
#define REC_FIXED 28u

#define fail chime__fail

/* ---------------------------------------------------------------- writing */

/* A plain table's item i after its bookkeeping: its ragged leaves'
 * lengths (version 5; none without ragged leaves), then its leaves in
 * spec order, each ragged one at its length (only the rows used). */
static void write_leaves(chime__table_t *t, wr_t *w, chime__table_view_t *v,
                         uint64_t i) {
  const chime_spec_t *spec = &chime__table_config(t)->spec;
  const uint32_t *lens;
  const uint8_t *rag = chime__table_view_ragged(t, v, i, &lens);
  uint32_t nrag = chime_spec_ragged(spec);
  for (uint32_t k = 0; k < nrag; k++)
    wr_u32(w, lens[k]);
  for (uint32_t l = 0, k = 0; l < spec->nleaves; l++) {
    const chime_leaf_t *lf = &spec->leaves[l];
    if (chime__table_compressed(t, l)) { /* version 6: as stored */
      k += lf->ragged;                   /* its rows are in z, not in rag */
      uint32_t s;
      const uint8_t *z = chime__table_view_z(t, v, i, l, &s);
      wr_u32(w, s);
      wr_raw(w, z, s);
      continue;
    }
    if (!lf->ragged) {
      wr_raw(w, chime__table_view_leaf(t, v, i, l), chime_leaf_bytes(lf));
      continue;
    }
    size_t b = (size_t)(lens[k++] * chime_leaf_row_bytes(lf));
    if (b == 0) /* rag is NULL when every length is 0 */
      continue;
    wr_raw(w, rag, b);
    rag += b;
  }
}

/* The writers' windows the view copied (version 6, ckpt_writers.h). */
static void write_writers(wr_t *w, const chime__dedupe_copy_t *c) {
  uint8_t b[CHIME__CKPT_WRITER_MAX];
  chime__ckpt_writers_head(c, b);
  wr_raw(w, b, CHIME__CKPT_WRITERS_HEAD);
  for (uint32_t i = 0; i < c->nwriters && w->err == 0; i++)
    wr_raw(w, b, chime__ckpt_writers_rec(c, i, b));
}

/* The view taken (the pause), the bytes written from the pinned rows (a
 * sequence table's: from its pinned blocks), the view released. */
int chime__checkpoint_write_table(chime__table_t *t, int fd, uint8_t *buf,
                                  const char *fname, chime__ckpt_file_t *out,
                                  char *err, size_t errlen) {
  const chime__table_config_t *cfg = chime__table_config(t);
  chime__table_view_t v;
  int seq = cfg->sequence_length > 0;
  char spec[8192];
  wr_t wr = {fd, buf, 0, 0, 0, 0}, *w = &wr;
  memset(out, 0, sizeof(*out));
  if (chime_spec_format(&cfg->spec, spec, sizeof(spec)) != 0)
    return fail(err, errlen, CHIME_EINVAL, "table '%s': spec too long",
                cfg->name);
  int rc = chime__table_view(t, &v);
  if (rc != 0)
    return fail(err, errlen, rc, "table '%s': %s", cfg->name,
                chime_strerror(rc));
  out->pause_ns = v.pause_ns;
  uint64_t sb = chime_spec_sample_bytes(&cfg->spec);
  wr_raw(w, MAGIC, 8);
  wr_u32(w, VERSION);
  wr_u32(w, seq ? KIND_SEQUENCE : KIND_PLAIN);
  wr_u32(w, cfg->shard);
  wr_str(w, cfg->name);
  wr_str(w, spec);
  wr_u64(w, v.count);
  wr_u64(w, v.next_key);
  wr_u64(w, v.inserts);
  wr_u64(w, v.samples);
  wr_u64(w, v.left);
  wr_u64(w, v.left_times);
  wr_u64(w, v.rng);
  wr_u64(w, sb); /* a sequence table's: one step's */
  wr_u64(w, v.newest_version);
  uint32_t nz = 0; /* version 6: the compressed leaves */
  for (uint32_t l = 0; l < cfg->spec.nleaves; l++)
    nz += cfg->compress[l] != 0;
  wr_u32(w, nz);
  for (uint32_t l = 0; l < cfg->spec.nleaves; l++)
    if (cfg->compress[l] != 0)
      wr_u32(w, l);
  write_writers(w, &v.writers); /* version 6, after those */
  wr_u64(w, v.pace_ahead);      /* version 7 */
  if (seq)
    chime__ckpt_seq_write(t, w, &v);
  for (uint64_t i = 0; !seq && i < v.count && w->err == 0; i++) {
    uint64_t pb;
    chime__table_view_item_t it;
    chime__table_view_item(t, &v, i, &it);
    memcpy(&pb, &v.prio[i], 8);
    wr_u64(w, it.key);
    wr_u64(w, it.itime);
    wr_u64(w, pb);
    wr_u32(w, v.times[i]);
    wr_u64(w, it.version);
    write_leaves(t, w, &v, i);
    /* Written (copied into w's buffer): the rows may go, oldest first,
     * so inserts meanwhile reuse them rather than spare rows. */
    if ((i + 1) % UNPIN_EVERY == 0)
      chime__table_view_unpin(t, &v, i + 1);
  }
  uint32_t crc = w->crc;
  wr_u32(w, crc);
  wr_flush(w);
  out->crc = crc;
  out->bytes = w->total;
  out->items = v.count;
  chime__table_view_release(t, &v);
  if (w->err != 0)
    return fail(err, errlen, CHIME_ESYS, "cannot write '%s': %s", fname,
                strerror(w->err));
  return 0;
}

/* ---------------------------------------------------------------- reading */

/* A version 5 record's ragged lengths (nrag of them, into lens) and the
 * bytes of its leaves at them (*bytes): 0, or -1 with why filled for a
 * length past its bound or unlike the one it shares, or a record cut
 * short. Nothing is read past the lengths here. */
static int rd_lengths(rd_t *r, const chime_spec_t *spec, uint32_t nrag,
                      uint32_t *lens, uint64_t *bytes, int zany, char *why,
                      size_t whylen) {
  for (uint32_t k = 0; k < nrag; k++)
    lens[k] = rd_u32(r);
  if (r->bad) {
    snprintf(why, whylen, "cut short");
    return -1;
  }
  if (chime__spec_ragged_bytes(spec, 1, lens, bytes, why, whylen) != 0)
    return -1;
  if (!zany &&
      *bytes > r->n - r->off) { /* else chime__zleaf_record_bytes checks */
    snprintf(why, whylen,
             "its lengths take %llu bytes, more than the %zu left in the file",
             (unsigned long long)*bytes, r->n - r->off);
    return -1;
  }
  return 0;
}

/* A length-prefixed string of at most max - 1 bytes, no NUL inside. */
static int rd_str(rd_t *r, char *dst, size_t max) {
  uint32_t n = rd_u32(r);
  if (r->bad || n >= max) {
    r->bad = 1;
    return -1;
  }
  const uint8_t *s = rd_take(r, n);
  if (s == NULL || memchr(s, '\0', n) != NULL) {
    r->bad = 1;
    return -1;
  }
  memcpy(dst, s, n);
  dst[n] = '\0';
  return 0;
}

/* A next key (or step key) of the file's shard: one of its keys, or the
 * one past its last count (a table that issued every key it has). */
static int next_ok(uint64_t next, uint32_t shard) {
  return chime__key_shard(next) == shard ||
         next == chime__key_make(shard, CHIME__KEY_MAX_COUNT) + 1;
}

static chime__table_t *find_table(chime__table_t *const *tables, uint32_t n,
                                  const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(chime__table_config(tables[i])->name, name) == 0)
      return tables[i];
  return NULL;
}

/* The checkpoint's spec against the config's, leaf by leaf. */
static int spec_check(const char *table, const chime_spec_t *ck,
                      const chime_spec_t *cf, char *err, size_t errlen) {
  uint32_t i;
  char a[256], b[256];
  const chime_leaf_t *x = &ck->leaves[0], *y = &cf->leaves[0];
  switch (chime__spec_diff(ck, cf, &i)) {
  case CHIME__SPEC_SAME:
    return 0;
  case CHIME__SPEC_ONLY_A:
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': leaf '%s' (leaf %u) is in the checkpoint but "
                "not in the config's spec",
                table, ck->leaves[i].name, i);
  case CHIME__SPEC_ONLY_B:
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': leaf '%s' (leaf %u) is in the config's spec "
                "but not in the checkpoint",
                table, cf->leaves[i].name, i);
  case CHIME__SPEC_NAME:
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': leaf %u is '%s' in the checkpoint, '%s' in the "
                "config",
                table, i, x[i].name, y[i].name);
  case CHIME__SPEC_TYPE:
    break;
  }
  chime__leaf_type_text(&x[i], a, sizeof(a));
  chime__leaf_type_text(&y[i], b, sizeof(b));
  return fail(err, errlen, CHIME_EINVAL,
              "table '%s': leaf '%s' is %s in the checkpoint, %s in the "
              "config",
              table, x[i].name, a, b);
}

/* A ragged table's items (version 5), walked whole before any goes in:
 * each record's lengths checked against the spec and its bytes within
 * the file, the records filling it exactly. */
static int rag_walk(rd_t r, uint64_t count, const chime_spec_t *spec,
                    const uint8_t *zmask, const char *fname, char *err,
                    size_t errlen) {
  uint32_t nrag = chime_spec_ragged(spec), lens[CHIME_MAX_LEAVES];
  uint64_t least = REC_FIXED + 8 + 4 * (uint64_t)nrag, bytes;
  char why[256];
  int zany = 0;
  for (uint32_t l = 0; l < spec->nleaves; l++)
    zany |= zmask[l];
  for (uint32_t l = 0; l < spec->nleaves; l++)
    if (zmask[l])
      least += 4;
    else if (!spec->leaves[l].ragged)
      least += chime_leaf_bytes(&spec->leaves[l]);
  if (count > (r.n - r.off) / least)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: %llu items do not fit its %zu bytes", fname,
                (unsigned long long)count, r.n);
  for (uint64_t i = 0; i < count; i++) {
    rd_take(&r, REC_FIXED + 8);
    if (rd_lengths(&r, spec, nrag, lens, &bytes, zany, why, sizeof(why)) != 0)
      return fail(err, errlen, CHIME_ECORRUPT, "%s: item %llu: %s", fname,
                  (unsigned long long)i, why);
    if (zany && chime__zleaf_record_bytes(r.p + r.off, r.n - r.off, spec, lens,
                                          zmask, &bytes, why, sizeof(why)) != 0)
      return fail(err, errlen, CHIME_ECORRUPT, "%s: item %llu: %s", fname,
                  (unsigned long long)i, why);
    r.off += (size_t)bytes;
  }
  if (r.off != r.n)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: %llu items do not fill its %zu bytes", fname,
                (unsigned long long)count, r.n);
  return 0;
}

/* A plain table's items, after the header, into t. */
static int plain_load(rd_t *r, chime__table_t *t, const chime_spec_t *spec,
                      const uint8_t *zmask, uint64_t count, uint64_t sb,
                      int has_version, uint32_t shard, const char *fname,
                      char *err, size_t errlen) {
  const chime__table_config_t *cfg = chime__table_config(t);
  const char *name = cfg->name;
  uint32_t nrag = chime_spec_ragged(spec);
  int zany = 0, rc;
  for (uint32_t l = 0; l < spec->nleaves; l++)
    zany |= zmask[l];
  for (uint64_t i = 0; i < count; i++) {
    uint64_t key = rd_u64(r), itime = rd_u64(r), pb = rd_u64(r);
    uint32_t times = rd_u32(r);
    uint64_t version = has_version ? rd_u64(r) : 0;
    uint32_t lens[CHIME_MAX_LEAVES];
    uint64_t bytes = sb;
    char why[256];
    if ((nrag > 0 || zany) &&
        (rd_lengths(r, spec, nrag, lens, &bytes, zany, why, sizeof(why)) != 0 ||
         (zany &&
          chime__zleaf_record_bytes(r->p + r->off, r->n - r->off, spec, lens,
                                    zmask, &bytes, why, sizeof(why)) != 0)))
      return fail(err, errlen, CHIME_ECORRUPT, "%s: item %llu: %s", fname,
                  (unsigned long long)i, why);
    const uint8_t *sample = rd_take(r, (size_t)bytes);
    double prio;
    memcpy(&prio, &pb, 8);
    if (sample == NULL)
      return fail(err, errlen, CHIME_ECORRUPT, "%s: truncated", fname);
    if (chime__key_shard(key) != shard)
      return fail(err, errlen, CHIME_ECORRUPT,
                  "%s: item %llu (key %llu) is shard %u's in a file of shard "
                  "%u",
                  fname, (unsigned long long)i, (unsigned long long)key,
                  chime__key_shard(key), shard);
    rc = chime__table_restore_item_ragged(t, key, itime, prio, times, version,
                                          nrag > 0 ? lens : NULL, sample);
    if (rc == CHIME_ECORRUPT)
      return fail(err, errlen, CHIME_ECORRUPT,
                  "%s: item %llu (key %llu): a compressed leaf that is not a "
                  "zstd frame of its leaf's size",
                  fname, (unsigned long long)i, (unsigned long long)key);
    if (rc == CHIME_ENOMEM)
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': the checkpoint holds %llu items, more than its "
                  "capacity %llu (and spare rows) allow",
                  name, (unsigned long long)count,
                  (unsigned long long)cfg->capacity);
    if (rc != 0)
      return fail(err, errlen, CHIME_ECORRUPT,
                  "%s: item %llu (key %llu): a duplicate key or a priority "
                  "the table cannot use",
                  fname, (unsigned long long)i, (unsigned long long)key);
  }
  return 0;
}

/* The writers' section (version 6), right after the header, verified
 * whole before anything goes into a table. */
static int writers_read(rd_t *r, uint32_t shard, chime__dedupe_copy_t *wc,
                        const char *fname, char *err, size_t errlen) {
  char why[256];
  size_t used = 0;
  int rc = chime__ckpt_writers_read(r->p + r->off, r->n - r->off, shard, wc,
                                    &used, why, sizeof(why));
  if (rc == -2)
    return fail(err, errlen, CHIME_ENOMEM, "%s: out of memory", fname);
  if (rc != 0)
    return fail(err, errlen, CHIME_ECORRUPT, "%s: writers' windows: %s", fname,
                why);
  r->off += used;
  return 0;
}

/* The writers' windows into t, after its items and counts. */
static int writers_load(chime__table_t *t, const chime__dedupe_copy_t *wc,
                        const char *fname, char *err, size_t errlen) {
  uint32_t loaded = 0;
  int rc = chime__table_restore_writers(t, wc, &loaded);
  if (rc == CHIME_ENOMEM)
    return fail(err, errlen, CHIME_ENOMEM, "%s: out of memory", fname);
  if (rc != 0) /* verified by writers_read: unreachable */
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: writers' windows: writer %u cannot be restored (%s)",
                fname, loaded, chime_strerror(rc));
  return 0;
}

int chime__checkpoint_check_crc(const uint8_t *p, size_t n, const char *fname,
                                uint32_t *crc, char *err, size_t errlen) {
  if (n < 12 || memcmp(p, MAGIC, 8) != 0)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: not a chime checkpoint table file (bad magic)", fname);
  uint32_t stored = (uint32_t)p[n - 4] | (uint32_t)p[n - 3] << 8 |
                    (uint32_t)p[n - 2] << 16 | (uint32_t)p[n - 1] << 24;
  *crc = chime__crc32c(0, p, n - 4);
  if (*crc != stored)
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: corrupt (CRC-32C %08x, the file says %08x)", fname, *crc,
                stored);
  return 0;
}

/* chime__checkpoint_load_table, the writers' section read into wc; the
 * file's CRC checked first unless crc_checked. */
/* The compressed leaves (version 6 on): their count, then each index,
 * rising; zmask[l] set for each. Returns the count (r->bad when the
 * indices are not). */
static uint32_t rd_zmask(rd_t *r, uint8_t *zmask) {
  uint32_t nz = rd_u32(r), zprev = 0;
  for (uint32_t k = 0; k < nz && k < CHIME_MAX_LEAVES && !r->bad; k++) {
    uint32_t l = rd_u32(r);
    if (l >= CHIME_MAX_LEAVES || (k > 0 && l <= zprev)) {
      r->bad = 1;
      break;
    }
    zmask[l] = 1;
    zprev = l;
  }
  return nz;
}

/* The file's table (its kind, shard, spec and compressed leaves) against
 * the config's table of its name: 0, or why it cannot go back into it. */
static int table_matches(const char *name, uint32_t kind, int old_seq,
                         uint32_t shard, const chime_spec_t *spec,
                         const uint8_t *zmask, const chime__table_config_t *cfg,
                         char *err, size_t errlen) {
  if (old_seq)
    return fail(err, errlen, CHIME_ENOTSUP,
                "table '%s' is a sequence table in a version 1 checkpoint, "
                "which holds no steps (start without --restore, or drop the "
                "table from the config)",
                name);
  if ((kind == KIND_SEQUENCE) != (cfg->sequence_length > 0))
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s' is a %s table in the checkpoint, a %s table in the "
                "config",
                name, kind == KIND_SEQUENCE ? "sequence" : "plain",
                kind == KIND_SEQUENCE ? "plain" : "sequence");
  if (shard != cfg->shard)
    return fail(err, errlen, CHIME_EINVAL,
                "table '%s': the checkpoint was written by shard %u, this "
                "server is shard %u (0: unsharded); a key names the shard "
                "that holds its item, so a checkpoint goes back into the "
                "shard that wrote it only",
                name, shard, cfg->shard);
  int rc = spec_check(name, spec, &cfg->spec, err, errlen);
  if (rc != 0)
    return rc;
  for (uint32_t l = 0; l < spec->nleaves; l++)
    if (zmask[l] != (cfg->compress[l] != 0))
      return fail(err, errlen, CHIME_EINVAL,
                  "table '%s': leaf '%s' is %s in the checkpoint but %s in "
                  "the config ('compress'); a checkpoint keeps compressed "
                  "leaves as stored, so it goes back into a table that "
                  "compresses the same leaves (levels may differ)",
                  name, spec->leaves[l].name, zmask[l] ? "compressed" : "raw",
                  zmask[l] ? "raw" : "compressed");
  return 0;
}

static int load_table(const uint8_t *p, size_t n, chime__table_t *const *tables,
                      uint32_t ntables, const char *fname, uint64_t *items,
                      chime__dedupe_copy_t *wc, int crc_checked, char *err,
                      size_t errlen) {
  char name[CHIME_MAX_NAME], spec_text[8192], perr[256];
  chime_spec_t spec;
  chime__ckpt_seqhdr_t sh;
  memset(&sh, 0, sizeof(sh));
  *items = 0;
  uint32_t crc;
  int rc0 = crc_checked
                ? 0
                : chime__checkpoint_check_crc(p, n, fname, &crc, err, errlen);
  if (rc0 != 0)
    return rc0;
  rd_t r = {p, n - 4, 8, 0};
  uint32_t ver = rd_u32(&r), kind = rd_u32(&r);
  if (!r.bad && (ver < MIN_VERSION || ver > VERSION))
    return fail(err, errlen, CHIME_ECORRUPT, "%s: version %u (this is %u)",
                fname, ver, VERSION);
  /* Versions 1 and 2 came before shards: an unsharded server's. */
  uint32_t shard = ver >= 3 ? rd_u32(&r) : 0;
  rd_str(&r, name, sizeof(name));
  rd_str(&r, spec_text, sizeof(spec_text));
  uint64_t count = rd_u64(&r), next_key = rd_u64(&r), inserts = rd_u64(&r);
  uint64_t samples = rd_u64(&r), left = rd_u64(&r), left_times = rd_u64(&r);
  uint64_t rng = rd_u64(&r), sb = rd_u64(&r);
  /* Versions 1 to 3 came before policy versions: every item's is 0. */
  uint64_t newest = ver >= 4 ? rd_u64(&r) : 0;
  uint64_t vbytes = ver >= 4 ? 8 : 0;
  uint8_t zmask[CHIME_MAX_LEAVES] = {0};
  uint32_t nz = ver >= 6 ? rd_zmask(&r, zmask) : 0;
  int rc;
  if (ver >= 6 && !r.bad && nz <= CHIME_MAX_LEAVES &&
      (rc = writers_read(&r, shard, wc, fname, err, errlen)) != 0)
    return rc;
  /* Version 7: the samples ahead of the learner's progress (pacing). */
  uint64_t pace_ahead = ver >= 7 ? rd_u64(&r) : 0;
  if (r.bad || nz > CHIME_MAX_LEAVES ||
      (kind != KIND_PLAIN && kind != KIND_SEQUENCE) ||
      shard > CHIME__KEY_MAX_SHARD || !next_ok(next_key, shard))
    return fail(err, errlen, CHIME_ECORRUPT, "%s: malformed header", fname);
  if (chime__spec_parse(&spec, spec_text, perr, sizeof(perr)) != 0)
    return fail(err, errlen, CHIME_ECORRUPT, "%s: table '%s': bad spec: %s",
                fname, name, perr);
  uint64_t rec = REC_FIXED + vbytes + sb;
  /* Version 1 wrote a sequence table's name and spec alone. */
  int old_seq = kind == KIND_SEQUENCE && ver < 2;
  if (!old_seq && sb != chime_spec_sample_bytes(&spec))
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: sample bytes %llu, its spec's %llu", fname,
                (unsigned long long)sb,
                (unsigned long long)chime_spec_sample_bytes(&spec));
  uint32_t nrag = chime_spec_ragged(&spec);
  int zany = nz > 0;
  for (uint32_t l = 0; l < CHIME_MAX_LEAVES; l++)
    if (zmask[l] &&
        (l >= spec.nleaves || (spec.leaves[l].ragged && kind != KIND_PLAIN)))
      return fail(err, errlen, CHIME_ECORRUPT,
                  "%s: table '%s': compressed leaf %u is no leaf of its spec "
                  "(a ragged one only in a plain table's)",
                  fname, name, l);
  /* Ragged items came with version 5 (and only plain tables have them). */
  if (nrag > 0 && (ver < 5 || kind != KIND_PLAIN))
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: table '%s' has ragged leaves in a %s file of version %u "
                "(ragged items are in plain tables' files from version 5)",
                fname, name, kind == KIND_PLAIN ? "plain table's" : "sequence",
                ver);
  if ((nrag > 0 || zany) && kind == KIND_PLAIN &&
      (rc = rag_walk(r, count, &spec, zmask, fname, err, errlen)) != 0)
    return rc;
  if ((old_seq && count != 0) ||
      (kind == KIND_SEQUENCE && !old_seq &&
       chime__ckpt_seq_parse(&r, ver, count, sb, &spec, zmask, &sh) != 0) ||
      (kind == KIND_PLAIN && nrag == 0 && !zany &&
       (count > (r.n - r.off) / rec || count * rec != r.n - r.off)))
    return fail(err, errlen, CHIME_ECORRUPT,
                "%s: %llu items do not fill its %zu bytes", fname,
                (unsigned long long)count, n);
  if (kind == KIND_SEQUENCE && !old_seq && !next_ok(sh.step_key, shard))
    return fail(err, errlen, CHIME_ECORRUPT, "%s: malformed header", fname);
  if (tables == NULL)
    return 0;
  chime__table_t *t = find_table(tables, ntables, name);
  if (t == NULL)
    return fail(err, errlen, CHIME_EINVAL,
                "%s: table '%s' is in the checkpoint but not in the config",
                fname, name);
  const chime__table_config_t *cfg = chime__table_config(t);
  if ((rc = table_matches(name, kind, old_seq, shard, &spec, zmask, cfg, err,
                          errlen)) != 0)
    return rc;
  if (kind == KIND_SEQUENCE) {
    if ((rc = chime__ckpt_seq_check(name, &sh, cfg, chime__table_steps(t), err,
                                    errlen)) != 0 ||
        (rc = chime__ckpt_seq_load(p, n - 4, &sh, zmask, t, count, fname, name,
                                   err, errlen)) != 0)
      return rc;
  } else if ((rc = plain_load(&r, t, &spec, zmask, count, sb, vbytes != 0,
                              shard, fname, err, errlen)) != 0) {
    return rc;
  }
  chime__table_restore_counts(t, next_key, inserts, samples, left, left_times,
                              rng);
  /* After the items: those it leaves too far behind leave again. */
  chime__table_restore_version(t, newest);
  /* After the version, whose rise from 0 would take it down. */
  chime__table_restore_pace(t, pace_ahead);
  /* After the counts, which say a restored table may have lost writers. */
  if (ver >= 6 && (rc = writers_load(t, wc, fname, err, errlen)) != 0)
    return rc;
  *items = count;
  return 0;
}

static int load_with(const uint8_t *p, size_t n, chime__table_t *const *tables,
                     uint32_t ntables, const char *fname, uint64_t *items,
                     int crc_checked, char *err, size_t errlen) {
  chime__dedupe_copy_t wc;
  memset(&wc, 0, sizeof(wc));
  int rc = load_table(p, n, tables, ntables, fname, items, &wc, crc_checked,
                      err, errlen);
  chime__dedupe_copy_free(&wc);
  return rc;
}

int chime__checkpoint_load_table(const uint8_t *p, size_t n,
                                 chime__table_t *const *tables,
                                 uint32_t ntables, const char *fname,
                                 uint64_t *items, char *err, size_t errlen) {
  return load_with(p, n, tables, ntables, fname, items, 0, err, errlen);
}

int chime__checkpoint_load_checked(const uint8_t *p, size_t n,
                                   chime__table_t *const *tables,
                                   uint32_t ntables, const char *fname,
                                   uint64_t *items, char *err, size_t errlen) {
  return load_with(p, n, tables, ntables, fname, items, 1, err, errlen);
}
