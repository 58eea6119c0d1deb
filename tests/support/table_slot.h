/* A ring slot of the tests' own (one batch's layout, in plain memory) that a
 * table samples into in-process: the one shape every replay test samples
 * with (test_table, test_table_pins, test_table_mutate, test_table_rate,
 * test_sequence, test_checkpoint). Include after cmocka.h and
 * replay/table.h. */
#ifndef CHIME_TESTS_TABLE_SLOT_H
#define CHIME_TESTS_TABLE_SLOT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "chime/errors.h"
#include "ring/producer.h"
#include "replay/table.h"

typedef struct {
  chime_ring_layout_t lay;
  uint8_t *mem;
  chime__ring_wslot_t ws;
  uint32_t *rows;           /* slot_pin: room for a batch's pinned rows */
  uint32_t *times;          /* and for their draws' times sampled */
  chime__table_pins_t pins; /* a pinned sample's rows (stream mode's path) */
} slot_t;

/* A slot for `batch` items of t's item spec, filled with 0xee so bytes a
 * sample leaves unwritten show. 0, or -1: it asserts nothing, so a thread
 * other than the test's may make one (CMocka's asserts are the test's). */
static inline int slot_make(slot_t *s, const chime__table_t *t,
                            uint32_t batch) {
  const chime_spec_t *sp = chime__table_item_spec(t);
  memset(s, 0, sizeof(*s));
  if (chime_ring_layout_compute(&s->lay, sp, batch, 2) != 0)
    return -1;
  s->mem = aligned_alloc(4096, s->lay.slot_bytes);
  if (s->mem == NULL)
    return -1;
  memset(s->mem, 0xee, s->lay.slot_bytes);
  s->ws.base = s->mem;
  for (uint32_t l = 0; l < sp->nleaves; l++) {
    s->ws.leaf[l] = s->mem + s->lay.leaf_offset[l];
    if (sp->leaves[l].ragged)
      s->ws.offsets[l] = (int64_t *)(s->mem + s->lay.offsets_offset[l]);
  }
  s->ws.info = (chime_sample_info_t *)(s->mem + s->lay.info_offset);
  return 0;
}

/* slot_make on the test's thread; free it with slot_fini. */
static inline void slot_init(slot_t *s, const chime__table_t *t,
                             uint32_t batch) {
  assert_int_equal(slot_make(s, t, batch), 0);
}

/* Room to keep a batch's rows pinned (chime__table_try_sample_pinned with
 * s->pins), for a slot made by slot_init. */
static inline void slot_pin(slot_t *s) {
  s->rows = calloc(s->lay.batch_size, sizeof(*s->rows));
  s->times = calloc(s->lay.batch_size, sizeof(*s->times));
  assert_non_null(s->rows);
  assert_non_null(s->times);
  memset(&s->pins, 0, sizeof(s->pins));
  s->pins.rows = s->rows;
  s->pins.times = s->times;
}

/* chime__table_try_sample_pinned into a slot_pin'd slot, the batch's rows
 * kept pinned in s->pins (copy_min UINT64_MAX: all copied, as an shm
 * stream samples). CHIME_EBUSY when the table lacks items, nothing left
 * waiting. */
static inline int slot_sample_pinned(chime__table_t *t, slot_t *s,
                                     uint64_t copy_min) {
  chime__table_waiter_t w;
  memset(&w, 0, sizeof(w));
  int rc = chime__table_try_sample_pinned(t, &s->lay, &s->ws, &s->pins,
                                          copy_min, &w);
  if (rc == CHIME_EBUSY)
    chime__table_unwait(t, &w); /* w lives only in this call */
  return rc;
}

static inline void slot_fini(slot_t *s) {
  free(s->mem);
  free(s->rows);
  free(s->times);
  s->mem = NULL;
  s->rows = NULL;
  s->times = NULL;
}

/* A thread sampling into a slot: batches until the table refuses one (a
 * wait ended by stop or by the table's close) or, with once, one batch.
 * rc is the last chime__table_sample result and batches how many it took:
 * read them after pthread_join. */
typedef struct {
  chime__table_t *t;
  slot_t *s;
  int once;
  atomic_int stop;
  int rc;
  uint64_t batches;
} slot_sampler_t;

static inline void *slot_sampler_main(void *arg) {
  slot_sampler_t *a = arg;
  do {
    a->rc = chime__table_sample(a->t, &a->s->lay, &a->s->ws, &a->stop);
    a->batches += a->rc == 0;
  } while (a->rc == 0 && !a->once);
  return NULL;
}

static inline void slot_sampler_start(slot_sampler_t *a, pthread_t *th,
                                      chime__table_t *t, slot_t *s, int once) {
  memset(a, 0, sizeof(*a));
  a->t = t;
  a->s = s;
  a->once = once;
  assert_int_equal(pthread_create(th, NULL, slot_sampler_main, a), 0);
}

#endif
