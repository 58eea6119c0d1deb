/* Messages to and from byte buffers (message.h). */
#include "wire/message.h"

#include <grpc/byte_buffer_reader.h>

#include "chime/errors.h"

grpc_byte_buffer *chime__msg_pack(const ProtobufCMessage *m) {
  size_t len = protobuf_c_message_get_packed_size(m);
  grpc_slice sl = grpc_slice_malloc(len);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  return bb;
}

int chime__bb_read(grpc_byte_buffer *bb, grpc_slice *out) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return CHIME_EPROTO;
  *out = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  return 0;
}

int chime__msg_unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb,
                      ProtobufCMessage **out) {
  grpc_slice sl;
  *out = NULL;
  if (chime__bb_read(bb, &sl) != 0)
    return CHIME_EPROTO;
  *out = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(sl),
                                   GRPC_SLICE_START_PTR(sl));
  grpc_slice_unref(sl);
  return *out != NULL ? 0 : CHIME_EINVAL;
}
