/* TLS credentials and gRPC's external port (see tls.h for why). */
#include "server/tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "common/pem.h"

/* The port's address; the pointer arg has the same name (gRPC looks the
 * arg up by the whole address). */
#define PORT_NAME "external:chime-tls"

/* A PEM file of the config's tls.key, errors named after the key. */
static int read_pem(const char *key, const char *path, char **out, char *err,
                    size_t errlen) {
  char why[CHIME__MAX_PATH + 128];
  int rc = chime__pem_read(path, out, why, sizeof(why));
  if (rc != 0)
    snprintf(err, errlen, "tls.%s: %s", key, why);
  return rc;
}

int chime__tls_server_credentials(const chime__tls_config_t *tls,
                                  grpc_server_credentials **out, char *err,
                                  size_t errlen) {
  char *cert = NULL, *key = NULL, *ca = NULL;
  int rc;
  *out = NULL;
  rc = read_pem("cert", tls->cert, &cert, err, errlen);
  if (rc == 0)
    rc = read_pem("key", tls->key, &key, err, errlen);
  if (rc == 0 && tls->client_ca[0] != '\0')
    rc = read_pem("client_ca", tls->client_ca, &ca, err, errlen);
  if (rc != 0)
    goto out;
  grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
  /* gRPC copies the PEM text; it checks it when the port is added. */
  *out = grpc_ssl_server_credentials_create_ex(
      ca, &pair, 1,
      ca != NULL ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                 : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
      NULL);
  if (*out == NULL) {
    snprintf(err, errlen, "tls: gRPC refused the certificate '%s'", tls->cert);
    rc = CHIME_EINVAL;
  }
out:
  chime__pem_free(cert);
  chime__pem_free(key);
  chime__pem_free(ca);
  return rc;
}

/* The arg carries a pointer to the slot; gRPC copies the arg with the
 * server's args, never the slot. */
static void *slot_copy(void *p) {
  return p;
}
static void slot_destroy(void *p) {
  (void)p;
}
static int slot_cmp(void *a, void *b) {
  return a < b ? -1 : a > b;
}
static const grpc_arg_pointer_vtable slot_vtable = {slot_copy, slot_destroy,
                                                    slot_cmp};

void chime__tls_port_arg(grpc_arg *arg, void **slot) {
  *slot = NULL;
  arg->type = GRPC_ARG_POINTER;
  arg->key = (char *)PORT_NAME;
  arg->value.pointer.p = slot;
  arg->value.pointer.vtable = &slot_vtable;
}

int chime__tls_port_add(grpc_server *gs, grpc_server_credentials *creds,
                        const chime__tls_config_t *tls, void **slot, char *err,
                        size_t errlen) {
  /* For an external port gRPC returns 0 (no port number) even when it took
   * it: the handler in the slot is what says it did. gRPC checks the
   * certificate and key here (making the TLS context), so a pair that does
   * not match fails here too, with gRPC's reason on its log. */
  (void)grpc_server_add_http2_port(gs, PORT_NAME, creds);
  if (*slot == NULL) {
    snprintf(err, errlen,
             "tls: gRPC (%s) refused the TLS port: is '%s' a PEM certificate "
             "chain and '%s' its private key%s%s? (gRPC's log line above "
             "says why)",
             grpc_version_string(), tls->cert, tls->key,
             tls->client_ca[0] != '\0' ? ", and '" : "",
             tls->client_ca[0] != '\0' ? "client_ca' PEM certificates" : "");
    return CHIME_EINVAL;
  }
  return 0;
}

/* grpc_core::TcpServerFdHandler is a C++ interface with a virtual
 * destructor and one method:
 *   virtual ~TcpServerFdHandler();
 *   virtual void Handle(int listener_fd, int fd, grpc_byte_buffer *pending);
 * Under the Itanium C++ ABI (every Linux target gRPC builds for) the object
 * starts with its vtable pointer, and the vtable holds the complete and
 * the deleting destructor, then Handle: entry 2. `pending` is bytes already
 * read from fd; the acceptor only peeked, so there are none. */
typedef void (*handle_fn)(void *self, int listener_fd, int fd,
                          grpc_byte_buffer *pending);
#define HANDLE_VTABLE_INDEX 2

void chime__tls_port_take(void *handler, int lfd, int fd) {
  handle_fn const *vtable = *(handle_fn const **)handler;
  vtable[HANDLE_VTABLE_INDEX](handler, lfd, fd, NULL);
}
