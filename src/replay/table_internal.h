/* A table's state as the engine's files share it: the storage record, the
 * helpers on its hot paths (inline), and what one file of the table calls
 * in another. Only src/replay includes it; everyone else has table.h. */
#ifndef CHIME_REPLAY_TABLE_INTERNAL_H
#define CHIME_REPLAY_TABLE_INTERNAL_H

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/insert_window.h"
#include "common/key.h"
#include "replay/heap.h"
#include "replay/keyindex.h"
#include "replay/limiter.h"
#include "replay/selector.h"
#include "replay/steps.h"
#include "replay/sumtree.h"
#include "replay/table.h"
#include "replay/table_bytes.h"
#include "replay/table_file.h"
#include "replay/verindex.h"
#include "replay/zleaf.h"

#include <math.h>

/* A row's bookkeeping, in one record: a sample reads and writes all of
 * it, and in a table far larger than the caches each array it lived in
 * was one more cache and TLB miss per sample. */
typedef struct {
  uint64_t key;
  uint64_t itime; /* insert time, ns */
  double prio;
  uint32_t times;   /* times sampled */
  uint32_t pins;    /* samplers copying the row right now, without the lock */
  uint64_t version; /* the writer's policy version */
} row_meta_t;

struct chime__table_s {
  chime__table_config_t cfg;
  const chime__selector_t *sel, *rem; /* sampler, remover */
  const chime__limiter_t *lim;
  uint64_t sample_bytes;
  uint32_t nleaves;
  uint64_t lbytes[CHIME_MAX_LEAVES];
  uint64_t loff[CHIME_MAX_LEAVES]; /* offset of the leaf in a sample */
  uint8_t *leaf[CHIME_MAX_LEAVES];
  row_meta_t *meta;
  uint32_t *dense;       /* the live rows, in no order */
  uint32_t *dpos;        /* row -> its index in dense; NONE: not live */
  uint32_t *prev, *nx;   /* live rows in insert order */
  uint32_t *freeq;       /* free rows under the capacity, in the order freed */
  uint32_t *fspare;      /* free spare rows, a stack */
  chime__sumtree_t *sum; /* priority^exponent by row (prioritized) */
  chime__heap_t *hmin, *hmax;
  chime__keyindex_t *keys; /* key -> live row (MutatePriorities) */
  uint64_t mts;            /* max_times_sampled, 0: no limit */
  uint64_t max_items;      /* chime__table_max_items: more never fit */
  double prio_sure; /* priorities up to it weigh within bounds (surely) */
  void *map;
  size_t map_len;

