/* The sequence tables the table-level tests build (test_sequence,
 * test_checkpoint): one step is its writer's episode tag and index, then 3
 * bytes that depend on both (a second leaf, so leaf-major copies are
 * checked). Include after <cmocka.h>. */
#ifndef CHIME_TEST_SEQ_STEPS_H
#define CHIME_TEST_SEQ_STEPS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "replay/table.h"

#define SEQ_SPEC "id:u32[2], x:u8[3]"
#define SEQ_STEP 11

static inline void seq_step_bytes(uint8_t *p, uint32_t tag, uint32_t idx) {
  uint32_t id[2] = {tag, idx};
  memcpy(p, id, 8);
  for (int i = 0; i < 3; i++)
    p[8 + i] = (uint8_t)(tag * 31 + idx * 7 + (uint32_t)i);
}

/* A table `name` of `steps` steps of SEQ_SPEC, windows of t every `stride`
 * steps, episode tails padded or not, sampled by s; min_size 1, initial
 * priority 1, everything else zero. */
static inline void seq_table_cfg(chime__table_config_t *tc, const char *name,
                                 uint64_t steps, uint32_t t, uint32_t stride,
                                 int pad, chime__selector_kind_t s) {
  memset(tc, 0, sizeof(*tc));
  snprintf(tc->name, sizeof(tc->name), "%s", name);
  assert_int_equal(chime_spec_parse(&tc->spec, SEQ_SPEC), 0);
  tc->capacity_steps = steps;
  tc->sequence_length = t;
  tc->stride = stride;
  tc->episode_pad = pad;
  tc->sampler = s;
  tc->min_size = 1;
  tc->initial_priority = 1.0;
}

/* A writer of episodes: its id (the exactly-once id the table keys
 * episodes by), its request sequence, its open episode's tag and length. */
typedef struct {
  uint64_t id, seq;
  uint32_t tag, len;
} seq_writer_t;

/* Appends n (<= 64) steps of w's open episode as one request, ending the
 * episode when `end`; the insert's code (w moves on only when it is 0). */
static inline int seq_append(chime__table_t *t, seq_writer_t *w, uint32_t n,
                             int end) {
  uint8_t buf[64 * SEQ_STEP];
  uint64_t key;
  assert_true(n <= 64);
  for (uint32_t i = 0; i < n; i++)
    seq_step_bytes(buf + i * SEQ_STEP, w->tag, w->len + i);
  chime__dedupe_req_t dq = {.writer = w->id, .seq = ++w->seq};
  dq.end_episode = end;
  int rc = chime__table_insert(t, buf, n, NULL, &key, NULL, &dq);
  if (rc == 0) {
    w->len += n;
    if (end) {
      w->tag += 1000;
      w->len = 0;
    }
  }
  return rc;
}

#endif
