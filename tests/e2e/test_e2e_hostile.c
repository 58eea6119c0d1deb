/* A hostile shm learner, against the real chimed: it maps its own ring
 * writable (the memfd it was handed is O_RDWR), forges the offsets, bytes
 * and sample info of batches it holds and the release_count of a slot it
 * released, then ends its stream. chimed must survive, give back only the
 * items it published and did not see released (from its own memory, not
 * the slot), and a second learner must get each of those exactly once,
 * unforged: no invented key, no forged priority or bytes, no item the
 * first learner released, and from a sequence table no forged window
 * length (docs/ring.md, "What the producer trusts"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "ring/format.h"

#define BATCH 4
#define SLOTS 4
#define N (SLOTS * BATCH)
#define TOK_MAX 16
#define FORGED_KEY 0xdeadbeef00ull

static const char *config =
    "{\"tables\": [{\"name\": \"rag\", \"spec\": \"id:u32[], "
    "tok:i32[<=16]\", \"capacity\": 1024, \"min_size\": 1, "
    "\"sampler\": \"fifo\"},\n"
    "  {\"name\": \"seq\", \"spec\": \"id:u32[], x:u8[16]\", "
    "\"capacity_steps\": 256, \"sequence_length\": 4, \"stride\": 4, "
    "\"sampler\": \"fifo\"},\n"
    "  {\"name\": \"small\", \"spec\": \"id:u32[]\", \"capacity\": 4, "
    "\"min_size\": 1, \"sampler\": \"fifo\"}]}\n";

/* teardown is 0 only when chimed exits 0 by itself: no sanitizer report,
 * no crash */
CHIME__CHIMED_GROUP(config)

/* The learner's ring, mapped a second time, writable. */
typedef struct {
  uint8_t *rw;
  size_t len;
  uintptr_t base; /* where the client's mapping has file offset 0 */
} rwring_t;

/* Maps writable the ring file that the client's mapping at p comes from:
 * its line in /proc/self/maps names the inode, an fd of this process the
 * same memfd. */
static void map_writable(rwring_t *r, const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  unsigned long a = 0, b = 0, off = 0, ino = 0;
  int found = 0;
  assert_non_null(f);
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &a, &b, &off, &ino) == 4 &&
        (uintptr_t)p >= a && (uintptr_t)p < b)
      found = 1;
  }
  fclose(f);
  assert_true(found);
  r->base = a - off;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int fd = -1;
  assert_non_null(d);
  while (fd < 0 && (e = readdir(d)) != NULL) {
    struct stat st;
    int n = atoi(e->d_name);
    if (e->d_name[0] != '.' && fstat(n, &st) == 0 && st.st_ino == ino &&
        S_ISREG(st.st_mode))
      fd = n;
  }
  closedir(d);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  r->len = (size_t)st.st_size;
  r->rw = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(r->rw != MAP_FAILED);
}

static void *rw_at(const rwring_t *r, const void *p) {
  return r->rw + ((uintptr_t)p - r->base);
}

static const chime__ring_header_t *hdr(const rwring_t *r) {
  return (const chime__ring_header_t *)r->rw;
}

static uint32_t slot_of(const rwring_t *r, const chime_batch_t *b) {
  return (uint32_t)(((uintptr_t)b->info - r->base - hdr(r)->data_offset) /
                    hdr(r)->slot_bytes);
}

static _Atomic uint32_t *relcount(const rwring_t *r, uint32_t slot) {
  return (_Atomic uint32_t *)(r->rw + hdr(r)->ctrl_offset +
                              CHIME__RING_RELCOUNT_OFFSET) +
         slot;
}

static _Atomic uint32_t *prod_waiting(const rwring_t *r) {
  return &((chime__ring_prod_t *)(r->rw + hdr(r)->prod_offset))->waiting;
}

/* Waits up to 10 s for chimed's `waiting` word to be set. */
static void wait_waiting(const rwring_t *r, const char *why) {
  int64_t end = chime__now_ms() + 10000;
  while (atomic_load(prod_waiting(r)) == 0) {
    if (chime__now_ms() > end)
      fail_msg("chimed never %s", why);
    chime__sleep_ms(1);
  }
}

