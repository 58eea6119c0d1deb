/* The device end of a stream (src/client/device.c) on a ring made in this
 * process, against the fake libcudart (tests/support/fake_cudart.c), whose
 * device runs queued work only when this test says so (FAKE_CUDART_MANUAL)
 * or a little at each cudaEventQuery. The test is the ring's producer and
 * refills every slot the moment it is free, so a slot given back before its
 * copy ran is overwritten under the copy, which the fake reports
 * ("copy-src-changed") and the batch's bytes show.
 *
 * Checked from the fake's log and counters: no slot goes back before its
 * copy's event completed; at most `prefetch` slots are held; a buffer is
 * not refilled before the learner's stream passed the release point; a
 * failed copy and a lost device give CHIME_ECUDA naming the CUDA error and
 * give the slots back; the ring is registered once; close leaves no
 * allocation, stream, event or registration behind; a batch with ragged
 * leaves copies only the parts of its slot it uses, its offsets checked
 * first and kept on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chime/chime.h"
#include "chime/ring.h"
#include "client/device.h"
#include "ring/cudart.h"
#include "ring/extents.h"
#include "ring/pin.h"
#include "ring/producer.h"

#include "fake_control.h"

#define SPEC "obs:f32[16], act:i32[]"
#define BATCH 4
#define SLOTS 6

/* The fake's control calls, from the library chime loaded. */
static fake_control_t fk;

static char g_log[256];

/* ------------------------------------------------------------------ rig */

typedef struct {
  chime_spec_t spec;
  chime_ring_t *prod, *cons;
  const chime_ring_layout_t *lay;
  uint64_t produced;
  uint32_t releases;
} rig_t;

static uint8_t pattern(uint64_t seq, uint32_t leaf, uint64_t i) {
  return (uint8_t)(seq * 31u + leaf * 7u + i);
}

/* Publishes a new batch into every free slot (overwriting what a slot held
 * before it was given back). */
static void produce_all(rig_t *r) {
  chime__ring_wslot_t w;
  uint64_t seq;
  while (chime__ring_acquire(r->prod, &w, 0) == 0) {
    for (uint32_t l = 0; l < r->spec.nleaves; l++) {
      uint8_t *p = w.leaf[l];
      for (uint64_t i = 0; i < r->lay->leaf_bytes[l]; i++)
        p[i] = pattern(r->produced, l, i);
    }
    for (uint32_t k = 0; k < BATCH; k++) {
      memset(&w.info[k], 0, sizeof(w.info[k]));
      w.info[k].key = r->produced * 1000 + k;
    }
    assert_int_equal(chime__ring_publish(r->prod, w.slot, &seq), 0);
    assert_int_equal(seq, r->produced);
    r->produced++;
  }
}

static int src_next(void *arg, chime_ring_view_t *v, int timeout_ms) {
  rig_t *r = arg;
  return chime_ring_next(r->cons, v, timeout_ms);
}

/* Gives the slot back, and says so in the fake's log, in order with its
 * device work. */
static int src_release(void *arg, uint32_t slot) {
  rig_t *r = arg;
  char note[128];
  snprintf(note, sizeof note, "slot-release %u %p", slot,
           chime_ring_slot_base(r->cons, slot));
  fk.note(note);
  r->releases++;
  return chime_ring_release(r->cons, slot);
}

static void rig_open_spec(rig_t *r, const char *spec) {
  uint8_t nonce[16];
  memset(r, 0, sizeof(*r));
  assert_int_equal(chime_spec_parse(&r->spec, spec), 0);
  assert_int_equal(chime__ring_create(&r->prod, &r->spec, BATCH, SLOTS), 0);
  chime_ring_nonce(r->prod, nonce);
  assert_int_equal(chime_ring_attach(&r->cons, chime_ring_fd(r->prod), nonce),
                   0);
  r->lay = chime_ring_layout(r->cons);
}

static void rig_open(rig_t *r) {
  rig_open_spec(r, SPEC);
}

static void rig_close(rig_t *r) {
  chime_ring_destroy(r->cons);
  chime_ring_destroy(r->prod);
}

static chime__device_t *dev_open(rig_t *r, uint32_t prefetch,
                                 uint32_t max_lent) {
  char err[CHIME__CUDA_MSG_MAX * 2];
  chime__device_t *d = NULL;
  const chime__device_opts_t o = {
      .device = 0, .prefetch = prefetch, .max_lent = max_lent};
  const chime__device_source_t src = {
      .next = src_next, .release = src_release, .arg = r};
  int rc = chime__device_open(&d, r->cons, &r->spec, &o, &src, err, sizeof err);
  if (rc)
    fail_msg("device open: %d: %s", rc, err);
  return d;
}