  pthread_mutex_t mu;
  pthread_cond_t space;
  pthread_cond_t items;
  pthread_cond_t unpinned; /* an insert waits for a pinned row */
  pthread_cond_t handoff;  /* a sliced mutation lets a waiter go first */
  int pin_waiters;
  /* Threads queued for mu (lock_table), and how many took it after a
   * wait: a mutation between two slices waits for one of them. */
  atomic_uint lock_waiters;
  uint64_t handoffs;
  int yielding;                   /* mutations waiting on handoff */
  void (*mutate_hook)(void *arg); /* tests: at each break of a mutation */
  void *mutate_hook_arg;
  int viewing; /* checkpoint views holding rows (chime__table_view) */
  uint32_t oldest, newest;   /* NONE when empty */
  uint64_t rows;             /* capacity + spare rows */
  uint32_t free_head, nfree; /* freeq ring, wrapped at the capacity */
  uint32_t nspare;           /* fspare stack */
  int dense_on;              /* a uniform selector needs dense */
  uint64_t count;            /* live items */
  uint64_t ndead; /* rows whose item left while pinned: neither live nor free */
  chime__table_waiter_t *waiters; /* samplers told when items arrive */
  uint64_t next_key;
  /* Key reservations (chime__table_set_key_reserve): counts below
   * key_reserved may be issued; reserving more calls reserve_fn. */
  uint64_t key_reserved;
  chime__table_reserve_fn reserve_fn;
  void *reserve_ctx;
  uint64_t rng;
  int closed;
  chime__dedupe_t *dedupe; /* writers' requests, under mu */
  uint64_t inserts, samples, sampler_wait_ns, insert_wait_ns, returned;
  uint64_t rate_insert_wait_ns; /* inserts held back by the rate limiter */
  uint64_t rate_sample_wait_ns; /* samplers held back by it */
  uint32_t inserts_waiting_rate;
  uint64_t left, left_times; /* items that left, and their times sampled */
  /* A sequence table: rows hold windows (no leaf bytes), the steps are in
   * the step store. nleaves is 0 then; the step spec's leaves are sleaves,
   * their bytes in lbytes. */
  chime__steps_t *steps;
  chime_spec_t item_spec; /* a batch's: [T, *shape] per leaf (+ mask) */
  uint32_t sleaves;
  uint32_t *wslot, *wfirst, *wlen; /* a window's first step, index, length */
  uint64_t *wep;                   /* its episode (these in the mapping) */
  void *smem;      /* in a file: the step store's part of the mapping */
  double max_prio; /* initial_priority "max" */
  uint64_t step_key, windows_dropped;
  uint32_t spare_hw; /* spare rows below it touched since the last trim */
  /* Ragged leaves (docs/replay.md, "Ragged leaves"): not in leaf[] (lbytes
   * 0 there) but, per row, in one allocation rbuf[r] holding the row's
   * ragged leaves' rows back to back, only those used; rlen[r * nrag + k]
   * is the k-th ragged leaf's length. A row's allocation goes when the row
   * is free (chime__tbl_free_push). */
  uint32_t nrag;
  uint64_t fixed_bytes;            /* a sample's bytes but its ragged leaves' */
  uint32_t rag[CHIME_MAX_LEAVES];  /* the k-th ragged leaf's index */
  uint32_t rk[CHIME_MAX_LEAVES];   /* a ragged leaf's k (by leaf index) */
  uint64_t rrow[CHIME_MAX_LEAVES]; /* a ragged leaf's bytes per row, else 0 */
  uint8_t **rbuf;
  uint32_t *rlen;
  uint64_t rag_bytes; /* the ragged bytes of all rows held */
  uint64_t rag_alloc; /* and the allocator's (chime__tbl_rag_alloc) */
  /* Compressed leaves (zleaf.h): not in leaf[] (lbytes 0 there) but, per
   * row, in one allocation zbuf[r] (sizes, then stored bytes). zraw[l]
   * is leaf l's bytes when it is compressed (a ragged one's at its bound:
   * compressed at its length, its rows not in rbuf), else 0. z_raw and
   * z_stored:
   * the rows held, their compressed leaves' bytes as inserted and as
   * kept (the sizes included); z_kept_raw: leaves stored raw so far. */
  uint32_t nz;
  uint32_t zl[CHIME_MAX_LEAVES];   /* the k-th compressed leaf's index */
  uint64_t zraw[CHIME_MAX_LEAVES]; /* by leaf index */
  uint8_t **zbuf;
  uint64_t z_raw, z_stored, z_kept_raw;
  /* The same per compressed leaf (the k-th): stored with its u32 size. */
  uint64_t zk_raw[CHIME_MAX_LEAVES], zk_stored[CHIME_MAX_LEAVES];
  uint64_t zk_kept_raw[CHIME_MAX_LEAVES];
  uint64_t z_sample; /* a sample's compressed leaves' bytes, raw */
  /* Policy versions: the newest the table knows (its items' and its
   * learners'), the live rows by version (max_staleness only: NULL
   * without), and the items that left for being too far behind it. */
  uint64_t vnewest;
  chime__verindex_t *vidx;
  uint64_t removed_stale;
  /* A group table's groups its filters dropped, by reason (kind - 1). */
  uint64_t group_dropped[2];
  /* Staleness weighting (selector_stale.c): vidx kept for it, and its Z
   * (verindex.h) is what draws weigh against. */
  int stale_on;
  /* Pacing (pace.c): the samples written ahead of the learner's progress
   * (each version step of the newest takes pace_batch off, down to 0),
   * the time inserts waited on it, the requests that did and those that
   * wait now; samplers blocked (chime__table_sample), whom a paced
   * insert never keeps waiting. */
  uint64_t pace_ahead, pace_wait_ns, paced_inserts;
  uint32_t inserts_waiting_pace, samplers_blocked;
  /* Draws whose selector gave no row of the table, drawn again
   * (sample.c, repick): 0 unless a selector has a bug. */
  uint64_t bad_picks;
  /* A table in a file (table_file.h; NULL: in memory). commit[r]: row r's
   * place in insert order while it holds an item, 0 while not; written
   * last when a row goes live (its bytes and record are in by then) and
   * first when it leaves. Items given back count down from the middle,
   * new ones up. */
  chime__tbl_file_t *file;
  uint64_t *commit;
  uint64_t seq_lo, seq_hi;
  /* A table in files with compressed or ragged leaves: zbuf[r] and
   * rbuf[r] point into the bytes file (table_bytes.h), at the extents
   * zext[r] and rext[r] (in the main file, as rlen is); NULL: in memory. */
  chime__tbl_bytes_t *bytes;
  chime__tbl_extent_t *zext, *rext;
};

