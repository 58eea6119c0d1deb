/* A stream: one learner's ring on one table, its budget charge, how one
 * fill step goes (run by the fill pool, fill_pool.h), and its mode's
 * part (streammode.h). Reference counted: the Subscribe call, the pool,
 * the handoff watcher and every batch still held by gRPC; the ring is destroyed
 * with the last reference. Its charge against the budgets is held apart
 * (holds): by chimed's own ring until that is destroyed, and by a learner
 * that was handed the ring's fd until the handoff thread sees the learner
 * exit or let go of the ring (its mapping or fd keeps the pages alive). The
 * struct goes with the last of either.
 * The other end of a stream of batches: src/client/stream.h (one basename, two
 * ends). */
#ifndef CHIME_SERVER_STREAM_H
#define CHIME_SERVER_STREAM_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "chime.pb-c.h"
#include "server/fill_pool.h"
#include "server/state.h"
#include "server/streammode.h"
#include "server/streamops.h"
#include "wire/handoff_bytes.h"

#define CHIME__RESUME_TOKEN_BYTES 16

typedef struct chime__stream_send_s chime__stream_send_t;

struct chime__stream_s {
  chime_server_t *srv;
  uint64_t id;
  chime__table_t *table;
  char table_name[CHIME_MAX_NAME];
  const chime__stream_mode_ops_t *ops; /* what its mode does */
  int mode;                            /* ops->mode */
  chime_ring_t *ring;
  /* The ring's spec: the table's, but for compressed leaves it holds as
   * their stored bytes (ragged u8, common/spec.h chime__spec_framed), of
   * which the client decompresses those set in unframe (stream mode). */
  chime_spec_t spec;
  uint8_t unframe[CHIME_MAX_LEAVES];
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
  pthread_mutex_t mu; /* attached, retired, end_call */
  /* stream mode's own: its sender, the bytes each batch sends, the fill
   * job's hint (mode_stream.c); NULL in shm mode */
  chime__stream_send_t *send;
  /* Each slot's batch keeps its rows pinned in the table until the slot
   * is filled again (or, shm, seen released) or the stream goes: stream
   * mode sends them from there; both give a batch the learner did not
   * release back from them (max_times_sampled tables: pin_times set), so
   * nothing given back is read from the ring, which an shm learner can
   * write. NULL in shm mode when nothing is ever given back. */
  chime__table_pins_t *pins; /* [slots], rows in pin_rows */
  uint32_t *pin_rows;        /* [slots * batch_size] */
  uint32_t *pin_times;       /* [slots * batch_size], or NULL */
  /* shm: the ring is filled only once its learner holds it, so a handoff
   * that never happens strands no item (attached, under mu) */
  int attached;
  chime__fill_job_t job;       /* its filling, run by the fill pool */
  chime__table_waiter_t twait; /* kicks the job when the table has items */
  chime__call_t *call; /* the Subscribe call (srv->mu); dropped at close */
  /* stream mode: what a resuming Open presents with this stream's id
   * (resume.c); set at open, never changed */
  uint8_t resume_token[CHIME__RESUME_TOKEN_BYTES];
  /* Its learner resumes a lost connection (Open.resumable): a call that
   * ends without the learner closing it parks the stream (resume.c)
   * until park_until_ns (CLOCK_MONOTONIC; 0: not parked), still listed,
   * its held batches kept for a resuming Open to name. */
  int resumable;
  _Atomic uint64_t park_until_ns;
  /* stream mode: the heartbeats' interval (beat.h), 0: none; set before
   * the stream is started, never changed */
  atomic_uint heartbeat_ms;
  /* chime__stream_end's call (held), ended with OK once the stream has
   * retired (its items given back); retired: that happened (mu) */
  chime__call_t *end_call;
  int retired;
  /* shm: the handoff token sent in Opened (registered with the handoff,
   * which owns its use) and its deadline */
  uint8_t token[CHIME__HANDOFF_TOKEN_BYTES];
  uint64_t token_deadline_ns;
  /* shm: the Open's ready_bytes, a limit set on the ring once it exists */
  uint64_t ready_bytes;
  chime__registry_node_t node; /* on the server's registry while open */
};

/* Checks the Open request against the table and budgets, creates and pins
 * the ring in the given mode (NULL: the request's mode is none of them,
 * refused in its turn among the checks). On failure returns a CHIME_E code with
 * err meant for the client: CHIME__ERRLEN bytes hold all of it. */
