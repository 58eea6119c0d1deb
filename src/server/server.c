/* The embedded server's life: build tables from the config, register on a
 * grpc_server, start, stop gracefully, destroy. chimed uses exactly this. */
#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/clock.h"
#include "common/detail.h"
#include "common/keepalive.h"
#include "common/key.h"
#include "ring/pin.h"
#include "server/acceptor.h"
#include "server/auth.h"
#include "server/beat.h"
#include "server/checkpoint.h"
#include "server/checkpointer.h"
#include "server/handoff.h"
#include "server/insert.h"
#include "server/keyres.h"
#include "server/memlimit.h"
#include "server/methods.h"
#include "server/metrics.h"
#include "server/fill_pool.h"
#include "server/service.h"
#include "server/stream.h"
#include "server/tls.h"
#include "wire/grpcref.h"
#include "wire/hostid.h"

/* How long a graceful stop waits for calls to finish before cancelling. */
#define STOP_GRACE_MS 3000
#define STOP_CANCEL_MS 2000
#define STOP_LINGER_MS 200

/* Tables map their whole capacity up front and commit it as they fill: a
 * configuration that cannot fit would start fine and be OOM-killed once
 * full. Above the limit: refused. Above WARN_PERCENT of it: a warning. */
#define WARN_PERCENT 80
static int check_memory(const chime__config_t *cfg, char *err, size_t errlen) {
  uint64_t need = 0, items = 0;
  char what[512];
  for (uint32_t i = 0; i < cfg->ntables; i++) {
    uint64_t b = chime__table_bytes(&cfg->tables[i]);
    if (__builtin_add_overflow(need, b, &need))
      need = UINT64_MAX;
    items += cfg->tables[i].capacity;
  }
  uint64_t lim = chime__memory_limit(what, sizeof(what));
  if (lim == UINT64_MAX)
    return 0;
  if (need > lim) {
    snprintf(err, errlen,
             "the tables need %llu bytes when full (samples and %llu items' "
             "bookkeeping), more than the %llu bytes of %s; lower their "
             "capacities",
             (unsigned long long)need, (unsigned long long)items,
             (unsigned long long)lim, what);
    return CHIME_EINVAL;
  }
  if (need > lim / 100 * WARN_PERCENT)
    chime__log(CHIME_LOG_WARN,
               "the tables need %llu bytes when full, over %d%% "
               "of the %llu bytes of %s",
               (unsigned long long)need, WARN_PERCENT, (unsigned long long)lim,
               what);
  return 0;
}

