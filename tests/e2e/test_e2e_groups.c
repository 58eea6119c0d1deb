/* Group tables end to end against the real chimed (docs/replay.md,
 * "Groups", "Admission filters"): groups of 1..group_max ragged samples
 * written with chime_writer_append_group come back whole, in shm and in
 * stream mode, as batches of groups with their offsets beside each
 * sample's; the filters drop the groups they name (the writer's acks say
 * which and why, Stats count them, and no dropped group is ever sampled);
 * a bad group is refused by the writer (nothing queued) and by the server
 * (a group whose lengths do not add up: INVALID_ARGUMENT naming it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "harness.h"

#define GMAX 8
#define BOUND 50
#define NGROUPS 24
#define BATCH 4

#define SPEC "tokens:i32[<=50], lp:f32[<=50 ~tokens], reward:f32[]"
static const char *config =
    "{\"tables\": [{\"name\": \"grp\", \"spec\": \"" SPEC "\", "
    "\"group_max\": 8, \"capacity\": 1000, \"sampler\": \"fifo\"},\n"
    "  {\"name\": \"filt\", \"spec\": \"" SPEC "\", \"group_max\": 8, "
    "\"capacity\": 1000, \"sampler\": \"fifo\", \"filters\": ["
    "{\"leaf\": \"reward\", \"drop\": \"zero_variance\"}, "
    "{\"leaf\": \"reward\", \"drop\": \"mean_outside\", \"min\": -100, "
    "\"max\": 100}]},\n"
    "  {\"name\": \"plain\", \"spec\": \"" SPEC "\", \"capacity\": 10}]}\n";

CHIME__CHIMED_GROUP(config)

/* Group g's size and sample j's length and values. */
static uint32_t group_n(uint64_t g) {
  return (uint32_t)(g % GMAX) + 1;
}
static uint32_t tok_len(uint64_t g, uint32_t j) {
  return (uint32_t)((g * 7 + j * 3) % (BOUND + 1));
}
static float reward_of(uint64_t g, uint32_t j) {
  return (float)(g + j);
}

/* Appends group g, its rewards rw (NULL: reward_of). */
static int append(chime_writer_t *w, uint64_t g, const float *rw) {
  static int32_t tok[GMAX * BOUND];
  static float lp[GMAX * BOUND];
  float r[GMAX];
  uint32_t len[GMAX], n = group_n(g), at = 0;
  for (uint32_t j = 0; j < n; j++) {
    len[j] = tok_len(g, j);
    for (uint32_t k = 0; k < len[j]; k++, at++) {
      tok[at] = (int32_t)(g * 10000 + j * 100 + k);
      lp[at] = (float)k / 2;
    }
    r[j] = rw != NULL ? rw[j] : reward_of(g, j);
  }
  const void *leaves[3] = {tok, lp, r};
  const uint32_t *lengths[3] = {len, len, NULL};
  return chime_writer_append_group(w, leaves, lengths, n, 1.0);
}

static chime_writer_t *open_writer(const char *table) {
  chime_writer_t *w = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = 5; /* several messages */
  assert_int_equal(chime_writer_open(&w, client, table, &wo), 0);
  return w;
}

/* Batch group b is group g: its samples, their rows and values. */
static void check_group(const chime_batch_t *b, uint32_t gi, uint64_t g) {
  const chime_batch_leaf_t *t = chime_batch_leaf(b, "tokens");
  const chime_batch_leaf_t *l = chime_batch_leaf(b, "lp");
  const chime_batch_leaf_t *r = chime_batch_leaf(b, "reward");
  assert_non_null(b->groups);
  assert_int_equal(b->groups[gi + 1] - b->groups[gi], group_n(g));
  assert_null(r->offsets); /* a row per sample */
  assert_int_equal(r->shape[0], b->groups[b->count]);
  for (uint32_t j = 0; j < group_n(g); j++) {
    int64_t s = b->groups[gi] + j;
    const int64_t *to = t->offsets;
    assert_int_equal(to[s + 1] - to[s], tok_len(g, j));
    assert_int_equal(l->offsets[s], to[s]);
    for (int64_t k = 0; k < to[s + 1] - to[s]; k++) {
      assert_int_equal(((const int32_t *)t->data)[to[s] + k],
                       (int32_t)(g * 10000 + j * 100 + (uint64_t)k));
      assert_true(((const float *)l->data)[to[s] + k] == (float)k / 2);
    }
    assert_true(((const float *)r->data)[s] == reward_of(g, j));
  }
}