static uint32_t samplers_waiting(const char *name) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(client, &st), 0);
  uint32_t n = chime__stats_table(st, name)->samplers_waiting_items;
  chime_stats_free(st);
  return n;
}

/* Waits up to 10 s for a sampler of table name to wait for items. */
static void wait_sampler_waits(const char *name) {
  int64_t end = chime__now_ms() + 10000;
  while (samplers_waiting(name) == 0) {
    if (chime__now_ms() > end)
      fail_msg("no sampler of %s waits for items after 10 s", name);
    chime__sleep_ms(1);
  }
}

/* Waits up to 15 s for table name to hold size items, returned of them
 * given back; fails if it ever holds more. */
static void wait_table(const char *name, uint64_t size, uint64_t returned) {
  int64_t end = chime__now_ms() + 15000;
  for (;;) {
    chime_stats_t *st = NULL;
    assert_int_equal(chime_client_stats(client, &st), 0);
    const chime_table_stats_t *t = chime__stats_table(st, name);
    uint64_t n = t->size, r = t->returned;
    chime_stats_free(st);
    if (n > size || r > returned)
      fail_msg("table %s holds %llu items, %llu given back: %llu, %llu "
               "expected",
               name, (unsigned long long)n, (unsigned long long)r,
               (unsigned long long)size, (unsigned long long)returned);
    if (n == size && r == returned)
      return;
    if (chime__now_ms() > end)
      fail_msg("table %s: %llu items, %llu given back after 15 s", name,
               (unsigned long long)n, (unsigned long long)r);
    chime__sleep_ms(10);
  }
}

static uint32_t tok_len(uint32_t id) {
  return id % (TOK_MAX + 1);
}

static void insert_rag(void) {
  chime_writer_t *w = NULL;
  int32_t tok[TOK_MAX];
  assert_int_equal(chime_writer_open(&w, client, "rag", NULL), 0);
  for (uint32_t id = 0; id < N; id++) {
    for (uint32_t k = 0; k < TOK_MAX; k++)
      tok[k] = (int32_t)(id * 100 + k);
    const void *leaves[2] = {&id, tok};
    const uint32_t lengths[2] = {0, tok_len(id)};
    assert_int_equal(chime_writer_append_leaves(w, leaves, lengths, 1.0), 0);
  }
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_close(w), 0);
}

/* Batches A, B, C, D fill the ring (a learner holds at most slots - 1:
 * A, B, C, with D published); the learner releases C once chimed waits
 * for a slot, and waits for chimed to take that slot and find no items to
 * fill it with (the table's samplers_waiting_items: 1): chimed has seen C
 * released. It takes D, then forges:
 * C's release_count wound back (C's items would come again), B's info
 * (keys, priority, counts), bytes and offsets (wild), D's offsets
 * (backwards) and release_count (past what chimed published), and ends
 * its stream holding A, B, D. A second learner gets A's, B's and D's
 * items, each once, as they were inserted; C's never. */
