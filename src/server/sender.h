/* Stream mode's sending side: the server takes published slots on its own
 * consumer side of a stream's ring and sends each batch as chunks within
 * the learner's credits, without copying: the owner says where a batch's
 * bytes are (spans of the table's rows, of the slot, of zeros) and the
 * chunks' slices point there. A slot goes back to the ring when gRPC drops
 * the last slice pointing into its batch and,
 * for a held batch (a fifo table's), when a Credit names it as released:
 * until then the batch is the learner's, and its owner can give its items
 * back if the stream ends first. Sending happens on whichever thread makes
 * a batch sendable (a publish, or a credit arriving): no thread waits. */
#ifndef CHIME_SERVER_SENDER_H
#define CHIME_SERVER_SENDER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"
#include "chime/ring.h"
#include "wire/pbread.h"

typedef struct chime__call_s chime__call_t;
typedef struct chime__sent_s chime__sent_t;
/* The owner: stream mode's stream (mode_stream.c; test_sender: its own). */
typedef struct chime__stream_s chime__stream_t;
struct grpc_byte_buffer;

/* What the sender needs of its owner (the stream, whose ring it is). */
typedef struct {
  /* Kept alive while gRPC holds slot memory. */
  void (*ref)(chime__stream_t *owner);
  void (*unref)(chime__stream_t *owner);
  /* A slot went back to the ring: the producer may fill it. */
  void (*slot_freed)(chime__stream_t *owner);
  /* Where bytes [off, off + len) of the batch in slot are: at most max
   * spans into out, returns how many (0: max too small). They stay put
   * until the slot goes back to the ring. */
  size_t (*spans)(chime__stream_t *owner, uint32_t slot, uint64_t off,
                  uint64_t len, chime__span_t *out, size_t max);
  /* The bytes the batch in slot sends, off and len above counting within
   * them (NULL: send_bytes, the slot's prefix, for every batch; 0: the
   * batch cannot be sent and its slot goes back unsent). */
  uint64_t (*batch_bytes)(chime__stream_t *owner, uint32_t slot);
  /* The call batches go to (chime__sender_start's): the owner's call
   * machinery (stream mode: call.h's functions; test_sender: its own), so
   * the sender is built without it. Only a started sender uses them.
   * A reference, dropped by whoever chime__sender_stop returns it to. */
  void (*call_ref)(chime__call_t *c);
  /* Queues a message (takes bb): 0, or nonzero once the call is
   * finishing (the learner gets no more). */
  int (*call_send)(chime__call_t *c, struct grpc_byte_buffer *bb);
  /* Whether a send is in flight. */
  int (*call_sending)(chime__call_t *c);
  /* Ends the call at once as a lost connection would (its learner then
   * resumes); NULL: never needed (one lane only). */
  void (*call_lost)(chime__call_t *c, const char *why);
} chime__sender_owner_t;

/* The most connections (lanes) one stream reads over (Open.connections):
 * the client's limit. */
#define CHIME__LANES_MAX CHIME_MAX_CONNECTIONS

typedef struct {
  chime_ring_t *ring;
  uint64_t send_bytes; /* bytes of a slot each batch carries */
  uint32_t max_credits;
  int hold; /* batches stay taken until a Credit names them */
  chime__stream_t *owner;
  const chime__sender_owner_t *ops;

  pthread_mutex_t mu;      /* the ring's consumer side, credits, held */
  pthread_mutex_t send_mu; /* batch order on the call, call */
  uint32_t credits;
  int unheld;                           /* stopped holding: unhold_all ran */
  chime__sent_t *held_head, *held_tail; /* oldest first (mu) */
  chime__call_t *call;                  /* where batches go (send_mu) */
  /* Lanes (docs/protocol.md, "Lanes"): lane 0 is call; the calls that
   * joined as lanes 1..nlanes-1 (send_mu; NULL until joined), and each
   * lane's bytes handed to gRPC and not yet let go of. A batch goes whole
   * to the lane with the fewest. */
  uint32_t nlanes;
  chime__call_t *lane[CHIME__LANES_MAX];
  atomic_uint_fast64_t queued[CHIME__LANES_MAX];
  size_t max_spans;        /* of one chunk */
  chime__span_t *span_buf; /* max_spans (send_mu) */
  void *slice_buf;         /* max_spans + 1 slices (send_mu) */
  atomic_int stopped;
  atomic_int awaiting; /* a send started; chime__sender_sent() to come */
  atomic_uint_fast64_t batches, bytes; /* sent */
  /* Heartbeats (sender_beat.c, send_mu): batches as last looked at, and
   * when something last went (a batch or a heartbeat). */
  uint64_t beat_batches, beat_ns;
} chime__sender_t;

