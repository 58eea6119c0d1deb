/* A grpc.health.v1.Health/Check over a raw call (healthcheck.h). */
#include "healthcheck.h"

#include <stdio.h>

#include "health.pb-c.h"
#include "rawcall.h"

int chime__health_check(grpc_channel *ch, const char *service,
                        const char *token, grpc_status_code *status,
                        int *serving, char *details, size_t len) {
  chime__raw_t r;
  grpc_metadata md;
  char bearer[128];
  size_t nmd = 0;
  if (token != NULL) {
    snprintf(bearer, sizeof bearer, "Bearer %s", token);
    md.key = grpc_slice_from_static_string("authorization");
    md.value = grpc_slice_from_copied_string(bearer);
    nmd = 1;
  }
  *serving = -1;
  *status = GRPC_STATUS_UNKNOWN;
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)service;
  int rc = chime__raw_start_md(&r, ch, "/grpc.health.v1.Health/Check", 10000,
                               &md, nmd);
  if (rc == 0) {
    if (chime__raw_send(&r, &req.base) == 0) {
      ProtobufCMessage *m = NULL;
      (void)chime__raw_recv_msg(
          &r, &grpc__health__v1__health_check_response__descriptor, &m, 10000);
      if (m != NULL) {
        *serving = ((Grpc__Health__V1__HealthCheckResponse *)m)->status;
        protobuf_c_message_free_unpacked(m, NULL);
      }
    }
    rc = chime__raw_finish(&r, status, details, len, 10000);
  }
  chime__raw_destroy(&r);
  if (nmd > 0)
    grpc_slice_unref(md.value);
  return rc;
}
