/* CHIME_E* codes <-> gRPC status codes (see status.h). */
#include <string.h>

#include "chime/errors.h"
#include "wire/status.h"

grpc_status_code chime__status_from_err(int err) {
  switch (err) {
  case CHIME_OK:
    return GRPC_STATUS_OK;
  case CHIME_EINVAL:
  case CHIME_EOVERFLOW:
    return GRPC_STATUS_INVALID_ARGUMENT;
  case CHIME_ENOTFOUND:
    return GRPC_STATUS_NOT_FOUND;
  case CHIME_ERESOURCE:
  case CHIME_ENOMEM:
  case CHIME_EBUSY:
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case CHIME_EPERM:
    return GRPC_STATUS_PERMISSION_DENIED;
  case CHIME_ESHUTDOWN:
  case CHIME_EUNAVAILABLE:
  case CHIME_EDISCONNECTED:
    return GRPC_STATUS_UNAVAILABLE;
  case CHIME_ETIMEDOUT:
    return GRPC_STATUS_DEADLINE_EXCEEDED;
  case CHIME_ENOTSUP:
    return GRPC_STATUS_UNIMPLEMENTED;
  case CHIME_ECUDA:
    return GRPC_STATUS_FAILED_PRECONDITION;
  default:
    return GRPC_STATUS_INTERNAL;
  }
}

int chime__status_to_err(grpc_status_code status, const char *details) {
  switch (status) {
  case GRPC_STATUS_OK:
    return 0;
  case GRPC_STATUS_FAILED_PRECONDITION:
    /* The server could not page-lock the stream's ring (docs/protocol.md):
     * the learner hears the same code as from its own chime_ring_pin(). */
    if (details && strstr(details, "page-lock"))
      return CHIME_ECUDA;
    return CHIME_EINVAL;
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_OUT_OF_RANGE:
    return CHIME_EINVAL;
  case GRPC_STATUS_NOT_FOUND:
    return CHIME_ENOTFOUND;
  case GRPC_STATUS_DEADLINE_EXCEEDED:
    return CHIME_ETIMEDOUT;
  case GRPC_STATUS_RESOURCE_EXHAUSTED:
    return CHIME_ERESOURCE;
  case GRPC_STATUS_PERMISSION_DENIED:
  case GRPC_STATUS_UNAUTHENTICATED:
    return CHIME_EPERM;
  case GRPC_STATUS_UNIMPLEMENTED:
    return CHIME_ENOTSUP;
  case GRPC_STATUS_ALREADY_EXISTS:
    return CHIME_EEXIST;
  case GRPC_STATUS_CANCELLED:
    return CHIME_ECLOSED;
  case GRPC_STATUS_UNAVAILABLE:
    if (details && strstr(details, "shutting down"))
      return CHIME_ESHUTDOWN;
    return CHIME_EUNAVAILABLE;
  default:
    return CHIME_EPROTO;
  }
}
