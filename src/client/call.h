/* One gRPC call as the client drives it: its own completion queue, one tag
 * per kind of operation, the pump that collects completions, the final
 * status read as a CHIME_E* code, and teardown. Unary calls, the writer
 * (Insert) and the stream (Subscribe) each hold one of these and keep only
 * their own protocol in their files.
 *
 * gRPC takes at most one operation of a kind at a time: pending[] counts
 * them (0 or 1) and is atomic because a stream sends from learner threads
 * while its thread pumps; the owner serialises operations of one kind (the
 * stream with its lock). Completions are handed back by chime__rpc_next()
 * for the owner to act on: the writer counts an ack that arrives while its
 * call is being torn down.
 *
 * Every gRPC call here passes the fork gate (fork.h), and so must every
 * other gRPC call of the client library: chime__bb_free() and
 * chime__bb_copy() (grpcutil.c) for byte buffers.
 * The other end of a gRPC call, as the server and as the client drive it:
 * src/server/call.h (one basename, two ends). */
#ifndef CHIME_CLIENT_CALL_H
#define CHIME_CLIENT_CALL_H

#include <stdatomic.h>
#include <stddef.h>

#include <grpc/grpc.h>

typedef struct chime_client_s chime_client_t;

typedef enum {
  CHIME__RPC_START,  /* initial metadata both ways (and a first message) */
  CHIME__RPC_SEND,   /* a message, or the half-close */
  CHIME__RPC_RECV,   /* a message into recv_bb (NULL: no more) */
  CHIME__RPC_STATUS, /* the final status */
  CHIME__RPC_NOPS
} chime__rpc_op_t;

/* chime__rpc_start() flags. */
enum {
  /* Wait for the channel to be ready instead of failing at once (a writer
   * resuming after a lost connection). */
  CHIME__RPC_WAIT_FOR_READY = 1,
  /* The first message is the only one: half-close with it (unary). */
  CHIME__RPC_LAST = 2,
};

typedef struct {
  grpc_completion_queue *cq;
  grpc_call *call;
  atomic_int pending[CHIME__RPC_NOPS];
  grpc_byte_buffer *start_bb; /* first message, freed when START completes */
  grpc_byte_buffer *send_bb;  /* freed when its SEND completes */
  grpc_byte_buffer *recv_bb; /* the last message received; the owner takes it */
  grpc_metadata_array md_init, md_trail;
  grpc_status_code status;
  grpc_slice details;
  int md_asked; /* RECV_INITIAL_METADATA went with a receive */
} chime__rpc_t;

/* Creates the completion queue. CHIME_ENOMEM; chime__rpc_destroy() may be
 * called either way. */
int chime__rpc_init(chime__rpc_t *r);
/* Creates a call of `method` (CHIME__M_*) and starts it: initial metadata
 * and `first` when not NULL (taken; it counts as the SEND in flight until
 * START completes), and the status. The first chime__rpc_recv() also
 * receives the initial metadata. CHIME_EPROTO when gRPC refuses;
 * chime__rpc_drain() then collects whatever did start. */
int chime__rpc_start(chime__rpc_t *r, chime_client_t *client, int method,
                     gpr_timespec deadline, unsigned flags,
                     grpc_byte_buffer *first);
/* The same on channel, one of client's (channel.c), not its own. */
int chime__rpc_start_on(chime__rpc_t *r, chime_client_t *client,
                        grpc_channel *channel, int method,
                        gpr_timespec deadline, unsigned flags,
                        grpc_byte_buffer *first);
/* Sends bb (taken, freed when sent or refused). CHIME_EBUSY while a send is
 * in flight, CHIME_EPROTO when gRPC refuses. */
int chime__rpc_send(chime__rpc_t *r, grpc_byte_buffer *bb);
/* Half-closes: nothing more will be sent. Same errors as a send. */
int chime__rpc_half_close(chime__rpc_t *r);
/* Asks for the next message (into recv_bb). CHIME_EPROTO when refused. */
int chime__rpc_recv(chime__rpc_t *r);

/* Waits for one completion until deadline: *op is what completed, *ok
 * whether it succeeded. A completed SEND or START frees its message. 0, or
 * CHIME_ETIMEDOUT when none came in time. */
int chime__rpc_next(chime__rpc_t *r, gpr_timespec deadline, chime__rpc_op_t *op,
                    int *ok);
/* Operations in flight. */
int chime__rpc_busy(const chime__rpc_t *r);
int chime__rpc_pending(const chime__rpc_t *r, chime__rpc_op_t op);

/* The final status (once STATUS completed) as a CHIME_E* code, 0 for OK
 * (src/wire/status.c: from chime-error, else the status alone); the details
 * text, for people, into text (may be NULL). */
int chime__rpc_result(const chime__rpc_t *r, char *text, size_t len);

/* Cancels the call (NULL-safe; its operations complete, failed). */
void chime__rpc_cancel(chime__rpc_t *r);
/* Cancels and collects every operation in flight, discarding them. */
void chime__rpc_drain(chime__rpc_t *r);
/* Frees the call once nothing is in flight and readies r for another call
 * on the same queue (a writer resuming). */
void chime__rpc_reset(chime__rpc_t *r);
/* Drains, frees the call and the queue. NULL-safe, idempotent. */
void chime__rpc_destroy(chime__rpc_t *r);

#endif
