/* Raw gRPC C core calls for integration tests: exact status codes and details
 * from chimed, and bytes the client library would never send. One call per
 * object, its own pluck queue, a deadline on everything. */
#ifndef CHIME_TESTS_RAWCALL_H
#define CHIME_TESTS_RAWCALL_H

#include <stddef.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

typedef struct {
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array md_in, md_trail;
  grpc_status_code status;
  grpc_slice details;
  grpc_byte_buffer *rbb; /* target of the outstanding RECV_MESSAGE */
  int recv_pending;      /* a RECV_MESSAGE is still outstanding (timed out) */
  int status_pending;
  int got_md; /* initial metadata asked for with the first receive */
  int closed_send;
  int finished;
} chime__raw_t;

/* A test's chimed with a raw channel to it (setup/teardown of a CMocka
 * group): starts chimed with config_json (NULL: the built-in default;
 * exits 77 when chimed is not built), calls grpc_init and opens the
 * channel. -1 when chimed did not start. */
typedef struct chime__chimed_s chime__chimed_t;
int chime__raw_fixture_start(chime__chimed_t *d, grpc_channel **ch,
                             const char *config_json);
/* Closes the channel, shuts gRPC down, stops chimed (SIGTERM) and kills
 * what is left: 0 when chimed exited 0 by itself. */
int chime__raw_fixture_stop(chime__chimed_t *d, grpc_channel *ch);

/* The same with a client of the library on chimed's address (*client),
 * for tests that use both; the stop destroys it first. */
typedef struct chime_client_s chime_client_t;
int chime__raw_client_fixture_start(chime__chimed_t *d, grpc_channel **ch,
                                    chime_client_t **client,
                                    const char *config_json);
int chime__raw_client_fixture_stop(chime__chimed_t *d, grpc_channel *ch,
                                   chime_client_t *client);

/* A channel to addr with the protocol's message limits (64 MiB), on a
 * connection of its own. */
grpc_channel *chime__raw_channel(const char *addr);

/* Starts a call to method (e.g. "/chime.v1.Chime/Insert"); the whole call
 * must end within deadline_ms. Sends initial metadata. */
int chime__raw_start(chime__raw_t *r, grpc_channel *ch, const char *method,
                     int deadline_ms);
/* The same, sending md (nmd entries, e.g. `authorization`) as its initial
 * metadata. */
int chime__raw_start_md(chime__raw_t *r, grpc_channel *ch, const char *method,
                        int deadline_ms, grpc_metadata *md, size_t nmd);
/* Sends one message (packed msg, or raw bytes). CHIME_EDISCONNECTED when the
 * call is already over. */
int chime__raw_send(chime__raw_t *r, const ProtobufCMessage *msg);
int chime__raw_send_bytes(chime__raw_t *r, const void *data, size_t len);
/* Half-closes the sending side. */
int chime__raw_close_send(chime__raw_t *r);
/* Receives one message into *bb (NULL: the server ended the stream).
 * CHIME_ETIMEDOUT when nothing came within timeout_ms (the receive stays
 * pending and is collected by the next call or by chime__raw_destroy). */
int chime__raw_recv(chime__raw_t *r, grpc_byte_buffer **bb, int timeout_ms);
/* Receives and unpacks one message; *out NULL at end of stream. Free with
 * protobuf_c_message_free_unpacked(). */
int chime__raw_recv_msg(chime__raw_t *r, const ProtobufCMessageDescriptor *d,
                        ProtobufCMessage **out, int timeout_ms);
/* Waits for the call's status (half-closing first). details gets the status
 * message. */
int chime__raw_finish(chime__raw_t *r, grpc_status_code *status, char *details,
                      size_t len, int timeout_ms);
/* The same without half-closing: the server ends the call on its own. */
int chime__raw_status(chime__raw_t *r, grpc_status_code *status, char *details,
                      size_t len, int timeout_ms);
/* Cancels if unfinished and frees everything (NULL-safe). */
void chime__raw_destroy(chime__raw_t *r);

/* One unary call: send req, receive one response, and the status. */
int chime__raw_unary(grpc_channel *ch, const char *method,
                     const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc,
                     ProtobufCMessage **resp, grpc_status_code *status,
                     char *details, size_t len);

/* One message on a new streaming call to addr (a channel of its own),
 * half-closed, then the call's status and details (10 s at most): 0, or
 * -1 when the call could not be made or did not end. */
int chime__raw_send_one(const char *addr, const char *method,
                        const ProtobufCMessage *msg, grpc_status_code *status,
                        char *details, size_t len);

/* The bytes of a whole byte buffer, malloc'd (free it). */
void *chime__raw_bytes(grpc_byte_buffer *bb, size_t *len);

#endif