static uint32_t leases(const rig_t *r) {
  chime_ring_stats_t st;
  chime_ring_stats(r->cons, &st);
  return st.leases;
}

/* The batch's device bytes (host memory in the fake) are batch seq's. */
static void check_device_bytes(const rig_t *r, const chime_batch_t *b,
                               uint64_t seq) {
  assert_int_equal(b->nleaves, r->spec.nleaves);
  for (uint32_t l = 0; l < b->nleaves; l++) {
    const uint8_t *p = b->leaf[l].data;
    assert_int_equal(b->leaf[l].bytes, r->lay->leaf_bytes[l]);
    for (uint64_t i = 0; i < b->leaf[l].bytes; i++)
      if (p[i] != pattern(seq, l, i))
        fail_msg("batch %llu leaf %u byte %llu: %u, not %u",
                 (unsigned long long)seq, l, (unsigned long long)i, p[i],
                 pattern(seq, l, i));
  }
}

/* A batch lent now: its bytes and its records are batch seq's. */
static void check_bytes(const rig_t *r, const chime_batch_t *b, uint64_t seq) {
  assert_int_equal(b->seq, seq);
  check_device_bytes(r, b, seq);
  for (uint32_t k = 0; k < b->count; k++)
    assert_int_equal(b->info[k].key, seq * 1000 + k);
}

/* --------------------------------------------------------------- the log */

/* Every "slot-release <slot> <ptr>" comes after the "copy-done" of the
 * latest copy issued from <ptr>, if any; every copy reads registered
 * memory.
 * Returns the violations, printing each. */
static int order_violations(const char *log) {
  enum { MAXC = 4096 };
  static struct {
    unsigned long id;
    void *src;
    int done;
  } c[MAXC];
  int n = 0, bad = 0;
  char line[512];
  const char *p = log;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len >= sizeof line)
      len = sizeof line - 1;
    memcpy(line, p, len);
    line[len] = '\0';
    p += len + (nl ? 1 : 0);
    unsigned long id;
    void *dst, *src, *stream;
    size_t bytes;
    int pinned;
    unsigned slot;
    if (sscanf(line, "copy %lu %p %p %zu %p %d", &id, &dst, &src, &bytes,
               &stream, &pinned) == 6) {
      if (!pinned) {
        fprintf(stderr, "copy from unregistered memory: %s\n", line);
        bad++;
      }
      if (n < MAXC) {
        c[n].id = id;
        c[n].src = src;
        c[n].done = 0;
        n++;
      }
    } else if (sscanf(line, "copy-done %lu", &id) == 1) {
      for (int i = 0; i < n; i++)
        if (c[i].id == id)
          c[i].done = 1;
    } else if (sscanf(line, "copy-fail %d %p %p", &pinned, &dst, &src) == 3) {
      /* never queued: it will not read its source, whose slot may go */
      if (n < MAXC) {
        c[n].id = 0;
        c[n].src = src;
        c[n].done = 1;
        n++;
      }
    } else if (sscanf(line, "slot-release %u %p", &slot, &src) == 2) {
      int i = n;
      while (i-- > 0 && c[i].src != src) {
      }
      /* none: never copied (dropped before its copy), nothing to wait for */
      if (i >= 0 && !c[i].done) {
        fprintf(stderr, "slot %u released before its copy completed\n", slot);
        bad++;
      }
    }
  }
  return bad;
}

/* No slot went back before its copy completed, and no copy's source was
 * rewritten under it. */
static void assert_log_ordered(const char *log) {
  assert_int_equal(order_violations(log), 0);
  assert_int_equal(fake_log_count(log, "copy-src-changed"), 0);
}

/* What the fake holds when a test starts (a test that failed before may
 * have left things behind; each test answers for its own). */
static long g_base[5];
static const char *const g_kinds[5] = {"malloc", "stream", "event", "register",
                                       "pending"};

static void fresh_log(const char *name) {
  static const char *const knobs[] = {
      "FAKE_CUDART_MANUAL",          "FAKE_CUDART_FAIL_COPY_AT",
      "FAKE_CUDART_LOSE_DEVICE_AT",  "FAKE_CUDART_FAIL_REGISTER_AT",
      "FAKE_CUDART_NO_DEVICE_CALLS", "FAKE_CUDART_READONLY"};
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
    unsetenv(knobs[i]);
  fk.reset();
  fk.run(-1); /* what a failed test left queued */
  for (int i = 0; i < 5; i++)
    g_base[i] = fk.count(g_kinds[i]);
  snprintf(g_log, sizeof g_log, "/tmp/chime-test-device-%d-%s.log",
           (int)getpid(), name);
  unlink(g_log);
  setenv("FAKE_CUDART_LOG", g_log, 1);
  fk.reset();
}

