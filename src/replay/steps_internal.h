/* A sequence table's step store inside (steps.h): its record, shared by
 * steps.c and steps_file.c (a store in the table's file). */
#ifndef CHIME_REPLAY_STEPS_INTERNAL_H
#define CHIME_REPLAY_STEPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "replay/keyindex.h"
#include "replay/steps.h"
#include "replay/zleaf.h"

#define NONE CHIME__STEPS_NONE

/* The head of the store's mapped part: what a store opened again from a
 * file needs besides the blocks and steps. Written as they change; head
 * and nused after the block they take is emptied (bn 0), so a process
 * killed between the two leaves a used block of no steps, never another
 * block's steps taken for newer ones. */
typedef struct {
  uint64_t next_episode, abandoned, evicted;
  uint32_t head, nused;
  uint8_t pad[32];
} chime__steps_disk_t;

_Static_assert(sizeof(chime__steps_disk_t) == 64, "one cache line");

/* A writer's lane: its episodes one after another, in its own chain of
 * blocks (a new episode goes on in the block the last one ended in, so
 * short episodes waste no block). */
typedef struct {
  uint64_t writer;   /* whose lane it is */
  uint64_t id;       /* its open episode's id; 0: none open */
  uint64_t last_use; /* the store's append clock at its last append */
  uint32_t len;      /* steps of the open episode so far */
  uint32_t last;     /* its newest block; NONE: none stored */
} episode_t;

struct chime__steps_s {
  chime__steps_config_t cfg;
  chime__steps_cb_t cb;
  uint32_t k;       /* steps per block */
  uint32_t nblocks; /* ceil(capacity_steps / k) */
  uint32_t nleaves;
  uint64_t lbytes[CHIME_MAX_LEAVES];
  uint8_t *leaf[CHIME_MAX_LEAVES]; /* nblocks * k steps each; NULL: zstep */
  /* Compressed leaves (zleaf.h): per step slot one allocation of the
   * step's compressed leaves (sizes, then stored bytes), freed with its
   * block's steps. zraw[l]: leaf l's bytes when it is compressed, else 0. */
  uint32_t nz;
  uint32_t zl[CHIME_MAX_LEAVES];
  uint64_t zraw[CHIME_MAX_LEAVES];
  uint8_t **zstep;
  chime__tbl_bytes_t *zb;    /* zstep's bytes in a file (cfg.bytes) */
  chime__tbl_extent_t *zext; /* per slot, where: in the mapped part */
  uint64_t z_raw, z_stored, z_kept_raw;
  /* Per block. */
  uint32_t *bn;    /* steps in it */
  uint32_t *bnext; /* the lane's next (newer) block, NONE */
  uint32_t *bprev; /* the lane's previous block, NONE once reused */
  uint32_t *bopen; /* lane whose newest block it is, NONE */
  uint32_t *bpin;  /* windows being copied from it right now */
  /* Per step slot. */
  uint32_t *bitem;           /* the item starting there, NONE */
  uint64_t *sep;             /* the step's episode id */
  uint32_t *sidx;            /* its index in the episode */
  uint64_t *sver;            /* its writer's policy version */
  chime__keyindex_t *newest; /* episode id -> block of its newest step */
  void *map;
  size_t map_len;            /* 0: the map is the caller's (cfg.mem) */
  chime__steps_disk_t *disk; /* at the map's start */
  uint32_t head;  /* the next block to take: the oldest once all are */
  uint32_t nused; /* blocks holding steps */
  episode_t *eps; /* lanes, dense */
  uint32_t neps;
  uint64_t next_episode, clock;
  uint64_t steps, abandoned, evicted;
};

/* The disk header brought up to the store's counts (release stores: a
 * kill -9 leaves them after the steps they count). */
void chime__steps_sync(chime__steps_t *s);
/* The episodes whose newest step is in block b (of steps restored or
 * reopened, blocks oldest first) listed with it: 0, or -1 when the index
 * is full. */
int chime__steps_newest_at(chime__steps_t *s, uint32_t b);
/* A step's compressed leaves z counted in (sign 1) or out (-1): here,
 * so that steps.c and steps_file.c (a store opened again) share it. */
static inline void chime__steps_z_count(chime__steps_t *s, const uint8_t *z,
                                        int sign) {
  uint64_t raw = 0, kept = 0;
  for (uint32_t k = 0; k < s->nz; k++) {
    raw += s->zraw[s->zl[k]];
    kept += chime__zleaf_size(z, k) == s->zraw[s->zl[k]];
  }
  uint64_t st = chime__zleaf_total(z, s->nz);
  if (sign > 0) {
    s->z_raw += raw;
    s->z_stored += st;
    s->z_kept_raw += kept;
  } else {
    s->z_raw -= raw;
    s->z_stored -= st;
  }
}

/* The rest of chime__steps_create for a store opened again (cfg.reopen). */
int chime__steps_reopen(chime__steps_t *s);

#endif
