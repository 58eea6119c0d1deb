/* Stream mode's sender alone (src/server/sender.c), on a real ring with an
 * owner and a call of the test's own behind its owner ops: batches go in
 * order within the learner's credits (capped at what the ring can lend),
 * as chunks whose header and bytes are the slot's, cut at 896 KiB with a
 * small tail riding in the last chunk; a slot goes back to the ring only
 * when the last slice into it is dropped and, for a held batch, when a
 * credit names it (unknown and repeated names ignored) or the owner gives
 * everything back; a finishing call or spans that do not fit cost the slot
 * nothing; a send in flight defers a publish to the call's on_sent; after
 * stop nothing is sent; over lanes each batch goes whole to the joined
 * call with the fewest bytes gRPC holds. The messages are kept by the fake
 * call until the test drops them, as gRPC would once written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chime/errors.h"
#include "chime/ring.h"
#include "ring/producer.h"
#include "server/sender.h"
#include "wire/chunk.h"

#define SLOTS 8
#define MAX_MSGS 4096

/* The call: the messages it was given, in order. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cond; /* a message came */
  int track;           /* a send sets sending, as call.c's pump does */
  atomic_int refs;
  atomic_int sending;   /* what call_sending answers */
  atomic_int finishing; /* call_send refuses (and frees) */
  grpc_byte_buffer *msg[MAX_MSGS];
  int n;
} fcall_t;

/* The owner: a ring whose slot bytes are sent as they are (the sender's
 * owner type, the stream, is this test's own struct). */
typedef struct chime__stream_s owner_t;
struct chime__stream_s {
  chime_ring_t *ring;
  uint64_t slot_bytes;
  chime__sender_t x;
  atomic_int refs;  /* ref - unref */
  atomic_int freed; /* slot_freed calls */
  size_t piece;     /* spans cut into pieces this long (0: one span) */
  int no_spans;     /* spans says max is too small */
  uint64_t next;    /* the next batch published: its pattern */
};

static void o_ref(owner_t *o) {
  atomic_fetch_add(&o->refs, 1);
}

static void o_unref(owner_t *o) {
  atomic_fetch_sub(&o->refs, 1);
}

static void o_slot_freed(owner_t *o) {
  atomic_fetch_add(&o->freed, 1);
}

static size_t o_spans(owner_t *o, uint32_t slot, uint64_t off, uint64_t len,
                      chime__span_t *out, size_t max) {
  const uint8_t *base = chime_ring_slot_base(o->ring, slot);
  size_t n = 0;
  if (o->no_spans)
    return 0;
  while (len > 0) {
    uint64_t l = o->piece != 0 && o->piece < len ? o->piece : len;
    if (n == max)
      return 0;
    out[n].p = base + off;
    out[n++].len = (size_t)l;
    off += l;
    len -= l;
  }
  return n;
}

static void c_ref(chime__call_t *c) {
  atomic_fetch_add(&((fcall_t *)c)->refs, 1);
}

static int c_send(chime__call_t *c, struct grpc_byte_buffer *bb) {
  fcall_t *f = (fcall_t *)c;
  if (atomic_load(&f->finishing)) {
    grpc_byte_buffer_destroy(bb); /* taken, as call.c does */
    return CHIME_ECLOSED;
  }
  pthread_mutex_lock(&f->mu);
  if (f->n == MAX_MSGS)
    abort(); /* a runaway sender; not an assert: any thread gets here */
  f->msg[f->n++] = bb;
  if (f->track)
    atomic_store(&f->sending, 1);
  pthread_cond_signal(&f->cond);
  pthread_mutex_unlock(&f->mu);
  return 0;
}

static int c_sending(chime__call_t *c) {
  return atomic_load(&((fcall_t *)c)->sending);
}

static const chime__sender_owner_t ops = {
    .ref = o_ref,
    .unref = o_unref,
    .slot_freed = o_slot_freed,
    .spans = o_spans,
    .call_ref = c_ref,
    .call_send = c_send,
    .call_sending = c_sending,
};

#define CALL(f) ((chime__call_t *)(f))

static int group_setup(void **state) {
  (void)state;
  grpc_init();
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  grpc_shutdown_blocking();
  return 0;
}

