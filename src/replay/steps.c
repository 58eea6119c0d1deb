/* Episode steps in blocks, the oldest block evicted first (steps.h). */
#include "replay/steps.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"
#include "replay/keyindex.h"
#include "replay/steps_internal.h"
#include "replay/zleaf.h"

uint32_t chime__steps_block(uint64_t capacity_steps, uint64_t step_bytes) {
  /* Runs of 32 KiB or more: at 10^6 steps of 256 B, blocks of 128 steps
   * sampled 1.06x a plain table's GB/s, blocks of 32 0.81x (a window is
   * more, shorter runs, each a cache and TLB miss). An episode that ends
   * leaves the rest of its block unused: 32 KiB at most for small steps. */
  uint32_t k = 32;
  while (k < 256 && (uint64_t)k * step_bytes < (UINT64_C(32) << 10))
    k *= 2;
  while (k > 1 && capacity_steps / k < 16)
    k /= 2;
  return k;
}

static uint64_t align64(uint64_t n) {
  return (n + 63u) & ~UINT64_C(63);
}

/* The disk header; per block: bn bnext bprev bopen bpin (4 each); per
 * slot bitem, sidx (4 each), sep and sver (8); raw leaves (compress NULL:
 * all) per slot. */
static uint64_t layout(const chime_spec_t *spec, uint64_t capacity_steps,
                       const uint8_t *compress, int zfile,
                       uint64_t *leaves_out) {
  uint64_t k =
      chime__steps_block(capacity_steps, chime_spec_sample_bytes(spec));
  uint64_t nb = (capacity_steps + k - 1) / k, slots = nb * k, total = 0, b;
  for (uint32_t i = 0; i < spec->nleaves; i++) {
    if (compress != NULL && compress[i] != 0)
      continue; /* in zstep */
    if (__builtin_mul_overflow(slots, chime_leaf_bytes(&spec->leaves[i]), &b) ||
        b > UINT64_MAX / 2 || __builtin_add_overflow(total, align64(b), &total))
      return UINT64_MAX;
  }
  if (leaves_out != NULL)
    *leaves_out = total;
  uint64_t meta = sizeof(chime__steps_disk_t) + 5 * align64(nb * 4) +
                  2 * align64(slots * 4) + 2 * align64(slots * 8);
  int nz = 0;
  for (uint32_t i = 0; compress != NULL && i < spec->nleaves; i++)
    nz |= compress[i] != 0;
  if (zfile && nz) /* the steps' extents in the bytes file */
    meta += align64(slots * sizeof(chime__tbl_extent_t));
  if (__builtin_add_overflow(total, meta, &total))
    return UINT64_MAX;
  return total;
}

uint64_t chime__steps_max_windows(const chime_spec_t *spec,
                                  const chime__steps_config_t *cfg) {
  uint64_t k =
      chime__steps_block(cfg->capacity_steps, chime_spec_sample_bytes(spec));
  /* Every block full: the oldest leaves only when a step needs a block. */
  uint64_t slots = (cfg->capacity_steps + k - 1) / k * k;
  if (cfg->pad)
    return slots;
  if (cfg->stride == 0 || cfg->sequence_length > slots)
    return 0;
  return (slots - cfg->sequence_length) / cfg->stride + 1;
}

uint64_t chime__steps_map_bytes(const chime_spec_t *spec,
                                const chime__steps_config_t *cfg) {
  return layout(spec, cfg->capacity_steps, cfg->compress, cfg->zfile, NULL);
}

uint64_t chime__steps_bytes(const chime_spec_t *spec,
                            const chime__steps_config_t *cfg) {
  /* Compressed leaves at most their raw bytes (a leaf that does not
   * shrink is kept raw), and per slot a pointer, the sizes and the
   * allocator's header and rounding. */
  uint64_t total = layout(spec, cfg->capacity_steps,
                          cfg->zfile ? cfg->compress : NULL, cfg->zfile, NULL);
  uint64_t k =
      chime__steps_block(cfg->capacity_steps, chime_spec_sample_bytes(spec));
  uint64_t per = 18, nz = 0; /* newest */
  for (uint32_t i = 0; cfg->compress != NULL && i < spec->nleaves; i++)
    nz += cfg->compress[i] != 0;
  if (nz > 0)
    per += 8 + 16 + 4 * nz;
  uint64_t slots = (cfg->capacity_steps + k - 1) / k * k;
  uint64_t eps = (uint64_t)cfg->max_episodes * sizeof(episode_t) + slots * per +
                 chime__keyindex_direct_bytes(slots);
  if (total == UINT64_MAX || total > UINT64_MAX - eps)
    return UINT64_MAX;
  return total + eps;
}