static void end_log(void) {
  unsetenv("FAKE_CUDART_LOG");
  unlink(g_log);
}

/* Nothing of the device end is left: buffers, streams, events, the
 * registration, queued work. */
static void assert_no_leaks(void) {
  for (int i = 0; i < 5; i++)
    if (fk.count(g_kinds[i]) != g_base[i])
      fail_msg("%s: %ld left, %ld before", g_kinds[i], fk.count(g_kinds[i]),
               g_base[i]);
}

/* ----------------------------------------------------------------- tests */

/* A slot is held from its copy's start until the copy's event is seen
 * complete, never given back at next; at most prefetch are held. */
static void test_slots_held_until_copy_completes(void **state) {
  (void)state;
  rig_t r;
  chime_batch_t b0, b1, b2;
  rig_open(&r);
  fresh_log("held");
  setenv("FAKE_CUDART_MANUAL", "1", 1);
  produce_all(&r);
  chime__device_t *d = dev_open(&r, 2, 3);

  memset(&b0, 0xff, sizeof(b0)); /* every field next leaves is seen */
  assert_int_equal(chime__device_next(d, &b0, 1000), 0);
  assert_int_equal(b0.seq, 0);
  for (uint32_t i = 0; i < b0.nleaves; i++)
    assert_null(b0.leaf[i].offsets); /* no ragged leaf on a device */
  /* Batch 0 and, ahead, batch 1 are copying: both slots held. */
  assert_int_equal(leases(&r), 2);
  assert_int_equal(r.releases, 0);
  produce_all(&r);
  assert_int_equal(chime__device_next(d, &b1, 1000), 0);
  assert_int_equal(b1.seq, 1);
  assert_int_equal(leases(&r), 2); /* the prefetch: no third copy */
  produce_all(&r);
  /* Nothing completes on the device: the learner cannot run further
   * ahead, and no slot goes back. */
  assert_int_equal(chime__device_next(d, &b2, 0), CHIME_ETIMEDOUT);
  assert_int_equal(chime__device_next(d, &b2, 30), CHIME_ETIMEDOUT);
  assert_int_equal(r.releases, 0);
  assert_int_equal(leases(&r), 2);

  /* The device runs: the copies land, and the next call gives both slots
   * back and copies on. */
  assert_true(fk.run(-1) > 0);
  check_bytes(&r, &b0, 0);
  check_bytes(&r, &b1, 1);
  assert_int_equal(chime__device_next(d, &b2, 1000), 0);
  assert_int_equal(r.releases, 2);
  assert_int_equal(leases(&r), 2); /* batches 2 and 3 copying */
  assert_int_equal(chime__device_release(d, &b0), 0);
  assert_int_equal(chime__device_release(d, &b1), 0);
  assert_int_equal(chime__device_release(d, &b1), CHIME_EINVAL);
  produce_all(&r);
  fk.run(-1);
  check_bytes(&r, &b2, 2);
  assert_int_equal(chime__device_release(d, &b2), 0);

  chime__device_stats_t st;
  chime__device_get_stats(d, &st);
  assert_int_equal(st.max_slots_held, 2);
  assert_int_equal(st.registered, r.lay->data_bytes);
  chime__device_close(d);
  assert_int_equal(leases(&r), 0);
  char *log = fake_log_read(g_log);
  assert_log_ordered(log);
  /* One registration of every slot, portable|mapped|read-only. */
  char want[128];
  snprintf(want, sizeof want, "register %p %llu 11",
           chime_ring_slot_base(r.cons, 0),
           (unsigned long long)r.lay->data_bytes);
  assert_int_equal(fake_log_count(log, "register "), 1);
  assert_non_null(strstr(log, want));
  assert_int_equal(fake_log_count(log, "unregister "), 1);
  free(log);
  assert_no_leaks();
  unsetenv("FAKE_CUDART_MANUAL");
  end_log();
  rig_close(&r);
}

/* --------------------------------------------------------- ragged leaves */

#define RAGGED_SPEC "tok:i32[<=8], x:f32[2]"
#define RAGGED_BATCHES 12

