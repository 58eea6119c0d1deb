/* Insert's refusals of a writer, explained to it (insertwhy.h): what the
 * table's memory of writers would not take, and what a resend that it
 * would not take means for the writer's samples. */
#include "server/insertwhy.h"

#include <stdio.h>

#include "wire/insert_limits.h"

/* Why the table's memory would not take a writer it does not remember
 * (dedupe.h): CHIME_EFORGOTTEN or CHIME_ERESOURCE. Says what is known of
 * the writer's requests and what it can do. */
void chime__insert_writer_refused(char *err, size_t errlen, chime__table_t *t,
                                  int rc, uint64_t writer, uint64_t seq) {
  const chime__table_config_t *tc = chime__table_config(t);
  unsigned long long w = (unsigned long long)writer;
  unsigned max = tc->max_writers ? tc->max_writers : CHIME__INSERT_WRITERS;
  if (rc == CHIME_EFORGOTTEN && chime__table_writers_restored(t))
    snprintf(err, errlen,
             "insert into '%s': writer %016llx is not remembered (this "
             "server was restored from a checkpoint, which keeps the items "
             "and the requests of the writers remembered then, and this "
             "writer was not among them) and request %llu is not its first: "
             "this request was not inserted; the writer's requests up to "
             "the checkpoint are in the table, those after it are not, and "
             "each that was not acked is either wholly in the table or not "
             "at all, which the server cannot tell; go on with a new writer",
             tc->name, w, (unsigned long long)seq);
  else if (rc == CHIME_EFORGOTTEN)
    snprintf(err, errlen,
             "insert into '%s': writer %016llx is no longer remembered (the "
             "table keeps %u writers; one that closed its call, or had no "
             "open call for %u ms, makes room for new ones) and request %llu "
             "is not its first: this request was not inserted; each of its "
             "requests that was not acked is either wholly in the table or "
             "not at all, which the server cannot tell; go on with a new "
             "writer",
             tc->name, w, max, tc->writer_idle_ms, (unsigned long long)seq);
  else
    snprintf(err, errlen,
             "insert into '%s': writer %016llx not taken: the table "
             "remembers %u writers (max_writers), each carried by an open "
             "Insert call or without one for less than %u ms "
             "(writer_idle_ms); nothing was inserted; try again later",
             tc->name, w, max, tc->writer_idle_ms);
}

/* A resent request the table would not take (dedupe.h): the writer hears
 * which, and that nothing was inserted. */
void chime__insert_finish_refused(chime__call_t *c, chime__table_t *t,
                                  const chime__dedupe_req_t *dq, int rc,
                                  uint32_t count) {
  const char *tn = chime__table_config(t)->name;
  unsigned long long w = (unsigned long long)dq->writer;
  unsigned long long seq = (unsigned long long)dq->seq;
  if (rc == CHIME_EFORGOTTEN || rc == CHIME_ERESOURCE) {
    char err[1024];
    chime__insert_writer_refused(err, sizeof(err), t, rc, dq->writer, dq->seq);
    chime__call_finish(c, rc, "%s", err);
  } else if (rc == CHIME_EINVAL)
    chime__call_finish(c, CHIME_EINVAL,
                       "insert into '%s': request %llu of writer %016llx was "
                       "inserted with %llu samples, resent with %u",
                       tn, seq, w, (unsigned long long)dq->known, count);
  else
    chime__call_finish_as(
        c, CHIME_EINVAL, GRPC_STATUS_FAILED_PRECONDITION,
        "insert into '%s': request %llu of writer %016llx is older than the "
        "window of the last %d it inserted (newest %llu): it may be in the "
        "table already, so it was not inserted",
        tn, seq, w, CHIME__INSERT_WINDOW, (unsigned long long)dq->known);
}
