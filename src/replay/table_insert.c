/* Insert: samples copied into the table from the pieces of a message, the
 * remover making room in a full table, writers' resends acked again from
 * the dedupe memory, and inserts that wait for room or for the limiter. */
#include "replay/table_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chime/errors.h"
#include "common/spec.h"

int chime__table_insert(chime__table_t *t, const uint8_t *data, uint32_t count,
                        const double *priorities, uint64_t *first_key,
                        const atomic_int *abort, chime__dedupe_req_t *dq) {
  chime__span_t one = {data, (size_t)(count * t->sample_bytes)};
  return chime__table_insert_spans(t, &one, 1, count, NULL, priorities,
                                   first_key, abort, dq);
}

/* Sample j's ragged bytes (lengths as for chime__table_insert_spans). */
static uint64_t rag_sample_bytes(const chime__table_t *t,
                                 const uint32_t *lengths, uint64_t j) {
  uint64_t b = 0;
  for (uint32_t k = 0; k < t->nrag; k++)
    b += (uint64_t)lengths[j * t->nrag + k] * t->rrow[t->rag[k]];
  return b;
}

/* A request's compressed leaves sent stored (chime__table_stored_t), by
 * leaf: at[l] is k + 1 for the k-th of st's leaves, 0 for a leaf sent
 * raw. */
typedef struct {
  const chime__table_stored_t *st;
  uint8_t at[CHIME_MAX_LEAVES];
} zin_t;

/* Leaf l's bytes in sample j of the request (a compressed leaf sent stored:
 * its stored size). */
static uint64_t z_sent_bytes(const chime__table_t *t, const zin_t *z,
                             uint64_t j, uint32_t l) {
  if (z->at[l] == 0)
    return t->zraw[l];
  return z->st->sizes[j * z->st->n + z->at[l] - 1];
}

/* Leaf l's raw bytes in sample j: a ragged leaf's at its length. */
static uint64_t raw_bytes(const chime__table_t *t, const uint32_t *lengths,
                          uint64_t j, uint32_t l) {
  if (t->rrow[l] == 0)
    return t->zraw[l] != 0 ? t->zraw[l] : t->lbytes[l];
  uint32_t k = 0;
  while (t->rag[k] != l)
    k++;
  return (uint64_t)lengths[j * t->nrag + k] * t->rrow[l];
}

/* Leaf l's bytes in sample j of the request: sent stored, its stored
 * size; else its raw bytes. */
static uint64_t sent_bytes(const chime__table_t *t, const zin_t *z,
                           const uint32_t *lengths, uint64_t j, uint32_t l) {
  return z->at[l] != 0 ? z_sent_bytes(t, z, j, l) : raw_bytes(t, lengths, j, l);
}

/* Sample j's bytes in the request: a ragged table's at its lengths, its
 * compressed leaves sent stored at their stored sizes. */
static uint64_t req_sample_bytes(const chime__table_t *t,
                                 const uint32_t *lengths, const zin_t *z,
                                 uint64_t j) {
  uint64_t b = t->nrag > 0 ? t->fixed_bytes + rag_sample_bytes(t, lengths, j)
                           : t->sample_bytes;
  for (size_t k = 0; z->st != NULL && k < z->st->n; k++)
    b = b - raw_bytes(t, lengths, j, z->st->leaves[k]) +
        z->st->sizes[j * z->st->n + k];
  return b;
}

static int z_why(const chime__table_stored_t *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int z_why(const chime__table_stored_t *st, const char *fmt, ...) {
  if (st->why != NULL && st->whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->why, st->whylen, fmt, ap);
    va_end(ap);
  }
  return CHIME_EINVAL;
}

/* Groups the table's filters dropped so far, every reason. */
static uint64_t dropped_groups(const chime__table_t *t) {
  uint64_t n = 0;
  for (size_t r = 0; r < sizeof(t->group_dropped) / sizeof(t->group_dropped[0]);
       r++)
    n += t->group_dropped[r];
  return n;
}

