/* Slots, leases, futex waits, shutdown and reclaim.
 *
 * The protocol (docs/ring.md has the full story):
 * - publish: the producer writes queue[pub % slots] = {slot, seq = pub}, then
 *   stores pub + 1 (release). The consumer loads pub (acquire) and takes the
 *   entries from its cursor on, checking each against the slot count.
 * - release: the consumer bumps release_count[slot] (release). The producer
 *   owns a private count of how often it published each slot; a slot is free
 *   when the two are equal. Consumer-written words are only ever compared.
 * - waiting: each side sets its `waiting` word, re-checks, then sleeps on a
 *   futex "bell"; the other side rings the bell only when it sees `waiting`.
 *   The store of the condition and the load of `waiting` are seq_cst on both
 *   sides, so one of them always sees the other (no lost wake-up) and the fast
 *   path makes no system call.
 * - wake threshold: the producer's `waiting` word holds N, "wake me when N
 *   slots are free" (chime__ring_set_wake_at; 0 = not waiting, 1 = every
 *   release wakes it, as before the threshold existed). It needs no change
 *   of the header's layout or format version: a consumer that predates N
 *   rings on any nonzero word (the producer wakes sooner, nothing is lost),
 *   and a producer that predates it writes 1. A consumer rings the
 *   producer's bell
 *   (a) on a release when its own count of free slots, slots - (pub - taken)
 *   - held, is >= N, and (b) in next() when no batch is ready, whatever N
 *   is. The count counts slots the producer took and has not published as
 *   free: an over-estimate, never an under-estimate.
 *   Why no wake-up is lost: the producer sleeps only when its re-check after
 *   the seq_cst store of N found no slot free, so every release it did not
 *   see comes after that store in the seq_cst order, and that release's
 *   seq_cst load of `waiting` reads this N (or a later word: the producer is
 *   awake). Reading N synchronises with its store, so the consumer's load of
 *   pub after it sees at least the pub the producer sleeps with; pub cannot
 *   grow while it sleeps, so the count is exact up to the slots it holds
 *   acquired, and the release that brings the free slots to N rings. Fewer
 *   than N releases can follow only if the consumer stops releasing: it then
 *   holds its batches and, having taken them all, misses in next(), whose
 *   seq_cst load of `waiting` comes after all its releases and rings by (b):
 *   a learner that holds batches and waits for one cannot deadlock against
 *   a producer waiting for N free slots.
 * - ready limit (chime__ring_set_ready_max, docs/ring.md): a producer that
 *   finds R batches untaken adds CHIME__RING_WAKE_ON_TAKE to `waiting`;
 *   `taken` and `waiting` are seq_cst as above, so the next take rings.
 *
 * This file is the protocol's per-batch path on both sides (acquire,
 * publish, next, release, and the producer's look at its slots);
 * handle.c makes, attaches, shuts down, inspects and destroys the handle
 * (handle.h). */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "ring/handle.h"

static inline uint64_t load_acquire64(_Atomic uint64_t *p) {
  return atomic_load_explicit(p, memory_order_acquire);
}

static inline uint32_t load_acquire32(_Atomic uint32_t *p) {
  return atomic_load_explicit(p, memory_order_acquire);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Not the _PRIVATE variants: the other side may be another process. */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected,
                       uint64_t timeout_ns, int forever) {
  struct timespec ts = chime__ts_from_ns(timeout_ns);
  int saved = errno;
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected,
          forever ? NULL : &ts, NULL, 0);
  errno = saved; /* EINTR, EAGAIN, ETIMEDOUT: the caller re-checks anyway */
}

/* A wait that ends at a deadline: returns 0 to keep waiting, or
 * CHIME_ETIMEDOUT. Spins first, then sleeps on `bell`. */
typedef struct {
  int timeout_ms;
  uint32_t *spin_ns; /* this side's spin budget */
  uint64_t start;    /* 0 until the first miss */
  uint64_t deadline; /* valid when timeout_ms > 0 */
  uint64_t now;      /* last clock reading while spinning */
  int slept;
} waiter_t;

static int waiter_miss(waiter_t *w) {
  if (w->timeout_ms == 0)
    return CHIME_ETIMEDOUT;
  if (w->start == 0) {
    w->start = chime__now_ns();
    w->now = w->start;
    if (w->timeout_ms > 0)
      w->deadline = w->start + (uint64_t)w->timeout_ms * 1000000u;
  }
  return 0;
}