#define NONE UINT32_MAX
/* Writers remembered (and a sequence table's lanes). */
#define WRITERS(cfg)                                                           \
  ((cfg)->max_writers ? (cfg)->max_writers : CHIME__INSERT_WRITERS)

/* The table's lock, taken by everyone but a mutation's next slice. A
 * large MutatePriorities holds it in slices (chime__table_mutate) and,
 * between two, lets a thread that queued for it go first: glibc's mutexes
 * are not fair, and the mutation would take the lock straight back while
 * the waiter is still being woken. Uncontended, this is one trylock. */
static inline void chime__tbl_lock(chime__table_t *t) {
  if (pthread_mutex_trylock(&t->mu) == 0)
    return;
  atomic_fetch_add(&t->lock_waiters, 1);
  pthread_mutex_lock(&t->mu);
  atomic_fetch_sub(&t->lock_waiters, 1);
  t->handoffs++;
  if (t->yielding > 0)
    pthread_cond_broadcast(&t->handoff);
}

/* Whether n more keys from next (a table's next_key or step_key) would run
 * past t's shard's last count (common/key.h): the table refuses the insert
 * (CHIME_EOVERFLOW) rather than issue another shard's keys. Once the last
 * count is issued, next is the next shard's first key (0 after shard
 * 65535's): none left. */
static inline int chime__tbl_keys_out(const chime__table_t *t, uint64_t next,
                                      uint64_t n) {
  if (chime__key_shard(next) != t->cfg.shard)
    return n > 0;
  return n > CHIME__KEY_MAX_COUNT - chime__key_count(next) + 1;
}

/* next's count in t's shard, CHIME__KEY_MAX_COUNT + 1 once every count
 * was issued (next is then the next shard's first key, or 0). */
static inline uint64_t chime__tbl_key_pos(const chime__table_t *t,
                                          uint64_t next) {
  return next - ((uint64_t)t->cfg.shard << CHIME__KEY_COUNT_BITS);
}

/* Keys up to count end (exclusive) may be issued: reserved durably first
 * when a hook asks for it (chime__table_set_key_reserve). Under the lock,
 * after chime__tbl_keys_out; 0 or the hook's error. */
int chime__tbl_keys_reserve(chime__table_t *t, uint64_t end);

static inline size_t chime__tbl_align64(size_t n) {
  return (n + 63u) & ~(size_t)63u;
}

static inline uint64_t chime__tbl_rand(chime__table_t *t) {
  /* xorshift64*: quality is ample for replay sampling and it is cheap. */
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * UINT64_C(2685821657736338717);
}

/* 53 random bits: a double in [0, 1). */
static inline double chime__tbl_rand_unit(chime__table_t *t) {
  return (double)(chime__tbl_rand(t) >> 11) * 0x1p-53;
}

/* Free rows: rows - count - ndead of them. Rows under the capacity go
 * round a ring in the order they were freed (no division on the hot path:
 * the index wraps by comparison); spare rows are taken only when none of
 * those is free. */
