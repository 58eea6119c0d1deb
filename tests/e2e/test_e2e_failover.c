/* Writers over shards, against three real chimed (config shard 1, 2, 3,
 * a checkpoint dir each) behind one sharded client "a,b,c"
 * (docs/scaling.md, Writers and shards):
 * - 8 writer threads on a fifo table are spread over the shards (3, 3, 2:
 *   per-shard inserts and the items' values say which writer is where);
 *   one shard is killed with SIGKILL mid-run: every writer goes on, the
 *   ones bound to the dead shard move past their reconnect_timeout_ms,
 *   spread over the live ones (4 and 4), and every item acked on a live
 *   shard is delivered exactly once (checked by value, writer and
 *   sequence, over one learner per shard and 4 on the sharded client).
 *   What the dead shard acked and no learner took is lost with it; what
 *   it had checkpointed comes back.
 * - The killed shard restarted with --restore latest on its port rejoins
 *   the running client: info sums include it, a new writer binds to it,
 *   MutatePriorities reaches its keys.
 * - MutatePriorities with keys of every shard changes exactly those items;
 *   a key of a shard the target does not name, or a target naming two
 *   servers of one shard, is CHIME_EINVAL and nothing changes.
 * - A writer that moves resends to a shard that never saw it, as a new
 *   writer there: it goes on even when that shard's table already forgot
 *   some other writer (it used to fail with CHIME_EFORGOTTEN); a sequence
 *   table's episode open on the dead shard is cut there.
 * - Writers spread over servers: one named twice counts once.
 * - A shard restarted quickly from its checkpoint keeps the writer; one
 *   restored without it, that had forgotten writers: the writer moves on.
 * - A table configured otherwise on one shard: a writer's open, and its
 *   failover to that shard, refused by name (CHIME_EINVAL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"

#define NSHARDS 3
#define WRITERS 8
#define BATCH 16  /* samples per Insert request, and per learner batch */
#define PHASE1 64 /* items per writer before the kill's phase */
#define RECONNECT_MS 1000
#define GENEROUS_MS 30000 /* liveness bounds, not speed */
#define CAP 65536
#define MARKERS 32
#define KEY(s, n) ((uint64_t)(s) << 48 | (uint64_t)(n))

typedef struct {
  uint32_t w, s;
} item_t;

static chime__chimed_t shard_d[NSHARDS + 1];
static char shard_cfg[NSHARDS + 1][2048];
static int nstarted;

static void make_config(int i, uint32_t shard, const char *extra_table) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/ckpt-%d-%u", chime__harness_tmpdir(), i, shard);
  snprintf(shard_cfg[i], sizeof shard_cfg[i],
           "{\"shard\": %u, \"checkpoint\": {\"dir\": \"%s\"},\n"
           " \"tables\": [\n"
           "  {\"name\": \"q\", \"spec\": \"w:u32[], s:u32[]\", "
           "\"capacity\": %d, \"sampler\": \"fifo\"},\n"
           "  {\"name\": \"keep\", \"spec\": \"w:u32[], s:u32[]\", "
           "\"capacity\": 1000, \"sampler\": \"uniform\"},\n"
           "  {\"name\": \"p\", \"spec\": \"w:u32[], s:u32[]\", "
           "\"capacity\": 1000, \"sampler\": \"prioritized\", "
           "\"priority_exponent\": 1.0}%s]}\n",
           shard, dir, CAP, extra_table ? extra_table : "");
}

/* Starts chimed i as shard `shard`. */
static void start_shard(int i, uint32_t shard, const char *extra_table) {
  make_config(i, shard, extra_table);
  int rc = chime__chimed_start_or_skip(&shard_d[i], shard_cfg[i], NULL, 30000);
  assert_int_equal(rc, 0);
  if (i + 1 > nstarted)
    nstarted = i + 1;
}

/* "a,b,c" of the first n shards. */
static void target_of(int n, char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t at = strlen(buf);
    snprintf(buf + at, len - at, "%s%s", i ? "," : "", shard_d[i].addr);
  }
}

/* Starts chimed 0..n-1 as shards 1..n (each with extra_table) and returns
 * a client over all of them. */
static chime_client_t *start_shards(int n, const char *extra_table) {
  for (int i = 0; i < n; i++)
    start_shard(i, (uint32_t)i + 1, extra_table);
  char target[1024];
  target_of(n, target, sizeof target);
  chime_client_t *c = NULL;
  if (chime_client_create(&c, target, NULL) != 0)
    fail_msg("client: %s", chime_last_error());
  return c;
}

/* A writer on c's table that moves off a shard unreachable for
 * RECONNECT_MS. */
static chime_writer_t *failover_writer(chime_client_t *c, const char *table,
                                       uint32_t batch) {
  chime_writer_t *wr = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = batch;
  wo.reconnect_timeout_ms = RECONNECT_MS;
  if (chime_writer_open(&wr, c, table, &wo) != 0)
    fail_msg("writer: %s", chime_last_error());
  return wr;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < nstarted; i++)
    chime__proc_kill(&shard_d[i].proc);
  nstarted = 0;
  chime__harness_kill_all();
  return 0;
}

static uint64_t table_inserts(chime_client_t *c, const char *table) {
  chime_stats_t *st = NULL;
  int rc = chime_client_stats(c, &st);
  if (rc)
    fail_msg("stats: %s", chime_last_error());
  uint64_t n = UINT64_MAX;
  for (uint32_t i = 0; i < st->ntables; i++)
    if (strcmp(st->tables[i].name, table) == 0)
      n = st->tables[i].inserts;
  chime_stats_free(st);
  assert_true(n != UINT64_MAX);
  return n;
}

/* Appends n items (w, s0 + i) through writer wr and flushes. */
static void write_items(chime_writer_t *wr, uint32_t w, uint32_t s0,
                        uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    item_t it = {w, s0 + i};
    if (chime_writer_append(wr, &it, sizeof it, 1.0) != 0)
      fail_msg("append: %s", chime_last_error());
  }
  if (chime_writer_flush(wr) != 0)
    fail_msg("flush: %s", chime_last_error());
}

/* A plain writer on client c, n items, closed. */
static void write_on(chime_client_t *c, const char *table, uint32_t w,
                     uint32_t s0, uint32_t n) {
  chime_writer_t *wr = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = BATCH;
  if (chime_writer_open(&wr, c, table, &wo) != 0)
    fail_msg("writer open: %s", chime_last_error());
  write_items(wr, w, s0, n);
  assert_int_equal(chime_writer_close(wr), 0);
}

