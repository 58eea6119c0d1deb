/* chime client API, and the embedded server.
 *
 * A learner or actor connects with chime_client_create(). Actors insert with a
 * writer; learners open a stream and loop next/release. The same calls work
 * whether the stream maps the server's ring (shm, zero copy) or receives copies
 * over gRPC (stream mode).
 *
 *   chime_client_t *c;
 *   chime_client_create(&c, "127.0.0.1:50051", NULL);
 *   chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
 *   so.batch_size = 256;
 *   chime_stream_t *s;
 *   chime_stream_open(&s, c, "demo", &so);
 *   chime_batch_t b;
 *   while (chime_stream_next(s, &b, 1000) == 0) {
 *     const float *obs = b.leaf[0].data;   // [256, 64] floats, in place
 *     ...
 *     chime_stream_release(s, &b);
 *   }
 *   chime_stream_close(s);
 *   chime_client_destroy(c);
 *
 * The API's convention (1.0; every public call in include/chime keeps it):
 *
 *   - Names: chime_<object>_<verb> for a call on an object (the object's
 *     handle first: chime_stream_next(stream, ...)); a getter is named for
 *     what it returns, with no get_ (chime_stream_stats, chime_ring_layout,
 *     chime_client_info); a type is chime_<name>_t, its constants
 *     CHIME_<NAME>_*. Every enum is a typed chime_*_t, in structs too.
 *   - Errors: one channel. A fallible call returns 0 or a negative CHIME_E*
 *     code (chime/errors.h; never errno) and is CHIME_NODISCARD; the
 *     sentence about a failure is chime_last_error(), read on the thread
 *     that made the call (each thread has its own, as errno). The ring and
 *     spec calls too: no call takes an error buffer.
 *   - Arguments: a constructor (chime_client_create, chime_writer_open,
 *     chime_stream_open, chime_server_create, chime_ring_attach; and the
 *     calls that make a value from inputs alone, chime_spec_parse,
 *     chime_ring_layout_compute) returns what it makes through its first
 *     parameter. Every other call takes its object first, then its inputs,
 *     then the outputs it fills (chime_client_info(client, &info)). An
 *     array comes before its count (keys, priorities, n), a buffer before
 *     its length. A wait's timeout_ms alone comes after the output, last
 *     of all, as poll() has it (chime_stream_next(stream, &batch,
 *     timeout_ms)).
 *   - Sentinels: a call's timeout_ms < 0 waits as long as it takes, 0
 *     polls. In an options struct 0 means the field's default (a zeroed
 *     number is never an error and never "nothing"); -1 is used only where
 *     0 is itself a value (a device ordinal; "as configured" for a server
 *     override whose 0 means off); a negative duration is CHIME_EINVAL
 *     unless its field gives it a meaning (keepalive_time_ms: pings off;
 *     reconnect_timeout_ms: no reconnecting). Options structs start from their
 *     CHIME_*_OPTS_INIT (designated, so new fields keep their defaults);
 *     a NULL options pointer means exactly those defaults. Counts and
 *     sizes are unsigned; flags are int, 0 or 1.
 *   - Ownership: what a call returns through a pointer is the caller's to
 *     free with the matching chime_*_free / _destroy / _close (each
 *     NULL-safe); a const pointer a getter returns is borrowed, valid for
 *     the object's life or as its comment says.
 *   - Output: the library prints nothing; what no call returns goes to
 *     the log hook (chime_set_logger, chime/errors.h).
 *
 * Thread safety: a client may be shared by threads (each writer and stream is
 * used by one thread at a time). A stream's next and release must be called
 * from one thread at a time; batches may be released in any order.
 *
 * fork(): a client, writer or stream belongs to the process that made it. In
 * a child of fork() every call on one it inherited fails at once with
 * CHIME_ENOTSUP (the detail says so); destroying or closing it frees the
 * child's copy and leaves the parent's connection, ring and leases alone.
 * The child makes its own client, which works in every mode, and the
 * parent's objects are untouched. For that the library turns on gRPC's fork
 * support when it starts gRPC in the process (GRPC_ENABLE_FORK_SUPPORT=1,
 * GRPC_POLL_STRATEGY=poll, unless the application set them; gRPC 1.51's
 * epoll1 poller cannot fork) and handles fork() with pthread_atfork (a fork
 * waits for chime's threads to step out of gRPC: at most about 50 ms). If
 * the application set either variable otherwise, or started gRPC first
 * without them, chime_client_create in a child returns CHIME_ENOTSUP. The
 * poll poller measured level with epoll1 for inserts and stream-mode
 * batches (docs/python.md, fork).
 */
#ifndef CHIME_CHIME_H
#define CHIME_CHIME_H

#include <stddef.h>
#include <stdint.h>

#include "chime/errors.h"
#include "chime/export.h"
#include "chime/spec.h"
#include "chime/stats.h"
#include "chime/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- client */

typedef struct chime_client_s chime_client_t;

/* How a stream reaches its batches: the server's ring mapped (shm, same
 * host) or copies over gRPC (stream); auto picks shm when it can. */
typedef enum {
  CHIME_MODE_AUTO = 0,
  CHIME_MODE_SHM = 1,
  CHIME_MODE_STREAM = 2,
} chime_mode_t;

/* Defaults of both ends: chimed's keepalive (its config's keepalive_*)
 * and a client's; and the largest gRPC message chimed sends or receives,
 * a client's default max_message_bytes. */
#define CHIME_KEEPALIVE_TIME_MS 20000
#define CHIME_KEEPALIVE_TIMEOUT_MS 10000
#define CHIME_MAX_MESSAGE_BYTES (64u << 20)

