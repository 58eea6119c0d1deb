/* A sharded client's calls on every shard, as one answer (fanout.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/fanout.h"
#include "client/internal.h"
#include "client/shards.h"
#include "common/detail.h"
#include "common/spec.h"

/* A shard's failure as the sharded call's: its code, its sentence with
 * the shard's address. */
static int shard_failed(const chime__member_t *mb, int rc, char *err,
                        size_t errlen) {
  return chime__fail(err, errlen, rc, "shard %s: %s", mb->addr,
                     chime_last_error());
}

/* What info and stats ask of each shard, begun on every shard before any
 * is waited for: shards that hang cost one client timeout in all, not one
 * each. */
typedef enum { ASK_INFO, ASK_STATS } ask_t;

static int ask_begin(ask_t ask, chime__member_t *mb, chime__unary_t *u) {
  return ask == ASK_INFO ? chime__conn_info_begin(mb->client, u)
                         : chime__conn_stats_begin(mb->client, u);
}

static int ask_end(ask_t ask, chime__member_t *mb, chime__unary_t *u,
                   void **one) {
  return ask == ASK_INFO
             ? chime__conn_info_end(mb->client, u, (chime_server_info_t **)one)
             : chime__conn_stats_end(mb->client, u, (chime_stats_t **)one);
}

static void ask_free(ask_t ask, void *one) {
  if (ask == ASK_INFO)
    chime_server_info_free(one);
  else
    chime_stats_free(one);
}

/* Member i is a server an earlier live member reaches too (the same
 * GetInfo instance), as far as their answers so far say: no call. */
static int seen_before(chime__shards_t *set, uint32_t i) {
  chime_client_t *c = chime__shards_at(set, i)->client;
  uint64_t inst = atomic_load(&c->seen) ? atomic_load(&c->seen_instance) : 0;
  for (uint32_t j = 0; j < i && inst != 0; j++) {
    chime_client_t *o = chime__shards_at(set, j)->client;
    if (!atomic_load(&chime__shards_at(set, j)->gone) &&
        atomic_load(&o->seen) && atomic_load(&o->seen_instance) == inst)
      return 1;
  }
  return 0;
}

/* The live members, in order, one per server; CHIME_EUNAVAILABLE when
 * there is none. Members no GetInfo has identified yet are asked first,
 * all at once; one that does not answer is kept (the call then reports
 * it) with its failure in failed[k] and its sentence in why. */
static int live_members(chime_client_t *client, uint32_t *idx, uint32_t *n,
                        int *failed, char *why, size_t whylen, char *err,
                        size_t errlen) {
  chime__shards_t *set = client->set;
  chime__shards_refresh(set, 0);
  uint32_t total = chime__shards_count(set), nask = 0;
  uint32_t ask_idx[CHIME__MAX_SHARDS];
  int asked_rc[CHIME__MAX_SHARDS] = {0};
  chime__unary_t *u = NULL;
  for (uint32_t i = 0; i < total; i++) {
    chime__member_t *mb = chime__shards_at(set, i);
    if (!atomic_load(&mb->gone) && !atomic_load(&mb->client->seen))
      ask_idx[nask++] = i;
  }
  if (nask > 0 && (u = calloc(nask, sizeof(*u))) == NULL)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  for (uint32_t k = 0; k < nask; k++)
    ask_begin(ASK_INFO, chime__shards_at(set, ask_idx[k]), &u[k]);
  for (uint32_t k = 0; k < nask; k++) {
    chime__member_t *mb = chime__shards_at(set, ask_idx[k]);
    void *one = NULL;
    int rc = ask_end(ASK_INFO, mb, &u[k], &one);
    ask_free(ASK_INFO, one);
    if (rc && !why[0])
      shard_failed(mb, rc, why, whylen);
    asked_rc[ask_idx[k]] = rc;
  }
  free(u);
  *n = 0;
  for (uint32_t i = 0; i < total; i++)
    if (!atomic_load(&chime__shards_at(set, i)->gone) && !seen_before(set, i)) {
      failed[*n] = asked_rc[i];
      idx[(*n)++] = i;
    }
  if (*n == 0)
    return chime__fail(err, errlen, CHIME_EUNAVAILABLE,
                       "'%s' names no shard now", client->address);
  return 0;
}

