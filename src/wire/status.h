/* CHIME_E* codes <-> gRPC status codes. */
#ifndef CHIME_WIRE_STATUS_H
#define CHIME_WIRE_STATUS_H

#include <grpc/status.h>

/* The status the server sends for a CHIME_E* code. */
grpc_status_code chime__status_from_err(int err);
/* Maps a call's final status to a CHIME_E* code (UNAVAILABLE "shutting down"
 * is CHIME_ESHUTDOWN, FAILED_PRECONDITION naming "page-lock" CHIME_ECUDA). */
int chime__status_to_err(grpc_status_code status, const char *details);

#endif