/* Sample j of batch seq has this many rows of tok (0 to 8). */
static uint32_t rows_of(uint64_t seq, uint32_t j) {
  return (uint32_t)((seq * 3 + j) % 9);
}

static int32_t tok_at(uint64_t seq, uint64_t row) {
  return (int32_t)(seq * 1000 + row);
}

/* The bytes each batch's copy should move: its slot's extents. */
static uint64_t ragged_total[64];

/* Publishes a batch of ragged samples into every free slot; batch `liar`
 * (if any) gets offsets that go down. */
static void produce_ragged(rig_t *r, int64_t liar) {
  chime__ring_wslot_t w;
  uint64_t seq;
  while (chime__ring_acquire(r->prod, &w, 0) == 0) {
    uint64_t at = 0;
    int32_t *tok = w.leaf[0];
    float *x = w.leaf[1];
    for (uint32_t j = 0; j < BATCH; j++) {
      w.offsets[0][j] = (int64_t)at;
      for (uint32_t k = 0; k < rows_of(r->produced, j); k++, at++)
        tok[at] = tok_at(r->produced, at);
      x[2 * j] = x[2 * j + 1] = (float)(r->produced * 10 + j);
      memset(&w.info[j], 0, sizeof(w.info[j]));
      w.info[j].key = r->produced * 1000 + j;
    }
    w.offsets[0][BATCH] = (int64_t)at;
    if ((int64_t)r->produced == liar)
      w.offsets[0][1] = w.offsets[0][2] + 1;
    chime__extents_t x_;
    char why[128];
    if (chime__slot_extents(r->lay, &r->spec, w.base, &x_, why, sizeof why) ==
            0 &&
        r->produced < 64)
      ragged_total[r->produced] = x_.total;
    assert_int_equal(chime__ring_publish(r->prod, w.slot, &seq), 0);
    r->produced++;
  }
}

/* Batch b (landed on the fake's device) is batch seq's: the ragged leaf's
 * values [total] and its host offsets, the fixed leaf [count, 2]. */
static void check_ragged(const chime_batch_t *b, uint64_t seq) {
  assert_int_equal(b->seq, seq);
  const chime_batch_leaf_t *t = &b->leaf[0], *x = &b->leaf[1];
  uint64_t total = 0;
  assert_non_null(t->offsets);
  for (uint32_t j = 0; j < b->count; j++) {
    assert_int_equal(t->offsets[j], total);
    total += rows_of(seq, j);
  }
  assert_int_equal(t->offsets[b->count], total);
  assert_int_equal(t->ndim, 1);
  assert_int_equal(t->shape[0], total);
  assert_int_equal(t->bytes, total * 4);
  const int32_t *tok = t->data;
  for (uint64_t i = 0; i < total; i++)
    if (tok[i] != tok_at(seq, i))
      fail_msg("batch %llu row %llu: %d on the device, not %d",
               (unsigned long long)seq, (unsigned long long)i, tok[i],
               tok_at(seq, i));
  assert_null(x->offsets);
  assert_int_equal(x->ndim, 2);
  assert_int_equal(x->shape[0], b->count);
  assert_int_equal(x->shape[1], 2);
  const float *xv = x->data;
  for (uint32_t j = 0; j < b->count; j++)
    assert_true(xv[2 * j] == (float)(seq * 10 + j));
  for (uint32_t j = 0; j < b->count; j++)
    assert_int_equal(b->info[j].key, seq * 1000 + j);
}

/* Sum of the bytes the fake was asked to copy. */
static uint64_t copied_bytes(const char *log) {
  uint64_t sum = 0;
  const char *p = log;
  while ((p = strstr(p, "copy ")) != NULL) {
    unsigned long id;
    void *dst, *src, *stream;
    size_t bytes;
    int pinned;
    if ((p == log || p[-1] == '\n') &&
        sscanf(p, "copy %lu %p %p %zu %p %d", &id, &dst, &src, &bytes, &stream,
               &pinned) == 6)
      sum += bytes;
    p += 5;
  }
  return sum;
}

/* Ragged leaves: each batch copies only the rows it uses (its slot's
 * extents, no padding to the bound), its values land on the device in
 * place, its offsets are a host copy; a batch whose offsets go down is
 * given back with CHIME_EPROTO and the stream goes on. */
