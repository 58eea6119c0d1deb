/* A stream-mode call that stalled (docs/remote.md, "A link that drops";
 * docs/protocol.md, "Heartbeats"): the learner expects something (the
 * server owes batches, or one is half received) and has heard nothing at
 * all for CHIME__STALL_MS, or 4 times the longest recent gap between the
 * messages it heard if that is longer (a slow link, whose chunks take
 * their time, is not taken for a dead one). A server that heartbeats
 * (Opened.heartbeat_ms) sends something at least every heartbeat while
 * it has credits, so silence that long is the connection's: this side
 * cancels the call and resumes the stream on a fresh connection
 * (resume.c) instead of waiting on the old one's retransmissions. An
 * idle stream (the table empty, its rate limiter holding) hears the
 * heartbeats and stays. A server without heartbeats is never judged. */
#include "client/stream.h"
#include "wire/credit.h"

/* The most the recent gaps stretch the rule (a long pause ends and the
 * estimate decays, an eighth per message). */
#define GAP_MAX_MS 10000

/* When the expectation began or the last message came (on the call or
 * on another lane), whichever is later: silence is counted from there. */
static int64_t since(const chime_stream_t *s) {
  int64_t e = atomic_load(&s->stall_expect_ms);
  int64_t l = atomic_load(&s->stall_lane_ms);
  e = e > l ? e : l;
  return e > s->stall_heard_ms ? e : s->stall_heard_ms;
}

int64_t chime__stall_limit(int64_t estimate_ms) {
  int64_t g = 4 * estimate_ms;
  return g > CHIME__STALL_MS ? g : CHIME__STALL_MS;
}

int64_t chime__stall_gap(int64_t estimate_ms, int64_t gap_ms) {
  int64_t decayed = estimate_ms - estimate_ms / 8;
  int64_t g = gap_ms > decayed ? gap_ms : decayed;
  return g > GAP_MAX_MS ? GAP_MAX_MS : g;
}

void chime__stall_heard(chime_stream_t *s) {
  int64_t now = chime__now_ms();
  s->stall_gap_ms = chime__stall_gap(
      s->stall_gap_ms, s->stall_heard_ms != 0 ? now - since(s) : 0);
  s->stall_heard_ms = now;
}

void chime__stall_heard_lane(chime_stream_t *s) {
  atomic_store(&s->stall_lane_ms, chime__now_ms());
}

void chime__stall_expect(chime_stream_t *s, int was_owed) {
  if (!was_owed)
    atomic_store(&s->stall_expect_ms, chime__now_ms());
}

/* Whether the learner expects a message: batches owed, or one begun. */
static int expects(const chime_stream_t *s) {
  const chime__remote_t *r = &s->remote;
  return r->active || atomic_load(&r->granted) > atomic_load(&r->started);
}

int64_t chime__stall_left_ms(const chime_stream_t *s) {
  if (s->heartbeat_ms == 0 || atomic_load(&s->resuming) ||
      atomic_load(&s->stalled) || !expects(s))
    return INT64_MAX;
  int64_t left =
      since(s) + chime__stall_limit(s->stall_gap_ms) - chime__now_ms();
  return left > 0 ? left : 0;
}

int chime__stall_check(chime_stream_t *s) {
  if (chime__stall_left_ms(s) > 0 || s->opts.reconnect_timeout_ms <= 0)
    return 0;
  atomic_store(&s->stalled, 1);
  atomic_fetch_add(&s->stalls, 1);
  chime__rpc_cancel(&s->rpc); /* its status: the stream resumes */
  return 1;
}

void chime__stall_reset(chime_stream_t *s, uint32_t heartbeat_ms) {
  s->heartbeat_ms = heartbeat_ms;
  s->stall_heard_ms = chime__now_ms();
  s->stall_gap_ms = 0;
  atomic_store(&s->stall_expect_ms, 0);
  atomic_store(&s->stall_lane_ms, 0);
}
