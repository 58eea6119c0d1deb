/* A checkpoint table file's writers section (format 6, ckpt_format.h):
 * the exactly-once windows of the writers the table remembered when its
 * view was taken (dedupe.h), so that a request resent after a restore is
 * acked with its original keys instead of inserted twice. Only the bytes
 * live here; ckpt_format.c places them in the file.
 *
 * The section: u32 flags (bit 0: a writer not in it may have had requests
 * go in, dedupe's forgot), u32 writers, then per writer its id (u64), its
 * requests remembered n (u32) and n of {seq u64, first key u64, count
 * u32}, oldest first; little-endian. */
#ifndef CHIME_REPLAY_CKPT_WRITERS_H
#define CHIME_REPLAY_CKPT_WRITERS_H

#include <stddef.h>
#include <stdint.h>

#include "replay/dedupe.h"

/* The section's head, and one writer's record at most. */
#define CHIME__CKPT_WRITERS_HEAD 8u
#define CHIME__CKPT_WRITER_MAX (12u + 20u * 32u)

/* Into out (CHIME__CKPT_WRITERS_HEAD bytes): the head of c's section. */
void chime__ckpt_writers_head(const chime__dedupe_copy_t *c, uint8_t *out);
/* Into out (CHIME__CKPT_WRITER_MAX bytes): writer i's record; its length. */
size_t chime__ckpt_writers_rec(const chime__dedupe_copy_t *c, uint32_t i,
                               uint8_t *out);

/* Reads a section from p (n bytes available) into c (allocated here; free
 * with chime__dedupe_copy_free, also after a failure), verified whole:
 * the flags known, the writers no more than a table remembers, each
 * nonzero and once, 1 to CHIME__INSERT_WINDOW requests each with seq
 * rising from 1 up and first keys of the file's shard, all within n. 0
 * with *used the section's bytes; -1 with why filled (CHIME_ENOMEM: -2). */
int chime__ckpt_writers_read(const uint8_t *p, size_t n, uint32_t shard,
                             chime__dedupe_copy_t *c, size_t *used, char *why,
                             size_t whylen);

#endif