int chime__stream_open(chime__stream_t **out, chime_server_t *srv,
                       chime__call_t *call, const Chime__V1__Open *open,
                       const chime__stream_mode_ops_t *mode, char *err,
                       size_t errlen);
/* The pins above for open's slots and batch_size, with pin_times when
 * times is set. CHIME_ENOMEM; what was made goes in
 * chime__stream_pins_fini, which unpins what is still pinned. */
int chime__stream_pins_init(chime__stream_t *s, const Chime__V1__Open *open,
                            int times);
void chime__stream_pins_fini(chime__stream_t *s);
/* Hands the stream to the fill pool (and the call to its mode's
 * start). */
int chime__stream_start(chime__stream_t *s, chime__call_t *call);
/* Shuts the ring down and ends the filling and sending; idempotent, from
 * any thread.
 * The memory goes when the last reference does, the budget with the last
 * hold. */
void chime__stream_close(chime__stream_t *s);
/* The client half-closed: every release it sent has been read (stream
 * mode: Credits, one message at a time; shm: the ring's counters, written
 * before). Closes the stream and ends call with OK once what its learner
 * did not release is back in the table, so a learner's close returns
 * after that; during a stop the stop's own ending stands. */
void chime__stream_end(chime__stream_t *s, chime__call_t *call);
/* shm: the handoff passed the ring's fd; wakes the sampler (any thread). */
void chime__stream_attached(chime__stream_t *s);
/* The stream's Subscribe call with a reference (drop it), or NULL once
 * the stream dropped it. */
chime__call_t *chime__stream_call(chime__stream_t *s);
/* Closes the stream and cancels its call (the learner is gone). */
void chime__stream_kill(chime__stream_t *s, const char *why);
void chime__stream_ref(chime__stream_t *s);
void chime__stream_unref(chime__stream_t *s);
/* A learner was handed the ring: its charge stays until unhold. */
void chime__stream_hold(chime__stream_t *s);
void chime__stream_unhold(chime__stream_t *s);
/* What the handoff and the liveness watch may do to a stream. */
extern const chime__stream_ops_t chime__stream_ops;

/* --- resuming a stream-mode stream (resume.c; docs/protocol.md, "A
 * stream that resumes") --- */

/* Stream mode: a Heartbeat when the stream has credits and sent nothing
 * for heartbeat_ms (mode_stream.c, for beat.c). */
void chime__stream_beat(chime__stream_t *s, uint64_t now_ns);
/* Fills s's resume token with random bytes: CHIME_ESYS when there are
 * none to be had (the stream then cannot be resumed, nothing else). */
int chime__stream_resume_token(chime__stream_t *s);
/* An Open naming an old stream (resume_stream): when it is still listed,
 * of the same table and mode, and the token matches, the old batches the
 * learner received (resume_received) count as released, the old stream
 * ends (the rest of what it held goes back to the table) and 1 is
 * returned; else 0 (nothing to resume: it had ended). */
int chime__stream_resume_old(chime_server_t *srv, const Chime__V1__Open *open);
/* The listed stream-mode stream of that id on table whose resume token
 * is token, with a reference; else NULL (an all-zero token, getrandom
 * having failed, matches nothing). */
chime__stream_t *chime__stream_named(chime_server_t *srv, uint64_t id,
                                     const char *table, const uint8_t *token,
                                     size_t token_len);
/* A Subscribe call whose first request is a Join (lanes.c): the stream
 * it names, with a reference, its call now one of its lanes; or NULL
 * with a CHIME_E* code in *code and err for the learner. */
chime__stream_t *chime__stream_join(chime_server_t *srv, chime__call_t *call,
                                    const Chime__V1__Join *join, int *code,
                                    char *err, size_t errlen);
/* One of its lanes' calls ended before the stream did (lanes.c): the
 * stream is lost (chime__stream_lost) and its first call ends as a lost
 * connection does, so that its learner resumes it whole. */
void chime__stream_lane_lost(chime__stream_t *s);
/* The stream's call ended without its learner closing it (the connection
 * lost, or the learner killed): a resumable stream that holds batches is
 * parked for CHIME__RESUME_GRACE_MS before it retires; then it closes. */
void chime__stream_lost(chime__stream_t *s);
/* A parked stream retires now (resumed, or the server stops). */
void chime__stream_unpark(chime__stream_t *s);
/* How long a lost resumable stream waits for its learner's resuming Open:
 * its learner reconnects within about this of the link coming back. */
#define CHIME__RESUME_GRACE_MS 5000

#endif