/* A sample's ragged bytes in rbuf (its lengths len: compressed ragged
 * leaves are in zbuf instead). */
static inline uint64_t chime__tbl_rag_bytes(const chime__table_t *t,
                                            const uint32_t *len) {
  uint64_t b = 0;
  for (uint32_t k = 0; k < t->nrag; k++)
    if (t->zraw[t->rag[k]] == 0)
      b += (uint64_t)len[k] * t->rrow[t->rag[k]];
  return b;
}

/* Row r's ragged bytes, gone with its item. */
static inline uint64_t chime__tbl_rag_size(const chime__table_t *t,
                                           uint32_t r) {
  return chime__tbl_rag_bytes(t, t->rlen + (size_t)r * t->nrag);
}

/* Compressed leaf l's bytes raw in a sample of ragged lengths len: a
 * ragged one's at its length, else the leaf's. */
static inline uint64_t chime__tbl_z_rawsize(const chime__table_t *t, uint32_t l,
                                            const uint32_t *len) {
  return t->rrow[l] != 0 ? (uint64_t)len[t->rk[l]] * t->rrow[l] : t->zraw[l];
}

/* What the allocator holds for an allocation p: its usable size and the
 * chunk's header. */
static inline uint64_t chime__tbl_rag_alloc(void *p) {
  return p != NULL ? malloc_usable_size(p) + sizeof(size_t) : 0;
}

/* buf (len bytes, malloc'd) into a new extent of the bytes file, *e set
 * to it (after the bytes: the row's commit word comes later still); buf
 * freed. The extent's bytes, or NULL for none. After
 * chime__tbl_store_reserve. */
static inline uint8_t *chime__tbl_place(chime__table_t *t,
                                        chime__tbl_extent_t *e, uint8_t *buf,
                                        uint64_t len) {
  uint8_t *p = NULL;
  chime__tbl_extent_t x = {0, 0, 0};
  if (len > 0) {
    x.off = chime__tbl_bytes_alloc(t->bytes, (uint32_t)len);
    x.len = (uint32_t)len;
    p = chime__tbl_bytes_base(t->bytes) + x.off;
    memcpy(p, buf, (size_t)len);
  }
  *e = x;
  free(buf);
  return p;
}

/* Row r takes buf (malloc'd, or NULL without ragged bytes) as its ragged
 * leaves' rows, of lengths len (nrag of them). */
static inline void chime__tbl_rag_take(chime__table_t *t, uint32_t r,
                                       uint8_t *buf, const uint32_t *len) {
  memcpy(t->rlen + (size_t)r * t->nrag, len, t->nrag * sizeof(uint32_t));
  uint64_t n = chime__tbl_rag_size(t, r);
  t->rag_bytes += n;
  if (t->bytes != NULL) {
    t->rbuf[r] = chime__tbl_place(t, &t->rext[r], buf, n);
    return;
  }
  t->rbuf[r] = buf;
  t->rag_alloc += chime__tbl_rag_alloc(buf);
}

static inline void chime__tbl_rag_drop(chime__table_t *t, uint32_t r) {
  if (t->bytes != NULL) { /* a row of 0 ragged bytes has no extent */
    t->rag_bytes -= t->rext[r].len;
    chime__tbl_bytes_free(t->bytes, t->rext[r]);
    t->rext[r].len = 0;
    t->rbuf[r] = NULL;
    return;
  }
  if (t->rbuf[r] == NULL)
    return;
  t->rag_bytes -= chime__tbl_rag_size(t, r);
  t->rag_alloc -= chime__tbl_rag_alloc(t->rbuf[r]);
  free(t->rbuf[r]);
  t->rbuf[r] = NULL;
}