/* A ring of one sample of `bytes` a batch, and a sender for it that
 * sends the slot's first send_bytes (0: all of it). */
static void owner_init_n(owner_t *o, fcall_t *f, uint32_t bytes,
                         uint64_t send_bytes, uint32_t credits,
                         uint32_t max_credits, int hold) {
  chime_spec_t spec;
  char text[64];
  memset(o, 0, sizeof(*o));
  snprintf(text, sizeof(text), "x:u8[%u]", bytes);
  assert_int_equal(chime_spec_parse(&spec, text), 0);
  assert_int_equal(chime__ring_create(&o->ring, &spec, 1, SLOTS), 0);
  o->slot_bytes = chime_ring_layout(o->ring)->slot_bytes;
  if (send_bytes == 0)
    send_bytes = o->slot_bytes;
  assert_true(send_bytes <= o->slot_bytes);
  assert_int_equal(chime__sender_init(&o->x, o->ring, send_bytes, credits,
                                      max_credits, hold, 64, o, &ops),
                   0);
  memset(f, 0, sizeof(*f));
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cond, NULL);
}

static void owner_init(owner_t *o, fcall_t *f, uint32_t bytes, uint32_t credits,
                       uint32_t max_credits, int hold) {
  owner_init_n(o, f, bytes, 0, credits, max_credits, hold);
}

/* Drops every message the call holds (gRPC wrote them). */
static void drop_msgs(fcall_t *f) {
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->n; i++)
    grpc_byte_buffer_destroy(f->msg[i]);
  f->n = 0;
  pthread_mutex_unlock(&f->mu);
}

static uint64_t ring_released(owner_t *o) {
  chime_ring_stats_t st;
  chime_ring_stats(o->ring, &st);
  return st.released;
}

static void owner_fini(owner_t *o, fcall_t *f) {
  drop_msgs(f);
  chime__sender_unhold_all(&o->x);
  assert_int_equal(atomic_load(&o->refs), 0);
  chime__sender_fini(&o->x);
  chime_ring_destroy(o->ring);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cond);
}

static uint8_t pattern(uint64_t batch, uint64_t i) {
  return (uint8_t)(batch * 31 + i * 7 + (i >> 12));
}

/* Publishes n batches, each slot filled with its batch's pattern. */
static void publish(owner_t *o, int n) {
  for (int k = 0; k < n; k++) {
    chime__ring_wslot_t ws;
    uint64_t seq;
    assert_int_equal(chime__ring_try_acquire(o->ring, &ws, NULL, NULL), 0);
    uint8_t *b = ws.base;
    for (uint64_t i = 0; i < o->slot_bytes; i++)
      b[i] = pattern(o->next, i);
    assert_int_equal(chime__ring_publish(o->ring, ws.slot, &seq), 0);
    assert_int_equal(seq, o->next);
    o->next++;
  }
}

/* Checks message i of the call is chunk (seq, off, len) of a batch, its
 * bytes the batch's pattern. */
static void check_chunk(fcall_t *f, int i, uint64_t seq, uint64_t off,
                        uint64_t len, uint64_t total) {
  grpc_byte_buffer_reader r;
  assert_true(i < f->n);
  assert_true(grpc_byte_buffer_reader_init(&r, f->msg[i]));
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  const uint8_t *p = GRPC_SLICE_START_PTR(s);
  size_t n = GRPC_SLICE_LENGTH(s);
  chime__chunk_t c;
  assert_int_equal(chime__chunk_parse(p, n, n, &c), 0);
  assert_int_equal(c.seq, seq);
  assert_int_equal(c.offset, off);
  assert_int_equal(c.data_len, len);
  assert_int_equal(c.total, total);
  assert_int_equal(c.header_len + len, n);
  for (uint64_t k = 0; k < len; k++)
    if (p[c.header_len + k] != pattern(seq, off + k))
      fail_msg("batch %llu byte %llu differs", (unsigned long long)seq,
               (unsigned long long)(off + k));
  grpc_slice_unref(s);
}

/* Credits bound what is sent, in order; a Credit lets more go; credits
 * never exceed what the ring can lend. */