int chime__steps_create(chime__steps_t **out, const chime_spec_t *spec,
                        const chime__steps_config_t *cfg,
                        const chime__steps_cb_t *cb) {
  int rc = 0;
  *out = NULL;
  if (cfg->capacity_steps == 0 || cfg->capacity_steps > UINT32_MAX - 64 ||
      cfg->sequence_length == 0 || cfg->stride == 0 ||
      cfg->stride > cfg->sequence_length || cfg->max_episodes == 0 ||
      chime_spec_sample_bytes(spec) == 0)
    return CHIME_EINVAL;
  chime__steps_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return CHIME_ENOMEM;
  s->cfg = *cfg;
  s->cb = *cb;
  s->k = chime__steps_block(cfg->capacity_steps, chime_spec_sample_bytes(spec));
  s->nblocks = (uint32_t)((cfg->capacity_steps + s->k - 1) / s->k);
  s->nleaves = spec->nleaves;
  s->cfg.compress = NULL; /* the caller's: read here only */
  for (uint32_t i = 0; cfg->compress != NULL && i < spec->nleaves; i++)
    if (cfg->compress[i] != 0) {
      s->zraw[i] = chime_leaf_bytes(&spec->leaves[i]);
      s->zl[s->nz++] = i;
    }
  uint64_t len =
      layout(spec, cfg->capacity_steps, cfg->compress, cfg->zfile, NULL);
  s->eps = calloc(cfg->max_episodes, sizeof(*s->eps));
  if (len == UINT64_MAX || len > SIZE_MAX || s->eps == NULL) {
    rc = len == UINT64_MAX ? CHIME_EOVERFLOW : CHIME_ENOMEM;
    goto out;
  }
  /* Anonymous memory: pages are committed as steps land in them. */
  if (cfg->mem != NULL) {
    s->map = cfg->mem;
  } else {
    s->map = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s->map == MAP_FAILED) {
      s->map = NULL;
      rc = CHIME_ENOMEM;
      goto out;
    }
    s->map_len = (size_t)len;
  }
  s->cfg.mem = NULL;
  uint64_t slots = (uint64_t)s->nblocks * s->k;
  uint8_t *p = s->map;
  s->disk = (chime__steps_disk_t *)p;
  p += sizeof(chime__steps_disk_t);
  for (uint32_t i = 0; i < s->nleaves; i++) {
    s->lbytes[i] = chime_leaf_bytes(&spec->leaves[i]);
    if (s->zraw[i] != 0)
      continue;
    s->leaf[i] = p;
    p += align64(slots * s->lbytes[i]);
  }
  if (s->nz > 0 && (s->zstep = calloc(slots, sizeof(*s->zstep))) == NULL) {
    rc = CHIME_ENOMEM;
    goto out;
  }
  uint32_t **u32[] = {&s->bn, &s->bnext, &s->bprev, &s->bopen, &s->bpin};
  for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++) {
    *u32[i] = (uint32_t *)p;
    p += align64((uint64_t)s->nblocks * 4);
  }
  s->bitem = (uint32_t *)p;
  p += align64(slots * 4);
  s->sidx = (uint32_t *)p;
  p += align64(slots * 4);
  s->sep = (uint64_t *)p;
  p += align64(slots * 8);
  s->sver = (uint64_t *)p;
  p += align64(slots * 8);
  if (cfg->zfile && s->nz > 0) {
    s->zb = cfg->bytes;
    s->zext = (chime__tbl_extent_t *)p;
  }
  /* As many episodes as steps at worst (short episodes share blocks). */
  if ((rc = chime__keyindex_create(&s->newest, slots)) != 0)
    goto out;
  if (cfg->reopen) {
    if ((rc = chime__steps_reopen(s)) != 0)
      goto out;
  } else {
    for (uint32_t b = 0; b < s->nblocks; b++)
      s->bnext[b] = s->bprev[b] = s->bopen[b] = NONE;
    for (uint64_t i = 0; i < slots; i++)
      s->bitem[i] = NONE;
    s->next_episode = 1;
    chime__steps_sync(s);
  }
  *out = s;
  s = NULL;
