/* chimed's configuration: the JSON file, the built-in default, and checks. */
#ifndef CHIME_SERVER_CONFIG_H
#define CHIME_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "chime/spec.h"
#include "replay/table_config.h"

#define CHIME__MAX_TABLES 64
#define CHIME__MAX_UIDS 64
#define CHIME__MAX_ADDR 256

/* Who may call what (auth.tokens): actor: Insert and GetInfo; learner:
 * Subscribe, MutatePriorities and GetInfo; admin: everything. */
typedef enum {
  CHIME__ROLE_ACTOR = 1,
  CHIME__ROLE_LEARNER = 2,
  CHIME__ROLE_ADMIN = 3,
} chime__role_t;

#define CHIME__MAX_TOKENS 64
#define CHIME__TOKEN_MAX 256 /* bytes of one token */

typedef struct {
  char token[CHIME__TOKEN_MAX + 1]; /* read from file at start */
  uint32_t len;
  chime__role_t role;
} chime__token_config_t;

#define CHIME__MAX_PATH 1024

/* "tls": PEM files read when chime_server_listen starts serving. cert and
 * key together turn TLS on; client_ca also makes it mutual (every client
 * must present a certificate signed by it). "" when absent. */
typedef struct {
  char cert[CHIME__MAX_PATH];
  char key[CHIME__MAX_PATH];
  char client_ca[CHIME__MAX_PATH];
} chime__tls_config_t;

/* "checkpoint": where checkpoints go, every how many seconds (0: only on
 * request), how many complete ones stay. dir "" : none configured. */
typedef struct {
  char dir[CHIME__MAX_PATH];
  uint32_t interval_s;
  uint32_t keep;
} chime__checkpoint_config_t;

typedef struct {
  char listen[CHIME__MAX_ADDR];
  char metrics[CHIME__MAX_ADDR]; /* Prometheus endpoint host:port, "": off */
  /* "@auto": abstract socket with a random name; "@name": abstract; else a
   * filesystem path, unlinked at stop. */
  char handoff_socket[108];
  uint32_t handoff_expires_ms;
  uint32_t nuids;
  uint32_t allowed_uids[CHIME__MAX_UIDS];
  uint64_t stream_ring_bytes;
  uint64_t total_ring_bytes;
  uint64_t staged_insert_bytes;
  /* chime_server_listen's listener (see server/acceptor.h). */
  uint32_t max_connections;
  /* Calls open at once: on one connection (HTTP/2's
   * SETTINGS_MAX_CONCURRENT_STREAMS, chime_server_listen only: a client
   * waits for one to end), and in all (a call past it, health checks
   * excepted, ends RESOURCE_EXHAUSTED at once). Each costs about 12 KiB. */
  uint32_t max_calls_per_connection;
  uint32_t max_calls;
  /* gRPC's HTTP/2 BDP probe on chime_server_listen's connections (off by
   * default: then gRPC takes in at most 64 KiB of an Insert call chime has
   * not asked to read, so the staging budget bounds what a burst of
   * calls costs; docs/operations.md). */
  int bdp_probe;
  uint32_t handshake_timeout_ms;
  /* The longest wait between retransmissions on an accepted TCP
   * connection (TCP_RTO_MAX_MS, Linux 6.15+; 0: the kernel's, 120 s), so
   * that a stream's data moves again soon after a link that was down
   * comes back (docs/remote.md, "A link that drops"). */
  uint32_t tcp_rto_max_ms;
  /* HTTP/2 keepalive pings: a peer that does not answer one within the
   * timeout is dropped with its calls (0: no pings). */
  uint32_t keepalive_time_ms;
  uint32_t keepalive_timeout_ms;
  /* gRPC's connection age: a connection older than age_ms (0: no limit)
   * is sent GOAWAY, so its client's channel connects anew (and resolves
   * its target again); calls open on it may go on for grace_ms more (0:
   * for as long as they last) and are then cut. */
  uint32_t max_connection_age_ms;
  uint32_t max_connection_age_grace_ms;
  /* The shard every key of this server carries (common/key.h): 1..65535,
   * or 0, an unsharded server. Copied into each table's config. */
  uint32_t shard;
  uint32_t sampler_threads; /* the pool filling every ring; 0: CPUs */
  uint32_t ntokens;         /* 0: no authentication */
  chime__token_config_t tokens[CHIME__MAX_TOKENS];
  chime__tls_config_t tls; /* tls.cert[0] == 0: plaintext */
  chime__checkpoint_config_t checkpoint;
  int pin_host_memory;
  uint32_t ntables;
  chime__table_config_t tables[CHIME__MAX_TABLES];
} chime__config_t;

/* Defaults and limits; the table list of the default is filled by
 * chime__config_default(). */
#define CHIME__DEFAULT_LISTEN "127.0.0.1:50051"
#define CHIME__DEFAULT_STREAM_RING_BYTES (UINT64_C(256) << 20)
#define CHIME__DEFAULT_TOTAL_RING_BYTES (UINT64_C(1) << 30)
/* Insert requests copied out of gRPC's buffers to wait for room. */
#define CHIME__DEFAULT_STAGED_INSERT_BYTES (UINT64_C(256) << 20)
#define CHIME__DEFAULT_EXPIRES_MS 5000u
#define CHIME__DEFAULT_MAX_CONNECTIONS 4096u
#define CHIME__DEFAULT_MAX_CALLS_PER_CONNECTION 1024u
#define CHIME__DEFAULT_MAX_CALLS 65536u
#define CHIME__DEFAULT_HANDSHAKE_TIMEOUT_MS 10000u
#define CHIME__DEFAULT_TCP_RTO_MAX_MS 1000u
/* Keepalive: CHIME_KEEPALIVE_TIME_MS, CHIME_KEEPALIVE_TIMEOUT_MS (chime.h),
 * the same as a client's. */

/* What a bad shard is told, "%s" naming where it came from ("'shard'",
 * "--shard"). */
#define CHIME__SHARD_RANGE_ERROR                                               \
  "%s: must be an integer 1..65535 (leave it out for an unsharded server; "    \
  "a StatefulSet's pod ordinal counts from 0: give ordinal + 1)"

/* The built-in configuration: table demo on 127.0.0.1:50051. */
int chime__config_default(chime__config_t *cfg, char *err, size_t errlen);
/* Parses JSON text. CHIME_EINVAL with err naming the key or table. */
int chime__config_parse(chime__config_t *cfg, const char *json, char *err,
                        size_t errlen);
/* Reads and parses a file. */
int chime__config_load(chime__config_t *cfg, const char *path, char *err,
                       size_t errlen);

/* The i-th server key's name (docs/operations.md's table of them lists
 * the same, a key with subkeys as `key.sub`), NULL past the last. */
const char *chime__config_server_key(uint32_t i);

#endif
