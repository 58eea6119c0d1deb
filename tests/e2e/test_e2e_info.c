/* GetInfo's facts for a sharded client, against the real chimed:
 * `instance` is nonzero, 63 bits, the same for every call and connection
 * to one server (by 127.0.0.1:PORT and ipv4:127.0.0.1:PORT, through two
 * clients and raw channels), and differs between two chimed; each table's
 * `mass` is what its sampler draws against: a prioritized table's sum of
 * priority^priority_exponent over its items (within 1e-9 relative, as
 * inserts, updates and deletes change it), every other table's size;
 * a client of two shards reports each table's masses summed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "writes.h"
#include "rawcall.h"

#define EXPONENT 0.6
#define ITEMS 50

static const char *config =
    "{\"tables\": [{\"name\": \"per\", \"spec\": \"x:u64[]\", \"capacity\": "
    "1000, \"sampler\": \"prioritized\", \"priority_exponent\": 0.6},\n"
    " {\"name\": \"uni\", \"spec\": \"x:u64[]\", \"capacity\": 1000, "
    "\"sampler\": \"uniform\"},\n"
    " {\"name\": \"uprem\", \"spec\": \"x:u64[]\", \"capacity\": 1000, "
    "\"sampler\": \"uniform\", \"remover\": \"prioritized\", "
    "\"priority_exponent\": 2},\n"
    " {\"name\": \"q\", \"spec\": \"x:u64[]\", \"capacity\": 1000, "
    "\"sampler\": \"fifo\"}]}\n";

CHIME__CHIMED_GROUP(config)

/* GetInfo through a raw channel of its own: the instance on the wire. */
static uint64_t raw_instance(const char *addr) {
  grpc_channel *ch = chime__raw_channel(addr);
  assert_non_null(ch);
  Chime__V1__GetInfoRequest req = CHIME__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_unary(ch, "/chime.v1.Chime/GetInfo", &req.base,
                                    &chime__v1__get_info_response__descriptor,
                                    &resp, &st, details, sizeof details),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_non_null(resp);
  uint64_t id = ((Chime__V1__GetInfoResponse *)resp)->instance;
  protobuf_c_message_free_unpacked(resp, NULL);
  grpc_channel_destroy(ch);
  return id;
}

static uint64_t client_instance(chime_client_t *c) {
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(c, &info), 0);
  uint64_t id = info->instance;
  chime_server_info_free(info);
  return id;
}

static void test_instance(void **state) {
  (void)state;
  uint64_t id = client_instance(client);
  assert_true(id != 0);
  assert_true(id <= (uint64_t)INT64_MAX); /* 63 bits */
  assert_true(client_instance(client) == id);
  assert_true(raw_instance(chimed.addr) == id);
  /* The same server by another target (gRPC's ipv4: scheme, no name to
   * resolve) and on a connection of its own: a sharded client counts it
   * once. ("localhost:PORT" would do as well, but gRPC 1.51's c-ares
   * resolver leaks 10 bytes resolving a name, which LeakSanitizer
   * reports.) */
  const char *port = strrchr(chimed.addr, ':');
  assert_non_null(port);
  char other[64];
  snprintf(other, sizeof other, "ipv4:127.0.0.1%s", port);
  assert_true(raw_instance(other) == id);
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_true(client_instance(c) == id);
  chime_client_destroy(c);

  /* Another chimed: another instance. */
  chime__chimed_t two;
  assert_int_equal(chime__chimed_start(&two, config, NULL, 30000), 0);
  uint64_t id2 = raw_instance(two.addr);
  int st = 0;
  assert_int_equal(chime__chimed_stop(&two, 20000, &st), 0);
  assert_true(id2 != 0);
  assert_true(id2 != id);
}

static void assert_rel(double got, double want) {
  if (!(fabs(got - want) <= 1e-9 * fabs(want)))
    fail_msg("mass %.17g, want %.17g", got, want);
}

/* Priorities spread over five orders of magnitude, and a few 0. */
static double prio_of(uint64_t i) {
  return i % 7 == 3 ? 0.0 : 1e-3 * pow(1.3, (double)i);
}

