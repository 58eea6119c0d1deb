/* A step store in the table's file (steps.h, cfg.mem): its disk header
 * kept up to date, the store opened again from the file, and the
 * episodes' newest blocks rebuilt (here and after a restore). */
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "replay/steps_internal.h"
#include "replay/zleaf.h"

void chime__steps_sync(chime__steps_t *s) {
  chime__steps_disk_t *d = s->disk;
  d->next_episode = s->next_episode;
  d->abandoned = s->abandoned;
  d->evicted = s->evicted;
  __atomic_store_n(&d->nused, s->nused, __ATOMIC_RELEASE);
  __atomic_store_n(&d->head, s->head, __ATOMIC_RELEASE);
}

int chime__steps_newest_at(chime__steps_t *s, uint32_t b) {
  uint64_t slot0 = (uint64_t)b * s->k;
  for (uint32_t o = 0; o < s->bn[b]; o++) {
    uint64_t e = s->sep[slot0 + o];
    if (o + 1 < s->bn[b] && s->sep[slot0 + o + 1] == e)
      continue;
    int rc = chime__keyindex_remove(s->newest, e, NULL);
    if (chime__keyindex_insert(s->newest, e, b) != 0)
      return -1;
    (void)rc; /* a new episode is in none */
  }
  return 0;
}

/* Block b's age: its position counted from the oldest block in use. */
static uint32_t age(const chime__steps_t *s, uint32_t oldest, uint32_t b) {
  return b >= oldest ? b - oldest : b + s->nblocks - oldest;
}

/* The links of block b (in use) that the other end does not hold are
 * cut: a process killed between the two stores of a take_block. A lane's
 * next block is newer, and only a full block has one. */
static void cut_links(chime__steps_t *s, uint32_t oldest, uint32_t b) {
  uint32_t n = s->bnext[b], p = s->bprev[b], ab = age(s, oldest, b);
  if (n != NONE &&
      (n >= s->nblocks || age(s, oldest, n) >= s->nused ||
       age(s, oldest, n) <= ab || s->bprev[n] != b || s->bn[b] != s->k))
    s->bnext[b] = NONE;
  if (p != NONE && (p >= s->nblocks || age(s, oldest, p) >= s->nused ||
                    age(s, oldest, p) >= ab || s->bnext[p] != b))
    s->bprev[b] = NONE;
}

/* A step's compressed leaves at their extent: sizes summing to it, each
 * within its leaf's raw size. */
static int z_ok(const chime__steps_t *s, const uint8_t *z, uint32_t len) {
  uint64_t at = 4 * (uint64_t)s->nz;
  if (len < at)
    return 0;
  for (uint32_t k = 0; k < s->nz; k++) {
    uint32_t n = chime__zleaf_size(z, k);
    if (n > s->zraw[s->zl[k]])
      return 0;
    at += n;
  }
  return at == len;
}

/* The used blocks' steps' compressed leaves in the bytes file: extents
 * checked, its free lists rebuilt from the gaps, the steps' pointers set
 * and their bytes counted. */
static int reopen_z(chime__steps_t *s, uint32_t oldest) {
  chime__tbl_live_extent_t *ex = malloc((s->steps + 1) * sizeof(*ex));
  size_t m = 0;
  int rc = 0;
  if (ex == NULL)
    return CHIME_ENOMEM;
  for (uint32_t i = 0, b = oldest; i < s->nused; i++) {
    for (uint32_t o = 0; o < s->bn[b]; o++) {
      uint64_t slot = (uint64_t)b * s->k + o;
      ex[m++] = (chime__tbl_live_extent_t){s->zext[slot], (uint32_t)slot};
    }
    if (++b == s->nblocks)
      b = 0;
  }
  if (chime__tbl_bytes_rebuild(s->zb, ex, m) != 0)
    rc = CHIME_ECORRUPT;
  uint8_t *base = chime__tbl_bytes_base(s->zb);
  for (size_t i = 0; i < m && rc == 0; i++) {
    uint32_t slot = ex[i].row;
    uint8_t *z = base + s->zext[slot].off;
    if (!z_ok(s, z, s->zext[slot].len)) {
      rc = CHIME_ECORRUPT;
      break;
    }
    s->zstep[slot] = z;
    chime__steps_z_count(s, z, 1);
  }
  free(ex);
  return rc;
}

int chime__steps_reopen(chime__steps_t *s) {
  const chime__steps_disk_t *d = s->disk;
  s->head = d->head;
  s->nused = d->nused;
  s->next_episode = d->next_episode;
  s->abandoned = d->abandoned;
  s->evicted = d->evicted;
  if (s->head >= s->nblocks || s->nused > s->nblocks || s->next_episode == 0)
    return CHIME_ECORRUPT;
  uint32_t oldest = s->head >= s->nused ? s->head - s->nused
                                        : s->head + s->nblocks - s->nused;
  uint64_t slots = (uint64_t)s->nblocks * s->k;
  for (uint64_t i = 0; i < slots; i++)
    s->bitem[i] = NONE;
  for (uint32_t b = 0; b < s->nblocks; b++) {
    s->bopen[b] = NONE; /* no lane is open */
    s->bpin[b] = 0;     /* the old process's samplers' */
    if (age(s, oldest, b) >= s->nused) {
      s->bn[b] = 0;
      s->bnext[b] = s->bprev[b] = NONE;
      continue;
    }
    if (s->bn[b] > s->k)
      return CHIME_ECORRUPT;
    for (uint32_t o = 0; o < s->bn[b]; o++) {
      uint64_t e = s->sep[(uint64_t)b * s->k + o];
      if (e == 0 || e >= s->next_episode)
        return CHIME_ECORRUPT;
    }
  }
  for (uint32_t i = 0, b = oldest; i < s->nused; i++) {
    cut_links(s, oldest, b);
    if (++b == s->nblocks)
      b = 0;
  }
  /* Episodes' newest blocks, the oldest block first so the newest wins;
   * the steps counted. */
  s->steps = 0;
  for (uint32_t i = 0, b = oldest; i < s->nused; i++) {
    if (chime__steps_newest_at(s, b) != 0)
      return CHIME_ECORRUPT; /* more episodes than slots */
    s->steps += s->bn[b];
    if (++b == s->nblocks)
      b = 0;
  }
  return s->zb != NULL ? reopen_z(s, oldest) : 0;
}