static void test_credits_and_order(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 1000, 2, 3, 0);
  chime__sender_start(&o.x, CALL(&f));
  assert_int_equal(f.refs, 1);
  publish(&o, 3);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 2);
  check_chunk(&f, 0, 0, 0, o.slot_bytes, o.slot_bytes);
  check_chunk(&f, 1, 1, 0, o.slot_bytes, o.slot_bytes);
  assert_int_equal(atomic_load(&o.x.batches), 2);
  assert_int_equal(atomic_load(&o.x.bytes), 2 * o.slot_bytes);
  chime__sender_credit(&o.x, 1, NULL, 0); /* sends what it allows */
  assert_int_equal(f.n, 3);
  check_chunk(&f, 2, 2, 0, o.slot_bytes, o.slot_bytes);
  drop_msgs(&f);
  /* A lying learner's 100 credits count as the 3 the ring can lend. */
  chime__sender_credit(&o.x, 100, NULL, 0);
  publish(&o, 5);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 3);
  chime__sender_credit(&o.x, 2, NULL, 0);
  assert_int_equal(f.n, 5);
  for (int i = 0; i < 5; i++)
    check_chunk(&f, i, 3 + (uint64_t)i, 0, o.slot_bytes, o.slot_bytes);
  chime__call_t *c = chime__sender_stop(&o.x);
  assert_ptr_equal(c, CALL(&f));
  owner_fini(&o, &f);
}

/* A slot goes back to the ring when gRPC drops the last slice into its
 * batch, not before; the owner is held meanwhile. */
static void test_slot_freed_when_slices_dropped(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 1000, 4, 7, 0);
  o.piece = 300; /* several slices per chunk */
  chime__sender_start(&o.x, CALL(&f));
  publish(&o, 2);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 2);
  assert_int_equal(o.freed, 0);
  assert_int_equal(ring_released(&o), 0);
  assert_int_equal(o.refs, 2); /* one per batch in gRPC's hands */
  grpc_byte_buffer_destroy(f.msg[1]);
  assert_int_equal(o.freed, 1);
  assert_int_equal(ring_released(&o), 1);
  assert_int_equal(o.refs, 1);
  grpc_byte_buffer_destroy(f.msg[0]);
  f.n = 0;
  assert_int_equal(o.freed, 2);
  assert_int_equal(ring_released(&o), 2);
  assert_int_equal(o.refs, 0);
  chime__sender_stop(&o.x);
  owner_fini(&o, &f);
}

/* Chunks of 896 KiB; a tail up to 56 KiB rides in the last one, a longer
 * one is a chunk of its own. A slot of a multi-chunk batch goes back
 * after its last chunk is dropped. */
static void test_chunks(void **state) {
  (void)state;
  const uint64_t C = CHIME__CHUNK_BYTES, T = CHIME__CHUNK_TAIL_BYTES;
  for (int longer = 0; longer < 2; longer++) {
    owner_t o;
    fcall_t f;
    uint64_t total = 2 * C + T + (uint64_t)longer;
    owner_init_n(&o, &f, (uint32_t)total, total, 1, 7, 0);
    o.piece = 100000;
    chime__sender_start(&o.x, CALL(&f));
    publish(&o, 1);
    chime__sender_send_ready(&o.x);
    if (!longer) {
      assert_int_equal(f.n, 2);
      check_chunk(&f, 0, 0, 0, C, total);
      check_chunk(&f, 1, 0, C, C + T, total);
    } else {
      assert_int_equal(f.n, 3);
      check_chunk(&f, 0, 0, 0, C, total);
      check_chunk(&f, 1, 0, C, C, total);
      check_chunk(&f, 2, 0, 2 * C, T + 1, total);
    }
    for (int i = 0; i < f.n - 1; i++)
      grpc_byte_buffer_destroy(f.msg[i]);
    assert_int_equal(o.freed, 0);
    grpc_byte_buffer_destroy(f.msg[f.n - 1]);
    f.n = 0;
    assert_int_equal(o.freed, 1);
    chime__sender_stop(&o.x);
    owner_fini(&o, &f);
  }
}