/* The request's stored leaves against the table: leaves it compresses (a
 * sequence table's: its steps'), in spec order, none twice, each stored
 * size at most its leaf's bytes (a ragged leaf's at the sample's length;
 * the server names these for its writer first: insertcheck.c). */
static int z_in(const chime__table_t *t, const chime__table_stored_t *st,
                uint32_t count, const uint32_t *lengths, zin_t *z) {
  memset(z, 0, sizeof(*z));
  if (st == NULL || st->n == 0)
    return 0;
  uint32_t nleaves = t->steps != NULL ? t->sleaves : t->nleaves;
  if (t->nrag > 0 && lengths == NULL && count > 0)
    return z_why(st, "a ragged table's samples need their lengths");
  z->st = st;
  for (size_t k = 0; k < st->n; k++) {
    uint32_t l = st->leaves[k];
    if (l >= nleaves || t->zraw[l] == 0 || z->at[l] != 0)
      return z_why(st, "leaf %u sent stored: not a compressed leaf", l);
    z->at[l] = (uint8_t)(k + 1);
  }
  for (uint64_t j = 0; j < count; j++)
    for (size_t k = 0; k < st->n; k++)
      if (st->sizes[j * st->n + k] > raw_bytes(t, lengths, j, st->leaves[k]))
        return z_why(
            st, "leaf '%s' of sample %llu: stored size past the leaf%s",
            t->cfg.spec.leaves[st->leaves[k]].name, (unsigned long long)j,
            t->rrow[st->leaves[k]] != 0 ? " at its length" : "");
  return 0;
}

void chime__tbl_bufs_free(uint8_t **bufs, uint32_t count) {
  if (bufs == NULL)
    return;
  for (uint32_t j = 0; j < count; j++)
    free(bufs[j]);
  free(bufs);
}

/* Each sample's ragged rows copied into an allocation of their own,
 * before the table's lock: a row then takes its sample's allocation under
 * the lock, and a request that fails for want of memory has inserted
 * nothing. */
static int rag_gather(const chime__table_t *t, const chime__span_t *spans,
                      uint32_t count, const uint32_t *lengths, const zin_t *z,
                      uint8_t ***out) {
  chime__tbl_cursor_t cur = {spans, 0, 0};
  uint8_t **bufs = calloc(count ? count : 1, sizeof(*bufs));
  if (bufs == NULL)
    return CHIME_ENOMEM;
  for (uint32_t j = 0; j < count; j++) {
    uint64_t size = chime__tbl_rag_bytes(t, lengths + (size_t)j * t->nrag);
    uint64_t at = 0;
    if (size > 0 && (bufs[j] = malloc((size_t)size)) == NULL) {
      chime__tbl_bufs_free(bufs, count);
      return CHIME_ENOMEM;
    }
    for (uint32_t l = 0, k = 0; l < t->nleaves; l++) {
      if (t->rrow[l] == 0) { /* a compressed leaf is not in lbytes */
        chime__tbl_cursor_skip(&cur, t->zraw[l] != 0 ? z_sent_bytes(t, z, j, l)
                                                     : t->lbytes[l]);
        continue;
      }
      uint64_t n = (uint64_t)lengths[(size_t)j * t->nrag + k++] * t->rrow[l];
      if (t->zraw[l] != 0) { /* compressed: in zbuf (z_gather) */
        chime__tbl_cursor_skip(&cur,
                               z->at[l] != 0 ? z_sent_bytes(t, z, j, l) : n);
        continue;
      }
      if (n > 0)
        chime__tbl_cursor_read(&cur, bufs[j] + at, n);
      at += n;
    }
  }
  *out = bufs;
  return 0;
}

/* One compressed leaf of sample j sent stored, n bytes raw (a ragged
 * leaf's at its length), s stored, at src: checked (one whole frame that
 * declares and decompresses to exactly n bytes, into dec; never more)
 * and copied as it is into dst. */