/* --restore: a checkpoint directory, or "latest" in the config's dir. */
static int restore(chime_server_t *srv, const char *what, char *err,
                   size_t errlen) {
  char path[CHIME__MAX_PATH + 64];
  uint64_t items = 0;
  if (strcmp(what, "latest") == 0) {
    const char *dir = srv->cfg.checkpoint.dir;
    if (dir[0] == '\0') {
      snprintf(err, errlen,
               "--restore latest: the config has no checkpoint dir "
               "(\"checkpoint\": {\"dir\": ...})");
      return CHIME_EINVAL;
    }
    if (chime__checkpoint_latest(dir, path, sizeof(path)) != 0) {
      snprintf(err, errlen,
               "--restore latest: no complete checkpoint (one with DONE) in "
               "'%s'",
               dir);
      return CHIME_ENOTFOUND;
    }
  } else {
    snprintf(path, sizeof(path), "%s", what);
  }
  char why[1536];
  /* A table in files that opened with items, or a sequence table with
   * steps and no windows (episodes that made none yet, or whose windows
   * all left), keeps them: a checkpoint restored over them would mix two
   * histories. */
  for (uint32_t i = 0; i < srv->ntables; i++) {
    chime__table_stats_t st;
    const chime__table_config_t *tc = &srv->cfg.tables[i];
    chime__table_get_stats(srv->tables[i], &st);
    if (tc->data_dir[0] == '\0' || (st.size == 0 && st.steps == 0))
      continue;
    if (st.size > 0)
      snprintf(err, errlen,
               "restore from '%s' refused: table '%s' opened with %llu items "
               "from its data_dir '%s' (move its file away to restore into "
               "an empty table)",
               path, tc->name, (unsigned long long)st.size, tc->data_dir);
    else
      snprintf(err, errlen,
               "restore from '%s' refused: table '%s' opened with %llu steps "
               "but no windows from its data_dir '%s': the checkpoint's steps "
               "would mix with them (move its file away to restore into an "
               "empty table)",
               path, tc->name, (unsigned long long)st.steps, tc->data_dir);
    return CHIME_EEXIST;
  }
  int rc = chime__checkpoint_restore(srv->tables, srv->ntables, path, &items,
                                     why, sizeof(why));
  if (rc != 0) {
    snprintf(err, errlen, "restore from '%s' refused: %s", path, why);
    return rc;
  }
  chime__log(CHIME_LOG_INFO, "restored %llu items from %s",
             (unsigned long long)items, path);
  /* Keys the old process reserved (it may have acked any of them) come
   * after the checkpoint's next key: go on past them, from the restored
   * checkpoint's dir and the config's. */
  char from[sizeof(path)];
  snprintf(from, sizeof(from), "%s", path);
  char *slash = strrchr(from, '/');
  while (slash != NULL && slash > from && slash[1] == '\0') {
    *slash = '\0'; /* DIR/ckpt-N/ */
    slash = strrchr(from, '/');
  }
  if (slash == NULL)
    snprintf(from, sizeof(from), ".");
  else if (slash == from)
    from[1] = '\0';
  else
    *slash = '\0';
  if (srv->keys_dir[0] == '\0')
    snprintf(srv->keys_dir, sizeof(srv->keys_dir), "%s", from);
  for (uint32_t i = 0; i < srv->ntables; i++) {
    const char *dirs[2] = {from, srv->cfg.checkpoint.dir};
    for (int k = 0; k < 2; k++) {
      uint64_t count = 0;
      if (dirs[k][0] == '\0')
        continue;
      rc = chime__keyres_read(dirs[k], srv->cfg.tables[i].name, &count, why,
                              sizeof(why));
      if (rc != 0) {
        snprintf(err, errlen,
                 "restore from '%s' refused: table '%s': %s (remove the "
                 "file to start anyway: keys acked after the checkpoint "
                 "may then be issued again)",
                 path, srv->cfg.tables[i].name, why);
        return rc;
      }
      chime__table_keys_from(srv->tables[i], count);
    }
  }
  return 0;
}

/* A table is about to issue keys past what it reserved (replay/table.h):
 * the new bound goes to disk first. Under the table's lock. */
static int reserve_keys(void *ctx, const chime__table_t *t, uint64_t upto) {
  chime_server_t *srv = ctx;
  char why[512];
  const char *name = chime__table_config(t)->name;
  int rc = chime__keyres_write(srv->keys_dir, name, upto, why, sizeof(why));
  if (rc != 0)
    chime__log(CHIME_LOG_ERROR,
               "table '%s': cannot record its key reservation: %s; "
               "inserts are refused until it can be",
               name, why);
  return rc;
}

/* A sharded client may reach one chimed by several addresses
 * (dns:///localhost: 127.0.0.1 and ::1) and must count it once: the
 * instance tells, where the host identity cannot (many chimed share a
 * host) and neither can the shard (every unsharded server is 0, and two
 * may be given one by mistake). */
static uint64_t new_instance(void) {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
      /* No entropy source: time and pid still tell servers apart. */
      id = chime__clock_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 40);
      id *= UINT64_C(0x9E3779B97F4A7C15);
    }
    /* 63 bits: the same number read as a signed 64-bit integer (JSON
     * through jansson, Java's long); two of 2^16 servers still share one
     * with odds of about 2^-32. */
    id &= INT64_MAX;
  }
  return id;
}

static void read_identity(chime_server_t *srv) {
  chime__host_identity(srv->boot_id, sizeof(srv->boot_id), srv->hostname,
                       sizeof(srv->hostname));
  srv->instance = new_instance();
}

