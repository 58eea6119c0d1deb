/* chime error codes.
 *
 * Every public call returns an int: 0 on success or a negative CHIME_E* code.
 * No call sets errno. chime_strerror() gives a sentence, chime_err_name() the
 * symbolic name ("CHIME_ETIMEDOUT"). Objects keep a detail string for their
 * last error (see e.g. chime_client_last_error()).
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

/* Room for the longest error text chime writes: a page-locking failure
 * names every place the CUDA runtime was looked for (docs/pinning.md). An
 * err buffer of CHIME_PIN_ERRLEN bytes (chime_server_create, chime_ring_pin)
 * holds the whole message. */
#define CHIME_PIN_ERRLEN 16384

/* A sentence for the code; "unknown error" for codes chime never returns. */
CHIME_EXTERN const char *chime_strerror(int err);
/* The symbolic name ("CHIME_EBUSY"), or "CHIME_UNKNOWN". */
CHIME_EXTERN const char *chime_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif
