/* The ring handle (handle.h) made, attached, set up, shut down,
 * inspected and destroyed: everything but the per-batch path, which is
 * ring.c (whose top comment has the protocol). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ring/handle.h"
#include "ring/layout.h"

/* --- producer --- */

int chime__ring_create(chime_ring_t **out, const chime_spec_t *spec,
                       uint32_t batch_size, uint32_t slots) {
  chime__ring_regions_t regions;
  chime_ring_t *ring = NULL;
  uint64_t page = chime__page_size();
  char why[160];
  int rc;

  if (out == NULL || spec == NULL)
    return chime__ring_fail(CHIME_EINVAL, "ring create: no out or spec");
  *out = NULL;
  ring = calloc(1, sizeof(*ring));
  if (ring == NULL)
    return chime__ring_fail(CHIME_ENOMEM, "ring create: out of memory");
  ring->seg.fd = -1;
  ring->spin_ns[SIDE_PRODUCER] = CHIME_RING_SPIN_MIN_NS;
  ring->spin_ns[SIDE_CONSUMER] = CHIME_RING_SPIN_MIN_NS;
  ring->wake_at = 1;
  rc = chime__ring_layout(&ring->layout, spec, batch_size, slots, why,
                          sizeof(why));
  if (rc != 0) {
    chime__ring_fail(rc, "ring layout: %s", why);
    goto out;
  }
  rc = chime__ring_regions(&ring->layout, page, &regions);
  if (rc != 0) {
    chime__ring_fail(rc, "ring regions: %s", chime_strerror(rc));
    goto out;
  }
  ring->pub_per_slot = calloc(slots, sizeof(*ring->pub_per_slot));
  ring->last_seq = calloc(slots, sizeof(*ring->last_seq));
  ring->seen_free = malloc(slots);
  ring->acquired = calloc(slots, 1);
  ring->held = calloc(slots, 1);
  if (ring->pub_per_slot == NULL || ring->last_seq == NULL ||
      ring->seen_free == NULL || ring->acquired == NULL || ring->held == NULL) {
    rc = chime__ring_fail(CHIME_ENOMEM, "ring create: out of memory");
    goto out;
  }
  memset(ring->seen_free, 1, slots); /* none published yet */
  rc = chime__segment_create(&ring->seg, spec, &ring->layout, &regions, page,
                             &ring->spec);
  if (rc != 0)
    goto out;
  memcpy(ring->nonce, ring->seg.hdr->nonce, sizeof(ring->nonce));
  *out = ring;
  ring = NULL;
out:
  chime_ring_destroy(ring);
  return rc;
}

int chime__ring_set_wake_at(chime_ring_t *ring, uint32_t n) {
  if (ring == NULL || n == 0)
    return CHIME_EINVAL;
  if (ring->consumer)
    return CHIME_EPERM;
  /* More than `slots` could never be free; the consumer's miss in next()
   * would still wake us, but only then. */
  ring->wake_at = n < ring->layout.slots ? n : ring->layout.slots;
  return 0;
}

int chime__ring_set_ready_max(chime_ring_t *ring, uint32_t n) {
  if (ring == NULL)
    return CHIME_EINVAL;
  if (ring->consumer)
    return CHIME_EPERM;
  /* A full ring holds no more: no limit, no bit. */
  ring->ready_max = n < ring->layout.slots ? n : 0;
  return 0;
}

void chime__ring_shutdown(chime_ring_t *ring) {
  /* A consumer maps the flag read-only; its way out is set_disconnected. */
  if (ring == NULL || ring->consumer)
    return;
  atomic_store_explicit(&ring->seg.prod->shutdown, 1, memory_order_seq_cst);
  bell_ring(&ring->seg.ctrl->cons_bell, INT_MAX);
  bell_ring(&ring->seg.ctrl->prod_bell, INT_MAX);
}

uint32_t chime__ring_reclaim(chime_ring_t *ring) {
  chime__ring_ctrl_t *ctrl;
  uint32_t n = 0;

  if (ring == NULL || ring->consumer)
    return 0;
  ctrl = ring->seg.ctrl;
  for (uint32_t s = 0; s < ring->layout.slots; s++) {
    uint32_t want = ring->pub_per_slot[s];
    if (atomic_exchange_explicit(&ring->seg.relcount[s], want,
                                 memory_order_acq_rel) != want &&
        !ring->seen_free[s])
      n++;
    ring->seen_free[s] = 1;
  }
  atomic_store_explicit(&ctrl->taken, ring->pub, memory_order_release);
  atomic_store_explicit(&ctrl->leases, 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&ring->seg.prod->generation, 1,
                            memory_order_release);
  return n;
}

/* --- consumer --- */

