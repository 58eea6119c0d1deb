/* Protobuf bytes written by hand, pbread.h's other half: the chunk
 * framing (chunk.c) writes its headers with these, and tests feed a reader
 * what no encoder would make (unknown fields, a field twice). */
#ifndef CHIME_WIRE_PBWRITE_H
#define CHIME_WIRE_PBWRITE_H

#include <stddef.h>
#include <stdint.h>

/* v as a base-128 varint at p; returns its bytes (at most 10). */
static inline size_t chime__pb_put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* A field's key (number, wire type) at p; returns its bytes. */
static inline size_t chime__pb_put_tag(uint8_t *p, uint32_t number, int wire) {
  return chime__pb_put_varint(p, (uint64_t)number << 3 | (uint64_t)wire);
}

#endif