out:
  if (s != NULL) {
    chime__keyindex_destroy(s->newest);
    free(s->zstep);
    free(s->eps);
    if (s->map_len != 0)
      munmap(s->map, s->map_len);
    free(s);
  }
  return rc;
}

/* The compressed leaves of block b's steps go (their extents freed in a
 * bytes file, the file's bytes left as they are). */
static void z_free_block(chime__steps_t *s, uint32_t b) {
  uint64_t slot0 = (uint64_t)b * s->k;
  uint8_t **z = s->zstep + slot0;
  for (uint32_t o = 0; o < s->bn[b]; o++) {
    if (z[o] != NULL)
      chime__steps_z_count(s, z[o], -1);
    if (s->zb != NULL && z[o] != NULL) {
      chime__tbl_bytes_free(s->zb, s->zext[slot0 + o]);
      s->zext[slot0 + o].len = 0;
    } else {
      free(z[o]);
    }
    z[o] = NULL;
  }
}

/* Step slot's compressed leaves z (malloc'd), taken: into an extent of
 * the bytes file (z freed; reserved before), or kept as they are. */
static uint8_t *z_keep(chime__steps_t *s, uint64_t slot, uint8_t *z) {
  if (s->zb == NULL)
    return z;
  uint64_t n = chime__zleaf_total(z, s->nz);
  uint64_t off = chime__tbl_bytes_alloc(s->zb, (uint32_t)n);
  uint8_t *p = chime__tbl_bytes_base(s->zb) + off;
  memcpy(p, z, (size_t)n);
  free(z);
  s->zext[slot] = (chime__tbl_extent_t){off, (uint32_t)n, 0};
  return p;
}

int chime__steps_z_reserve(chime__steps_t *s, uint8_t *const *z, uint32_t n) {
  if (s->zb == NULL || z == NULL)
    return 0;
  uint64_t need = 0;
  for (uint32_t i = 0; i < n; i++)
    if (z[i] != NULL)
      need += chime__tbl_bytes_class(chime__zleaf_total(z[i], s->nz));
  return chime__tbl_bytes_reserve(s->zb, need);
}

void chime__steps_destroy(chime__steps_t *s) {
  if (s == NULL)
    return;
  /* In a bytes file the steps stay for the next open. */
  if (s->zstep != NULL && s->zb == NULL)
    for (uint32_t b = 0; b < s->nblocks; b++)
      z_free_block(s, b);
  free(s->zstep);
  if (s->map_len != 0)
    munmap(s->map, s->map_len);
  chime__keyindex_destroy(s->newest);
  free(s->eps);
  free(s);
}

/* Takes lane i off the list (its place taken by the last one). */
static void close_lane(chime__steps_t *s, uint32_t i) {
  if (s->eps[i].last != NONE)
    s->bopen[s->eps[i].last] = NONE;
  s->neps--;
  if (i != s->neps) {
    s->eps[i] = s->eps[s->neps];
    if (s->eps[i].last != NONE)
      s->bopen[s->eps[i].last] = i;
  }
}

/* Whether lane a goes before lane b when one must: a lane with no open
 * episode loses nothing (its writer's next episode starts in a new block),
 * so it goes first (a writer per episode leaves such lanes behind); then
 * the one whose writer went quiet longest. */
static int goes_before(const episode_t *a, const episode_t *b) {
  if ((a->id == 0) != (b->id == 0))
    return a->id == 0;
  return a->last_use < b->last_use;
}

