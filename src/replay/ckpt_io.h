/* The checkpoint files' byte order and buffering, shared by the files
 * that write and read them (ckpt_format.c, ckpt_seq.c): little-endian
 * integers, a write buffer with a running CRC-32C, and a reader that
 * marks itself bad instead of reading past its end. Private to those
 * files (the short names are theirs). */
#ifndef CHIME_REPLAY_CKPT_IO_H
#define CHIME_REPLAY_CKPT_IO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "replay/ckpt_format.h"
#include "replay/crc32c.h"

typedef struct {
  int fd;
  uint8_t *buf;
  size_t len;
  uint32_t crc;
  uint64_t total;
  int err; /* errno of the first failed write */
} wr_t;

static inline void wr_flush(wr_t *w) {
  size_t off = 0;
  while (off < w->len && w->err == 0) {
    ssize_t k = write(w->fd, w->buf + off, w->len - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      w->err = k < 0 ? errno : EIO;
    else
      off += (size_t)k;
  }
  w->len = 0;
}

/* Items written between early unpins (chime__table_view_unpin). */
#define UNPIN_EVERY 1024u

static inline void wr_raw(wr_t *w, const void *p, size_t n) {
  const uint8_t *s = p;
  w->crc = chime__crc32c(w->crc, p, n);
  w->total += n;
  while (n > 0) {
    size_t take = CHIME__CKPT_WBUF - w->len < n ? CHIME__CKPT_WBUF - w->len : n;
    memcpy(w->buf + w->len, s, take);
    w->len += take;
    s += take;
    n -= take;
    if (w->len == CHIME__CKPT_WBUF)
      wr_flush(w);
  }
}

static inline void wr_u32(wr_t *w, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  wr_raw(w, b, 4);
}

static inline void wr_u64(wr_t *w, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  wr_raw(w, b, 8);
}

static inline void wr_str(wr_t *w, const char *s) {
  wr_u32(w, (uint32_t)strlen(s));
  wr_raw(w, s, strlen(s));
}

typedef struct {
  const uint8_t *p;
  size_t n, off;
  int bad;
} rd_t;

static inline const uint8_t *rd_take(rd_t *r, size_t n) {
  if (r->bad || r->n - r->off < n) {
    r->bad = 1;
    return NULL;
  }
  const uint8_t *s = r->p + r->off;
  r->off += n;
  return s;
}

static inline uint32_t rd_u32(rd_t *r) {
  const uint8_t *s = rd_take(r, 4);
  uint32_t v = 0;
  for (int i = 0; s != NULL && i < 4; i++)
    v |= (uint32_t)s[i] << (8 * i);
  return v;
}

static inline uint64_t rd_u64(rd_t *r) {
  const uint8_t *s = rd_take(r, 8);
  uint64_t v = 0;
  for (int i = 0; s != NULL && i < 8; i++)
    v |= (uint64_t)s[i] << (8 * i);
  return v;
}

#endif
