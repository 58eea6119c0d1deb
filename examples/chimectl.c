/* chimectl: a server's info and stats as readable tables or JSON.
 *
 *   chimectl [--json] info ADDR
 *   chimectl [--json] stats ADDR
 *   chimectl [--json] checkpoint ADDR */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chime/chime.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f, "usage: chimectl [--json] " CHIME__CLI_CONN_USAGE " info ADDR\n"
             "       chimectl [--json] " CHIME__CLI_CONN_USAGE " stats ADDR\n"
             "       chimectl [--json] " CHIME__CLI_CONN_USAGE
             " checkpoint ADDR\n");
}

static const char *mode_name(int mode) {
  return chime_mode_name((chime_mode_t)mode);
}

static json_t *info_json(const chime_server_info_t *in) {
  json_t *tables = json_array();
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    char spec[4096];
    if (chime_spec_format(&t->spec, spec, sizeof(spec)) != 0)
      snprintf(spec, sizeof(spec), "?");
    json_array_append_new(
        tables,
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:f, s:I, s:f, "
                  "s:f}",
                  "name", t->name, "spec", spec, "capacity",
                  (json_int_t)t->capacity, "size", (json_int_t)t->size,
                  "min_size", (json_int_t)t->min_size, "sample_bytes",
                  (json_int_t)t->sample_bytes, "sampler", t->sampler, "remover",
                  t->remover, "priority_exponent", t->priority_exponent,
                  "max_times_sampled", (json_int_t)t->max_times_sampled,
                  "samples_per_insert", t->samples_per_insert, "error_buffer",
                  t->error_buffer));
    if (t->sequence_length > 0) {
      char step[4096];
      if (chime_spec_format(&t->step_spec, step, sizeof(step)) != 0)
        snprintf(step, sizeof(step), "?");
      json_t *ip = t->initial_priority_max ? json_string("max")
                                           : json_real(t->initial_priority);
      json_object_set_new(
          json_array_get(tables, json_array_size(tables) - 1), "sequence",
          json_pack("{s:s, s:I, s:I, s:I, s:I, s:s, s:o}", "step_spec", step,
                    "step_bytes", (json_int_t)t->step_bytes, "capacity_steps",
                    (json_int_t)t->capacity_steps, "sequence_length",
                    (json_int_t)t->sequence_length, "stride",
                    (json_int_t)t->stride, "episode_end", t->episode_end,
                    "initial_priority", ip));
    }
  }
  json_t *rings = json_array();
  for (uint32_t i = 0; i < in->nrings; i++) {
    const chime_ring_info_t *r = &in->rings[i];
    json_array_append_new(rings, json_pack("{s:I, s:s, s:I, s:I}", "stream_id",
                                           (json_int_t)r->stream_id, "table",
                                           r->table, "bytes",
                                           (json_int_t)r->bytes, "pinned_bytes",
                                           (json_int_t)r->pinned_bytes));
  }
  return json_pack("{s:s, s:s, s:s, s:b, s:I, s:o, s:o}", "version",
                   in->version, "boot_id", in->boot_id, "hostname",
                   in->hostname, "pin_host_memory", in->pin_host_memory,
                   "pinned_bytes", (json_int_t)in->pinned_bytes, "tables",
                   tables, "rings", rings);
}

