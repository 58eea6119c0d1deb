/* A protobuf-c message to and from a gRPC byte buffer, as both ends pack
 * and unpack the messages they do not read by hand. */
#ifndef CHIME_WIRE_MESSAGE_H
#define CHIME_WIRE_MESSAGE_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

/* m packed into one slice of a new byte buffer. */
grpc_byte_buffer *chime__msg_pack(const ProtobufCMessage *m);
/* A whole message in one slice (a copy when it came in pieces):
 * CHIME_EPROTO when gRPC cannot read it. */
int chime__bb_read(grpc_byte_buffer *bb, grpc_slice *out);
/* bb parsed as a message of d (free it with
 * protobuf_c_message_free_unpacked): CHIME_EPROTO when it cannot be read,
 * CHIME_EINVAL when its bytes are not such a message. */
int chime__msg_unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb,
                      ProtobufCMessage **out);

#endif