static void test_forged_ring(void **state) {
  (void)state;
  insert_rag();
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = SLOTS;
  so.mode = CHIME_MODE_SHM;
  if (chime_stream_open(&s, client, "rag", &so) != 0)
    fail_msg("open: %s", chime_last_error());
  chime_batch_t b[SLOTS];
  uint64_t keys[SLOTS][BATCH];
  uint32_t ids[SLOTS][BATCH];
  rwring_t r;
  for (int i = 0; i < SLOTS; i++) {
    if (i == SLOTS - 1) {
      map_writable(&r, b[0].info);
      wait_waiting(&r, "waited for a slot with the ring full");
      assert_int_equal(samplers_waiting("rag"), 0);
      uint32_t sc = slot_of(&r, &b[2]);
      assert_int_equal(chime_stream_release(s, &b[2]), 0);
      wait_sampler_waits("rag");
      /* C: released and seen; wound back. */
      atomic_fetch_sub(relcount(&r, sc), 1);
    }
    if (chime_stream_next(s, &b[i], 10000) != 0)
      fail_msg("next %d: %s", i, chime_last_error());
    assert_int_equal(b[i].count, BATCH);
    for (int j = 0; j < BATCH; j++) {
      keys[i][j] = b[i].info[j].key;
      memcpy(&ids[i][j], (const uint8_t *)b[i].leaf[0].data + 4 * j, 4);
    }
  }
  /* B: everything in the slot forged. */
  chime_sample_info_t *info = rw_at(&r, b[1].info);
  int64_t *offs = rw_at(&r, chime_batch_offsets(&b[1], "tok"));
  uint8_t *vals = rw_at(&r, chime_batch_leaf(&b[1], "tok")->data);
  for (int j = 0; j < BATCH; j++) {
    info[j].key = FORGED_KEY + (uint64_t)j;
    info[j].priority = 1e300;
    info[j].times_sampled = 1;
    info[j].version = 0;
    info[j].length = 100000;
  }
  memset(vals, 0x7f, TOK_MAX * 4);
  offs[0] = 0;
  offs[1] = (int64_t)1 << 40;
  offs[2] = -((int64_t)1 << 40);
  /* D: offsets backwards, release_count past what was published. */
  offs = rw_at(&r, chime_batch_offsets(&b[3], "tok"));
  offs[1] = 1000;
  offs[2] = 3;
  atomic_fetch_add(relcount(&r, slot_of(&r, &b[3])), 7);
  munmap(r.rw, r.len);
  chime_stream_close(s);

  /* Given back newest first: C's turn came before B and A were back. */
  wait_table("rag", 3 * BATCH, 3 * BATCH);
  assert_int_equal(kill(chimed.proc.pid, 0), 0);

  chime_stream_t *s2 = NULL;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&s2, client, "rag", &so), 0);
  int seen[SLOTS][BATCH] = {{0}};
  for (int n = 0; n < 3; n++) {
    chime_batch_t x;
    assert_int_equal(chime_stream_next(s2, &x, 10000), 0);
    const int64_t *xo = chime_batch_offsets(&x, "tok");
    const int32_t *xt = chime_batch_leaf(&x, "tok")->data;
    for (uint32_t j = 0; j < x.count; j++) {
      const chime_sample_info_t *in = &x.info[j];
      int bi = -1, bj = -1;
      for (int i = 0; i < SLOTS; i++)
        for (int k = 0; k < BATCH; k++)
          if (i != 2 && keys[i][k] == in->key)
            bi = i, bj = k;
      if (bi < 0)
        fail_msg("item with key %#llx: not one of the batches given back",
                 (unsigned long long)in->key);
      if (++seen[bi][bj] > 1)
        fail_msg("item with key %#llx delivered twice",
                 (unsigned long long)in->key);
      uint32_t id;
      memcpy(&id, (const uint8_t *)x.leaf[0].data + 4 * j, 4);
      assert_int_equal(id, ids[bi][bj]);
      assert_true(in->priority == 1.0);
      assert_int_equal(in->times_sampled, 1);
      assert_int_equal(xo[j + 1] - xo[j], tok_len(id));
      for (int64_t k = xo[j]; k < xo[j + 1]; k++)
        assert_int_equal(xt[k], (int32_t)(id * 100 + (uint32_t)(k - xo[j])));
    }
    assert_int_equal(chime_stream_release(s2, &x), 0);
  }
  chime_stream_close(s2);
  wait_table("rag", 0, 3 * BATCH);
}

/* A sequence table: a learner holding windows forges their length,
 * episode and first step and ends its stream. The windows come back as
 * they were sampled: a second learner's copy reads no step past them. */