static void info_text(const chime_server_info_t *in) {
  printf("chimed %s on %s (boot_id %s)\n", in->version, in->hostname,
         in->boot_id);
  printf("pin_host_memory: %s, pinned bytes: %" PRIu64 "\n\n",
         in->pin_host_memory ? "on" : "off", in->pinned_bytes);
  printf("%-16s %-11s %-11s %8s %9s %13s %10s %10s %8s %12s  %s\n", "TABLE",
         "SAMPLER", "REMOVER", "EXPONENT", "MAX_TIMES", "SPI(+-BUFFER)", "SIZE",
         "CAPACITY", "MIN_SIZE", "SAMPLE_BYTES", "SPEC");
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    char spec[4096];
    if (chime_spec_format(&t->spec, spec, sizeof(spec)) != 0)
      snprintf(spec, sizeof(spec), "?");
    char exp[32] = "-"; /* only a prioritized selector uses it */
    if (strcmp(t->sampler, "prioritized") == 0 ||
        strcmp(t->remover, "prioritized") == 0)
      snprintf(exp, sizeof(exp), "%g", t->priority_exponent);
    char rate[48] = "-";
    if (t->samples_per_insert > 0)
      snprintf(rate, sizeof(rate), "%g(+-%g)", t->samples_per_insert,
               t->error_buffer);
    printf("%-16s %-11s %-11s %8s %9" PRIu64 " %13s %10" PRIu64 " %10" PRIu64
           " %8" PRIu64 " %12" PRIu64 "  %s\n",
           t->name, t->sampler, t->remover, exp, t->max_times_sampled, rate,
           t->size, t->capacity, t->min_size, t->sample_bytes, spec);
  }
  /* A sequence table's items are windows of its steps (docs/sequences.md):
   * SPEC above is one window's. */
  int nseq = 0;
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    if (t->sequence_length == 0)
      continue;
    if (nseq++ == 0)
      printf("\nSEQUENCES\n%-16s %14s %8s %6s %11s %8s %10s  %s\n", "TABLE",
             "CAPACITY_STEPS", "LENGTH", "STRIDE", "EPISODE_END", "INITIAL",
             "STEP_BYTES", "STEP_SPEC");
    char step[4096], ip[32] = "max";
    if (chime_spec_format(&t->step_spec, step, sizeof(step)) != 0)
      snprintf(step, sizeof(step), "?");
    if (!t->initial_priority_max)
      snprintf(ip, sizeof(ip), "%g", t->initial_priority);
    printf("%-16s %14" PRIu64 " %8" PRIu32 " %6" PRIu32 " %11s %8s %10" PRIu64
           "  %s\n",
           t->name, t->capacity_steps, t->sequence_length, t->stride,
           t->episode_end, ip, t->step_bytes, step);
  }
  /* One ring per open stream; pinned bytes are slots x slot_bytes of each
   * ring the server page-locked (docs/pinning.md). */
  printf("\nRINGS\n%-8s %-16s %14s %14s\n", "STREAM", "TABLE", "BYTES",
         "PINNED_BYTES");
  uint64_t ring_total = 0;
  for (uint32_t i = 0; i < in->nrings; i++) {
    const chime_ring_info_t *r = &in->rings[i];
    printf("%-8" PRIu64 " %-16s %14" PRIu64 " %14" PRIu64 "\n", r->stream_id,
           r->table, r->bytes, r->pinned_bytes);
    ring_total += r->bytes;
  }
  if (in->nrings == 0)
    printf("(no rings)\n");
  printf("%-8s %-16s %14" PRIu64 " %14" PRIu64 "\n", "total", "", ring_total,
         in->pinned_bytes);
}