typedef struct {
  /* Zeros are the defaults; a negative duration is CHIME_EINVAL but for
   * keepalive_time_ms (pings off). */
  int timeout_ms;           /* per unary call; default 5000 */
  size_t max_message_bytes; /* gRPC send/receive limit; default 64 MiB */
  /* HTTP/2 keepalive: a server that does not answer a ping within
   * keepalive_timeout_ms is treated as gone (streams and writers see
   * CHIME_EDISCONNECTED) instead of hanging. 0 means the default
   * (CHIME_KEEPALIVE_TIME_MS, CHIME_KEEPALIVE_TIMEOUT_MS); a negative
   * keepalive_time_ms turns pings off. */
  int keepalive_time_ms;
  int keepalive_timeout_ms;
  /* Sent with every call as `authorization: Bearer <token>` when not NULL
   * (copied at create): a server with auth.tokens configured refuses calls
   * without a known token (CHIME_EAUTH) and calls its role does not allow
   * (CHIME_EPERM). 1..256 printable ASCII bytes, no spaces. */
  const char *token;
  /* TLS, with PEM files read at create (a file that cannot be read, or
   * holds no PEM block, fails it with CHIME_EINVAL). The channel is TLS
   * when tls_ca or tls_cert is set, else plaintext. tls_ca: the server's
   * certificate must chain to these CAs (NULL: gRPC's default roots).
   * tls_cert + tls_key (both or neither): this client's certificate and
   * key, for a server that requires one (mutual TLS). tls_server_name: the
   * name checked against the server's certificate when it is not the
   * address's host (e.g. an IP address with a certificate for a DNS name).
   * A TLS failure (an unknown CA, a refused certificate, a plaintext
   * server) shows up as CHIME_EUNAVAILABLE from the first call. */
  const char *tls_ca;
  const char *tls_cert;
  const char *tls_key;
  const char *tls_server_name;
  /* A dns: target (below) is resolved again this often, and at once when
   * a shard fails; 0: CHIME_RESOLVE_INTERVAL_MS. */
  int resolve_interval_ms;
} chime_client_opts_t;
#define CHIME_RESOLVE_INTERVAL_MS 10000
#define CHIME_CLIENT_OPTS_INIT                                                 \
  {                                                                            \
    .timeout_ms = 5000, .max_message_bytes = CHIME_MAX_MESSAGE_BYTES,          \
    .keepalive_time_ms = 0, .keepalive_timeout_ms = 0, .token = NULL,          \
    .tls_ca = NULL, .tls_cert = NULL, .tls_key = NULL,                         \
    .tls_server_name = NULL, .resolve_interval_ms = 0                          \
  }

/* Connects to "host:port" or "unix:/path" (any one-server gRPC target), or
 * to many shards of one replay service (docs/scaling.md):
 *   - a comma-separated list: "10.0.0.1:7001,10.0.0.2:7001";
 *   - gRPC's ipv4:/ipv6: lists: "ipv4:10.0.0.1:7001,10.0.0.2:7001";
 *   - "dns:///name:port": every address the name resolves to (a Kubernetes
 *     headless Service gives one per pod), resolved again every
 *     resolve_interval_ms and when a shard fails, so shards that come and
 *     go are followed without a new client.
 * A sharded client keeps a one-server client per shard
 * (chime_client_shard); its tables are the union of the shards' tables
 * (the same name and spec on each): writers bind to one shard each,
 * streams sample the union, MutatePriorities goes to each key's shard,
 * info and stats are sums over the shards. Calls the shards' servers
 * must each answer fail with the first shard's error, naming it.
 * Calls gRPC's grpc_init(). The
 * connection is made lazily: an unreachable server shows up as
 * CHIME_EUNAVAILABLE from the first call; once a server this client reached
 * is gone (stopped, killed, its connection lost), unary calls return
 * CHIME_EDISCONNECTED, as streams and writers do. Every address is checked
 * first: a port must be a number in 1..65535 and given, an ipv4:/ipv6:
 * or [bracketed] literal must parse, a Unix path must be 1..107 bytes;
 * CHIME_EINVAL names the target and why (docs/scaling.md). Each client has a
 * connection of its own. opts may be NULL (defaults). CHIME_ENOTSUP in a
 * child of fork() that cannot use gRPC (see fork() above). */
CHIME_EXTERN CHIME_NODISCARD int
chime_client_create(chime_client_t **out, const char *address,
                    const chime_client_opts_t *opts);
/* Close every writer and stream of the client first. Calls grpc_shutdown().
 * When that ends chime's use of a gRPC that chime started, destroy waits
 * until gRPC has wound down (a channel to an unreachable shard is torn
 * down on gRPC's threads: about a second), so a program may return from
 * main() right after. An application that started gRPC itself ends it
 * with its own last grpc_shutdown(). */
CHIME_EXTERN void chime_client_destroy(chime_client_t *client); /* NULL-safe */

/* Shards the client follows now: 1 for a one-server target; for a sharded
 * one every address it has named so far (a dns: address that stopped
 * resolving is still counted, and its client kept, until destroy). */
CHIME_EXTERN uint32_t chime_client_nshards(chime_client_t *client);
/* Shard i's own one-server client (i < chime_client_nshards; NULL past
 * it), for a call on one shard (chimectl's per-shard rows, a checkpoint of
 * one shard). The client itself for a one-server target. Owned by client:
 * valid until it is destroyed; never destroy it. */
CHIME_EXTERN chime_client_t *chime_client_shard(chime_client_t *client,
                                                uint32_t i);
/* Shard i's address as the client uses it ("ipv4:10.0.0.1:7001"); NULL
 * past the end. */
CHIME_EXTERN const char *chime_client_shard_address(chime_client_t *client,
                                                    uint32_t i);

/* A compressed leaf's bytes in a table (docs/replay.md, "Compressed
 * leaves"): as inserted, as kept (its u32 stored size per item included),
 * and its values kept raw (no frame was smaller). */
typedef struct {
  char leaf[CHIME_MAX_NAME];
  uint32_t level;
  uint64_t raw_bytes;
  uint64_t stored_bytes;
  uint64_t stored_raw;
} chime_leaf_bytes_t;

