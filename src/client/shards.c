/* The shard set: one one-server client per address of a sharded target
 * (shards.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "client/internal.h"
#include "client/shards.h"
#include "common/clock.h"
#include "common/detail.h"

struct chime__shards_s {
  chime__target_t target;
  chime_client_opts_t opts; /* its strings are the copies below */
  char *token, *tls_ca, *tls_cert, *tls_key, *tls_server_name;
  pthread_mutex_t mu; /* resolution, adding members, a writer's pick */
  int64_t resolved_ms;
  atomic_uint next_pick;
  _Atomic uint32_t n;
  chime__member_t members[CHIME__MAX_SHARDS];
};

static int dup_opt(const char *src, char **dst) {
  if (!src)
    return 0;
  *dst = strdup(src);
  return *dst ? 0 : CHIME_ENOMEM;
}

uint32_t chime__shards_count(const chime__shards_t *set) {
  return atomic_load_explicit(&set->n, memory_order_acquire);
}

chime__member_t *chime__shards_at(chime__shards_t *set, uint32_t i) {
  return &set->members[i];
}

/* Adds a member for addr (under mu). */
static int add_member(chime__shards_t *set, const char *addr, char *err,
                      size_t errlen) {
  uint32_t n = atomic_load(&set->n);
  if (n >= CHIME__MAX_SHARDS)
    return chime__fail(err, errlen, CHIME_ERESOURCE,
                       "more than %d shard addresses", CHIME__MAX_SHARDS);
  chime__member_t *m = &set->members[n];
  m->addr = strdup(addr);
  if (!m->addr)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  int rc = chime__conn_create(&m->client, addr, &set->opts, 1);
  if (rc) {
    chime__fail(err, errlen, rc, "shard %s: %s", addr, chime_last_error());
    free(m->addr);
    m->addr = NULL;
    return rc;
  }
  atomic_init(&m->known, 0);
  atomic_init(&m->shard, 0);
  atomic_init(&m->instance, 0);
  atomic_init(&m->gone, 0);
  atomic_init(&m->writers, 0);
  atomic_store_explicit(&set->n, n + 1, memory_order_release);
  return 0;
}

/* Makes the members match the target's addresses (under mu). */
static int sync_members(chime__shards_t *set, char *err, size_t errlen) {
  uint32_t n = atomic_load(&set->n);
  for (uint32_t i = 0; i < n; i++) {
    int there = 0;
    for (uint32_t j = 0; j < set->target.n && !there; j++)
      there = strcmp(set->members[i].addr, set->target.addrs[j]) == 0;
    atomic_store(&set->members[i].gone, !there);
  }
  for (uint32_t j = 0; j < set->target.n; j++) {
    int have = 0;
    for (uint32_t i = 0; i < n && !have; i++)
      have = strcmp(set->members[i].addr, set->target.addrs[j]) == 0;
    int rc;
    if (!have && (rc = add_member(set, set->target.addrs[j], err, errlen)))
      return rc;
  }
  return 0;
}

int chime__shards_create(chime__shards_t **out, chime__target_t *target,
                         const chime_client_opts_t *opts, char *err,
                         size_t errlen) {
  *out = NULL;
  chime__shards_t *set = calloc(1, sizeof(*set));
  if (!set) {
    chime__target_free(target);
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  }
  set->target = *target;
  memset(target, 0, sizeof(*target));
  pthread_mutex_init(&set->mu, NULL);
  set->opts = *opts;
  int rc = 0;
  if (dup_opt(opts->token, &set->token) ||
      dup_opt(opts->tls_ca, &set->tls_ca) ||
      dup_opt(opts->tls_cert, &set->tls_cert) ||
      dup_opt(opts->tls_key, &set->tls_key) ||
      dup_opt(opts->tls_server_name, &set->tls_server_name)) {
    rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto fail;
  }
  /* Resolved addresses are IPs: a TLS certificate is checked against
   * the name the user gave. */
  if (set->target.dns && !set->tls_server_name &&
      (opts->tls_ca || opts->tls_cert) &&
      dup_opt(set->target.host, &set->tls_server_name)) {
    rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto fail;
  }
  set->opts.token = set->token;
  set->opts.tls_ca = set->tls_ca;
  set->opts.tls_cert = set->tls_cert;
  set->opts.tls_key = set->tls_key;
  set->opts.tls_server_name = set->tls_server_name;
  uint32_t start = 0;
  if (getrandom(&start, sizeof(start), 0) != (ssize_t)sizeof(start))
    start = (uint32_t)getpid();
  atomic_init(&set->next_pick, start);
  if (set->target.dns) {
    char why[CHIME__ERRLEN];
    /* A name that does not resolve yet (a Service with no pods ready) is
     * resolved again at the next call. */
    if (chime__target_resolve(&set->target, CHIME__MAX_SHARDS, why,
                              sizeof(why)) == 0)
      set->resolved_ms = chime__now_ms();
  }
  pthread_mutex_lock(&set->mu);
  rc = sync_members(set, err, errlen);
  pthread_mutex_unlock(&set->mu);
  if (rc)
    goto fail;
  *out = set;
  return 0;
fail:
  chime__shards_destroy(set);
  return rc;
}

