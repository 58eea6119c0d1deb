/* The public face of the key layout (common/key.h). */
#include "chime/chime.h"
#include "common/key.h"

uint32_t chime_key_shard(uint64_t key) {
  return chime__key_shard(key);
}
