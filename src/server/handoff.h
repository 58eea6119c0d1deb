/* Same-host attach: a Unix socket where a learner presents its single-use
 * token and gets the ring's memfd by SCM_RIGHTS, and pidfd watches that end a
 * stream when its learner process dies. Runs on its own libuv loop thread.
 *
 * Wire: client sends "CHIMEHO1" + 16 token bytes; server answers a 4-byte
 * little-endian int32: 0 with the fd attached, or a negative CHIME_E code
 * (no fd); then closes. A uid not allowed is answered CHIME_EPERM as it is
 * accepted, before it sends. Anything else: closed without an answer. */
#ifndef CHIME_SERVER_HANDOFF_H
#define CHIME_SERVER_HANDOFF_H

#include <stddef.h>

#include <stdint.h>

#include "server/config.h"
#include "server/streamops.h"
#include "wire/handoff_bytes.h"

typedef struct chime__handoff_s chime__handoff_t;

/* Binds and listens (cfg->handoff_socket; cfg is read, and must outlive
 * the handoff); err says why not. Streams are opaque here, reached through
 * ops only (streamops.h), so the handoff stands alone. */
int chime__handoff_create(chime__handoff_t **out, const chime__config_t *cfg,
                          const chime__stream_ops_t *ops, char *err,
                          size_t errlen);
int chime__handoff_start(chime__handoff_t *h);
/* The advertised address: "@name" (abstract) or a filesystem path. */
const char *chime__handoff_path(const chime__handoff_t *h);
/* Issues a single-use token for s's ring, valid expires_ms (the registry
 * holds a reference to s until the token is used or revoked). */
int chime__handoff_issue(chime__handoff_t *h, chime__stream_t *s,
                         uint32_t expires_ms,
                         uint8_t token[CHIME__HANDOFF_TOKEN_BYTES],
                         uint64_t *deadline_ns);
/* Withdraws s's token: 1 when it was still unused (it may have expired),
 * 0 when it was used (or never issued). */
int chime__handoff_revoke(chime__handoff_t *h, const chime__stream_t *s);
/* 1 while s's token is unused and not revoked. */
int chime__handoff_pending(chime__handoff_t *h, const chime__stream_t *s);
/* A stream closed: drop its pidfd watch (any thread). */
void chime__handoff_notify(chime__handoff_t *h);
/* Stops the thread, closes the socket, unlinks a filesystem path. */
void chime__handoff_destroy(chime__handoff_t *h);

#endif