/* Every call presents a token the config knows, with a role that may
 * call its method, before its handler sees it. */
static int admit_call(void *cfg, int method, const grpc_metadata_array *md,
                      char *err, size_t errlen) {
  return chime__auth_check(cfg, method, md, err, errlen);
}

/* Insert calls parked by the staging budget are the call machinery's. */
static const chime__staging_calls_t staging_calls = {
    .ref = chime__call_ref,
    .unref = chime__call_unref,
    .recv = chime__call_recv,
};

/* The options given to chime_server_create over the config's: its
 * listen address (checked, whichever gave it), page-locking, shard and
 * metrics address. 0, or CHIME_EINVAL with err. */
static int opts_apply(chime__config_t *cfg, const chime_server_opts_t *opts,
                      char *err, size_t errlen) {
  if (opts->listen != NULL) {
    if (opts->listen[0] == '\0' ||
        strlen(opts->listen) >= sizeof(cfg->listen)) {
      snprintf(err, errlen, "listen address must be 1-%zu characters",
               sizeof(cfg->listen) - 1);
      return CHIME_EINVAL;
    }
    snprintf(cfg->listen, sizeof(cfg->listen), "%s", opts->listen);
  }
  int rc = chime__listen_addr_check(cfg->listen, err, errlen);
  if (rc != 0)
    return rc;
  /* gRPC 1.51's external port (server/tls.h) names each connection by its
   * peer's address, and a Unix socket's client has none: it would drop
   * the connection unserved. A Unix socket is guarded by its file mode. */
  if (cfg->tls.cert[0] != '\0' &&
      (strncmp(cfg->listen, "unix:", 5) == 0 ||
       strncmp(cfg->listen, "unix-abstract:", 14) == 0)) {
    snprintf(err, errlen,
             "tls: needs a TCP listen address, not '%s' (a Unix socket is "
             "guarded by its file permissions)",
             cfg->listen);
    return CHIME_EINVAL;
  }
  if (opts->pin_host_memory >= 0)
    cfg->pin_host_memory = opts->pin_host_memory != 0;
  if (opts->shard >= 0) {
    if (opts->shard < 1 || opts->shard > (int)CHIME__KEY_MAX_SHARD) {
      snprintf(err, errlen, CHIME__SHARD_RANGE_ERROR, "shard");
      return CHIME_EINVAL;
    }
    cfg->shard = (uint32_t)opts->shard;
  }
  if (opts->metrics != NULL) {
    if (strlen(opts->metrics) >= sizeof(cfg->metrics)) {
      snprintf(err, errlen, "metrics address must be at most %zu characters",
               sizeof(cfg->metrics) - 1);
      return CHIME_EINVAL;
    }
    snprintf(cfg->metrics, sizeof(cfg->metrics), "%s", opts->metrics);
  }
  return 0;
}