/* ------------------------------------------------------------ learners */

/* Learner threads: one per shard on the shard's own client, and UNION more
 * on the sharded client (each sampling the union of the shards). Each
 * records every item it is given, with the shard its key names, until
 * told to quit or its stream ends. */
#define UNION 4
#define NLEARNERS (NSHARDS + UNION)

typedef struct {
  uint32_t w, s, shard; /* shard: index, from the key */
} got_t;

static _Atomic uint64_t g_deliv[NSHARDS]; /* items delivered, by shard */

typedef struct {
  chime_stream_t *s;
  pthread_t th;
  pthread_mutex_t mu;
  got_t *items;
  size_t n, cap;
  atomic_int quit;
  int end_rc;
  char end_err[256];
} learner_t;

static void *tallying_learner_main(void *arg) {
  learner_t *L = arg;
  while (!atomic_load(&L->quit)) {
    chime_batch_t b;
    int rc = chime_stream_next(L->s, &b, 200);
    if (rc == CHIME_ETIMEDOUT)
      continue;
    if (rc) {
      L->end_rc = rc;
      snprintf(L->end_err, sizeof L->end_err, "%s", chime_last_error());
      break;
    }
    const uint32_t *wv = b.leaf[0].data, *sv = b.leaf[1].data;
    pthread_mutex_lock(&L->mu);
    if (L->n + b.count > L->cap) {
      size_t cap = L->cap ? L->cap * 2 : 4096;
      while (cap < L->n + b.count)
        cap *= 2;
      got_t *grown = realloc(L->items, cap * sizeof(*grown));
      if (!grown)
        abort();
      L->items = grown;
      L->cap = cap;
    }
    for (uint32_t j = 0; j < b.count; j++) {
      /* Shard i is config shard i + 1 (start_shard); anything else shows
       * as out of range in the tally. */
      uint32_t shard = chime_key_shard(b.info[j].key) - 1;
      L->items[L->n++] = (got_t){wv[j], sv[j], shard};
      if (shard < NSHARDS)
        atomic_fetch_add(&g_deliv[shard], 1);
    }
    pthread_mutex_unlock(&L->mu);
    if (chime_stream_release(L->s, &b) != 0) {
      L->end_rc = CHIME_EPROTO;
      break;
    }
  }
  return NULL;
}

static void learner_start(learner_t *L, chime_client_t *c, const char *table) {
  memset(L, 0, sizeof(*L));
  pthread_mutex_init(&L->mu, NULL);
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  if (chime_stream_open(&L->s, c, table, &so) != 0)
    fail_msg("stream open: %s", chime_last_error());
  assert_int_equal(pthread_create(&L->th, NULL, tallying_learner_main, L), 0);
}

static void learner_stop(learner_t *L) {
  atomic_store(&L->quit, 1);
  pthread_join(L->th, NULL);
  chime_stream_close(L->s);
  L->s = NULL;
}

/* Waits (bounded) until the learners together delivered want[i] items of
 * every shard i with want[i] != UINT64_MAX. */
static void wait_delivered(const uint64_t *want, const char *what) {
  int64_t end = chime__now_ms() + GENEROUS_MS * 2;
  for (int i = 0; i < NSHARDS; i++) {
    if (want[i] == UINT64_MAX)
      continue;
    while (atomic_load(&g_deliv[i]) < want[i] && chime__now_ms() < end)
      chime__sleep_ms(10);
    if (atomic_load(&g_deliv[i]) != want[i])
      fail_msg("%s: shard %d delivered %" PRIu64 " items, inserted %" PRIu64,
               what, i, (uint64_t)atomic_load(&g_deliv[i]), want[i]);
  }
}

static void learner_free(learner_t *L) {
  free(L->items);
  pthread_mutex_destroy(&L->mu);
}

/* ------------------------------------------------------------- writers */

typedef struct {
  uint32_t id;
  chime_client_t *c;
  pthread_t th;
  _Atomic uint32_t appended; /* phase 2 items so far */
  uint32_t total;            /* items in all, once joined */
  int64_t longest_ms;        /* the longest append or flush in phase 2 */
  int rc;
  char err[512];
} writer_t;

static pthread_barrier_t phase_barrier;
static atomic_int g_stop;

static void *phased_writer_main(void *arg) {
  writer_t *W = arg;
  chime_writer_t *wr = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = BATCH;
  wo.reconnect_timeout_ms = RECONNECT_MS;
  wo.timeout_ms = GENEROUS_MS * 2;
  uint32_t seq = 0;
  W->rc = chime_writer_open(&wr, W->c, "q", &wo);
  if (W->rc)
    snprintf(W->err, sizeof W->err, "open: %s", chime_last_error());
  for (; W->rc == 0 && seq < PHASE1; seq++) {
    item_t it = {W->id, seq};
    if ((W->rc = chime_writer_append(wr, &it, sizeof it, 1.0)) != 0)
      snprintf(W->err, sizeof W->err, "append %u: %s", seq, chime_last_error());
  }
  if (W->rc == 0 && (W->rc = chime_writer_flush(wr)) != 0)
    snprintf(W->err, sizeof W->err, "flush: %s", chime_last_error());
  pthread_barrier_wait(&phase_barrier); /* phase 1 in */
  pthread_barrier_wait(&phase_barrier); /* phase 2 begins */
  /* Whole requests only, so every request carries BATCH items. */
  while (W->rc == 0 && (!atomic_load(&g_stop) || seq % BATCH != 0)) {
    item_t it = {W->id, seq};
    int64_t t0 = chime__now_ms();
    W->rc = chime_writer_append(wr, &it, sizeof it, 1.0);
    int64_t dt = chime__now_ms() - t0;
    if (dt > W->longest_ms)
      W->longest_ms = dt;
    if (W->rc) {
      snprintf(W->err, sizeof W->err, "append %u: %s", seq, chime_last_error());
      break;
    }
    seq++;
    atomic_fetch_add(&W->appended, 1);
  }
  if (W->rc == 0) {
    int64_t t0 = chime__now_ms();
    if ((W->rc = chime_writer_flush(wr)) != 0)
      snprintf(W->err, sizeof W->err, "flush: %s", chime_last_error());
    int64_t dt = chime__now_ms() - t0;
    if (dt > W->longest_ms)
      W->longest_ms = dt;
  }
  if (W->rc == 0 && chime_writer_acked(wr) != seq) {
    W->rc = CHIME_EPROTO;
    snprintf(W->err, sizeof W->err, "acked %" PRIu64 " of %u",
             chime_writer_acked(wr), seq);
  }
  W->total = seq;
  int closed = chime_writer_close(wr);
  if (W->rc == 0 && closed != 0) {
    W->rc = closed;
    snprintf(W->err, sizeof W->err, "close: %s", chime_last_error());
  }
  return NULL;
}

