/* Policy versions and staleness gates in the replay engine (docs/replay.md,
 * "Policy versions"): the version index alone, and its weights exact
 * (0 once every row of a version weighs 0, a version's small rows kept
 * when a huge one leaves); the newest version a table
 * knows (its items' and its learners', only rising); items more than
 * max_staleness versions behind it removed and never sampled, for every
 * selector, out-of-order arrivals included; a sample too far behind on
 * arrival never going in; items given back that went stale meanwhile
 * staying out; each sample's version and staleness in its info; versions
 * through a checkpoint table file, and a version 3 file loading with every
 * version 0; a sequence table's windows with their oldest step's version
 * under a gate and through a checkpoint. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "common/key.h"
#include "replay/ckpt_format.h"
#include "replay/crc32c.h"
#include "replay/table.h"
#include "replay/verindex.h"
#include "table_slot.h"

/* spec "a:u32[2], b:u8[]": 9 bytes a sample */
#define SB 9

static chime__table_t *vtable(chime__selector_kind_t s, uint64_t cap,
                              uint64_t max_staleness, uint64_t mts) {
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "a:u32[2], b:u8[]"), 0);
  tc.capacity = cap;
  tc.sampler = s;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.max_times_sampled = mts;
  tc.max_staleness = max_staleness;
  tc.seed = 11;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* Inserts n samples with versions ver[0, n) (priorities 1 + i); the first
 * key given. */
static uint64_t insert_v(chime__table_t *t, const uint64_t *ver, uint32_t n) {
  uint8_t buf[64 * SB];
  double prio[64];
  uint64_t k;
  assert_true(n <= 64);
  memset(buf, 0, sizeof(buf));
  for (uint32_t i = 0; i < n; i++) {
    buf[i * SB + 8] = (uint8_t)ver[i];
    prio[i] = 1.0 + i;
  }
  chime__span_t sp = {buf, (size_t)n * SB};
  chime__table_versions_t v = {ver, n};
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, n, NULL, prio, &v,
                                                 &k, NULL, NULL, 0),
                   0);
  return k;
}

static chime__table_stats_t stats(chime__table_t *t) {
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  return st;
}

static void test_verindex(void **state) {
  (void)state;
  chime__verindex_t *v;
  uint32_t r;
  uint64_t ver;
  assert_int_equal(chime__verindex_create(&v, 1000), 0);
  assert_int_equal(chime__verindex_lowest(v, &r, &ver), CHIME_ENOTFOUND);
  /* In order, then one late, then one older than all. */
  chime__verindex_add(v, 0, 5, 0.0);
  chime__verindex_add(v, 1, 5, 0.0);
  chime__verindex_add(v, 2, 7, 0.0);
  chime__verindex_add(v, 3, 6, 0.0);
  chime__verindex_add(v, 4, 2, 0.0);
  assert_int_equal(chime__verindex_versions(v), 4);
  assert_int_equal(chime__verindex_lowest(v, &r, &ver), 0);
  assert_int_equal(r, 4);
  assert_int_equal(ver, 2);
  chime__verindex_remove(v, 4, 2, 0.0);
  assert_int_equal(chime__verindex_lowest(v, &r, &ver), 0);
  assert_int_equal(r, 0); /* version 5's oldest */
  assert_int_equal(ver, 5);
  chime__verindex_remove(v, 0, 5, 0.0);
  assert_int_equal(chime__verindex_lowest(v, &r, &ver), 0);
  assert_int_equal(r, 1);
  chime__verindex_remove(v, 3, 6, 0.0); /* a version in the middle goes */
  chime__verindex_remove(v, 1, 5, 0.0);
  assert_int_equal(chime__verindex_lowest(v, &r, &ver), 0);
  assert_int_equal(r, 2);
  assert_int_equal(ver, 7);
  chime__verindex_remove(v, 2, 7, 0.0);
  assert_int_equal(chime__verindex_lowest(v, &r, &ver), CHIME_ENOTFOUND);
  /* Rising versions, each gone from the low end: the entries move back to
   * the array's start, never past its end. */
  for (uint32_t i = 0; i < 5000; i++) {
    chime__verindex_add(v, i % 1000, 100 + i, 0.0);
    if (i >= 999) {
      assert_int_equal(chime__verindex_lowest(v, &r, &ver), 0);
      assert_int_equal(ver, 100 + i - 999);
      chime__verindex_remove(v, r, ver, 0.0);
    }
  }
  assert_int_equal(chime__verindex_versions(v), 999);
  chime__verindex_destroy(v);
}

