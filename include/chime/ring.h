/* chime ring: batches of samples in one shared-memory segment.
 *
 * A ring has one producer (the server's sampler) and one consumer (a learner).
 * The producer fills free slots and publishes them in sequence order; the
 * consumer takes published slots with chime_ring_next() and gives them back
 * with chime_ring_release() in any order. The producer never writes a slot the
 * consumer holds. Up to slots - 1 slots may be held at once.
 *
 * A slot holds, for each leaf of the spec, one contiguous [batch_size, *shape]
 * array (64-byte aligned), then batch_size chime_sample_info_t records.
 *
 * The producer creates the segment (a sealed memfd); the consumer attaches to
 * the fd, possibly in another process, validates the header against the real
 * size of the segment, and maps the data read-only: only its own control words
 * are writable. See docs/ring.md for layout, memory ordering and lease rules.
 *
 * Thread safety: one thread at a time per side (producer calls on one thread,
 * consumer calls on one thread); chime_ring_shutdown() may be called from any
 * thread or process holding the producer side.
 *
 * A ring from chime_ring_create() also serves the consumer calls (next,
 * release, set_disconnected) through the same handle, so one process can hold
 * both sides: producer calls on one thread, consumer calls on another (the
 * client's stream mode does this). On a handle from chime_ring_attach() the
 * producer calls return CHIME_EPERM, and chime_ring_shutdown() and
 * chime_ring_reclaim() do nothing: its header is mapped read-only.
 */
#ifndef CHIME_RING_H
#define CHIME_RING_H

#include <stddef.h>
#include <stdint.h>

#include "chime/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHIME_MAX_LEAVES 64
#define CHIME_MAX_DIMS 8
#define CHIME_MAX_NAME 64 /* bytes including the terminating NUL */

/* Leaf element types. Values are part of the wire and ring format. */
#define CHIME_DTYPE_MAP(X)                                                     \
  X(U8, 1, "u8", 1)                                                            \
  X(I8, 2, "i8", 1)                                                            \
  X(U16, 3, "u16", 2)                                                          \
  X(I16, 4, "i16", 2)                                                          \
  X(U32, 5, "u32", 4)                                                          \
  X(I32, 6, "i32", 4)                                                          \
  X(U64, 7, "u64", 8)                                                          \
  X(I64, 8, "i64", 8)                                                          \
  X(F16, 9, "f16", 2)                                                          \
  X(BF16, 10, "bf16", 2)                                                       \
  X(F32, 11, "f32", 4)                                                         \
  X(F64, 12, "f64", 8)                                                         \
  X(BOOL, 13, "bool", 1)

typedef enum {
  CHIME_DTYPE_INVALID = 0,
#define CHIME__DTYPE_ENUM(name, value, str, size) CHIME_DTYPE_##name = value,
  CHIME_DTYPE_MAP(CHIME__DTYPE_ENUM)
#undef CHIME__DTYPE_ENUM
} chime_dtype_t;

/* One leaf: a named array per sample. A scalar has ndim 0. */
typedef struct {
  char name[CHIME_MAX_NAME];
  chime_dtype_t dtype;
  uint32_t ndim;
  uint64_t shape[CHIME_MAX_DIMS];
} chime_leaf_t;

/* An ordered list of leaves. A sample's bytes are its leaves' bytes in order.
 */
typedef struct {
  uint32_t nleaves;
  chime_leaf_t leaves[CHIME_MAX_LEAVES];
} chime_spec_t;

/* Parses "obs:f32[64], action:i32[], reward:f32[]" (also "f32[84,84]", and
 * "reward:f32" for a scalar). On error returns CHIME_EINVAL and, if err is not
 * NULL, writes a sentence naming the offending leaf into err. */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_parse(chime_spec_t *spec,
                                                  const char *text, char *err,
                                                  size_t errlen);
/* Writes the canonical text form of spec into buf ("obs:f32[64],..."). */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_format(const chime_spec_t *spec,
                                                   char *buf, size_t len);
/* Checks names (non-empty, unique, [A-Za-z0-9_./-]), dtypes, dims (each > 0)
 * and that every size fits in 64 bits. err as for chime_spec_parse. */
CHIME_EXTERN CHIME_NODISCARD int chime_spec_validate(const chime_spec_t *spec,
                                                     char *err, size_t errlen);