uint32_t chime__steps_lane(chime__steps_t *s, uint64_t writer) {
  uint32_t lru = 0;
  for (uint32_t i = 0; i < s->neps; i++) {
    if (s->eps[i].writer == writer)
      return i;
    if (goes_before(&s->eps[i], &s->eps[lru]))
      lru = i;
  }
  if (s->neps == s->cfg.max_episodes) {
    /* An open episode's tail makes no window; its complete windows stay. */
    if (s->eps[lru].id != 0) {
      s->abandoned++;
      chime__steps_sync(s);
    }
    close_lane(s, lru);
  }
  episode_t *e = &s->eps[s->neps];
  e->writer = writer;
  e->id = 0; /* its first append opens an episode */
  e->len = 0;
  e->last = NONE;
  e->last_use = s->clock;
  return s->neps++;
}

/* Frees the oldest block: its items leave, and an open episode whose
 * newest block it was continues in a new block. */
static void evict_oldest(chime__steps_t *s) {
  uint32_t b = s->head; /* all taken: the head is the oldest */
  uint32_t *items = s->bitem + (uint64_t)b * s->k;
  for (uint32_t o = 0; o < s->bn[b]; o++) {
    uint32_t it = items[o];
    items[o] = NONE;
    if (it != NONE)
      s->cb.evict(s->cb.ctx, it);
  }
  if (s->bopen[b] != NONE)
    s->eps[s->bopen[b]].last = NONE;
  if (s->bnext[b] != NONE)
    s->bprev[s->bnext[b]] = NONE;
  /* Episodes whose newest step was here have none left. */
  uint64_t slot0 = (uint64_t)b * s->k;
  for (uint32_t o = 0; o < s->bn[b]; o++) {
    uint32_t at;
    uint64_t e = s->sep[slot0 + o];
    if ((o + 1 == s->bn[b] || s->sep[slot0 + o + 1] != e) &&
        chime__keyindex_lookup(s->newest, e, &at) == 0 && at == b &&
        chime__keyindex_remove(s->newest, e, NULL) != 0)
      break; /* looked up just now: cannot fail */
  }
  if (s->nz > 0)
    z_free_block(s, b);
  s->steps -= s->bn[b];
  s->evicted += s->bn[b];
  s->nused--;
}

/* A block taken: emptied first, then counted in the disk header, then
 * linked (steps_internal.h says why in this order). */
static uint32_t take_block(chime__steps_t *s, uint32_t ep) {
  if (s->nused == s->nblocks)
    evict_oldest(s); /* may be ep's own newest block */
  episode_t *e = &s->eps[ep];
  uint32_t b = s->head;
  __atomic_store_n(&s->bn[b], 0, __ATOMIC_RELEASE);
  s->bnext[b] = NONE;
  s->bprev[b] = e->last;
  if (++s->head == s->nblocks)
    s->head = 0;
  s->nused++;
  chime__steps_sync(s);
  if (e->last != NONE) {
    s->bnext[e->last] = b;
    s->bopen[e->last] = NONE;
  }
  s->bopen[b] = ep;
  e->last = b;
  return b;
}

/* The slot of step `step` of lane e's open episode, NONE when it left
 * (evicted). Its steps are the last of the lane's chain, so walking back
 * from the newest block each block ends with them, until the one the
 * episode began in. */
static uint32_t find_step(const chime__steps_t *s, const episode_t *e,
                          uint32_t step) {
  for (uint32_t b = e->last; b != NONE; b = s->bprev[b]) {
    uint64_t end = (uint64_t)b * s->k + s->bn[b] - 1; /* its last step */
    if (s->sep[end] != e->id || s->sidx[end] < step)
      return NONE;
    uint32_t back = s->sidx[end] - step;
    if (back < s->bn[b]) {
      uint64_t at = end - back;
      return s->sep[at] == e->id ? (uint32_t)at : NONE;
    }
  }
  return NONE;
}

static void make_window(chime__steps_t *s, const episode_t *e, uint32_t first,
                        uint32_t len) {
  uint32_t slot = find_step(s, e, first);
  if (slot == NONE)
    return; /* its first step left before the window was complete */
  chime__window_t w = {e->id, slot, first, len};
  s->bitem[slot] = s->cb.window(s->cb.ctx, &w);
}