/* A hostile Credit costs at most a ring's worth of work: a count of 2^32 - 1
 * with nothing named lets only the held batches go (and credits stay
 * capped); a list of 100,000 names, unsorted, repeated and unknown, lets
 * exactly the held ones it names in its first `slots` entries go; names
 * past them are ignored (a learner holds at most `slots` batches). */
static void test_held_hostile(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 500, 7, 7, 1); /* 8 slots */
  chime__sender_start(&o.x, CALL(&f));
  publish(&o, 5); /* seqs 0..4 */
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 5);
  drop_msgs(&f);
  enum { N = 100000 };
  uint64_t *names = malloc(N * sizeof(*names));
  assert_non_null(names);
  for (size_t i = 0; i < N; i++)
    names[i] = 1000 + i % 7; /* never sent */
  names[0] = 3;
  names[2] = 1;
  names[5] = 3;
  names[7] = 4; /* the 8th entry: still within the slots */
  names[8] = 2; /* past them: ignored */
  chime__sender_credit(&o.x, 0, names, N);
  assert_int_equal(o.freed, 3); /* 1, 3 and 4 */
  assert_int_equal(ring_released(&o), 3);
  chime__sender_credit(&o.x, UINT32_MAX, NULL, 0); /* the rest: 0 and 2 */
  assert_int_equal(o.freed, 5);
  assert_int_equal(o.x.credits, 7);
  chime__sender_credit(&o.x, UINT32_MAX, names, N); /* none held */
  assert_int_equal(o.freed, 5);
  free(names);
  publish(&o, 2); /* still held until named: the list kept its order */
  chime__sender_send_ready(&o.x);
  drop_msgs(&f);
  assert_int_equal(o.freed, 5);
  uint64_t six[] = {6, 5};
  chime__sender_credit(&o.x, 0, six, 2);
  assert_int_equal(o.freed, 7);
  assert_int_equal(o.refs, 0);
  chime__sender_stop(&o.x);
  owner_fini(&o, &f);
}

/* More names than fit the sender's stack buffer (a sender that may lend
 * 127 batches; 5 held, named among 100 strangers): every one named goes,
 * and only those. */
static void test_held_many_named(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 500, 7, 127, 1);
  chime__sender_start(&o.x, CALL(&f));
  publish(&o, 5); /* seqs 0..4 */
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 5);
  drop_msgs(&f);
  uint64_t names[100];
  for (size_t i = 0; i < 100; i++)
    names[i] = 1000 + i; /* never sent */
  names[90] = 4;
  names[40] = 0;
  names[70] = 2;
  chime__sender_credit(&o.x, 0, names, 100);
  assert_int_equal(o.freed, 3);
  uint64_t rest[] = {3, 1};
  chime__sender_credit(&o.x, 0, rest, 2);
  assert_int_equal(o.freed, 5);
  assert_int_equal(o.refs, 0);
  chime__sender_stop(&o.x);
  owner_fini(&o, &f);
}

/* A held batch (a fifo table's) stays the learner's after gRPC dropped
 * it, until a Credit names it; names of batches not held, or named twice,
 * are ignored; a Credit naming none releases the oldest n; unhold_all
 * lets every held one go and holds no later batch. */
static void test_held(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 500, 7, 7, 1);
  chime__sender_start(&o.x, CALL(&f));
  publish(&o, 5);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 5);
  drop_msgs(&f);
  assert_int_equal(o.freed, 0);
  assert_int_equal(o.refs, 5); /* each held batch holds the owner */
  uint64_t named[] = {3, 99, 3};
  chime__sender_credit(&o.x, 0, named, 3);
  assert_int_equal(o.freed, 1);
  assert_int_equal(ring_released(&o), 1);
  chime__sender_credit(&o.x, 2, NULL, 0); /* the oldest two: 0 and 1 */
  assert_int_equal(o.freed, 3);
  uint64_t again[] = {0, 1, 3};
  chime__sender_credit(&o.x, 0, again, 3);
  assert_int_equal(o.freed, 3);
  /* 2 and 4 are still held; a batch named while gRPC still has it goes
   * back once gRPC drops it. */
  publish(&o, 1);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 1);
  uint64_t five[] = {5};
  chime__sender_credit(&o.x, 0, five, 1);
  assert_int_equal(o.freed, 3);
  drop_msgs(&f);
  assert_int_equal(o.freed, 4);
  chime__sender_unhold_all(&o.x);
  assert_int_equal(o.freed, 6);
  assert_int_equal(o.refs, 0);
  /* No longer held: a new batch goes back when dropped. */
  publish(&o, 1);
  chime__sender_send_ready(&o.x);
  drop_msgs(&f);
  assert_int_equal(o.freed, 7);
  chime__sender_stop(&o.x);
  owner_fini(&o, &f);
}