/* Row r of version ver now weighs w, as the table changes a row: the sum
 * tree first, then the index (which may read the tree). */
static void vset(chime__sumtree_t *sum, chime__verindex_t *v, uint32_t r,
                 uint64_t ver, double w) {
  double old = chime__sumtree_get(sum, r);
  assert_int_equal(chime__sumtree_set(sum, r, w), 0);
  chime__verindex_reweigh(v, ver, old, w);
}

static void vadd(chime__sumtree_t *sum, chime__verindex_t *v, uint32_t r,
                 uint64_t ver, double w) {
  assert_int_equal(chime__sumtree_set(sum, r, w), 0);
  chime__verindex_add(v, r, ver, w);
}

static void vdel(chime__sumtree_t *sum, chime__verindex_t *v, uint32_t r,
                 uint64_t ver) {
  double w = chime__sumtree_get(sum, r);
  assert_int_equal(chime__sumtree_set(sum, r, 0.0), 0);
  chime__verindex_remove(v, r, ver, w);
}

/* Version i's weight (versions 0.. in order). */
static double vmass(const chime__verindex_t *v, uint64_t i) {
  uint64_t ver;
  double m;
  uint32_t first;
  chime__verindex_at(v, i, &ver, &m, &first);
  return m;
}

static int close_to(double got, double want) {
  return fabs(got - want) <= 1e-13 * fabs(want);
}

/* Each version's weight and Z are what the rows weigh now, not what a
 * running sum's rounding left: a plain sum kept 2.8e-17 for a version
 * whose rows went 0.1, 0.2 -> 0 (and staleness weighting's walk drew
 * from it, found no row and crashed chimed), and lost the other rows'
 * weight when a row of 1e298 left or changed. */
