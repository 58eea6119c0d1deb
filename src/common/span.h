/* A span: a piece of memory read in place, such as one gRPC slice of a
 * message, shared by the protobuf reader and the tables that copy from it. */
#ifndef CHIME_COMMON_SPAN_H
#define CHIME_COMMON_SPAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  const uint8_t *p;
  size_t len;
} chime__span_t;

#endif
