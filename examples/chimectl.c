/* chimectl: a server's info and stats as readable tables or JSON.
 *
 *   chimectl [--json] info TARGET
 *   chimectl [--json] stats TARGET
 *   chimectl [--json] checkpoint TARGET
 *   chimectl top TARGET [--iterations N] [--interval-ms MS]
 *   chimectl import FILE TABLE TARGET [--map LEAF=NAME]... (and export
 *   TABLE FILE TARGET): offline datasets, run through the Python package
 *   (chimectl_dataset.c)
 *
 * TARGET is one server ("host:port", "unix:/path") or many shards as
 * chime_client_create takes them (a comma list, ipv4:/ipv6: lists,
 * dns:///name:port). Over shards every command goes to each shard at once
 * and prints a row per shard (its address and shard number) and a totals
 * row; --json gives {"shards": [...], "total": {...}}. A shard that does
 * not answer gets an error row and the exit status 1, the others still
 * print (docs/operations.md). top is a live view of stats, rates per
 * second (examples/chimectl_top.c). */
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chime/chime.h"
#include "chimectl_dataset.h"
#include "chimectl_leaves.h"
#include "chimectl_top.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: chimectl [--json] " CHIME__CLI_CONN_USAGE " info TARGET\n"
      "       chimectl [--json] " CHIME__CLI_CONN_USAGE " stats TARGET\n"
      "       chimectl [--json] " CHIME__CLI_CONN_USAGE " checkpoint TARGET\n"
      "       chimectl " CHIME__CLI_CONN_USAGE
      " top TARGET [--iterations N] [--interval-ms MS]\n"
      "       chimectl " CHIME__CLI_CONN_USAGE
      " import FILE TABLE TARGET [--map LEAF=NAME]...\n"
      "                [--priorities NAME] [--partial] [--format hdf5|npz]\n"
      "       chimectl " CHIME__CLI_CONN_USAGE
      " export TABLE FILE TARGET [--format hdf5|npz]\n" CHIME__CLI_TARGET_HELP
      "Over shards: a row per shard and a totals row (--json: "
      "{\"shards\", \"total\"}); top sums the shards.\n"
      "top: rates over each interval (default 1000 ms), q or Ctrl-C "
      "quits;\n--iterations N prints N plain frames and exits.\n");
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
                  "s:f, s:f, s:I, s:I, s:s}",
                  "name", t->name, "spec", spec, "capacity",
                  (json_int_t)t->capacity, "size", (json_int_t)t->size, "mass",
                  t->mass, "min_size", (json_int_t)t->min_size, "sample_bytes",
                  (json_int_t)t->sample_bytes, "sampler", t->sampler, "remover",
                  t->remover, "priority_exponent", t->priority_exponent,
                  "max_times_sampled", (json_int_t)t->max_times_sampled,
                  "samples_per_insert", t->samples_per_insert, "error_buffer",
                  t->error_buffer, "max_staleness",
                  (json_int_t)t->max_staleness, "newest_version",
                  (json_int_t)t->newest_version, "staleness_weight",
                  t->staleness_weight));
    json_object_set_new(json_array_get(tables, json_array_size(tables) - 1),
                        "compress", json_string(t->compress));
    json_object_set_new(json_array_get(tables, json_array_size(tables) - 1),
                        "data_dir", json_string(t->data_dir));
    json_object_set_new(json_array_get(tables, json_array_size(tables) - 1),
                        "disk_bytes", json_integer((json_int_t)t->disk_bytes));
    json_object_set_new(json_array_get(tables, json_array_size(tables) - 1),
                        "pace_batch", json_integer((json_int_t)t->pace_batch));
    json_object_set_new(json_array_get(tables, json_array_size(tables) - 1),
                        "version_leaf", json_string(t->version_leaf));
    json_object_set_new(json_array_get(tables, json_array_size(tables) - 1),
                        "leaves",
                        chimectl_leaves_json(t->leaf_bytes, t->nleaf_bytes));
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

