/* A stream-mode stream whose connection is lost opens its Subscribe again
 * and goes on where it was (docs/remote.md, "A link that drops";
 * docs/protocol.md, "A stream that resumes"). The local ring stays: what
 * the learner holds and what is ready stays valid, next() answers
 * CHIME_ETIMEDOUT meanwhile. The stream's thread holds drive_mu while it
 * tries (the learner then waits on the ring, never on the call), one
 * attempt at a time (a connection within CONNECT_MS, then the Open's
 * answer within TRY_MS), RETRY_MS apart when one fails at once, until
 * reconnect_timeout_ms passed since the loss (or the stall): then
 * the stream ends with CHIME_EDISCONNECTED. The new Open names the old
 * stream and the batches received from it that its server may still hold
 * (mode_stream.c), so a server that has not yet seen the old call die counts
 * them as released instead of giving their items to another stream.
 * Each attempt is fresh connections (channel.c): a new channel of the
 * stream's own every CONNECT_STEP_MS, the first READY taken, so a new TCP
 * handshake starts at least that often, never the old connection's
 * backed-off retransmissions nor gRPC's 1-120 s reconnect backoff, and
 * one started after the link is back connects. The stream keeps the channel
 * it resumed on (s->chan) until it closes.
 * The other end of a stream that resumes after a lost connection:
 * src/server/resume.c (one basename, two ends). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "client/stream.h"
#include "wire/status.h"

/* One attempt's wait for the new call's Opened. */
#define TRY_MS 1000
/* Between attempts that failed at once (the channel refused). */
#define RETRY_MS 100
/* One attempt: a fresh connection every CONNECT_STEP_MS for at most
 * CONNECT_MS (close waits this long at most for it). */
#define CONNECT_STEP_MS 250
#define CONNECT_MS 2000

/* Whether the status is gRPC's own for a lost connection (UNAVAILABLE,
 * with none of chime's error metadata: no server said it). */
static int lost_connection(const chime__rpc_t *rpc) {
  if (rpc->status != GRPC_STATUS_UNAVAILABLE)
    return 0;
  for (size_t i = 0; i < rpc->md_trail.count; i++)
    if (!grpc_slice_str_cmp(rpc->md_trail.metadata[i].key, CHIME__ERROR_KEY))
      return 0;
  return 1;
}

int chime__resume_begin(chime_stream_t *s, int code, const char *text) {
  (void)code;
  if (s->tp->resumed == NULL || s->opts.reconnect_timeout_ms <= 0 ||
      s->notice_shutdown ||
      (!lost_connection(&s->rpc) && !atomic_load(&s->stalled)))
    return 0;
  pthread_mutex_lock(&s->lock);
  int go = !s->closing && !s->half_closed;
  if (go) {
    s->resume_deadline = chime__now_ms() + s->opts.reconnect_timeout_ms;
    if (atomic_load(&s->stalled))
      snprintf(s->lost_why, sizeof(s->lost_why),
               "stalled: nothing heard for %" PRId64 " ms while batches "
               "were owed",
               chime__now_ms() - s->stall_heard_ms);
    else
      snprintf(s->lost_why, sizeof(s->lost_why), "%.400s",
               text[0] ? text : "connection lost");
    atomic_store(&s->resuming, 1);
  }
  pthread_mutex_unlock(&s->lock);
  return go;
}

/* Waits ms on idle_cv (close wakes it): 1 when closing. Holds s->lock. */
static int nap_locked(chime_stream_t *s, int64_t ms) {
  if (!s->closing && ms > 0) {
    struct timespec ts = chime__clock_after_ms(CLOCK_REALTIME, ms);
    pthread_cond_timedwait(&s->idle_cv, &s->lock, &ts);
  }
  return s->closing;
}

/* One attempt: fresh connections for CONNECT_MS, then the resuming
 * Open on it within TRY_MS (both within left). */
static int attempt(chime_stream_t *s, int64_t left, char *err, size_t errlen) {
  grpc_channel *ch = NULL;
  int rc =
      chime__channel_connect(s->client, CONNECT_STEP_MS,
                             left < CONNECT_MS ? (int)left : CONNECT_MS, &ch);
  if (rc != 0)
    return chime__fail(err, errlen, rc, "%s",
                       rc == CHIME_ETIMEDOUT ? "no connection"
                                             : "out of memory");
  chime__resume_fini(s); /* the channel of an earlier resume */
  s->chan = ch;
  left = s->resume_deadline - chime__now_ms();
  return chime__stream_reopen(
      s, left < TRY_MS ? (left > 0 ? (int)left : 1) : TRY_MS, err, errlen);
}

/* Attempts until a new call is open (0), the server refuses (its code),
 * the time is up or the stream closes (CHIME_EDISCONNECTED, CHIME_ECLOSED).
 * err says why. Caller holds drive_mu. */
static int attempts(chime_stream_t *s, char *err, size_t errlen) {
  for (;;) {
    pthread_mutex_lock(&s->lock);
    int64_t left = s->resume_deadline - chime__now_ms();
    int closing = s->closing;
    pthread_mutex_unlock(&s->lock);
    if (closing)
      return chime__fail(err, errlen, CHIME_ECLOSED, "closed");
    if (left <= 0)
      return chime__fail(err, errlen, CHIME_EDISCONNECTED,
                         "the connection was lost (%s) and no server "
                         "answered within %d ms (reconnect_timeout_ms)",
                         s->lost_why, s->opts.reconnect_timeout_ms);
    int64_t t0 = chime__now_ms();
    int rc = attempt(s, left, err, errlen);
    if (rc == 0)
      return 0;
    /* No server answered in time (the link still down, or the server
     * restarting), or its budget is still the old stream's (that Open
     * ended it: its ring goes back in a moment): again. Any other answer
     * is the server's own. */
    if (rc != CHIME_ETIMEDOUT && rc != CHIME_EUNAVAILABLE &&
        rc != CHIME_EDISCONNECTED && rc != CHIME_ERESOURCE)
      return rc;
    int64_t spent = chime__now_ms() - t0;
    pthread_mutex_lock(&s->lock);
    int closed = nap_locked(s, spent < RETRY_MS ? RETRY_MS - spent : 0);
    pthread_mutex_unlock(&s->lock);
    if (closed)
      return chime__fail(err, errlen, CHIME_ECLOSED, "closed");
  }
}

int chime__stream_resume(chime_stream_t *s, char *why, size_t whylen) {
  if (!atomic_load(&s->resuming))
    return 1;
  char err[CHIME__ERRLEN];
  pthread_mutex_lock(&s->drive_mu);
  s->tp->resume_prepare(s);
  int rc = attempts(s, err, sizeof(err));
  if (rc == 0) {
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->stalled, 0);
    s->resumes++;
    s->ended = 0;
    atomic_store(&s->resuming, 0);
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_unlock(&s->drive_mu);
  if (rc != 0) {
    /* Given up: the caller cuts the learner off the ring with why. */
    snprintf(why, whylen, "stream %" PRIu64 " on '%s': %.700s", s->stream_id,
             s->table, err);
    atomic_store(&s->resuming, 0);
  }
  return rc == CHIME_ECLOSED ? 1 : rc;
}

void chime__resume_fini(chime_stream_t *s) {
  chime__channel_drop(&s->chan, s->fork_gen);
}