static int z_take_stored(const chime__table_t *t, const zin_t *z, uint32_t l,
                         uint64_t j, const uint8_t *src, size_t s, size_t n,
                         uint8_t *dst, uint8_t *dec) {
  int rc = chime__zleaf_check(src, s, n, dec);
  if (rc == CHIME_ECORRUPT)
    return z_why(z->st,
                 "leaf '%s' of sample %llu: its %zu stored bytes are not one "
                 "zstd frame of the leaf's %zu bytes",
                 t->cfg.spec.leaves[l].name, (unsigned long long)j, s, n);
  if (rc == 0)
    memcpy(dst, src, s);
  return rc;
}

/* Each sample's compressed leaves (zleaf.h) in an allocation of their
 * own, compressed before the table's lock (a leaf of 84x84 bytes takes
 * about 10 us at level 3: under the lock it would hold every sampler and
 * insert back), or, sent stored by the writer, checked and copied; a row
 * (or a step) then takes its sample's allocation under the lock. */
static int z_gather(const chime__table_t *t, uint32_t nleaves, uint32_t nz,
                    const chime__span_t *spans, uint32_t count,
                    const uint32_t *lengths, const zin_t *z, uint8_t ***out) {
  chime__tbl_cursor_t cur = {spans, 0, 0};
  uint64_t most = 4 * (uint64_t)nz, big = 0;
  for (uint32_t k = 0; k < nz; k++) {
    most += t->zraw[t->zl[k]];
    big = t->zraw[t->zl[k]] > big ? t->zraw[t->zl[k]] : big;
  }
  uint8_t **bufs = calloc(count ? count : 1, sizeof(*bufs));
  uint8_t *pack = malloc((size_t)most), *tmp = malloc((size_t)big);
  uint8_t *dec = z->st != NULL ? malloc((size_t)big) : NULL;
  int rc = bufs == NULL || pack == NULL || tmp == NULL ||
                   (z->st != NULL && dec == NULL)
               ? CHIME_ENOMEM
               : 0;
  for (uint32_t j = 0; rc == 0 && j < count; j++) {
    size_t at = 4 * (size_t)nz;
    for (uint32_t l = 0, kr = 0, kz = 0; rc == 0 && l < nleaves; l++) {
      uint64_t rb = 0; /* a ragged leaf's bytes at its length */
      if (t->rrow[l] != 0)
        rb = (uint64_t)lengths[(size_t)j * t->nrag + kr++] * t->rrow[l];
      if (t->zraw[l] == 0) {
        chime__tbl_cursor_skip(&cur, t->rrow[l] != 0 ? rb : t->lbytes[l]);
        continue;
      }
      size_t n = (size_t)(t->rrow[l] != 0 ? rb : t->zraw[l]);
      size_t st = z->at[l] != 0 ? (size_t)z_sent_bytes(t, z, j, l) : n;
      const uint8_t *src = chime__tbl_cursor_peek(&cur, st, tmp);
      if (z->at[l] != 0)
        rc = z_take_stored(t, z, l, j, src, st, n, pack + at, dec);
      else
        rc = chime__zleaf_compress(pack + at, src, n, t->cfg.compress[l], &st);
      if (rc == 0 && st == n) /* it did not shrink: kept raw */
        memcpy(pack + at, src, n);
      uint32_t s32 = (uint32_t)st;
      memcpy(pack + 4 * (size_t)kz++, &s32, 4);
      at += st;
    }
    if (rc == 0 && (bufs[j] = malloc(at)) == NULL)
      rc = CHIME_ENOMEM;
    if (rc == 0)
      memcpy(bufs[j], pack, at);
  }
  free(pack);
  free(tmp);
  free(dec);
  if (rc != 0) {
    chime__tbl_bufs_free(bufs, count);
    return rc;
  }
  *out = bufs;
  return 0;
}

/* An insert's keys land on random buckets of the key index, which a stream
 * of inserted bytes keeps out of the caches: each insert and each eviction
 * paid a miss or two there one after another (a third of chimed's CPU for
 * 256-B samples). Their buckets are asked for KEY_AHEAD items ahead. */