/* The tables (and sequences) of an info: one server's, or the union of
 * shards. */
static void info_tables_text(const chime_server_info_t *in) {
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
  /* Policy versions (docs/replay.md), for the tables that use them: the
   * newest version seen, the staleness gate (- for none) and how a
   * prioritized sampler weighs staleness. */
  int nver = 0;
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    if (t->newest_version == 0 && t->max_staleness == 0 &&
        strcmp(t->staleness_weight, "none") == 0)
      continue;
    if (nver++ == 0)
      printf("\nVERSIONS\n%-16s %14s %13s  %s\n", "TABLE", "NEWEST_VERSION",
             "MAX_STALENESS", "STALENESS_WEIGHT");
    char gate[32] = "-";
    if (t->max_staleness > 0)
      snprintf(gate, sizeof(gate), "%" PRIu64, t->max_staleness);
    printf("%-16s %14" PRIu64 " %13s  %s\n", t->name, t->newest_version, gate,
           t->staleness_weight);
  }
}

/* A section of the tables whose string field at off (in
 * chime_table_info_t) is set, under title, that field's column col. */
static void info_field_text(const chime_server_info_t *in, const char *title,
                            const char *col, size_t off) {
  int n = 0;
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    const char *v = (const char *)t + off;
    if (v[0] == '\0')
      continue;
    if (n++ == 0)
      printf("\n%s\n%-16s  %s\n", title, "TABLE", col);
    printf("%-16s  %s\n", t->name, v);
  }
}

/* Tables in files: where, and the bytes their files hold on disk
 * (allocated blocks; `chimectl stats` has them beside RAW and STORED). */
static void info_files_text(const chime_server_info_t *in) {
  int n = 0;
  for (uint32_t i = 0; i < in->ntables; i++) {
    const chime_table_info_t *t = &in->tables[i];
    if (t->data_dir[0] == '\0')
      continue;
    if (n++ == 0)
      printf("\nIN FILES\n%-16s %14s  %s\n", "TABLE", "DISK_BYTES", "DATA_DIR");
    printf("%-16s %14" PRIu64 "  %s\n", t->name, t->disk_bytes, t->data_dir);
  }
}

static void info_text(const chime_server_info_t *in) {
  printf("chimed %s on %s (boot_id %s)\n", in->version, in->hostname,
         in->boot_id);
  printf("shard: %" PRIu32 ", instance: %016" PRIx64 "\n", in->shard,
         in->instance);
  printf("pin_host_memory: %s, pinned bytes: %" PRIu64 "\n\n",
         in->pin_host_memory ? "on" : "off", in->pinned_bytes);
  info_tables_text(in);
  /* Compressed leaves (docs/replay.md; the bytes they save are in
   * `chimectl stats`: RAW_BYTES, STORED_BYTES) and tables in files
   * (docs/operations.md, "Tables in files"). */
  info_field_text(in, "COMPRESSED LEAVES (zstd)", "LEAF:LEVEL",
                  offsetof(chime_table_info_t, compress));
  info_files_text(in);
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
  json_object_set_new(o, "leaves",
                      chimectl_leaves_json(s->leaf_bytes, s->nleaf_bytes));
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
    "size",      "capacity",        "inserts",
    "samples",   "sampler_wait_ns", "insert_wait_ns",
    "raw_bytes", "stored_bytes",    "disk_bytes",
    NULL};
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

/* The cells of s, or of the head (s NULL); a plain table's end with the
 * bytes it keeps over their raw size. */
static void table_cells(const chime_table_stats_t *s, const char *const *cols) {
  CHIME_TABLE_STATS_FIELDS(TEXT_CELL)
  if (cols != table_cols)
    return;
  if (s == NULL)
    printf(" %10s", "STORED/RAW");
  else
    chimectl_ratio_cell(s->stored_bytes, s->raw_bytes);
}

/* A row of s, or the head (s NULL). */
static void table_row(const chime_table_stats_t *s, const char *const *cols) {
  table_cells(s, cols);
  printf("\n");
}