typedef struct {
  char name[CHIME_MAX_NAME];
  chime_spec_t spec;
  uint64_t capacity;
  uint64_t size;
  uint64_t min_size;
  uint64_t sample_bytes;
  char sampler[16]; /* fifo lifo uniform prioritized min_heap max_heap */
  char remover[16]; /* the same names: which item a full table evicts */
  double priority_exponent;   /* prioritized sampler or remover */
  uint64_t max_times_sampled; /* an item leaves after so many; 0: never */
  double samples_per_insert;  /* rate limiter; 0: none */
  double error_buffer;
  /* A sequence table (sequence_length > 0; docs/sequences.md): spec and
   * sample_bytes are one item's ([sequence_length, *shape] per leaf, then
   * mask: u8[T] when episode_end is "pad"); writers append steps of
   * step_spec (step_bytes each). capacity is capacity_steps. */
  chime_spec_t step_spec;
  uint64_t step_bytes;
  uint64_t capacity_steps;
  uint32_t sequence_length, stride;
  char episode_end[8];      /* "drop" or "pad"; "" for a plain table */
  int initial_priority_max; /* else initial_priority */
  double initial_priority;
  /* What the sampler draws against now: a prioritized sampler's sum of
   * priority^priority_exponent over the items (0 while every priority is
   * 0), any other's the item count. An item's sampling probability is its
   * weight / mass; a sharded learner picks shard i with probability
   * mass_i / sum(mass). 0 from a server older than the field. */
  double mass;
  /* Policy versions (docs/replay.md): an item more than max_staleness
   * versions behind newest_version (the newest its items and learners
   * reported) is never sampled and leaves; 0: no limit. */
  uint64_t max_staleness;
  uint64_t newest_version;
  /* How a prioritized sampler weighs staleness s (docs/replay.md): "none",
   * or "inverse" (probability p^a / (s + 1) / mass). "none" from a server
   * before 1.0. */
  char staleness_weight[16];
  /* Compressed leaves (docs/replay.md, "Compressed leaves"): "leaf:level"
   * in spec order, comma separated ("obs:3"); "" for none (and from a
   * server before the field). Stats has the bytes held raw and stored. */
  char compress[1024];
  /* Each compressed leaf's bytes, as Stats' (0 from a server before 1.0). */
  uint32_t nleaf_bytes;
  chime_leaf_bytes_t leaf_bytes[CHIME_MAX_LEAVES];
  /* The directory the table's storage lives in (docs/operations.md,
   * "Tables in files"); "" in memory (and from a server before 1.0). */
  char data_dir[1024];
  /* The bytes its files hold on disk (allocated blocks), as Stats'
   * disk_bytes; 0 in memory. */
  uint64_t disk_bytes;
  /* Pacing (docs/replay.md, "Pacing producers"): the samples a learner
   * draws per version step, inserts held within (max_staleness - 1) of
   * those ahead of it; 0: not paced. The version leaf whose minimum is
   * each sample's version ("Per-token versions"); "": none. Both 0 / ""
   * from a server before the fields. */
  uint64_t pace_batch;
  char version_leaf[CHIME_MAX_NAME];
} chime_table_info_t;

/* One open stream's ring on the server, as GetInfo reports it. */
typedef struct {
  uint64_t stream_id;
  char table[CHIME_MAX_NAME];
  uint64_t bytes;        /* the whole mapping: header, control, slots */
  uint64_t pinned_bytes; /* page-locked by the server: slots x slot_bytes */
} chime_ring_info_t;

typedef struct {
  char version[32];
  char boot_id[64];
  char hostname[256];
  uint32_t shard; /* the server's shard, 0: unsharded (chime_key_shard) */
  /* Random in 1..2^63-1, chosen when the server object was created: two
   * addresses that answer the same instance reach one server (a restarted
   * one has a new instance). 0 from a server older than the field. */
  uint64_t instance;
  int pin_host_memory;
  uint64_t pinned_bytes; /* the sum over rings */
  uint32_t ntables;
  chime_table_info_t *tables;
  uint32_t nrings; /* one per open stream */
  chime_ring_info_t *rings;
} chime_server_info_t;

/* GetInfo, bounded by opts.timeout_ms. Free *out with chime_server_info_free().
 * Thread-safe. GetInfo and Stats only read: one that finds the connection
 * closed under it (an idle client's connection dropped by the server's
 * keepalive) is sent once more on a new one; a server that is gone gives
 * CHIME_EDISCONNECTED once this client had reached it. */
CHIME_EXTERN CHIME_NODISCARD int chime_client_info(chime_client_t *client,
                                                   chime_server_info_t **out);
CHIME_EXTERN void chime_server_info_free(chime_server_info_t *info);

/* Stats as the server's JSON-able view: filled by chime_client_stats().
 * The counters are the lists of chime/stats.h, which says what each
 * one counts; the structs are those lists' fields in order. */
#define CHIME__STATS_FIELD(type, name, kind, unit, help) type name;
typedef struct {
  char name[CHIME_MAX_NAME];
  CHIME_TABLE_STATS_FIELDS(CHIME__STATS_FIELD)
  uint32_t nleaf_bytes; /* its compressed leaves, in spec order */
  chime_leaf_bytes_t leaf_bytes[CHIME_MAX_LEAVES];
} chime_table_stats_t;

typedef struct {
  uint64_t stream_id;
  char table[CHIME_MAX_NAME];
  chime_mode_t mode;
  CHIME_STREAM_STATS_FIELDS(CHIME__STATS_FIELD)
} chime_stream_stats_t;

typedef struct {
  uint32_t ntables;
  chime_table_stats_t *tables;
  uint32_t nstreams;
  chime_stream_stats_t *streams;
  CHIME_SERVER_STATS_FIELDS(CHIME__STATS_FIELD)
} chime_stats_t;
#undef CHIME__STATS_FIELD

CHIME_EXTERN CHIME_NODISCARD int chime_client_stats(chime_client_t *client,
                                                    chime_stats_t **out);
CHIME_EXTERN void chime_stats_free(chime_stats_t *stats);

typedef struct {
  uint32_t updated, deleted;
  uint32_t unknown; /* keys not in the table (never inserted, or gone) */
} chime_mutate_result_t;

/* MutatePriorities on `table`: priorities[i] becomes the priority of the
 * item with keys[i] (n of each; NULL when n is 0), then the items with the
 * ndeletes keys in deletes leave the table. Keys not in the table are
 * skipped and counted. A priority that is NaN, infinite or negative (or
 * too large for the table's priority_exponent) refuses the whole call with
 * CHIME_EINVAL and nothing changes. At most 2^20 keys of each per call.
 * out may be NULL. Thread-safe. */
CHIME_EXTERN CHIME_NODISCARD int
chime_client_mutate_priorities(chime_client_t *client, const char *table,
                               const uint64_t *keys, const double *priorities,
                               size_t n, const uint64_t *deletes,
                               size_t ndeletes, chime_mutate_result_t *out);

/* Which shard issued `key`: the server's `shard` (1..65535), or 0 for an
 * unsharded server. Every key a server issues carries its shard in the top
 * 16 bits and a count from 1 per table in the other 48, so a key says where
 * its item lives; a server refuses a MutatePriorities naming another
 * shard's key with CHIME_EINVAL (docs/protocol.md, Keys). */
CHIME_EXTERN uint32_t chime_key_shard(uint64_t key);

typedef struct {
  char path[1100];      /* the checkpoint's directory on the server's host */
  uint32_t tables;      /* tables written */
  uint64_t items;       /* items written */
  uint64_t bytes;       /* bytes of its table files */
  uint64_t pause_ns;    /* the longest hold of one table's lock */
  uint64_t duration_ns; /* the whole checkpoint, DONE included */
} chime_checkpoint_result_t;

/* Checkpoint: the server writes every table to its configured checkpoint
 * dir (inserts and samples go on meanwhile) and answers once the
 * checkpoint is complete (its DONE marker written). Needs the admin role
 * when tokens are configured. CHIME_EINVAL when the server has no
 * checkpoint dir, CHIME_ESYS when writing failed (the detail names the
 * path), CHIME_ESHUTDOWN when the server stopped first. Bounded by the
 * client's timeout_ms: a checkpoint that outlasts it still completes on
 * the server. out may be NULL. Thread-safe. */