/* One shard's part of a call on every shard: its answer `one` added into
 * acc; k counts the shards before it. */
typedef int (*add_fn)(chime__member_t *mb, uint32_t k, void *one, void *acc,
                      char *err, size_t errlen);

/* Asks every live member (one per server) at once and adds the answers
 * in order; the first failure (in member order) is the call's. */
static int every_shard(chime_client_t *client, ask_t ask, add_fn add, void *acc,
                       char *err, size_t errlen) {
  uint32_t idx[CHIME__MAX_SHARDS], n;
  int failed[CHIME__MAX_SHARDS];
  char why[CHIME__ERRLEN] = "";
  int rc = live_members(client, idx, &n, failed, why, sizeof(why), err, errlen);
  if (rc)
    return rc;
  chime__unary_t *u = calloc(n, sizeof(*u));
  if (!u)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  /* A member that did not answer just now is not asked again. */
  for (uint32_t k = 0; k < n; k++)
    if (!failed[k])
      ask_begin(ask, chime__shards_at(client->set, idx[k]), &u[k]);
  for (uint32_t k = 0; k < n; k++) {
    chime__member_t *mb = chime__shards_at(client->set, idx[k]);
    if (failed[k]) {
      if (rc == 0)
        rc = chime__fail(err, errlen, failed[k], "%s", why);
      continue;
    }
    void *one = NULL;
    int r = ask_end(ask, mb, &u[k], &one);
    if (rc == 0)
      rc = r ? shard_failed(mb, r, err, errlen)
             : add(mb, k, one, acc, err, errlen);
    ask_free(ask, one);
  }
  free(u);
  return rc;
}

/* One shard's part of a call on every shard, made by each in turn (a
 * checkpoint: long, and nothing to gain from waiting together). */
typedef int (*each_fn)(chime__member_t *mb, uint32_t k, void *acc, char *err,
                       size_t errlen);

static int each_shard(chime_client_t *client, each_fn each, void *acc,
                      char *err, size_t errlen) {
  uint32_t idx[CHIME__MAX_SHARDS], n;
  int failed[CHIME__MAX_SHARDS];
  char why[CHIME__ERRLEN] = "";
  int rc = live_members(client, idx, &n, failed, why, sizeof(why), err, errlen);
  for (uint32_t k = 0; rc == 0 && k < n; k++)
    rc = failed[k]
             ? chime__fail(err, errlen, failed[k], "%s", why)
             : each(chime__shards_at(client->set, idx[k]), k, acc, err, errlen);
  return rc;
}

/* A shard's compressed leaves' bytes (s, ns) added to the sums (o, *no),
 * by name: each shard compresses the same leaves (the tables match). */
static void add_leaf_bytes(chime_leaf_bytes_t *o, uint32_t *no,
                           const chime_leaf_bytes_t *s, uint32_t ns) {
  for (uint32_t k = 0; k < ns; k++) {
    uint32_t j = 0;
    while (j < *no && strcmp(o[j].leaf, s[k].leaf) != 0)
      j++;
    if (j == *no) {
      if (j < CHIME_MAX_LEAVES)
        o[(*no)++] = s[k];
      continue;
    }
    o[j].raw_bytes += s[k].raw_bytes;
    o[j].stored_bytes += s[k].stored_bytes;
    o[j].stored_raw += s[k].stored_raw;
  }
}