/* Waits (bounded) until every writer has appended at least want[i]. */
static void wait_writers(writer_t *ws, const uint32_t *want, const char *what) {
  int64_t end = chime__now_ms() + GENEROUS_MS * 2;
  for (int i = 0; i < WRITERS; i++) {
    while (atomic_load(&ws[i].appended) < want[i] && ws[i].rc == 0 &&
           chime__now_ms() < end)
      chime__sleep_ms(10);
    if (atomic_load(&ws[i].appended) < want[i])
      fail_msg("%s: writer %d appended %u of %u (rc %d: %s)", what, i,
               (unsigned)atomic_load(&ws[i].appended), want[i], ws[i].rc,
               ws[i].err);
  }
}

/* count[w][s]: how often item (w, s) of shard `shard` was delivered, by
 * any learner. */
static uint8_t **tally(const learner_t *L, uint32_t shard,
                       const uint32_t *limit) {
  uint8_t **t = calloc(WRITERS, sizeof(*t));
  assert_non_null(t);
  for (int w = 0; w < WRITERS; w++)
    assert_non_null(t[w] = calloc(limit[w] + 1, 1));
  for (int l = 0; l < NLEARNERS; l++)
    for (size_t k = 0; k < L[l].n; k++) {
      got_t it = L[l].items[k];
      if (it.shard >= NSHARDS || it.w >= WRITERS || it.s >= limit[it.w])
        fail_msg("delivered an item no writer sent: writer %u seq %u shard "
                 "index %u",
                 it.w, it.s, it.shard);
      if (it.shard == shard && t[it.w][it.s] < 255)
        t[it.w][it.s]++;
    }
  return t;
}

static void tally_free(uint8_t **t) {
  for (int w = 0; t && w < WRITERS; w++)
    free(t[w]);
  free(t);
}