CHIME_EXTERN CHIME_NODISCARD int
chime_client_checkpoint(chime_client_t *client, chime_checkpoint_result_t *out);

/* Reports a policy version for table from a process that has no stream on
 * it (e.g. the trainer; a learner may say it on its stream,
 * chime_stream_set_version): the table's newest known version rises to
 * it, and with max_staleness the items it leaves more than max_staleness
 * behind leave at once and are never sampled (docs/replay.md). A version
 * lower than the newest known is allowed and changes nothing. Every shard
 * of a sharded client is told. *newest (may be NULL): the table's newest
 * version after (the highest over shards). Learner role when tokens are
 * configured. CHIME_ENOTFOUND for an unknown table. Thread-safe. */
CHIME_EXTERN CHIME_NODISCARD int
chime_client_set_version(chime_client_t *client, const char *table,
                         uint64_t version, uint64_t *newest);

/* ---------------------------------------------------------------- writer */

typedef struct chime_writer_s chime_writer_t;

typedef struct {
  /* Zeros are the defaults. */
  uint32_t max_batch_samples; /* samples per Insert message; default 256 */
  size_t max_batch_bytes;     /* bytes per Insert message; default 1 MiB */
  /* Messages not yet acked; default 8. With resend on, at most 32 (larger
   * values are lowered to 32): the server remembers a writer's last 32
   * requests, and a resend must still be among them. */
  uint32_t max_inflight;
  int timeout_ms; /* for flush/close; default 30000 (negative: EINVAL) */
  /* Exactly once across lost connections (default on): the writer has a
   * random id and numbers its requests, keeps each until it is acked, and
   * when its call dies without a graceful "shutting down" (the connection
   * was lost) it opens a new call and sends every unacked request again. The
   * server acks one it already inserted with its original keys and does not
   * insert it twice, so each sample lands exactly once (docs/protocol.md,
   * Insert). So it does when its call stalls: requests unacked and nothing
   * heard for 1.5 s from a server that heartbeats (chime_writer_stalls;
   * docs/remote.md, "A link that drops"), then on a fresh connection.
   * 0: the first lost connection fails the writer with
   * CHIME_EUNAVAILABLE, as before, and no call is judged stalled. */
  int resend;
  /* With resend: how long the writer keeps trying, from the disconnect until
   * the server acks again (the channel reconnects with gRPC's backoff; after
   * a stall, a fresh connection every 250 ms);
   * then calls fail with CHIME_EDISCONNECTED. Default 10000; 0: default;
   * negative: no reconnecting (as resend 0), like a stream's. */
  int reconnect_timeout_ms;
  /* The policy version recorded with each sample appended (docs/replay.md);
   * chime_writer_set_version changes it between appends. Default 0. */
  uint64_t version;
  /* Compressed leaves (docs/replay.md, "Compressed leaves"; default 1):
   * the leaves the table keeps compressed (GetInfo's TableInfo.compress)
   * are compressed by the writer, at the table's levels, before they are
   * sent, so the insert traffic shrinks as the table's memory does and
   * chimed only checks them. 0: samples go raw and chimed compresses them
   * (the actor's CPU left to the actor); a ragged leaf is compressed at
   * each sample's length, a sequence table's steps as appended. A table
   * that compresses nothing gets raw samples either way. */
  int compress;
  /* A warm start (an import, docs/datasets.md): the writer's samples go in
   * without waiting for the table's rate limiter (InsertRequest.warm_start),
   * so filling a table from a dataset never stalls on samples no learner
   * takes yet. Capacity and a fifo table's room still hold. Default 0. */
  int warm_start;
} chime_writer_opts_t;
#define CHIME_WRITER_OPTS_INIT                                                 \
  {                                                                            \
    .max_batch_samples = 256, .max_batch_bytes = 1u << 20, .max_inflight = 8,  \
    .timeout_ms = 30000, .resend = 1, .reconnect_timeout_ms = 10000,           \
    .compress = 1                                                              \
  }

/* Opens an Insert stream to `table` (GetInfo first: CHIME_ENOTFOUND for an
 * unknown table, and the table's spec to check sample sizes). A writer is used
 * by one thread at a time; it does its work in the calling thread. */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_open(chime_writer_t **out, chime_client_t *client,
                  const char *table, const chime_writer_opts_t *opts);
/* Queues one sample (exactly the table's sample bytes, leaves in spec order)
 * with a priority. Sends a message when the batch is full; may block while
 * max_inflight messages wait for acks (up to timeout_ms: CHIME_ETIMEDOUT, and
 * the sample was not queued; call again). An error from the server (wrong size:
 * CHIME_EINVAL naming the leaf) is returned by the append that starts the next
 * message (acks and errors are looked for once per message, not per sample),
 * or by flush() and close(). A sample
 * of the wrong size is refused here, before sending, with CHIME_EINVAL and a
 * detail naming the leaf; the writer stays usable. So is a priority that
 * is NaN, infinite or negative (CHIME_EINVAL; the server refuses those too).
 * Once the server ended
 * the call (e.g. CHIME_ESHUTDOWN) every later call returns that error.
 * With resend on, two errors concern the writer itself (docs/protocol.md,
 * "Which writers the server remembers"): CHIME_ERESOURCE when the table
 * remembers as many writers as it may (max_writers), all with an open call
 * or recently active (nothing of this writer went in; open a new writer
 * later), and CHIME_EFORGOTTEN when the server no longer remembers this
 * writer (only after its connection was lost for longer than the table's
 * writer_idle_ms): chime_writer_acked() samples are in the table, each
 * request sent and not acked is either wholly in or not at all, which
 * nobody can tell; go on with a new writer. */
CHIME_EXTERN CHIME_NODISCARD int chime_writer_append(chime_writer_t *writer,
                                                     const void *sample,
                                                     size_t len,
                                                     double priority);
/* Queues n samples given leaf by leaf, as columns: leaves[l] holds the n
 * values of leaf l (n * its bytes, contiguous, spec order), priorities n
 * priorities or NULL for all 1.0. The same as n appends, with one copy into
 * the message and one check of the connection for the lot. A bad priority
 * anywhere refuses the call before anything is queued (CHIME_EINVAL). On
 * another error the first *taken samples were queued (taken may be NULL):
 * acks come in order, so chime_writer_acked() then says how many of them
 * are in the table. */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_extend(chime_writer_t *writer, const void *const leaves[],
                    const double *priorities, uint32_t n, uint32_t *taken);
