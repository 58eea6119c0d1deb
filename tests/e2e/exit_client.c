/* A program that uses the client library as an application does and ends by
 * returning from main: create a client, GetInfo, insert with a writer, take
 * a batch from a stream, close everything, destroy the client, return 0.
 * exit() then runs the C++ destructors of gRPC's static objects, which must
 * find no thread of gRPC's still running (test_e2e_exit runs it many
 * times). Usage: exit_client ADDRESS TABLE shm|stream|unreachable; with
 * unreachable, ADDRESS names a shard that refuses connections and the
 * program only asks it for GetInfo (which fails) before it destroys the
 * client: the channel to it is then still being torn down on gRPC's
 * threads. Exits 1 with a line on stderr when a call fails, 3 when gRPC
 * is still initialized after chime_client_destroy (the library started
 * it, so its end was the library's to wait for). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <grpc/grpc.h>

#include "chime/chime.h"

#define BATCH 4

static int fail(const char *what) {
  fprintf(stderr, "exit_client: %s: %s\n", what, chime_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr,
            "usage: exit_client ADDRESS TABLE shm|stream|unreachable\n");
    return 2;
  }
  const char *table = argv[2];
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  chime_writer_t *w = NULL;
  chime_stream_t *s = NULL;
  int rc = 1;
  if (chime_client_create(&c, argv[1], NULL) != 0)
    return fail("create");
  if (strcmp(argv[3], "unreachable") == 0) {
    if (chime_client_info(c, &info) != CHIME_EUNAVAILABLE) {
      rc = fail("info of an unreachable shard");
      goto out;
    }
    rc = 0;
    goto out;
  }
  if (chime_client_info(c, &info) != 0) {
    rc = fail("info");
    goto out;
  }
  uint8_t sample[64];
  memset(sample, 7, sizeof(sample));
  if (chime_writer_open(&w, c, table, NULL) != 0) {
    rc = fail("writer_open");
    goto out;
  }
  for (int i = 0; i < BATCH; i++)
    if (chime_writer_append(w, sample, sizeof(sample), 1.0) != 0) {
      rc = fail("append");
      goto out;
    }
  int wrc = chime_writer_close(w);
  w = NULL;
  if (wrc != 0) {
    rc = fail("writer_close");
    goto out;
  }
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.slots = 2;
  so.mode = strcmp(argv[3], "shm") == 0 ? CHIME_MODE_SHM : CHIME_MODE_STREAM;
  if (chime_stream_open(&s, c, table, &so) != 0) {
    rc = fail("stream_open");
    goto out;
  }
  chime_batch_t b;
  if (chime_stream_next(s, &b, 10000) != 0) {
    rc = fail("next");
    goto out;
  }
  if (b.count != BATCH || b.leaf[0].bytes != BATCH * sizeof(sample) ||
      ((const uint8_t *)b.leaf[0].data)[0] != 7) {
    fprintf(stderr, "exit_client: a batch unlike what was inserted\n");
    goto out;
  }
  if (chime_stream_release(s, &b) != 0) {
    rc = fail("release");
    goto out;
  }
  rc = 0;
out:
  chime_stream_close(s);
  if (w != NULL && chime_writer_close(w) != 0)
    rc = 1;
  chime_server_info_free(info);
  chime_client_destroy(c);
  if (grpc_is_initialized()) {
    fprintf(stderr, "exit_client: gRPC is still initialized after "
                    "chime_client_destroy\n");
    return 3;
  }
  return rc;
}