/* Bytes of one sample of leaf i / of the whole spec (0 if invalid). */
CHIME_EXTERN uint64_t chime_leaf_bytes(const chime_leaf_t *leaf);
CHIME_EXTERN uint64_t chime_spec_sample_bytes(const chime_spec_t *spec);
CHIME_EXTERN const char *chime_dtype_name(chime_dtype_t dtype);
CHIME_EXTERN size_t chime_dtype_size(chime_dtype_t dtype); /* 0 if unknown */
CHIME_EXTERN chime_dtype_t chime_dtype_from_name(const char *name);

/* Per-sample information stored after the leaf arrays of a slot (48 bytes,
 * little-endian, no padding; ring version 2). probability is exact under
 * the table's sampler at the moment of the draw, priority and table_size
 * are the item's priority and the number of items in the table then. */
typedef struct {
  uint64_t key;
  double probability;
  uint32_t times_sampled;
  uint32_t reserved;
  uint64_t insert_time_ns; /* CLOCK_REALTIME at insert */
  double priority;
  uint64_t table_size;
} chime_sample_info_t;

/* Where things are inside one slot. Computed by chime_ring_layout(). */
typedef struct {
  uint32_t slots;
  uint32_t batch_size;
  uint64_t slot_bytes;                    /* page multiple */
  uint64_t leaf_offset[CHIME_MAX_LEAVES]; /* from slot start, 64-aligned */
  uint64_t leaf_bytes[CHIME_MAX_LEAVES];  /* batch_size * sample bytes */
  uint64_t info_offset;                   /* chime_sample_info_t[batch_size] */
  uint64_t data_bytes;                    /* slots * slot_bytes */
} chime_ring_layout_t;

/* Limits that make "absurd" concrete. */
#define CHIME_RING_MAX_SLOTS 4096u
#define CHIME_RING_MAX_BATCH (1u << 24)
#define CHIME_RING_MAX_BYTES (UINT64_C(1) << 40)

/* Computes the layout; CHIME_EINVAL for an empty or invalid spec, zero or
 * absurd slots/batch_size, CHIME_EOVERFLOW when a size overflows or exceeds
 * CHIME_RING_MAX_BYTES. err as for chime_spec_parse. */
CHIME_EXTERN CHIME_NODISCARD int chime_ring_layout(chime_ring_layout_t *out,
                                                   const chime_spec_t *spec,
                                                   uint32_t batch_size,
                                                   uint32_t slots, char *err,
                                                   size_t errlen);

typedef struct chime_ring_s chime_ring_t;

/* A consumer's view of one leased slot. Pointers stay valid until release. */
typedef struct {
  uint64_t seq;   /* publish sequence number, 0, 1, 2, ... */
  uint32_t slot;  /* slot index, pass to chime_ring_release() */
  uint32_t count; /* samples in this batch (== batch_size) */
  const void *leaf[CHIME_MAX_LEAVES];
  const chime_sample_info_t *info;
} chime_ring_view_t;

/* A producer's view of one slot it is filling. */
typedef struct {
  uint32_t slot;
  void *leaf[CHIME_MAX_LEAVES];
  chime_sample_info_t *info;
  void *base; /* slot start, slot_bytes long */
} chime_ring_wslot_t;

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

/* --- producer side --- */

/* The whole size of a ring with this layout (header, control and data, as
 * mapped): what a producer's budget must allow before chime_ring_create().
 * CHIME_EOVERFLOW when it does not fit 64 bits. */
CHIME_EXTERN CHIME_NODISCARD int
chime_ring_bytes(const chime_ring_layout_t *layout, uint64_t *out);
/* Creates a memfd segment sized for spec/batch_size/slots, seals it against
 * shrink and grow, maps it and writes the header with a random nonce. On
 * failure chime_ring_last_error() says why. */
CHIME_EXTERN CHIME_NODISCARD int chime_ring_create(chime_ring_t **out,
                                                   const chime_spec_t *spec,
                                                   uint32_t batch_size,
                                                   uint32_t slots);
/* Takes a free slot for writing. timeout_ms < 0 waits forever, 0 polls.
 * CHIME_ETIMEDOUT, CHIME_ESHUTDOWN. */