static void stream_row(const chime_stream_stats_t *s) {
  const char *const *cols = NULL;
  CHIME_STREAM_STATS_FIELDS(TEXT_CELL)
  printf("\n");
}

/* The tables (and sequence tables) of stats: one server's, or summed
 * over shards. */
static void stats_tables_text(const chime_stats_t *st) {
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
  chimectl_leaves_text(st);
}

#define SERVER_LINE(type, name, kind, unit, help)                              \
  printf("%s: %" PRIu64 "\n", #name, (uint64_t)st->name);

static void stats_text(const chime_stats_t *st) {
  stats_tables_text(st);
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

static json_t *checkpoint_json(const chime_checkpoint_result_t *r) {
  return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "path", r->path, "tables",
                   (json_int_t)r->tables, "items", (json_int_t)r->items,
                   "bytes", (json_int_t)r->bytes, "pause_ns",
                   (json_int_t)r->pause_ns, "duration_ns",
                   (json_int_t)r->duration_ns);
}

/* ------------------------------------------------------ a sharded target */

/* One shard of a sharded target and its answers: GetInfo first, from
 * every shard (it says which shard and which server each is), then the
 * command's own call. */
typedef struct {
  chime_client_t *client; /* the shard's own: the parent client owns it */
  const char *addr;
  const char *cmd;
  int phase;      /* 0: GetInfo, 1: the command's call */
  int dup;        /* an earlier shard that is the same server, or -1 */
  int rc;         /* 0, or the code of the call that failed */
  char err[1024]; /* its detail, copied on the thread that saw it */
  chime_server_info_t *info;
  chime_stats_t *stats;
  chime_checkpoint_result_t ckpt;
} shard_t;

static void *shard_call(void *arg) {
  shard_t *s = arg;
  int rc = 0;
  if (s->phase == 0)
    rc = chime_client_info(s->client, &s->info);
  else if (s->rc == 0 && s->dup < 0 && !strcmp(s->cmd, "stats"))
    rc = chime_client_stats(s->client, &s->stats);
  else if (s->rc == 0 && s->dup < 0 && !strcmp(s->cmd, "checkpoint"))
    rc = chime_client_checkpoint(s->client, &s->ckpt);
  /* The detail is the calling thread's, and goes with it. */
  if (rc) {
    s->rc = rc;
    snprintf(s->err, sizeof(s->err), "%s", chime_last_error());
  }
  return NULL;
}

/* Every shard at once: the slowest shard (or an unreachable one, up to the
 * timeout) bounds the command rather than the sum of them, and the shards'
 * checkpoints start together. A thread that cannot start runs its call
 * here instead. */
static void shards_call(shard_t *sh, uint32_t n) {
  pthread_t *th = calloc(n, sizeof(*th));
  char *started = calloc(n, 1);
  for (uint32_t i = 0; i < n; i++)
    if (th == NULL || started == NULL ||
        pthread_create(&th[i], NULL, shard_call, &sh[i]) != 0)
      shard_call(&sh[i]);
    else
      started[i] = 1;
  for (uint32_t i = 0; th != NULL && started != NULL && i < n; i++)
    if (started[i])
      pthread_join(th[i], NULL);
  free(th);
  free(started);
}

/* The union of the shards that answered, summed by the rules of a sharded
 * client's own GetInfo and Stats (src/client/fanout.c), but from the very
 * answers the shard rows show: a table's size, capacity and mass (and
 * counters) summed by name, rings and streams listed, the server's figures
 * summed; version, host and boot id the first shard's, host and boot id blank
 * where the shards differ. A table that differs between shards (spec or
 * sampler) is said on stderr and sets *differs: a sharded client refuses
 * such a target. */
static int merge_info(chime_server_info_t *m, const shard_t *s, int first,
                      int *differs) {
  const chime_server_info_t *one = s->info;
  if (first) {
    snprintf(m->version, sizeof(m->version), "%s", one->version);
    snprintf(m->boot_id, sizeof(m->boot_id), "%s", one->boot_id);
    snprintf(m->hostname, sizeof(m->hostname), "%s", one->hostname);
  } else {
    if (strcmp(m->boot_id, one->boot_id) != 0)
      m->boot_id[0] = '\0';
    if (strcmp(m->hostname, one->hostname) != 0)
      m->hostname[0] = '\0';
  }
  m->pin_host_memory |= one->pin_host_memory;
  m->pinned_bytes += one->pinned_bytes;
  chime_table_info_t *tables =
      realloc(m->tables, (m->ntables + one->ntables + 1) * sizeof(*tables));
  if (tables)
    m->tables = tables;
  chime_ring_info_t *rings =
      realloc(m->rings, (m->nrings + one->nrings + 1) * sizeof(*rings));
  if (rings)
    m->rings = rings;
  if (!tables || !rings)
    return -1;
  for (uint32_t t = 0; t < one->ntables; t++) {
    const chime_table_info_t *in = &one->tables[t];
    uint32_t k = 0;
    while (k < m->ntables && strcmp(m->tables[k].name, in->name) != 0)
      k++;
    if (k == m->ntables) {
      m->tables[m->ntables++] = *in;
      continue;
    }
    chime_table_info_t *o = &m->tables[k];
    char a[4096], b[4096];
    if (chime_spec_format(&o->spec, a, sizeof(a)) != 0 ||
        chime_spec_format(&in->spec, b, sizeof(b)) != 0 || strcmp(a, b) != 0 ||
        strcmp(o->sampler, in->sampler) != 0) {
      fprintf(stderr,
              "chimectl: shard %s: table '%s' differs from the same table on "
              "the shards before it (spec or sampler)\n",
              s->addr, in->name);
      *differs = 1;
    }
    o->size += in->size;
    o->capacity += in->capacity;
    o->mass += in->mass; /* the union's: what sampling weighs against */
    o->capacity_steps += in->capacity_steps;
  }
  if (one->nrings > 0) /* a server without rings sends none: NULL */
    memcpy(m->rings + m->nrings, one->rings, one->nrings * sizeof(*rings));
  m->nrings += one->nrings;
  return 0;
}

#define ADD(type, name, kind, unit, help) o->name += s->name;
static void add_table_stats(chime_table_stats_t *o,
                            const chime_table_stats_t *s) {
  uint64_t newest = o->newest_version > s->newest_version ? o->newest_version
                                                          : s->newest_version;
  CHIME_TABLE_STATS_FIELDS(ADD)
  o->newest_version = newest; /* a version, not a count: the highest */
}
static void add_server_stats(chime_stats_t *o, const chime_stats_t *s) {
  CHIME_SERVER_STATS_FIELDS(ADD)
}
#undef ADD

static int merge_stats(chime_stats_t *m, const chime_stats_t *one) {
  chime_table_stats_t *tables =
      realloc(m->tables, (m->ntables + one->ntables + 1) * sizeof(*tables));
  if (tables)
    m->tables = tables;
  chime_stream_stats_t *streams =
      realloc(m->streams, (m->nstreams + one->nstreams + 1) * sizeof(*streams));
  if (streams)
    m->streams = streams;
  if (!tables || !streams)
    return -1;
  for (uint32_t t = 0; t < one->ntables; t++) {
    uint32_t k = 0;
    while (k < m->ntables && strcmp(m->tables[k].name, one->tables[t].name))
      k++;
    if (k == m->ntables)
      m->tables[m->ntables++] = one->tables[t];
    else
      add_table_stats(&m->tables[k], &one->tables[t]);
  }
  if (one->nstreams > 0) /* NULL without streams */
    memcpy(m->streams + m->nstreams, one->streams,
           one->nstreams * sizeof(*streams));
  m->nstreams += one->nstreams;
  add_server_stats(m, one);
  return 0;
}

/* Shard i's head in JSON: {"address", "shard"}; for one that did not
 * answer "shard": null, "error" and "code" (its CHIME_E* name); for one
 * that is an earlier shard's server "same_as" its address. */
static json_t *shard_json(const shard_t *sh, uint32_t i) {
  const shard_t *s = &sh[i];
  if (s->rc)
    return json_pack("{s:s, s:n, s:s, s:s}", "address", s->addr, "shard",
                     "error", s->err, "code", chime_err_name(s->rc));
  if (s->dup >= 0)
    return json_pack("{s:s, s:I, s:s}", "address", s->addr, "shard",
                     (json_int_t)s->info->shard, "same_as", sh[s->dup].addr);
  return json_pack("{s:s, s:I}", "address", s->addr, "shard",
                   (json_int_t)s->info->shard);
}

/* {"shards": [head + the one-server JSON of each], "total": t}. */
static json_t *shards_json(const shard_t *sh, uint32_t n, json_t *total) {
  json_t *list = json_array();
  for (uint32_t i = 0; list != NULL && i < n; i++) {
    const shard_t *s = &sh[i];
    int whole = s->rc == 0 && s->dup < 0;
    json_t *o = shard_json(sh, i), *body = NULL;
    if (whole)
      body = !strcmp(s->cmd, "info")    ? info_json(s->info)
             : !strcmp(s->cmd, "stats") ? stats_json(s->stats)
                                        : checkpoint_json(&s->ckpt);
    if (o == NULL ||
        (whole && (body == NULL || json_object_update(o, body) != 0))) {
      json_decref(o);
      json_decref(body);
      json_decref(list);
      json_decref(total);
      return NULL;
    }
    json_decref(body);
    json_array_append_new(list, o);
  }
  if (list == NULL || total == NULL) {
    json_decref(list);
    json_decref(total);
    return NULL;
  }
  return json_pack("{s:o, s:o}", "shards", list, "total", total);
}

/* The text tables' address column: as wide as the longest address. */
static int addr_width(const shard_t *sh, uint32_t n) {
  size_t w = strlen("ADDRESS");
  for (uint32_t i = 0; i < n; i++)
    if (strlen(sh[i].addr) > w)
      w = strlen(sh[i].addr);
  return (int)w;
}

/* Shard i's row's first two cells: its number and its address, and 0;
 * for a shard that did not answer the rest of the row is the error, for
 * one that is an earlier shard's server the rest says so, and -1. */
static int shard_cells(const shard_t *sh, uint32_t i, int aw) {
  const shard_t *s = &sh[i];
  if (s->rc) {
    printf("%-6s %-*s  error: %s: %s\n", "-", aw, s->addr,
           chime_err_name(s->rc), s->err);
    return -1;
  }
  printf("%-6" PRIu32 " %-*s", s->info->shard, aw, s->addr);
  if (s->dup < 0)
    return 0;
  printf("  the same server as %s (instance %016" PRIx64 "): counted once\n",
         sh[s->dup].addr, s->info->instance);
  return -1;
}

static void total_cells(uint32_t answered, uint32_t n, int aw) {
  char what[64];
  snprintf(what, sizeof(what), "%" PRIu32 " of %" PRIu32 " shards", answered,
           n);
  printf("%-6s %-*s", "total", aw, what);
}

/* A shard row of info after its first cells, and the totals row. */
#define INFO_ROW                                                               \
  " %-10s %-20s %6" PRIu32 " %12" PRIu64 " %12" PRIu64 " %6" PRIu32            \
  " %14" PRIu64 "\n"

static void info_shards_text(const shard_t *sh, uint32_t n,
                             const chime_server_info_t *m, uint32_t answered) {
  int aw = addr_width(sh, n);
  printf("%-6s %-*s %-10s %-20s %6s %12s %12s %6s %14s\n", "SHARD", aw,
         "ADDRESS", "VERSION", "HOSTNAME", "TABLES", "SIZE", "CAPACITY",
         "RINGS", "PINNED_BYTES");
  for (uint32_t i = 0; i < n; i++) {
    const chime_server_info_t *in = sh[i].info;
    if (shard_cells(sh, i, aw))
      continue;
    uint64_t size = 0, cap = 0;
    for (uint32_t t = 0; t < in->ntables; t++) {
      size += in->tables[t].size;
      cap += in->tables[t].capacity;
    }
    printf(INFO_ROW, in->version, in->hostname, in->ntables, size, cap,
           in->nrings, in->pinned_bytes);
  }
  uint64_t size = 0, cap = 0;
  for (uint32_t t = 0; t < m->ntables; t++) {
    size += m->tables[t].size;
    cap += m->tables[t].capacity;
  }
  total_cells(answered, n, aw);
  printf(INFO_ROW, "", "", m->ntables, size, cap, m->nrings, m->pinned_bytes);
  printf("\n");
  info_tables_text(m);
}

/* A shard's tables as one: what the shard rows of stats show. */
static void stats_all_tables(const chime_stats_t *st, chime_table_stats_t *o) {
  memset(o, 0, sizeof(*o));
  for (uint32_t t = 0; t < st->ntables; t++)
    add_table_stats(o, &st->tables[t]);
}

static void stats_shards_text(const shard_t *sh, uint32_t n,
                              const chime_stats_t *m, uint32_t answered) {
  int aw = addr_width(sh, n);
  chime_table_stats_t all;
  printf("%-6s %-*s", "SHARD", aw, "ADDRESS");
  table_cells(NULL, table_cols);
  printf(" %8s\n", "STREAMS");
  for (uint32_t i = 0; i < n; i++) {
    if (shard_cells(sh, i, aw))
      continue;
    stats_all_tables(sh[i].stats, &all);
    table_cells(&all, table_cols);
    printf(" %8" PRIu32 "\n", sh[i].stats->nstreams);
  }
  stats_all_tables(m, &all);
  total_cells(answered, n, aw);
  table_cells(&all, table_cols);
  printf(" %8" PRIu32 "\n\n", m->nstreams);
  stats_tables_text(m);
  /* Stream ids are each server's own: the shard tells them apart. */
  printf("\n%-6s %-8s %-16s %-7s", "SHARD", "STREAM", "TABLE", "MODE");
  stream_row(NULL);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; sh[i].stats != NULL && k < sh[i].stats->nstreams;
         k++) {
      const chime_stream_stats_t *s = &sh[i].stats->streams[k];
      printf("%-6" PRIu32 " %-8" PRIu64 " %-16s %-7s", sh[i].info->shard,
             s->stream_id, s->table, mode_name(s->mode));
      stream_row(s);
    }
  if (m->nstreams == 0)
    printf("(no streams)\n");
  printf("\n");
  const chime_stats_t *st = m;
  CHIME_SERVER_STATS_FIELDS(SERVER_LINE)
}

