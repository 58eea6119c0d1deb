/* A ring slot of the tests' own (one batch's layout, in plain memory) that a
 * table samples into in-process: the shape test_sequence and test_table_rate
 * both sample with. Include after cmocka.h and replay/table.h. */
#ifndef CHIME_TESTS_TABLE_SLOT_H
#define CHIME_TESTS_TABLE_SLOT_H

#include <stdlib.h>
#include <string.h>

#include "ring/producer.h"
#include "replay/table.h"

typedef struct {
  chime_ring_layout_t lay;
  uint8_t *mem;
  chime__ring_wslot_t ws;
} slot_t;

/* A slot for `batch` items of t's item spec, filled with 0xee so bytes a
 * sample leaves unwritten show; free s->mem when done. */
static inline void slot_init(slot_t *s, const chime__table_t *t,
                             uint32_t batch) {
  const chime_spec_t *sp = chime__table_item_spec(t);
  assert_int_equal(chime_ring_layout(&s->lay, sp, batch, 2, NULL, 0), 0);
  s->mem = aligned_alloc(4096, s->lay.slot_bytes);
  assert_non_null(s->mem);
  memset(s->mem, 0xee, s->lay.slot_bytes);
  memset(&s->ws, 0, sizeof(s->ws));
  s->ws.base = s->mem;
  for (uint32_t l = 0; l < sp->nleaves; l++)
    s->ws.leaf[l] = s->mem + s->lay.leaf_offset[l];
  s->ws.info = (chime_sample_info_t *)(s->mem + s->lay.info_offset);
}

#endif
