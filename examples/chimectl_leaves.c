/* chimectl's view of compressed leaves (chimectl_leaves.h). */
#include "chimectl_leaves.h"

#include <inttypes.h>
#include <stdio.h>

json_t *chimectl_leaves_json(const chime_leaf_bytes_t *lb, uint32_t n) {
  json_t *leaves = json_object();
  for (uint32_t k = 0; k < n; k++) {
    const chime_leaf_bytes_t *b = &lb[k];
    json_object_set_new(leaves, b->leaf,
                        json_pack("{s:I,s:I,s:I,s:I}", "level",
                                  (json_int_t)b->level, "raw_bytes",
                                  (json_int_t)b->raw_bytes, "stored_bytes",
                                  (json_int_t)b->stored_bytes, "stored_raw",
                                  (json_int_t)b->stored_raw));
  }
  return leaves;
}

void chimectl_ratio_cell(uint64_t stored, uint64_t raw) {
  if (raw == 0)
    printf(" %10s", "-");
  else
    printf(" %10.4f", (double)stored / (double)raw);
}

void chimectl_leaves_text(const chime_stats_t *st) {
  int n = 0;
  for (uint32_t i = 0; i < st->ntables; i++)
    for (uint32_t k = 0; k < st->tables[i].nleaf_bytes; k++) {
      const chime_leaf_bytes_t *b = &st->tables[i].leaf_bytes[k];
      if (n++ == 0)
        printf("\n%-16s %-16s %5s %14s %14s %10s %10s\n", "TABLE",
               "COMPRESSED LEAF", "LEVEL", "RAW_BYTES", "STORED_BYTES",
               "STORED/RAW", "KEPT_RAW");
      printf("%-16s %-16s %5u %14" PRIu64 " %14" PRIu64, st->tables[i].name,
             b->leaf, b->level, b->raw_bytes, b->stored_bytes);
      chimectl_ratio_cell(b->stored_bytes, b->raw_bytes);
      printf(" %10" PRIu64 "\n", b->stored_raw);
    }
}