#define KEY_AHEAD 16

/* Evicts the table's oldest items until `need` more fit (remover fifo),
 * asking for each evicted key's bucket KEY_AHEAD items ahead: a scout walks
 * the age list ahead of the removals. */
static void evict_oldest(chime__table_t *t, uint64_t need) {
  uint64_t cap = t->cfg.capacity;
  uint32_t scout = t->oldest;
  for (int i = 0; i < KEY_AHEAD && scout != NONE; i++) {
    chime__keyindex_prefetch(t->keys, t->meta[scout].key);
    scout = t->nx[scout];
  }
  while (t->count + need > cap) {
    if (scout != NONE) {
      chime__keyindex_prefetch(t->keys, t->meta[scout].key);
      scout = t->nx[scout];
    }
    chime__tbl_live_remove(t, t->oldest);
  }
}

/* The request's bytes (spans) are its samples' (req_sample_bytes), its
 * versions none, one or count: 0 or CHIME_EINVAL. */
static int request_fits(const chime__table_t *t, const chime__span_t *spans,
                        size_t nspans, uint32_t count, const uint32_t *lengths,
                        const chime__table_versions_t *versions,
                        const zin_t *z) {
  uint64_t have = 0, want = (uint64_t)count * t->sample_bytes;
  for (size_t i = 0; i < nspans; i++)
    have += spans[i].len;
  if (t->nrag > 0 && chime__spec_ragged_bytes(&t->cfg.spec, count, lengths,
                                              &want, NULL, 0) != 0)
    return CHIME_EINVAL;
  if (z->st != NULL) {
    want = 0;
    for (uint64_t j = 0; j < count; j++)
      want += req_sample_bytes(t, lengths, z, j);
  }
  if (have != want)
    return CHIME_EINVAL;
  if (versions != NULL && versions->n > 1 && versions->n != count)
    return CHIME_EINVAL;
  return 0;
}

/* A request on its way into a plain table: what its caller passed, and
 * what was gathered from it before the table's lock. */
typedef struct {
  const chime__span_t *spans;
  uint32_t count;
  const uint32_t *lengths;
  const double *priorities;
  const chime__table_versions_t *versions;
  const atomic_int *abort;
  chime__dedupe_req_t *dq;
  int nowait;
  zin_t z;
  uint8_t **bufs;  /* each sample's ragged rows (rag_gather) */
  uint8_t **zbufs; /* and its compressed leaves (z_gather) */
  uint8_t *drop;   /* a group table's: each group's filter reason, or NULL */
} req_t;

/* How the table makes room (insert_spans). */
typedef struct {
  int fifo;      /* a fifo sampler: inserts wait for room */
  int by_age;    /* a fifo remover: its picks known up front */
  int choose;    /* another remover: it picks as each sample comes */
  uint64_t skip; /* the request's first samples a fifo remover drops */
  uint64_t need; /* rows the request may take */
} room_t;

enum { WAIT_DONE = 1 }; /* the writer's request was in already */

/* Under the lock: waits until the request may go in whole (the table open,
 * not a resend, keys and the rate limiter allow, rows free): 0, WAIT_DONE
 * (*first_key the keys it had), or an error. */
