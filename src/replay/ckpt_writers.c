/* The writers section of a checkpoint table file (ckpt_writers.h). */
#include "replay/ckpt_writers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/insert_window.h"
#include "common/key.h"

#define ENTRY_BYTES 20u

static void put_u32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *b) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)b[i] << (8 * i);
  return v;
}

static uint64_t get_u64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)b[i] << (8 * i);
  return v;
}

void chime__ckpt_writers_head(const chime__dedupe_copy_t *c, uint8_t *out) {
  put_u32(out, c->forgot ? 1u : 0u);
  put_u32(out + 4, c->nwriters);
}

size_t chime__ckpt_writers_rec(const chime__dedupe_copy_t *c, uint32_t i,
                               uint8_t *out) {
  const chime__dedupe_writer_t *w = &c->writers[i];
  uint8_t *b = out;
  put_u64(b, w->writer);
  put_u32(b + 8, w->n);
  b += 12;
  for (uint32_t k = 0; k < w->n; k++, b += ENTRY_BYTES) {
    const chime__dedupe_entry_t *e = &c->entries[w->first + k];
    put_u64(b, e->seq);
    put_u64(b + 8, e->first_key);
    put_u32(b + 16, e->count);
  }
  return (size_t)(b - out);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* A key a request of the file's shard was acked with: one of its keys,
 * or the one past its last (a request of no items at the very end). */
static int key_ok(uint64_t key, uint32_t shard) {
  return chime__key_shard(key) == shard ||
         key == chime__key_make(shard, CHIME__KEY_MAX_COUNT) + 1;
}

/* Writer i's record at b (its n entries within reach): checked. */
static int rec_check(const uint8_t *b, uint32_t n, uint32_t shard, uint32_t i,
                     char *why, size_t whylen) {
  uint64_t last = 0;
  for (uint32_t k = 0; k < n; k++, b += ENTRY_BYTES) {
    uint64_t seq = get_u64(b), key = get_u64(b + 8);
    if (seq <= last) {
      snprintf(why, whylen,
               "writer %u: request %u's id %llu is not above the one before "
               "(%llu)",
               i, k, (unsigned long long)seq, (unsigned long long)last);
      return -1;
    }
    if (!key_ok(key, shard)) {
      snprintf(why, whylen,
               "writer %u: request %llu's first key %llu is not one of shard "
               "%u",
               i, (unsigned long long)seq, (unsigned long long)key, shard);
      return -1;
    }
    last = seq;
  }
  return 0;
}

/* The writers' ids once each (sorted copy). */
static int ids_once(const chime__dedupe_copy_t *c, char *why, size_t whylen) {
  uint64_t *ids = malloc((c->nwriters ? c->nwriters : 1) * sizeof(*ids));
  if (ids == NULL)
    return -2;
  for (uint32_t i = 0; i < c->nwriters; i++)
    ids[i] = c->writers[i].writer;
  qsort(ids, c->nwriters, sizeof(*ids), cmp_u64);
  int rc = 0;
  for (uint32_t i = 1; i < c->nwriters && rc == 0; i++)
    if (ids[i] == ids[i - 1]) {
      snprintf(why, whylen, "writer %016llx is in it twice",
               (unsigned long long)ids[i]);
      rc = -1;
    }
  free(ids);
  return rc;
}

int chime__ckpt_writers_read(const uint8_t *p, size_t n, uint32_t shard,
                             chime__dedupe_copy_t *c, size_t *used, char *why,
                             size_t whylen) {
  memset(c, 0, sizeof(*c));
  if (n < CHIME__CKPT_WRITERS_HEAD) {
    snprintf(why, whylen, "cut short");
    return -1;
  }
  uint32_t flags = get_u32(p), nw = get_u32(p + 4);
  if (flags > 1 || nw > CHIME__INSERT_MAX_WRITERS ||
      nw > (n - CHIME__CKPT_WRITERS_HEAD) / 12) {
    snprintf(why, whylen, "flags %u and %u writers: not a writers section",
             flags, nw);
    return -1;
  }
  if (chime__dedupe_copy_alloc(c, nw) != 0)
    return -2;
  c->forgot = (int)flags;
  size_t off = CHIME__CKPT_WRITERS_HEAD;
  uint32_t ne = 0;
  for (uint32_t i = 0; i < nw; i++) {
    if (n - off < 12) {
      snprintf(why, whylen, "writer %u: cut short", i);
      return -1;
    }
    uint64_t id = get_u64(p + off);
    uint32_t k = get_u32(p + off + 8);
    off += 12;
    if (id == 0 || k == 0 || k > CHIME__INSERT_WINDOW) {
      snprintf(why, whylen,
               "writer %u: id %016llx with %u requests (a writer is nonzero "
               "and has 1 to %u)",
               i, (unsigned long long)id, k, CHIME__INSERT_WINDOW);
      return -1;
    }
    if ((n - off) / ENTRY_BYTES < k) {
      snprintf(why, whylen, "writer %u: cut short", i);
      return -1;
    }
    if (rec_check(p + off, k, shard, i, why, whylen) != 0)
      return -1;
    c->writers[i] = (chime__dedupe_writer_t){id, ne, k};
    for (uint32_t j = 0; j < k; j++, off += ENTRY_BYTES)
      c->entries[ne++] = (chime__dedupe_entry_t){
          get_u64(p + off), get_u64(p + off + 8), get_u32(p + off + 16)};
  }
  c->nwriters = nw;
  int rc = ids_once(c, why, whylen);
  if (rc != 0)
    return rc;
  *used = off;
  return 0;
}
