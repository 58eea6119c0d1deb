/* chime-bench through an emulated link (chime-link NAME, docs/remote.md):
 * the bench process, its learners and the TCP baseline's reader in the
 * link's learner namespace NAME-l; chimed, the grpc_plain server and the
 * TCP baseline's sender in its server namespace NAME-s. Without a link,
 * everything on 127.0.0.1 as before. */
#ifndef CHIME_BENCH_NETNS_H
#define CHIME_BENCH_NETNS_H

/* Moves this thread (call it first, before any other thread or gRPC
 * starts: threads made later inherit it) into NAME-l. 0 or CHIME_ESYS
 * (said on stderr). */
int chime__bench_link_enter(const char *name);

/* The link's server namespace ("NAME-s"), NULL without a link. */
const char *chime__bench_link_server_ns(void);

/* The address servers listen on and are reached at: 127.0.0.1, or the
 * link's server end. */
const char *chime__bench_server_host(void);

/* A socket(AF_INET, type | SOCK_CLOEXEC) made in the server's namespace
 * (a socket stays in the namespace it was made in); -1 with errno. */
int chime__bench_server_socket(int type);

#endif