static int wait_room(chime__table_t *t, const req_t *rq, const room_t *rm,
                     uint64_t *first_key) {
  uint64_t cap = t->cfg.capacity;
  chime__dedupe_req_t *dq = rq->dq;
  int paced = 0; /* counted once among paced_inserts */
  for (;;) {
    if (t->closed)
      return CHIME_ESHUTDOWN;
    int rc;
    if (dq != NULL && dq->writer != 0 &&
        (rc = chime__tbl_seen(t, dq, rq->count, first_key)) != 0)
      return rc > 0 ? WAIT_DONE : rc;
    /* Every sample takes a key, those a fifo remover skips too. */
    if (chime__tbl_keys_out(t, t->next_key, rq->count))
      return CHIME_EOVERFLOW;
    if ((rc = chime__tbl_keys_reserve(t, chime__tbl_key_pos(t, t->next_key) +
                                             rq->count)) != 0)
      return rc;
    if (!(dq != NULL && dq->warm) && !t->lim->allows_insert(t)) {
      if (rq->abort != NULL && atomic_load(rq->abort))
        return CHIME_ESHUTDOWN;
      if (rq->nowait)
        return CHIME_EBUSY;
      t->inserts_waiting_rate++;
      chime__tbl_wait_timed(&t->space, &t->mu, &t->rate_insert_wait_ns);
      t->inserts_waiting_rate--;
      continue;
    }
    /* Pacing (pace.c): the producer waits for the learner's progress. */
    if (!(dq != NULL && dq->warm) && chime__tbl_pace_holds(t, rq->count)) {
      if (rq->abort != NULL && atomic_load(rq->abort))
        return CHIME_ESHUTDOWN;
      if (rq->nowait)
        return CHIME_EBUSY;
      t->paced_inserts += !paced;
      paced = 1;
      t->inserts_waiting_pace++;
      chime__tbl_wait_timed(&t->space, &t->mu, &t->pace_wait_ns);
      t->inserts_waiting_pace--;
      continue;
    }
    /* Items given back count against the capacity until taken again. */
    int room = !rm->fifo || (t->count <= cap && cap - t->count >= rm->need);
    if (rm->by_age) {
      evict_oldest(t, rm->need);
    } else if (rm->choose) {
      /* Items given back past the capacity leave first, the remover's
       * picks among them and the rest, before the request's turn. */
      double p;
      while (t->count > cap)
        chime__tbl_live_remove(t, t->rem->pick(t, &p));
    }
    /* A pinned row is not reused meanwhile: an item that left while
     * pinned holds its row until unpinned (spare rows stand in, so this
     * waits only when more rows than those are pinned). */
    int pinned = room && t->rows - t->count - t->ndead < rm->need;
    /* While a checkpoint's view holds rows, rows it will let go soon (it
     * writes oldest first, the order items leave in) are waited for
     * rather than spare rows taken: those would stay in the process's
     * memory until their items leave (trim_spares). */
    if (room && !pinned && t->viewing > 0 && t->nfree < rm->need &&
        t->ndead > 0)
      pinned = 1;
    if (room && !pinned)
      return 0;
    if (rq->abort != NULL && atomic_load(rq->abort))
      return CHIME_ESHUTDOWN;
    if (rq->nowait)
      return CHIME_EBUSY;
    if (pinned) {
      t->pin_waiters++;
      chime__tbl_wait_timed(&t->unpinned, &t->mu, &t->insert_wait_ns);
      t->pin_waiters--;
    } else {
      chime__tbl_wait_timed(&t->space, &t->mu, &t->insert_wait_ns);
    }
  }
}

/* Under the lock, room made: the samples from rm->skip on made live
 * with keys from key0 (a sample too far behind the newest version, or
 * one the remover picks at once, goes in and leaves). The stale ones. */
