/* chime_server_listen's own listener: connections are accepted here, on a
 * libuv loop thread, and handed to gRPC one by one with
 * grpc_server_add_channel_from_fd. gRPC 1.51's listener stops accepting for
 * good after one EMFILE (it logs "Failed accept4" once and never re-arms);
 * this one cannot be stopped that way:
 *  - a reserve fd is given up to accept and close a connection when the
 *    process is out of fds, so the backlog drains instead of sticking;
 *  - connections are capped (the config's max_connections, and at most
 *    what the fd limit leaves after headroom for rings, handoffs and gRPC);
 *    past the cap a connection is accepted and closed at once;
 *  - a connection is handed to gRPC only once its first bytes arrived,
 *    within the handshake timeout; a silent one is closed when it expires.
 * gRPC 1.51 takes only insecure credentials for a channel from an fd; with
 * TLS the connections go to gRPC's external port instead (server/tls.h),
 * behind the same guards. */
#ifndef CHIME_SERVER_ACCEPTOR_H
#define CHIME_SERVER_ACCEPTOR_H

#include <grpc/grpc.h>
#include <stddef.h>
#include <stdint.h>

typedef struct chime__acceptor_s chime__acceptor_t;

/* Checks a listen address: "host:port" (port 0..65535, decimal; host a
 * name, an IPv4 address, "[IPv6]", or empty for every address),
 * "unix:/path" or "unix-abstract:name" (both non-empty, under 108 bytes).
 * CHIME_EINVAL with err saying what is wrong. */
int chime__listen_addr_check(const char *addr, char *err, size_t errlen);

/* Binds and listens on addr; *port gets the bound TCP port (0 for a Unix
 * socket). */
int chime__acceptor_create(chime__acceptor_t **out, const char *addr,
                           uint32_t max_connections,
                           uint32_t handshake_timeout_ms, int *port, char *err,
                           size_t errlen);
/* Every TCP connection accepted from now on retransmits at least every ms
 * milliseconds (TCP_RTO_MAX_MS; 0: the kernel's backoff). A kernel without
 * the option (before Linux 6.15) keeps its own, said once at info. */
void chime__acceptor_set_rto_max(chime__acceptor_t *a, uint32_t ms);
/* The connection cap in force (max_connections or less, for the fd limit). */
uint32_t chime__acceptor_cap(const chime__acceptor_t *a);
/* Starts the loop thread; gs must be started. tls: the handler of gRPC's
 * external TLS port (server/tls.h) that takes every connection, or NULL for
 * plaintext (grpc_server_add_channel_from_fd). */
int chime__acceptor_start(chime__acceptor_t *a, grpc_server *gs, void *tls);
/* Stops accepting, closes the listeners and connections not yet handed to
 * gRPC, unlinks a Unix socket path (NULL-safe). Call before gRPC's server
 * shutdown. */
void chime__acceptor_destroy(chime__acceptor_t *a);

#endif
