/* libFuzzer target: a learner attaching to a ring segment it was handed
 * (src/ring/segment.c, chime_ring_attach) and taking batches from it. The
 * segment is a memfd sealed as the server seals its rings, holding the
 * fuzzer's bytes: header, producer words, publish queue and slots.
 *
 * Input: the first bytes of the segment. The segment is as long as the
 * header's total_bytes says when that is at least the input and at most
 * FUZZ_RING_MAX (the rest reads as zeros, so seeds stay small), else as long
 * as the input.
 *
 * The header is the ring format's own (src/ring/format.h, docs/ring.md):
 * magic and version first, in every version. Attach must fail with an error
 * or succeed; a header of another format version must fail as such, naming
 * both versions, whatever follows it; after a success the header holds this
 * version and this library's sample info record size, and every slot,
 * every leaf array and the sample records of every batch next() hands out
 * must lie inside the mapping (touching them would fault otherwise). */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chime/ring.h"
#include "fuzz_common.h"
#include "ring/ring_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_RING_MAX (4u << 20)

static volatile uint8_t sink;

static void touch(const void *p, uint64_t len) {
  const volatile uint8_t *b = p;
  if (len == 0)
    return;
  sink ^= b[0];
  sink ^= b[len - 1];
}

static int segment(const uint8_t *data, size_t size) {
  chime__ring_header_t hdr;
  memset(&hdr, 0, sizeof(hdr));
  memcpy(&hdr, data, size < sizeof(hdr) ? size : sizeof(hdr));
  uint64_t len = size;
  if (hdr.total_bytes >= size && hdr.total_bytes <= FUZZ_RING_MAX)
    len = hdr.total_bytes;

  int fd = memfd_create("chime-fuzz-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(ftruncate(fd, (off_t)len) == 0);
  FUZZ_CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);
  FUZZ_CHECK(
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  return fd;
}

static void use(chime_ring_t *ring) {
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  const chime_spec_t *spec = chime_ring_spec(ring);
  size_t map_len;
  const uint8_t *base = chime_ring_map_base(ring, &map_len);
  FUZZ_CHECK(base != NULL);
  FUZZ_CHECK(l->slots >= 2 && l->slots <= CHIME_RING_MAX_SLOTS);
  FUZZ_CHECK(spec->nleaves >= 1 && spec->nleaves <= CHIME_MAX_LEAVES);
  for (uint32_t s = 0; s < l->slots; s++) {
    const uint8_t *slot = chime_ring_slot_base(ring, s);
    FUZZ_CHECK(slot >= base && slot + l->slot_bytes <= base + map_len);
    touch(slot, l->slot_bytes);
  }
  for (uint32_t i = 0; i <= l->slots; i++) {
    chime_ring_view_t v;
    int rc = chime_ring_next(ring, &v, 0);
    FUZZ_CHECK(rc == 0 || rc == CHIME_ETIMEDOUT || rc == CHIME_ECORRUPT ||
               rc == CHIME_ESHUTDOWN || rc == CHIME_EBUSY);
    if (rc != 0)
      break;
    FUZZ_CHECK(v.slot < l->slots && v.count == l->batch_size);
    for (uint32_t k = 0; k < spec->nleaves; k++)
      touch(v.leaf[k], l->leaf_bytes[k]);
    touch(v.info, (uint64_t)v.count * sizeof(chime_sample_info_t));
    if (i % 2 == 0)
      FUZZ_CHECK(chime_ring_release(ring, v.slot) == 0);
  }
  chime_ring_stats_t st;
  chime_ring_stats(ring, &st);
}

/* 1 when the input starts with the magic and another version: attach
 * must then refuse it by the version, naming both. */
static int other_version(const uint8_t *data, size_t size, uint32_t *version) {
  uint64_t magic;
  if (size < offsetof(chime__ring_header_t, header_bytes))
    return 0;
  memcpy(&magic, data + offsetof(chime__ring_header_t, magic), 8);
  memcpy(version, data + offsetof(chime__ring_header_t, version), 4);
  return magic == CHIME_RING_MAGIC && *version != CHIME_RING_VERSION;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = segment(data, size);
  chime_ring_t *ring = NULL;
  uint32_t version;
  int rc = chime_ring_attach(&ring, fd, NULL);
  FUZZ_CHECK(rc == 0 || rc == CHIME_ECORRUPT || rc == CHIME_ERESOURCE);
  FUZZ_CHECK((rc == 0) == (ring != NULL));
  if (other_version(data, size, &version)) {
    char want[96];
    snprintf(want, sizeof(want),
             "format version %u, this library reads version %u", version,
             CHIME_RING_VERSION);
    FUZZ_CHECK(rc == CHIME_ECORRUPT);
    FUZZ_CHECK(strstr(chime_last_error(), want) != NULL);
  }
  if (rc == 0) {
    const chime__ring_header_t *h = chime_ring_map_base(ring, NULL);
    uint8_t nonce[16];
    FUZZ_CHECK(h->version == CHIME_RING_VERSION);
    FUZZ_CHECK(h->info_record_bytes == sizeof(chime_sample_info_t));
    use(ring);
    /* The nonce check: the segment's own passes, another does not. */
    chime_ring_nonce(ring, nonce);
    chime_ring_destroy(ring);
    FUZZ_CHECK(chime_ring_attach(&ring, fd, nonce) == 0);
    chime_ring_destroy(ring);
    nonce[0] ^= 1;
    FUZZ_CHECK(chime_ring_attach(&ring, fd, nonce) == CHIME_EPERM);
    FUZZ_CHECK(ring == NULL);
  }
  close(fd);
  return 0;
}