/* 1 while the spin budget (and the deadline) allow another poll. */
static int waiter_spin(waiter_t *w) {
  if (w->slept || w->now - w->start >= *w->spin_ns ||
      (w->timeout_ms > 0 && w->now >= w->deadline))
    return 0;
  /* Past the short spin, yield: when the other side (or anything else) is
   * waiting for this CPU, spinning would only delay the batch we wait for. */
  if (w->now - w->start >= CHIME_RING_SPIN_MIN_NS) {
    sched_yield();
    w->now = chime__now_ns();
    return 1;
  }
  for (int i = 0; i < 8; i++)
    cpu_relax();
  w->now = chime__now_ns();
  return 1;
}

/* After a successful wait: spin long enough next time to catch a batch that
 * comes as late as this one did, unless it came too late for any spin. */
static void waiter_adapt(const waiter_t *w) {
  uint64_t waited;
  if (w->start == 0)
    return;
  waited = chime__now_ns() - w->start;
  if (waited <= *w->spin_ns)
    return;
  if (waited < CHIME_RING_SPIN_MAX_NS)
    *w->spin_ns = (uint32_t)(waited * 2 < CHIME_RING_SPIN_MAX_NS
                                 ? waited * 2
                                 : CHIME_RING_SPIN_MAX_NS);
  else
    *w->spin_ns = CHIME_RING_SPIN_MIN_NS;
}

/* Time left before the deadline, 0 when it has passed. */
static uint64_t waiter_left(const waiter_t *w) {
  uint64_t now;
  if (w->timeout_ms < 0)
    return UINT64_MAX;
  now = chime__now_ns();
  return now >= w->deadline ? 0 : w->deadline - now;
}

static void waiter_account(const waiter_t *w, _Atomic uint64_t *total) {
  if (w->start != 0)
    atomic_fetch_add_explicit(total, chime__now_ns() - w->start,
                              memory_order_relaxed);
}

/* --- producer --- */

/* Whether the slot's latest publish is released, as far as we saw: the
 * consumer released it as often as we published it, now or at some look
 * since that publish (recorded, so a count the consumer winds back later
 * changes nothing). */
static int slot_free(chime_ring_t *ring, uint32_t s, memory_order mo) {
  if (ring->seen_free[s])
    return 1;
  if (atomic_load_explicit(&ring->seg.relcount[s], mo) != ring->pub_per_slot[s])
    return 0;
  ring->seen_free[s] = 1;
  return 1;
}

/* A slot is free when the consumer has released it as often as we published
 * it; none is while ready_max batches wait untaken. A lying consumer can
 * only keep its own slots busy. */
static int next_free(chime_ring_t *ring, memory_order mo) {
  uint32_t n = ring->layout.slots;
  if (ring->ready_max != 0 &&
      ring->pub - atomic_load_explicit(&ring->seg.ctrl->taken, mo) >=
          ring->ready_max)
    return -1;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t s = ring->scan + i;
    if (s >= n)
      s -= n;
    if (ring->acquired[s])
      continue;
    if (slot_free(ring, s, mo)) {
      ring->scan = s + 1 == n ? 0 : s + 1;
      return (int)s;
    }
  }
  return -1;
}

/* The producer's `waiting` word while it sleeps. */
static uint32_t waiting_word(const chime_ring_t *ring) {
  return ring->wake_at | (ring->ready_max ? CHIME__RING_WAKE_ON_TAKE : 0);
}

static void take_slot(chime_ring_t *ring, uint32_t slot,
                      chime__ring_wslot_t *out) {
  ring->acquired[slot] = 1;
  memset(out, 0, sizeof(*out));
  out->slot = slot;
  out->base = slot_ptr(ring, slot);
  for (uint32_t i = 0; i < ring->spec.nleaves; i++) {
    out->leaf[i] = (uint8_t *)out->base + ring->layout.leaf_offset[i];
    if (ring->spec.leaves[i].ragged)
      out->offsets[i] =
          (int64_t *)((uint8_t *)out->base + ring->layout.offsets_offset[i]);
  }
  out->info =
      (chime_sample_info_t *)((uint8_t *)out->base + ring->layout.info_offset);
}