int chime_server_create(chime_server_t **out, const chime_server_opts_t *opts) {
  int rc = 0;
  /* chime_last_error()'s room: a pinning error lists the whole ladder. */
  char err[CHIME__DETAIL_LEN] = "";
  const size_t errlen = sizeof(err);
  chime_server_opts_t dflt = CHIME_SERVER_OPTS_INIT;
  if (out == NULL)
    return chime__detail(CHIME_EINVAL, "chime_server_create: needs out");
  *out = NULL;
  if (opts == NULL)
    opts = &dflt;
  chime_server_t *srv = calloc(1, sizeof(*srv));
  if (srv == NULL)
    return chime__detail(CHIME_ENOMEM, "server: out of memory");
  pthread_mutex_init(&srv->mu, NULL);
  pthread_cond_init(&srv->cond, NULL);
  srv->host = (chime__callhost_t){
      .srv = srv,
      .vt = chime__method_vt,
      .admit = admit_call,
      .admit_arg = &srv->cfg,
      .stopping = &srv->stopping,
      .mu = &srv->mu,
      .cond = &srv->cond,
  };
  /* The budget is set once configured. */
  chime__staging_init(&srv->staging, 0, &staging_calls);
  chime__registry_init(&srv->streams, 0, 0);
  if (opts->config_path != NULL)
    rc = chime__config_load(&srv->cfg, opts->config_path, err, errlen);
  else
    rc = chime__config_default(&srv->cfg, err, errlen);
  if (rc != 0)
    goto out;
  srv->staging.budget = srv->cfg.staged_insert_bytes;
  srv->host.max_calls = srv->cfg.max_calls;
  chime__registry_set_budgets(&srv->streams, srv->cfg.stream_ring_bytes,
                              srv->cfg.total_ring_bytes);
  if ((rc = opts_apply(&srv->cfg, opts, err, errlen)) != 0)
    goto out;
  if (srv->cfg.pin_host_memory) {
    rc = chime__cuda_require(err, errlen);
    if (rc != 0)
      goto out;
  }
  rc = check_memory(&srv->cfg, err, errlen);
  if (rc != 0)
    goto out;
  read_identity(srv);
  for (uint32_t i = 0; i < srv->cfg.ntables; i++) {
    srv->cfg.tables[i].shard = srv->cfg.shard; /* the keys it issues */
    /* Each actor token owns its share of the writer places (auth.h). */
    srv->cfg.tables[i].writer_owners = chime__auth_owners(&srv->cfg);
    rc = chime__table_create(&srv->tables[i], &srv->cfg.tables[i]);
    if (rc != 0) {
      /* The table says why (a table in files: which file, table_file.h). */
      snprintf(err, errlen, "table '%s': cannot reserve its storage: %s",
               srv->cfg.tables[i].name, chime_last_error());
      goto out;
    }
    srv->ntables++;
  }
  snprintf(srv->keys_dir, sizeof(srv->keys_dir), "%s", srv->cfg.checkpoint.dir);
  if (opts->restore != NULL &&
      (rc = restore(srv, opts->restore, err, errlen)) != 0)
    goto out;
  /* No dir (no checkpoint dir, nothing restored): keys are not reserved. */
  for (uint32_t i = 0; srv->keys_dir[0] != '\0' && i < srv->ntables; i++)
    chime__table_set_key_reserve(srv->tables[i], reserve_keys, srv,
                                 chime__table_key_pos(srv->tables[i]));
  rc = chime__handoff_create(&srv->handoff, &srv->cfg, &chime__stream_ops, err,
                             errlen);
  if (rc != 0)
    goto out;
  /* Stats only: it may answer before the service starts. */
  if (srv->cfg.metrics[0] != '\0' &&
      (rc = chime__metrics_start(&srv->metrics, srv, srv->cfg.metrics,
                                 srv->metrics_addr, sizeof(srv->metrics_addr),
                                 err, errlen)) != 0)
    goto out;
  *out = srv;
  srv = NULL;
out:
  chime_server_destroy(srv);
  return rc ? chime__detail(rc, err) : 0;
}

