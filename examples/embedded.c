/* A learner that hosts the replay server itself: chime's service is
 * registered on this process's own grpc_server, remote actors insert over
 * gRPC, and the learner consumes its batches locally through shared memory.
 *
 *   chime-embedded [--listen ADDR] [--config FILE] [--table T]
 *                  [--batches N] [--batch-size B] [--pin-host-memory]
 *   chime-actor --server ADDR --table demo --count 100000     (elsewhere)
 */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime/chime.h"

static grpc_server *make_grpc_server(void) {
  grpc_arg args[3];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = (int)CHIME_MAX_MESSAGE_BYTES;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = (int)CHIME_MAX_MESSAGE_BYTES;
  /* Without this gRPC sets SO_REUSEPORT: a second process could bind the
   * same port and take half the connections. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
  args[2].value.integer = 0;
  grpc_channel_args ca = {3, args};
  return grpc_server_create(&ca, NULL);
}

/* The application's own shutdown of its grpc_server, on a queue of its own:
 * chime's queue belongs to chime's thread. */
static void shutdown_grpc_server(grpc_server *server) {
  grpc_completion_queue *sq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_server_shutdown_and_notify(server, sq, sq);
  grpc_server_cancel_all_calls(server);
  grpc_completion_queue_pluck(sq, sq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_server_destroy(server);
  grpc_completion_queue_shutdown(sq);
  grpc_completion_queue_destroy(sq);
}

static void log_line(chime_log_level_t level, const char *msg, void *arg) {
  (void)arg;
  fprintf(stderr, "chime-embedded: %s: %s\n", chime_log_level_name(level), msg);
}

int main(int argc, char **argv) {
  const char *listen = "127.0.0.1:0";
  const char *table = "demo";
  uint64_t want = 100;
  uint32_t batch_size = 64;
  chime_server_opts_t so = CHIME_SERVER_OPTS_INIT;
  char addr[300];
  int rc = 1;

  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
      listen = argv[++i];
    else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      so.config_path = argv[++i];
    else if (strcmp(argv[i], "--table") == 0 && i + 1 < argc)
      table = argv[++i];
    else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
      want = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--batch-size") == 0 && i + 1 < argc)
      batch_size = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--pin-host-memory") == 0)
      so.pin_host_memory = 1; /* page-lock every ring, or fail at create */
    else {
      fprintf(stderr, "usage: chime-embedded [--listen ADDR] [--config FILE] "
                      "[--table T] [--batches N] [--batch-size B] "
                      "[--pin-host-memory]\n");
      return 2;
    }
  }

  /* The server's warnings (listening beyond loopback without tokens, say)
   * and background failures come through the log hook; without one, the
   * library prints nothing. */
  chime_set_logger(log_line, NULL);
  grpc_init();
  chime_server_t *srv = NULL;
  if (chime_server_create(&srv, &so) != 0) {
    /* With --pin-host-memory: every place the CUDA runtime was looked for. */
    fprintf(stderr, "chime-embedded: %s\n", chime_last_error());
    grpc_shutdown_blocking();
    return 2;
  }
  grpc_server *server = make_grpc_server();
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(server, cq, NULL);
  /* Before grpc_server_start: gRPC takes no new methods after. */
  if (chime_server_register(srv, server, cq) != 0) {
    fprintf(stderr, "chime-embedded: %s\n", chime_last_error());
    goto out;
  }
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(server, listen, creds);
  grpc_server_credentials_release(creds);
  if (port == 0) {
    fprintf(stderr, "chime-embedded: cannot listen on %s\n", listen);
    goto out;
  }
  grpc_server_start(server);
  if (chime_server_start(srv) != 0) {
    fprintf(stderr, "chime-embedded: %s\n", chime_last_error());
    goto out;
  }
  const char *colon = strrchr(listen, ':');
  if (strncmp(listen, "unix:", 5) == 0 || colon == NULL)
    snprintf(addr, sizeof(addr), "%s", listen);
  else
    snprintf(addr, sizeof(addr), "%.*s:%d", (int)(colon - listen), listen,
             port);
  printf("listening on %s\n", addr);
  fflush(stdout);

  /* The learner: a client of its own process, mapping the ring. */
  chime_client_t *client = NULL;
  chime_stream_t *stream = NULL;
  chime_stream_opts_t o = CHIME_STREAM_OPTS_INIT;
  o.batch_size = batch_size;
  o.mode = CHIME_MODE_SHM;
  if (chime_client_create(&client, addr, NULL) != 0 ||
      chime_stream_open(&stream, client, table, &o) != 0) {
    fprintf(stderr, "chime-embedded: open: %s\n", chime_last_error());
    chime_client_destroy(client);
    goto stop;
  }
  /* What the server page-locked for this stream (docs/pinning.md). */
  uint64_t pinned = 0;
  chime_server_info_t *info = NULL;
  if (chime_client_info(client, &info) == 0)
    pinned = info->pinned_bytes;
  chime_server_info_free(info);
  uint64_t got = 0, samples = 0, first = 0, last = 0;
  while (got < want) {
    chime_batch_t b;
    int r = chime_stream_next(stream, &b, 60000);
    if (r != 0) {
      fprintf(stderr, "chime-embedded: next: %s\n", chime_last_error());
      break;
    }
    if (got == 0)
      first = b.info[0].key;
    last = b.info[b.count - 1].key;
    samples += b.count;
    got++;
    if (chime_stream_release(stream, &b) != 0) {
      fprintf(stderr, "chime-embedded: release: %s\n", chime_last_error());
      break;
    }
  }
  printf("{\"batches\":%" PRIu64 ",\"samples\":%" PRIu64
         ",\"first_key\":%" PRIu64 ",\"last_key\":%" PRIu64
         ",\"mode\":\"%s\",\"pinned_bytes\":%" PRIu64 "}\n",
         got, samples, first, last, chime_mode_name(chime_stream_mode(stream)),
         pinned);
  rc = got == want ? 0 : 1;
  chime_stream_close(stream);
  chime_client_destroy(client);
stop:
  chime_server_stop(srv);
out:
  shutdown_grpc_server(server);
  grpc_completion_queue_shutdown(cq);
  chime_server_destroy(srv); /* drains cq on chime's thread */
  grpc_completion_queue_destroy(cq);
  grpc_shutdown_blocking();
  return rc;
}