/* Row r's compressed leaves, gone with its item. */
static inline void chime__tbl_z_drop(chime__table_t *t, uint32_t r) {
  if (t->zbuf[r] == NULL)
    return;
  const uint32_t *len = t->nrag > 0 ? t->rlen + (size_t)r * t->nrag : NULL;
  for (uint32_t k = 0; k < t->nz; k++) {
    uint64_t raw = chime__tbl_z_rawsize(t, t->zl[k], len);
    t->z_raw -= raw;
    t->zk_raw[k] -= raw;
    t->zk_stored[k] -= 4 + (uint64_t)chime__zleaf_size(t->zbuf[r], k);
  }
  t->z_stored -= chime__zleaf_total(t->zbuf[r], t->nz);
  if (t->bytes != NULL) {
    chime__tbl_bytes_free(t->bytes, t->zext[r]);
    t->zext[r].len = 0;
  } else {
    free(t->zbuf[r]);
  }
  t->zbuf[r] = NULL;
}

/* Row r's compressed leaves (zbuf[r]) counted in the table's bytes. */
static inline void chime__tbl_z_count(chime__table_t *t, uint32_t r) {
  const uint8_t *buf = t->zbuf[r];
  const uint32_t *len = t->nrag > 0 ? t->rlen + (size_t)r * t->nrag : NULL;
  for (uint32_t k = 0; k < t->nz; k++) {
    uint64_t raw = chime__tbl_z_rawsize(t, t->zl[k], len);
    uint32_t stored = chime__zleaf_size(buf, k);
    int kept_raw = raw > 0 && stored == raw;
    t->z_raw += raw;
    t->z_kept_raw += kept_raw;
    t->zk_raw[k] += raw;
    t->zk_stored[k] += 4 + (uint64_t)stored;
    t->zk_kept_raw[k] += kept_raw;
  }
  t->z_stored += chime__zleaf_total(buf, t->nz);
}

/* Row r takes buf (malloc'd) as its compressed leaves (its ragged
 * lengths set). */
static inline void chime__tbl_z_take(chime__table_t *t, uint32_t r,
                                     uint8_t *buf) {
  if (t->bytes != NULL)
    buf = chime__tbl_place(t, &t->zext[r], buf, chime__zleaf_total(buf, t->nz));
  t->zbuf[r] = buf;
  chime__tbl_z_count(t, r);
}

static inline void chime__tbl_free_push(chime__table_t *t, uint32_t r) {
  if (t->nrag > 0)
    chime__tbl_rag_drop(t, r);
  if (t->nz > 0)
    chime__tbl_z_drop(t, r);
  if (r >= t->cfg.capacity) {
    t->fspare[t->nspare++] = r;
    return;
  }
  uint64_t tail = t->free_head + (uint64_t)t->nfree;
  if (tail >= t->cfg.capacity)
    tail -= t->cfg.capacity;
  t->freeq[tail] = r;
  t->nfree++;
}

static inline uint32_t chime__tbl_free_pop(chime__table_t *t) {
  if (t->nfree == 0) {
    uint32_t r = t->fspare[--t->nspare];
    if (r >= t->spare_hw) /* pages to give back (trim_spares) */
      t->spare_hw = r + 1;
    return r;
  }
  uint32_t r = t->freeq[t->free_head];
  if (++t->free_head == t->cfg.capacity)
    t->free_head = 0;
  t->nfree--;
  return r;
}

/* The value a row weighs in the sum tree. */
static inline double chime__tbl_weight(const chime__table_t *t, double prio) {
  double e = t->cfg.priority_exponent;
  return e == 1.0 ? prio : pow(prio, e);
}

/* Small leaves (scalars) are the common case; a fixed-size memcpy is inlined
 * by the compiler where a variable one is a call. */
static inline void chime__tbl_copy_leaf(uint8_t *dst, const uint8_t *src,
                                        uint64_t n) {
  switch (n) {
  case 1:
    *dst = *src;
    break;
  case 2:
    memcpy(dst, src, 2);
    break;
  case 4:
    memcpy(dst, src, 4);
    break;
  case 8:
    memcpy(dst, src, 8);
    break;
  default:
    memcpy(dst, src, n);
  }
}

/* Reads a sample's bytes in order from pieces of a message; a leaf that
 * straddles two pieces is the rare case. */
typedef struct {
  const chime__span_t *sp;
  size_t i, off;
} chime__tbl_cursor_t;