/* max_spans: the most spans one chunk's bytes can take (ops->spans).
 * CHIME_ENOMEM, or 0. */
int chime__sender_init(chime__sender_t *x, chime_ring_t *ring,
                       uint64_t send_bytes, uint32_t credits,
                       uint32_t max_credits, int hold, size_t max_spans,
                       chime__stream_t *owner,
                       const chime__sender_owner_t *ops);
void chime__sender_fini(chime__sender_t *x);
/* Batches go to call from now on (a reference is taken); ignored once
 * stopped. */
void chime__sender_start(chime__sender_t *x, chime__call_t *call);
/* Sends no more; returns the call to drop a reference of (or NULL). */
chime__call_t *chime__sender_stop(chime__sender_t *x);
/* Lanes (lanes.c). The stream reads over nlanes calls (1: call alone). */
void chime__sender_set_lanes(chime__sender_t *x, uint32_t nlanes);
/* Batches may go to call as lane (1..nlanes-1; a reference is taken):
 * 0, or CHIME_EINVAL (out of range), CHIME_EEXIST (taken), CHIME_ECLOSED
 * (stopped). */
int chime__sender_join(chime__sender_t *x, uint32_t lane, chime__call_t *call);
/* After stop: the joined lanes' calls (each to drop a reference of), at
 * most CHIME__LANES_MAX into out; returns how many. */
uint32_t chime__sender_take_lanes(chime__sender_t *x, chime__call_t **out);
/* The call a batch of total bytes goes to: the joined lane with the
 * fewest bytes queued (its index in *lane). Caller holds send_mu. */
chime__call_t *chime__sender_pick_lane(chime__sender_t *x, uint64_t total,
                                       uint32_t *lane);
/* Whether every joined lane has a send in flight. Caller holds send_mu. */
int chime__sender_lanes_busy(chime__sender_t *x);
/* Sends every published batch there is credit for, in order. */
void chime__sender_send_ready(chime__sender_t *x);
/* The same after a publish, unless a send is in flight: then the call's
 * next completion sends it (on_sent), from the thread already awake. */
void chime__sender_published(chime__sender_t *x);
/* The call's sends completed and it can take more (its on_sent): clears
 * awaiting and sends what is ready. */
void chime__sender_sent(chime__sender_t *x);
/* Whether a send started and chime__sender_sent() has not yet followed:
 * a slot freed meanwhile can wait for that thread to fill it. */
int chime__sender_awaiting(chime__sender_t *x);
/* A Credit: n more batches; released names the seqs the learner released
 * (none: the oldest n held). Seqs not held are ignored. */
void chime__sender_credit(chime__sender_t *x, uint32_t n,
                          const uint64_t *released, size_t nreleased);
/* Sends a Heartbeat on the call when credits are lent and nothing went
 * for every_ns (now_ns: CLOCK_MONOTONIC), unless a send is in flight
 * (sender_beat.c). Any thread; never waits for a send. */
void chime__sender_beat(chime__sender_t *x, uint64_t now_ns, uint64_t every_ns);
/* The owner gave back what was held: let every held batch go. */
void chime__sender_unhold_all(chime__sender_t *x);

#endif