static void test_verindex_weights(void **state) {
  (void)state;
  chime__sumtree_t *sum;
  chime__verindex_t *v;
  assert_int_equal(chime__sumtree_create(&sum, 64), 0);
  assert_int_equal(chime__verindex_create(&v, 64), 0);
  chime__verindex_weigh(v, sum);
  chime__verindex_set_newest(v, 2); /* the table's is never below a row's */
  /* Version 1: rows of 0.1, 0.2, 0.3 and 0.7 going to 0, in every order
   * the rounding could take. */
  double w[4] = {0.1, 0.2, 0.3, 0.7};
  for (uint32_t r = 0; r < 4; r++)
    vadd(sum, v, r, 1, w[r]);
  vadd(sum, v, 10, 2, 1e-15);
  for (uint32_t r = 0; r < 4; r++)
    vset(sum, v, r, 1, 0.0);
  assert_true(vmass(v, 0) == 0.0); /* exactly: nothing to draw there */
  assert_true(close_to(vmass(v, 1), 1e-15));
  assert_true(close_to(chime__verindex_z(v), 1e-15)); /* w(0) for version 2 */
  /* The newest rises: Z from the versions, version 1 adds nothing. */
  chime__verindex_set_newest(v, 1000000001);
  assert_true(close_to(chime__verindex_z(v), 1e-15 / 1e9));
  /* Back up and down again, rows leaving instead. */
  for (uint32_t r = 0; r < 4; r++)
    vset(sum, v, r, 1, w[3 - r]);
  for (uint32_t r = 0; r < 3; r++)
    vdel(sum, v, r, 1);
  vset(sum, v, 3, 1, 0.0);
  assert_true(vmass(v, 0) == 0.0);
  vdel(sum, v, 3, 1);
  vdel(sum, v, 10, 2);
  assert_int_equal(chime__verindex_versions(v), 0);
  assert_true(chime__verindex_z(v) == 0.0);

  /* Version 5 (staleness 1, w 1/2): 1e298, 1 and 1e-300; version 6:
   * 3e-300. A huge row leaves
   * (and, after the newest rose, changes to 1): the others still count,
   * down to 1e-300. */
  chime__verindex_set_newest(v, 1000000006);
  for (int how = 0; how < 2; how++) {
    vadd(sum, v, 0, 1000000005, 1e298);
    vadd(sum, v, 1, 1000000005, 1.0);
    vadd(sum, v, 2, 1000000005, 1e-300);
    vadd(sum, v, 3, 1000000006, 3e-300);
    if (how == 0)
      vdel(sum, v, 0, 1000000005);
    else
      vset(sum, v, 0, 1000000005, 1.0);
    double left = how == 0 ? 1.0 : 2.0;
    assert_true(close_to(vmass(v, 0), left + 1e-300));
    assert_true(close_to(chime__verindex_z(v), (left + 1e-300) / 2.0 + 3e-300));
    /* Then the 1s: 1e-300 is all version 5 weighs. */
    vdel(sum, v, 1, 1000000005);
    if (how == 1)
      vset(sum, v, 0, 1000000005, 0.0);
    assert_true(close_to(vmass(v, 0), 1e-300));
    assert_true(close_to(chime__verindex_z(v), 1e-300 / 2.0 + 3e-300));
    if (how == 1)
      vdel(sum, v, 0, 1000000005);
    vdel(sum, v, 2, 1000000005);
    vdel(sum, v, 3, 1000000006);
  }
  chime__verindex_destroy(v);
  chime__sumtree_destroy(sum);
}

/* The newest version known: the max of the items' and the learners'. */
static void test_newest(void **state) {
  (void)state;
  chime__table_t *t = vtable(CHIME__SELECTOR_UNIFORM, 64, 0, 0);
  uint64_t v[3] = {3, 9, 4}, newest = 0;
  insert_v(t, v, 3);
  assert_int_equal(stats(t).newest_version, 9);
  assert_int_equal(chime__table_set_version(t, 5, &newest), 0);
  assert_int_equal(newest, 9); /* a version going back changes nothing */
  assert_int_equal(chime__table_set_version(t, 12, &newest), 0);
  assert_int_equal(newest, 12);
  /* No max_staleness: nothing leaves; info says how far behind. */
  slot_t s;
  slot_init(&s, t, 16);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 16; j++) {
    const chime_sample_info_t *in = &s.ws.info[j];
    assert_true(in->version == 3 || in->version == 9 || in->version == 4);
    assert_int_equal(in->staleness, 12 - in->version);
  }
  assert_int_equal(stats(t).size, 3);
  assert_int_equal(stats(t).removed_stale, 0);
  slot_fini(&s);
  chime__table_destroy(t);
}

/* Every selector: items arrive out of version order; a learner's version
 * makes some stale: they leave at once (counted), the rest stay, and no
 * batch ever holds one more than max_staleness behind. */