static inline void chime__tbl_cursor_read(chime__tbl_cursor_t *c, uint8_t *dst,
                                          uint64_t n) {
  const chime__span_t *s = &c->sp[c->i];
  if (s->len - c->off >= n) {
    chime__tbl_copy_leaf(dst, s->p + c->off, n);
    c->off += (size_t)n;
    return;
  }
  while (n > 0) {
    size_t avail = c->sp[c->i].len - c->off;
    if (avail == 0) {
      c->i++;
      c->off = 0;
      continue;
    }
    size_t take = n < avail ? (size_t)n : avail;
    memcpy(dst, c->sp[c->i].p + c->off, take);
    dst += take;
    c->off += take;
    n -= take;
  }
}

/* n bytes at the cursor, in place when one piece holds them, else copied
 * into tmp (n bytes). */
static inline const uint8_t *chime__tbl_cursor_peek(chime__tbl_cursor_t *c,
                                                    uint64_t n, uint8_t *tmp) {
  while (n > 0 && c->sp[c->i].len == c->off) {
    c->i++;
    c->off = 0;
  }
  const chime__span_t *s = &c->sp[c->i];
  if (n > 0 && s->len - c->off >= n) {
    const uint8_t *p = s->p + c->off;
    c->off += (size_t)n;
    return p;
  }
  chime__tbl_cursor_read(c, tmp, n);
  return tmp;
}

static inline void chime__tbl_cursor_skip(chime__tbl_cursor_t *c, uint64_t n) {
  while (n > 0) {
    size_t avail = c->sp[c->i].len - c->off;
    if (avail == 0) {
      c->i++;
      c->off = 0;
      continue;
    }
    size_t take = n < avail ? (size_t)n : avail;
    c->off += take;
    n -= take;
  }
}

/* A table of 10^7 items is far larger than the caches: each draw's sum
 * tree path, dense entry and leaf bytes are misses, and one by one they
 * queue (a descent cannot start before the draw ahead of it is known).
 * With no max_times_sampled nothing changes the table while a batch is
 * drawn, so a prioritized or (in a table larger than the caches) uniform
 * batch is drawn CHIME__TBL_DRAW_CHUNK draws at a time before any is read (the
 * sum tree's descents side by side, uniform's dense entries asked for
 * together), with the same random numbers in the same order: the same
 * rows and probabilities as select_row one by one. A uniform chunk's
 * records are asked for as their rows are known (CPU per sample over the
 * gather floor 0.88-0.90x at 10^6 and 10^7 items; for prioritized, after
 * find_many, it measured no faster), and copy_rows asks for each row's
 * leaf bytes CHIME__TBL_PREFETCH_AHEAD samples ahead of the copy. */
#define CHIME__TBL_DRAW_CHUNK 64
#define CHIME__TBL_PREFETCH_AHEAD 8
/* Bytes of a table under which its rows are taken to be in the caches:
 * about twice a core's L2 here (uniform at 10^4 items of 256 B, 3 MB,
 * sampled 9-16% slower drawn ahead and with prefetches, at 3 x 10^4 as
 * fast or faster). The per-row bookkeeping: its record, dense, dpos. */
#define CHIME__TBL_CACHED_BYTES (4u << 20)
#define CHIME__TBL_ROW_META_BYTES 48u

/* Whether a batch's rows are scattered over more memory than the caches
 * hold: uniform and prioritized rows are random, fifo's follow one
 * another and lifo's and the heaps' are the same few again and again. */
static inline int chime__tbl_scattered(const chime__table_t *t) {
  if (!t->sel->random)
    return 0;
  return (double)t->cfg.capacity *
             (double)(t->fixed_bytes + CHIME__TBL_ROW_META_BYTES) >
         (double)CHIME__TBL_CACHED_BYTES;
}

/* Asks for row r's record ahead of plan_batch's read and write of it:
 * a 40-byte record straddles two cache lines in half the rows, and a
 * prefetch of its start alone left the other line a miss per sample
 * (uniform at 10^6 items sampled ~1.3x slower when the record grew from
 * 32 bytes for the version). */