/* Queues one sample given leaf by leaf: leaves[l] holds leaf l's bytes
 * (spec order). A ragged leaf (chime/spec.h) holds lengths[l] rows, 0 up to
 * its bound (and equal to the length it shares, "~leaf"): lengths[l] *
 * chime_leaf_row_bytes() bytes; a fixed leaf holds its whole size and its
 * lengths[l] is not read (lengths may be NULL for a table without ragged
 * leaves). The only append a table with ragged leaves takes
 * (chime_writer_append and _extend refuse one with CHIME_EINVAL). A length
 * past its bound or unlike the one it shares is CHIME_EINVAL with a detail
 * naming the leaf, and nothing is queued. Otherwise as chime_writer_append:
 * the server stores only the rows given, nothing padded. */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_append_leaves(chime_writer_t *writer, const void *const leaves[],
                           const uint32_t lengths[], double priority);
/* A group table's writer (docs/replay.md, "Groups"): queues a group of n
 * samples (1 up to the table's group_max) as one item, with one priority:
 * it goes in whole or not at all, has one key, and is sampled, evicted
 * and checkpointed as one. leaves[l] holds sample-spec leaf l's values of
 * the n samples back to back (chime_spec_group_samples of
 * chime_writer_spec: the table's leaves without CHIME_GROUP_LEAF): a
 * fixed leaf n times its bytes, a ragged leaf its n samples' rows, whose
 * lengths lengths[l] gives (n of them; NULL for a fixed leaf, and
 * lengths itself may be NULL when no leaf is ragged). n of 0 or past
 * group_max, a length past its leaf's bound, or a table that is not a
 * group table: CHIME_EINVAL naming the thing, and nothing is queued.
 * Otherwise as chime_writer_append_leaves. A group the table's admission
 * filters drop still acks (it takes its key); chime_writer_take_dropped
 * says which. */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_append_group(chime_writer_t *writer, const void *const leaves[],
                          const uint32_t *const lengths[], uint32_t n,
                          double priority);
/* A group the table's admission filters dropped (docs/replay.md,
 * "Admission filters"): index is its place among everything this writer
 * appended (0: the first append), key the key it took, reason why:
 * CHIME_DROP_ZERO_VARIANCE or CHIME_DROP_MEAN_OUTSIDE. */
typedef enum {
  CHIME_DROP_ZERO_VARIANCE = 1,
  CHIME_DROP_MEAN_OUTSIDE = 2,
} chime_drop_reason_t;
typedef struct {
  uint64_t index;
  uint64_t key;
  chime_drop_reason_t reason;
} chime_writer_drop_t;
/* Takes up to n of the dropped groups acks reported so far and not taken
 * yet, oldest first, into out; returns how many. Acks arrive as appends
 * and flush() wait for them: after a flush every dropped group of what was
 * appended before it is there to take. */
CHIME_EXTERN uint32_t chime_writer_take_dropped(chime_writer_t *writer,
                                                chime_writer_drop_t *out,
                                                uint32_t n);
/* Groups dropped by the table's filters so far, taken or not. */
CHIME_EXTERN uint64_t chime_writer_dropped(const chime_writer_t *writer);
/* The policy version of the samples appended from now on (the writer's
 * opts.version until then). Any value; one lower than before is allowed
 * (a sample too far behind the table's newest version never goes in:
 * docs/replay.md). A sequence table's windows record no version. */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_set_version(chime_writer_t *writer, uint64_t version);
/* A sequence table's writer: ends its open episode after the steps queued
 * so far (they are sent now, with the end; with episode_end "pad" an
 * uncovered tail makes one padded window). The next append starts a new
 * episode. Does not wait for the ack (chime_writer_flush does), but may
 * wait for room to send, as an append does: on failure (CHIME_ETIMEDOUT
 * when max_inflight messages stayed unacked for timeout_ms) nothing was
 * ended and the steps stay queued; call it again (steps appended first
 * join the episode it then ends). CHIME_EINVAL for a plain table's
 * writer. */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_end_episode(chime_writer_t *writer);
/* Sends what is queued and waits until every sample is acked (in the table). */
CHIME_EXTERN CHIME_NODISCARD int chime_writer_flush(chime_writer_t *writer);
/* Samples acked so far. */
CHIME_EXTERN uint64_t chime_writer_acked(const chime_writer_t *writer);
/* The Insert calls this writer left as stalled (docs/remote.md, "A link
 * that drops"): requests unacked and nothing at all heard from a server
 * that heartbeats for 1.5 s (or 4 times the recent gaps), each resumed on
 * a fresh connection. May be read from another thread. */
CHIME_EXTERN uint64_t chime_writer_stalls(const chime_writer_t *writer);
/* Bytes of the Insert messages the writer has made of its samples, each
 * counted once (a resend after a lost connection is not counted again):
 * the insert traffic, which compressed leaves shrink (chime_writer_opts_t
 * compress). */
CHIME_EXTERN uint64_t chime_writer_bytes_sent(const chime_writer_t *writer);
/* The leaves this writer compresses before it sends them, as GetInfo says
 * a table's ("obs:3", chime_table_info_t.compress); "" when it sends every
 * leaf raw. 0, or CHIME_EINVAL (no writer or out, or len too short). */
CHIME_EXTERN CHIME_NODISCARD int
chime_writer_compress(const chime_writer_t *writer, char *out, size_t len);
/* The spec every sample of this writer is checked against and copied at
 * (a sequence table's step spec), fixed for the writer's life: a sharded
 * writer that moves to another shard moves only to one whose table has
 * this spec. A binding that packs the caller's arrays checks them against
 * this spec, never against one asked of the server separately. */
CHIME_EXTERN CHIME_NODISCARD int chime_writer_spec(const chime_writer_t *writer,
                                                   chime_spec_t *out);
/* Flushes, closes the stream and frees. Returns the flush result. NULL-safe.
 * One timeout bounds it: after a flush or append that timed out with no ack
 * since (e.g. a hung server), close does not wait again and returns
 * CHIME_ETIMEDOUT at once. */
CHIME_EXTERN CHIME_NODISCARD int chime_writer_close(chime_writer_t *writer);

/* ---------------------------------------------------------------- stream */

typedef struct chime_stream_s chime_stream_t;

/* NULL options are CHIME_STREAM_OPTS_INIT. A zero batch_size, slots,
 * prefetch, device_prefetch or open_timeout_ms means its default; a
 * negative open_timeout_ms is CHIME_EINVAL. */
