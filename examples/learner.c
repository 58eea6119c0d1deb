/* chime-learner: reads N batches and checks every byte against the pattern.
 *
 *   chime-learner --server TARGET --table T --batch-size B --batches N
 *                 [--mode auto|shm|stream] [--slots S] [--timeout-ms MS]
 *                 [--ids-out FILE] [--pin] [--until-idle MS]
 *
 * TARGET is any client target (chime_client_create), one server or many
 * shards, passed through as given.
 *
 * With --until-idle it also stops, successfully, once no batch came for MS
 * milliseconds after the first one, or for --timeout-ms before the first
 * (several learners sharing a fifo table cannot know their share in advance,
 * and one may get none); --batches 0 then means no limit.
 *
 * The last line of stdout is JSON: {"mode":"shm","fallback_reason":null,
 * "batches":N,"verified":true,"gbps":...}. Exits 1 on any mismatch. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"
#include "cli.h"
#include "pattern.h"

static void usage(FILE *f) {
  fprintf(f, "usage: chime-learner --server TARGET --table T --batch-size B "
             "--batches N\n"
             "                     [--mode auto|shm|stream] [--slots S] "
             "[--timeout-ms MS]\n"
             "                     [--ids-out FILE] [--pin] [--until-idle MS]\n"
             "                     " CHIME__CLI_CONN_USAGE
             "\n" CHIME__CLI_TARGET_HELP);
}

/* A JSON string literal, or null. */
static void print_json_str(const char *s) {
  if (!s) {
    fputs("null", stdout);
    return;
  }
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch < 0x20)
      printf("\\u%04x", ch);
    else
      putchar(ch);
  }
  putchar('"');
}

