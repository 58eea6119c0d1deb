/* A stream: one learner's ring on one table, the sampler thread that fills
 * it, and in stream mode the sending of published slots as chunks straight
 * from slot memory. Reference counted: the Subscribe call, the sampler, the
 * handoff watcher and every batch still held by gRPC; the ring is destroyed
 * with the last reference. Its charge against the budgets is held apart
 * (holds): by chimed's own ring until that is destroyed, and by a learner
 * that was handed the ring's fd until the handoff thread sees the learner
 * exit or let go of the ring (its mapping or fd keeps the pages alive). The
 * struct goes with the last of either. */
#ifndef CHIME_SERVER_STREAM_H
#define CHIME_SERVER_STREAM_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "chime.pb-c.h"
#include "server/server.h"

struct chime__stream_s {
  chime_server_t *srv;
  uint64_t id;
  chime__table_t *table;
  char table_name[CHIME_MAX_NAME];
  int mode; /* CHIME_MODE_SHM or CHIME_MODE_STREAM */
  chime_ring_t *ring;
  chime_ring_layout_t lay;
  uint64_t ring_bytes;
  uint64_t send_bytes;
  uint64_t pinned_bytes;
  atomic_int refs;
  atomic_int holds; /* of the budget charge, see above */
  dev_t ring_dev;   /* the ring's memfd, to find it in a learner's /proc */
  ino_t ring_ino;
  atomic_int stop;
  atomic_int closed;
  pthread_mutex_t mu;      /* the ring's consumer side, credits */
  pthread_mutex_t send_mu; /* batch order on the call, sender_call */
  uint32_t credits;
  /* fifo, stream mode: batches sent and not yet released by the learner
   * (named in a Credit), oldest first; their slots stay taken so that the
   * stream's end can give their items back (mu). */
  int hold;
  int unheld; /* the stream ended: nothing is held any more (mu) */
  struct chime__sent_s *held_head, *held_tail;
  /* shm: the ring is filled only once its learner holds it, so a handoff
   * that never happens strands no item (attached, under mu) */
  pthread_cond_t attach_cond;
  int attached;
  chime__call_t *call; /* the Subscribe call (srv->mu); dropped at close */
  chime__call_t *sender_call; /* stream mode: sends go here (send_mu) */
  atomic_uint_fast64_t batches, bytes;
  /* handoff (guarded by the server's mutex) */
  uint8_t token[16];
  uint64_t token_deadline_ns;
  int token_live;
  chime__stream_t *prev, *next; /* server's live streams */
};

/* Checks the Open request against the table and budgets, creates and pins
 * the ring and fills `opened`. On failure returns a CHIME_E code with err
 * meant for the client: CHIME__CLIENT_ERRLEN bytes hold all of it. */
int chime__stream_open(chime__stream_t **out, chime_server_t *srv,
                       chime__call_t *call, const Chime__V1__Open *open,
                       char *err, size_t errlen);
/* Starts the sampler thread. */
int chime__stream_start(chime__stream_t *s, chime__call_t *call);
/* A Credit: n more batches may be sent; released names the seqs of the
 * batches the learner released (none: the oldest n held). */
void chime__stream_credit(chime__stream_t *s, uint32_t n,
                          const uint64_t *released, size_t nreleased);
/* Shuts the ring down and stops the threads; idempotent, from any thread.
 * The memory goes when the last reference does, the budget with the last
 * hold. */
void chime__stream_close(chime__stream_t *s);
/* shm: the handoff passed the ring's fd; wakes the sampler (any thread). */
void chime__stream_attached(chime__stream_t *s);
/* Closes the stream and cancels its call (the learner is gone). */
void chime__stream_kill(chime__stream_t *s, const char *why);
void chime__stream_ref(chime__stream_t *s);
void chime__stream_unref(chime__stream_t *s);
/* A learner was handed the ring: its charge stays until unhold. */
void chime__stream_hold(chime__stream_t *s);
void chime__stream_unhold(chime__stream_t *s);
uint64_t chime__now_ns(void); /* CLOCK_MONOTONIC */

#endif
