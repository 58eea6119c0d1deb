/* TLS for chime_server_listen, with gRPC's own credentials.
 *
 * chimed accepts connections itself (server/acceptor.h) and gRPC 1.51's
 * grpc_server_add_channel_from_fd takes only insecure credentials: it makes
 * an HTTP/2 transport straight on the fd, with no handshake. The one door
 * gRPC 1.51 has for a connection accepted elsewhere that still runs the
 * server's handshakers (TLS, then HTTP/2 settings, under
 * GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS) is its "external:" port, the core
 * half of grpc++'s ExternalConnectionAcceptor: grpc_server_add_http2_port
 * with an address "external:NAME" and secure credentials makes a listener
 * that binds nothing, and writes into the pointer channel arg NAME a handler
 * (a grpc_core::TcpServerFdHandler) whose Handle(listener_fd, fd, pending)
 * takes an accepted fd. So with TLS the acceptor keeps every guard it has
 * (reserve fd, connection cap, first-bytes deadline) and hands each socket
 * to that handler instead of add_channel_from_fd. */
#ifndef CHIME_SERVER_TLS_H
#define CHIME_SERVER_TLS_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stddef.h>

#include "server/config.h"

/* Server credentials from tls's PEM files: the certificate chain and key,
 * and with client_ca a client certificate that chains to it is required
 * and verified (mutual TLS). CHIME_EINVAL with err naming the file. */
int chime__tls_server_credentials(const chime__tls_config_t *tls,
                                  grpc_server_credentials **out, char *err,
                                  size_t errlen);

/* The pointer channel arg through which gRPC hands over the handler; it must
 * be among the grpc_server's args at grpc_server_create. *slot must live as
 * long as the server. */
void chime__tls_port_arg(grpc_arg *arg, void **slot);

/* Adds the external TLS port to gs (before grpc_server_start). *slot then
 * holds the handler, owned by gRPC until the server is destroyed.
 * CHIME_EINVAL with err when gRPC did not take it (a certificate and key
 * that do not match, or a libgrpc without external ports). */
int chime__tls_port_add(grpc_server *gs, grpc_server_credentials *creds,
                        const chime__tls_config_t *tls, void **slot, char *err,
                        size_t errlen);

/* Hands fd, accepted on lfd, to gRPC (after grpc_server_start): gRPC owns fd
 * from here and closes it when the handshake fails or the connection ends. */
void chime__tls_port_take(void *handler, int lfd, int fd);

#endif
