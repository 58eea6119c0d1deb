/* Small gRPC C core helpers shared by the client's calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/fork.h"
#include "client/internal.h"
#include "wire/message.h"

gpr_timespec chime__deadline_ms(int timeout_ms) {
  if (timeout_ms < 0)
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

grpc_byte_buffer *chime__pack(const ProtobufCMessage *msg) {
  chime__gate_enter();
  grpc_byte_buffer *bb = chime__msg_pack(msg);
  chime__gate_leave();
  return bb;
}

void chime__bb_free(grpc_byte_buffer *bb) {
  if (!bb)
    return;
  chime__gate_enter();
  grpc_byte_buffer_destroy(bb);
  chime__gate_leave();
}

grpc_byte_buffer *chime__bb_copy(grpc_byte_buffer *bb) {
  chime__gate_enter();
  grpc_byte_buffer *copy = grpc_byte_buffer_copy(bb);
  chime__gate_leave();
  return copy;
}

ProtobufCMessage *chime__unpack(const ProtobufCMessageDescriptor *desc,
                                grpc_byte_buffer *bb) {
  ProtobufCMessage *m;
  chime__gate_enter();
  (void)chime__msg_unpack(desc, bb, &m); /* m: NULL when it failed */
  chime__gate_leave();
  return m;
}

void chime__slice_str(grpc_slice slice, char *buf, size_t len) {
  if (!len)
    return;
  size_t n = GRPC_SLICE_LENGTH(slice);
  if (n >= len)
    n = len - 1;
  memcpy(buf, GRPC_SLICE_START_PTR(slice), n);
  buf[n] = '\0';
}

void chime__cq_destroy(grpc_completion_queue *cq) {
  if (!cq)
    return;
  /* Not woken by a fork: once nothing is in flight (the owner drained its
   * call) the shutdown comes at once, a pending wake-up (fork.c) first. */
  chime__gate_enter();
  grpc_completion_queue_shutdown(cq);
  while (
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
          .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  chime__gate_leave();
}