/* Tables, items and bytes summed; the longest pause and duration, as the
 * shards checkpoint at once. */
static void add_checkpoint(chime_checkpoint_result_t *o,
                           const chime_checkpoint_result_t *r) {
  o->tables += r->tables;
  o->items += r->items;
  o->bytes += r->bytes;
  if (r->pause_ns > o->pause_ns)
    o->pause_ns = r->pause_ns;
  if (r->duration_ns > o->duration_ns)
    o->duration_ns = r->duration_ns;
}

#define CKPT_ROW " %6" PRIu32 " %12" PRIu64 " %14" PRIu64 " %9.3f %9.3f  %s\n"

static void checkpoint_shards_text(const shard_t *sh, uint32_t n,
                                   const chime_checkpoint_result_t *sum,
                                   uint32_t answered) {
  int aw = addr_width(sh, n);
  printf("%-6s %-*s %6s %12s %14s %9s %9s  %s\n", "SHARD", aw, "ADDRESS",
         "TABLES", "ITEMS", "BYTES", "SECONDS", "PAUSE_MS", "PATH");
  for (uint32_t i = 0; i < n; i++) {
    const chime_checkpoint_result_t *r = &sh[i].ckpt;
    if (shard_cells(sh, i, aw) == 0)
      printf(CKPT_ROW, r->tables, r->items, r->bytes,
             (double)r->duration_ns / 1e9, (double)r->pause_ns / 1e6, r->path);
  }
  total_cells(answered, n, aw);
  printf(CKPT_ROW, sum->tables, sum->items, sum->bytes,
         (double)sum->duration_ns / 1e9, (double)sum->pause_ns / 1e6, "");
}

