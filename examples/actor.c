/* chime-actor: inserts N deterministic pattern samples into a table.
 *
 *   chime-actor --server TARGET --table T --count N [--seed S]
 *
 * TARGET is any client target (chime_client_create): one server or many
 * shards, the writer then bound to one of them.
 *
 * The last line of stdout is JSON: {"inserted":N,"samples_per_s":...}.
 * Into a sequence table the samples are steps of one episode. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "cli.h"
#include "pattern.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: chime-actor --server TARGET --table T --count N [--seed S]\n"
          "                   [--batch-samples B] [--inflight M]\n"
          "                   " CHIME__CLI_CONN_USAGE "\n");
  fprintf(f, "Inserts N pattern samples with ids (S << 40) | i, i < N.\n");
  fprintf(f, CHIME__CLI_TARGET_HELP
          "Over shards the writer binds to one shard, and moves to another\n"
          "only when its shard stays unreachable.\n");
}

static int run(int argc, char **argv) {
  const char *server = NULL, *table = "demo";
  chime__cli_conn_t conn = {0};
  uint64_t count = 0, seed = 1, batch = 256, inflight = 8;
  int have_count = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--server") && v) {
      server = v;
    } else if (chime__cli_conn_option(&conn, a, v)) {
    } else if (!strcmp(a, "--table") && v) {
      table = v;
    } else if (!strcmp(a, "--count") && v) {
      bad = chime__cli_parse_u64(v, CHIME__PATTERN_MAX_INDEX + 1, &count);
      have_count = 1;
    } else if (!strcmp(a, "--seed") && v) {
      bad = chime__cli_parse_u64(v, CHIME__PATTERN_MAX_SEED, &seed);
    } else if (!strcmp(a, "--batch-samples") && v) {
      bad = chime__cli_parse_u64(v, UINT32_MAX, &batch) || batch == 0;
    } else if (!strcmp(a, "--inflight") && v) {
      bad = chime__cli_parse_u64(v, 1024, &inflight) || inflight == 0;
    } else {
      return chime__cli_unknown_option("chime-actor", a, usage);
    }
    if (bad)
      return chime__cli_bad_value("chime-actor", a, v);
    i++;
  }
  if (!server || !have_count) {
    usage(stderr);
    return 2;
  }

  int rc = 0, exit_code = 3;
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  chime_writer_t *w = NULL;
  uint8_t *sample = NULL;
  char err[512];
  const chime_spec_t *spec = NULL;

  rc = chime__cli_client("chime-actor", server, &conn, &c);
  if (rc == 2)
    return 2;
  if (rc) {
    fprintf(stderr, "chime-actor: %s: %s\n", server, chime_strerror(rc));
    goto cleanup;
  }
  rc = chime_client_info(c, &info);
  if (rc) {
    fprintf(stderr, "chime-actor: GetInfo from %s: %s\n", server,
            chime_last_error());
    goto cleanup;
  }
  for (uint32_t t = 0; t < info->ntables; t++)
    if (!strcmp(info->tables[t].name, table)) /* a sequence table: steps */
      spec = info->tables[t].sequence_length > 0 ? &info->tables[t].step_spec
                                                 : &info->tables[t].spec;
  if (!spec) {
    fprintf(stderr, "chime-actor: table '%s' not found on %s\n", table, server);
    goto cleanup;
  }
  if (chime__pattern_check_spec(spec, err, sizeof(err))) {
    fprintf(stderr, "chime-actor: %s\n", err);
    goto cleanup;
  }
  size_t sb = (size_t)chime_spec_sample_bytes(spec);
  sample = malloc(sb);
  if (!sample)
    goto cleanup;
  chime_writer_opts_t wo = CHIME_WRITER_OPTS_INIT;
  wo.max_batch_samples = (uint32_t)batch;
  wo.max_inflight = (uint32_t)inflight;
  if (sb * batch > wo.max_batch_bytes)
    wo.max_batch_bytes = sb * batch;
  rc = chime_writer_open(&w, c, table, &wo);
  if (rc) {
    fprintf(stderr, "chime-actor: %s\n", chime_last_error());
    goto cleanup;
  }
  double t0 = chime__cli_now_s();
  for (uint64_t i = 0; i < count; i++) {
    chime__pattern_fill(spec, chime__pattern_id(seed, i), sample);
    rc = chime_writer_append(w, sample, sb, 1.0);
    if (rc) {
      fprintf(stderr, "chime-actor: sample %" PRIu64 ": %s\n", i,
              chime_last_error());
      goto cleanup;
    }
  }
  rc = chime_writer_flush(w);
  if (rc) {
    fprintf(stderr, "chime-actor: flush: %s\n", chime_last_error());
    goto cleanup;
  }
  double dt = chime__cli_now_s() - t0;
  uint64_t acked = chime_writer_acked(w);
  rc = chime_writer_close(w);
  w = NULL;
  if (rc) {
    fprintf(stderr, "chime-actor: close: %s\n", chime_strerror(rc));
    goto cleanup;
  }
  printf("{\"inserted\":%" PRIu64 ",\"samples_per_s\":%.0f}\n", acked,
         dt > 0 ? (double)acked / dt : 0.0);
  fflush(stdout);
  exit_code = acked == count ? 0 : 1;

cleanup:
  /* Close flushes: when that fails, samples were lost. */
  if (w && chime_writer_close(w) != 0 && exit_code == 0)
    exit_code = 1;
  free(sample);
  chime_server_info_free(info);
  chime_client_destroy(c);
  return exit_code;
}

int main(int argc, char **argv) {
  return run(argc, argv);
}
