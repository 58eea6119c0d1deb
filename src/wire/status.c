/* CHIME_E* codes across gRPC (see status.h). */
#include <stdio.h>
#include <string.h>

#include <grpc/slice.h>

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
  case CHIME_EAUTH:
    return GRPC_STATUS_UNAUTHENTICATED;
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
  case CHIME_EEXIST:
    return GRPC_STATUS_ALREADY_EXISTS;
  case CHIME_EFORGOTTEN:
    /* Retry at a higher level: the writer's requests go on under a new
     * writer id (docs/protocol.md, Insert). */
    return GRPC_STATUS_ABORTED;
  default:
    return GRPC_STATUS_INTERNAL;
  }
}

int chime__err_from_status(grpc_status_code status) {
  switch (status) {
  case GRPC_STATUS_OK:
    return 0;
  case GRPC_STATUS_FAILED_PRECONDITION:
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
    return CHIME_EPERM;
  case GRPC_STATUS_UNAUTHENTICATED:
    return CHIME_EAUTH;
  case GRPC_STATUS_UNIMPLEMENTED:
    return CHIME_ENOTSUP;
  case GRPC_STATUS_ALREADY_EXISTS:
    return CHIME_EEXIST;
  case GRPC_STATUS_CANCELLED:
    return CHIME_ECLOSED;
  case GRPC_STATUS_UNAVAILABLE:
    return CHIME_EUNAVAILABLE;
  default:
    return CHIME_EPROTO;
  }
}

/* A code chime_strerror() knows, other than 0. */
static int known(long v) {
  return v < 0 && v >= INT32_MIN &&
         strcmp(chime_err_name((int)v), "CHIME_UNKNOWN") != 0;
}

void chime__err_metadata(grpc_metadata *md, int err) {
  char buf[CHIME__ERROR_VALUE_LEN];
  snprintf(buf, sizeof(buf), "%d", err);
  memset(md, 0, sizeof(*md));
  md->key = grpc_slice_from_static_string(CHIME__ERROR_KEY);
  md->value = grpc_slice_from_copied_string(buf);
}

int chime__err_parse(const char *p, size_t len) {
  /* "-" and at most 10 digits: strict, so a value is never half-read. */
  if (len < 2 || len > CHIME__ERROR_VALUE_LEN - 1 || p[0] != '-')
    return 0;
  long v = 0;
  for (size_t i = 1; i < len; i++) {
    if (p[i] < '0' || p[i] > '9')
      return 0;
    v = v * 10 + (p[i] - '0');
  }
  return known(-v) ? (int)-v : 0;
}

int chime__status_to_err(grpc_status_code status,
                         const grpc_metadata_array *trailing) {
  if (status == GRPC_STATUS_OK)
    return 0;
  for (size_t i = 0; trailing && i < trailing->count; i++) {
    const grpc_metadata *m = &trailing->metadata[i];
    if (!grpc_slice_str_cmp(m->key, CHIME__ERROR_KEY)) {
      int code = chime__err_parse((const char *)GRPC_SLICE_START_PTR(m->value),
                                  GRPC_SLICE_LENGTH(m->value));
      if (code)
        return code;
    }
  }
  return chime__err_from_status(status);
}

int chime__notice_err(int32_t error, int32_t code) {
  if (known(error))
    return error;
  if (code == GRPC_STATUS_UNAVAILABLE)
    return CHIME_ESHUTDOWN;
  return chime__err_from_status((grpc_status_code)code);
}