/* Marks each shard that is the server of an earlier shard that answered
 * (the same GetInfo instance: dns:///localhost gives 127.0.0.1 and ::1):
 * its row says so, the command is not sent to it again (no second
 * checkpoint) and the totals count that server once, as a sharded
 * client's own calls do. */
static void mark_duplicates(shard_t *sh, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    sh[i].dup = -1;
    for (uint32_t j = 0; sh[i].rc == 0 && j < i && sh[i].dup < 0; j++)
      if (sh[j].rc == 0 && sh[j].dup < 0 && sh[j].info->instance != 0 &&
          sh[j].info->instance == sh[i].info->instance)
        sh[i].dup = (int)j;
  }
}

/* Two servers of one shard number make its keys ambiguous (a sharded
 * client refuses them): each pair is said on stderr; 1 when there was
 * one. */
static int shard_clash(const shard_t *sh, uint32_t n) {
  int found = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < i; j++) {
      if (sh[i].rc || sh[j].rc || sh[i].dup >= 0 || sh[j].dup >= 0 ||
          sh[i].info->shard == 0 || sh[i].info->shard != sh[j].info->shard)
        continue;
      fprintf(stderr,
              "chimectl: %s and %s both say they are shard %" PRIu32
              ": shards need distinct numbers (config shard)\n",
              sh[j].addr, sh[i].addr, sh[i].info->shard);
      found = 1;
    }
  return found;
}