void chime__steps_append(chime__steps_t *s, uint32_t ep, uint64_t version,
                         void (*read)(void *ctx, uint8_t *dst, uint64_t n),
                         void *ctx, uint8_t *z) {
  episode_t *e = &s->eps[ep];
  if (e->id == 0) {
    e->id = s->next_episode++;
    e->len = 0;
    chime__steps_sync(s);
  }
  uint32_t b = e->last;
  if (b == NONE || s->bn[b] == s->k)
    b = take_block(s, ep);
  uint64_t slot = (uint64_t)b * s->k + s->bn[b];
  for (uint32_t l = 0; l < s->nleaves; l++)
    read(ctx, s->leaf[l] != NULL ? s->leaf[l] + slot * s->lbytes[l] : NULL,
         s->lbytes[l]);
  if (s->nz > 0) {
    s->zstep[slot] = z_keep(s, slot, z);
    chime__steps_z_count(s, s->zstep[slot], 1);
  }
  s->sep[slot] = e->id;
  s->sidx[slot] = e->len;
  s->sver[slot] = version;
  if (e->len == 0 || s->bn[b] == 0) {
    /* The block of its newest step: one entry per episode with steps
     * stored (the remove fails for a new episode, the insert never). */
    int rc = chime__keyindex_remove(s->newest, e->id, NULL);
    rc = chime__keyindex_insert(s->newest, e->id, b);
    (void)rc;
  }
  /* The step is there once counted (a release store: its bytes and
   * record before it, for a kill -9 of a store in a file). */
  __atomic_store_n(&s->bn[b], s->bn[b] + 1, __ATOMIC_RELEASE);
  s->steps++;
  e->len++;
  e->last_use = ++s->clock;
  uint32_t t = s->cfg.sequence_length;
  if (e->len >= t && (e->len - t) % s->cfg.stride == 0)
    make_window(s, e, e->len - t, t);
}

void chime__steps_end(chime__steps_t *s, uint32_t ep) {
  episode_t *e = &s->eps[ep];
  uint32_t t = s->cfg.sequence_length, st = s->cfg.stride;
  if (s->cfg.pad && e->id != 0 && e->len > 0) {
    uint32_t n = e->len >= t ? (e->len - t) / st + 1 : 0; /* full windows */
    uint32_t covered = n > 0 ? (n - 1) * st + t : 0;
    if (e->len > covered) /* stride <= t: n * st < len */
      make_window(s, e, n * st, e->len - n * st);
  }
  e->id = 0; /* the lane goes on in its block with the next episode */
  e->len = 0;
}

void chime__steps_forget(chime__steps_t *s, uint32_t slot) {
  s->bitem[slot] = NONE;
}

uint32_t chime__steps_find(const chime__steps_t *s, uint64_t episode,
                           uint32_t first) {
  uint32_t b;
  if (chime__keyindex_lookup(s->newest, episode, &b) != 0)
    return NONE;
  /* Back along the lane from the block of the episode's newest step: in
   * each block its steps are contiguous and the block's newest of it. */
  for (; b != NONE; b = s->bprev[b]) {
    uint64_t slot0 = (uint64_t)b * s->k, end = slot0 + s->bn[b];
    while (end > slot0 && s->sep[end - 1] != episode)
      end--;
    if (end == slot0 || s->sidx[end - 1] < first)
      return NONE;
    uint32_t back = s->sidx[end - 1] - first;
    if (back < end - slot0) {
      uint64_t at = end - 1 - back;
      return s->sep[at] == episode && s->bitem[at] == NONE ? (uint32_t)at
                                                           : NONE;
    }
  }
  return NONE;
}

void chime__steps_relist(chime__steps_t *s, uint32_t slot, uint32_t item) {
  s->bitem[slot] = item;
}