int chime__ring_try_acquire(chime_ring_t *ring, chime__ring_wslot_t *out,
                            uint32_t **bell, uint32_t *bell_val) {
  if (ring == NULL || out == NULL || (bell == NULL) != (bell_val == NULL))
    return CHIME_EINVAL;
  if (ring->consumer)
    return CHIME_EPERM;
  chime__ring_prod_t *prod = ring->seg.prod;
  if (load_acquire32(&prod->shutdown))
    return CHIME_ESHUTDOWN;
  int slot = next_free(ring, memory_order_acquire);
  if (slot < 0 && bell == NULL) /* the caller learns of releases itself */
    return CHIME_EBUSY;
  if (slot < 0) {
    /* As acquire() before it sleeps: read the bell, say we wait, look
     * again; a release after this rings the bell (no lost wake-up). */
    _Atomic uint32_t *b = &ring->seg.ctrl->prod_bell;
    *bell = (uint32_t *)b;
    *bell_val = atomic_load_explicit(b, memory_order_seq_cst);
    atomic_store_explicit(&prod->waiting, waiting_word(ring),
                          memory_order_seq_cst);
    slot = next_free(ring, memory_order_seq_cst);
    if (slot < 0)
      return atomic_load_explicit(&prod->shutdown, memory_order_seq_cst)
                 ? CHIME_ESHUTDOWN
                 : CHIME_EBUSY;
  }
  atomic_store_explicit(&prod->waiting, 0, memory_order_relaxed);
  take_slot(ring, (uint32_t)slot, out);
  return 0;
}

int chime__ring_acquire(chime_ring_t *ring, chime__ring_wslot_t *out,
                        int timeout_ms) {
  waiter_t w = {timeout_ms, NULL, 0, 0, 0, 0};
  chime__ring_prod_t *prod;
  int slot, rc = 0;

  if (ring == NULL || out == NULL)
    return CHIME_EINVAL;
  if (ring->consumer)
    return CHIME_EPERM;
  prod = ring->seg.prod;
  w.spin_ns = &ring->spin_ns[SIDE_PRODUCER];
  for (;;) {
    uint32_t bell;
    uint64_t left;
    if (load_acquire32(&prod->shutdown)) {
      rc = CHIME_ESHUTDOWN;
      goto out;
    }
    slot = next_free(ring, memory_order_acquire);
    if (slot >= 0)
      break;
    rc = waiter_miss(&w);
    if (rc != 0)
      goto out;
    if (waiter_spin(&w))
      continue;
    bell =
        atomic_load_explicit(&ring->seg.ctrl->prod_bell, memory_order_seq_cst);
    atomic_store_explicit(&prod->waiting, waiting_word(ring),
                          memory_order_seq_cst);
    slot = next_free(ring, memory_order_seq_cst);
    if (slot >= 0 ||
        atomic_load_explicit(&prod->shutdown, memory_order_seq_cst)) {
      atomic_store_explicit(&prod->waiting, 0, memory_order_relaxed);
      continue; /* the top of the loop sorts out which */
    }
    left = waiter_left(&w);
    if (left == 0) {
      atomic_store_explicit(&prod->waiting, 0, memory_order_relaxed);
      rc = CHIME_ETIMEDOUT;
      goto out;
    }
    futex_wait(&ring->seg.ctrl->prod_bell, bell, left, timeout_ms < 0);
    w.slept = 1;
    atomic_store_explicit(&prod->waiting, 0, memory_order_relaxed);
  }
  waiter_adapt(&w);
  take_slot(ring, (uint32_t)slot, out);
out:
  waiter_account(&w, &prod->wait_ns);
  return rc;
}

int chime__ring_publish(chime_ring_t *ring, uint32_t slot, uint64_t *seq) {
  chime__ring_pubent_t *ent;
  uint64_t n;

  if (ring == NULL)
    return CHIME_EINVAL;
  if (ring->consumer)
    return CHIME_EPERM;
  if (slot >= ring->layout.slots || !ring->acquired[slot])
    return CHIME_EINVAL;
  ring->acquired[slot] = 0;
  ring->pub_per_slot[slot]++;
  ring->seen_free[slot] = 0;
  n = ring->pub;
  ring->last_seq[slot] = n;
  ent = &ring->seg.queue[n % ring->layout.slots];
  atomic_store_explicit(&ent->slot, slot, memory_order_relaxed);
  atomic_store_explicit(&ent->seq, n, memory_order_relaxed);
  /* seq_cst: a release store that also orders before the load of waiting. */
  atomic_store_explicit(&ring->seg.prod->pub, n + 1, memory_order_seq_cst);
  ring->pub = n + 1;
  if (atomic_load_explicit(&ring->seg.ctrl->waiting, memory_order_seq_cst))
    bell_ring(&ring->seg.ctrl->cons_bell, 1);
  if (seq != NULL)
    *seq = n;
  return 0;
}

void chime__ring_abandon(chime_ring_t *ring, uint32_t slot) {
  if (ring == NULL || ring->consumer || slot >= ring->layout.slots)
    return;
  ring->acquired[slot] = 0;
}

