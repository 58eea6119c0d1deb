/* chimectl's view of compressed leaves (docs/replay.md, "Compressed
 * leaves"): each compressed leaf's bytes raw and as kept, in `info`'s
 * and `stats`'s JSON and `stats`'s text, and the stored/raw ratio cell `stats`
 * and `top` show. */
#ifndef CHIME_EXAMPLES_CHIMECTL_LEAVES_H
#define CHIME_EXAMPLES_CHIMECTL_LEAVES_H

#include <stdint.h>

#include <jansson.h>

#include "chime/chime.h"

/* {"obs": {"level", "raw_bytes", "stored_bytes", "stored_raw"}, ...}, of
 * `info`'s and `stats`'s tables */
json_t *chimectl_leaves_json(const chime_leaf_bytes_t *lb, uint32_t n);
/* A COMPRESSED LEAF table of every table's compressed leaves (nothing
 * when none compresses). */
void chimectl_leaves_text(const chime_stats_t *st);
/* stored / raw as a cell of 10 ("-" with nothing held). */
void chimectl_ratio_cell(uint64_t stored, uint64_t raw);

#endif