int chime__steps_room(const chime__steps_t *s, uint32_t ep, uint32_t count) {
  const episode_t *e = &s->eps[ep];
  uint32_t left = e->last != NONE ? s->k - s->bn[e->last] : 0;
  if (count <= left)
    return 1;
  uint64_t need = ((uint64_t)count - left + s->k - 1) / s->k;
  if (need > s->nblocks)
    need = s->nblocks;
  /* Blocks are taken round the ring from head: these, in this order. */
  for (uint64_t i = 0, b = s->head; i < need; i++) {
    if (s->bpin[b] != 0)
      return 0;
    if (++b == s->nblocks)
      b = 0;
  }
  return 1;
}

void chime__steps_pin(chime__steps_t *s, uint32_t slot) {
  s->bpin[slot / s->k]++;
}

void chime__steps_unpin(chime__steps_t *s, uint32_t slot) {
  s->bpin[slot / s->k]--;
}

/* Compressed leaf l of the n steps from slot at, decompressed into dst
 * one after another: each frame's declared size checked against the
 * leaf's before a byte is written (zleaf.h). */
static void z_copy(const chime__steps_t *s, uint32_t l, uint64_t at, uint32_t n,
                   uint8_t *dst) {
  uint32_t k = 0;
  while (s->zl[k] != l)
    k++;
  size_t lb = (size_t)s->zraw[l];
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *z = s->zstep[at + i];
    (void)chime__zleaf_decompress(dst + (size_t)i * lb, lb,
                                  chime__zleaf_at(z, s->nz, k),
                                  chime__zleaf_size(z, k));
  }
}

uint64_t chime__steps_copy_stored(const chime__steps_t *s, uint32_t slot,
                                  uint32_t len, uint32_t l, uint8_t *dst) {
  uint32_t k = 0;
  while (s->zl[k] != l)
    k++;
  uint64_t put = 4 * (uint64_t)s->cfg.sequence_length;
  memset(dst, 0, (size_t)put);
  /* Along the lane as chime__steps_copy goes. */
  uint32_t b = slot / s->k, off = slot % s->k;
  for (uint32_t i = 0; i < len; i++) {
    const uint8_t *z = s->zstep[(uint64_t)b * s->k + off];
    uint32_t n = chime__zleaf_size(z, k);
    const uint8_t le[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
                           (uint8_t)(n >> 24)};
    memcpy(dst + 4 * (size_t)i, le, 4);
    memcpy(dst + put, chime__zleaf_at(z, s->nz, k), n);
    put += n;
    if (++off == s->k && i + 1 < len) {
      b = s->bnext[b]; /* set before the window was complete */
      off = 0;
    }
  }
  return put;
}

void chime__steps_copy(const chime__steps_t *s, uint32_t slot, uint32_t len,
                       uint8_t *const *dst) {
  uint32_t t = s->cfg.sequence_length;
  for (uint32_t l = 0; l < s->nleaves; l++) {
    if (dst[l] == NULL)
      continue; /* framed: chime__steps_copy_stored */
    uint64_t lb = s->lbytes[l];
    uint32_t b = slot / s->k, off = slot % s->k, done = 0;
    while (done < len) {
      /* Every block of a live window but its last is full: an episode
       * takes a new block only once its last is full (or gone, and then
       * no live window reaches back into it). */
      uint32_t n = s->k - off;
      if (n > len - done)
        n = len - done;
      uint64_t at = (uint64_t)b * s->k + off;
      if (s->leaf[l] != NULL)
        memcpy(dst[l] + (uint64_t)done * lb, s->leaf[l] + at * lb,
               (size_t)(n * lb));
      else
        z_copy(s, l, at, n, dst[l] + (uint64_t)done * lb);
      done += n;
      if (done < len)
        b = s->bnext[b]; /* set before the window was complete */
      off = 0;
    }
    if (len < t)
      memset(dst[l] + (uint64_t)len * lb, 0, (size_t)((t - len) * lb));
  }
}