/* While the call has a send in flight a publish sends nothing: the call's
 * completion (on_sent -> chime__sender_sent) sends it, from the thread
 * already awake; awaiting says a send started and sent() has not come. */
static void test_published_while_sending(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 100, 7, 7, 0);
  assert_int_equal(chime__sender_awaiting(&o.x), 0);
  chime__sender_start(&o.x, CALL(&f));
  publish(&o, 1);
  chime__sender_published(&o.x);
  assert_int_equal(f.n, 1);
  assert_int_equal(chime__sender_awaiting(&o.x), 1);
  atomic_store(&f.sending, 1);
  publish(&o, 2);
  chime__sender_published(&o.x);
  assert_int_equal(f.n, 1);
  atomic_store(&f.sending, 0);
  chime__sender_sent(&o.x);
  assert_int_equal(f.n, 3);
  check_chunk(&f, 2, 2, 0, o.slot_bytes, o.slot_bytes);
  chime__sender_stop(&o.x);
  owner_fini(&o, &f);
}

/* Stopped: nothing more is sent, the call comes back once (its reference
 * for the caller to drop), and a later start is ignored. A sender never
 * started sends nothing. */
static void test_stop(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 100, 7, 7, 0);
  publish(&o, 1);
  chime__sender_send_ready(&o.x); /* not started */
  chime__sender_published(&o.x);
  assert_int_equal(f.n, 0);
  chime__sender_start(&o.x, CALL(&f));
  chime__sender_published(&o.x);
  assert_int_equal(f.n, 1);
  assert_ptr_equal(chime__sender_stop(&o.x), CALL(&f));
  assert_null(chime__sender_stop(&o.x));
  publish(&o, 1);
  chime__sender_send_ready(&o.x);
  chime__sender_credit(&o.x, 1, NULL, 0);
  assert_int_equal(f.n, 1);
  fcall_t g;
  memset(&g, 0, sizeof(g));
  chime__sender_start(&o.x, CALL(&g));
  assert_int_equal(g.refs, 0);
  assert_null(chime__sender_stop(&o.x));
  assert_int_equal(f.refs, 1); /* start's, handed back by stop */
  owner_fini(&o, &f);
}

/* A call that is finishing takes no chunk: the batch is not counted as
 * sent and its slot goes back at once; so does a batch whose spans do
 * not fit. */
static void test_refused(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 100, 7, 7, 1);
  chime__sender_start(&o.x, CALL(&f));
  atomic_store(&f.finishing, 1);
  publish(&o, 1);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 0);
  assert_int_equal(atomic_load(&o.x.batches), 0);
  /* Held (hold=1) until a credit names it, like any batch taken. */
  assert_int_equal(o.freed, 0);
  chime__sender_credit(&o.x, 1, NULL, 0);
  assert_int_equal(o.freed, 1);
  atomic_store(&f.finishing, 0);
  o.no_spans = 1;
  chime__sender_unhold_all(&o.x);
  publish(&o, 1);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f.n, 0);
  assert_int_equal(o.freed, 2);
  assert_int_equal(atomic_load(&o.x.batches), 0);
  assert_int_equal(o.refs, 0);
  chime__sender_stop(&o.x);
  owner_fini(&o, &f);
}

/* Threads as in chimed: a producer publishing (published), gRPC taking
 * what the call queued, dropping it and completing the sends (sent), a
 * learner releasing each batch it got by name with a Credit. Every batch
 * goes once, in order, and every slot comes back. */
enum { BATCHES = 2000 };
#define RUN_NS (60ull * 1000000000ull) /* liveness: the run ends by then */