static inline void chime__tbl_prefetch_meta(const chime__table_t *t,
                                            uint32_t r) {
  const char *m = (const char *)&t->meta[r];
  __builtin_prefetch(m, 1);
  __builtin_prefetch(m + sizeof(row_meta_t) - 1, 1);
}

/* A batch's j-th row: rows[j], or (rows NULL) kept in the slot's key
 * until the copy is done. */
static inline uint32_t chime__tbl_row_at(const chime__ring_wslot_t *slot,
                                         const uint32_t *rows, uint64_t j) {
  return rows != NULL ? rows[j] : (uint32_t)slot->info[j].key;
}

/* Row r's commit word (table_file.h), after every write before it. */
static inline void chime__tbl_commit(chime__table_t *t, uint32_t r,
                                     uint64_t seq) {
  __atomic_store_n(&t->commit[r], seq, __ATOMIC_RELEASE);
}

/* --- table_file.c: a table's storage file --- */
/* A table with a bytes file: room in it for count samples' compressed
 * leaves (zbufs, NULL without) and ragged rows (lengths, nrag a sample),
 * before any row is taken. 0, or the thread's detail says why. */
int chime__tbl_store_reserve(chime__table_t *t, uint8_t *const *zbufs,
                             const uint32_t *lengths, uint64_t count);

/* --- table_reopen.c: a table opened again on its file --- */
/* Rebuilds the indexes of t, just mapped on the file at path, from its
 * rows' commit words and records (no leaf is read; create put the other
 * rows in the free lists); next_key goes on past
 * every key the file's table may have issued. 0 or a CHIME_E code with
 * the thread's detail. */
int chime__tbl_reopen(chime__table_t *t, const char *path);

/* --- table.c: storage, waits, checks --- */
/* Makes row r (its item written) live in every index: the newest in
 * insert order, or the oldest (an item given back). w: its weight in the
 * sum tree, chime__tbl_weight(t, its priority), when there is one. */
void chime__tbl_live_add_weighted(chime__table_t *t, uint32_t r, int oldest,
                                  double w);
void chime__tbl_live_add(chime__table_t *t, uint32_t r, int oldest);
/* Takes live row r out; it is free again once no sampler copies it. */
void chime__tbl_live_remove(chime__table_t *t, uint32_t r);
/* Items arrived (or the table closed): wakes blocked samplers and hands
 * back the waiters to call (chime__tbl_notify) once the lock is released. */
chime__table_waiter_t *chime__tbl_items_arrived(chime__table_t *t);
void chime__tbl_notify(chime__table_waiter_t *w);
/* pthread_cond_wait, its time added to *acc. */
void chime__tbl_wait_timed(pthread_cond_t *c, pthread_mutex_t *mu,
                           uint64_t *acc);

/* Priorities: 0 when every one is a priority the table takes, else
 * CHIME_EINVAL; the quick check (1: all surely fine) and the exact one,
 * which names the first bad one in err (all: 0 allowed too). */
int chime__tbl_check_priorities(const chime__table_t *t, const double *prio,
                                uint64_t count);
int chime__tbl_priorities_fine(const chime__table_t *t, const double *prio,
                               size_t n, int all);
int chime__tbl_priorities_why(const chime__table_t *t, const double *prio,
                              size_t n, int all, char *err, size_t errlen);

/* A writer's request the table has seen: 1 when it went in before (its
 * original first key in *first_key, dq->resent set: ack it again), 0 when
 * it is new, a CHIME_E code when the table cannot tell (dedupe.h). Under
 * the lock, asked again after every wait. */
int chime__tbl_seen(chime__table_t *t, chime__dedupe_req_t *dq, uint32_t count,
                    uint64_t *first_key);

/* Items of versions below it are stale (max_staleness; 0: none is). */
static inline uint64_t chime__tbl_stale_below(const chime__table_t *t) {
  uint64_t s = t->cfg.max_staleness;
  return s != 0 && t->vnewest > s ? t->vnewest - s : 0;
}

