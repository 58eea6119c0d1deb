/* What a table asks of the streams and requests that reach it (rules.h).
 * Each refusal says which of the table's settings the request runs into,
 * so that the learner or writer can tell what to change. */
#include "replay/rules.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "common/errfmt.h"

int chime__rules_stream(const chime__table_config_t *tc, uint32_t batch_size,
                        char *err, size_t errlen) {
  /* Sampling removes items (fifo, max_times_sampled): a batch waits for
   * batch_size of them at once, which a smaller table never holds (a
   * sequence table: the windows its step store holds at once, far fewer
   * than capacity_steps). Without max_times_sampled a batch may draw an
   * item again, and waits for min_size only. */
  uint64_t most = chime__table_max_items(tc);
  if (tc->max_times_sampled != 0 && batch_size > most) {
    if (tc->sequence_length > 0)
      return chime__fail(
          err, errlen, CHIME_EINVAL,
          "batch_size %u exceeds the %llu windows sequence table '%s' can "
          "hold at once (capacity_steps %llu, sequence_length %u, stride "
          "%u; sampler %s, max_times_sampled %llu: a batch waits for "
          "batch_size windows)",
          batch_size, (unsigned long long)most, tc->name,
          (unsigned long long)tc->capacity_steps, tc->sequence_length,
          tc->stride, chime__selector_kind_name(tc->sampler),
          (unsigned long long)tc->max_times_sampled);
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "batch_size %u exceeds the capacity %llu of table '%s' "
                       "(sampler %s, max_times_sampled %llu)",
                       batch_size, (unsigned long long)tc->capacity, tc->name,
                       chime__selector_kind_name(tc->sampler),
                       (unsigned long long)tc->max_times_sampled);
  }
  /* With a rate limiter as well, inserts are free only below min_size:
   * past it the window may hold them back before a batch's worth is in
   * the table, and the batch and the inserts would wait for each other
   * for good. Refused here rather than left to stall. */
  if (tc->max_times_sampled != 0 && tc->samples_per_insert > 0 &&
      batch_size > tc->min_size)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "batch_size %u exceeds min_size %llu of table '%s' "
                       "(max_times_sampled %llu with samples_per_insert %g: "
                       "a batch could wait for items the rate limiter holds "
                       "back); give the table min_size >= batch_size",
                       batch_size, (unsigned long long)tc->min_size, tc->name,
                       (unsigned long long)tc->max_times_sampled,
                       tc->samples_per_insert);
  return 0;
}

/* Every priority must be finite and at least 0 (a NaN would poison a sum
 * tree, an infinite or negative one any sampler's weights), and one the
 * table's selectors can use. */
static int priorities_ok(const chime__table_t *t, const double *prio, size_t n,
                         char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    double p = prio[i];
    if (isfinite(p) && p >= 0)
      continue;
    snprintf(err, errlen,
             "priority of sample %zu is %g: priorities must be finite and at "
             "least 0",
             i, p);
    return CHIME_EINVAL;
  }
  return chime__table_check_priorities(t, prio, n, err, errlen);
}

int chime__rules_insert(const chime__table_t *t, const chime__insert_shape_t *q,
                        char *err, size_t errlen) {
  const chime__table_config_t *tc = chime__table_config(t);
  if (tc->sequence_length > 0 && (q->writer_id == 0 || q->n_priorities != 0))
    return chime__fail(
        err, errlen, CHIME_EINVAL,
        q->writer_id == 0
            ? "insert into '%s': a sequence table keeps one episode per "
              "writer: send writer_id"
            : "insert into '%s': a sequence table's items are windows: "
              "they take initial_priority (then MutatePriorities), not "
              "per-step priorities",
        tc->name);
  if (tc->sequence_length == 0 && q->end_episode)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "insert into '%s': end_episode is for sequence tables",
                       tc->name);
  if (tc->sampler == CHIME__SELECTOR_FIFO && tc->sequence_length == 0 &&
      q->count > tc->capacity)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "insert into '%s': %u samples in one request; fifo "
                       "table '%s' holds at most %llu and a request goes in "
                       "whole",
                       tc->name, q->count, tc->name,
                       (unsigned long long)tc->capacity);
  if (q->n_versions > 1 && q->n_versions != q->count)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "insert into '%s': %zu versions for %u samples (send "
                       "none, one for all, or one per sample)",
                       tc->name, q->n_versions, q->count);
  if (q->n_priorities != 0 && q->n_priorities != q->count)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "insert into '%s': %zu priorities for %u samples (send "
                       "none or one per sample)",
                       tc->name, q->n_priorities, q->count);
  char why[320];
  if (priorities_ok(t, q->priorities, q->n_priorities, why, sizeof(why)) != 0)
    return chime__fail(err, errlen, CHIME_EINVAL, "insert into '%s': %s",
                       tc->name, why);
  /* Remembered, an id 0 would make every later one look like its resend:
   * acked, and not inserted. */
  if (q->writer_id != 0 && q->id == 0)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "insert into '%s': request id 0 of writer %016" PRIx64
                       ": a writer numbers its requests from 1",
                       tc->name, q->writer_id);
  return 0;
}
