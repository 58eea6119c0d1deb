/* The ring's memory: one sealed memfd, its header, and the consumer's checks.
 *
 * The producer creates and maps the segment read-write. A consumer is given
 * only an fd; it trusts nothing in the header until it has recomputed every
 * size and offset from the spec and compared them, and checked them against
 * the real size of the file. Only its own control region is mapped writable. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/detail.h"
#include "ring/ring_internal.h"
#include "common/spec.h"
#include "ring/layout.h"

int chime__ring_fail(int rc, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  return chime__detail(rc, why);
}

/* The short name this file uses for it. */
#define fail chime__ring_fail

uint64_t chime__page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > (long)CHIME_RING_PAGE ? (uint64_t)p : CHIME_RING_PAGE;
}

int chime__ring_bytes(const chime_ring_layout_t *layout, uint64_t *out) {
  chime__ring_regions_t reg;
  if (layout == NULL || out == NULL)
    return CHIME_EINVAL;
  int rc = chime__ring_regions(layout, chime__page_size(), &reg);
  if (rc == 0)
    *out = reg.total_bytes;
  return rc;
}

int chime__ring_regions(const chime_ring_layout_t *layout, uint64_t page_size,
                        chime__ring_regions_t *out) {
  chime__ring_regions_t r;
  uint64_t end;
  if (layout->slots == 0 || layout->slots > CHIME_RING_MAX_SLOTS ||
      page_size == 0 || (page_size & (page_size - 1)) != 0)
    return CHIME_EINVAL;
  memset(&r, 0, sizeof(r));
  /* Small, bounded terms: slots <= CHIME_RING_MAX_SLOTS. */
  r.prod_offset = (sizeof(chime__ring_header_t) + CHIME_RING_CACHELINE - 1) &
                  ~(uint64_t)(CHIME_RING_CACHELINE - 1);
  r.queue_offset = r.prod_offset + sizeof(chime__ring_prod_t);
  end = r.queue_offset + (uint64_t)layout->slots * sizeof(chime__ring_pubent_t);
  if (chime__align_up(end, page_size, &r.ctrl_offset) != 0 ||
      chime__align_up(CHIME__RING_RELCOUNT_OFFSET +
                          (uint64_t)layout->slots * sizeof(uint32_t),
                      page_size, &r.ctrl_bytes) != 0)
    return CHIME_EOVERFLOW;
  r.data_offset = r.ctrl_offset + r.ctrl_bytes;
  r.data_bytes = layout->data_bytes;
  if (__builtin_add_overflow(r.data_offset, r.data_bytes, &r.total_bytes) ||
      r.total_bytes > (uint64_t)SIZE_MAX)
    return CHIME_EOVERFLOW;
  *out = r;
  return 0;
}

static void segment_point(chime__segment_t *seg,
                          const chime__ring_regions_t *r) {
  seg->hdr = (chime__ring_header_t *)seg->base;
  seg->prod = (chime__ring_prod_t *)(seg->base + r->prod_offset);
  seg->queue = (chime__ring_pubent_t *)(seg->base + r->queue_offset);
  seg->ctrl = (chime__ring_ctrl_t *)(seg->base + r->ctrl_offset);
  seg->relcount = (_Atomic uint32_t *)(seg->base + r->ctrl_offset +
                                       CHIME__RING_RELCOUNT_OFFSET);
  seg->data = seg->base + r->data_offset;
}

/* The spec in the format's types, every unused byte zero (the header is
 * canonical). spec is valid, so it fits: format.h asserts the limits. */
static void fmt_put_spec(chime__ring_header_t *h, const chime_spec_t *spec) {
  h->nleaves = spec->nleaves;
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    const chime_leaf_t *s = &spec->leaves[i];
    chime__ring_fmt_leaf_t *d = &h->leaves[i];
    strncpy(d->name, s->name, sizeof(d->name) - 1);
    d->dtype = (uint32_t)s->dtype | (s->ragged ? CHIME__RING_FMT_RAGGED : 0) |
               s->shares << CHIME__RING_FMT_SHARES_SHIFT;
    d->ndim = s->ndim;
    for (uint32_t k = 0; k < s->ndim; k++)
      d->shape[k] = s->shape[k];
  }
}

/* The header's spec in the public types, or why it cannot be: this library
 * holds at most CHIME_MAX_* of each, and a name must end within its field.
 * The values themselves are checked by chime_spec_validate() after. */
