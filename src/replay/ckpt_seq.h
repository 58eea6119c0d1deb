/* A sequence table's section of its checkpoint table file (ckpt_format.h
 * gives the format's versions): written from the table's view, walked
 * whole when a file is verified, then checked against the config and
 * loaded. Private to the checkpoint files. */
#ifndef CHIME_REPLAY_CKPT_SEQ_H
#define CHIME_REPLAY_CKPT_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "replay/ckpt_io.h"
#include "replay/table.h"

/* The fixed part of a sequence table's section, and where its windows
 * and blocks are in the file. */
typedef struct {
  uint32_t t, stride, pad, k, nused;
  uint64_t capacity_steps, next_episode, step_key, dropped, abandoned, evicted;
  double max_prio;
  size_t items_at, blocks_at; /* offsets of the windows, the blocks */
  uint32_t step_rec; /* a step's episode, index (and version 5 on: version) */
} chime__ckpt_seqhdr_t;

/* After the items' common fields: settings, windows, blocks (each block
 * let go once written). */
void chime__ckpt_seq_write(chime__table_t *t, wr_t *w, chime__table_view_t *v);
/* The section from r (version ver, count windows, steps of sb bytes,
 * zmask: the compressed leaves), walked whole: 0, or -1 when it does not
 * hang together. */
int chime__ckpt_seq_parse(rd_t *r, uint32_t ver, uint64_t count, uint64_t sb,
                          const chime_spec_t *spec, const uint8_t *zmask,
                          chime__ckpt_seqhdr_t *h);
/* The config's sequence settings against the checkpoint's (CHIME_EINVAL
 * with err filled). */
int chime__ckpt_seq_check(const char *table, const chime__ckpt_seqhdr_t *h,
                          const chime__table_config_t *cfg, chime__steps_t *st,
                          char *err, size_t errlen);
/* Loads a parsed section into t: blocks (each compressed step checked,
 * CHIME_ECORRUPT), then windows. */
int chime__ckpt_seq_load(const uint8_t *p, size_t n,
                         const chime__ckpt_seqhdr_t *h, const uint8_t *zmask,
                         chime__table_t *t, uint64_t count, const char *fname,
                         const char *name, char *err, size_t errlen);

#endif
