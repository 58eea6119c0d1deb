/* fuzz_gen_seeds (gen_seeds.c): the seeds of a target in a file of their
 * own, beside the others. */
#ifndef CHIME_FUZZ_GEN_SEEDS_H
#define CHIME_FUZZ_GEN_SEEDS_H

#include <stddef.h>
#include <stdint.h>

/* Writes seed `name` of target (len bytes at p) under the output folder;
 * exits on failure. */
void fuzz_seed_put(const char *target, const char *name, const uint8_t *p,
                   size_t len);

/* fuzz_zinsert's seeds (gen_seeds_zinsert.c). */
void fuzz_zinsert_seeds(void);

#endif