static void test_ragged_copies_used_rows(void **state) {
  (void)state;
  rig_t r;
  chime_batch_t b;
  const int64_t liar = 5;
  rig_open_spec(&r, RAGGED_SPEC);
  fresh_log("ragged");
  produce_ragged(&r, liar);
  chime__device_t *d = dev_open(&r, 2, 3);
  uint64_t want = 0;
  int eproto = 0;
  /* The liar is dropped where its copy would start (ahead, after a batch
   * was lent: the next call reports it); the others come in order. */
  for (uint64_t seq = 0; seq < RAGGED_BATCHES;) {
    int rc = chime__device_next(d, &b, 1000);
    if (rc == CHIME_EPROTO) {
      assert_non_null(strstr(chime_last_error(), "batch 5 dropped"));
      eproto++;
      continue;
    }
    assert_int_equal(rc, 0);
    fk.run(-1);
    check_ragged(&b, seq);
    assert_int_equal(chime__device_release(d, &b), 0);
    produce_ragged(&r, liar);
    seq += seq + 1 == (uint64_t)liar ? 2 : 1;
  }
  assert_int_equal(eproto, 1);
  chime__device_stats_t st;
  chime__device_get_stats(d, &st);
  chime__device_close(d);
  assert_int_equal(leases(&r), 0);
  /* Every batch copied (the liar never was) moved its extents alone. */
  for (uint64_t seq = 0; seq < st.copies + 1; seq++)
    if ((int64_t)seq != liar)
      want += ragged_total[seq];
  char *log = fake_log_read(g_log);
  assert_int_equal(copied_bytes(log), want);
  assert_true(want < (st.copies) * chime__slot_send_bytes(r.lay));
  assert_log_ordered(log);
  free(log);
  assert_no_leaks();
  end_log();
  rig_close(&r);
}

/* A released buffer is refilled only after the learner's stream passed the
 * release point: while that stream is held (busy), the next copy into the
 * buffer waits on the device, and the learner's kernel reads the batch it
 * was given. */
static void test_buffer_reuse_waits_for_learner_stream(void **state) {
  (void)state;
  rig_t r;
  chime_batch_t a, b, c;
  void *ls = NULL;
  rig_open(&r);
  fresh_log("reuse");
  setenv("FAKE_CUDART_MANUAL", "1", 1);
  produce_all(&r);
  /* Two buffers: one lent, one copying ahead. */
  chime__device_t *d = dev_open(&r, 1, 1);
  assert_int_equal(fk.stream_create(&ls, 1), 0);

  assert_int_equal(chime__device_next(d, &a, 1000), 0);
  assert_int_equal(chime__device_wait(d, &a, ls), 0);
  long k = fk.launch(ls, a.leaf[0].data, (size_t)a.leaf[0].bytes);
  assert_true(k > 0);
  assert_int_equal(chime__device_next(d, &b, 0), CHIME_EBUSY);
  assert_int_equal(chime__device_release(d, &a), 0);
  /* The learner's stream is busy for long: everything else runs. */
  fk.hold(ls, 1);
  fk.run(-1);
  check_bytes(&r, &a, 0);
  produce_all(&r);
  /* Batch 1 goes into a second buffer rather than wait behind the
   * learner's stream. */
  assert_int_equal(chime__device_next(d, &b, 1000), 0);
  assert_int_equal(b.seq, 1);
  assert_ptr_not_equal(b.leaf[0].data, a.leaf[0].data);
  assert_int_equal(chime__device_wait(d, &b, ls), 0);
  fk.run(-1);
  check_bytes(&r, &b, 1);
  assert_int_equal(chime__device_release(d, &b), 0);
  produce_all(&r);
  /* Both buffers wait for release points now: batch 2 goes into a's,
   * queued behind a's release point. */
  assert_int_equal(chime__device_next(d, &c, 1000), 0);
  assert_int_equal(c.seq, 2);
  assert_ptr_equal(c.leaf[0].data, a.leaf[0].data);
  fk.run(-1);
  /* The learner's stream has not run: the buffer still holds batch 0. */
  check_device_bytes(&r, &a, 0);
  assert_int_equal(fk.kernel_sum(k), -1);
  fk.hold(ls, 0);
  fk.run(-1);
  /* The kernel read batch 0; batch 2 arrived after. */
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < r.lay->leaf_bytes[0]; i++)
    h = (h ^ pattern(0, 0, i)) * 1099511628211ull;
  assert_int_equal(fk.kernel_sum(k), (int64_t)(h >> 1));
  check_bytes(&r, &c, 2);
  assert_int_equal(chime__device_release(d, &c), 0);
  chime__device_close(d);
  assert_int_equal(fk.stream_destroy(ls), 0);
  char *log = fake_log_read(g_log);
  assert_log_ordered(log);
  assert_int_equal(fake_log_count(log, "free-busy"), 0);
  free(log);
  assert_no_leaks();
  unsetenv("FAKE_CUDART_MANUAL");
  end_log();
  rig_close(&r);
}