/* cmd on every shard of a sharded client: 0 when every shard answered, 1
 * (after a line on stderr) when one did not, when the shards do not make
 * one service (a table unlike, a shard number twice) or the output
 * failed. */
static int run_sharded(chime_client_t *c, const char *target, const char *cmd,
                       int as_json) {
  int exit_code = 1, differs = 0;
  uint32_t n = chime_client_nshards(c), answered = 0;
  shard_t *sh = NULL;
  chime_server_info_t *mi = calloc(1, sizeof(*mi));
  chime_stats_t *ms = calloc(1, sizeof(*ms));
  chime_checkpoint_result_t mc;
  memset(&mc, 0, sizeof(mc));
  if (n == 0) {
    fprintf(stderr, "chimectl: %s names no shard now\n", target);
    goto cleanup;
  }
  if (!mi || !ms || !(sh = calloc(n, sizeof(*sh)))) {
    fprintf(stderr, "chimectl: out of memory\n");
    goto cleanup;
  }
  for (uint32_t i = 0; i < n; i++) {
    sh[i].client = chime_client_shard(c, i);
    sh[i].addr = chime_client_shard_address(c, i);
    sh[i].cmd = cmd;
  }
  shards_call(sh, n);
  mark_duplicates(sh, n);
  if (strcmp(cmd, "info") != 0) {
    for (uint32_t i = 0; i < n; i++)
      sh[i].phase = 1;
    shards_call(sh, n);
  }
  for (uint32_t i = 0; i < n; i++) {
    if (sh[i].rc)
      continue;
    answered++;
    if (sh[i].dup >= 0)
      continue;
    if ((!strcmp(cmd, "info") &&
         merge_info(mi, &sh[i], answered == 1, &differs)) ||
        (sh[i].stats && merge_stats(ms, sh[i].stats))) {
      fprintf(stderr, "chimectl: out of memory\n");
      goto cleanup;
    }
    add_checkpoint(&mc, &sh[i].ckpt);
  }
  if (as_json) {
    /* The one-server shape, less what only one server has. */
    json_t *total = !strcmp(cmd, "info")    ? info_json(mi)
                    : !strcmp(cmd, "stats") ? stats_json(ms)
                                            : checkpoint_json(&mc);
    const char *own[] = {"shard", "instance", "path"};
    for (size_t k = 0; total != NULL && k < sizeof(own) / sizeof(own[0]); k++)
      (void)json_object_del(total, own[k]); /* -1 where there is none */
    if (print_json(shards_json(sh, n, total)))
      goto cleanup;
  } else if (!strcmp(cmd, "info")) {
    info_shards_text(sh, n, mi, answered);
  } else if (!strcmp(cmd, "stats")) {
    stats_shards_text(sh, n, ms, answered);
  } else {
    checkpoint_shards_text(sh, n, &mc, answered);
  }
  if (answered < n)
    fprintf(stderr,
            "chimectl: %s: %" PRIu32 " of %" PRIu32 " shards did not answer\n",
            cmd, n - answered, n);
  if (shard_clash(sh, n))
    differs = 1;
  exit_code = answered == n && !differs ? 0 : 1;

cleanup:
  for (uint32_t i = 0; sh != NULL && i < n; i++) {
    chime_server_info_free(sh[i].info);
    chime_stats_free(sh[i].stats);
  }
  free(sh);
  chime_server_info_free(mi);
  chime_stats_free(ms);
  return exit_code;
}