static void gate_selector(chime__selector_kind_t sel, uint64_t mts) {
  chime__table_t *t = vtable(sel, 256, 3, mts);
  /* versions 1..8, interleaved as racing writers would send them */
  uint64_t v[32];
  for (uint32_t i = 0; i < 32; i++)
    v[i] = 1 + (i % 8 + (i % 3)) % 8;
  insert_v(t, v, 32);
  uint64_t newest = 0;
  assert_int_equal(chime__table_set_version(t, 6, &newest), 0);
  assert_int_equal(newest, 8); /* the items' 8 is newer */
  /* 8 - 3 = 5: versions 1..4 leave */
  uint64_t stale = 0;
  for (uint32_t i = 0; i < 32; i++)
    stale += v[i] < 5;
  chime__table_stats_t st = stats(t);
  assert_int_equal(st.removed_stale, stale);
  assert_int_equal(st.size, 32 - stale);
  assert_int_equal(st.left, stale);
  /* A late sample of an old version (the newest for lifo) and a jump. */
  uint64_t late[2] = {5, 6};
  insert_v(t, late, 2);
  assert_int_equal(chime__table_set_version(t, 10, &newest), 0);
  st = stats(t);
  uint64_t kept = 0;
  for (uint32_t i = 0; i < 32; i++)
    kept += v[i] >= 7;
  /* the late ones (5, 6) are behind 10 - 3 = 7 too */
  assert_int_equal(st.size, kept);
  assert_int_equal(st.removed_stale, 34 - kept);
  slot_t s;
  slot_init(&s, t, 4);
  for (int b = 0; b < 4 && stats(t).size >= 4; b++) {
    assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
    for (uint32_t j = 0; j < 4; j++) {
      assert_true(s.ws.info[j].version >= 7);
      assert_true(s.ws.info[j].staleness <= 3);
      assert_int_equal(s.ws.info[j].staleness, 10 - s.ws.info[j].version);
    }
  }
  slot_fini(&s);
  chime__table_destroy(t);
}

static void test_gate_fifo(void **state) {
  (void)state;
  gate_selector(CHIME__SELECTOR_FIFO, 0);
}
static void test_gate_lifo(void **state) {
  (void)state;
  gate_selector(CHIME__SELECTOR_LIFO, 0);
}
static void test_gate_uniform(void **state) {
  (void)state;
  gate_selector(CHIME__SELECTOR_UNIFORM, 0);
  gate_selector(CHIME__SELECTOR_UNIFORM, 2); /* max_times_sampled too */
}
static void test_gate_prioritized(void **state) {
  (void)state;
  gate_selector(CHIME__SELECTOR_PRIORITIZED, 0);
}
static void test_gate_heaps(void **state) {
  (void)state;
  gate_selector(CHIME__SELECTOR_MIN_HEAP, 0);
  gate_selector(CHIME__SELECTOR_MAX_HEAP, 0);
}

/* A sample already too far behind when it arrives takes its key and
 * counts as inserted and left, but never goes in; its request's newer
 * samples do. One version for the whole request (n 1) too. */
static void test_stale_on_arrival(void **state) {
  (void)state;
  chime__table_t *t = vtable(CHIME__SELECTOR_UNIFORM, 64, 2, 0);
  uint64_t v[3] = {10, 4, 9}, k0, newest;
  k0 = insert_v(t, v, 3);
  chime__table_stats_t st = stats(t);
  assert_int_equal(st.inserts, 3);
  assert_int_equal(st.size, 2);
  assert_int_equal(st.removed_stale, 1);
  assert_int_equal(st.left, 1);
  uint8_t buf[4 * SB] = {0};
  uint64_t one = 7, k;
  chime__span_t sp = {buf, sizeof(buf)};
  chime__table_versions_t all7 = {&one, 1};
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, 4, NULL, NULL,
                                                 &all7, &k, NULL, NULL, 0),
                   0);
  assert_int_equal(k, k0 + 3); /* the stale one took its key */
  st = stats(t);
  assert_int_equal(st.size, 2);
  assert_int_equal(st.removed_stale, 5);
  /* A count of versions that is neither 0, 1 nor count. */
  uint64_t two[2] = {10, 10};
  chime__table_versions_t bad = {two, 2};
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, 4, NULL, NULL, &bad,
                                                 &k, NULL, NULL, 0),
                   CHIME_EINVAL);
  assert_int_equal(stats(t).inserts, 7);
  assert_int_equal(chime__table_set_version(t, 0, &newest), 0);
  assert_int_equal(newest, 10);
  chime__table_destroy(t);
}

/* A fifo batch a learner never finished comes back from its pinned rows,
 * but not the items that went stale meanwhile. */