static uint64_t put_samples(chime__table_t *t, req_t *rq, const room_t *rm,
                            uint64_t key0) {
  chime__tbl_cursor_t cur = {rq->spans, 0, 0};
  const zin_t *z = &rq->z;
  const uint32_t *lengths = rq->lengths;
  uint64_t cap = t->cfg.capacity, count = rq->count;
  uint64_t when = chime__clock_ns(CLOCK_REALTIME);
  uint64_t below = chime__tbl_stale_below(t), stale = 0;
  int whole = t->nrag == 0 && z->st == NULL; /* samples of sample_bytes */
  if (whole)
    chime__tbl_cursor_skip(&cur, rm->skip * t->sample_bytes);
  for (uint64_t j = 0; !whole && j < rm->skip; j++)
    chime__tbl_cursor_skip(&cur, req_sample_bytes(t, lengths, z, j));
  for (uint64_t j = rm->skip; j < count && j < rm->skip + KEY_AHEAD; j++)
    chime__keyindex_prefetch(t->keys, key0 + j);
  for (uint64_t j = rm->skip; j < count; j++) {
    if (j + KEY_AHEAD < count)
      chime__keyindex_prefetch(t->keys, key0 + j + KEY_AHEAD);
    double prio = rq->priorities != NULL ? rq->priorities[j] : 1.0;
    uint64_t ver = chime__tbl_version_at(rq->versions, j);
    /* A filter's drop first: the writer's ack names it as dropped. */
    if (rq->drop != NULL && rq->drop[j] != 0) { /* a filter's: as stale */
      chime__tbl_cursor_skip(&cur, req_sample_bytes(t, lengths, z, j));
      t->left++;
      t->group_dropped[rq->drop[j] - 1]++;
      continue;
    }
    if (ver < below) { /* too far behind already: never goes in */
      chime__tbl_cursor_skip(&cur, req_sample_bytes(t, lengths, z, j));
      stale++;
      continue;
    }
    /* The weight once, for the remover and the sum tree alike. */
    double w = t->sum != NULL ? chime__tbl_weight(t, prio) : 0.0;
    if (rm->choose && t->count >= cap) {
      uint32_t v = t->rem->victim(t, prio, w);
      if (v != NONE)
        chime__tbl_live_remove(t, v);
      /* Room for one (need above): a row is free unless v was the new
       * sample itself. */
      if (v == NONE || t->rows - t->count - t->ndead == 0) {
        chime__tbl_cursor_skip(&cur, req_sample_bytes(t, lengths, z, j));
        t->left++; /* inserted and removed at once */
        continue;
      }
    }
    uint32_t r = chime__tbl_free_pop(t);
    if (t->nrag == 0 && t->nz == 0) { /* every leaf in the rows */
      for (uint32_t l = 0; l < t->nleaves; l++)
        chime__tbl_cursor_read(&cur, t->leaf[l] + (size_t)r * t->lbytes[l],
                               t->lbytes[l]);
    } else {
      for (uint32_t l = 0; l < t->nleaves; l++) {
        if (t->rrow[l] != 0 || t->zraw[l] != 0) /* in bufs, zbufs */
          chime__tbl_cursor_skip(&cur, sent_bytes(t, z, lengths, j, l));
        else
          chime__tbl_cursor_read(&cur, t->leaf[l] + (size_t)r * t->lbytes[l],
                                 t->lbytes[l]);
      }
    }
    if (t->nrag > 0) {
      chime__tbl_rag_take(t, r, rq->bufs[j], lengths + j * t->nrag);
      rq->bufs[j] = NULL;
    }
    if (t->nz > 0) { /* after the lengths: a ragged one's raw bytes */
      chime__tbl_z_take(t, r, rq->zbufs[j]);
      rq->zbufs[j] = NULL;
    }
    t->meta[r].key = key0 + j;
    t->meta[r].itime = when;
    t->meta[r].times = 0;
    t->meta[r].prio = prio;
    t->meta[r].version = ver;
    chime__tbl_live_add_weighted(t, r, 0, w);
  }
  return stale;
}