CHIME_EXTERN CHIME_NODISCARD int
chime_ring_acquire(chime_ring_t *ring, chime_ring_wslot_t *out, int timeout_ms);
/* acquire() for a producer that waits on many rings from one thread: takes
 * a free slot (0), or returns CHIME_EBUSY having told the consumer to ring
 * *bell, a futex word shared with it, on its next release: wait on it
 * (FUTEX_WAIT or futex_waitv, not private, while it still reads *bell_val)
 * and call again. With bell and bell_val NULL it only tries: no release
 * rings (and pays for) a bell (a producer that hears of releases another
 * way). CHIME_ESHUTDOWN once shut down. */
CHIME_EXTERN CHIME_NODISCARD int chime_ring_try_acquire(chime_ring_t *ring,
                                                        chime_ring_wslot_t *out,
                                                        uint32_t **bell,
                                                        uint32_t *bell_val);
/* Publishes the slot taken by chime_ring_acquire(); returns its seq in *seq. */
CHIME_EXTERN CHIME_NODISCARD int
chime_ring_publish(chime_ring_t *ring, uint32_t slot, uint64_t *seq);
/* Gives back a slot taken by acquire without publishing it. */
CHIME_EXTERN void chime_ring_abandon(chime_ring_t *ring, uint32_t slot);
/* Sets the sticky shutdown flag and wakes every waiter on both sides. */
CHIME_EXTERN void chime_ring_shutdown(chime_ring_t *ring);
/* Producer side only: takes back every slot the consumer holds or has not yet
 * taken (the consumer died). Bumps the generation. Returns slots reclaimed. */
CHIME_EXTERN uint32_t chime_ring_reclaim(chime_ring_t *ring);
/* Producer side only: the slots published and not yet released (not taken,
 * or held by the consumer), oldest publish first, e.g. to give their
 * contents back when the consumer is gone. Writes at most max indices into
 * slots; returns how many there are. */
CHIME_EXTERN uint32_t chime_ring_unreleased(const chime_ring_t *ring,
                                            uint32_t *slots, uint32_t max);

/* Why the most recent chime_ring_create() or chime_ring_attach() on the
 * calling thread failed ("ring header: bad magic 0", "memfd_create: Too many
 * open files"), or "" when it succeeded: each call clears it first. The text
 * is the calling thread's own, valid until its next create or attach. */
CHIME_EXTERN const char *chime_ring_last_error(void);

/* --- consumer side --- */

/* Attaches to a ring segment created by chime_ring_create() in any process.
 * Validates every header field against fstat(fd) and the expected nonce
 * (NULL: don't check). Dups fd; the caller keeps its own. CHIME_ECORRUPT for a
 * bad header, CHIME_EPERM for a nonce mismatch; chime_ring_last_error() names
 * the field or the call that failed. */
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

/* --- both sides --- */

CHIME_EXTERN void chime_ring_destroy(chime_ring_t *ring); /* NULL-safe */
CHIME_EXTERN int chime_ring_fd(const chime_ring_t *ring);
CHIME_EXTERN const chime_ring_layout_t *
chime_ring_get_layout(const chime_ring_t *ring);
CHIME_EXTERN const chime_spec_t *chime_ring_spec(const chime_ring_t *ring);
CHIME_EXTERN void chime_ring_nonce(const chime_ring_t *ring, uint8_t out[16]);
CHIME_EXTERN void chime_ring_get_stats(const chime_ring_t *ring,
                                       chime_ring_stats_t *out);
/* The whole mapping (header, control, data) and the data region alone, e.g.
 * for page-locking. */
CHIME_EXTERN void *chime_ring_map_base(const chime_ring_t *ring, size_t *len);
CHIME_EXTERN void *chime_ring_slot_base(const chime_ring_t *ring,
                                        uint32_t slot);

/* --- page-locking (CUDA runtime, loaded with dlopen on first use) --- */

/* Page-locks this side's mapping of every slot with cudaHostRegister
 * (portable; read-only as well for a consumer's read-only mapping). All or
 * nothing: on failure nothing stays registered and err names every place the
 * runtime was looked for and the CUDA error by name and number. Unregistered by
 * chime_ring_destroy() before unmapping. See docs/pinning.md. An err of
 * CHIME_PIN_ERRLEN bytes holds the whole message. */
#define CHIME_PIN_ERRLEN 16384
CHIME_EXTERN CHIME_NODISCARD int chime_ring_pin(chime_ring_t *ring, char *err,
                                                size_t errlen);
/* Bytes this side has page-locked (0 when not pinned). */
CHIME_EXTERN uint64_t chime_ring_pinned_bytes(const chime_ring_t *ring);

#ifdef __cplusplus
}
#endif
#endif