void chime__shards_destroy(chime__shards_t *set) {
  if (!set)
    return;
  uint32_t n = atomic_load(&set->n);
  for (uint32_t i = 0; i < n; i++) {
    chime__conn_destroy(set->members[i].client);
    free(set->members[i].addr);
  }
  chime__target_free(&set->target);
  free(set->token);
  free(set->tls_ca);
  free(set->tls_cert);
  free(set->tls_key);
  free(set->tls_server_name);
  pthread_mutex_destroy(&set->mu);
  free(set);
}

void chime__shards_refresh(chime__shards_t *set, int force) {
  if (!set->target.dns)
    return;
  pthread_mutex_lock(&set->mu);
  int64_t now = chime__now_ms();
  int interval = set->opts.resolve_interval_ms > 0
                     ? set->opts.resolve_interval_ms
                     : CHIME_RESOLVE_INTERVAL_MS;
  if (force || set->resolved_ms == 0 || now - set->resolved_ms >= interval) {
    char why[CHIME__ERRLEN];
    set->resolved_ms = now;
    if (chime__target_resolve(&set->target, CHIME__MAX_SHARDS, why,
                              sizeof(why)) == 0)
      (void)sync_members(set, why, sizeof(why));
  }
  pthread_mutex_unlock(&set->mu);
}

int chime__shards_identify(chime__shards_t *set, uint32_t i, char *err,
                           size_t errlen) {
  chime__member_t *m = &set->members[i];
  if (atomic_load(&m->known))
    return 0;
  if (atomic_load(&m->client->seen)) {
    /* Any GetInfo it answered says (a stream's or writer's lookup): no
     * second call, which a server that hangs now would make wait. */
    atomic_store(&m->shard, atomic_load(&m->client->seen_shard));
    atomic_store(&m->instance, atomic_load(&m->client->seen_instance));
    atomic_store(&m->known, 1);
    return 0;
  }
  chime_server_info_t *info = NULL;
  int rc = chime__conn_info(m->client, &info);
  if (rc)
    return chime__fail(err, errlen, rc, "shard %s: %s", m->addr,
                       chime_last_error());
  atomic_store(&m->shard, info->shard);
  atomic_store(&m->instance, info->instance);
  atomic_store(&m->known, 1);
  chime_server_info_free(info);
  return 0;
}

int chime__shards_duplicate(chime__shards_t *set, uint32_t i) {
  char why[CHIME__ERRLEN];
  if (chime__shards_identify(set, i, why, sizeof(why)) != 0)
    return 0;
  uint64_t inst = atomic_load(&set->members[i].instance);
  for (uint32_t j = 0; j < i && inst != 0; j++)
    if (!atomic_load(&set->members[j].gone) &&
        chime__shards_identify(set, j, why, sizeof(why)) == 0 &&
        atomic_load(&set->members[j].instance) == inst)
      return 1;
  return 0;
}

/* The live members that are shard `shard` (identifying the unknown ones
 * on the way; one that cannot be reached is not it, nor is a second
 * address of a server counted already). */
static uint32_t owners(chime__shards_t *set, uint32_t shard, uint32_t *first) {
  uint32_t found = 0, n = chime__shards_count(set);
  for (uint32_t i = 0; i < n; i++) {
    chime__member_t *m = &set->members[i];
    char why[CHIME__ERRLEN];
    if (atomic_load(&m->gone) ||
        chime__shards_identify(set, i, why, sizeof(why)) ||
        chime__shards_duplicate(set, i))
      continue;
    if (atomic_load(&m->shard) == shard && found++ == 0)
      *first = i;
  }
  return found;
}

int chime__shards_owner(chime__shards_t *set, uint32_t shard, uint32_t *index,
                        char *err, size_t errlen) {
  uint32_t found = owners(set, shard, index);
  if (found == 0) {
    chime__shards_refresh(set, 1);
    found = owners(set, shard, index);
  }
  if (found == 1)
    return 0;
  if (found == 0)
    return chime__fail(err, errlen, CHIME_EINVAL,
                       "no shard of this client is shard %u (its keys' "
                       "shard): it is not in the target or cannot be reached",
                       shard);
  return chime__fail(err, errlen, CHIME_EINVAL,
                     "%u servers of this client's target say they are shard "
                     "%u: shards need distinct numbers (config shard)",
                     found, shard);
}

int chime__shards_pick(chime__shards_t *set, const uint8_t *tried,
                       uint32_t *index, char *err, size_t errlen) {
  chime__shards_refresh(set, 0);
  uint32_t n = chime__shards_count(set);
  uint32_t start = atomic_fetch_add(&set->next_pick, 1);
  uint32_t best = UINT32_MAX, least = UINT32_MAX;
  /* Choosing and counting are one step, so writers that pick at once
   * still spread. */
  pthread_mutex_lock(&set->mu);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = (start + k) % n;
    chime__member_t *m = &set->members[i];
    if (atomic_load(&m->gone) || (tried && tried[i]))
      continue;
    uint32_t c = atomic_load(&m->writers);
    if (c < least) {
      least = c;
      best = i;
    }
  }
  if (best != UINT32_MAX)
    atomic_fetch_add(&set->members[best].writers, 1);
  pthread_mutex_unlock(&set->mu);
  if (best == UINT32_MAX)
    return chime__fail(err, errlen, CHIME_EUNAVAILABLE,
                       "no shard to use: the target names none now");
  *index = best;
  return 0;
}

void chime__shards_unpick(chime__shards_t *set, uint32_t index) {
  atomic_fetch_sub(&set->members[index].writers, 1);
}