static void test_forged_windows(void **state) {
  (void)state;
  chime_writer_t *w = NULL;
  uint8_t step[4 + 16];
  assert_int_equal(chime_writer_open(&w, client, "seq", NULL), 0);
  for (uint32_t i = 0; i < 16; i++) {
    memcpy(step, &i, 4);
    memset(step + 4, (int)i, 16);
    assert_int_equal(chime_writer_append(w, step, sizeof(step), 1.0), 0);
  }
  assert_int_equal(chime_writer_end_episode(w), 0);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_close(w), 0);
  wait_table("seq", 4, 0);

  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 2;
  so.slots = 3;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "seq", &so), 0);
  chime_batch_t b[2];
  uint64_t ep = 0;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(chime_stream_next(s, &b[i], 10000), 0);
    ep = b[i].info[0].episode_id;
  }
  rwring_t r;
  map_writable(&r, b[0].info);
  for (int i = 0; i < 2; i++) {
    chime_sample_info_t *info = rw_at(&r, b[i].info);
    for (int j = 0; j < 2; j++) {
      info[j].length = i == 0 ? 100000 : UINT32_MAX;
      info[j].first_step = 1;
      info[j].times_sampled = 1;
    }
  }
  munmap(r.rw, r.len);
  chime_stream_close(s);
  wait_table("seq", 4, 4);
  assert_int_equal(kill(chimed.proc.pid, 0), 0);

  chime_stream_t *s2 = NULL;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&s2, client, "seq", &so), 0);
  int seen[4] = {0};
  for (int n = 0; n < 2; n++) {
    chime_batch_t x;
    assert_int_equal(chime_stream_next(s2, &x, 10000), 0);
    for (uint32_t j = 0; j < x.count; j++) {
      const chime_sample_info_t *in = &x.info[j];
      assert_int_equal(in->length, 4);
      assert_int_equal(in->episode_id, ep);
      assert_true(in->first_step % 4 == 0 && in->first_step < 16);
      seen[in->first_step / 4]++;
      for (uint32_t t = 0; t < 4; t++) {
        uint32_t id;
        memcpy(&id, (const uint8_t *)x.leaf[0].data + (j * 4 + t) * 4, 4);
        assert_int_equal(id, in->first_step + t);
      }
    }
    assert_int_equal(chime_stream_release(s2, &x), 0);
  }
  for (int i = 0; i < 4; i++)
    assert_int_equal(seen[i], 1);
  chime_stream_close(s2);
  wait_table("seq", 0, 4);
}

/* What the pins cost an honest learner: a fifo table of capacity 4 (8
 * rows, spares included) whose two batches a learner held has every row
 * pinned; once it released them, the next insert must get rows although
 * chimed was waiting for items, not slots, when the releases came (the
 * learner's release rings it then). */
static void test_small_table_released(void **state) {
  (void)state;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 4;
  so.slots = 3;
  so.mode = CHIME_MODE_SHM;
  assert_int_equal(chime_stream_open(&s, client, "small", &so), 0);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, client, "small", NULL), 0);
  chime_batch_t b[2];
  uint32_t id = 0;
  for (int round = 0; round < 4; round++) {
    for (int k = 0; k < 4; k++, id++)
      assert_int_equal(chime_writer_append(w, &id, sizeof(id), 1.0), 0);
    assert_int_equal(chime_writer_flush(w), 0);
    chime_batch_t *x = &b[round % 2];
    if (chime_stream_next(s, x, 10000) != 0)
      fail_msg("round %d: next: %s", round, chime_last_error());
    for (uint32_t j = 0; j < x->count; j++) {
      uint32_t got;
      memcpy(&got, (const uint8_t *)x->leaf[0].data + 4 * j, 4);
      assert_int_equal(got, (uint32_t)round * 4 + j);
    }
    if (round % 2 == 1) { /* both held: every row pinned; let them go */
      wait_sampler_waits("small"); /* once chimed waits for items */
      assert_int_equal(chime_stream_release(s, &b[0]), 0);
      assert_int_equal(chime_stream_release(s, &b[1]), 0);
    }
  }
  assert_int_equal(chime_writer_close(w), 0);
  chime_stream_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_forged_ring, setup, teardown),
      cmocka_unit_test_setup_teardown(test_forged_windows, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_table_released, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