static void test_give_back_stale(void **state) {
  (void)state;
  chime__table_t *t = vtable(CHIME__SELECTOR_FIFO, 64, 1, 0);
  uint64_t v[4] = {1, 1, 2, 2};
  insert_v(t, v, 4);
  slot_t s;
  slot_init(&s, t, 4);
  slot_pin(&s);
  assert_int_equal(slot_sample_pinned(t, &s, UINT64_MAX), 0);
  assert_int_equal(stats(t).size, 0);
  assert_int_equal(chime__table_set_version(t, 3, NULL), 0); /* 1 is stale */
  chime__table_give_back_pinned(t, &s.lay, &s.pins);
  chime__table_unpin(t, &s.pins);
  chime__table_stats_t st = stats(t);
  assert_int_equal(st.size, 2);
  assert_int_equal(st.removed_stale, 2);
  assert_int_equal(st.returned, 2);
  slot_fini(&s);
  slot_init(&s, t, 2);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  assert_int_equal(s.ws.info[0].version, 2);
  assert_int_equal(s.ws.info[1].version, 2);
  assert_int_equal(s.ws.info[0].staleness, 1);
  slot_fini(&s);
  chime__table_destroy(t);
}

static void write_file(chime__table_t *t, uint8_t **p, size_t *n) {
  char err[256] = "";
  chime__ckpt_file_t f;
  FILE *tf = tmpfile();
  uint8_t *buf = malloc(CHIME__CKPT_WBUF);
  assert_non_null(tf);
  assert_non_null(buf);
  if (chime__checkpoint_write_table(t, fileno(tf), buf, "tmp", &f, err,
                                    sizeof(err)) != 0)
    fail_msg("write: %s", err);
  free(buf);
  *n = (size_t)lseek(fileno(tf), 0, SEEK_END);
  *p = malloc(*n);
  assert_non_null(*p);
  assert_int_equal(pread(fileno(tf), *p, *n, 0), (ssize_t)*n);
  fclose(tf);
}

static void load_into(chime__table_t *t, const uint8_t *p, size_t n) {
  char err[256] = "";
  uint64_t items;
  if (chime__checkpoint_load_table(p, n, &t, 1, "f", &items, err,
                                   sizeof(err)) != 0)
    fail_msg("load: %s", err);
}

/* Each sample's version in a batch of the whole table, by key order. */
static void versions_of(chime__table_t *t, uint32_t n, uint64_t *out,
                        uint64_t *newest) {
  slot_t s;
  slot_init(&s, t, n);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < n; j++) {
    out[j] = s.ws.info[j].version;
    *newest = s.ws.info[j].version + s.ws.info[j].staleness;
  }
  slot_fini(&s);
}