typedef struct {
  uint32_t batch_size; /* samples per batch; default 256 */
  uint32_t slots;      /* ring slots; default 8 */
  chime_mode_t mode;   /* default CHIME_MODE_AUTO */
  uint32_t prefetch;   /* stream mode: batches in flight; default slots - 1 */
  int open_timeout_ms; /* default 10000 */
  int pin_host_memory; /* page-lock this process's view of the ring */
  /* A device stream (docs/pinning.md, Device streams): the CUDA ordinal
   * batches are copied to, ahead of the learner; next() then returns device
   * pointers (see chime_stream_wait). -1 (the default): host memory, as
   * ever. device_prefetch: batches copied ahead, each holding a ring slot
   * until its copy completed; 1 <= device_prefetch <= slots - 1, 0 means
   * 2 (or slots - 1 when smaller). */
  int device;
  uint32_t device_prefetch;
  /* The learner's policy version at open (0: none yet); later ones go by
   * chime_stream_set_version. */
  uint64_t version;
  /* shm mode: the bytes of batches the server keeps sampled ahead of
   * next(), at most max(2, ready_bytes / batch bytes) batches, so what
   * next() returns was written recently and is still in cache. Batches the
   * learner holds do not count. 0 (or UINT64_MAX): no limit, every free
   * slot filled, as before 1.0. A sharded stream gives it to each shard's
   * shm sub-stream. A server before 1.0 ignores it. */
  uint64_t ready_bytes;
  /* Compressed leaves (docs/replay.md, "Compressed leaves") the learner
   * takes as the table stores them, by name, separated by commas ("obs"):
   * each arrives as a ragged u8 leaf, offsets and each sample's stored
   * bytes (a zstd frame, or the leaf raw when as long as the leaf), for a
   * decoder of the learner's own. NULL: every leaf decompressed. Copied
   * at open. A leaf the table does not compress is CHIME_EINVAL. */
  const char *keep_compressed;
  /* Stream mode (docs/remote.md): the most bytes of batches the stream
   * keeps in flight. Before Open the client times a GetInfo and grows the
   * ring past `slots` until (slots - 1) x batch bytes cover twice what 10
   * Gb/s moves in that round trip, at most this; a server whose budget
   * refuses that ring gets a smaller one, never fewer than `slots`. Only
   * with prefetch 0 (else prefetch says what is in flight). Over several
   * `connections` it also grows to two batches in flight on each, within
   * this. 0: 64 MiB; at most slots x batch bytes: `slots` as given. */
  uint64_t max_inflight_bytes;
  /* Stream mode (docs/remote.md, "A link that drops"): a stream whose
   * connection is lost (not ended by the server) opens its Subscribe
   * again, for at most this long, and goes on where it was: next()
   * returns CHIME_ETIMEDOUT meanwhile, CHIME_EDISCONNECTED once it gives
   * up. 0: the default, 10000; negative: never, the stream ends at once
   * with CHIME_EDISCONNECTED (as before 1.0). */
  int reconnect_timeout_ms;
  /* Stream mode (docs/remote.md, "More connections"): the connections,
   * each a TCP connection of its own, the stream's batches travel over,
   * each batch whole on one of them and handed to next() in order; for a
   * link where one TCP flow is the limit (loss). 0: the default, 1 (one
   * connection, as before 1.0); at most CHIME_MAX_CONNECTIONS. shm mode
   * ignores it (the ring is the server's); a sharded client's stream-mode
   * sub-streams each use it. With more than 1, compressed leaves travel
   * decompressed. */
  uint32_t connections;
} chime_stream_opts_t;
#define CHIME_MAX_CONNECTIONS 16
#define CHIME_MAX_INFLIGHT_BYTES (64ull << 20)
#define CHIME_STREAM_OPTS_INIT                                                 \
  {                                                                            \
    .batch_size = 256, .slots = 8, .mode = CHIME_MODE_AUTO, .prefetch = 0,     \
    .open_timeout_ms = 10000, .pin_host_memory = 0, .device = -1,              \
    .device_prefetch = 0, .reconnect_timeout_ms = 10000                        \
  }
#define CHIME_DEVICE_PREFETCH 2

/* One leaf of a batch: a [count, *shape] array, contiguous. A ragged leaf
 * (chime/spec.h) is its samples' rows packed back to back, a [total,
 * *shape[1:]] array (shape[0] == total, the rows of all samples), and
 * offsets: count + 1 of them, sample j's rows are offsets[j] ..
 * offsets[j + 1] (Arrow's list layout; offsets[0] == 0, offsets[count] ==
 * total). offsets is NULL for a fixed leaf. Both lie in the ring slot;
 * on a device stream the values are on the device and the offsets a host
 * copy, valid until release. */
typedef struct {
  const char *name;
  chime_dtype_t dtype;
  uint32_t ndim;                      /* includes the batch dimension */
  uint64_t shape[CHIME_MAX_DIMS + 1]; /* shape[0] == count (ragged: total) */
  const void *data;
  uint64_t bytes;
  const int64_t *offsets; /* a ragged leaf's count + 1; NULL otherwise */
} chime_batch_leaf_t;

typedef struct {
  uint64_t seq;
  uint32_t count;
  uint32_t nleaves;
  chime_batch_leaf_t leaf[CHIME_MAX_LEAVES];
  const chime_sample_info_t *info; /* count records */
  /* A group table's batch (docs/replay.md, "Groups"): count groups and
   * their count + 1 offsets into the batch's samples (group g is samples
   * groups[g] .. groups[g + 1]; groups[count] == the samples). Each leaf
   * then has a row per sample: a fixed leaf is [samples, *shape] (offsets
   * NULL), a ragged one its values with samples + 1 offsets (sample j's
   * rows offsets[j] .. offsets[j + 1]), and CHIME_GROUP_LEAF is each
   * sample's lengths. NULL for any other table. */
  const int64_t *groups;
} chime_batch_t;

/* The leaf of batch named name, or NULL: for a ragged leaf its data are
 * the values ([total, *rest]), chime_batch_offsets() its offsets. */
CHIME_EXTERN const chime_batch_leaf_t *
chime_batch_leaf(const chime_batch_t *batch, const char *name);
/* A ragged leaf's count + 1 offsets (chime_batch_leaf_t), NULL for a fixed
 * leaf or no such leaf. */
CHIME_EXTERN const int64_t *chime_batch_offsets(const chime_batch_t *batch,
                                                const char *name);