/* A copy that fails to start: CHIME_ECUDA naming the call and the error,
 * the batch dropped and its slot given back; the stream goes on. */
static void test_failed_copy_releases_slot(void **state) {
  (void)state;
  rig_t r;
  chime_batch_t b;
  rig_open(&r);
  fresh_log("failcopy");
  produce_all(&r);
  chime__device_t *d = dev_open(&r, 2, 2);
  setenv("FAKE_CUDART_FAIL_COPY_AT", "1", 1);
  int rc = chime__device_next(d, &b, 1000);
  unsetenv("FAKE_CUDART_FAIL_COPY_AT");
  assert_int_equal(rc, CHIME_ECUDA);
  assert_non_null(strstr(chime_last_error(), "cudaMemcpyAsync"));
  assert_non_null(strstr(chime_last_error(), "cudaErrorInvalidValue (1)"));
  assert_non_null(strstr(chime_last_error(), "batch 0"));
  assert_int_equal(r.releases, 1);
  assert_int_equal(leases(&r), 0);
  /* Batch 0 is gone; the next is batch 1, whole. */
  assert_int_equal(chime__device_next(d, &b, 1000), 0);
  assert_int_equal(b.seq, 1);
  fk.run(-1);
  check_bytes(&r, &b, 1);
  assert_int_equal(chime__device_release(d, &b), 0);
  chime__device_close(d);
  assert_int_equal(leases(&r), 0);
  assert_no_leaks();
  end_log();
  rig_close(&r);
}

/* A copy started ahead, after a batch was lent, fails: the next call
 * reports it, then the batches after it come. */
static void test_failed_copy_ahead_is_reported(void **state) {
  (void)state;
  rig_t r;
  chime_batch_t b0, b1, b;
  rig_open(&r);
  fresh_log("failahead");
  setenv("FAKE_CUDART_MANUAL", "1", 1);
  produce_all(&r);
  chime__device_t *d = dev_open(&r, 2, 3);
  assert_int_equal(chime__device_next(d, &b0, 1000), 0); /* copies 1, 2 */
  fk.run(-1);
  /* Copies 3 (batch 2) and 4 (batch 3, started once batch 1 is lent). */
  setenv("FAKE_CUDART_FAIL_COPY_AT", "4", 1);
  assert_int_equal(chime__device_next(d, &b1, 1000), 0);
  unsetenv("FAKE_CUDART_FAIL_COPY_AT");
  assert_int_equal(b1.seq, 1);
  assert_int_equal(chime__device_next(d, &b, 1000), CHIME_ECUDA);
  assert_non_null(strstr(chime_last_error(), "cudaMemcpyAsync"));
  assert_non_null(strstr(chime_last_error(), "batch 3"));
  fk.run(-1);
  assert_int_equal(chime__device_next(d, &b, 1000), 0);
  assert_int_equal(b.seq, 2);
  check_bytes(&r, &b, 2);
  assert_int_equal(chime__device_release(d, &b), 0);
  produce_all(&r);
  assert_int_equal(chime__device_next(d, &b, 1000), 0);
  assert_int_equal(b.seq, 4);
  fk.run(-1);
  check_bytes(&r, &b, 4);
  assert_int_equal(chime__device_release(d, &b), 0);
  assert_int_equal(chime__device_release(d, &b0), 0);
  assert_int_equal(chime__device_release(d, &b1), 0);
  chime__device_close(d);
  assert_int_equal(leases(&r), 0);
  char *log = fake_log_read(g_log);
  assert_log_ordered(log);
  free(log);
  assert_no_leaks();
  end_log();
  rig_close(&r);
}

/* The device is lost while copies run: next says so by name, every held
 * slot goes back, and close leaks nothing. */
