/* grpc.health.v1.Health/Check (proto/health.proto), what Kubernetes' gRPC
 * probes call: SERVING while the server serves, NOT_SERVING once it is
 * stopping, for the server as a whole ("") and for chime.v1.Chime; any
 * other service is NOT_FOUND, as the standard says. An open method
 * (call.h): no token is asked for, and it keeps being answered during a
 * stop, so an orchestrator sees the stop rather than a hang. The answer
 * tells nothing but that status. */
#include <string.h>

#include "common/errfmt.h"
#include "health.pb-c.h"
#include "server/methods.h"
#include "server/state.h"

/* The longest service name echoed in an error. */
#define NAME_SHOWN 64

static void health_on_start(chime__call_t *c) {
  grpc_slice sl;
  grpc_byte_buffer *bb = chime__call_payload(c);
  if (bb == NULL || chime__bb_read(bb, &sl) != 0) {
    chime__call_finish(c, CHIME_EINVAL, "missing HealthCheckRequest");
    return;
  }
  Grpc__Health__V1__HealthCheckRequest *req =
      grpc__health__v1__health_check_request__unpack(
          NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
  grpc_slice_unref(sl);
  if (req == NULL) {
    chime__call_finish(c, CHIME_EINVAL, "malformed HealthCheckRequest");
    return;
  }
  const char *name = req->service != NULL ? req->service : "";
  if (name[0] != '\0' && strcmp(name, "chime.v1.Chime") != 0) {
    char pn[CHIME__PRINTABLE_LEN(NAME_SHOWN)];
    chime__call_finish(c, CHIME_ENOTFOUND,
                       "unknown service '%s' (this server's are \"\" and "
                       "\"chime.v1.Chime\")",
                       chime__printable(pn, sizeof(pn), name, NAME_SHOWN));
    goto out;
  }
  Grpc__Health__V1__HealthCheckResponse resp =
      GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  resp.status =
      atomic_load(&chime__call_server(c)->stopping)
          ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
          : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  chime__call_send_msg(c, &resp);
  chime__call_finish(c, CHIME_OK, "%s", "");
out:
  grpc__health__v1__health_check_request__free_unpacked(req, NULL);
}

static void health_on_message(chime__call_t *c, grpc_byte_buffer *bb) {
  (void)c;
  if (bb != NULL)
    grpc_byte_buffer_destroy(bb);
}

const chime__call_vt_t chime__health_vt = {
    .on_start = health_on_start,
    .on_message = health_on_message,
    .open = 1,
};