/* The 8 writers, a kill -9 of one shard mid-run, and its rejoin. */
static void test_kill_one_shard(void **state) {
  (void)state;
  chime_client_t *c = start_shards(NSHARDS, NULL);
  assert_int_equal(chime_client_nshards(c), NSHARDS);
  chime_client_t *sc[NSHARDS];
  for (int i = 0; i < NSHARDS; i++) {
    sc[i] = chime_client_shard(c, (uint32_t)i);
    assert_non_null(sc[i]);
    assert_string_equal(chime_client_shard_address(c, (uint32_t)i),
                        shard_d[i].addr);
  }

  /* L[i] on shard i alone; L[NSHARDS..] on the union (src/client/union.c). */
  static learner_t L[NLEARNERS];
  for (int i = 0; i < NSHARDS; i++)
    atomic_store(&g_deliv[i], 0);
  for (int i = 0; i < NLEARNERS; i++)
    learner_start(&L[i], i < NSHARDS ? sc[i] : c, "q");

  static writer_t W[WRITERS];
  memset(W, 0, sizeof W);
  atomic_store(&g_stop, 0);
  assert_int_equal(pthread_barrier_init(&phase_barrier, NULL, WRITERS + 1), 0);
  for (int i = 0; i < WRITERS; i++) {
    W[i].id = (uint32_t)i;
    W[i].c = c;
    assert_int_equal(pthread_create(&W[i].th, NULL, phased_writer_main, &W[i]),
                     0);
  }
  pthread_barrier_wait(&phase_barrier);
  for (int i = 0; i < WRITERS; i++)
    if (W[i].rc)
      fail_msg("writer %d, phase 1: %s", i, W[i].err);

  /* Spread: round robin over 3 shards gives 3, 3 and 2 writers, each of
   * whose PHASE1 items went to one shard. */
  uint64_t ins1[NSHARDS], sum = 0;
  for (int i = 0; i < NSHARDS; i++) {
    ins1[i] = table_inserts(sc[i], "q");
    sum += ins1[i];
    if (ins1[i] != 2 * PHASE1 && ins1[i] != 3 * PHASE1)
      fail_msg("shard %d took %" PRIu64 " inserts: writers not spread 3/3/2", i,
               ins1[i]);
  }
  assert_int_equal(sum, WRITERS * PHASE1);
  int bound[WRITERS];
  for (int w = 0; w < WRITERS; w++)
    bound[w] = -1;
  wait_delivered(ins1, "phase 1");
  for (int l = 0; l < NLEARNERS; l++) {
    pthread_mutex_lock(&L[l].mu);
    for (size_t k = 0; k < L[l].n; k++) {
      got_t it = L[l].items[k];
      assert_true(it.w < WRITERS && it.shard < NSHARDS);
      if (bound[it.w] != -1 && bound[it.w] != (int)it.shard)
        fail_msg("writer %u wrote to shards %d and %u", it.w, bound[it.w],
                 it.shard);
      bound[it.w] = (int)it.shard;
    }
    pthread_mutex_unlock(&L[l].mu);
  }
  for (int w = 0; w < WRITERS; w++)
    assert_true(bound[w] >= 0);

  /* The shard to kill: writer 0's. Its "keep" table holds markers, in a
   * checkpoint taken before the kill. */
  const int K = bound[0];
  write_on(sc[K], "keep", 99, 0, MARKERS);
  chime_checkpoint_result_t ck;
  if (chime_client_checkpoint(sc[K], &ck) != 0)
    fail_msg("checkpoint: %s", chime_last_error());
  assert_true(ck.items >= MARKERS);

  pthread_barrier_wait(&phase_barrier); /* phase 2 */
  uint32_t want[WRITERS];
  for (int i = 0; i < WRITERS; i++)
    want[i] = 8 * BATCH * 4;
  wait_writers(W, want, "before the kill");
  chime__proc_kill(&shard_d[K].proc);
  /* A writer bound to the dead shard can queue at most max_inflight (8)
   * requests and a batch without an ack: 4 times as many more show it
   * moved. */
  for (int i = 0; i < WRITERS; i++)
    want[i] = atomic_load(&W[i].appended) + 8 * BATCH * 4;
  wait_writers(W, want, "after the kill");
  atomic_store(&g_stop, 1);
  for (int i = 0; i < WRITERS; i++) {
    pthread_join(W[i].th, NULL);
    if (W[i].rc)
      fail_msg("writer %d (shard %d): %s", i, bound[i], W[i].err);
    printf("writer %d: shard %d%s, %u items, longest call %" PRId64 " ms\n", i,
           bound[i], bound[i] == K ? " (killed)" : "", W[i].total,
           W[i].longest_ms);
    /* Liveness: the move comes once the reconnect timeout passed. */
    if (W[i].longest_ms > RECONNECT_MS + GENEROUS_MS)
      fail_msg("writer %d stalled %" PRId64 " ms", i, W[i].longest_ms);
  }
  pthread_barrier_destroy(&phase_barrier);

  /* The learners get exactly what each live shard inserted; the one on
   * the dead shard alone saw its stream end, the union's went on. */
  uint64_t fin[NSHARDS];
  for (int i = 0; i < NSHARDS; i++)
    fin[i] = i == K ? UINT64_MAX : table_inserts(sc[i], "q");
  wait_delivered(fin, "after the run");
  for (int l = 0; l < NLEARNERS; l++) {
    learner_stop(&L[l]);
    if (l == K)
      assert_int_equal(L[l].end_rc, CHIME_EDISCONNECTED);
    else if (L[l].end_rc != 0)
      fail_msg("learner %d ended: %s", l, L[l].end_err);
  }
  size_t by_union = 0;
  for (int l = NSHARDS; l < NLEARNERS; l++)
    by_union += L[l].n;
  printf("learners on the sharded client took %zu items\n", by_union);
  assert_true(by_union > 0);
  for (int i = 0; i < NSHARDS; i++)
    if (i != K && atomic_load(&g_deliv[i]) != fin[i])
      fail_msg("shard %d: %" PRIu64 " delivered, %" PRIu64 " inserted", i,
               (uint64_t)atomic_load(&g_deliv[i]), fin[i]);

  uint32_t limit[WRITERS];
  for (int w = 0; w < WRITERS; w++)
    limit[w] = W[w].total;
  uint8_t **t[NSHARDS];
  for (int i = 0; i < NSHARDS; i++)
    t[i] = tally(L, (uint32_t)i, limit);
  uint64_t lost = 0, twice = 0;
  int writers_on[NSHARDS] = {0};
  for (int w = 0; w < WRITERS; w++) {
    /* On the live shards: each item once, all on one shard; from `from`
     * on (a writer that moved: what was unacked when it moved, and all
     * after), nothing before. */
    int on = -1;
    uint32_t from = UINT32_MAX;
    for (uint32_t s = 0; s < limit[w]; s++) {
      int seen = 0;
      for (int i = 0; i < NSHARDS; i++) {
        if (i == K || t[i][w][s] == 0)
          continue;
        if (t[i][w][s] > 1 || seen)
          fail_msg("writer %d seq %u delivered twice on the live shards", w, s);
        seen = 1;
        if (on != -1 && on != i)
          fail_msg("writer %d's items on live shards %d and %d", w, on, i);
        on = i;
      }
      if (seen && from == UINT32_MAX)
        from = s;
      if (!seen && from != UINT32_MAX)
        fail_msg("writer %d: seq %u acked and never delivered (items from "
                 "%u on are on shard %d)",
                 w, s, from, on);
    }
    writers_on[on]++;
    if (bound[w] != K) {
      assert_int_equal(from, 0);
      assert_int_equal(on, bound[w]);
      continue;
    }
    /* Moved: its phase 1 went to the dead shard, and it went on on a live
     * one with whole requests. */
    if (from == UINT32_MAX || from < PHASE1 || from % BATCH != 0)
      fail_msg("writer %d moved: live shards have its items from %u", w, from);
    for (uint32_t s = 0; s < from; s++)
      lost += t[K][w][s] == 0;
    for (uint32_t s = from; s < limit[w]; s++)
      twice += t[K][w][s] != 0;
    printf("writer %d moved to shard %d from seq %u\n", w, on, from);
  }
  printf("dead shard: %" PRIu64 " acked items no learner took (lost), "
         "%" PRIu64 " delivered there and again after the move\n",
         lost, twice);
  /* The dead shard's writers spread over the live ones (4 and 4). */
  for (int i = 0; i < NSHARDS; i++)
    if (i != K && writers_on[i] != WRITERS / (NSHARDS - 1))
      fail_msg("after the move shard %d has %d of the %d writers", i,
               writers_on[i], WRITERS);
  for (int i = 0; i < NSHARDS; i++)
    tally_free(t[i]);
  for (int l = 0; l < NLEARNERS; l++)
    learner_free(&L[l]);

  /* The shard comes back on its port from its checkpoint; the client,
   * never restarted, reaches it again. */
  char addr[256];
  snprintf(addr, sizeof addr, "%s", shard_d[K].addr);
  const char *args[] = {"--listen", addr, "--restore", "latest", NULL};
  char cfg[2048];
  snprintf(cfg, sizeof cfg, "%s", shard_cfg[K]);
  assert_int_equal(chime__chimed_start(&shard_d[K], cfg, args, 30000), 0);
  assert_string_equal(shard_d[K].addr, addr);
  chime_server_info_t *info = NULL;
  int rc = -1;
  for (int64_t end = chime__now_ms() + GENEROUS_MS * 2;
       (rc = chime_client_info(c, &info)) != 0 && chime__now_ms() < end;)
    chime__sleep_ms(100);
  if (rc)
    fail_msg("info after the restart: %s", chime_last_error());
  assert_int_equal(chime__info_table(info, "keep")->size, MARKERS);
  assert_int_equal(chime__info_table(info, "q")->capacity,
                   (uint64_t)CAP * NSHARDS);
  chime_server_info_free(info);

  /* Three new writers: one per shard, the restarted one included. */
  uint64_t before[NSHARDS];
  for (int i = 0; i < NSHARDS; i++)
    before[i] = table_inserts(sc[i], "q");
  for (uint32_t j = 0; j < NSHARDS; j++)
    write_on(c, "q", 100 + j, 0, BATCH);
  uint64_t all = 0;
  for (int i = 0; i < NSHARDS; i++) {
    uint64_t now = table_inserts(sc[i], "q");
    if (now != before[i] + BATCH)
      fail_msg("shard %d: %" PRIu64 " new inserts, want one writer's %d", i,
               now - before[i], BATCH);
    all += now;
  }
  /* Stats over the sharded client sum the three, the restarted one's
   * count (since its restart) included. */
  assert_int_equal(table_inserts(c, "q"), all);

  /* Its keys: MutatePriorities through the sharded client reaches them. */
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 8;
  if (chime_stream_open(&s, sc[K], "keep", &so) != 0)
    fail_msg("stream: %s", chime_last_error());
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  uint64_t key = b.info[0].key;
  assert_int_equal(chime_key_shard(key), K + 1);
  assert_int_equal(((const uint32_t *)b.leaf[0].data)[0], 99);
  assert_int_equal(chime_stream_release(s, &b), 0);
  double prio = 5.0;
  chime_mutate_result_t mr;
  if (chime_client_mutate_priorities(c, "keep", &key, &prio, 1, NULL, 0, &mr))
    fail_msg("mutate: %s", chime_last_error());
  assert_int_equal(mr.updated, 1);
  assert_int_equal(mr.unknown, 0);
  /* A new stream: the old one's ring holds batches sampled before. */
  chime_stream_close(s);
  if (chime_stream_open(&s, sc[K], "keep", &so) != 0)
    fail_msg("stream: %s", chime_last_error());
  int found = 0;
  for (int tries = 0; tries < 1000 && !found; tries++) {
    assert_int_equal(chime_stream_next(s, &b, 10000), 0);
    for (uint32_t j = 0; j < b.count; j++)
      if (b.info[j].key == key) {
        found = 1;
        assert_true(b.info[j].priority == 5.0);
      } else {
        assert_true(b.info[j].priority == 1.0);
      }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  assert_true(found);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* Samples table "p" of one shard until every one of its n items was seen:
 * keys[s] and prios[s] by the item's seq s. */
static void read_p(chime_client_t *sc, uint32_t n, uint64_t *keys,
                   double *prios) {
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 16;
  so.slots = 4;
  if (chime_stream_open(&s, sc, "p", &so) != 0)
    fail_msg("stream: %s", chime_last_error());
  uint32_t seen = 0;
  uint8_t got[64] = {0};
  assert_true(n <= 64);
  for (int tries = 0; tries < 2000 && seen < n; tries++) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 10000), 0);
    for (uint32_t j = 0; j < b.count; j++) {
      uint32_t q = ((const uint32_t *)b.leaf[1].data)[j];
      assert_true(q < n);
      if (!got[q]) {
        got[q] = 1;
        seen++;
      }
      keys[q] = b.info[j].key;
      prios[q] = b.info[j].priority;
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  assert_int_equal(seen, n);
}

#define PER 4

/* MutatePriorities on the sharded client: keys of all three shards go to
 * their owners and change exactly those items; a key of a shard the
 * target does not name refuses the whole call, and nothing changes on any
 * shard. */
static void test_mutate_every_shard(void **state) {
  (void)state;
  chime_client_t *c = start_shards(NSHARDS, NULL);
  uint64_t keys[NSHARDS][PER];
  double prios[NSHARDS][PER];
  for (int i = 0; i < NSHARDS; i++) {
    write_on(chime_client_shard(c, (uint32_t)i), "p", (uint32_t)i, 0, PER);
    read_p(chime_client_shard(c, (uint32_t)i), PER, keys[i], prios[i]);
    for (int k = 0; k < PER; k++) {
      assert_int_equal(chime_key_shard(keys[i][k]), i + 1);
      assert_true(prios[i][k] == 1.0);
    }
  }
  /* Items 1 and 3 of every shard, interleaved across shards. */
  uint64_t mk[2 * NSHARDS];
  double mp[2 * NSHARDS];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < NSHARDS; i++) {
      mk[k * NSHARDS + i] = keys[i][1 + 2 * k];
      mp[k * NSHARDS + i] = 10.0 * (i + 1) + k;
    }
  chime_mutate_result_t r;
  if (chime_client_mutate_priorities(c, "p", mk, mp, 2 * NSHARDS, NULL, 0, &r))
    fail_msg("mutate: %s", chime_last_error());
  assert_int_equal(r.updated, 2 * NSHARDS);
  assert_int_equal(r.unknown, 0);
  assert_int_equal(r.deleted, 0);
  for (int i = 0; i < NSHARDS; i++) {
    uint64_t k2[PER];
    double p2[PER];
    read_p(chime_client_shard(c, (uint32_t)i), PER, k2, p2);
    for (int k = 0; k < PER; k++) {
      assert_true(k2[k] == keys[i][k]);
      double want = k == 1 ? 10.0 * (i + 1) : k == 3 ? 10.0 * (i + 1) + 1 : 1.0;
      if (p2[k] != want)
        fail_msg("shard %d item %d: priority %g, want %g", i, k, p2[k], want);
      prios[i][k] = p2[k];
    }
  }

  /* A key of shard 9 (in no server of the target) with keys of shards 1
   * and 3: refused whole, naming the key's shard; nothing changes. */
  uint64_t bad[3] = {keys[0][0], KEY(9, 1), keys[2][0]};
  double bp[3] = {77, 77, 77};
  assert_int_equal(
      chime_client_mutate_priorities(c, "p", bad, bp, 3, NULL, 0, &r),
      CHIME_EINVAL);
  if (!strstr(chime_last_error(), "shard 9"))
    fail_msg("error: %s", chime_last_error());
  uint64_t del[2] = {keys[1][0], KEY(9, 1)};
  assert_int_equal(
      chime_client_mutate_priorities(c, "p", NULL, NULL, 0, del, 2, &r),
      CHIME_EINVAL);
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(c, &info), 0);
  assert_int_equal(chime__info_table(info, "p")->size, NSHARDS * PER);
  chime_server_info_free(info);
  for (int i = 0; i < NSHARDS; i++) {
    uint64_t k2[PER];
    double p2[PER];
    read_p(chime_client_shard(c, (uint32_t)i), PER, k2, p2);
    for (int k = 0; k < PER; k++)
      if (p2[k] != prios[i][k])
        fail_msg("shard %d item %d changed: %g, was %g", i, k, p2[k],
                 prios[i][k]);
  }
  chime_client_destroy(c);
}

