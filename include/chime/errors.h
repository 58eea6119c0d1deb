/* chime error codes.
 *
 * Every public call returns an int: 0 on success or a negative CHIME_E* code.
 * No call sets errno. chime_strerror() gives a sentence for the code,
 * chime_err_name() the symbolic name ("CHIME_ETIMEDOUT"), and
 * chime_last_error() the detail of the calling thread's last failure
 * ("insert into 'demo': leaf 'obs' (f32[64], ...) does not fit ...").
 *
 * What no call returns (a warning at a server's start, a checkpoint that
 * failed in the background) goes to the log hook, chime_set_logger();
 * the library prints nothing itself.
 */
#ifndef CHIME_ERRORS_H
#define CHIME_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CHIME_BUILDING) && defined(__GNUC__)
#define CHIME_EXTERN __attribute__((visibility("default")))
#else
#define CHIME_EXTERN
#endif

#if defined(__GNUC__)
#define CHIME_NODISCARD __attribute__((warn_unused_result))
#else
#define CHIME_NODISCARD
#endif

/* X(name, value, message). Values are stable: never renumber. */
#define CHIME_ERRNO_MAP(X)                                                     \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(ETIMEDOUT, -3, "timed out")                                                \
  X(ESHUTDOWN, -4, "shut down")                                                \
  X(EOVERFLOW, -5, "size overflow")                                            \
  X(ECORRUPT, -6, "corrupt or foreign ring header")                            \
  X(EBUSY, -7, "resource busy (too many leases held)")                         \
  X(ESYS, -8, "operating system call failed")                                  \
  X(ENOTFOUND, -9, "not found")                                                \
  X(EDISCONNECTED, -10, "peer disconnected")                                   \
  X(EPERM, -11, "permission denied")                                           \
  X(ERESOURCE, -12, "resource exhausted (memory budget)")                      \
  X(EPROTO, -13, "protocol error")                                             \
  X(EUNAVAILABLE, -14, "service unavailable")                                  \
  X(ENOTSUP, -15, "not supported")                                             \
  X(ECUDA, -16, "CUDA runtime unavailable or failed")                          \
  X(EEXIST, -17, "already exists")                                             \
  X(ECLOSED, -18, "object closed")                                             \
  X(EAUTH, -19, "not authenticated (missing or unknown token)")                \
  X(EFORGOTTEN, -20,                                                           \
    "writer forgotten by the server (its unacked requests may or may not be "  \
    "in)")

typedef enum {
  CHIME_OK = 0,
#define CHIME__ERR_ENUM(name, value, msg) CHIME_##name = value,
  CHIME_ERRNO_MAP(CHIME__ERR_ENUM)
#undef CHIME__ERR_ENUM
} chime_errno_t;

/* A sentence for the code; "unknown error" for codes chime never returns. */
CHIME_EXTERN const char *chime_strerror(int err);
/* The symbolic name ("CHIME_EBUSY"), or "CHIME_UNKNOWN". */
CHIME_EXTERN const char *chime_err_name(int err);
/* The sentence about the most recent failed chime call made by the calling
 * thread, or "" when it has made none. Every public call that returns a
 * CHIME_E* code sets it (client, writer, stream, server, ring and spec
 * calls alike); a call that succeeds leaves it as it was. That includes the
 * failures a stream's helper thread found, read after the chime_stream_next()
 * that reports them, and the server's errors a writer's append, flush or close
 * returns. Each thread has its own (as errno): threads sharing a client read
 * their own failures, with no lock. The text is valid until the calling
 * thread's next chime call, and never NULL. The longest (a page-locking failure
 * naming every place the CUDA runtime was looked for) is under 18 KiB. */
CHIME_EXTERN const char *chime_last_error(void);

/* The log: what the library has to say that no call returns, mostly the
 * embedded server's (chime_server_*) warnings and background failures. */
typedef enum {
  CHIME_LOG_ERROR = 0, /* something failed that no call reports */
  CHIME_LOG_WARN = 1,  /* a setting or a state an operator should change */
  CHIME_LOG_INFO = 2   /* what a server did: restored, listening */
} chime_log_level_t;

/* Called with one line of text (no newline), from whichever thread has
 * it to say (a server's threads included); msg is valid during the call
 * only. It must not call chime_set_logger. */
typedef void (*chime_logger_fn)(chime_log_level_t level, const char *msg,
                                void *arg);

/* Installs fn (with arg) as the process's log hook; NULL, the default,
 * drops every line (the library never writes to stderr itself). chimed
 * installs one that writes "chimed: <line>" to stderr. Safe from any
 * thread; a line being logged as the hook changes goes to the old hook
 * or the new. */
CHIME_EXTERN void chime_set_logger(chime_logger_fn fn, void *arg);

/* "error", "warning", "info" ("unknown" for another value). */
CHIME_EXTERN const char *chime_log_level_name(chime_log_level_t level);

#ifdef __cplusplus
}
#endif
#endif