static void test_checkpoint(void **state) {
  (void)state;
  chime__table_t *a = vtable(CHIME__SELECTOR_FIFO, 64, 5, 0);
  chime__table_t *b = vtable(CHIME__SELECTOR_FIFO, 64, 5, 0);
  uint64_t v[6] = {3, 4, 4, 6, 5, 7}, got[6], newest = 0;
  uint8_t *p;
  size_t n;
  insert_v(a, v, 6);
  assert_int_equal(chime__table_set_version(a, 8, NULL), 0);
  write_file(a, &p, &n);
  assert_int_equal(p[8], CHIME__CKPT_VERSION);
  assert_int_equal(CHIME__CKPT_VERSION, 7);
  load_into(b, p, n);
  assert_int_equal(stats(b).newest_version, 8);
  versions_of(b, 6, got, &newest);
  assert_memory_equal(got, v, sizeof(v));
  assert_int_equal(newest, 8);
  /* Into a table with a tighter gate: the items too far behind the
   * restored newest version leave at once. */
  chime__table_t *c = vtable(CHIME__SELECTOR_FIFO, 64, 2, 0);
  load_into(c, p, n);
  assert_int_equal(stats(c).size, 2); /* 8 - 2 = 6: only 6 and 7 stay */
  assert_int_equal(stats(c).removed_stale, 4);
  /* The same file as version 3 wrote it: no newest version, no item
   * versions; it loads with every version 0. */
  size_t hdr = 8 + 4 + 4 + 4 + 4 + 1 + 4 + strlen("a:u32[2],b:u8[]") + 8 * 8;
  assert_memory_equal(p + 8 + 4 + 4 + 4 + 4, "t", 1);
  size_t m = 0;
  uint8_t *old = malloc(n);
  assert_non_null(old);
  memcpy(old, p, hdr);
  m = hdr;
  old[8] = 3;
  /* past the newest version, no compressed leaves, no writers (6), the
   * samples ahead (pacing, 7) */
  size_t at = hdr + 8 + 4 + 8 + 8;
  for (int i = 0; i < 6; i++) {
    memcpy(old + m, p + at, 28); /* key, itime, prio, times */
    m += 28;
    at += 28 + 8; /* the item's version */
    memcpy(old + m, p + at, SB);
    m += SB;
    at += SB;
  }
  assert_int_equal(at, n - 4);
  uint32_t crc = chime__crc32c(0, old, m);
  for (int i = 0; i < 4; i++)
    old[m + i] = (uint8_t)(crc >> (8 * i));
  chime__table_t *d = vtable(CHIME__SELECTOR_FIFO, 64, 5, 0);
  load_into(d, old, m + 4);
  assert_int_equal(stats(d).size, 6);
  assert_int_equal(stats(d).newest_version, 0);
  versions_of(d, 6, got, &newest);
  for (int i = 0; i < 6; i++)
    assert_int_equal(got[i], 0);
  free(old);
  free(p);
  chime__table_destroy(a);
  chime__table_destroy(b);
  chime__table_destroy(c);
  chime__table_destroy(d);
}

/* tests/fuzz/corpus/checkpoint/fifo_versions_v4, made by hand from the
 * format's description (ckpt_format.h): 5 items of versions 3..7, newest
 * 7, behind fuzz_checkpoint's flags byte. Into a table with max_staleness
 * 2, versions 3 and 4 leave as it loads. */
static void test_checkpoint_seed(void **state) {
  (void)state;
  const char *src = getenv("CHIME_SOURCE_DIR");
  if (src == NULL)
    skip();
  char path[1024];
  snprintf(path, sizeof(path),
           "%s/tests/fuzz/corpus/checkpoint/fifo_versions_v4", src);
  FILE *in = fopen(path, "rb");
  assert_non_null(in);
  uint8_t raw[4096];
  size_t n = fread(raw, 1, sizeof(raw), in);
  fclose(in);
  assert_true(n > 13 && n < sizeof(raw));
  chime__table_config_t tc;
  chime__table_t *t;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  assert_int_equal(chime_spec_parse(&tc.spec, "x:u64[], y:u8[4]"), 0);
  tc.capacity = 16;
  tc.sampler = CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.max_staleness = 2;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  load_into(t, raw + 1, n - 1);
  chime__table_stats_t st = stats(t);
  assert_int_equal(st.size, 3);
  assert_int_equal(st.removed_stale, 2);
  assert_int_equal(st.newest_version, 7);
  uint64_t got[3], newest = 0;
  versions_of(t, 3, got, &newest);
  assert_int_equal(got[0], 5);
  assert_int_equal(got[1], 6);
  assert_int_equal(got[2], 7);
  chime__table_destroy(t);
}

/* A sequence table with a gate: a writer's steps carry their versions,
 * T = 4, stride 1. */
static chime__table_t *seq_vtable(void) {
  chime__table_config_t tc;
  chime__table_t *t = NULL;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "s");
  assert_int_equal(chime_spec_parse(&tc.spec, "o:f32[2]"), 0);
  tc.capacity_steps = 64;
  tc.sequence_length = 4;
  tc.stride = 1;
  tc.sampler = CHIME__SELECTOR_UNIFORM;
  tc.min_size = 1;
  tc.max_staleness = 2;
  tc.seed = 5;
  assert_int_equal(chime__table_create(&t, &tc), 0);
  return t;
}