/* Two servers of one shard number in a target: MutatePriorities for that
 * shard's keys is CHIME_EINVAL naming the shard, and nothing changes
 * (a key of another shard in the same call included). */
static void test_same_shard_twice(void **state) {
  (void)state;
  for (int i = 0; i < NSHARDS; i++)
    start_shard(i, (uint32_t)i + 1, NULL);
  start_shard(NSHARDS, 2, NULL);
  char target[1024];
  target_of(NSHARDS + 1, target, sizeof target);
  chime_client_t *c = NULL;
  if (chime_client_create(&c, target, NULL) != 0)
    fail_msg("client: %s", chime_last_error());
  assert_int_equal(chime_client_nshards(c), NSHARDS + 1);
  uint64_t keys[PER];
  double prios[PER];
  write_on(chime_client_shard(c, 0), "p", 0, 0, PER);
  read_p(chime_client_shard(c, 0), PER, keys, prios);
  uint64_t mk[2] = {keys[0], KEY(2, 1)};
  double mp[2] = {50, 50};
  chime_mutate_result_t r;
  assert_int_equal(
      chime_client_mutate_priorities(c, "p", mk, mp, 2, NULL, 0, &r),
      CHIME_EINVAL);
  const char *e = chime_last_error();
  if (!strstr(e, "shard 2") || !strstr(e, "2 servers"))
    fail_msg("error: %s", e);
  uint64_t k2[PER];
  double p2[PER];
  read_p(chime_client_shard(c, 0), PER, k2, p2);
  for (int k = 0; k < PER; k++)
    assert_true(p2[k] == 1.0);
  /* The shards that are alone still take their keys. */
  assert_int_equal(
      chime_client_mutate_priorities(c, "p", keys, mp, 1, NULL, 0, &r), 0);
  assert_int_equal(r.updated, 1);
  chime_client_destroy(c);
}