typedef struct {
  owner_t *o;
  fcall_t *f;
  uint64_t t0;
  atomic_int stop; /* a check failed, or time ran out */
  pthread_mutex_t mu;
  pthread_cond_t cond;
  uint64_t delivered; /* batches the "learner" got, in order (mu) */
} run_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A cond wait of at most 100 ms; 0 once the run must end. */
static int wait_a_bit(run_t *r, pthread_cond_t *c, pthread_mutex_t *m) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(c, m, &ts);
  if (now_ns() - r->t0 > RUN_NS)
    atomic_store(&r->stop, 1);
  return !atomic_load(&r->stop);
}

static void *producer_main(void *arg) {
  run_t *r = arg;
  owner_t *o = r->o;
  for (uint64_t k = 0; k < BATCHES && !atomic_load(&r->stop);) {
    chime__ring_wslot_t ws;
    uint64_t seq;
    /* The sender's releases ring the ring's bell. */
    int rc = chime__ring_acquire(o->ring, &ws, 100);
    if (rc == CHIME_ETIMEDOUT) {
      if (now_ns() - r->t0 > RUN_NS)
        atomic_store(&r->stop, 1);
      continue;
    }
    memset(ws.base, (int)(k & 0xff), o->slot_bytes);
    if (rc != 0 || chime__ring_publish(o->ring, ws.slot, &seq) != 0 ||
        seq != k) {
      atomic_store(&r->stop, 1);
      break;
    }
    k++;
    chime__sender_published(&o->x);
  }
  return NULL;
}

/* gRPC: takes what the call queued, checks it, drops it; once nothing is
 * queued the sends are complete (on_sent). */
static void *grpc_main(void *arg) {
  run_t *r = arg;
  fcall_t *f = r->f;
  uint64_t seen = 0;
  while (seen < BATCHES) {
    grpc_byte_buffer *msg[MAX_MSGS];
    int n;
    pthread_mutex_lock(&f->mu);
    while (f->n == 0 && wait_a_bit(r, &f->cond, &f->mu))
      ;
    n = f->n;
    memcpy(msg, f->msg, (size_t)n * sizeof(msg[0]));
    f->n = 0;
    pthread_mutex_unlock(&f->mu);
    if (n == 0)
      break; /* stopped */
    for (int i = 0; i < n; i++) {
      grpc_byte_buffer_reader rd;
      int ok = grpc_byte_buffer_reader_init(&rd, msg[i]);
      grpc_slice s =
          ok ? grpc_byte_buffer_reader_readall(&rd) : grpc_empty_slice();
      if (ok)
        grpc_byte_buffer_reader_destroy(&rd);
      chime__chunk_t c;
      const uint8_t *p = GRPC_SLICE_START_PTR(s);
      size_t len = GRPC_SLICE_LENGTH(s);
      ok = ok && chime__chunk_parse(p, len, len, &c) == 0 && c.seq == seen &&
           p[c.header_len] == (uint8_t)(c.seq & 0xff);
      grpc_slice_unref(s);
      grpc_byte_buffer_destroy(msg[i]);
      if (!ok) {
        atomic_store(&r->stop, 1);
        return NULL;
      }
      seen++;
      pthread_mutex_lock(&r->mu);
      r->delivered = seen;
      pthread_cond_signal(&r->cond);
      pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&f->mu);
    int idle = f->n == 0;
    if (idle)
      atomic_store(&f->sending, 0);
    pthread_mutex_unlock(&f->mu);
    if (idle)
      chime__sender_sent(&r->o->x);
  }
  return NULL;
}