static json_t *stats_json(const chime_stats_t *st) {
  json_t *tables = json_array(), *streams = json_array();
  for (uint32_t i = 0; i < st->ntables; i++) {
    const chime_table_stats_t *t = &st->tables[i];
    json_array_append_new(
        tables,
        json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, "
                  "s:i, s:i, s:I, s:I}",
                  "name", t->name, "size", (json_int_t)t->size, "capacity",
                  (json_int_t)t->capacity, "inserts", (json_int_t)t->inserts,
                  "samples", (json_int_t)t->samples, "sampler_wait_ns",
                  (json_int_t)t->sampler_wait_ns, "insert_wait_ns",
                  (json_int_t)t->insert_wait_ns, "returned",
                  (json_int_t)t->returned, "rate_insert_wait_ns",
                  (json_int_t)t->rate_insert_wait_ns, "rate_sample_wait_ns",
                  (json_int_t)t->rate_sample_wait_ns, "inserts_waiting_rate",
                  (int)t->inserts_waiting_rate, "samplers_waiting_rate",
                  (int)t->samplers_waiting_rate, "samplers_waiting_items",
                  (int)t->samplers_waiting_items, "left", (json_int_t)t->left,
                  "left_times_sampled", (json_int_t)t->left_times_sampled));
    json_t *o = json_array_get(tables, json_array_size(tables) - 1);
    json_object_set_new(o, "steps", json_integer((json_int_t)t->steps));
    json_object_set_new(o, "steps_inserted",
                        json_integer((json_int_t)t->steps_inserted));
    json_object_set_new(o, "episodes_open",
                        json_integer((json_int_t)t->episodes_open));
    json_object_set_new(o, "step_bytes",
                        json_integer((json_int_t)t->step_bytes));
  }
  for (uint32_t i = 0; i < st->nstreams; i++) {
    const chime_stream_stats_t *s = &st->streams[i];
    json_array_append_new(
        streams,
        json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:b}",
                  "stream_id", (json_int_t)s->stream_id, "table", s->table,
                  "mode", mode_name(s->mode), "batches", (json_int_t)s->batches,
                  "bytes", (json_int_t)s->bytes, "producer_wait_ns",
                  (json_int_t)s->producer_wait_ns, "consumer_wait_ns",
                  (json_int_t)s->consumer_wait_ns, "ring_bytes",
                  (json_int_t)s->ring_bytes, "leases", (int)s->leases,
                  "max_leases", (int)s->max_leases, "pinned", s->pinned));
  }
  return json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:i}", "tables", tables,
                   "streams", streams, "ring_bytes_total",
                   (json_int_t)st->ring_bytes_total, "pinned_bytes",
                   (json_int_t)st->pinned_bytes, "staged_insert_bytes",
                   (json_int_t)st->staged_insert_bytes, "staged_insert_budget",
                   (json_int_t)st->staged_insert_budget, "insert_calls_parked",
                   (int)st->insert_calls_parked);
}

static double ms(uint64_t ns) {
  return (double)ns / 1e6;
}

static void stats_text(const chime_stats_t *st) {
  printf("%-16s %10s %10s %12s %12s %16s %15s\n", "TABLE", "SIZE", "CAPACITY",
         "INSERTS", "SAMPLES", "SAMPLER_WAIT_MS", "INSERT_WAIT_MS");
  for (uint32_t i = 0; i < st->ntables; i++) {
    const chime_table_stats_t *t = &st->tables[i];
    printf("%-16s %10" PRIu64 " %10" PRIu64 " %12" PRIu64 " %12" PRIu64
           " %16.1f %15.1f\n",
           t->name, t->size, t->capacity, t->inserts, t->samples,
           ms(t->sampler_wait_ns), ms(t->insert_wait_ns));
  }
  int nseq = 0;
  for (uint32_t i = 0; i < st->ntables; i++) {
    const chime_table_stats_t *t = &st->tables[i];
    if (t->step_bytes == 0)
      continue; /* not a sequence table */
    if (nseq++ == 0)
      printf("\n%-16s %12s %14s %13s %14s\n", "SEQUENCE TABLE", "STEPS",
             "STEPS_INSERTED", "EPISODES_OPEN", "STEP_BYTES");
    printf("%-16s %12" PRIu64 " %14" PRIu64 " %13" PRIu64 " %14" PRIu64 "\n",
           t->name, t->steps, t->steps_inserted, t->episodes_open,
           t->step_bytes);
  }
  printf("\n%-8s %-16s %-7s %10s %14s %7s %10s %12s %7s %14s %14s\n", "STREAM",
         "TABLE", "MODE", "BATCHES", "BYTES", "LEASES", "MAX_LEASES",
         "RING_BYTES", "PINNED", "PROD_WAIT_MS", "CONS_WAIT_MS");
  for (uint32_t i = 0; i < st->nstreams; i++) {
    const chime_stream_stats_t *s = &st->streams[i];
    printf("%-8" PRIu64 " %-16s %-7s %10" PRIu64 " %14" PRIu64 " %7" PRIu32
           " %10" PRIu32 " %12" PRIu64 " %7s %14.1f %14.1f\n",
           s->stream_id, s->table, mode_name(s->mode), s->batches, s->bytes,
           s->leases, s->max_leases, s->ring_bytes, s->pinned ? "yes" : "no",
           ms(s->producer_wait_ns), ms(s->consumer_wait_ns));
  }
  if (st->nstreams == 0)
    printf("(no streams)\n");
  printf("\nring bytes total: %" PRIu64 ", pinned bytes: %" PRIu64 "\n",
         st->ring_bytes_total, st->pinned_bytes);
  printf("staged insert bytes: %" PRIu64 " of %" PRIu64
         ", insert calls parked: %" PRIu32 "\n",
         st->staged_insert_bytes, st->staged_insert_budget,
         st->insert_calls_parked);
}

