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
        json_pack("{s:s, s:s, s:I, s:I, s:f, s:I, s:I, s:s, s:s, s:f, s:I, "
                  "s:f, s:f}",
                  "name", t->name, "spec", spec, "capacity",
                  (json_int_t)t->capacity, "size", (json_int_t)t->size, "mass",
                  t->mass, "min_size", (json_int_t)t->min_size, "sample_bytes",
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
  /* instance has 63 bits (docs/protocol.md, GetInfo): a json_int_t. */
  return json_pack(
      "{s:s, s:s, s:s, s:I, s:I, s:b, s:I, s:o, s:o}", "version", in->version,
      "boot_id", in->boot_id, "hostname", in->hostname, "shard",
      (json_int_t)in->shard, "instance", (json_int_t)in->instance,
      "pin_host_memory", in->pin_host_memory, "pinned_bytes",
      (json_int_t)in->pinned_bytes, "tables", tables, "rings", rings);
}

static void info_text(const chime_server_info_t *in) {
  printf("chimed %s on %s (boot_id %s)\n", in->version, in->hostname,
         in->boot_id);
  printf("shard: %" PRIu32 ", instance: %016" PRIx64 "\n", in->shard,
         in->instance);
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

/* The stats lists (chime/stats.h) over the public structs: every field is
 * in the JSON under its name (a FLAG as a bool); the text tables show the
 * columns named below, headed by the name in capitals (an NS field in
 * ms). */
enum { UNIT_COUNT, UNIT_NS, UNIT_BYTES, UNIT_FLAG };

#define JSON_FIELD(type, name, kind, unit, help)                               \
  json_object_set_new(o, #name,                                                \
                      UNIT_##unit == UNIT_FLAG                                 \
                          ? json_boolean(s->name != 0)                         \
                          : json_integer((json_int_t)s->name));

static void table_json(json_t *o, const chime_table_stats_t *s) {
  CHIME_TABLE_STATS_FIELDS(JSON_FIELD)
}

static void stream_json(json_t *o, const chime_stream_stats_t *s) {
  CHIME_STREAM_STATS_FIELDS(JSON_FIELD)
}

static void server_json(json_t *o, const chime_stats_t *s) {
  CHIME_SERVER_STATS_FIELDS(JSON_FIELD)
}

static json_t *stats_json(const chime_stats_t *st) {
  json_t *tables = json_array(), *streams = json_array();
  for (uint32_t i = 0; i < st->ntables; i++) {
    const chime_table_stats_t *t = &st->tables[i];
    json_t *o = json_pack("{s:s}", "name", t->name);
    table_json(o, t);
    json_array_append_new(tables, o);
  }
  for (uint32_t i = 0; i < st->nstreams; i++) {
    const chime_stream_stats_t *s = &st->streams[i];
    json_t *o =
        json_pack("{s:I, s:s, s:s}", "stream_id", (json_int_t)s->stream_id,
                  "table", s->table, "mode", mode_name(s->mode));
    stream_json(o, s);
    json_array_append_new(streams, o);
  }
  json_t *o = json_pack("{s:o, s:o}", "tables", tables, "streams", streams);
  server_json(o, st);
  return o;
}

/* Columns of the text view: a plain table's, a sequence table's (NULL:
 * every field). */
static const char *const table_cols[] = {
    "size",           "capacity", "inserts", "samples", "sampler_wait_ns",
    "insert_wait_ns", NULL};
static const char *const sequence_cols[] = {
    "steps", "steps_inserted", "episodes_open", "step_bytes", NULL};

/* One cell of a text row, or of its head (head: the field's name), when
 * cols names the field. */
static void cell(const char *const *cols, int head, const char *name, int unit,
                 uint64_t v) {
  int want = cols == NULL;
  for (size_t c = 0; cols != NULL && cols[c] != NULL; c++)
    want |= strcmp(cols[c], name) == 0;
  if (!want)
    return;
  char h[64];
  size_t n = strlen(name);
  if (unit == UNIT_NS && n > 3)
    n -= 3; /* _ns: shown in ms */
  int w = snprintf(h, sizeof(h), "%.*s%s", (int)n, name,
                   unit == UNIT_NS ? "_ms" : "");
  for (char *p = h; *p != '\0'; p++)
    if (*p >= 'a' && *p <= 'z')
      *p = (char)(*p - 'a' + 'A');
  w = w < 10 ? 10 : w;
  if (head)
    printf(" %*s", w, h);
  else if (unit == UNIT_NS)
    printf(" %*.1f", w, (double)v / 1e6);
  else if (unit == UNIT_FLAG)
    printf(" %*s", w, v ? "yes" : "no");
  else
    printf(" %*" PRIu64, w, v);
}

#define TEXT_CELL(type, name, kind, unit, help)                                \
  cell(cols, s == NULL, #name, UNIT_##unit, s != NULL ? (uint64_t)s->name : 0);

/* A row of s, or the head (s NULL). */
static void table_row(const chime_table_stats_t *s, const char *const *cols) {
  CHIME_TABLE_STATS_FIELDS(TEXT_CELL)
  printf("\n");
}

static void stream_row(const chime_stream_stats_t *s) {
  const char *const *cols = NULL;
  CHIME_STREAM_STATS_FIELDS(TEXT_CELL)
  printf("\n");
}

static void stats_text(const chime_stats_t *st) {
  printf("%-16s", "TABLE");
  table_row(NULL, table_cols);
  for (uint32_t i = 0; i < st->ntables; i++) {
    printf("%-16s", st->tables[i].name);
    table_row(&st->tables[i], table_cols);
  }
  int nseq = 0;
  for (uint32_t i = 0; i < st->ntables; i++) {
    const chime_table_stats_t *t = &st->tables[i];
    if (t->step_bytes == 0)
      continue; /* not a sequence table */
    if (nseq++ == 0) {
      printf("\n%-16s", "SEQUENCE TABLE");
      table_row(NULL, sequence_cols);
    }
    printf("%-16s", t->name);
    table_row(t, sequence_cols);
  }
  printf("\n%-8s %-16s %-7s", "STREAM", "TABLE", "MODE");
  stream_row(NULL);
  for (uint32_t i = 0; i < st->nstreams; i++) {
    const chime_stream_stats_t *s = &st->streams[i];
    printf("%-8" PRIu64 " %-16s %-7s", s->stream_id, s->table,
           mode_name(s->mode));
    stream_row(s);
  }
  if (st->nstreams == 0)
    printf("(no streams)\n");
  printf("\n");
#define SERVER_LINE(type, name, kind, unit, help)                              \
  printf("%s: %" PRIu64 "\n", #name, (uint64_t)st->name);
  CHIME_SERVER_STATS_FIELDS(SERVER_LINE)
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