static int fmt_get_spec(const chime__ring_header_t *h, chime_spec_t *spec,
                        char *why, size_t len) {
  memset(spec, 0, sizeof(*spec));
  if (h->nleaves == 0 || h->nleaves > CHIME_MAX_LEAVES) {
    snprintf(why, len, "%u leaves, expected 1..%u", h->nleaves,
             (unsigned)CHIME_MAX_LEAVES);
    return CHIME_ECORRUPT;
  }
  spec->nleaves = h->nleaves;
  for (uint32_t i = 0; i < h->nleaves; i++) {
    const chime__ring_fmt_leaf_t *s = &h->leaves[i];
    chime_leaf_t *d = &spec->leaves[i];
    const char *nul = memchr(s->name, '\0', sizeof(s->name));
    if (nul == NULL || (size_t)(nul - s->name) >= CHIME_MAX_NAME) {
      snprintf(why, len, "leaf %u: name without NUL", i);
      return CHIME_ECORRUPT;
    }
    if (s->ndim > CHIME_MAX_DIMS) {
      snprintf(why, len, "leaf %u: %u dims, at most %u", i, s->ndim,
               (unsigned)CHIME_MAX_DIMS);
      return CHIME_ECORRUPT;
    }
    memcpy(d->name, s->name, (size_t)(nul - s->name));
    /* Any value: chime_spec_validate() refuses what is no CHIME_DTYPE_*,
     * a ragged flag on a scalar, a shared length that is none. */
    d->dtype = (chime_dtype_t)(s->dtype & CHIME__RING_FMT_DTYPE_MASK);
    d->ragged = (s->dtype & CHIME__RING_FMT_RAGGED) != 0;
    d->shares = s->dtype >> CHIME__RING_FMT_SHARES_SHIFT;
    if ((s->dtype & CHIME__RING_FMT_DTYPE_RESERVED) != 0) {
      snprintf(why, len, "leaf %u: dtype word 0x%x has reserved bits set", i,
               s->dtype);
      return CHIME_ECORRUPT;
    }
    d->ndim = s->ndim;
    for (uint32_t k = 0; k < s->ndim; k++)
      d->shape[k] = s->shape[k];
  }
  return 0;
}

/* Every byte of a header but the magic, from what determines it. The
 * producer writes this; the consumer builds it again from the facts it
 * has checked and compares the whole. */
static void header_fill(chime__ring_header_t *h, const chime_spec_t *spec,
                        const chime_ring_layout_t *layout,
                        const chime__ring_regions_t *regions,
                        uint64_t page_size, const uint8_t nonce[16]) {
  memset(h, 0, sizeof(*h));
  h->version = CHIME_RING_VERSION;
  h->header_bytes = (uint32_t)sizeof(*h);
  h->total_bytes = regions->total_bytes;
  h->prod_offset = regions->prod_offset;
  h->queue_offset = regions->queue_offset;
  h->ctrl_offset = regions->ctrl_offset;
  h->ctrl_bytes = regions->ctrl_bytes;
  h->data_offset = regions->data_offset;
  h->data_bytes = regions->data_bytes;
  h->page_size = page_size;
  memcpy(h->nonce, nonce, sizeof(h->nonce));
  h->slots = layout->slots;
  h->batch_size = layout->batch_size;
  h->slot_bytes = layout->slot_bytes;
  h->info_offset = layout->info_offset;
  h->info_record_bytes = (uint32_t)sizeof(chime_sample_info_t);
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    h->leaf_offset[i] = layout->leaf_offset[i];
    h->leaf_bytes[i] = layout->leaf_bytes[i];
  }
  fmt_put_spec(h, spec);
}