/* A writer moves off a killed shard onto one whose table already forgot a
 * writer (max_writers 2, three writers opened and closed there): its
 * unacked requests go in there and it goes on. */
static void test_move_to_shard_that_forgot(void **state) {
  (void)state;
  const char *m = ",\n  {\"name\": \"m\", \"spec\": \"w:u32[], s:u32[]\", "
                  "\"capacity\": 1000, \"sampler\": \"fifo\", "
                  "\"max_writers\": 2}";
  chime_client_t *c = start_shards(2, m);
  chime_writer_t *wr = failover_writer(c, "m", BATCH);
  write_items(wr, 7, 0, BATCH); /* request 1 */
  int x = table_inserts(chime_client_shard(c, 0), "m") == BATCH ? 0 : 1;
  int y = 1 - x;
  assert_int_equal(table_inserts(chime_client_shard(c, (uint32_t)x), "m"),
                   BATCH);
  /* Shard y forgets a writer: three come and go where two are kept. */
  for (uint32_t j = 0; j < 3; j++)
    write_on(chime_client_shard(c, (uint32_t)y), "m", 50 + j, 0, 1);
  chime__proc_kill(&shard_d[x].proc);
  /* Request 2 goes nowhere until the writer moves to y. */
  write_items(wr, 7, BATCH, BATCH); /* request 2: after the move */
  assert_int_equal(chime_writer_acked(wr), 2 * BATCH);
  /* And it goes on there. */
  write_items(wr, 7, 2 * BATCH, BATCH);
  assert_int_equal(chime_writer_close(wr), 0);
  chime_client_t *yc = chime_client_shard(c, (uint32_t)y);
  assert_int_equal(table_inserts(yc, "m"), 3 + 2 * BATCH);
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 3 + 2 * BATCH;
  if (chime_stream_open(&s, yc, "m", &so) != 0)
    fail_msg("stream: %s", chime_last_error());
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  uint8_t seen[3 * BATCH] = {0};
  for (uint32_t j = 0; j < b.count; j++) {
    uint32_t w = ((const uint32_t *)b.leaf[0].data)[j];
    uint32_t q = ((const uint32_t *)b.leaf[1].data)[j];
    if (w != 7)
      continue;
    assert_true(q >= BATCH && q < 3 * BATCH);
    assert_int_equal(seen[q]++, 0);
  }
  for (uint32_t q = BATCH; q < 3 * BATCH; q++)
    assert_int_equal(seen[q], 1);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* A sequence table's writer that moves: the episode open on the dead
 * shard is cut. Its steps from the move on start a new episode on the new
 * shard (its step 0 is the first resent step), whose windows hold only
 * those steps; the end of the episode ends that one. */
static void test_sequence_episode_cut(void **state) {
  (void)state;
  const char *sq = ",\n  {\"name\": \"sq\", \"spec\": \"w:u32[], s:u32[]\", "
                   "\"capacity_steps\": 1000, \"sequence_length\": 4, "
                   "\"stride\": 1, \"sampler\": \"fifo\"}";
  chime_client_t *c = start_shards(2, sq);
  chime_writer_t *wr = failover_writer(c, "sq", 3);
  write_items(wr, 7, 0, 6); /* steps 0..5: windows 0-3, 1-4, 2-5 */
  int x = table_inserts(chime_client_shard(c, 0), "sq") == 3 ? 0 : 1;
  int y = 1 - x;
  assert_int_equal(table_inserts(chime_client_shard(c, (uint32_t)x), "sq"), 3);
  chime__proc_kill(&shard_d[x].proc);
  for (uint32_t i = 6; i < 12; i++) {
    item_t it = {7, i};
    if (chime_writer_append(wr, &it, sizeof it, 1.0) != 0)
      fail_msg("append: %s", chime_last_error());
  }
  if (chime_writer_end_episode(wr) != 0 || chime_writer_flush(wr) != 0)
    fail_msg("end and flush after the move: %s", chime_last_error());
  assert_int_equal(chime_writer_close(wr), 0);
  /* Steps 6..11 alone on y: 3 windows of 4, from its step 0. */
  chime_client_t *yc = chime_client_shard(c, (uint32_t)y);
  assert_int_equal(table_inserts(yc, "sq"), 3);
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 3;
  if (chime_stream_open(&s, yc, "sq", &so) != 0)
    fail_msg("stream: %s", chime_last_error());
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_int_equal(b.count, 3);
  const uint32_t *sv = b.leaf[1].data;
  for (uint32_t j = 0; j < 3; j++) {
    assert_int_equal(b.info[j].first_step, j);
    assert_int_equal(b.info[j].length, 4);
    assert_true(b.info[j].episode_id == b.info[0].episode_id);
    for (uint32_t k = 0; k < 4; k++)
      assert_int_equal(sv[j * 4 + k], 6 + j + k);
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* Restarts chimed i on its own port with config cfg_json (--restore latest
 * when restore). */
static void restart_on_port(int i, const char *cfg_json, int restore) {
  char addr[256], cfg[2048];
  snprintf(addr, sizeof addr, "%s", shard_d[i].addr);
  snprintf(cfg, sizeof cfg, "%s", cfg_json);
  const char *restored[] = {"--listen", addr, "--restore", "latest", NULL};
  const char *fresh[] = {"--listen", addr, NULL};
  assert_int_equal(
      chime__chimed_start(&shard_d[i], cfg, restore ? restored : fresh, 30000),
      0);
  assert_string_equal(shard_d[i].addr, addr);
}

/* A shard restarted quickly (from its checkpoint, well within the
 * writer's reconnect_timeout_ms) remembers the writer bound to it: the
 * checkpoint keeps the writers' windows (format 6), so the writer's
 * unacked request 2 goes in there, once, and the writer goes on there;
 * the other shard gets nothing. (Before format 6 the restored shard had
 * forgotten the writer and said so, CHIME_EFORGOTTEN, and the sharded
 * writer moved to the other shard: writer_shard.c still moves on that
 * answer, which a restored table now gives only when it had forgotten
 * writers itself or came from an older checkpoint.) */
static void test_quick_restart_moves_on(void **state) {
  (void)state;
  chime_client_t *c = start_shards(2, NULL);
  chime_writer_t *wr = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = BATCH;
  wo.reconnect_timeout_ms = GENEROUS_MS; /* the restart is quicker */
  if (chime_writer_open(&wr, c, "q", &wo) != 0)
    fail_msg("writer: %s", chime_last_error());
  write_items(wr, 7, 0, BATCH); /* request 1, acked */
  int x = table_inserts(chime_client_shard(c, 0), "q") == BATCH ? 0 : 1;
  int y = 1 - x;
  chime_checkpoint_result_t ck;
  if (chime_client_checkpoint(chime_client_shard(c, (uint32_t)x), &ck) != 0)
    fail_msg("checkpoint: %s", chime_last_error());
  chime__proc_kill(&shard_d[x].proc);
  restart_on_port(x, shard_cfg[x], 1);
  /* Request 2 reaches the restarted shard, which remembers the writer. */
  write_items(wr, 7, BATCH, BATCH); /* request 2: after the restart */
  assert_int_equal(chime_writer_acked(wr), 2 * BATCH);
  write_items(wr, 7, 2 * BATCH, BATCH); /* and it goes on there */
  assert_int_equal(chime_writer_close(wr), 0);
  /* The checkpoint's BATCH (the restored count) and the two after. */
  assert_int_equal(table_inserts(chime_client_shard(c, (uint32_t)x), "q"),
                   3 * BATCH);
  assert_int_equal(table_inserts(chime_client_shard(c, (uint32_t)y), "q"), 0);
  chime_client_destroy(c);
}

/* A shard restored from a checkpoint taken before the writer came, of a
 * table that had forgotten writers (max_writers 2, three came and went):
 * it cannot tell the writer's request 2 from a new writer's and refuses
 * it (CHIME_EFORGOTTEN); the sharded writer moves to the other shard,
 * where request 2 goes in. (It failed with CHIME_EFORGOTTEN although the
 * other shard was up.) */
static void test_forgetting_restart_moves_on(void **state) {
  (void)state;
  const char *m = ",\n  {\"name\": \"m\", \"spec\": \"w:u32[], s:u32[]\", "
                  "\"capacity\": 1000, \"sampler\": \"fifo\", "
                  "\"max_writers\": 2}";
  chime_client_t *c = start_shards(2, m);
  chime__proc_kill(&shard_d[1].proc); /* the writer binds to shard 0 */
  chime_client_t *xc = chime_client_shard(c, 0), *yc = chime_client_shard(c, 1);
  for (uint32_t j = 0; j < 3; j++) /* shard 0 forgets a writer */
    write_on(xc, "m", 50 + j, 0, 1);
  chime_checkpoint_result_t ck;
  if (chime_client_checkpoint(xc, &ck) != 0)
    fail_msg("checkpoint: %s", chime_last_error());
  chime_writer_t *wr = NULL;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = BATCH;
  wo.reconnect_timeout_ms = GENEROUS_MS; /* the restart is quicker */
  if (chime_writer_open(&wr, c, "m", &wo) != 0)
    fail_msg("writer: %s", chime_last_error());
  write_items(wr, 7, 0, BATCH); /* request 1, acked after the checkpoint */
  assert_int_equal(table_inserts(xc, "m"), 3 + BATCH);
  restart_on_port(1, shard_cfg[1], 0);
  chime_server_info_t *info = NULL;
  int64_t end = chime__now_ms() + GENEROUS_MS;
  while (chime_client_info(yc, &info) != 0 && chime__now_ms() < end)
    chime__sleep_ms(50);
  assert_non_null(info);
  chime_server_info_free(info);
  chime__proc_kill(&shard_d[0].proc);
  restart_on_port(0, shard_cfg[0], 1);
  write_items(wr, 7, BATCH, BATCH); /* request 2: after the restart */
  assert_int_equal(chime_writer_acked(wr), 2 * BATCH);
  assert_int_equal(chime_writer_close(wr), 0);
  assert_int_equal(table_inserts(yc, "m"), BATCH);
  chime_client_destroy(c);
}

/* Table d, spec by shard: "w:u32[], s:u32[]" on 1, a third leaf on 2. */
static const char *d_table(uint32_t shard) {
  return shard == 1 ? ",\n  {\"name\": \"d\", \"spec\": \"w:u32[], s:u32[]\", "
                      "\"capacity\": 1000, \"sampler\": \"fifo\"}"
                    : ",\n  {\"name\": \"d\", \"spec\": \"w:u32[], s:u32[], "
                      "z:u8[4096]\", \"capacity\": 1000, \"sampler\": "
                      "\"fifo\"}";
}

/* A detail that names the shard at addr and says why. */
static void assert_names_odd_shard(const char *addr) {
  const char *why = chime_last_error();
  if (!strstr(why, addr) || !strstr(why, "differs"))
    fail_msg("expected a detail naming shard %s: %s", addr, why);
}

/* A table configured otherwise on one shard fails every writer's open,
 * naming that shard, whichever shard the writer would bind to (the
 * writer copied samples at its own shard's size: a binding that checked
 * them against another shard's spec read past the caller's arrays). */
static void test_writer_refuses_odd_shard(void **state) {
  (void)state;
  start_shard(0, 1, d_table(1));
  start_shard(1, 2, d_table(2));
  char target[1024];
  target_of(2, target, sizeof target);
  chime_client_t *c = NULL;
  if (chime_client_create(&c, target, NULL) != 0)
    fail_msg("client: %s", chime_last_error());
  for (int k = 0; k < 4; k++) { /* writers spread: both shards first */
    chime_writer_t *wr = NULL;
    assert_int_equal(chime_writer_open(&wr, c, "d", NULL), CHIME_EINVAL);
    assert_null(wr);
    const char *why = chime_last_error();
    if (!strstr(why, "differs") ||
        (!strstr(why, shard_d[0].addr) && !strstr(why, shard_d[1].addr)))
      fail_msg("open %d: no shard named: %s", k, why);
  }
  /* The shards' alike table is fine; and the writer's spec is its own. */
  chime_writer_t *wr = NULL;
  if (chime_writer_open(&wr, c, "q", NULL) != 0)
    fail_msg("writer q: %s", chime_last_error());
  chime_spec_t spec;
  assert_int_equal(chime_writer_spec(wr, &spec), 0);
  assert_int_equal(spec.nleaves, 2);
  assert_string_equal(spec.leaves[1].name, "s");
  assert_int_equal(chime_writer_spec(NULL, &spec), CHIME_EINVAL);
  assert_int_equal(chime_writer_close(wr), 0);
  chime_client_destroy(c);
}

/* A writer opened while the odd shard was down, whose own shard then
 * dies: it does not move to the shard whose table differs, and says so by
 * name (CHIME_EINVAL), where it used to wait out reconnect_timeout_ms and
 * fail with CHIME_EDISCONNECTED. */
static void test_failover_refuses_odd_shard(void **state) {
  (void)state;
  start_shard(0, 1, d_table(1));
  start_shard(1, 2, d_table(1));
  char target[1024];
  target_of(2, target, sizeof target);
  chime__proc_kill(&shard_d[1].proc); /* down: passed over at open */
  chime_client_t *c = NULL;
  if (chime_client_create(&c, target, NULL) != 0)
    fail_msg("client: %s", chime_last_error());
  chime_writer_t *wr = failover_writer(c, "d", BATCH);
  write_items(wr, 7, 0, BATCH);
  make_config(1, 2, d_table(2));
  restart_on_port(1, shard_cfg[1], 0);
  /* The client's channel to it reconnects (with gRPC's backoff) before
   * the writer's shard dies, so that the failover finds it. */
  chime_server_info_t *info = NULL;
  int64_t end = chime__now_ms() + GENEROUS_MS;
  while (chime_client_info(chime_client_shard(c, 1), &info) != 0 &&
         chime__now_ms() < end)
    chime__sleep_ms(50);
  assert_non_null(info);
  chime_server_info_free(info);
  chime__proc_kill(&shard_d[0].proc);
  int rc = 0;
  for (uint32_t i = 0; i < BATCH && rc == 0; i++) {
    item_t it = {7, BATCH + i};
    rc = chime_writer_append(wr, &it, sizeof it, 1.0);
  }
  if (rc == 0)
    rc = chime_writer_flush(wr);
  assert_int_equal(rc, CHIME_EINVAL);
  assert_names_odd_shard(shard_d[1].addr);
  assert_int_equal(chime_writer_close(wr), CHIME_EINVAL);
  chime_client_destroy(c);
}

/* Writers spread over servers, not addresses: a target naming shard 1
 * twice (as "A" and "ipv4:A") and shard 2 once puts 3 of 6 writers on
 * each server. */
static void test_spread_over_servers(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++)
    start_shard(i, (uint32_t)i + 1, NULL);
  char target[1024];
  snprintf(target, sizeof target, "%s,ipv4:%s,%s", shard_d[0].addr,
           shard_d[0].addr, shard_d[1].addr);
  chime_client_t *c = NULL;
  if (chime_client_create(&c, target, NULL) != 0)
    fail_msg("client: %s", chime_last_error());
  assert_int_equal(chime_client_nshards(c), 3);
  chime_writer_t *wr[6];
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = BATCH;
  for (uint32_t j = 0; j < 6; j++)
    if (chime_writer_open(&wr[j], c, "q", &wo) != 0)
      fail_msg("writer: %s", chime_last_error());
  for (uint32_t j = 0; j < 6; j++) {
    write_items(wr[j], j, 0, BATCH);
    assert_int_equal(chime_writer_close(wr[j]), 0);
  }
  assert_int_equal(table_inserts(chime_client_shard(c, 0), "q"), 3 * BATCH);
  assert_int_equal(table_inserts(chime_client_shard(c, 2), "q"), 3 * BATCH);
  chime_client_destroy(c);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_kill_one_shard, teardown),
      cmocka_unit_test_teardown(test_mutate_every_shard, teardown),
      cmocka_unit_test_teardown(test_same_shard_twice, teardown),
      cmocka_unit_test_teardown(test_move_to_shard_that_forgot, teardown),
      cmocka_unit_test_teardown(test_sequence_episode_cut, teardown),
      cmocka_unit_test_teardown(test_spread_over_servers, teardown),
      cmocka_unit_test_teardown(test_quick_restart_moves_on, teardown),
      cmocka_unit_test_teardown(test_forgetting_restart_moves_on, teardown),
      cmocka_unit_test_teardown(test_writer_refuses_odd_shard, teardown),
      cmocka_unit_test_teardown(test_failover_refuses_odd_shard, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
