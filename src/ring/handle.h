/* Internal: the ring handle both sides hold (struct chime_ring_s), for
 * ring.c (the per-batch path, whose top comment has the protocol) and
 * handle.c (the handle's life): the spin budgets, the futex bell, a
 * slot's address. */
#ifndef CHIME_RING_HANDLE_H
#define CHIME_RING_HANDLE_H

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring/ring_internal.h"

/* Polls before sleeping, adapted per side to how long waits turn out to be.
 * Waking a sleeping thread costs both sides: here (2 vCPUs) about 25-30 us
 * until the sleeper runs and 10-15 us of the waker's time. When batches come
 * every few tens of microseconds, spinning through the gap keeps both sides
 * off the futex; when waits are long, a short spin wastes little. Bounded:
 * no wait spins longer than CHIME_RING_SPIN_MAX_NS, and past the first
 * CHIME_RING_SPIN_MIN_NS the spin yields the CPU. See docs/ring.md. */
#ifndef CHIME_RING_SPIN_MAX_NS /* define both to measure other budgets */
#define CHIME_RING_SPIN_MIN_NS 4000u
#define CHIME_RING_SPIN_MAX_NS 100000u
#endif

struct chime_ring_s {
  chime__segment_t seg;
  int consumer; /* from chime_ring_attach() */
  chime_spec_t spec;
  chime_ring_layout_t layout;
  uint8_t nonce[16];

  /* Producer's private, authoritative state. */
  uint32_t *pub_per_slot; /* times each slot was published */
  uint64_t *last_seq;     /* seq of each slot's latest publish */
  /* 1 once we saw the slot's latest publish released (its release_count
   * equal to pub_per_slot): the consumer can take that back no more than
   * it can take back a slot we reused. A release it undoes before we
   * looked was never seen. */
  uint8_t *seen_free;
  uint8_t *acquired; /* taken by acquire, not yet published */
  uint64_t pub;
  uint32_t scan;

  /* Consumer's private state. */
  uint8_t *held;
  uint32_t nheld;
  _Atomic int disconnected;

  /* How long each side spins before it sleeps (adaptive, private). */
  uint32_t spin_ns[2];
  /* What the producer stores in `waiting`: free slots that wake it. */
  uint32_t wake_at;
  /* The most batches published and not yet taken (0: no limit). */
  uint32_t ready_max;

  void (*unpin)(void *arg);
  void *unpin_arg;
};

enum { SIDE_PRODUCER = 0, SIDE_CONSUMER = 1 };

static inline void futex_wake(_Atomic uint32_t *word, int n) {
  int saved = errno;
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, n, NULL, NULL, 0);
  errno = saved;
}

static inline void bell_ring(_Atomic uint32_t *bell, int n) {
  atomic_fetch_add_explicit(bell, 1, memory_order_seq_cst);
  futex_wake(bell, n);
}

static inline uint8_t *slot_ptr(const chime_ring_t *ring, uint32_t slot) {
  return ring->seg.data + (uint64_t)slot * ring->layout.slot_bytes;
}

#endif