int chime__ring_released(chime_ring_t *ring, uint32_t slot) {
  if (ring == NULL || ring->consumer || slot >= ring->layout.slots)
    return 0;
  /* seq_cst: a look after chime__ring_arm_bell's store sees every release
   * whose load of `waiting` missed it (no lost wake-up). */
  return !ring->acquired[slot] && slot_free(ring, slot, memory_order_seq_cst);
}

int chime__ring_arm_bell(chime_ring_t *ring, uint32_t **bell,
                         uint32_t *bell_val) {
  if (ring == NULL || bell == NULL || bell_val == NULL)
    return CHIME_EINVAL;
  if (ring->consumer)
    return CHIME_EPERM;
  _Atomic uint32_t *b = &ring->seg.ctrl->prod_bell;
  *bell = (uint32_t *)b;
  *bell_val = atomic_load_explicit(b, memory_order_seq_cst);
  /* 1: any release rings (it frees at least its own slot). */
  atomic_store_explicit(&ring->seg.prod->waiting, 1, memory_order_seq_cst);
  return 0;
}

uint32_t chime__ring_unreleased(chime_ring_t *ring, uint32_t *slots,
                                uint32_t max) {
  uint32_t n = 0;
  if (ring == NULL || ring->consumer)
    return 0;
  for (uint32_t s = 0; s < ring->layout.slots; s++) {
    if (ring->pub_per_slot[s] == 0 || ring->acquired[s] ||
        slot_free(ring, s, memory_order_acquire))
      continue;
    if (n < max) {
      /* Insertion by publish order: at most `slots` entries. */
      uint32_t i = n;
      while (i > 0 && ring->last_seq[slots[i - 1]] > ring->last_seq[s]) {
        slots[i] = slots[i - 1];
        i--;
      }
      slots[i] = s;
    }
    n++;
  }
  return n;
}

/* --- consumer --- */

/* 1 when a batch is waiting at the cursor. */
static int have_batch(const chime_ring_t *ring, memory_order mo) {
  return atomic_load_explicit(&ring->seg.prod->pub, mo) !=
         atomic_load_explicit(&ring->seg.ctrl->taken, memory_order_relaxed);
}

static int take(chime_ring_t *ring, chime_ring_view_t *out) {
  chime__ring_ctrl_t *ctrl = ring->seg.ctrl;
  uint64_t cur = atomic_load_explicit(&ctrl->taken, memory_order_relaxed);
  uint64_t pub = load_acquire64(&ring->seg.prod->pub);
  const chime__ring_pubent_t *ent;
  uint32_t slot, max;
  uint64_t seq;

  /* The producer's words are as untrusted as its header. */
  if (pub - cur > ring->layout.slots)
    return CHIME_ECORRUPT;
  ent = &ring->seg.queue[cur % ring->layout.slots];
  slot = atomic_load_explicit(&ent->slot, memory_order_relaxed);
  seq = atomic_load_explicit(&ent->seq, memory_order_relaxed);
  if (slot >= ring->layout.slots || seq != cur || ring->held[slot])
    return CHIME_ECORRUPT;
  ring->held[slot] = 1;
  ring->nheld++;
  /* seq_cst: orders before the load of waiting (ready limit above). */
  atomic_store_explicit(&ctrl->taken, cur + 1, memory_order_seq_cst);
  if (atomic_load_explicit(&ring->seg.prod->waiting, memory_order_seq_cst) &
      CHIME__RING_WAKE_ON_TAKE)
    bell_ring(&ctrl->prod_bell, 1);
  atomic_store_explicit(&ctrl->leases, ring->nheld, memory_order_relaxed);
  max = atomic_load_explicit(&ctrl->max_leases, memory_order_relaxed);
  if (ring->nheld > max)
    atomic_store_explicit(&ctrl->max_leases, ring->nheld, memory_order_relaxed);

  memset(out, 0, sizeof(*out));
  out->seq = seq;
  out->slot = slot;
  out->count = ring->layout.batch_size;
  for (uint32_t i = 0; i < ring->spec.nleaves; i++) {
    out->leaf[i] = slot_ptr(ring, slot) + ring->layout.leaf_offset[i];
    if (ring->spec.leaves[i].ragged)
      out->offsets[i] = (const int64_t *)(slot_ptr(ring, slot) +
                                          ring->layout.offsets_offset[i]);
  }
  out->info = (const chime_sample_info_t *)(slot_ptr(ring, slot) +
                                            ring->layout.info_offset);
  return 0;
}

