/* Internal to the client: a group table's batches as the learner sees
 * them (group.c; docs/replay.md, "Groups"): the groups' offsets, and each
 * ragged leaf's offsets per sample, which the ring holds per group. */
#ifndef CHIME_CLIENT_GROUP_H
#define CHIME_CLIENT_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "chime/chime.h"

typedef struct chime__group_view_s chime__group_view_t;

/* For a stream of spec (its ring's: a group table's stored spec, else
 * *out stays NULL and nothing is needed), batches of batch_size groups in
 * slots slots: room for each slot's per-sample offsets. 0 or
 * CHIME_ENOMEM. */
int chime__group_view_new(chime__group_view_t **out, const chime_spec_t *spec,
                          uint32_t batch_size, uint32_t slots);
void chime__group_view_free(chime__group_view_t *g);
/* Batch b, lent from slot and filled as a ragged table's (every leaf with
 * its offsets per group), made a group batch: b->groups, a fixed leaf's
 * offsets NULL, a ragged leaf's per sample (in g's room for slot, valid
 * until the slot is lent again). CHIME_EPROTO with err set when the ring's
 * lengths and offsets disagree (the slot's bytes are the server's). */
int chime__group_view_lend(chime__group_view_t *g, uint32_t slot,
                           chime_batch_t *b, char *err, size_t errlen);

#endif