static int run(int argc, char **argv) {
  const char *server = NULL, *table = "demo", *ids_out = NULL;
  chime__cli_conn_t conn = {0};
  uint64_t batch_size = 0, batches = 0, slots = 8, timeout_ms = 30000;
  uint64_t idle_ms = 0;
  int have_batches = 0;
  chime_mode_t mode = CHIME_MODE_AUTO;
  int pin = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--pin")) {
      pin = 1;
      continue;
    } else if (chime__cli_conn_option(&conn, a, v)) {
    } else if (!strcmp(a, "--server") && v) {
      server = v;
    } else if (!strcmp(a, "--table") && v) {
      table = v;
    } else if (!strcmp(a, "--ids-out") && v) {
      ids_out = v;
    } else if (!strcmp(a, "--batch-size") && v) {
      bad = chime__cli_parse_u64(v, CHIME_RING_MAX_BATCH, &batch_size) ||
            !batch_size;
    } else if (!strcmp(a, "--batches") && v) {
      bad = chime__cli_parse_u64(v, UINT64_MAX, &batches);
      have_batches = 1;
    } else if (!strcmp(a, "--until-idle") && v) {
      bad = chime__cli_parse_u64(v, INT32_MAX, &idle_ms) || !idle_ms;
    } else if (!strcmp(a, "--slots") && v) {
      bad = chime__cli_parse_u64(v, CHIME_RING_MAX_SLOTS, &slots) || slots < 2;
    } else if (!strcmp(a, "--timeout-ms") && v) {
      bad = chime__cli_parse_u64(v, INT32_MAX, &timeout_ms);
    } else if (!strcmp(a, "--mode") && v) {
      if (!strcmp(v, "auto"))
        mode = CHIME_MODE_AUTO;
      else if (!strcmp(v, "shm"))
        mode = CHIME_MODE_SHM;
      else if (!strcmp(v, "stream"))
        mode = CHIME_MODE_STREAM;
      else
        bad = 1;
    } else {
      return chime__cli_unknown_option("chime-learner", a, usage);
    }
    if (bad)
      return chime__cli_bad_value("chime-learner", a, v);
    i++;
  }
  if (!server || !batch_size || !have_batches || (!batches && !idle_ms)) {
    usage(stderr);
    return 2;
  }

  int rc = 0, verified = 0, exit_code = 3;
  uint64_t done = 0, bytes = 0;
  double seconds = 0;
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  uint64_t *ids = NULL;
  FILE *idf = NULL;
  char err[20000] = ""; /* "open: " + a pinning error (under 18 KiB) */

  if (ids_out && !(idf = fopen(ids_out, "we"))) {
    snprintf(err, sizeof(err), "cannot write %s: %s", ids_out, strerror(errno));
    goto cleanup;
  }
  ids = calloc(batch_size, sizeof(*ids));
  if (!ids) {
    snprintf(err, sizeof(err), "out of memory");
    goto cleanup;
  }
  rc = chime__cli_client("chime-learner", server, &conn, &c);
  if (rc == 2) {
    free(ids);
    return 2;
  }
  if (rc) {
    snprintf(err, sizeof(err), "%s: %s", server, chime_strerror(rc));
    goto cleanup;
  }
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = (uint32_t)batch_size;
  so.slots = (uint32_t)slots;
  so.mode = mode;
  so.pin_host_memory = pin;
  rc = chime_stream_open(&s, c, table, &so);
  if (rc) {
    snprintf(err, sizeof(err), "open: %s", chime_last_error());
    goto cleanup;
  }
  verified = 1;
  double t0 = 0, t1 = 0;
  while (batches == 0 || done < batches) {
    chime_batch_t b;
    int wait = (int)(done && idle_ms ? idle_ms : timeout_ms);
    rc = chime_stream_next(s, &b, wait);
    if (rc == CHIME_ETIMEDOUT && idle_ms)
      break; /* idle: the table has nothing more for us */
    if (rc) {
      snprintf(err, sizeof(err), "next after %" PRIu64 " batches: %s (%s)",
               done, chime_err_name(rc), chime_last_error());
      verified = 0;
      break;
    }
    if (done == 0)
      t0 = chime__cli_now_s();
    rc = chime__pattern_verify(&b, ids, err, sizeof(err));
    if (rc) {
      verified = 0;
      exit_code = 1;
      break; /* the batch goes back when the stream closes */
    }
    for (uint32_t l = 0; l < b.nleaves; l++)
      bytes += b.leaf[l].bytes;
    if (idf) {
      /* Written out before the release: a learner killed at any point has
       * recorded every batch it gave back as read (scripts/soak.sh counts
       * on it). */
      for (uint32_t i = 0; i < b.count; i++)
        fprintf(idf, "%" PRIu64 "\n", ids[i]);
      if (fflush(idf) != 0) {
        snprintf(err, sizeof(err), "writing %s failed", ids_out);
        verified = 0;
        break;
      }
    }
    rc = chime_stream_release(s, &b);
    if (rc) {
      snprintf(err, sizeof(err), "release: %s", chime_strerror(rc));
      verified = 0;
      break;
    }
    done++;
    t1 = chime__cli_now_s();
  }
  /* From the first batch to the last release: waits for actors and the idle
   * tail are not the learner's throughput. */
  seconds = t1 - t0;
  if (verified && (done == batches || (idle_ms && rc == CHIME_ETIMEDOUT)))
    exit_code = 0;
  else if (exit_code != 1)
    exit_code = 1;

cleanup:
  if (idf && fclose(idf) != 0 && exit_code == 0) {
    snprintf(err, sizeof(err), "writing %s failed", ids_out);
    exit_code = 3;
  }
  if (err[0])
    fprintf(stderr, "chime-learner: %s\n", err);
  printf("{\"mode\":");
  print_json_str(s ? chime_mode_name(chime_stream_mode(s)) : NULL);
  printf(",\"fallback_reason\":");
  print_json_str(s ? chime_stream_fallback_reason(s) : NULL);
  printf(",\"batches\":%" PRIu64 ",\"verified\":%s,\"gbps\":%.3f", done,
         exit_code == 0 ? "true" : "false",
         seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0);
  if (exit_code != 0) {
    printf(",\"error\":");
    print_json_str(err);
  }
  printf("}\n");
  fflush(stdout);
  chime_stream_close(s);
  chime_client_destroy(c);
  free(ids);
  return exit_code;
}

int main(int argc, char **argv) {
  return run(argc, argv);
}