static void test_mass(void **state) {
  (void)state;
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(client, &info), 0);
  for (uint32_t i = 0; i < info->ntables; i++)
    assert_true(info->tables[i].mass == 0); /* empty */
  chime_server_info_free(info);

  const char *names[] = {"per", "uni", "uprem", "q"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    assert_int_equal(chime__write_counter(client, names[i], 0, ITEMS, prio_of),
                     0);
  double want = 0;
  for (uint64_t i = 0; i < ITEMS; i++)
    want += pow(prio_of(i), EXPONENT);
  assert_int_equal(chime_client_info(client, &info), 0);
  assert_int_equal(chime__info_table(info, "per")->size, ITEMS);
  assert_rel(chime__info_table(info, "per")->mass, want);
  /* Not prioritized samplers: the size, whatever the priorities (uprem's
   * remover keeps their sum, but it is not what its sampler draws on). */
  assert_true(chime__info_table(info, "uni")->mass == ITEMS);
  assert_true(chime__info_table(info, "uprem")->mass == ITEMS);
  assert_true(chime__info_table(info, "q")->mass == ITEMS);
  chime_server_info_free(info);

  /* The first item's priority to 5, the second deleted. */
  uint64_t keys[2] = {1, 2};
  chime_mutate_result_t r;
  assert_int_equal(chime_client_mutate_priorities(client, "per", keys,
                                                  (double[]){5.0}, 1, keys + 1,
                                                  1, &r),
                   0);
  assert_int_equal(r.updated, 1);
  assert_int_equal(r.deleted, 1);
  want += pow(5.0, EXPONENT) - pow(prio_of(0), EXPONENT) -
          pow(prio_of(1), EXPONENT);
  assert_int_equal(chime_client_info(client, &info), 0);
  assert_int_equal(chime__info_table(info, "per")->size, ITEMS - 1);
  assert_rel(chime__info_table(info, "per")->mass, want);
  chime_server_info_free(info);
}

/* A client of two shards: its info sums each table's mass, as its size,
 * so that it is the union's (the first shard's mass alone before). */
static void test_mass_summed_over_shards(void **state) {
  (void)state;
  chime__chimed_t two;
  chime_client_t *c2 = NULL, *both = NULL;
  chime_server_info_t *a = NULL, *b = NULL, *u = NULL;
  const char *args[] = {"--shard", "2", NULL};
  assert_int_equal(chime__chimed_start(&two, config, args, 30000), 0);
  assert_int_equal(chime_client_create(&c2, two.addr, NULL), 0);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c2, "per", NULL), 0);
  for (uint64_t i = 0; i < 7; i++)
    assert_int_equal(chime_writer_append(w, &i, sizeof i, 3.0 + (double)i), 0);
  assert_int_equal(chime_writer_close(w), 0);
  char target[600];
  snprintf(target, sizeof target, "%s,%s", chimed.addr, two.addr);
  assert_int_equal(chime_client_create(&both, target, NULL), 0);
  assert_int_equal(chime_client_nshards(both), 2);
  assert_int_equal(chime_client_info(client, &a), 0);
  assert_int_equal(chime_client_info(c2, &b), 0);
  assert_int_equal(chime_client_info(both, &u), 0);
  const char *names[] = {"per", "uni", "uprem", "q"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const chime_table_info_t *ta = chime__info_table(a, names[i]),
                             *tb = chime__info_table(b, names[i]),
                             *tu = chime__info_table(u, names[i]);
    assert_int_equal(tu->size, ta->size + tb->size);
    assert_rel(tu->mass, ta->mass + tb->mass);
  }
  assert_true(chime__info_table(b, "per")->mass >
              0); /* the sum has two terms */
  assert_true(chime__info_table(a, "per")->mass > 0);
  /* Stats over the shards the same way (no stream open on either). */
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(both, &st), 0);
  assert_int_equal(st->nstreams, 0);
  for (uint32_t i = 0; i < st->ntables; i++)
    assert_int_equal(st->tables[i].size,
                     chime__info_table(u, st->tables[i].name)->size);
  chime_stats_free(st);
  chime_server_info_free(a);
  chime_server_info_free(b);
  chime_server_info_free(u);
  chime_client_destroy(both);
  assert_int_equal(chime__chimed_stop_client(&two, c2), 0);
}

/* One chimed named twice in a target (by two addresses, as
 * dns:///localhost names 127.0.0.1 and ::1): the client sees one server
 * by its instance, so info is not doubled and MutatePriorities finds one
 * owner for its keys instead of two servers claiming one shard. */
static void test_same_server_twice(void **state) {
  (void)state;
  char target[600];
  snprintf(target, sizeof target, "%s,ipv4:%s", chimed.addr, chimed.addr);
  chime_client_t *twice = NULL;
  chime_server_info_t *one = NULL, *u = NULL;
  assert_int_equal(chime_client_create(&twice, target, NULL), 0);
  assert_int_equal(chime_client_nshards(twice), 2);
  assert_int_equal(chime_client_info(client, &one), 0);
  assert_int_equal(chime_client_info(twice, &u), 0);
  assert_int_equal(u->ntables, one->ntables);
  for (uint32_t i = 0; i < one->ntables; i++) {
    assert_int_equal(chime__info_table(u, one->tables[i].name)->size,
                     one->tables[i].size);
    assert_int_equal(chime__info_table(u, one->tables[i].name)->capacity,
                     one->tables[i].capacity);
  }
  uint64_t key = 3;
  chime_mutate_result_t r;
  if (chime_client_mutate_priorities(twice, "uni", &key, (double[]){2.0}, 1,
                                     NULL, 0, &r) != 0)
    fail_msg("mutate: %s", chime_last_error());
  assert_int_equal(r.updated + r.unknown, 1);
  chime_server_info_free(one);
  chime_server_info_free(u);
  chime_client_destroy(twice);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_instance),
      cmocka_unit_test(test_mass),
      cmocka_unit_test(test_mass_summed_over_shards),
      cmocka_unit_test(test_same_server_twice),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