static int print_json(json_t *j) {
  if (!j)
    return -1;
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(j);
  if (!s)
    return -1;
  printf("%s\n", s);
  free(s);
  return 0;
}

int main(int argc, char **argv) {
  int as_json = 0;
  const char *cmd = NULL, *addr = NULL;
  chime__cli_conn_t conn = {0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      as_json = 1;
    } else if (chime__cli_conn_option(&conn, argv[i],
                                      i + 1 < argc ? argv[i + 1] : NULL)) {
      i++;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "chimectl: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    } else if (!cmd) {
      cmd = argv[i];
    } else if (!addr) {
      addr = argv[i];
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (!cmd || !addr ||
      (strcmp(cmd, "info") && strcmp(cmd, "stats") &&
       strcmp(cmd, "checkpoint"))) {
    usage(stderr);
    return 2;
  }

  int exit_code = 1;
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  chime_stats_t *st = NULL;
  /* A checkpoint of large tables takes as long as its disk does; the
   * server finishes it even when the caller stops waiting. */
  if (!strcmp(cmd, "checkpoint"))
    conn.timeout_ms = 3600 * 1000;
  int rc = chime__cli_client("chimectl", addr, &conn, &c);
  if (rc == 2)
    return 2;
  if (rc) {
    fprintf(stderr, "chimectl: %s: %s\n", addr, chime_strerror(rc));
    goto cleanup;
  }
  if (!strcmp(cmd, "info")) {
    rc = chime_client_info(c, &info);
    if (rc) {
      fprintf(stderr, "chimectl: info %s: %s\n", addr, chime_last_error());
      goto cleanup;
    }
    if (as_json ? print_json(info_json(info)) : (info_text(info), 0))
      goto cleanup;
  } else if (!strcmp(cmd, "checkpoint")) {
    chime_checkpoint_result_t r;
    rc = chime_client_checkpoint(c, &r);
    if (rc) {
      fprintf(stderr, "chimectl: checkpoint %s: %s\n", addr,
              chime_last_error());
      goto cleanup;
    }
    if (as_json) {
      json_t *j =
          json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "path", r.path, "tables",
                    (json_int_t)r.tables, "items", (json_int_t)r.items, "bytes",
                    (json_int_t)r.bytes, "pause_ns", (json_int_t)r.pause_ns,
                    "duration_ns", (json_int_t)r.duration_ns);
      if (print_json(j))
        goto cleanup;
    } else {
      printf("checkpoint %s: %" PRIu32 " tables, %" PRIu64 " items, %" PRIu64
             " bytes in %.3f s (longest table pause %.3f ms)\n",
             r.path, r.tables, r.items, r.bytes, (double)r.duration_ns / 1e9,
             (double)r.pause_ns / 1e6);
    }
  } else {
    rc = chime_client_stats(c, &st);
    if (rc) {
      fprintf(stderr, "chimectl: stats %s: %s\n", addr, chime_last_error());
      goto cleanup;
    }
    if (as_json ? print_json(stats_json(st)) : (stats_text(st), 0))
      goto cleanup;
  }
  exit_code = 0;

cleanup:
  chime_server_info_free(info);
  chime_stats_free(st);
  chime_client_destroy(c);
  return exit_code;
}