static void test_lost_device_releases_slots(void **state) {
  (void)state;
  rig_t r;
  chime_batch_t b;
  rig_open(&r);
  fresh_log("lost");
  setenv("FAKE_CUDART_MANUAL", "1", 1);
  produce_all(&r);
  chime__device_t *d = dev_open(&r, 2, 2);
  assert_int_equal(chime__device_next(d, &b, 1000), 0);
  assert_int_equal(leases(&r), 2);
  setenv("FAKE_CUDART_LOSE_DEVICE_AT", "1", 1);
  chime_batch_t b2;
  int rc = chime__device_next(d, &b2, 100);
  assert_int_equal(rc, CHIME_ECUDA);
  assert_non_null(strstr(chime_last_error(), "cudaErrorUnknown (999)"));
  assert_non_null(strstr(chime_last_error(), "slot was given back"));
  assert_int_equal(leases(&r), 0);
  assert_int_equal(r.releases, 2);
  /* Every later call fails the same way, and says so. */
  assert_int_equal(chime__device_next(d, &b2, 0), CHIME_ECUDA);
  (void)chime__device_release(d, &b);
  chime__device_close(d);
  unsetenv("FAKE_CUDART_LOSE_DEVICE_AT");
  unsetenv("FAKE_CUDART_MANUAL");
  assert_no_leaks();
  end_log();
  fk.reset();
  rig_close(&r);
}

/* Many batches in the fake's lazy mode, the learner ordering a stream of
 * its own after each copy and reading every batch there: each arrives
 * whole, the ring is registered once, nothing synchronises the device
 * before close, and close leaves nothing. */
static void test_many_batches_registered_once(void **state) {
  (void)state;
  enum { N = 200 };
  static long kernel[N];
  rig_t r;
  void *ls = NULL;
  rig_open(&r);
  fresh_log("many");
  produce_all(&r);
  chime__device_t *d = dev_open(&r, 2, 3);
  assert_int_equal(fk.stream_create(&ls, 1), 0);
  chime_batch_t held[2];
  int nheld = 0;
  for (int i = 0; i < N; i++) {
    chime_batch_t b;
    int rc = chime__device_next(d, &b, 5000);
    if (rc)
      fail_msg("batch %d: %d: %s", i, rc, chime_last_error());
    assert_int_equal(b.seq, (uint64_t)i);
    assert_int_equal(chime__device_wait(d, &b, ls), 0);
    kernel[i] = fk.launch(ls, b.leaf[0].data, (size_t)b.leaf[0].bytes);
    /* Hold two batches, release the oldest: out of order with copies. */
    if (nheld == 2) {
      assert_int_equal(chime__device_release(d, &held[0]), 0);
      held[0] = held[1];
      nheld = 1;
    }
    held[nheld++] = b;
    produce_all(&r);
  }
  for (int i = 0; i < nheld; i++)
    assert_int_equal(chime__device_release(d, &held[i]), 0);
  fk.note("closing");
  chime__device_stats_t st;
  chime__device_get_stats(d, &st);
  assert_true(st.max_slots_held <= 2);
  assert_true(st.buffers <= 5);
  chime__device_close(d);
  fk.run(-1);
  for (int i = 0; i < N; i++) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t j = 0; j < r.lay->leaf_bytes[0]; j++)
      h = (h ^ pattern((uint64_t)i, 0, j)) * 1099511628211ull;
    if (fk.kernel_sum(kernel[i]) != (int64_t)(h >> 1))
      fail_msg("batch %d: the learner's kernel read other bytes", i);
  }
  assert_int_equal(fk.stream_destroy(ls), 0);
  char *log = fake_log_read(g_log);
  assert_log_ordered(log);
  assert_int_equal(fake_log_count(log, "register "), 1);
  assert_int_equal(fake_log_count(log, "free-busy"), 0);
  assert_int_equal(fake_log_count(log, "bad-handle"), 0);
  *strstr(log, "closing\n") = '\0';
  assert_int_equal(fake_log_count(log, "sync"), 0);
  assert_int_equal(fake_log_count(log, "stream-sync"), 0);
  assert_int_equal(fake_log_count(log, "event-sync"), 0);
  free(log);
  assert_no_leaks();
  end_log();
  rig_close(&r);
}

/* Registration: without read-only support the slots register without the
 * flag; a ring pin_host_memory already pinned is not registered again;
 * a refused registration fails the open and leaves nothing. */