/* n steps of writer w (request seq) with versions ver[0, n). */
static void seq_steps_v(chime__table_t *t, uint64_t w, uint64_t seq,
                        const uint64_t *ver, uint32_t n) {
  uint8_t buf[16 * 8] = {0};
  uint64_t key;
  chime__span_t sp = {buf, (size_t)n * 8};
  chime__table_versions_t v = {ver, n};
  chime__dedupe_req_t dq = {.writer = w, .seq = seq};
  assert_true(n <= 16);
  assert_int_equal(chime__table_insert_versioned(t, &sp, 1, n, NULL, NULL, &v,
                                                 &key, NULL, &dq, 0),
                   0);
}

/* A batch of 32 windows (uniform): each one's version is want[its key's
 * count], and none is of a key want has as 0 (gone). */
static void check_windows(chime__table_t *t, const uint64_t *want,
                          uint64_t newest) {
  slot_t s;
  slot_init(&s, t, 32);
  assert_int_equal(chime__table_sample(t, &s.lay, &s.ws, NULL), 0);
  for (uint32_t j = 0; j < 32; j++) {
    uint64_t k = chime__key_count(s.ws.info[j].key);
    assert_true(want[k] != 0);
    assert_int_equal(s.ws.info[j].version, want[k]);
    assert_int_equal(s.ws.info[j].staleness, newest - want[k]);
  }
  slot_fini(&s);
}

/* A sequence table's window has its oldest step's version, so a gate
 * removes (and never samples) a window whose first step fell too far
 * behind; a window already too far behind when complete is never made;
 * the steps' versions go through a checkpoint. */
static void test_sequence_versions(void **state) {
  (void)state;
  chime__table_t *t = seq_vtable();
  uint64_t v1[6] = {1, 1, 2, 2, 3, 3};
  seq_steps_v(t, 1, 1, v1, 6);
  /* Windows 1..3 start at steps 0..2. */
  uint64_t want[8] = {0, 1, 1, 2, 0, 0, 0, 0};
  assert_int_equal(stats(t).size, 3);
  check_windows(t, want, 3);
  /* Version 4: windows of version 1 leave. */
  assert_int_equal(chime__table_set_version(t, 4, NULL), 0);
  assert_int_equal(stats(t).size, 1);
  assert_int_equal(stats(t).removed_stale, 2);
  want[1] = want[2] = 0;
  check_windows(t, want, 4);
  /* Two more steps: windows 4 and 5 start at steps 3 and 4. */
  uint64_t v2[2] = {4, 4};
  seq_steps_v(t, 1, 2, v2, 2);
  want[4] = 2;
  want[5] = 3;
  check_windows(t, want, 4);
  /* Another writer's steps of version 1: its window is never made. */
  uint64_t v3[4] = {1, 1, 1, 1};
  seq_steps_v(t, 2, 1, v3, 4);
  assert_int_equal(stats(t).size, 3);
  assert_int_equal(stats(t).removed_stale, 3);
  /* Through a checkpoint: the same windows and versions. */
  chime__table_t *b = seq_vtable();
  uint8_t *p;
  size_t n;
  write_file(t, &p, &n);
  load_into(b, p, n);
  assert_int_equal(stats(b).size, 3);
  check_windows(b, want, 4);
  free(p);
  chime__table_destroy(b);
  chime__table_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_verindex),
      cmocka_unit_test(test_verindex_weights),
      cmocka_unit_test(test_newest),
      cmocka_unit_test(test_gate_fifo),
      cmocka_unit_test(test_gate_lifo),
      cmocka_unit_test(test_gate_uniform),
      cmocka_unit_test(test_gate_prioritized),
      cmocka_unit_test(test_gate_heaps),
      cmocka_unit_test(test_stale_on_arrival),
      cmocka_unit_test(test_give_back_stale),
      cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_sequence_versions),
      cmocka_unit_test(test_checkpoint_seed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
