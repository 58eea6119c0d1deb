/* A table's keys: where they go on from after a restore, and the bound
 * reserved ahead of them on disk before any past it is issued
 * (docs/operations.md, Checkpoints: a restored server never issues a key
 * the old one may have acked). */
#include "replay/table_internal.h"

int chime__tbl_keys_reserve(chime__table_t *t, uint64_t end) {
  if (t->file != NULL)
    chime__tbl_file_keys(t->file, end);
  if (t->reserve_fn == NULL || end <= t->key_reserved)
    return 0;
  uint64_t upto = end + CHIME__KEY_RESERVE_AHEAD;
  if (upto > CHIME__KEY_MAX_COUNT + 1)
    upto = CHIME__KEY_MAX_COUNT + 1;
  int rc = t->reserve_fn(t->reserve_ctx, t, upto);
  if (rc == 0)
    t->key_reserved = upto;
  return rc;
}

void chime__table_set_key_reserve(chime__table_t *t, chime__table_reserve_fn fn,
                                  void *ctx, uint64_t reserved) {
  pthread_mutex_lock(&t->mu);
  t->reserve_fn = fn;
  t->reserve_ctx = ctx;
  t->key_reserved = reserved;
  pthread_mutex_unlock(&t->mu);
}

void chime__table_keys_from(chime__table_t *t, uint64_t count) {
  if (count > CHIME__KEY_MAX_COUNT + 1)
    count = CHIME__KEY_MAX_COUNT + 1;
  uint64_t at = ((uint64_t)t->cfg.shard << CHIME__KEY_COUNT_BITS) + count;
  pthread_mutex_lock(&t->mu);
  if (chime__tbl_key_pos(t, t->next_key) < count)
    t->next_key = at;
  if (t->steps != NULL && chime__tbl_key_pos(t, t->step_key) < count)
    t->step_key = at;
  pthread_mutex_unlock(&t->mu);
}

uint64_t chime__table_key_pos(chime__table_t *t) {
  pthread_mutex_lock(&t->mu);
  uint64_t p = chime__tbl_key_pos(t, t->next_key);
  if (t->steps != NULL && chime__tbl_key_pos(t, t->step_key) > p)
    p = chime__tbl_key_pos(t, t->step_key);
  pthread_mutex_unlock(&t->mu);
  return p;
}
