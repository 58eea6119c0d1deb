/* The one place for gRPC method paths and CHIME_E* -> gRPC status codes. */
#include "server/server.h"

const char *const chime__method_path[CHIME__M_COUNT] = {
    [CHIME__M_GETINFO] = "/chime.v1.Chime/GetInfo",
    [CHIME__M_STATS] = "/chime.v1.Chime/Stats",
    [CHIME__M_INSERT] = "/chime.v1.Chime/Insert",
    [CHIME__M_SUBSCRIBE] = "/chime.v1.Chime/Subscribe",
};

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
