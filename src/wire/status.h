/* CHIME_E* codes across gRPC. The server ends every call that fails with the
 * gRPC status its code maps to, the details text for people, and the code
 * itself in trailing metadata (CHIME__ERROR_KEY: "chime-error", the decimal
 * code, e.g. "-4"). The client takes the code from the metadata and falls
 * back to the gRPC status alone when there is none (a proxy's or gRPC's own
 * status); it never reads the text. */
#ifndef CHIME_WIRE_STATUS_H
#define CHIME_WIRE_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#define CHIME__ERROR_KEY "chime-error"
/* Room for a value and its NUL ("-2147483648"). */
#define CHIME__ERROR_VALUE_LEN 12

/* The status the server sends for a CHIME_E* code (0: OK). */
grpc_status_code chime__status_from_err(int err);
/* The code a status stands for when no chime-error came with it. Lossy:
 * UNAVAILABLE is CHIME_EUNAVAILABLE, never CHIME_ESHUTDOWN. */
int chime__err_from_status(grpc_status_code status);

/* The trailing metadata entry for err: key CHIME__ERROR_KEY (static), value
 * the decimal code (a new slice: grpc_slice_unref(md->value) when done). */
void chime__err_metadata(grpc_metadata *md, int err);
/* The code a metadata value names: a CHIME_E* code this library knows, or 0
 * for anything else (empty, not a decimal, not negative, unknown). */
int chime__err_parse(const char *p, size_t len);

/* A call's final status as a CHIME_E* code: 0 for OK; the chime-error in
 * trailing (may be NULL) when it names a known code; else
 * chime__err_from_status(status). */
int chime__status_to_err(grpc_status_code status,
                         const grpc_metadata_array *trailing);

/* A Subscribe notice's code: its `error` when known; else, from a server
 * that sends none, its gRPC `code`, where UNAVAILABLE is the shutdown notice
 * (the only notice such a server sends). */
int chime__notice_err(int32_t error, int32_t code);

#endif
