/* Internal to the client: the device end of a stream (opts.device >= 0).
 *
 * The learner's batches are copied from the ring it reads (the server's
 * mapping in shm mode, the local ring in stream mode) to buffers on a CUDA
 * device, on a non-blocking CUDA stream of the device end's own, ahead of
 * the learner: next() hands out a batch whose leaves point at device memory
 * while the next copies run. It knows rings and the CUDA runtime only (no
 * gRPC), so the GPU check and its unit test build it alone; where batches
 * come from and where their slots go back is the source it is handed.
 *
 * Lifetimes (docs/pinning.md, Device streams):
 *   - the ring is page-locked once, when the device end opens (one
 *     cudaHostRegister of all its slots, portable | mapped, read-only where
 *     the device says it can), unless pin_host_memory pinned it already;
 *   - a ring slot is held from the copy's start until its event is seen
 *     complete (cudaEventQuery), never released at next; at most
 *     `prefetch` slots are held for copies;
 *   - a device buffer is reused only once the learner released its batch
 *     and, for every CUDA stream the learner ordered after the copy
 *     (chime__device_wait), an event recorded on that stream at the release
 *     has passed: the next copy into it waits for those events on the
 *     device (cudaStreamWaitEvent), so no host thread waits;
 *   - a copy that fails to start or complete (a lost device) is reported
 *     by next as CHIME_ECUDA with the CUDA error's name; its slot goes back.
 *
 * Threads: next, release and close from one thread at a time (the
 * learner's: they are the ring's consumer calls); wait from any thread,
 * also while next waits for a batch (Python's DLPack export asks from the
 * thread that takes the tensor). */
#ifndef CHIME_CLIENT_DEVICE_H
#define CHIME_CLIENT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"
#include "chime/ring.h"

typedef struct chime__device_s chime__device_t;

/* Where the device end takes host batches and gives their slots back: the
 * stream's ring calls (stream.c), or a bare ring's (tests). */
typedef struct {
  /* As chime_ring_next(); on failure the calling thread's detail is set
   * (chime_last_error). */
  int (*next)(void *arg, chime_ring_view_t *v, int timeout_ms);
  /* As chime_ring_release(). MUST NOT block. */
  int (*release)(void *arg, uint32_t slot);
  void *arg;
} chime__device_source_t;

typedef struct {
  int device;        /* CUDA ordinal */
  uint32_t prefetch; /* slots held for copies at most, >= 1 */
  uint32_t max_lent; /* batches the learner may hold at once, >= 1 */
} chime__device_opts_t;

typedef struct {
  uint64_t copies;         /* copies started */
  uint64_t registered;     /* bytes this device end page-locked */
  uint64_t device_bytes;   /* its buffers' device memory */
  uint32_t buffers;        /* device buffers allocated */
  uint32_t slots_held;     /* ring slots held for copies now */
  uint32_t max_slots_held; /* most held at once */
} chime__device_stats_t;

/* Loads the CUDA runtime (chime__cuda_require), checks it has the calls a
 * device stream needs, creates the CUDA stream and page-locks the ring's
 * slots on `device`. ring and spec are the consumer's; ring must outlive
 * the device end. CHIME_ECUDA (a missing runtime, call or device, a refused
 * registration) or CHIME_ENOMEM, with err saying which; nothing is left. */
int chime__device_open(chime__device_t **out, chime_ring_t *ring,
                       const chime_spec_t *spec,
                       const chime__device_opts_t *opts,
                       const chime__device_source_t *src, char *err,
                       size_t errlen);
/* The next batch, on the device: leaf data are device pointers into a
 * buffer of the pool (the copy into it may still run: order work after it
 * with chime__device_wait), info a host copy of the records. Starts the
 * following copies before it returns. timeout_ms as for chime_stream_next.
 * CHIME_EBUSY when max_lent are held, CHIME_ECUDA for a failed copy (the
 * batch is dropped), or the source's error. Sets the thread's detail. */
int chime__device_next(chime__device_t *d, chime_batch_t *out, int timeout_ms);
/* Gives a batch back. With streams named by wait, records the release point
 * on each. CHIME_EINVAL for a batch not lent now. */
int chime__device_release(chime__device_t *d, const chime_batch_t *b);
/* Makes cuda_stream (a cudaStream_t; 0 is the legacy default stream) wait
 * for the batch's copy (cudaStreamWaitEvent), and remembers it, so that the
 * release point is recorded on it. At most CHIME__DEVICE_MAX_WAITERS streams
 * per batch (CHIME_ERESOURCE beyond). */
#define CHIME__DEVICE_MAX_WAITERS 4
int chime__device_wait(chime__device_t *d, const chime_batch_t *b,
                       void *cuda_stream);
void chime__device_get_stats(chime__device_t *d, chime__device_stats_t *out);
/* Waits for its own copies (its CUDA stream), gives back every slot it
 * holds, waits for the release points recorded on the learner's streams,
 * frees the buffers, unregisters the ring and frees d. Batches still lent
 * become invalid. NULL-safe. */
void chime__device_close(chime__device_t *d);
/* In a child of fork(): the CUDA objects are the parent's; frees only this
 * process's memory. NULL-safe. */
void chime__device_forget(chime__device_t *d);

#endif