int chime_ring_attach(chime_ring_t **out, int fd, const uint8_t nonce[16]) {
  chime_ring_t *ring = NULL;
  int rc;

  if (out == NULL)
    return chime__ring_fail(CHIME_EINVAL, "ring attach: no out");
  *out = NULL;
  ring = calloc(1, sizeof(*ring));
  if (ring == NULL)
    return chime__ring_fail(CHIME_ENOMEM, "ring attach: out of memory");
  ring->seg.fd = -1;
  ring->consumer = 1;
  ring->spin_ns[SIDE_CONSUMER] = CHIME_RING_SPIN_MIN_NS;
  rc = chime__segment_attach(&ring->seg, fd, nonce, &ring->spec, &ring->layout);
  if (rc != 0)
    goto out;
  memcpy(ring->nonce, ring->seg.hdr->nonce, sizeof(ring->nonce));
  ring->held = calloc(ring->layout.slots, 1);
  if (ring->held == NULL) {
    rc = chime__ring_fail(CHIME_ENOMEM, "ring attach: out of memory");
    goto out;
  }
  *out = ring;
  ring = NULL;
out:
  chime_ring_destroy(ring);
  return rc;
}

void chime_ring_set_disconnected(chime_ring_t *ring) {
  if (ring == NULL)
    return;
  atomic_store_explicit(&ring->disconnected, 1, memory_order_seq_cst);
  bell_ring(&ring->seg.ctrl->cons_bell, INT_MAX);
}

/* --- both sides --- */

void chime_ring_destroy(chime_ring_t *ring) {
  if (ring == NULL)
    return;
  /* cudaHostUnregister must see the mapping still in place. */
  if (ring->unpin != NULL)
    ring->unpin(ring->unpin_arg);
  chime__segment_close(&ring->seg);
  free(ring->pub_per_slot);
  free(ring->last_seq);
  free(ring->seen_free);
  free(ring->acquired);
  free(ring->held);
  free(ring);
}

int chime_ring_fd(const chime_ring_t *ring) {
  return ring == NULL ? CHIME_EINVAL : ring->seg.fd;
}

const chime_ring_layout_t *chime_ring_layout(const chime_ring_t *ring) {
  return ring == NULL ? NULL : &ring->layout;
}

const chime_spec_t *chime_ring_spec(const chime_ring_t *ring) {
  return ring == NULL ? NULL : &ring->spec;
}

void chime_ring_nonce(const chime_ring_t *ring, uint8_t out[16]) {
  if (ring == NULL)
    memset(out, 0, 16);
  else
    memcpy(out, ring->nonce, 16);
}

void chime_ring_stats(const chime_ring_t *ring, chime_ring_stats_t *out) {
  const chime__ring_prod_t *prod;
  const chime__ring_ctrl_t *ctrl;

  if (out == NULL)
    return;
  memset(out, 0, sizeof(*out));
  if (ring == NULL)
    return;
  prod = ring->seg.prod;
  ctrl = ring->seg.ctrl;
  out->published = atomic_load_explicit(&prod->pub, memory_order_relaxed);
  out->released = atomic_load_explicit(&ctrl->released, memory_order_relaxed);
  out->producer_wait_ns =
      atomic_load_explicit(&prod->wait_ns, memory_order_relaxed);
  out->consumer_wait_ns =
      atomic_load_explicit(&ctrl->wait_ns, memory_order_relaxed);
  out->max_leases =
      atomic_load_explicit(&ctrl->max_leases, memory_order_relaxed);
  out->leases = atomic_load_explicit(&ctrl->leases, memory_order_relaxed);
  out->shutdown = atomic_load_explicit(&prod->shutdown, memory_order_relaxed);
  out->generation =
      atomic_load_explicit(&prod->generation, memory_order_relaxed);
}

void *chime_ring_map_base(const chime_ring_t *ring, size_t *len) {
  if (ring == NULL) {
    if (len != NULL)
      *len = 0;
    return NULL;
  }
  if (len != NULL)
    *len = ring->seg.len;
  return ring->seg.base;
}

void *chime_ring_slot_base(const chime_ring_t *ring, uint32_t slot) {
  if (ring == NULL || slot >= ring->layout.slots)
    return NULL;
  return slot_ptr(ring, slot);
}

void chime__ring_set_unpin(chime_ring_t *ring, void (*fn)(void *arg),
                           void *arg) {
  if (ring == NULL)
    return;
  ring->unpin = fn;
  ring->unpin_arg = arg;
}

void *chime__ring_unpin_arg(const chime_ring_t *ring) {
  return ring == NULL ? NULL : ring->unpin_arg;
}

int chime__ring_is_consumer(const chime_ring_t *ring) {
  return ring != NULL && ring->consumer;
}

void *chime__ring_data(const chime_ring_t *ring, size_t *len) {
  if (ring == NULL) {
    if (len != NULL)
      *len = 0;
    return NULL;
  }
  if (len != NULL)
    *len = (size_t)ring->layout.data_bytes;
  return ring->seg.data;
}
