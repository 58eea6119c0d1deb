/* chime-bench's learner (see learn.h). */
#include "learn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"

const char *chime__bench_touch_name(chime__bench_touch_t t) {
  return t == CHIME__BENCH_TOUCH_PAGE ? "page" : "line";
}

int chime__bench_touch_parse(const char *name, chime__bench_touch_t *out) {
  if (strcmp(name, "line") == 0)
    *out = CHIME__BENCH_TOUCH_LINE;
  else if (strcmp(name, "page") == 0)
    *out = CHIME__BENCH_TOUCH_PAGE;
  else
    return CHIME_EINVAL;
  return 0;
}

int chime__bench_learner_arg(chime__bench_learner_args_t *a, int argc,
                             char **argv, int *i, int max_runs) {
  const char *o = argv[*i];
  int valued = strcmp(o, "--runs") == 0 || strcmp(o, "--seconds") == 0 ||
               strcmp(o, "--touch") == 0;
  if (strcmp(o, "--json") == 0) {
    a->json = 1;
    return 1;
  }
  if (!valued)
    return 0;
  if (*i + 1 >= argc)
    return CHIME_EINVAL;
  const char *v = argv[++*i];
  if (strcmp(o, "--runs") == 0) {
    a->runs = atoi(v);
    if (a->runs < 1 || a->runs > max_runs)
      return CHIME_EINVAL;
  } else if (strcmp(o, "--seconds") == 0) {
    a->seconds = atof(v);
    if (!(a->seconds >= 0.05 && a->seconds <= 600))
      return CHIME_EINVAL;
  } else if (chime__bench_touch_parse(v, &a->touch) != 0) {
    return CHIME_EINVAL;
  }
  return 1;
}

uint64_t chime__bench_touch(const void *p, uint64_t len,
                            chime__bench_touch_t t) {
  uint64_t sum = 0, step = t == CHIME__BENCH_TOUCH_PAGE ? 4096 : 64;
  const uint8_t *b = p;
  for (uint64_t off = 0; off + 8 <= len; off += step) {
    uint64_t w;
    memcpy(&w, b + off, 8);
    sum += w;
  }
  return sum;
}

static volatile uint64_t sink;

int chime__bench_learn(const chime__bench_learn_opts_t *o,
                       chime__bench_learn_result_t *res, char *why,
                       size_t whylen) {
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  chime_batch_t b;
  int rc;
  double deadline = 0;

  memset(res, 0, sizeof(*res));
  if ((rc = chime_client_create(&c, o->addr, NULL)) != 0) {
    snprintf(why, whylen, "client: %s", chime_strerror(rc));
    goto out;
  }
  so.batch_size = o->batch_size;
  so.slots = o->slots;
  so.mode = o->mode;
  so.connections = o->connections;
  /* Set by chime-bench shards --ready-bytes for its learner processes. */
  const char *rb = getenv(CHIME__BENCH_READY_BYTES_ENV);
  if (rb != NULL)
    so.ready_bytes = strtoull(rb, NULL, 10);
  if ((rc = chime_stream_open(&s, c, o->table, &so)) != 0) {
    snprintf(why, whylen, "open: %s", chime_last_error());
    goto out;
  }
  if (chime_stream_mode(s) != o->mode) {
    snprintf(why, whylen, "got mode %s", chime_mode_name(chime_stream_mode(s)));
    rc = CHIME_EPROTO;
    goto out;
  }
  for (uint64_t i = 0;; i++) {
    if (i == o->warmup) {
      if (o->at_start != NULL)
        o->at_start(o->arg);
      res->t0 = chime__bench_now_s();
      deadline = res->t0 + o->seconds;
    }
    if (i >= o->warmup) {
      if (o->batches > 0 ? res->batches == o->batches
                         : chime__bench_now_s() >= deadline)
        break;
    }
    if ((rc = chime_stream_next(s, &b, 30000)) != 0) {
      snprintf(why, whylen, "next: %s", chime_last_error());
      goto out;
    }
    uint64_t n = 0;
    for (uint32_t l = 0; l < b.nleaves; l++) {
      sink += chime__bench_touch(b.leaf[l].data, b.leaf[l].bytes, o->touch);
      n += b.leaf[l].bytes;
    }
    if ((rc = chime_stream_release(s, &b)) != 0) {
      snprintf(why, whylen, "release: %s", chime_strerror(rc));
      goto out;
    }
    if (i >= o->warmup) {
      res->bytes += n;
      res->batches++;
    }
  }
  res->t1 = chime__bench_now_s();
  if (o->at_end != NULL)
    o->at_end(o->arg);
  chime_stream_local_stats_t st;
  if (chime_stream_stats(s, &st) == 0) {
    res->slots = st.slots;
    res->rtt_ns = st.rtt_ns;
    res->window_bytes = st.window_bytes;
  }
out:
  chime_stream_close(s);
  chime_client_destroy(c);
  return rc;
}