int chime__segment_create(chime__segment_t *seg, const chime_spec_t *spec,
                          const chime_ring_layout_t *layout,
                          const chime__ring_regions_t *regions,
                          uint64_t page_size, chime_spec_t *canon) {
  chime__ring_header_t *hdr;
  uint8_t nonce[16];
  int rc = 0;
  void *base;

  memset(seg, 0, sizeof(*seg));
  seg->fd = memfd_create("chime-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (seg->fd < 0) {
    rc = fail(CHIME_ESYS, "memfd_create: %s", strerror(errno));
    goto out;
  }
  if (ftruncate(seg->fd, (off_t)regions->total_bytes) != 0) {
    rc = fail(errno == ENOMEM || errno == ENOSPC || errno == EFBIG
                  ? CHIME_ERESOURCE
                  : CHIME_ESYS,
              "ftruncate(%llu): %s", (unsigned long long)regions->total_bytes,
              strerror(errno));
    goto out;
  }
  /* A consumer can then trust the size it fstat()s for as long as it maps. */
  if (fcntl(seg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
      0) {
    rc = fail(CHIME_ESYS, "sealing the ring: %s", strerror(errno));
    goto out;
  }
  seg->len = (size_t)regions->total_bytes;
  base = mmap(NULL, seg->len, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
  if (base == MAP_FAILED) {
    rc = fail(errno == ENOMEM ? CHIME_ERESOURCE : CHIME_ESYS, "mmap(%zu): %s",
              seg->len, strerror(errno));
    goto out;
  }
  seg->base = base;
  segment_point(seg, regions);

  if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
    rc = fail(CHIME_ESYS, "getrandom: %s", strerror(errno));
    goto out;
  }
  hdr = seg->hdr;
  header_fill(hdr, spec, layout, regions, page_size, nonce);
  rc = fmt_get_spec(hdr, canon, NULL, 0); /* cannot fail: spec is valid */
  if (rc != 0) {
    rc = fail(CHIME_EINVAL, "ring create: spec does not fit the format");
    goto out;
  }
  /* Magic last: a header is either complete or not a ring. */
  atomic_thread_fence(memory_order_release);
  hdr->magic = CHIME_RING_MAGIC;
out:
  if (rc != 0)
    chime__segment_close(seg);
  return rc;
}

/* Every check the consumer makes before it believes a header. `hdr` is a
 * private copy, so the producer cannot change it between check and use;
 * `want` is scratch for the canonical header. */
static int header_check(const chime__ring_header_t *hdr,
                        chime__ring_header_t *want, uint64_t file_size,
                        const uint8_t nonce[16], chime_spec_t *spec,
                        chime_ring_layout_t *layout,
                        chime__ring_regions_t *regions) {
  const size_t lay_at = offsetof(chime__ring_header_t, slots);
  const size_t lay_end = offsetof(chime__ring_header_t, leaves);
  const size_t reg_at = offsetof(chime__ring_header_t, total_bytes);
  const size_t reg_end = offsetof(chime__ring_header_t, page_size);
  char why[160];
  int rc;

  if (hdr->header_bytes != sizeof(*hdr))
    return fail(CHIME_ECORRUPT, "ring header: header size %u, expected %zu",
                hdr->header_bytes, sizeof(*hdr));
  if (hdr->page_size != chime__page_size())
    return fail(CHIME_ECORRUPT, "ring header: page size %llu, host has %llu",
                (unsigned long long)hdr->page_size,
                (unsigned long long)chime__page_size());
  if (hdr->total_bytes != file_size)
    return fail(
        CHIME_ECORRUPT, "ring header: says %llu bytes, segment has %llu",
        (unsigned long long)hdr->total_bytes, (unsigned long long)file_size);
  if (hdr->info_record_bytes != sizeof(chime_sample_info_t))
    return fail(CHIME_ECORRUPT,
                "ring header: sample info records of %u bytes, this "
                "library's are %zu",
                hdr->info_record_bytes, sizeof(chime_sample_info_t));
  why[0] = '\0';
  rc = fmt_get_spec(hdr, spec, why, sizeof(why));
  if (rc == 0)
    rc = chime__spec_validate(spec, why, sizeof(why));
  if (rc != 0)
    return fail(CHIME_ECORRUPT, "ring header: bad spec: %s", why);
  rc = chime__ring_layout(layout, spec, hdr->batch_size, hdr->slots, why,
                          sizeof(why));
  if (rc != 0)
    return fail(CHIME_ECORRUPT, "ring header: bad layout: %s", why);
  rc = chime__ring_regions(layout, hdr->page_size, regions);
  if (rc != 0)
    return fail(CHIME_ECORRUPT, "ring header: regions overflow");
  /* Everything else follows from what was just checked: the header must be
   * the one a producer writes for it, byte for byte. */
  header_fill(want, spec, layout, regions, hdr->page_size, hdr->nonce);
  want->magic = hdr->magic;
  if (memcmp((const uint8_t *)want + lay_at, (const uint8_t *)hdr + lay_at,
             lay_end - lay_at) != 0)
    return fail(CHIME_ECORRUPT,
                "ring header: layout differs from the one its spec implies");
  if (memcmp((const uint8_t *)want + reg_at, (const uint8_t *)hdr + reg_at,
             reg_end - reg_at) != 0)
    return fail(CHIME_ECORRUPT,
                "ring header: region offsets or sizes differ from the layout");
  if (memcmp(want, hdr, sizeof(*hdr)) != 0)
    return fail(CHIME_ECORRUPT, "ring header: bytes past the spec's leaves "
                                "or names are not zero");
  if (nonce != NULL && memcmp(nonce, hdr->nonce, sizeof(hdr->nonce)) != 0)
    return fail(CHIME_EPERM, "ring nonce does not match the descriptor");
  return 0;
}

/* The first thing a consumer reads, in every format version: the magic
 * and the version at 0 and 8. Another version's header is refused by name
 * before its size or anything else is looked at. */
static int header_version_check(const chime__ring_header_t *hdr) {
  if (hdr->magic != CHIME_RING_MAGIC)
    return fail(CHIME_ECORRUPT, "ring header: bad magic %#llx",
                (unsigned long long)hdr->magic);
  if (hdr->version != CHIME_RING_VERSION)
    return fail(CHIME_ECORRUPT,
                "ring header: format version %u, this library reads version "
                "%u (the ring's producer is another chime release)",
                hdr->version, CHIME_RING_VERSION);
  return 0;
}

int chime__segment_attach(chime__segment_t *seg, int fd,
                          const uint8_t nonce[16], chime_spec_t *spec,
                          chime_ring_layout_t *layout) {
  const size_t prefix = offsetof(chime__ring_header_t, header_bytes);
  chime__ring_header_t *hdr = NULL, *want = NULL;
  chime__ring_regions_t regions;
  size_t hdr_len = 0;
  struct stat st;
  void *p;
  int seals, rc = 0;

  memset(seg, 0, sizeof(*seg));
  seg->fd = -1;
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = fail(CHIME_EINVAL, "ring fd is not an open file");
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = fail(CHIME_ECORRUPT, "ring fd is not a memory file");
    goto out;
  }
  /* Without these seals the producer could shrink the file under us and a
   * read of a mapped slot would SIGBUS. Seals first, then the size: a size
   * read before the seals could be shrunk before they were set. */
  seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
                       (F_SEAL_SHRINK | F_SEAL_GROW)) {
    rc = fail(CHIME_ECORRUPT, "ring segment is not sealed against resizing");
    goto out;
  }
  if (fstat(fd, &st) != 0) {
    rc = fail(CHIME_EINVAL, "ring fd is not an open file");
    goto out;
  }
  if (st.st_size < 0 || (uint64_t)st.st_size < prefix) {
    rc = fail(CHIME_ECORRUPT, "ring segment of %lld bytes has no header",
              (long long)st.st_size);
    goto out;
  }
  hdr = calloc(1, sizeof(*hdr));
  want = malloc(sizeof(*want));
  if (hdr == NULL || want == NULL) {
    rc = fail(CHIME_ENOMEM, "ring attach: out of memory");
    goto out;
  }
  /* No more than the file: a mapped page past its end would SIGBUS. */
  hdr_len =
      (uint64_t)st.st_size < sizeof(*hdr) ? (size_t)st.st_size : sizeof(*hdr);
  p = mmap(NULL, hdr_len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    rc = fail(CHIME_ESYS, "mmap ring header: %s", strerror(errno));
    goto out;
  }
  memcpy(hdr, p, hdr_len);
  munmap(p, hdr_len);
  rc = header_version_check(hdr);
  if (rc != 0)
    goto out;
  if (hdr_len < sizeof(*hdr)) {
    rc = fail(CHIME_ECORRUPT, "ring segment of %lld bytes has no header",
              (long long)st.st_size);
    goto out;
  }
  rc = header_check(hdr, want, (uint64_t)st.st_size, nonce, spec, layout,
                    &regions);
  if (rc != 0)
    goto out;

  seg->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (seg->fd < 0) {
    rc = fail(CHIME_ESYS, "dup ring fd: %s", strerror(errno));
    goto out;
  }
  seg->len = (size_t)regions.total_bytes;
  p = mmap(NULL, seg->len, PROT_READ, MAP_SHARED, seg->fd, 0);
  if (p == MAP_FAILED) {
    rc = fail(errno == ENOMEM ? CHIME_ERESOURCE : CHIME_ESYS,
              "mmap ring (%zu bytes): %s", seg->len, strerror(errno));
    goto out;
  }
  seg->base = p;
  /* Our control words, writable, in place over the read-only view. */
  p = mmap(seg->base + regions.ctrl_offset, (size_t)regions.ctrl_bytes,
           PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, seg->fd,
           (off_t)regions.ctrl_offset);
  if (p == MAP_FAILED) {
    rc = fail(errno == EACCES ? CHIME_EPERM : CHIME_ESYS,
              "mmap ring control words writable: %s", strerror(errno));
    goto out;
  }
  segment_point(seg, &regions);
out:
  free(hdr);
  free(want);
  if (rc != 0)
    chime__segment_close(seg);
  return rc;
}

void chime__segment_close(chime__segment_t *seg) {
  if (seg->base != NULL)
    munmap(seg->base, seg->len);
  if (seg->fd >= 0)
    close(seg->fd);
  memset(seg, 0, sizeof(*seg));
  seg->fd = -1;
}
