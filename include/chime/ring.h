/* chime ring: batches of samples in one shared-memory segment, for programs
 * that use rings directly (a learner that is handed a ring's fd, a
 * benchmark, a tool). A learner going through the client API needs only
 * chime/chime.h; the types both share are in chime/spec.h.
 *
 * A ring has one producer and one consumer. The producer (chime's own:
 * the server's sampler, or the client library's receive thread in stream
 * mode) fills free slots and publishes them in sequence order; the
 * consumer takes published slots with chime_ring_next() and gives them back
 * with chime_ring_release() in any order. The producer never writes a slot
 * the consumer holds. Up to slots - 1 slots may be held at once.
 *
 * A slot holds, for each leaf of the spec, one contiguous [batch_size, *shape]
 * array (64-byte aligned), then for each ragged leaf its batch_size + 1
 * offsets, then batch_size chime_sample_info_t records. A ragged leaf's
 * array holds its samples' rows packed back to back (room for batch_size
 * times its bound); sample j's rows are offsets[j] .. offsets[j + 1]
 * (Arrow's list layout: int64, offsets[0] == 0, counted in rows).
 *
 * The producer creates the segment (a sealed memfd); the consumer attaches to
 * the fd, possibly in another process, validates the header against the real
 * size of the segment, and maps the data read-only: only its own control words
 * are writable. See docs/ring.md for layout, memory ordering and lease rules.
 * The producer calls (create, acquire, publish, shutdown, reclaim) are not
 * public: only chime itself produces into a ring (src/ring/producer.h).
 *
 * Thread safety: the consumer calls on one thread at a time;
 * chime_ring_set_disconnected() from any thread.
 */
#ifndef CHIME_RING_H
#define CHIME_RING_H

#include <stddef.h>
#include <stdint.h>

#include "chime/errors.h"
#include "chime/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where things are inside one slot. Computed by
 * chime_ring_layout_compute(); a ring's is chime_ring_layout(). */
typedef struct {
  uint32_t slots;
  uint32_t batch_size;
  uint64_t slot_bytes;                    /* page multiple */
  uint64_t leaf_offset[CHIME_MAX_LEAVES]; /* from slot start, 64-aligned */
  uint64_t leaf_bytes[CHIME_MAX_LEAVES];  /* batch_size * sample bytes */
  uint64_t info_offset;                   /* chime_sample_info_t[batch_size] */
  uint64_t data_bytes;                    /* slots * slot_bytes */
  /* A ragged leaf's int64_t[batch_size + 1] offsets, from slot start,
   * 64-aligned; 0 for a fixed leaf. */
  uint64_t offsets_offset[CHIME_MAX_LEAVES];
} chime_ring_layout_t;

/* The largest data region of a ring ("absurd" made concrete; the limits on
 * slots and batch size are in chime/spec.h). */
#define CHIME_RING_MAX_BYTES (UINT64_C(1) << 40)

/* Computes the layout of a ring of `slots` slots of batch_size samples of
 * spec; CHIME_EINVAL for an empty or invalid spec, zero or absurd
 * slots/batch_size, CHIME_EOVERFLOW when a size overflows or exceeds
 * CHIME_RING_MAX_BYTES (chime_last_error() says which). */
CHIME_EXTERN CHIME_NODISCARD int
chime_ring_layout_compute(chime_ring_layout_t *out, const chime_spec_t *spec,
                          uint32_t batch_size, uint32_t slots);

typedef struct chime_ring_s chime_ring_t;

/* A consumer's view of one leased slot. Pointers stay valid until release. */
typedef struct {
  uint64_t seq;   /* publish sequence number, 0, 1, 2, ... */
  uint32_t slot;  /* slot index, pass to chime_ring_release() */
  uint32_t count; /* samples in this batch (== batch_size) */
  const void *leaf[CHIME_MAX_LEAVES];
  /* A ragged leaf's count + 1 offsets (in rows of leaf[i]); NULL for a
   * fixed leaf. Written by the producer: a reader checks them before it
   * indexes with them (offsets[0] == 0, never decreasing, the last within
   * count times the bound). */
  const int64_t *offsets[CHIME_MAX_LEAVES];
  const chime_sample_info_t *info;
} chime_ring_view_t;

