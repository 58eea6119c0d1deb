/* The public stream calls (chime.h): the options filled in and checked
 * once, then a one-server stream (stream.c, chime__single_*) or, on a
 * sharded client, the union of its shards' sub-streams (union.h,
 * union_draw.h), itself made of one-server streams. Nothing below calls
 * back up here. */
#include <string.h>

#include "client/stream.h"
#include "client/union.h"
#include "client/union_draw.h"

int chime_stream_open(chime_stream_t **out, chime_client_t *client,
                      const char *table, const chime_stream_opts_t *opts) {
  const chime_stream_opts_t def = CHIME_STREAM_OPTS_INIT;
  chime_stream_opts_t o = def;
  char err[CHIME__ERRLEN] = "";
  chime_stream_t *s = NULL;
  int rc = 0;
  if (!client || !table || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_stream_open: needs out, a client and a table");
  *out = NULL;
  rc = chime__client_inherited(client);
  if (rc)
    return rc;
  if (opts)
    o = *opts;
  if (o.batch_size == 0) /* a zero means its default */
    o.batch_size = def.batch_size;
  if (o.slots == 0)
    o.slots = def.slots;
  if (o.open_timeout_ms == 0)
    o.open_timeout_ms = def.open_timeout_ms;
  if (o.reconnect_timeout_ms == 0)
    o.reconnect_timeout_ms = def.reconnect_timeout_ms;
  if (o.device >= 0 && o.device_prefetch == 0)
    o.device_prefetch = o.slots - 1 < CHIME_DEVICE_PREFETCH
                            ? o.slots - 1
                            : CHIME_DEVICE_PREFETCH;
  if (strlen(table) >= CHIME_MAX_NAME || o.open_timeout_ms < 0 ||
      o.batch_size > CHIME_RING_MAX_BATCH || o.slots < 2 ||
      o.slots > CHIME_RING_MAX_SLOTS || o.prefetch > o.slots ||
      (o.mode != CHIME_MODE_AUTO && o.mode != CHIME_MODE_SHM &&
       o.mode != CHIME_MODE_STREAM)) {
    rc = chime__fail(err, sizeof(err), CHIME_EINVAL,
                     "stream: need batch_size <= %u, 2 <= slots <= %u, "
                     "prefetch <= slots, open_timeout_ms >= 0, a known "
                     "mode and a table name",
                     CHIME_RING_MAX_BATCH, CHIME_RING_MAX_SLOTS);
    goto cleanup;
  }
  if (o.connections > CHIME_MAX_CONNECTIONS) {
    rc = chime__fail(err, sizeof(err), CHIME_EINVAL,
                     "stream: connections is 1 to %u (0: 1), not %u",
                     CHIME_MAX_CONNECTIONS, o.connections);
    goto cleanup;
  }
  if (o.device < -1 || (o.device >= 0 && o.device_prefetch > o.slots - 1)) {
    rc = chime__fail(err, sizeof(err), CHIME_EINVAL,
                     "stream: device is a CUDA ordinal or -1 (host), and "
                     "1 <= device_prefetch <= slots - 1 (%u)",
                     o.slots - 1);
    goto cleanup;
  }
  if (!client->set)
    return chime__single_open(out, client, table, &o);
  /* The union's own object is a stream's (client, table, options), with
   * sub-streams on the shards' own clients (union.c). */
  if ((rc = chime__stream_new(&s, client, table, &o, err, sizeof(err))) == 0 &&
      (rc = chime__union_open(s, err, sizeof(err))) == 0) {
    *out = s;
    s = NULL;
  }

cleanup:
  if (rc) {
    chime__detail(rc, err);
    chime__single_close(s); /* the object, the union being closed */
  }
  return rc;
}

int chime_stream_next(chime_stream_t *stream, chime_batch_t *out,
                      int timeout_ms) {
  chime_stream_t *s = stream;
  if (!s || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_stream_next: needs a stream and out");
  if (!s->uni)
    return chime__single_next(s, out, timeout_ms);
  int rc = chime__stream_inherited(s);
  return rc ? rc : chime__union_next(s, out, timeout_ms);
}

int chime_stream_set_version(chime_stream_t *stream, uint64_t version) {
  chime_stream_t *s = stream;
  if (!s)
    return chime__detail(CHIME_EINVAL, "chime_stream_set_version: no stream");
  if (!s->uni)
    return chime__single_set_version(s, version);
  int rc = chime__stream_inherited(s);
  return rc ? rc : chime__union_set_version(s, version);
}

int chime_stream_stats(const chime_stream_t *stream,
                       chime_stream_local_stats_t *out) {
  const chime_stream_t *s = stream;
  if (!s || !out)
    return chime__detail(CHIME_EINVAL,
                         "chime_stream_stats: needs a stream and out");
  if (!s->uni)
    return chime__single_stats(s, out);
  int rc = chime__stream_inherited(s);
  return rc ? rc : chime__union_stats(s, out);
}

int chime_stream_release(chime_stream_t *stream, const chime_batch_t *batch) {
  chime_stream_t *s = stream;
  if (!s || !batch)
    return chime__detail(CHIME_EINVAL,
                         "chime_stream_release: needs a stream and a batch");
  if (!s->uni)
    return chime__single_release(s, batch);
  int rc = chime__stream_inherited(s);
  return rc ? rc : chime__union_release(s, batch);
}

int chime_stream_wait(chime_stream_t *stream, const chime_batch_t *batch,
                      void *cuda_stream) {
  chime_stream_t *s = stream;
  if (!s || !batch)
    return chime__detail(CHIME_EINVAL,
                         "chime_stream_wait: needs a stream and a batch");
  if (!s->uni)
    return chime__single_wait(s, batch, cuda_stream);
  int rc = chime__stream_inherited(s);
  return rc ? rc : chime__union_wait(s, batch, cuda_stream);
}

chime_mode_t chime_stream_mode(const chime_stream_t *stream) {
  if (!stream)
    return CHIME_MODE_AUTO;
  return stream->uni ? chime__union_mode(stream) : chime__single_mode(stream);
}

const char *chime_stream_fallback_reason(const chime_stream_t *stream) {
  if (!stream)
    return NULL;
  return stream->uni ? chime__union_fallback_reason(stream)
                     : chime__single_fallback_reason(stream);
}

void chime_stream_close(chime_stream_t *stream) {
  if (!stream)
    return;
  /* A sharded stream has no call, ring or transport of its own: once its
   * sub-streams are closed, what is left is a stream object to free. */
  if (stream->uni)
    chime__union_close(stream);
  chime__single_close(stream);
}