static void test_registration_choices(void **state) {
  (void)state;
  rig_t r;
  char err[CHIME__CUDA_MSG_MAX * 2], want[128];
  rig_open(&r);
  fresh_log("reg");
  setenv("FAKE_CUDART_READONLY", "0", 1);
  chime__device_t *d = dev_open(&r, 1, 1);
  unsetenv("FAKE_CUDART_READONLY");
  chime__device_close(d);
  assert_int_equal(chime_ring_pin(r.cons), 0);
  d = dev_open(&r, 1, 1);
  chime__device_stats_t st;
  chime__device_get_stats(d, &st);
  assert_int_equal(st.registered, 0);
  chime__device_close(d);
  /* One whole-ring registration without read-only (3), then the pin's,
   * one per slot, and none by the second device end. */
  snprintf(want, sizeof want, "register %p %llu 3\n",
           chime_ring_slot_base(r.cons, 0),
           (unsigned long long)r.lay->data_bytes);
  chime_ring_destroy(r.cons); /* unpins */
  r.cons = NULL;
  char *log = fake_log_read(g_log);
  assert_non_null(strstr(log, want));
  assert_int_equal(fake_log_count(log, "register "), 1 + SLOTS);
  free(log);

  /* Refused: the open fails naming the call, and nothing is left. */
  uint8_t nonce[16];
  chime_ring_nonce(r.prod, nonce);
  assert_int_equal(chime_ring_attach(&r.cons, chime_ring_fd(r.prod), nonce), 0);
  fk.reset();
  setenv("FAKE_CUDART_FAIL_REGISTER_AT", "1", 1);
  chime__device_t *d2 = NULL;
  const chime__device_opts_t o = {.device = 0, .prefetch = 1, .max_lent = 1};
  const chime__device_source_t src = {
      .next = src_next, .release = src_release, .arg = &r};
  int rc = chime__device_open(&d2, r.cons, &r.spec, &o, &src, err, sizeof err);
  unsetenv("FAKE_CUDART_FAIL_REGISTER_AT");
  assert_int_equal(rc, CHIME_ECUDA);
  assert_null(d2);
  assert_non_null(strstr(err, "cudaErrorMemoryAllocation (2) from "
                              "cudaHostRegister("));
  assert_non_null(strstr(err, "portable|mapped|read-only"));
  assert_no_leaks();
  end_log();
  rig_close(&r);
}

/* A device the runtime does not have, and a runtime whose stream calls
 * fail: CHIME_ECUDA saying which. */
static void test_open_errors(void **state) {
  (void)state;
  rig_t r;
  char err[CHIME__CUDA_MSG_MAX * 2];
  chime__device_t *d = NULL;
  const chime__device_source_t src = {
      .next = src_next, .release = src_release, .arg = &r};
  chime__device_opts_t o = {.device = 3, .prefetch = 1, .max_lent = 1};
  rig_open(&r);
  fresh_log("openerr");
  assert_int_equal(
      chime__device_open(&d, r.cons, &r.spec, &o, &src, err, sizeof err),
      CHIME_ECUDA);
  assert_non_null(strstr(err, "no CUDA device 3"));
  o.device = 0;
  setenv("FAKE_CUDART_NO_DEVICE_CALLS", "1", 1);
  assert_int_equal(
      chime__device_open(&d, r.cons, &r.spec, &o, &src, err, sizeof err),
      CHIME_ECUDA);
  unsetenv("FAKE_CUDART_NO_DEVICE_CALLS");
  assert_non_null(strstr(err, "cudaStreamCreateWithFlags"));
  assert_non_null(strstr(err, "cudaErrorNotSupported (801)"));
  assert_null(d);
  assert_no_leaks();
  /* A runtime without the calls is named by the first it lacks. */
  chime__cudart_t bare;
  memset(&bare, 0, sizeof bare);
  assert_string_equal(chime__cudart_device_missing(&bare), "cudaGetDevice");
  assert_null(chime__cudart_device_missing(chime__cudart()));
  end_log();
  rig_close(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_slots_held_until_copy_completes),
      cmocka_unit_test(test_buffer_reuse_waits_for_learner_stream),
      cmocka_unit_test(test_failed_copy_releases_slot),
      cmocka_unit_test(test_failed_copy_ahead_is_reported),
      cmocka_unit_test(test_lost_device_releases_slots),
      cmocka_unit_test(test_many_batches_registered_once),
      cmocka_unit_test(test_registration_choices),
      cmocka_unit_test(test_ragged_copies_used_rows),
  };
  char err[CHIME__CUDA_MSG_MAX * 2];
  static const char *const scrub[] = {"CUDA_HOME", "CUDA_PATH",
                                      "FAKE_CUDART_INIT_ERROR",
                                      "FAKE_CUDART_DEVICES"};
  for (size_t i = 0; i < sizeof scrub / sizeof scrub[0]; i++)
    unsetenv(scrub[i]);
  setenv("CHIME_CUDART", FAKE_CUDART_FILE, 1);
  if (chime__cuda_require(err, sizeof err) != 0) {
    fprintf(stderr, "the fake runtime did not load: %s\n", err);
    return 1;
  }
  fake_control_bind(&fk, FAKE_CUDART_FILE);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