void chime__steps_get_stats(const chime__steps_t *s,
                            chime__steps_stats_t *out) {
  uint64_t slots = (uint64_t)s->nblocks * s->k, bytes = 0;
  for (uint32_t l = 0; l < s->nleaves; l++)
    bytes += s->leaf[l] != NULL ? slots * s->lbytes[l] : 0;
  out->steps = s->steps;
  out->episodes = 0;
  for (uint32_t i = 0; i < s->neps; i++)
    out->episodes += s->eps[i].id != 0;
  out->bytes = bytes + s->z_stored;
  out->z_raw = s->z_raw;
  out->z_stored = s->z_stored;
  out->z_kept_raw = s->z_kept_raw;
  out->episodes_abandoned = s->abandoned;
  out->steps_evicted = s->evicted;
}

/* --- checkpoints --- */

uint32_t chime__steps_nblocks(const chime__steps_t *s) {
  return s->nblocks;
}

uint32_t chime__steps_k(const chime__steps_t *s) {
  return s->k;
}

/* Block b's position counted from the oldest. */
static uint32_t pos_of(const chime__steps_view_t *v, uint32_t b) {
  if (b == NONE)
    return NONE;
  return b >= v->oldest ? b - v->oldest : b + v->nblocks - v->oldest;
}

void chime__steps_view_take(chime__steps_t *s, chime__steps_view_t *v) {
  v->k = s->k;
  v->nblocks = s->nblocks;
  v->nused = s->nused;
  /* The used blocks are the nused before head, round the ring. */
  v->oldest = s->head >= s->nused ? s->head - s->nused
                                  : s->head + s->nblocks - s->nused;
  v->unpinned = 0;
  v->next_episode = s->next_episode;
  v->abandoned = s->abandoned;
  v->evicted = s->evicted;
  for (uint32_t i = 0, b = v->oldest; i < v->nused; i++) {
    v->block[i] = b;
    v->bn[i] = s->bn[b];
    /* A lane's next block is newer, so held too; its previous one is
     * NONE once it was reused. */
    v->bnext[i] = pos_of(v, s->bnext[b]);
    v->bprev[i] = pos_of(v, s->bprev[b]);
    s->bpin[b]++;
    if (++b == s->nblocks)
      b = 0;
  }
}

void chime__steps_view_unpin(chime__steps_t *s, chime__steps_view_t *v,
                             uint32_t upto) {
  if (upto > v->nused)
    upto = v->nused;
  for (; v->unpinned < upto; v->unpinned++)
    s->bpin[v->block[v->unpinned]]--;
}

void chime__steps_view_block(const chime__steps_t *s,
                             const chime__steps_view_t *v, uint32_t pos,
                             const uint64_t **ep, const uint32_t **idx,
                             const uint64_t **ver, const uint8_t **leaf) {
  uint64_t slot0 = (uint64_t)v->block[pos] * s->k;
  *ep = s->sep + slot0;
  *idx = s->sidx + slot0;
  *ver = s->sver + slot0;
  for (uint32_t l = 0; l < s->nleaves; l++)
    leaf[l] = s->leaf[l] != NULL ? s->leaf[l] + slot0 * s->lbytes[l] : NULL;
}

uint8_t *const *chime__steps_view_z(const chime__steps_t *s,
                                    const chime__steps_view_t *v,
                                    uint32_t pos) {
  return s->nz > 0 ? s->zstep + (uint64_t)v->block[pos] * s->k : NULL;
}

uint32_t chime__steps_nz(const chime__steps_t *s) {
  return s->nz;
}

uint32_t chime__steps_zleaf(const chime__steps_t *s, uint32_t k) {
  return s->zl[k];
}

uint32_t chime__steps_view_slot(const chime__steps_view_t *v, uint32_t slot) {
  return pos_of(v, slot / v->k) * v->k + slot % v->k;
}

int chime__steps_restore_begin(chime__steps_t *s, uint32_t nused) {
  if (s->nused != 0 || s->neps != 0 || nused > s->nblocks)
    return CHIME_EINVAL;
  return 0;
}