/* Sample j's version in an insert's versions (NULL or none: 0). */
static inline uint64_t chime__tbl_version_at(const chime__table_versions_t *v,
                                             uint64_t j) {
  if (v == NULL || v->n == 0)
    return 0;
  return v->n == 1 ? v->v[0] : v->v[j];
}

/* The newest version known rises to ver (if it is newer); the items it
 * leaves too far behind leave (removed_stale). Returns how many left. */
uint64_t chime__tbl_version_seen(chime__table_t *t, uint64_t ver);

/* --- pace.c: producers held back by the learner's progress --- */
/* Whether a request of n samples must wait on pacing now: 0 without
 * pacing, while the samples ahead and these stay within the bound, or
 * while a sampler waits (for items or the rate limiter: a learner never
 * waits on pacing). */
int chime__tbl_pace_holds(const chime__table_t *t, uint64_t n);
/* The newest version rose from old to now: the learner's progress; wakes
 * the inserts waiting on it. */
void chime__tbl_pace_progress(chime__table_t *t, uint64_t old, uint64_t now);
/* A sampler starts waiting: wakes the paced inserts. */
void chime__tbl_pace_starving(chime__table_t *t);
/* A request's samples' versions from its version leaf (config
 * version_leaf): each sample's the minimum of its rows (the request's
 * version for an empty one), into out (count of them), the largest in
 * *vmax. bufs: each sample's ragged rows (rag_gather). */
void chime__tbl_leaf_versions(const chime__table_t *t, uint8_t *const *bufs,
                              const uint32_t *lengths, uint32_t count,
                              const chime__table_versions_t *given,
                              uint64_t *out, uint64_t *vmax);

/* --- insert.c --- */
/* count allocations and the array holding them (NULL-safe, entries too). */
void chime__tbl_bufs_free(uint8_t **bufs, uint32_t count);

/* --- selector_stale.c: prioritized draws weighted by staleness --- */
extern const chime__selector_t chime__selector_prioritized_stale;

/* --- sample.c --- */
/* One sample's pin of row k let go, under the lock: a row whose item left
 * meanwhile is free once its last pin goes. */
void chime__tbl_unpin_row(chime__table_t *t, uint32_t k);

/* --- table_seq.c: a sequence table's items are windows of steps --- */
/* A sequence table's batch spec; its step store and window records. */
int chime__tbl_seq_spec(const chime__table_config_t *cfg, chime_spec_t *out);
/* The step store's config of a sequence table's (its mem NULL). */
void chime__tbl_seq_config(const chime__table_config_t *cfg,
                           chime__steps_config_t *sc);
/* The step store, its mapped part at mem (in the table's file; NULL: its
 * own memory), opened as it was there when reopen. The window records
 * (wslot ...) are the table's mapping's (map_storage). */
int chime__tbl_seq_create(chime__table_t *t, void *mem, int reopen);
void chime__tbl_seq_destroy(chime__table_t *t);
/* zbufs: each step's compressed leaves (insert.c's z_gather), NULL
 * without; those appended are taken (set NULL), the rest the caller's.
 * stored: the writer sent them stored, so spans hold each at its stored
 * size (its zbuf's), not raw. */
int chime__tbl_seq_insert(chime__table_t *t, const chime__span_t *spans,
                          uint32_t count, const double *priorities,
                          const chime__table_versions_t *versions,
                          uint64_t *first_key, const atomic_int *abort,
                          chime__dedupe_req_t *dq, int nowait, uint8_t **zbufs,
                          int stored);
void chime__tbl_seq_copy(chime__table_t *t, const chime_ring_layout_t *lay,
                         chime__ring_wslot_t *slot, const uint32_t *rows);

/* group.c: a group table's request of count groups (their ragged rows
 * gathered in bufs) checked whole (chime__group_check: CHIME_EINVAL with
 * why filled) and filtered: *drop NULL when every group goes in, else
 * count bytes (malloc'd), the reason of each dropped group, 0 the rest. */
int chime__tbl_group_in(chime__table_t *t, uint8_t *const *bufs, uint32_t count,
                        const uint32_t *lengths, char *why, size_t whylen,
                        uint8_t **drop);

#endif