/* Opens a stream of batches from `table`. In auto mode it maps the server's
 * ring when the server is on this host and the attach succeeds, else it streams
 * over gRPC; chime_stream_mode()/chime_stream_fallback_reason() say which and
 * why ("server on another host (boot_id differs)", "shm attach failed: ...").
 * "This host" means the same boot_id (/proc/sys/kernel/random/boot_id, or
 * $CHIME_BOOT_ID when set, which lets tests play another host) and hostname.
 * Explicit CHIME_MODE_SHM never falls back: CHIME_ENOTSUP for another host, or
 * the attach error. With pin_host_memory the ring this process reads is
 * page-locked (chime_ring_pin) or the open fails with the whole pinning
 * error in chime_last_error(). With device >= 0 the CUDA runtime is loaded
 * (as for pinning), the ring's slots are page-locked once (unless
 * pin_host_memory did) and batches are copied to that device ahead of the
 * learner; CHIME_ECUDA when the runtime, the device or the registration
 * fails. On any failure the reason is in chime_last_error(). Each stream
 * runs one helper thread.
 *
 * On a sharded client the stream reads the union of the shards' tables as
 * one table (docs/scaling.md, "Sampling over shards"): a sub-stream per
 * shard with these options (auto: shm for a shard on this host, stream for
 * the others), so one helper thread and one ring of `slots` per shard. For
 * a uniform or prioritized table each batch comes whole from one shard,
 * drawn with probability mass_i / sum(mass), and each item's
 * info.probability is its probability in the union; fifo, lifo and the
 * heaps take a batch from whichever shard has one ready, in turn. A shard
 * that cannot be reached at open is opened later; one that answers and
 * refuses (no such table, a table configured differently) fails the open,
 * as does reaching none. A device stream over shards is a device
 * sub-stream per shard (docs/pinning.md, Over shards). */
CHIME_EXTERN CHIME_NODISCARD int
chime_stream_open(chime_stream_t **out, chime_client_t *client,
                  const char *table, const chime_stream_opts_t *opts);
/* Next batch: pointers into the ring (shm: the server's mapping, zero copy;
 * stream: this process's local ring), valid until released; a device
 * stream's are device pointers (chime_stream_wait). timeout_ms < 0
 * waits forever, 0 polls. CHIME_ETIMEDOUT, CHIME_EBUSY (slots - 1 batches
 * held), CHIME_ESHUTDOWN (server shutting down), CHIME_EDISCONNECTED (server
 * gone), CHIME_EPROTO (the server broke the protocol), CHIME_ECUDA (a
 * device stream's copy failed or its device was lost: the detail names the
 * CUDA error; that batch is dropped). After an end, batches
 * not yet taken are dropped and held ones stay readable until close. The
 * detail is in chime_last_error(): once the stream ended, why it ended (the
 * server's status, or the protocol error the stream's helper thread found),
 * on whichever thread calls next. In stream mode a next() that finds
 * its ring empty receives the batch on the calling thread (no hand-off from
 * another); while the learner stays out of next() for more than a few
 * milliseconds the stream's helper thread receives instead, so batches
 * keep arriving up to the prefetch while it computes. On a sharded
 * client's stream a shard whose sub-stream ends is skipped (and opened
 * again once it answers): next() fails, with the last shard's end, only
 * when no shard's sub-stream is left; a batch's info then lies in memory
 * the stream owns (uniform, prioritized: the union's probabilities), its
 * leaves in the shard's ring as ever. */
CHIME_EXTERN CHIME_NODISCARD int
chime_stream_next(chime_stream_t *stream, chime_batch_t *out, int timeout_ms);
/* Tells the server the learner's policy version now (docs/replay.md): the
 * table's newest known version rises to it, and with max_staleness the
 * items more than max_staleness behind it leave and are never sampled
 * again. Sent on the stream without waiting (a later call's version
 * replaces one not sent yet). Batches already in the ring or in flight
 * were drawn before it: next() drops (releases unseen) one that holds an
 * item more than the table's max_staleness behind the version given
 * here, so what next() returns is within the window of the learner's
 * version at receipt (each drop waits for the next batch with the same
 * timeout). Lower than the newest known: allowed, changes nothing. A
 * sharded client's stream does the same on every shard's sub-stream (a
 * shard whose sub-stream is not open now is told when it opens again); a
 * device stream drops nothing: compare b.info's version with your own
 * there. CHIME_ECLOSED once the stream ended. */
CHIME_EXTERN CHIME_NODISCARD int
chime_stream_set_version(chime_stream_t *stream, uint64_t version);
/* A device stream's batch (opts.device >= 0): its leaves' data are device
 * pointers on that device, into a buffer the copy from the ring may still
 * be filling, and info is host memory. Before work on a CUDA stream reads
 * the batch, order that stream after the copy: chime_stream_wait(stream,
 * &batch, cuda_stream) makes cuda_stream (a cudaStream_t; NULL is the
 * legacy default stream) wait for the copy's event (cudaStreamWaitEvent:
 * nothing waits on the host, and the device is never synchronised), and
 * remembers it, so that chime_stream_release() records the release point
 * on it: the batch's buffer is reused only after that stream passed it.
 * Any thread may call it, also while another waits in next; up to 4
 * streams per batch (CHIME_ERESOURCE beyond). A batch used without wait must be
 * released only once the work that read it has finished. CHIME_EINVAL for a
 * host stream or a batch not lent now, CHIME_ECUDA when CUDA refuses (the
 * detail names the error). */
CHIME_EXTERN CHIME_NODISCARD int chime_stream_wait(chime_stream_t *stream,
                                                   const chime_batch_t *batch,
                                                   void *cuda_stream);
/* Gives back a batch this stream's next() returned, in any order (named
 * after the handle it takes: the stream). In stream mode this also returns
 * a credit to the server. Call from the thread that calls next. The batch
 * is found by its info pointer and seq, as next() filled them (a copy of
 * the struct will do): CHIME_EINVAL for one given back already or not lent
 * by this stream, and nothing is released. */
CHIME_EXTERN CHIME_NODISCARD int
chime_stream_release(chime_stream_t *stream, const chime_batch_t *batch);
/* A sharded client's stream: its sub-streams' mode when they all have the
 * same, CHIME_MODE_AUTO when some shards are read by shm and others in
 * stream mode. */
CHIME_EXTERN chime_mode_t chime_stream_mode(const chime_stream_t *stream);
/* NULL when the requested mode was used; else why auto fell back (on a
 * sharded client's stream, the first shard that fell back, named). */
CHIME_EXTERN const char *
chime_stream_fallback_reason(const chime_stream_t *stream);

/* This process's view of one stream (the server's is chime_client_stats()). */
/* A sharded client's stream: sums over its sub-streams (closed ones
 * included), stream_id 0 (each shard's stats show its sub-stream). */