/* Why next() cannot return a batch right now regardless of the queue. */
static int next_blocked(const chime_ring_t *ring, memory_order mo) {
  if (atomic_load_explicit(&ring->disconnected, mo))
    return CHIME_EDISCONNECTED;
  if (atomic_load_explicit(&ring->seg.prod->shutdown, mo))
    return CHIME_ESHUTDOWN;
  return 0;
}

/* A consumer with no batch ready wakes a producer waiting for more free
 * slots than there are: else both could wait for ever. */
static void wake_producer_if_waiting(chime_ring_t *ring) {
  if (atomic_load_explicit(&ring->seg.prod->waiting, memory_order_seq_cst))
    bell_ring(&ring->seg.ctrl->prod_bell, 1);
}

/* The free slots by the consumer's count after a release: neither queued
 * nor held. Slots the producer holds acquired count as free (it is awake
 * then); the producer's words are untrusted, hence the clamps. */
static uint32_t free_estimate(const chime_ring_t *ring) {
  uint64_t pub = load_acquire64(&ring->seg.prod->pub);
  uint64_t cur =
      atomic_load_explicit(&ring->seg.ctrl->taken, memory_order_relaxed);
  uint64_t queued = pub - cur, slots = ring->layout.slots;
  if (queued > slots)
    return (uint32_t)slots; /* nonsense: ring rather than lose a wake-up */
  if (queued + ring->nheld >= slots)
    return 0;
  return (uint32_t)(slots - queued - ring->nheld);
}

int chime_ring_next(chime_ring_t *ring, chime_ring_view_t *out,
                    int timeout_ms) {
  waiter_t w = {timeout_ms, NULL, 0, 0, 0, 0};
  chime__ring_ctrl_t *ctrl;
  int rc;

  if (ring == NULL || out == NULL)
    return CHIME_EINVAL;
  ctrl = ring->seg.ctrl;
  w.spin_ns = &ring->spin_ns[SIDE_CONSUMER];
  rc = next_blocked(ring, memory_order_acquire);
  if (rc != 0)
    goto out;
  if (ring->nheld >= ring->layout.slots - 1) {
    rc = CHIME_EBUSY;
    goto out;
  }
  for (;;) {
    uint32_t bell;
    uint64_t left;
    if (have_batch(ring, memory_order_acquire)) {
      waiter_adapt(&w);
      rc = take(ring, out);
      goto out;
    }
    if (w.start == 0) /* the first miss: see wake threshold above */
      wake_producer_if_waiting(ring);
    rc = waiter_miss(&w);
    if (rc != 0)
      goto out;
    if (!waiter_spin(&w)) {
      bell = atomic_load_explicit(&ctrl->cons_bell, memory_order_seq_cst);
      atomic_store_explicit(&ctrl->waiting, 1, memory_order_seq_cst);
      if (!have_batch(ring, memory_order_seq_cst) &&
          next_blocked(ring, memory_order_seq_cst) == 0) {
        left = waiter_left(&w);
        if (left == 0) {
          atomic_store_explicit(&ctrl->waiting, 0, memory_order_relaxed);
          rc = CHIME_ETIMEDOUT;
          goto out;
        }
        futex_wait(&ctrl->cons_bell, bell, left, timeout_ms < 0);
        w.slept = 1;
      }
      atomic_store_explicit(&ctrl->waiting, 0, memory_order_relaxed);
    }
    rc = next_blocked(ring, memory_order_acquire);
    if (rc != 0)
      goto out;
  }
out:
  waiter_account(&w, &ctrl->wait_ns);
  return rc;
}

int chime_ring_release(chime_ring_t *ring, uint32_t slot) {
  chime__ring_ctrl_t *ctrl;

  if (ring == NULL || slot >= ring->layout.slots || !ring->held[slot])
    return CHIME_EINVAL;
  ctrl = ring->seg.ctrl;
  ring->held[slot] = 0;
  ring->nheld--;
  /* seq_cst: publishes our reads of the slot and orders before the load of
   * the producer's waiting word. */
  atomic_fetch_add_explicit(&ring->seg.relcount[slot], 1, memory_order_seq_cst);
  atomic_fetch_add_explicit(&ctrl->released, 1, memory_order_relaxed);
  atomic_store_explicit(&ctrl->leases, ring->nheld, memory_order_relaxed);
  uint32_t want =
      atomic_load_explicit(&ring->seg.prod->waiting, memory_order_seq_cst) &
      ~CHIME__RING_WAKE_ON_TAKE;
  if (want != 0 && free_estimate(ring) >= want)
    bell_ring(&ctrl->prod_bell, 1);
  return 0;
}