/* Adds table t of one shard into the merged list (by name). */
static int merge_table(chime_server_info_t *m, const chime_table_info_t *t,
                       const char *addr, char *err, size_t errlen) {
  for (uint32_t k = 0; k < m->ntables; k++) {
    chime_table_info_t *o = &m->tables[k];
    if (strcmp(o->name, t->name) != 0)
      continue;
    uint32_t at;
    if (chime__spec_diff(&o->spec, &t->spec, &at) != CHIME__SPEC_SAME ||
        o->sample_bytes != t->sample_bytes ||
        strcmp(o->sampler, t->sampler) != 0)
      return chime__fail(err, errlen, CHIME_EINVAL,
                         "shard %s: table '%s' differs from the same table "
                         "on the other shards (spec or sampler): a sharded "
                         "table must be configured alike on every shard",
                         addr, t->name);
    o->capacity += t->capacity;
    o->size += t->size;
    o->mass += t->mass; /* the union's: what its sampling weighs against */
    o->capacity_steps += t->capacity_steps;
    if (t->newest_version > o->newest_version) /* a version: the highest */
      o->newest_version = t->newest_version;
    add_leaf_bytes(o->leaf_bytes, &o->nleaf_bytes, t->leaf_bytes,
                   t->nleaf_bytes);
    return 0;
  }
  m->tables[m->ntables++] = *t;
  return 0;
}

