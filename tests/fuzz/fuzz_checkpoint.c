/* libFuzzer target: a checkpoint's table file as restore reads it
 * (chime__checkpoint_load_table, src/replay/ckpt_format.c), verified and
 * loaded into a small table.
 *
 * Input: one byte of flags, then the file's bytes. Flag bit 0: the target
 * writes a correct CRC-32C over the trailer first, so the fuzzer reaches
 * the header and item parser behind the checksum (a file whose CRC is
 * wrong is refused before anything else is read). Bit 1: the table is
 * prioritized (priorities checked) rather than fifo. Bit 2: it is a
 * sequence table (capacity_steps 64, sequence_length 4, stride 2,
 * episode_end pad: blocks of 4 steps), whose file holds windows and the
 * step store's blocks. Bit 3 (plain tables): max_staleness 2, so items of
 * a version 4 file more than 2 behind its newest version leave as it
 * loads. Bit 4 (plain tables): the table's spec has ragged leaves
 * (FUZZ_CKPT_RAGGED_SPEC), whose items a version 5 file holds at their
 * lengths. Bit 5 (sequence tables): the step spec is
 * FUZZ_CKPT_ZSEQ_SPEC with y compressed (level 3), whose file keeps each
 * step's y as its stored size and bytes, each frame checked as it loads;
 * with bit 4 (plain tables) the ragged spec's t compressed (level 3), each
 * item's kept at its length.
 *
 * Beyond "no crash": the result is 0 or one of the codes restore gives
 * (CHIME_ECORRUPT, CHIME_EINVAL, CHIME_ENOTSUP); a refusal has a message
 * naming the file; a file with a wrong CRC is always refused; after a
 * success the table holds exactly the items the file said (those a
 * staleness gate removed counted as removed_stale), at most its rows.
 *
 * Seeds (tests/fuzz/corpus/checkpoint): checkpoints of a table of this
 * spec holding 0, 5 and 16 items (fifo, prioritized), and of sequence
 * tables (seq_*: written by test_checkpoint with CHIME_CKPT_SEEDS=DIR),
 * behind a flags byte; fifo_versions_v4: a version 4 file of 5 items of
 * versions 3..7 (newest 7), gated (flags 9); version 5 files of 5 items
 * (*_5_v5; ragged_*: of the ragged spec, lengths 0 to the bound), also
 * written by test_checkpoint with CHIME_CKPT_SEEDS; version 6 files
 * (*_v6, written by it now), which hold the compressed leaves' list (none
 * here) and the writers' exactly-once windows after the header
 * (fifo_writers_v6: two writers' requests; the seq_* ones: three writers');
 * zseq_v6 (flags 37): a compressed sequence table's, 3 episodes, a step's y
 * of zeros but its first bytes (compressed) or noise (kept raw);
 * zragged_v6 (flags 49): 6 items of the ragged spec, t compressed, lengths
 * 0 to 8, zeros (compressed) or counting (kept raw). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "chime/errors.h"
#include "fuzz_common.h"
#include "replay/ckpt_format.h"
#include "replay/crc32c.h"
#include "replay/table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The seeds' table: tests/fuzz/corpus/checkpoint was written from it. */
#define FUZZ_CKPT_SPEC "x:u64[], y:u8[4]"
#define FUZZ_CKPT_RAGGED_SPEC "x:u64[], t:i32[<=8], l:f32[<=8 ~t]"
#define FUZZ_CKPT_ZSEQ_SPEC "x:u64[], y:u8[64]"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  uint8_t flags = data[0];
  size_t n = size - 1;
  uint8_t *p = malloc(n ? n : 1);
  FUZZ_CHECK(p != NULL);
  memcpy(p, data + 1, n);
  int crc_ok = 0;
  if (n >= 4) {
    uint32_t c = chime__crc32c(0, p, n - 4);
    if (flags & 1) {
      for (int i = 0; i < 4; i++)
        p[n - 4 + i] = (uint8_t)(c >> (8 * i));
    }
    crc_ok = (uint32_t)p[n - 4] | (uint32_t)p[n - 3] << 8 |
             (uint32_t)p[n - 2] << 16 | (uint32_t)p[n - 1] << 24 == c;
  }
  chime__table_config_t tc;
  memset(&tc, 0, sizeof(tc));
  snprintf(tc.name, sizeof(tc.name), "t");
  int ragged = (flags & 16) && !(flags & 4);
  int zseq = (flags & 32) && (flags & 4);
  FUZZ_CHECK(chime_spec_parse(&tc.spec, ragged ? FUZZ_CKPT_RAGGED_SPEC
                                        : zseq ? FUZZ_CKPT_ZSEQ_SPEC
                                               : FUZZ_CKPT_SPEC) == 0);
  tc.compress[1] = zseq ? 3 : 0;
  tc.compress[1] = ragged && (flags & 32) ? 3 : tc.compress[1];
  tc.capacity = 16;
  if (flags & 4) {
    tc.capacity = 0;
    tc.capacity_steps = 64;
    tc.sequence_length = 4;
    tc.stride = 2;
    tc.episode_pad = 1;
    tc.initial_priority = 1.0;
  }
  tc.sampler = (flags & 2) ? CHIME__SELECTOR_PRIORITIZED : CHIME__SELECTOR_FIFO;
  tc.min_size = 1;
  tc.priority_exponent = 1.0;
  tc.seed = 1;
  int gated = (flags & 8) && !(flags & 4);
  tc.max_staleness = gated ? 2 : 0;
  chime__table_t *t = NULL;
  FUZZ_CHECK(chime__table_create(&t, &tc) == 0);
  char err[512];
  uint64_t items = 0;
  memset(err, 0x55, sizeof(err));
  int rc = chime__checkpoint_load_table(p, n, &t, 1, "table-000.ckpt", &items,
                                        err, sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == CHIME_ECORRUPT || rc == CHIME_EINVAL ||
             rc == CHIME_ENOTSUP);
  chime__table_stats_t st;
  chime__table_get_stats(t, &st);
  if (rc != 0) {
    FUZZ_CHECK(memchr(err, 0, sizeof(err)) != NULL && err[0] != '\0');
    FUZZ_CHECK(strstr(err, "table-000.ckpt") != NULL ||
               strstr(err, "table '") != NULL);
  } else {
    FUZZ_CHECK(crc_ok);
    /* The rows: twice the capacity (spares), a step's window each. */
    FUZZ_CHECK(st.size + st.removed_stale == items &&
               items <= ((flags & 4) ? 128u : 32u));
    FUZZ_CHECK(gated || st.removed_stale == 0);
  }
  if (!crc_ok)
    FUZZ_CHECK(rc != 0);
  chime__table_destroy(t);
  free(p);
  return 0;
}
