/* Stream mode's heartbeats (beat.h). The streams are looked at with a
 * reference each and the registry unlocked: a send may drop the last
 * reference of a batch, which can reach the registry. */
#include "server/beat.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/clock.h"
#include "server/insert.h"
#include "server/stream.h"
#include "wire/credit.h"

struct chime__beat_s {
  chime_server_t *srv;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int quit; /* mu */
  chime__stream_t **seen;
  size_t cap;
};

/* The streams that asked for heartbeats, each with a reference, into
 * b->seen (grown as needed; a stream it has no room for waits for the
 * next look). Returns how many. */
static size_t gather(chime__beat_t *b) {
  size_t n = 0, want = 0;
  chime__registry_node_t *it;
  chime__registry_lock(&b->srv->streams);
  for (chime__stream_t *s = chime__registry_first(&b->srv->streams, &it);
       s != NULL; s = chime__registry_next(&it)) {
    if (atomic_load(&s->heartbeat_ms) == 0 || atomic_load(&s->closed))
      continue;
    want++;
    if (n < b->cap) {
      chime__stream_ref(s);
      b->seen[n++] = s;
    }
  }
  chime__registry_unlock(&b->srv->streams);
  if (want > b->cap) {
    size_t cap = want * 2;
    chime__stream_t **seen = realloc(b->seen, cap * sizeof(*seen));
    if (seen != NULL) {
      b->seen = seen;
      b->cap = cap;
    }
  }
  return n;
}

/* An Insert call's heartbeat, if due (insertack.h). */
static void beat_insert(chime__call_t *c) {
  chime__insert_beat_t *beat = chime__insert_beat_of(c);
  if (beat != NULL)
    chime__insert_beat(c, beat, chime__now_ns());
}

static void *beat_main(void *arg) {
  pthread_setname_np(pthread_self(), "chime-beat");
  chime__beat_t *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!b->quit) {
    struct timespec ts =
        chime__clock_after_ms(CLOCK_REALTIME, CHIME__HEARTBEAT_MS / 2);
    pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    if (b->quit)
      break;
    pthread_mutex_unlock(&b->mu);
    size_t n = gather(b);
    uint64_t now = chime__now_ns();
    for (size_t i = 0; i < n; i++) {
      chime__stream_beat(b->seen[i], now);
      chime__stream_unref(b->seen[i]);
    }
    chime__call_each(&b->srv->host, beat_insert);
    pthread_mutex_lock(&b->mu);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

int chime__beat_start(chime__beat_t **out, chime_server_t *srv) {
  chime__beat_t *b = calloc(1, sizeof(*b));
  *out = NULL;
  if (b == NULL)
    return CHIME_ENOMEM;
  b->srv = srv;
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  if (pthread_create(&b->th, NULL, beat_main, b) != 0) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    return CHIME_ESYS;
  }
  *out = b;
  return 0;
}

void chime__beat_stop(chime__beat_t *b) {
  if (b == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  b->quit = 1;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
  pthread_join(b->th, NULL);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b->seen);
  free(b);
}