static int insert_spans(chime__table_t *t, const chime__span_t *spans,
                        size_t nspans, uint32_t count, const uint32_t *lengths,
                        const double *priorities,
                        const chime__table_versions_t *versions,
                        uint64_t *first_key, const atomic_int *abort,
                        chime__dedupe_req_t *dq, int nowait,
                        const chime__table_stored_t *st) {
  req_t rq = {spans, count, lengths, priorities,   versions,
              abort, dq,    nowait,  .bufs = NULL, .zbufs = NULL};
  int rc;
  if ((rc = z_in(t, st, count, lengths, &rq.z)) != 0 ||
      (rc = request_fits(t, spans, nspans, count, lengths, versions, &rq.z)) !=
          0)
    return rc;
  if (t->steps != NULL) {
    uint32_t snz = chime__steps_nz(t->steps);
    if (snz > 0 && (rc = z_gather(t, t->sleaves, snz, spans, count, NULL, &rq.z,
                                  &rq.zbufs)) != 0)
      return rc;
    rc = chime__tbl_seq_insert(t, spans, count, priorities, versions, first_key,
                               abort, dq, nowait, rq.zbufs, rq.z.st != NULL);
    chime__tbl_bufs_free(rq.zbufs, count); /* those it did not take */
    return rc;
  }
  uint64_t cap = t->cfg.capacity;
  room_t rm = {.fifo = t->cfg.sampler == CHIME__SELECTOR_FIFO};
  /* A fifo remover's picks are known before the request goes in: the
   * oldest items, then (a request over the capacity) the request's own
   * first samples, which take keys and count as inserted and as removed
   * but are never written. Any other remover picks as each sample comes
   * (choose_victim), the sample itself a candidate. */
  rm.by_age = !rm.fifo && t->cfg.remover == CHIME__SELECTOR_FIFO;
  rm.choose = !rm.fifo && !rm.by_age;
  if (rm.fifo && count > cap)
    return CHIME_EINVAL; /* could never go in whole */
  rm.skip = rm.by_age && count > cap ? count - cap : 0;
  /* Rows the request may take: one per sample that stays. A chosen
   * victim frees its row (unless pinned: one more), so past the capacity
   * a request never needs more than the capacity's worth. */
  rm.need = count - rm.skip;
  if (rm.choose && rm.need > cap)
    rm.need = cap;
  if (chime__tbl_check_priorities(t, priorities, count) != 0)
    return CHIME_EINVAL;
  if (t->nrag > 0 &&
      (rc = rag_gather(t, spans, count, lengths, &rq.z, &rq.bufs)) != 0)
    return rc;
  if (t->cfg.group_max > 0 &&
      (rc = chime__tbl_group_in(t, rq.bufs, count, lengths,
                                st != NULL ? st->why : NULL,
                                st != NULL ? st->whylen : 0, &rq.drop)) != 0) {
    chime__tbl_bufs_free(rq.bufs, count);
    return rc;
  }
  if (st != NULL && st->drop != NULL && rq.drop != NULL)
    memcpy(st->drop, rq.drop, count);
  else if (st != NULL && st->drop != NULL)
    memset(st->drop, 0, count);
  if (t->nz > 0 && (rc = z_gather(t, t->nleaves, t->nz, spans, count, lengths,
                                  &rq.z, &rq.zbufs)) != 0) {
    chime__tbl_bufs_free(rq.bufs, count);
    free(rq.drop);
    return rc;
  }
  uint64_t vmax = 0, *lv = NULL;
  chime__table_versions_t leafv;
  if (t->cfg.version_leaf != 0) { /* each sample's its leaf's minimum */
    if ((lv = malloc((count ? count : 1) * sizeof(*lv))) == NULL) {
      chime__tbl_bufs_free(rq.bufs, count);
      chime__tbl_bufs_free(rq.zbufs, count);
      return CHIME_ENOMEM;
    }
    chime__tbl_leaf_versions(t, rq.bufs, lengths, count, versions, lv, &vmax);
    leafv = (chime__table_versions_t){lv, count};
    rq.versions = versions = &leafv;
  }
  for (uint64_t j = 0; versions != NULL && j < versions->n; j++)
    vmax = versions->v[j] > vmax ? versions->v[j] : vmax;
  chime__table_waiter_t *arrived = NULL;
  chime__tbl_lock(t);
  /* A table in files: its bytes file has room for them, or nothing. All
   * or nothing: a fifo request waits until every sample fits, so a
   * request ended by a stop leaves nothing behind that its writer would
   * send again (and a sampler can never take half of it). */
  if ((rc = chime__tbl_store_reserve(t, rq.zbufs, lengths, count)) == 0 &&
      (rc = wait_room(t, &rq, &rm, first_key)) == 0) {
    uint64_t key0 = t->next_key;
    t->next_key += count;
    *first_key = key0;
    /* Before the samples go in: those it leaves behind are not made live. */
    chime__tbl_version_seen(t, vmax);
    uint64_t dropped0 = dropped_groups(t);
    uint64_t stale = put_samples(t, &rq, &rm, key0);
    t->inserts += count;
    t->left += rm.skip + stale; /* a fifo remover's picks, the stale */
    t->removed_stale += stale;
    /* What a learner will draw: not the groups a filter dropped. */
    if (t->cfg.pace_batch != 0)
      t->pace_ahead += count - rm.skip - stale - (dropped_groups(t) - dropped0);
    if (dq != NULL && dq->writer != 0)
      chime__dedupe_record(t->dedupe, dq, count, key0);
    arrived = chime__tbl_items_arrived(t);
  }
  pthread_mutex_unlock(&t->mu);
  chime__tbl_notify(arrived);
  chime__tbl_bufs_free(rq.bufs, count); /* samples that did not go in */
  chime__tbl_bufs_free(rq.zbufs, count);
  free(rq.drop);
  free(lv);
  return rc == WAIT_DONE ? 0 : rc;
}