/* top's options: 1 when opt is one (value checked: *bad set to the exit
 * status 2 after the error when it is not a number in range), else 0. */
static int top_option(chime__top_opts_t *o, const char *opt, const char *value,
                      int *bad) {
  uint64_t v;
  int iters = !strcmp(opt, "--iterations");
  if (!iters && strcmp(opt, "--interval-ms"))
    return 0;
  if (value == NULL) {
    *bad = chime__cli_unknown_option("chimectl", opt, usage);
  } else if (iters) {
    if (chime__cli_parse_u64(value, UINT32_MAX, &v) || v == 0)
      *bad = chime__cli_bad_value("chimectl", opt, value);
    o->iterations = v;
  } else {
    if (chime__cli_parse_u64(value, CHIME__TOP_MAX_INTERVAL_MS, &v) ||
        v < CHIME__TOP_MIN_INTERVAL_MS)
      *bad = chime__cli_bad_value("chimectl", opt, value);
    o->interval_ms = v;
  }
  return 1;
}

static int run(int argc, char **argv) {
  int as_json = 0, top_opts = 0, bad = 0;
  const char *cmd = NULL, *addr = NULL;
  chime__cli_conn_t conn = {0};
  chime__top_opts_t top = CHIME__TOP_OPTS_INIT;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      as_json = 1;
    } else if (top_option(&top, argv[i], i + 1 < argc ? argv[i + 1] : NULL,
                          &bad)) {
      if (bad)
        return bad;
      top_opts = 1;
      i++;
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
       strcmp(cmd, "checkpoint") && strcmp(cmd, "top"))) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(cmd, "top") ? as_json : top_opts) {
    fprintf(stderr, "chimectl: %s\n",
            !strcmp(cmd, "top")
                ? "top has no --json (chimectl --json stats is its data)"
                : "--iterations and --interval-ms are top's");
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
    fprintf(stderr, "chimectl: %s: %s\n", addr, chime_last_error());
    /* A target that cannot be parsed is a command-line mistake (2), for
     * every command; a server that does not answer comes later (1). */
    exit_code = rc == CHIME_EINVAL ? 2 : 1;
    goto cleanup;
  }
  if (!strcmp(cmd, "top")) {
    exit_code = chime__top_run(c, addr, &top);
    goto cleanup;
  }
  /* A one-server target is its own only shard (chime_client_shard). */
  if (chime_client_shard(c, 0) != c) {
    exit_code = run_sharded(c, addr, cmd, as_json);
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
      if (print_json(checkpoint_json(&r)))
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

int main(int argc, char **argv) {
  if (chime__ctl_is_dataset(argc, argv))
    return chime__ctl_dataset(argc, argv);
  return run(argc, argv);
}
