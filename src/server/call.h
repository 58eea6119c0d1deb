/* Internal: one gRPC call of chime.v1.Chime on the server, driven by the
 * completion queue and handed to its method's handler through a small
 * callback table (call.c); the server side's twin of client/call.h.
 * The other end of a gRPC call, as the server and as the client drive it:
 * src/client/call.h (one basename, two ends). */
#ifndef CHIME_SERVER_CALL_H
#define CHIME_SERVER_CALL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "chime/chime.h"
#include "common/list.h"
#include "wire/message.h" /* chime__bb_read, for the handlers */
#include "wire/method.h"
#include "wire/status.h"

typedef struct chime__tag_s {
  void (*fn)(struct chime__tag_s *tag, int ok);
} chime__tag_t;

typedef struct chime__call_s chime__call_t;

typedef struct {
  /* The call arrived (unary: chime__call_payload holds the request). */
  void (*on_start)(chime__call_t *c);
  /* A message (owned by the handler), or NULL when the client closed its
   * side or the call failed. */
  void (*on_message)(chime__call_t *c, grpc_byte_buffer *bb);
  /* The call is over (status sent, or cancelled / client gone). */
  void (*on_close)(chime__call_t *c);
  /* The server is stopping: finish the call soon with UNAVAILABLE. */
  void (*on_stop)(chime__call_t *c);
  /* Last reference gone: free the handler's state (chime__call_state). */
  void (*on_free)(chime__call_t *c);
  /* A send completed and nothing is queued: the handler may queue more
   * (from the completion-queue thread, no lock held; may be NULL). */
  void (*on_sent)(chime__call_t *c);
  /* Non-zero: the method is answered without a token and while the server
   * stops (its on_start sees the server's stopping), and is asked for again
   * until the grpc_server shuts down. For a probe (health), which must
   * tell nothing but whether the server serves. */
  int open;
} chime__call_vt_t;

typedef struct chime__send_s chime__send_t;

/* What the call machinery needs of the server that owns it, in one struct
 * it is handed (state.h embeds the server's; test_call makes its own), so
 * call.c knows nothing else of the server: where calls come from and
 * complete, which handler serves each method, whether a call may go on,
 * and the live calls. */
typedef struct chime__callhost_s {
  chime_server_t *srv; /* handed to the handlers: chime__call_server */
  grpc_server *gs;
  /* New calls are announced on cq, and every call's operations complete
   * there but an Insert call's: on insert_cq when not NULL (service.c). */
  grpc_completion_queue *cq, *insert_cq;
  void *methods[CHIME__M_COUNT];     /* grpc_server_register_method's */
  const chime__call_vt_t *const *vt; /* each method's handler, by CHIME__M_* */
  /* Whether a call may go on: 0, or a CHIME_E* code with a sentence for
   * the client, and the call ends with it before its handler sees it (the
   * server: the tokens, auth.h). An open method is not asked about; NULL
   * lets every call through. */
  int (*admit)(void *arg, int method, const grpc_metadata_array *md, char *err,
               size_t errlen);
  void *admit_arg;
  /* The owner's flag: nonzero, a new call is told "shutting down" (unless
   * its method is open). */
  atomic_int *stopping;
  /* The owner's lock and cond (srv->mu, srv->cond): the lock guards what
   * follows, the cond is broadcast when the live calls fall and when an
   * Insert call arrives. */
  pthread_mutex_t *mu;
  pthread_cond_t *cond;
  /* The grpc_server's shutdown began: no call is asked for any more (not
   * even an open method's). */
  int closing;
  chime__list_t calls; /* live (chime__call_t's link) */
  uint32_t ncalls;
  /* Past this many live calls a new one ends RESOURCE_EXHAUSTED before its
   * handler sees it, an open method's excepted (0: no limit). */
  uint32_t max_calls;
  uint32_t insert_calls; /* the Insert calls among them */
} chime__callhost_t;

/* The call is opaque (call.c); its handler reads what it needs through
 * these. */
/* The server whose call it is (the host's srv). */
chime_server_t *chime__call_server(const chime__call_t *c);
/* Its method: a CHIME__M_* (CHIME__M_COUNT: an unregistered one). */
int chime__call_method(const chime__call_t *c);
/* A unary call's request, which the call keeps (NULL: a streaming method, or
 * no request came). */
grpc_byte_buffer *chime__call_payload(const chime__call_t *c);
/* The metadata the client opened the call with (its token: auth.h). */
const grpc_metadata_array *chime__call_metadata(const chime__call_t *c);
/* The call's lock: it guards the flags below and the handler's state
 * pointer, and a handler guards its own state's shared fields with it. Not
 * held across another chime__call_* function (they take it) or a callback. */
void chime__call_lock(chime__call_t *c);
void chime__call_unlock(chime__call_t *c);
/* The handler's state, NULL until on_start sets it (set_state takes the
 * lock: other callbacks may run beside on_start); on_free frees it. */
void *chime__call_state(const chime__call_t *c);
void chime__call_set_state(chime__call_t *c, void *state);
/* How the call goes, read under its lock: over (on_close runs or ran);
 * ended by gRPC's cancel (the client or its connection gone, rather than
 * its status sent), known once over; the last receive failed (the call is
 * over) rather than the client half-closing, when on_message got NULL. */
int chime__call_closed(const chime__call_t *c);
int chime__call_cancelled(const chime__call_t *c);
int chime__call_recv_failed(const chime__call_t *c);

void chime__call_ref(chime__call_t *c);
void chime__call_unref(chime__call_t *c);
/* The server stops: the call's handler is told (its on_stop). */
void chime__call_stop(chime__call_t *c);
/* Ends the call at once with status and why (the client hears them). */
void chime__call_cancel(chime__call_t *c, grpc_status_code status,
                        const char *why);
/* Runs fn on each of h's live calls, each held by a reference while it
 * runs (a call being freed is skipped); takes h->mu, so not under it. */
void chime__call_each(chime__callhost_t *h, void (*fn)(chime__call_t *c));
/* Asks for the next message (no-op once finishing or closed). */
void chime__call_recv(chime__call_t *c);
/* Queues a message (takes bb). CHIME_ECLOSED once finishing or closed. */
int chime__call_send(chime__call_t *c, grpc_byte_buffer *bb);
/* Whether a send is in flight (on_sent follows its completion). */
int chime__call_sending(chime__call_t *c);
/* Packs a protobuf-c message and queues it. */
int chime__call_send_msg(chime__call_t *c, const void *protobuf_c_msg);
/* Queues the final status after what is queued; later sends fail. err is
 * the CHIME_E* code (CHIME_OK: success): the status is the one it maps to
 * (src/wire/status.c), and a failure carries err itself in the trailing
 * metadata, which is what clients read. The details are for people and are
 * never cut (clients raise gRPC's metadata limit to match). */
void chime__call_finish(chime__call_t *c, chime_errno_t err, const char *fmt,
                        ...) __attribute__((format(printf, 3, 4)));
/* The same with a status other than err's own, for a refusal the protocol
 * gave its own status (docs/protocol.md: a resend outside the window is
 * FAILED_PRECONDITION; clients hear err). */
void chime__call_finish_as(chime__call_t *c, chime_errno_t err,
                           grpc_status_code status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Drops queued messages not yet handed to gRPC (nothing once the final
 * status is queued). */
void chime__call_drop_queued(chime__call_t *c);
/* Requests the next call of `method` (CHIME__M_COUNT: any unregistered
 * method, answered UNIMPLEMENTED) from host->gs. */
int chime__request_call(chime__callhost_t *host, int method);

#endif