static void *crediting_learner_main(void *arg) {
  run_t *r = arg;
  for (uint64_t k = 0; k < BATCHES; k++) {
    pthread_mutex_lock(&r->mu);
    while (r->delivered <= k && wait_a_bit(r, &r->cond, &r->mu))
      ;
    int go = r->delivered > k;
    pthread_mutex_unlock(&r->mu);
    if (!go)
      break;
    chime__sender_credit(&r->o->x, 1, &k, 1);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  owner_t o;
  fcall_t f;
  owner_init(&o, &f, 256, SLOTS - 1, SLOTS - 1, 1);
  f.track = 1;
  chime__sender_start(&o.x, CALL(&f));
  run_t r = {.o = &o, .f = &f, .t0 = now_ns()};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cond, NULL);
  pthread_t th[3];
  assert_int_equal(pthread_create(&th[0], NULL, producer_main, &r), 0);
  assert_int_equal(pthread_create(&th[1], NULL, grpc_main, &r), 0);
  assert_int_equal(pthread_create(&th[2], NULL, crediting_learner_main, &r), 0);
  for (int i = 0; i < 3; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&r.stop), 0);
  assert_int_equal(r.delivered, BATCHES);
  assert_int_equal(atomic_load(&o.x.batches), BATCHES);
  assert_int_equal(ring_released(&o), BATCHES);
  chime__sender_stop(&o.x);
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cond);
  owner_fini(&o, &f);
}

/* Lanes: a stream read over 3 calls. Joins out of range, taken or after
 * stop are refused; each batch goes whole to the joined lane with the
 * fewest bytes gRPC holds (ties: the lowest), so a lane whose messages
 * were written takes the next batch; stop hands the lanes' calls back. */
static void test_lanes(void **state) {
  (void)state;
  owner_t o;
  fcall_t f[3];
  owner_init(&o, &f[0], 1000, 7, 7, 0);
  for (int i = 1; i < 3; i++) {
    memset(&f[i], 0, sizeof(f[i]));
    pthread_mutex_init(&f[i].mu, NULL);
    pthread_cond_init(&f[i].cond, NULL);
  }
  chime__sender_set_lanes(&o.x, 3);
  chime__sender_start(&o.x, CALL(&f[0]));
  assert_int_equal(chime__sender_join(&o.x, 0, CALL(&f[1])), CHIME_EINVAL);
  assert_int_equal(chime__sender_join(&o.x, 3, CALL(&f[1])), CHIME_EINVAL);
  assert_int_equal(chime__sender_join(&o.x, 1, CALL(&f[1])), 0);
  assert_int_equal(chime__sender_join(&o.x, 1, CALL(&f[2])), CHIME_EEXIST);
  assert_int_equal(chime__sender_join(&o.x, 2, CALL(&f[2])), 0);
  assert_int_equal(atomic_load(&f[1].refs), 1);
  publish(&o, 3);
  chime__sender_send_ready(&o.x);
  for (int i = 0; i < 3; i++) { /* one batch each, whole */
    assert_int_equal(f[i].n, 1);
    check_chunk(&f[i], 0, (uint64_t)i, 0, o.slot_bytes, o.slot_bytes);
  }
  drop_msgs(&f[1]); /* lane 1's bytes were written: it takes the next */
  publish(&o, 2);
  chime__sender_send_ready(&o.x);
  assert_int_equal(f[1].n, 1);
  check_chunk(&f[1], 0, 3, 0, o.slot_bytes, o.slot_bytes);
  /* then all hold one batch: the lowest lane of the least */
  assert_int_equal(f[0].n, 2);
  check_chunk(&f[0], 1, 4, 0, o.slot_bytes, o.slot_bytes);
  chime__call_t *c = chime__sender_stop(&o.x);
  assert_ptr_equal(c, CALL(&f[0]));
  assert_int_equal(chime__sender_join(&o.x, 1, CALL(&f[1])), CHIME_ECLOSED);
  chime__call_t *lanes[CHIME__LANES_MAX];
  assert_int_equal(chime__sender_take_lanes(&o.x, lanes), 2);
  assert_ptr_equal(lanes[0], CALL(&f[1]));
  assert_ptr_equal(lanes[1], CALL(&f[2]));
  for (int i = 1; i < 3; i++) {
    drop_msgs(&f[i]);
    pthread_mutex_destroy(&f[i].mu);
    pthread_cond_destroy(&f[i].cond);
  }
  owner_fini(&o, &f[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_credits_and_order),
      cmocka_unit_test(test_held_hostile),
      cmocka_unit_test(test_held_many_named),
      cmocka_unit_test(test_slot_freed_when_slices_dropped),
      cmocka_unit_test(test_chunks),
      cmocka_unit_test(test_held),
      cmocka_unit_test(test_published_while_sending),
      cmocka_unit_test(test_stop),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_lanes),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