typedef struct {
  chime_mode_t mode;
  uint64_t stream_id; /* as in the server's stats */
  uint64_t batches;   /* taken by chime_stream_next() */
  uint64_t bytes;     /* leaf bytes of those batches */
  /* Stream mode: batch payload received, per batch chime_ring_layout()'s
   * info_offset + batch_size * sizeof(chime_sample_info_t) (leaf arrays,
   * padding, sample info: more than `bytes` counts); with ragged leaves
   * only what a batch uses: its offsets and info, its fixed leaves, its
   * ragged leaves' rows (docs/protocol.md, stream mode). Counted as chunks
   * arrive, so it covers every batch next() returned, and a batch's bytes
   * count a moment before next() can see it. */
  uint64_t received_bytes;
  uint64_t credits; /* stream mode: batches granted, prefetch too */
  uint32_t leases;  /* batches held now */
  uint32_t max_leases;
  uint64_t consumer_wait_ns; /* time next() spent waiting */
  /* page-locked by pin_host_memory, or by a device stream's registration */
  uint64_t pinned_bytes;
  /* A device stream: its buffers' device memory, copies started, and the
   * most ring slots its copies held at once (at most device_prefetch). */
  uint64_t device_bytes;
  uint64_t device_copies;
  uint32_t device_max_slots_held;
  /* Batches next() dropped for holding a sample more than max_staleness
   * behind the learner's version (chime_stream_set_version); counted in
   * batches too. */
  uint64_t dropped_stale;
  /* A sharded client's stream on a uniform or prioritized table: shards
   * set aside now for delivering nothing and answering nothing for 1 s
   * (out of the draw until they answer again: docs/scaling.md, "A shard
   * that hangs"), and how many times one was set aside. 0 otherwise. */
  uint32_t shards_aside;
  uint64_t shard_asides;
  /* The ring's slots (grown past the asked ones in stream mode: see
   * max_inflight_bytes); stream mode: the round trip the client measured
   * before Open (ns, 0 when not measured), the bytes of batches it lends
   * the server at once ((slots - 1) x batch bytes, or prefetch's), and the
   * times the stream re-opened its call after a lost connection
   * (docs/remote.md, "A link that drops"), of which late: the server had
   * already ended the old stream, so batches received from it and not
   * yet named in a Credit that arrived may come again; stalls: the times
   * it left its call as stalled (nothing heard for the stall time while
   * batches were owed, docs/protocol.md "Heartbeats"), each then resumed
   * or given up like a lost connection. A sharded stream:
   * the most of its shards' slots, rtt and window (its shards re-open,
   * never resume). */
  uint32_t slots;
  uint64_t rtt_ns;
  uint64_t window_bytes;
  uint64_t resumes;
  uint64_t resumes_late;
  uint64_t stalls;
} chime_stream_local_stats_t;

/* Fills *out; call from the thread that calls next. */
CHIME_EXTERN CHIME_NODISCARD int
chime_stream_stats(const chime_stream_t *stream,
                   chime_stream_local_stats_t *out);
/* Ends the Subscribe call (the server reclaims the ring) and unmaps: batches
 * still held become invalid. Of a table that takes sampled items out (fifo,
 * max_times_sampled), every item of a batch not released is back in the
 * table when this returns (it waits at most 2 s for the server to say so,
 * then cancels; they still come back, a little later). NULL-safe. */
CHIME_EXTERN void chime_stream_close(chime_stream_t *stream);
CHIME_EXTERN const char *chime_mode_name(chime_mode_t mode);

/* -------------------------------------------------------- embedded server */

struct grpc_server;
struct grpc_completion_queue;
typedef struct chime_server_s chime_server_t;

typedef struct {
  const char *config_path; /* JSON config, or NULL for the built-in default */
  const char *listen;      /* overrides the config's listen address */
  int pin_host_memory;     /* -1: as configured, 0 off, 1 on */
  /* overrides the config's "metrics": host:port of the Prometheus endpoint
   * (port 0 picks one), "" for none */
  const char *metrics;
  /* a checkpoint directory to load into the tables before serving, or
   * "latest": the newest complete one in the config's checkpoint.dir;
   * NULL: start empty (docs/operations.md, Checkpoints) */
  const char *restore;
  /* overrides the config's "shard": 1..65535, the shard every key this
   * server issues carries (docs/operations.md, Shards); -1: as configured */
  int shard;
} chime_server_opts_t;
#define CHIME_SERVER_OPTS_INIT                                                 \
  {                                                                            \
    .config_path = NULL, .listen = NULL, .pin_host_memory = -1,                \
    .metrics = NULL, .restore = NULL, .shard = -1                              \
  }

/* Builds tables and the handoff socket from the config; serves nothing yet.
 * With pinning on it loads the CUDA runtime first; when that fails,
 * chime_last_error() holds the whole error (every place the runtime was
 * looked for, and the CUDA error by name). */
CHIME_EXTERN CHIME_NODISCARD int
chime_server_create(chime_server_t **out, const chime_server_opts_t *opts);
/* Registers chime.v1.Chime on an application's server. Must be called before
 * grpc_server_start(); `cq` is a completion queue registered on `server` that
 * chime polls on its own thread. New calls are announced on `cq`; Insert
 * calls then complete on a queue chime creates and drains itself, so actors'
 * inserts do not wait behind learners' streams. */
CHIME_EXTERN CHIME_NODISCARD int
chime_server_register(chime_server_t *srv, struct grpc_server *server,
                      struct grpc_completion_queue *cq);
/* After grpc_server_start(): starts samplers and the call loop. */
CHIME_EXTERN CHIME_NODISCARD int chime_server_start(chime_server_t *srv);
/* The address the Prometheus endpoint (GET /metrics) was bound to once
 * started ("127.0.0.1:9100"), or "" when there is none. */
CHIME_EXTERN const char *
chime_server_metrics_address(const chime_server_t *srv);
/* Graceful stop: refuses new calls, finishes acked inserts, tells streams
 * "shutting down". The application then shuts its grpc_server down. */
CHIME_EXTERN void chime_server_stop(chime_server_t *srv);
/* NULL-safe. Stops first. Embedded: call it after the application shut its
 * grpc_server down (grpc_server_shutdown_and_notify on another queue) and
 * called grpc_completion_queue_shutdown(cq); it waits for chime's thread to
 * drain `cq`, which the application then destroys. */
CHIME_EXTERN void chime_server_destroy(chime_server_t *srv);

/* For applications without a grpc_server of their own (and chimed): calls
 * grpc_init(), creates a server on the configured listen address with 64 MiB
 * message limits, registers the service and starts everything. `bound`
 * receives the address actually bound ("127.0.0.1:41234" for port 0, or
 * "unix:/path"; bound may be NULL). chime_server_destroy() then shuts the
 * grpc_server down and calls grpc_shutdown_blocking(). */
CHIME_EXTERN CHIME_NODISCARD int
chime_server_listen(chime_server_t *srv, char *bound, size_t boundlen);

#ifdef __cplusplus
}
#endif
#endif