/* Reads groups gs[0..n) (fifo: in order), their keys key0 on. */
static void consume(const char *table, chime_mode_t mode, const uint64_t *gs,
                    uint64_t n, uint64_t key0) {
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = 4;
  so.mode = mode;
  if (chime_stream_open(&s, client, table, &so) != 0)
    fail_msg("open %s: %s", chime_mode_name(mode), chime_last_error());
  for (uint64_t got = 0; got < n; got += BATCH) {
    chime_batch_t b;
    if (chime_stream_next(s, &b, 20000) != 0)
      fail_msg("next (%s): %s", chime_mode_name(mode), chime_last_error());
    assert_int_equal(b.count, BATCH);
    assert_int_equal(b.groups[0], 0);
    for (uint32_t j = 0; j < BATCH; j++) {
      check_group(&b, j, gs[got + j]);
      assert_int_equal(b.info[j].key & 0xffffffffffffull, key0 + gs[got + j]);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
}

static void test_groups_whole_in_both_modes(void **state) {
  (void)state;
  uint64_t gs[NGROUPS];
  for (int pass = 0; pass < 2; pass++) {
    chime_writer_t *w = open_writer("grp");
    for (uint64_t g = 0; g < NGROUPS; g++) {
      if (append(w, g, NULL) != 0)
        fail_msg("append group %llu: %s", (unsigned long long)g,
                 chime_last_error());
      gs[g] = g;
    }
    assert_int_equal(chime_writer_flush(w), 0);
    assert_int_equal(chime_writer_acked(w), NGROUPS); /* one item a group */
    assert_int_equal(chime_writer_dropped(w), 0);
    assert_int_equal(chime_writer_close(w), 0);
    consume("grp", pass == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM, gs, NGROUPS,
            1 + (uint64_t)pass * NGROUPS);
  }
}

static void test_filters_drop_and_say(void **state) {
  (void)state;
  chime_writer_t *w = open_writer("filt");
  uint64_t kept[NGROUPS], nkept = 0;
  for (uint64_t g = 0; g < NGROUPS; g++) {
    float rw[GMAX];
    for (uint32_t j = 0; j < GMAX; j++)
      rw[j] = g % 3 == 1   ? 0.5f               /* zero variance */
              : g % 3 == 2 ? 1000.0f + (float)j /* mean outside */
                           : reward_of(g, j);   /* kept */
    assert_int_equal(append(w, g, g % 3 == 0 ? NULL : rw), 0);
    if (g % 3 == 0 && group_n(g) > 1)
      kept[nkept++] = g;
  }
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_acked(w), NGROUPS);
  chime_writer_drop_t d[NGROUPS];
  uint32_t nd = chime_writer_take_dropped(w, d, NGROUPS);
  assert_int_equal(nd, NGROUPS - nkept);
  assert_int_equal(chime_writer_dropped(w), nd);
  uint64_t zv = 0, mo = 0;
  for (uint32_t k = 0, g = 0; k < nd; k++, g++) {
    while (g % 3 == 0 && group_n(g) > 1)
      g++;
    assert_int_equal(d[k].index, g);
    assert_int_equal(d[k].key & 0xffffffffffffull, g + 1);
    /* One sample has zero variance: that filter comes first. */
    assert_int_equal(d[k].reason, g % 3 == 2 && group_n(g) > 1
                                      ? CHIME_DROP_MEAN_OUTSIDE
                                      : CHIME_DROP_ZERO_VARIANCE);
    zv += d[k].reason == CHIME_DROP_ZERO_VARIANCE;
    mo += d[k].reason == CHIME_DROP_MEAN_OUTSIDE;
  }
  assert_int_equal(chime_writer_take_dropped(w, d, NGROUPS), 0);
  assert_int_equal(chime_writer_close(w), 0);

  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  for (uint32_t i = 0; i < st->ntables; i++) {
    if (strcmp(st->tables[i].name, "filt") != 0)
      continue;
    assert_int_equal(st->tables[i].dropped_zero_variance, zv);
    assert_int_equal(st->tables[i].dropped_mean_outside, mo);
    assert_int_equal(st->tables[i].inserts, NGROUPS);
    assert_int_equal(st->tables[i].size, nkept);
  }
  chime_stats_free(st);
  consume("filt", CHIME_MODE_SHM, kept, nkept - nkept % BATCH, 1);
}

static void test_bad_groups_refused(void **state) {
  (void)state;
  chime_writer_t *w = open_writer("grp");
  int32_t tok[GMAX * BOUND] = {0};
  float lp[GMAX * BOUND] = {0}, r[GMAX + 1] = {0};
  uint32_t len[GMAX + 1] = {0};
  const void *leaves[3] = {tok, lp, r};
  const uint32_t *lengths[3] = {len, len, NULL};
  assert_int_equal(chime_writer_append_group(w, leaves, lengths, 0, 1.0),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "group of 0 samples"));
  assert_int_equal(chime_writer_append_group(w, leaves, lengths, 9, 1.0),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "group_max"));
  len[1] = BOUND + 1;
  assert_int_equal(chime_writer_append_group(w, leaves, lengths, 2, 1.0),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "'tokens' of sample 1"));
  const uint32_t *none[3] = {NULL, NULL, NULL};
  assert_int_equal(chime_writer_append_group(w, leaves, none, 2, 1.0),
                   CHIME_EINVAL);
  /* A group packed by hand whose lengths do not add up: the server. */
  uint32_t col[4] = {3, 3, 4, 4}, rows[4] = {2, 5, 5, 2};
  const void *packed[4] = {col, tok, lp, r};
  assert_int_equal(chime_writer_append_leaves(w, packed, rows, 1.0), 0);
  assert_int_equal(chime_writer_flush(w), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "group 0: leaf 'tokens'"));
  assert_int_equal(chime_writer_close(w), CHIME_EINVAL);
  /* An empty group packed by hand: the server names it. */
  w = open_writer("grp");
  uint32_t none_rows[4] = {0, 0, 0, 0};
  assert_int_equal(chime_writer_append_leaves(w, packed, none_rows, 1.0), 0);
  assert_int_equal(chime_writer_flush(w), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "group 0 is empty"));
  assert_int_equal(chime_writer_close(w), CHIME_EINVAL);

  chime_writer_t *p = open_writer("plain");
  assert_int_equal(chime_writer_append_group(p, leaves, lengths, 1, 1.0),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "not a group table"));
  assert_int_equal(chime_writer_close(p), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_groups_whole_in_both_modes),
      cmocka_unit_test(test_filters_drop_and_say),
      cmocka_unit_test(test_bad_groups_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