typedef struct {
  uint64_t published;
  uint64_t released;
  uint64_t producer_wait_ns;
  uint64_t consumer_wait_ns;
  uint32_t max_leases; /* most slots the consumer held at once */
  uint32_t leases;     /* slots held now */
  uint32_t shutdown;   /* 1 once shut down */
  uint32_t generation;
} chime_ring_stats_t;

/* --- consumer side --- */

/* Attaches to a ring segment chime created in any process (chimed hands
 * them out by fd, docs/protocol.md). Validates every header field against
 * fstat(fd) and the expected nonce (NULL: don't check). Dups fd; the caller
 * keeps its own. CHIME_ECORRUPT for a bad header or a ring of another
 * format version (another chime release: the text names both versions),
 * CHIME_EPERM for a nonce mismatch; chime_last_error() names the field
 * or the call that failed ("ring header: bad magic 0", "mmap: ..."). */
CHIME_EXTERN CHIME_NODISCARD int chime_ring_attach(chime_ring_t **out, int fd,
                                                   const uint8_t nonce[16]);
/* Takes the next published batch, in publish order. timeout_ms < 0 waits
 * forever, 0 polls. CHIME_EBUSY when slots - 1 are already held,
 * CHIME_ETIMEDOUT, CHIME_ESHUTDOWN once the flag is set (shutdown wins over
 * batches not yet taken; batches already held stay readable), and
 * CHIME_EDISCONNECTED after chime_ring_set_disconnected(). */
CHIME_EXTERN CHIME_NODISCARD int
chime_ring_next(chime_ring_t *ring, chime_ring_view_t *out, int timeout_ms);
/* Gives back a slot taken by chime_ring_next(), in any order. CHIME_EINVAL for
 * a slot that is not held. */
CHIME_EXTERN CHIME_NODISCARD int chime_ring_release(chime_ring_t *ring,
                                                    uint32_t slot);
/* Wakes a consumer blocked in chime_ring_next() in this process so it returns
 * CHIME_EDISCONNECTED once chime_ring_set_disconnected() was called. Used by
 * the client when its control channel dies. */
CHIME_EXTERN void chime_ring_set_disconnected(chime_ring_t *ring);

/* --- any handle: attached, or the library's own producer's --- */

CHIME_EXTERN void chime_ring_destroy(chime_ring_t *ring); /* NULL-safe */
CHIME_EXTERN int chime_ring_fd(const chime_ring_t *ring);
CHIME_EXTERN const chime_ring_layout_t *
chime_ring_layout(const chime_ring_t *ring);
CHIME_EXTERN const chime_spec_t *chime_ring_spec(const chime_ring_t *ring);
CHIME_EXTERN void chime_ring_nonce(const chime_ring_t *ring, uint8_t out[16]);
CHIME_EXTERN void chime_ring_stats(const chime_ring_t *ring,
                                   chime_ring_stats_t *out);
/* The whole mapping (header, control, data) and the data region alone, e.g.
 * for page-locking. */
CHIME_EXTERN void *chime_ring_map_base(const chime_ring_t *ring, size_t *len);
CHIME_EXTERN void *chime_ring_slot_base(const chime_ring_t *ring,
                                        uint32_t slot);

/* --- page-locking (CUDA runtime, loaded with dlopen on first use) --- */

/* Page-locks this side's mapping of every slot with cudaHostRegister
 * (portable; read-only as well for a consumer's read-only mapping). All or
 * nothing: on failure nothing stays registered and chime_last_error() names
 * every place the runtime was looked for and the CUDA error by name and
 * number. Unregistered by chime_ring_destroy() before unmapping. See
 * docs/pinning.md. */
CHIME_EXTERN CHIME_NODISCARD int chime_ring_pin(chime_ring_t *ring);
/* Bytes this side has page-locked (0 when not pinned). */
CHIME_EXTERN uint64_t chime_ring_pinned_bytes(const chime_ring_t *ring);

#ifdef __cplusplus
}
#endif
#endif
