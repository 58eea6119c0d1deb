/* A stream-mode learner that lost its connection opens again and names
 * its old stream (docs/protocol.md, "A stream that resumes"). The server
 * may not have seen the old call die yet, or has and parked the stream
 * (CHIME__RESUME_GRACE_MS): its sender still holds every
 * batch sent and not named in a Credit that arrived, among them batches
 * the learner received (and maybe released, its Credit lost with the
 * connection). Those the Open names count as released, so the learner,
 * which keeps them, never sees their items twice; the old stream then
 * ends at once, and what it held that the learner never received goes
 * back to the table (at least once).
 * The other end of a stream that resumes after a lost connection:
 * src/client/resume.c (one basename, two ends). */
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "server/stream.h"

void chime__stream_lost(chime__stream_t *s) {
  /* Only its first end counts: a stream closed already stays so. */
  /* Its sender holds batches (max_times_sampled: mode_stream.c). */
  int holds = chime__table_config(s->table)->max_times_sampled != 0;
  if (s->resumable && holds && !atomic_load(&s->closed) &&
      !atomic_load(&s->srv->stopping))
    atomic_store(&s->park_until_ns,
                 chime__now_ns() + CHIME__RESUME_GRACE_MS * CHIME__NS_PER_MS);
  chime__stream_close(s);
}

void chime__stream_unpark(chime__stream_t *s) {
  if (atomic_exchange(&s->park_until_ns, 0) != 0)
    chime__pool_kick(s->srv->sampler, &s->job);
}

int chime__stream_resume_token(chime__stream_t *s) {
  if (getrandom(s->resume_token, sizeof(s->resume_token), 0) !=
      (ssize_t)sizeof(s->resume_token)) {
    memset(s->resume_token, 0, sizeof(s->resume_token));
    return CHIME_ESYS;
  }
  return 0;
}

/* Whether the n bytes at a and b are the same, in a time that does not
 * say where they differ (the token is the stream's secret). */
static int same_secret(const uint8_t *a, const uint8_t *b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++)
    d |= a[i] ^ b[i];
  return d == 0;
}

chime__stream_t *chime__stream_named(chime_server_t *srv, uint64_t id,
                                     const char *table, const uint8_t *token,
                                     size_t token_len) {
  static const uint8_t zero[CHIME__RESUME_TOKEN_BYTES];
  if (token_len != CHIME__RESUME_TOKEN_BYTES || table == NULL ||
      memcmp(token, zero, sizeof(zero)) == 0)
    return NULL;
  chime__stream_t *found = NULL;
  chime__registry_node_t *it;
  chime__registry_lock(&srv->streams);
  for (chime__stream_t *s = chime__registry_first(&srv->streams, &it);
       s != NULL; s = chime__registry_next(&it)) {
    if (s->id != id)
      continue;
    if (s->mode == CHIME_MODE_STREAM && strcmp(s->table_name, table) == 0 &&
        same_secret(s->resume_token, token, CHIME__RESUME_TOKEN_BYTES)) {
      chime__stream_ref(s);
      found = s;
    }
    break;
  }
  chime__registry_unlock(&srv->streams);
  return found;
}

int chime__stream_resume_old(chime_server_t *srv, const Chime__V1__Open *open) {
  if (open->resume_stream == 0 || open->table == NULL)
    return 0;
  chime__stream_t *old =
      chime__stream_named(srv, open->resume_stream, open->table,
                          open->resume_token.data, open->resume_token.len);
  if (old == NULL)
    return 0;
  /* A learner holds at most slots batches, and names them with its last
   * releases: more names are ignored. A Credit reads at most slots names
   * (sender.c): a few of them. */
  size_t n = open->n_resume_received, slots = old->lay.slots;
  if (n > 3 * slots)
    n = 3 * slots;
  for (size_t at = 0; at < n; at += slots)
    old->ops->credit(old, 0, open->resume_received + at,
                     n - at < slots ? n - at : slots);
  chime__stream_kill(old, "resumed by a new call of its learner");
  chime__stream_unpark(old);
  chime__stream_unref(old);
  return 1;
}