int chime__steps_restore_block(chime__steps_t *s, uint32_t pos, uint32_t bn,
                               uint32_t bnext, uint32_t bprev,
                               const uint64_t *ep, const uint32_t *idx,
                               const uint64_t *ver, const uint8_t *const *leaf,
                               uint8_t **z) {
  /* In order; links point to newer (next) and older (prev) positions,
   * so no chain loops; next's range is checked at finish. */
  if (pos != s->nused || pos >= s->nblocks || bn == 0 || bn > s->k ||
      (bnext != NONE && bnext <= pos) || (bprev != NONE && bprev >= pos) ||
      (s->nz > 0) != (z != NULL))
    return CHIME_EINVAL;
  if (chime__steps_z_reserve(s, z, bn) != 0)
    return CHIME_ERESOURCE;
  uint64_t slot0 = (uint64_t)pos * s->k;
  for (uint32_t o = 0; o < bn; o++) {
    if (ep[o] == 0)
      return CHIME_EINVAL;
    s->sep[slot0 + o] = ep[o];
    s->sidx[slot0 + o] = idx[o];
    s->sver[slot0 + o] = ver != NULL ? ver[o] : 0;
  }
  for (uint32_t l = 0; l < s->nleaves; l++)
    if (s->leaf[l] != NULL)
      memcpy(s->leaf[l] + slot0 * s->lbytes[l], leaf[l],
             (size_t)(bn * s->lbytes[l]));
  for (uint32_t o = 0; z != NULL && o < bn; o++) {
    s->zstep[slot0 + o] = z_keep(s, slot0 + o, z[o]);
    chime__steps_z_count(s, s->zstep[slot0 + o], 1);
  }
  s->bn[pos] = bn;
  s->bnext[pos] = bnext;
  s->bprev[pos] = bprev;
  s->bopen[pos] = NONE;
  s->nused++;
  s->steps += bn;
  return 0;
}

int chime__steps_restore_finish(chime__steps_t *s, uint64_t next_episode,
                                uint64_t abandoned, uint64_t evicted) {
  for (uint32_t b = 0; b < s->nused; b++) {
    uint32_t n = s->bnext[b], p = s->bprev[b];
    /* Both ends of a link agree, and a block whose lane goes on is full
     * (a window's copy runs to its end). */
    if ((n != NONE &&
         (n >= s->nused || s->bprev[n] != b || s->bn[b] != s->k)) ||
        (p != NONE && s->bnext[p] != b))
      return CHIME_EINVAL;
    for (uint32_t o = 0; o < s->bn[b]; o++)
      if (s->sep[(uint64_t)b * s->k + o] >= next_episode)
        return CHIME_EINVAL;
  }
  /* Episodes' newest blocks, oldest block first so the newest wins. */
  for (uint32_t b = 0; b < s->nused; b++)
    if (chime__steps_newest_at(s, b) != 0)
      return CHIME_EINVAL; /* more episodes than slots: cannot be */
  s->head = s->nused == s->nblocks ? 0 : s->nused;
  s->next_episode = next_episode;
  s->abandoned = abandoned;
  s->evicted = evicted;
  chime__steps_sync(s);
  return 0;
}

int chime__steps_check_window(const chime__steps_t *s, uint32_t slot,
                              uint64_t ep, uint32_t first, uint32_t len) {
  uint32_t t = s->cfg.sequence_length;
  uint32_t b = slot / s->k, off = slot % s->k, done = 0;
  if (len == 0 || len > t || (len < t && !s->cfg.pad) || b >= s->nused ||
      off >= s->bn[b] || s->sep[slot] != ep || s->sidx[slot] != first ||
      s->bitem[slot] != NONE || first > UINT32_MAX - len)
    return CHIME_EINVAL;
  /* Along the lane as chime__steps_copy goes: whole blocks but the last;
   * the window's last step is its episode's step first + len - 1. */
  for (;;) {
    uint32_t n = s->k - off;
    if (n > len - done)
      n = len - done;
    if (off + n > s->bn[b])
      return CHIME_EINVAL;
    done += n;
    if (done == len) {
      uint64_t last = (uint64_t)b * s->k + off + n - 1;
      return s->sep[last] == ep && s->sidx[last] == first + len - 1
                 ? 0
                 : CHIME_EINVAL;
    }
    b = s->bnext[b];
    if (b == NONE)
      return CHIME_EINVAL;
    off = 0;
  }
}

uint64_t chime__steps_version(const chime__steps_t *s, uint32_t slot) {
  return s->sver[slot];
}
