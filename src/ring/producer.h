/* Internal: the producer's side of a ring, for chime's own producers only
 * (the server's sampler and stream mode's sender, the client's local ring
 * in stream mode, chime-bench and the tests). Not public: no program
 * outside chime produces into a ring a learner reads (a learner gets its
 * rings from chimed), so chime/ring.h carries only the consumer's calls.
 *
 * A ring from chime__ring_create() also serves the consumer calls of
 * chime/ring.h (next, release, set_disconnected) through the same handle,
 * so one process can hold both sides: producer calls on one thread,
 * consumer calls on another (the client's stream mode does this). On a
 * handle from chime_ring_attach() the producer calls return CHIME_EPERM,
 * and chime__ring_shutdown() and chime__ring_reclaim() do nothing: its
 * header is mapped read-only.
 *
 * Thread safety: producer calls on one thread at a time;
 * chime__ring_shutdown() may be called from any thread or process holding
 * the producer side. */
#ifndef CHIME_RING_PRODUCER_H
#define CHIME_RING_PRODUCER_H

#include <stdint.h>

#include "chime/ring.h"

/* A producer's view of one slot it is filling. */
typedef struct {
  uint32_t slot;
  void *leaf[CHIME_MAX_LEAVES];
  int64_t *offsets[CHIME_MAX_LEAVES]; /* a ragged leaf's; NULL for others */
  chime_sample_info_t *info;
  void *base; /* slot start, slot_bytes long */
} chime__ring_wslot_t;

/* The whole size of a ring with this layout (header, control and data, as
 * mapped): what a producer's budget must allow before chime__ring_create().
 * CHIME_EOVERFLOW when it does not fit 64 bits. */
CHIME_NODISCARD int chime__ring_bytes(const chime_ring_layout_t *layout,
                                      uint64_t *out);
/* Creates a memfd segment sized for spec/batch_size/slots, seals it against
 * shrink and grow, maps it and writes the header with a random nonce. On
 * failure chime_last_error() says why. */
CHIME_NODISCARD int chime__ring_create(chime_ring_t **out,
                                       const chime_spec_t *spec,
                                       uint32_t batch_size, uint32_t slots);
/* Takes a free slot for writing. timeout_ms < 0 waits forever, 0 polls.
 * CHIME_ETIMEDOUT, CHIME_ESHUTDOWN. */
CHIME_NODISCARD int chime__ring_acquire(chime_ring_t *ring,
                                        chime__ring_wslot_t *out,
                                        int timeout_ms);
/* acquire() for a producer that waits on many rings from one thread: takes
 * a free slot (0), or returns CHIME_EBUSY having told the consumer to ring
 * *bell, a futex word shared with it, on its next release: wait on it
 * (FUTEX_WAIT or futex_waitv, not private, while it still reads *bell_val)
 * and call again. With bell and bell_val NULL it only tries: no release
 * rings (and pays for) a bell (a producer that hears of releases another
 * way). CHIME_ESHUTDOWN once shut down. */
CHIME_NODISCARD int chime__ring_try_acquire(chime_ring_t *ring,
                                            chime__ring_wslot_t *out,
                                            uint32_t **bell,
                                            uint32_t *bell_val);
/* How many free slots wake a producer waiting in acquire() or on the bell
 * of try_acquire() (default 1: each release). More lets the consumer's
 * releases into a full ring go without a wake-up until n are free; a
 * consumer that finds no batch ready wakes it anyway. Clamped to the
 * slots. CHIME_EINVAL for 0; CHIME_EPERM on a consumer's handle. */
CHIME_NODISCARD int chime__ring_set_wake_at(chime_ring_t *ring, uint32_t n);
/* The most batches published and not yet taken by the consumer's next()
 * (0, or slots and more: no limit, the default): acquire() and
 * try_acquire() find no slot while n wait, and the consumer's next take
 * rings the bell. Batches the consumer holds do not count. Fewer ready
 * batches keep what the consumer reads recent enough to be in cache.
 * CHIME_EPERM on a consumer's handle. */
CHIME_NODISCARD int chime__ring_set_ready_max(chime_ring_t *ring, uint32_t n);
/* Publishes the slot taken by chime__ring_acquire(); returns its seq in
 * *seq. */
CHIME_NODISCARD int chime__ring_publish(chime_ring_t *ring, uint32_t slot,
                                        uint64_t *seq);
/* Gives back a slot taken by acquire without publishing it. */
void chime__ring_abandon(chime_ring_t *ring, uint32_t slot);
/* Sets the sticky shutdown flag and wakes every waiter on both sides. */
void chime__ring_shutdown(chime_ring_t *ring);
/* Takes back every slot the consumer holds or has not yet taken (the
 * consumer died). Bumps the generation. Returns slots reclaimed. */
uint32_t chime__ring_reclaim(chime_ring_t *ring);
/* The slots published and not yet released (not taken, or held by the
 * consumer), oldest publish first, e.g. to give their contents back when
 * the consumer is gone. Writes at most max indices into slots; returns how
 * many there are. A release the producer once saw (acquire, try_acquire,
 * chime__ring_released, reclaim) stays seen: a consumer that winds its
 * release_count back cannot make a batch unreleased again. One it undoes
 * before the producer looked was never seen, so a lying consumer can at
 * worst have a batch it finished counted as unreleased once (bounded by
 * what was published), never anything that was not published. */
uint32_t chime__ring_unreleased(chime_ring_t *ring, uint32_t *slots,
                                uint32_t max);
/* 1 when the slot's latest publish was released (recorded as above), or it
 * was never published; 0 while published and unreleased, or acquired. */
int chime__ring_released(chime_ring_t *ring, uint32_t slot);
/* Has the consumer's next release (or next() that finds nothing) ring
 * *bell, as try_acquire does when no slot is free, for a producer that
 * waits for something else but must hear of releases too: read *bell_val,
 * arm, then look again (chime__ring_released) before sleeping on it. The
 * next acquire or try_acquire that takes a slot disarms it. */
CHIME_NODISCARD int chime__ring_arm_bell(chime_ring_t *ring, uint32_t **bell,
                                         uint32_t *bell_val);

#endif