int chime_server_start(chime_server_t *srv) {
  int rc;
  if (srv == NULL || srv->host.gs == NULL || srv->started)
    return chime__detail(CHIME_EINVAL,
                         "chime_server_start: needs a server registered on a "
                         "grpc_server and not yet started");
  for (uint32_t i = 0; i < srv->ntables; i++) {
    rc = chime__inserter_create(&srv->inserters[i], srv, srv->tables[i]);
    if (rc != 0)
      return chime__detailf(rc,
                            "server: table '%s': cannot start its "
                            "inserter: %s",
                            srv->cfg.tables[i].name, chime_strerror(rc));
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  rc = chime__pool_create(&srv->sampler, srv->cfg.sampler_threads
                                             ? srv->cfg.sampler_threads
                                             : (unsigned)(ncpu > 0 ? ncpu : 1));
  if (rc != 0)
    return chime__detailf(rc, "server: cannot start the sampler threads: %s",
                          chime_strerror(rc));
  rc = chime__beat_start(&srv->beat, srv);
  if (rc != 0)
    return chime__detailf(rc, "server: cannot start the heartbeat thread: %s",
                          chime_strerror(rc));
  rc = chime__handoff_start(srv->handoff);
  if (rc != 0)
    return chime__detailf(rc, "server: cannot start the handoff thread: %s",
                          chime_strerror(rc));
  rc = chime__ckpter_start(&srv->ckpter, srv);
  if (rc != 0)
    return chime__detailf(rc, "server: cannot start the checkpointer: %s",
                          chime_strerror(rc));
  rc = chime__service_start(srv);
  if (rc != 0)
    return chime__detailf(rc, "server: cannot start the call threads: %s",
                          chime_strerror(rc));
  srv->started = 1;
  return 0;
}

static int wait_calls(chime_server_t *srv, int ms) {
  struct timespec dl = chime__clock_after_ms(CLOCK_REALTIME, (uint64_t)ms);
  pthread_mutex_lock(&srv->mu);
  while (srv->host.ncalls > 0) {
    if (pthread_cond_timedwait(&srv->cond, &srv->mu, &dl) != 0)
      break;
  }
  int left = (int)srv->host.ncalls;
  pthread_mutex_unlock(&srv->mu);
  return left;
}

static void cancel_one(chime__call_t *c) {
  chime__call_cancel(c, GRPC_STATUS_UNAVAILABLE, "shutting down");
}

void chime_server_stop(chime_server_t *srv) {
  if (srv == NULL || atomic_exchange(&srv->stopping, 1))
    return;
  /* A checkpoint being written completes (its callers get their answer);
   * calls still waiting for one are told the server is shutting down, and
   * so are later ones (the checkpointer is freed in destroy, once no
   * handler can reach it). */
  chime__ckpter_stop(srv->ckpter);
  chime__beat_stop(srv->beat);
  srv->beat = NULL;
  if (!srv->started)
    return;
  /* Every ring is shut down before the first notice goes out, so a client
   * that heard "shutting down" on one stream can count on the others being
   * shut too (not still delivering for a few more batches). */
  pthread_mutex_lock(&srv->mu);
  int had_calls = srv->host.ncalls > 0;
  pthread_mutex_unlock(&srv->mu);
  chime__registry_node_t *it;
  chime__registry_lock(&srv->streams);
  for (chime__stream_t *s = chime__registry_first(&srv->streams, &it);
       s != NULL; s = chime__registry_next(&it)) {
    atomic_store(&s->stop, 1);
    chime__ring_shutdown(s->ring);
  }
  chime__registry_unlock(&srv->streams);
  /* With every sampler stopped, an insert waiting for room in a full fifo
   * table would wait forever: its call's stop ends it (not acked); inserts
   * that fit still complete and are acked. */
  chime__call_each(&srv->host, chime__call_stop);
  if (wait_calls(srv, STOP_GRACE_MS) > 0) {
    /* Clients that never read their statuses. */
    for (uint32_t i = 0; i < srv->ntables; i++)
      chime__table_close(srv->tables[i]);
    chime__call_each(&srv->host, chime__call_stop);
    if (wait_calls(srv, STOP_CANCEL_MS / 2) > 0) {
      chime__call_each(&srv->host, cancel_one);
      wait_calls(srv, STOP_CANCEL_MS / 2);
    }
  }
  for (uint32_t i = 0; i < srv->ntables; i++)
    chime__table_close(srv->tables[i]);
  if (had_calls) {
    /* A status handed to gRPC is not yet read by the client. Closing the
     * connection now, with the client's last frames (window updates, inserts
     * it sent meanwhile) unread here, makes the kernel reset it, and a reset
     * discards what the client had not read yet: the "shutting down" status
     * would become "Broken pipe". Give clients a moment to read. */
    struct timespec ts = {0, STOP_LINGER_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Closes every stream listed: each is held by a reference taken under the
 * registry's lock and closed outside it (a close takes it again). */
static void close_streams(chime_server_t *srv) {
  chime__registry_node_t *it;
  chime__registry_lock(&srv->streams);
  uint32_t n = chime__registry_listed(&srv->streams), k = 0;
  chime__stream_t **all = calloc(n ? n : 1, sizeof(*all));
  for (chime__stream_t *s = chime__registry_first(&srv->streams, &it);
       all != NULL && s != NULL; s = chime__registry_next(&it)) {
    chime__stream_ref(s);
    all[k++] = s;
  }
  chime__registry_unlock(&srv->streams);
  for (uint32_t i = 0; i < k; i++) {
    chime__stream_close(all[i]);
    chime__stream_unpark(all[i]); /* no resume comes now */
    chime__stream_unref(all[i]);
  }
  free(all);
}

const char *chime_server_metrics_address(const chime_server_t *srv) {
  return srv != NULL ? srv->metrics_addr : "";
}

void chime_server_destroy(chime_server_t *srv) {
  if (srv == NULL)
    return;
  chime__metrics_stop(srv->metrics); /* no scrape reads what goes below */
  srv->metrics = NULL;
  chime_server_stop(srv);
  /* No connection may reach gRPC once its shutdown began. */
  chime__acceptor_destroy(srv->acceptor);
  srv->acceptor = NULL;
  if (srv->owns_grpc && srv->host.gs != NULL) {
    /* No health call is asked for once the shutdown begins (call.c). */
    pthread_mutex_lock(&srv->mu);
    srv->host.closing = 1;
    pthread_mutex_unlock(&srv->mu);
    grpc_completion_queue *sq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_server_shutdown_and_notify(srv->host.gs, sq, srv);
    grpc_server_cancel_all_calls(srv->host.gs);
    grpc_completion_queue_pluck(sq, srv, gpr_inf_future(GPR_CLOCK_REALTIME),
                                NULL);
    grpc_server_destroy(srv->host.gs);
    grpc_completion_queue_shutdown(sq);
    grpc_completion_queue_destroy(sq);
    grpc_completion_queue_shutdown(srv->host.cq);
  }
  /* Embedded: the application shut its server and this queue down. */
  chime__service_join(srv);
  chime__ckpter_destroy(srv->ckpter);
  srv->ckpter = NULL;
  if (srv->owns_grpc && srv->host.cq != NULL)
    grpc_completion_queue_destroy(srv->host.cq);
  /* Streams whose learner still held them, or batches gRPC still held. */
  close_streams(srv);
  chime__registry_wait_empty(&srv->streams, 10);
  chime__handoff_destroy(srv->handoff);
  for (uint32_t i = 0; i < srv->ntables; i++)
    chime__inserter_destroy(srv->inserters[i]);
  int leak = chime__registry_count(&srv->streams) >
             0; /* a sampler still running: keep tables */
  if (!leak)
    chime__pool_destroy(srv->sampler);
  for (uint32_t i = 0; i < srv->ntables && !leak; i++)
    chime__table_destroy(srv->tables[i]);
  if (srv->owns_grpc && chime__grpc_release())
    chime__grpc_drain(); /* wire/grpcref.h: main() may return after */
  if (!leak) {
    chime__staging_fini(&srv->staging);
    chime__registry_fini(&srv->streams);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cond);
    free(srv);
  }
}

/* gRPC unlinks an existing unix socket before binding: a second server would
 * silently take the path over from a live one. A stale socket (nobody
 * answers) is fine to replace. */
static int unix_path_in_use(const char *addr) {
  struct sockaddr_un a;
  struct stat st;
  if (strncmp(addr, "unix:", 5) != 0)
    return 0;
  const char *path = addr + 5;
  if (strlen(path) >= sizeof(a.sun_path) || stat(path, &st) != 0 ||
      !S_ISSOCK(st.st_mode))
    return 0;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return 0;
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, path, strlen(path));
  int used = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  close(fd);
  return used;
}

/* Whether only this host can reach addr: a Unix socket or a loopback
 * address. */
static int listen_is_local(const char *addr) {
  if (strncmp(addr, "unix:", 5) == 0 ||
      strncmp(addr, "unix-abstract:", 14) == 0)
    return 1;
  return strncmp(addr, "127.", 4) == 0 ||
         strncmp(addr, "localhost:", 10) == 0 ||
         strncmp(addr, "[::1]:", 6) == 0 || strncmp(addr, "ipv4:127.", 9) == 0;
}

/* Beyond loopback, what is left open. Clients are authenticated by tokens
 * or by certificates (mutual TLS); without TLS, tokens and data cross the
 * network in clear. */
static void warn_exposed(const chime__config_t *cfg) {
  int tls = cfg->tls.cert[0] != '\0';
  int mtls = tls && cfg->tls.client_ca[0] != '\0';
  if (listen_is_local(cfg->listen))
    return;
  if (cfg->ntokens == 0 && !mtls)
    chime__log(CHIME_LOG_WARN,
               "listening on %s beyond loopback with no "
               "auth.tokens and no tls.client_ca: anyone who reaches the port "
               "can insert into, drain or stall every table%s",
               cfg->listen,
               tls ? "" : " (and without TLS, read what crosses it)");
  else if (!tls)
    chime__log(CHIME_LOG_WARN,
               "listening on %s beyond loopback without TLS: "
               "tokens and batches cross the network in clear, and whoever "
               "can read them can replay a token",
               cfg->listen);
}

/* The server's gRPC arguments from its config (TLS's aside): message
 * sizes, no SO_REUSEPORT, calls per connection, keepalive, connection
 * age, the BDP probe. args has room for 9 + CHIME__KEEPALIVE_ARGS; the
 * count filled. */
static size_t server_args(const chime__config_t *cfg, grpc_arg *args) {
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = (int)CHIME_MAX_MESSAGE_BYTES;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = (int)CHIME_MAX_MESSAGE_BYTES;
  /* gRPC sets SO_REUSEPORT by default: a second chimed on the same port would
   * bind too and take half the connections. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
  args[2].value.integer = 0;
  /* One peer cannot hold every call the server allows (max_calls). */
  args[3].type = GRPC_ARG_INTEGER;
  args[3].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
  args[3].value.integer = (int)cfg->max_calls_per_connection;
  size_t nargs =
      4 + chime__keepalive_args(args + 4, (int)cfg->keepalive_time_ms,
                                (int)cfg->keepalive_timeout_ms);
  if (cfg->max_connection_age_ms > 0) {
    /* Clients' channels connect anew (re-resolving a dns:/// target, so
     * shards that came or went are seen); calls on the old connection go
     * on for the grace, by default for as long as they last (INT_MAX:
     * gRPC's "no limit"). */
    uint32_t grace = cfg->max_connection_age_grace_ms;
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_MAX_CONNECTION_AGE_MS;
    args[nargs++].value.integer = (int)cfg->max_connection_age_ms;
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS;
    args[nargs++].value.integer = grace > 0 ? (int)grace : INT32_MAX;
  }
  if (!cfg->bdp_probe) {
    /* gRPC grows a connection's receive windows with its measured
     * bandwidth-delay product, and then takes in that much of each Insert
     * call chime has not asked to read (parked by the staging budget):
     * +95 MiB for 95 parked calls of 1 MiB here. Without the probe it is
     * 64 KiB a call, and a read chime asks for still opens the window to
     * its whole message. The price: one writer's throughput (its next
     * requests no longer wait in gRPC's buffers), docs/operations.md. */
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_HTTP2_BDP_PROBE;
    args[nargs++].value.integer = 0;
  }
  return nargs;
}

/* The address listened on, as the caller asked for it with the port the
 * acceptor bound (a Unix socket's path as it is). */
static void bound_address(const char *listen, int port, char *bound,
                          size_t boundlen) {
  if (bound == NULL || boundlen == 0)
    return;
  const char *colon = strrchr(listen, ':');
  if (strncmp(listen, "unix:", 5) == 0 ||
      strncmp(listen, "unix-abstract:", 14) == 0 || colon == NULL)
    snprintf(bound, boundlen, "%s", listen);
  else
    snprintf(bound, boundlen, "%.*s:%d", (int)(colon - listen), listen, port);
}

static int listen_on(chime_server_t *srv, char *bound, size_t boundlen,
                     char *err, size_t errlen) {
  int rc = 0;
  grpc_arg args[9 + CHIME__KEEPALIVE_ARGS];
  grpc_server_credentials *tls = NULL;
  if (srv == NULL || srv->host.gs != NULL) {
    snprintf(err, errlen,
             "chime_server_listen: needs a server that is not "
             "registered on a grpc_server yet");
    return CHIME_EINVAL;
  }
  if (unix_path_in_use(srv->cfg.listen)) {
    snprintf(err, errlen, "cannot listen on '%s': a server is listening there",
             srv->cfg.listen);
    return CHIME_EEXIST;
  }
  chime__grpc_hold();
  size_t nargs = server_args(&srv->cfg, args);
  if (srv->cfg.tls.cert[0] != '\0') {
    /* Read before anything listens: a bad file is a startup error. */
    rc = chime__tls_server_credentials(&srv->cfg.tls, &tls, err, errlen);
    if (rc != 0) {
      if (chime__grpc_release())
        chime__grpc_drain();
      return rc;
    }
    /* The whole handshake (TLS, then HTTP/2 settings) of a connection the
     * acceptor handed over; gRPC's default is 120 s. */
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS;
    args[nargs++].value.integer = (int)srv->cfg.handshake_timeout_ms;
    chime__tls_port_arg(&args[nargs++], &srv->tls_handler);
  }
  grpc_channel_args ca = {nargs, args};
  grpc_server *gs = grpc_server_create(&ca, NULL);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(gs, cq, NULL);
  srv->serve_health = 1; /* the grpc_server is chime's alone */
  rc = chime_server_register(srv, gs, cq);
  if (rc != 0) {
    snprintf(err, errlen, "cannot register the service: %s",
             chime_last_error());
    goto fail;
  }
  if (tls != NULL) {
    rc = chime__tls_port_add(gs, tls, &srv->cfg.tls, &srv->tls_handler, err,
                             errlen);
    grpc_server_credentials_release(tls); /* the port holds its own */
    tls = NULL;
    if (rc != 0)
      goto fail;
  }
  /* Connections are accepted by chime (server/acceptor.h: gRPC 1.51's own
   * listener stops for good after one EMFILE), so gRPC listens on nothing. */
  int port = 0;
  rc = chime__acceptor_create(
      &srv->acceptor, srv->cfg.listen, srv->cfg.max_connections,
      srv->cfg.handshake_timeout_ms, &port, err, errlen);
  if (rc != 0)
    goto fail;
  chime__acceptor_set_rto_max(srv->acceptor, srv->cfg.tcp_rto_max_ms);
  srv->owns_grpc = 1;
  grpc_server_start(gs);
  rc = chime_server_start(srv);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start: %s", chime_last_error());
    return rc; /* chime_server_destroy tears the started server down */
  }
  rc = chime__acceptor_start(srv->acceptor, gs, srv->tls_handler);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start accepting connections: %s",
             chime_strerror(rc));
    return rc;
  }
  bound_address(srv->cfg.listen, port, bound, boundlen);
  warn_exposed(&srv->cfg);
  return 0;
fail:
  chime__acceptor_destroy(srv->acceptor);
  srv->acceptor = NULL;
  srv->tls_handler = NULL;
  srv->host.gs = NULL;
  srv->host.cq = NULL;
  grpc_server_destroy(gs);
  chime__service_join(srv); /* the insert queue, when registered */
  grpc_completion_queue_shutdown(cq);
  while (
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
          .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  if (chime__grpc_release())
    chime__grpc_drain();
  return rc;
}

int chime_server_listen(chime_server_t *srv, char *bound, size_t boundlen) {
  /* chime_last_error()'s room: a TLS or bind error names files and
   * addresses. */
  char err[CHIME__DETAIL_LEN] = "";
  int rc = listen_on(srv, bound, boundlen, err, sizeof(err));
  return rc ? chime__detail(rc, err) : 0;
}