int chime__table_writer_bind(chime__table_t *t, uint64_t writer, uint64_t seq,
                             uint32_t owner, int *over_share) {
  chime__dedupe_stats_t a, b;
  pthread_mutex_lock(&t->mu);
  chime__dedupe_stats(t->dedupe, &a);
  int rc = chime__dedupe_bind_as(t->dedupe, writer, seq, owner);
  chime__dedupe_stats(t->dedupe, &b);
  pthread_mutex_unlock(&t->mu);
  if (over_share != NULL)
    *over_share = b.share_refused != a.share_refused;
  return rc;
}

int chime__table_writers_restored(chime__table_t *t) {
  pthread_mutex_lock(&t->mu);
  int r = chime__dedupe_was_restored(t->dedupe);
  pthread_mutex_unlock(&t->mu);
  return r;
}

void chime__table_writer_unbind(chime__table_t *t, uint64_t writer,
                                int closed) {
  pthread_mutex_lock(&t->mu);
  chime__dedupe_unbind(t->dedupe, writer, closed);
  pthread_mutex_unlock(&t->mu);
}

int chime__table_insert_spans(chime__table_t *t, const chime__span_t *spans,
                              size_t nspans, uint32_t count,
                              const uint32_t *lengths, const double *priorities,
                              uint64_t *first_key, const atomic_int *abort,
                              chime__dedupe_req_t *dq) {
  return insert_spans(t, spans, nspans, count, lengths, priorities, NULL,
                      first_key, abort, dq, 0, NULL);
}

int chime__table_insert_versioned(chime__table_t *t, const chime__span_t *spans,
                                  size_t nspans, uint32_t count,
                                  const uint32_t *lengths,
                                  const double *priorities,
                                  const chime__table_versions_t *versions,
                                  uint64_t *first_key, const atomic_int *abort,
                                  chime__dedupe_req_t *dq, int nowait) {
  return insert_spans(t, spans, nspans, count, lengths, priorities, versions,
                      first_key, nowait ? NULL : abort, dq, nowait, NULL);
}

int chime__table_insert_stored(chime__table_t *t, const chime__span_t *spans,
                               size_t nspans, uint32_t count,
                               const uint32_t *lengths,
                               const double *priorities,
                               const chime__table_versions_t *versions,
                               uint64_t *first_key, const atomic_int *abort,
                               chime__dedupe_req_t *dq, int nowait,
                               const chime__table_stored_t *st) {
  return insert_spans(t, spans, nspans, count, lengths, priorities, versions,
                      first_key, nowait ? NULL : abort, dq, nowait, st);
}

int chime__table_try_insert_spans(chime__table_t *t, const chime__span_t *spans,
                                  size_t nspans, uint32_t count,
                                  const uint32_t *lengths,
                                  const double *priorities, uint64_t *first_key,
                                  chime__dedupe_req_t *dq) {
  return insert_spans(t, spans, nspans, count, lengths, priorities, NULL,
                      first_key, NULL, dq, 1, NULL);
}