static int add_info(chime__member_t *mb, uint32_t k, void *answer, void *acc,
                    char *err, size_t errlen) {
  chime_server_info_t *m = acc, *one = answer;
  int rc = 0;
  if (k == 0) {
    snprintf(m->version, sizeof(m->version), "%s", one->version);
    snprintf(m->boot_id, sizeof(m->boot_id), "%s", one->boot_id);
    snprintf(m->hostname, sizeof(m->hostname), "%s", one->hostname);
  } else {
    /* One host's only while every shard is on it. */
    if (strcmp(m->boot_id, one->boot_id) != 0)
      m->boot_id[0] = '\0';
    if (strcmp(m->hostname, one->hostname) != 0)
      m->hostname[0] = '\0';
  }
  m->pin_host_memory |= one->pin_host_memory;
  m->pinned_bytes += one->pinned_bytes;
  chime_table_info_t *tables =
      realloc(m->tables, (m->ntables + one->ntables + 1) * sizeof(*tables));
  chime_ring_info_t *rings =
      realloc(m->rings, (m->nrings + one->nrings + 1) * sizeof(*rings));
  if (tables)
    m->tables = tables;
  if (rings)
    m->rings = rings;
  if (!tables || !rings) {
    rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  for (uint32_t t = 0; t < one->ntables; t++)
    if ((rc = merge_table(m, &one->tables[t], mb->addr, err, errlen)))
      goto cleanup;
  if (one->nrings) /* else one->rings is NULL: memcpy's UB even for 0 */
    memcpy(m->rings + m->nrings, one->rings, one->nrings * sizeof(*rings));
  m->nrings += one->nrings;
cleanup:
  return rc;
}

int chime__fanout_info(chime_client_t *client, chime_server_info_t **out) {
  char err[CHIME__ERRLEN] = "";
  chime_server_info_t *m = calloc(1, sizeof(*m));
  int rc = m ? every_shard(client, ASK_INFO, add_info, m, err, sizeof(err))
             : chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
  if (rc == 0) {
    *out = m;
    m = NULL;
  }
  chime_server_info_free(m);
  return rc ? chime__detail(rc, err) : 0;
}

#define ADD(type, name, kind, unit, help) o->name += s->name;
static void add_table(chime_table_stats_t *o, const chime_table_stats_t *s) {
  uint64_t newest = o->newest_version > s->newest_version ? o->newest_version
                                                          : s->newest_version;
  CHIME_TABLE_STATS_FIELDS(ADD)
  o->newest_version = newest; /* a version, not a count: the highest */
  add_leaf_bytes(o->leaf_bytes, &o->nleaf_bytes, s->leaf_bytes, s->nleaf_bytes);
}
static void add_server(chime_stats_t *o, const chime_stats_t *s) {
  CHIME_SERVER_STATS_FIELDS(ADD)
}
#undef ADD

static int add_stats(chime__member_t *mb, uint32_t k, void *answer, void *acc,
                     char *err, size_t errlen) {
  chime_stats_t *m = acc, *one = answer;
  int rc = 0;
  (void)k;
  (void)mb;
  chime_table_stats_t *tables =
      realloc(m->tables, (m->ntables + one->ntables + 1) * sizeof(*tables));
  chime_stream_stats_t *streams =
      realloc(m->streams, (m->nstreams + one->nstreams + 1) * sizeof(*streams));
  if (tables)
    m->tables = tables;
  if (streams)
    m->streams = streams;
  if (!tables || !streams) {
    rc = chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  for (uint32_t t = 0; t < one->ntables; t++) {
    uint32_t j = 0;
    while (j < m->ntables && strcmp(m->tables[j].name, one->tables[t].name))
      j++;
    if (j == m->ntables)
      m->tables[m->ntables++] = one->tables[t];
    else
      add_table(&m->tables[j], &one->tables[t]);
  }
  if (one->nstreams) /* else one->streams is NULL, as rings above */
    memcpy(m->streams + m->nstreams, one->streams,
           one->nstreams * sizeof(*streams));
  m->nstreams += one->nstreams;
  add_server(m, one);
cleanup:
  return rc;
}

int chime__fanout_stats(chime_client_t *client, chime_stats_t **out) {
  char err[CHIME__ERRLEN] = "";
  chime_stats_t *m = calloc(1, sizeof(*m));
  int rc = m ? every_shard(client, ASK_STATS, add_stats, m, err, sizeof(err))
             : chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
  if (rc == 0) {
    *out = m;
    m = NULL;
  }
  chime_stats_free(m);
  return rc ? chime__detail(rc, err) : 0;
}

/* One shard's part of a MutatePriorities: the updates and deletes whose
 * keys it issued. */
typedef struct {
  uint32_t shard, member;
  size_t n, ndel;
  uint64_t *keys, *dels;
  double *prios;
} part_t;

static part_t *part_of(part_t *parts, uint32_t *nparts, uint32_t shard) {
  for (uint32_t p = 0; p < *nparts; p++)
    if (parts[p].shard == shard)
      return &parts[p];
  return NULL;
}

int chime__fanout_mutate(chime_client_t *client, const char *table,
                         const uint64_t *keys, const double *priorities,
                         size_t n, const uint64_t *deletes, size_t ndeletes,
                         chime_mutate_result_t *out) {
  char err[CHIME__ERRLEN] = "";
  part_t *parts = calloc(CHIME__MAX_SHARDS, sizeof(*parts));
  uint32_t nparts = 0;
  chime_mutate_result_t sum = {0, 0, 0};
  int rc = 0;
  if (!parts) {
    rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
    goto cleanup;
  }
  /* Every check before anything is sent: a bad priority or a key of an
   * unknown shard refuses the whole call, and nothing changes. */
  if ((rc = chime__check_priorities(table, priorities, n, err, sizeof(err))))
    goto cleanup;
  for (size_t i = 0; i < n + ndeletes; i++) {
    uint64_t key = i < n ? keys[i] : deletes[i - n];
    uint32_t shard = chime_key_shard(key);
    part_t *p = part_of(parts, &nparts, shard);
    if (!p) {
      uint32_t member;
      if ((rc = chime__shards_owner(client->set, shard, &member, err,
                                    sizeof(err))) != 0) {
        char why[CHIME__ERRLEN];
        snprintf(why, sizeof(why), "%s", err);
        chime__fail(err, sizeof(err), rc,
                    "MutatePriorities on '%s': key %llu: %s", table,
                    (unsigned long long)key, why);
        goto cleanup;
      }
      p = &parts[nparts++];
      p->shard = shard;
      p->member = member;
      if (!(p->keys = malloc((n ? n : 1) * sizeof(*p->keys))) ||
          !(p->prios = malloc((n ? n : 1) * sizeof(*p->prios))) ||
          !(p->dels = malloc((ndeletes ? ndeletes : 1) * sizeof(*p->dels)))) {
        rc = chime__fail(err, sizeof(err), CHIME_ENOMEM, "out of memory");
        goto cleanup;
      }
    }
    if (i < n) {
      p->keys[p->n] = key;
      p->prios[p->n++] = priorities[i];
    } else {
      p->dels[p->ndel++] = key;
    }
  }
  /* Shard by shard: a failure leaves the parts sent before it done (each
   * shard's part is all or nothing, the whole call is not). */
  for (uint32_t k = 0; k < nparts; k++) {
    part_t *p = &parts[k];
    chime_mutate_result_t r;
    chime__member_t *mb = chime__shards_at(client->set, p->member);
    rc = chime__conn_mutate(mb->client, table, p->keys, p->prios, p->n, p->dels,
                            p->ndel, &r);
    if (rc) {
      shard_failed(mb, rc, err, sizeof(err));
      goto cleanup;
    }
    sum.updated += r.updated;
    sum.deleted += r.deleted;
    sum.unknown += r.unknown;
  }
  if (out)
    *out = sum;
cleanup:
  for (uint32_t k = 0; parts && k < nparts; k++) {
    free(parts[k].keys);
    free(parts[k].prios);
    free(parts[k].dels);
  }
  free(parts);
  return rc ? chime__detail(rc, err) : 0;
}

static int add_checkpoint(chime__member_t *mb, uint32_t k, void *acc, char *err,
                          size_t errlen) {
  chime_checkpoint_result_t *sum = acc, one;
  int rc = chime__conn_checkpoint(mb->client, &one);
  if (rc)
    return shard_failed(mb, rc, err, errlen);
  if (k == 0)
    memcpy(sum->path, one.path, sizeof(sum->path));
  sum->tables += one.tables;
  sum->items += one.items;
  sum->bytes += one.bytes;
  if (one.pause_ns > sum->pause_ns)
    sum->pause_ns = one.pause_ns;
  if (one.duration_ns > sum->duration_ns)
    sum->duration_ns = one.duration_ns;
  return 0;
}

int chime__fanout_checkpoint(chime_client_t *client,
                             chime_checkpoint_result_t *out) {
  char err[CHIME__ERRLEN] = "";
  chime_checkpoint_result_t sum;
  memset(&sum, 0, sizeof(sum));
  int rc = each_shard(client, add_checkpoint, &sum, err, sizeof(err));
  if (rc == 0 && out)
    *out = sum;
  return rc ? chime__detail(rc, err) : 0;
}

int chime__fanout_set_version(chime_client_t *client, const char *table,
                              uint64_t version, uint64_t *newest) {
  char err[CHIME__ERRLEN] = "";
  uint64_t most = 0;
  int rc = 0;
  /* Every shard holds some of the table's items: each is told (all at
   * once: shards that hang cost one timeout), and the first failure is
   * the answer once all were tried. */
  uint32_t n = chime__shards_count(client->set);
  chime__unary_t *u = calloc(n ? n : 1, sizeof(*u));
  if (!u)
    return chime__detail(CHIME_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < n; i++)
    chime__conn_set_version_begin(chime__shards_at(client->set, i)->client,
                                  table, version, &u[i]);
  for (uint32_t i = 0; i < n; i++) {
    chime__member_t *mb = chime__shards_at(client->set, i);
    uint64_t one = 0;
    int r = chime__conn_set_version_end(mb->client, &u[i], &one);
    if (r != 0 && rc == 0)
      rc = shard_failed(mb, r, err, sizeof(err));
    most = one > most ? one : most;
  }
  free(u);
  if (newest)
    *newest = most;
  return rc ? chime__detail(rc, err) : 0;
}
