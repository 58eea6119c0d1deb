/* chimectl over shards, against two real chimed (shards 1 and 2, 10 and 20
 * items): info, stats and checkpoint print a row per shard and a totals
 * row (text), {"shards": [...], "total": {...}} (--json); a shard that
 * cannot be reached gets an error row and exit 1 while the others still
 * print; a table configured unlike on another shard is said and exits 1;
 * one address prints as it always did (a server's own view); a target
 * that cannot be used (a port past 65535, a malformed address) exits 2
 * for every command and a server that does not answer 1; chime-actor
 * writes through the sharded target. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "chime/chime.h"
#include "harness.h"
#include "writes.h"

#define NSHARDS 2

static chime__chimed_t g_d[NSHARDS];
static char g_dir[NSHARDS][600];
static char g_bin[1024];
static char g_target[600];      /* "A,B" */
static char g_dead_target[800]; /* "A,DEAD,B" */
static char g_dead[64];         /* an address that refuses connections */
static int g_dead_fd = -1;      /* bound, never listening: refused at once */

static const uint64_t g_items[NSHARDS] = {10, 20};

static int setup(void **state) {
  (void)state;
  if (chime__harness_bin("examples/chimectl", g_bin, sizeof(g_bin)) == NULL)
    chime__skip("chimectl is not built");
  for (int i = 0; i < NSHARDS; i++) {
    char cfg[2048];
    snprintf(g_dir[i], sizeof(g_dir[i]), "%s/ckpt%d", chime__harness_tmpdir(),
             i + 1);
    snprintf(cfg, sizeof(cfg),
             "{\"shard\": %d, \"checkpoint\": {\"dir\": \"%s\"},\n"
             " \"tables\": [{\"name\": \"t\", \"spec\": \"x:u64[]\", "
             "\"capacity\": 1000, \"sampler\": \"fifo\"}]}\n",
             i + 1, g_dir[i]);
    int rc = chime__chimed_start_or_skip(&g_d[i], cfg, NULL, 30000);
    if (rc != 0)
      return -1;
    chime_client_t *c = NULL; /* counting samples into "t" */
    assert_int_equal(chime_client_create(&c, g_d[i].addr, NULL), 0);
    assert_int_equal(chime__write_counter(c, "t", 0, g_items[i], NULL), 0);
    chime_client_destroy(c);
  }
  if ((g_dead_fd = chime__refusing_addr(g_dead, sizeof(g_dead))) < 0)
    return -1;
  snprintf(g_target, sizeof(g_target), "%s,%s", g_d[0].addr, g_d[1].addr);
  snprintf(g_dead_target, sizeof(g_dead_target), "%s,%s,%s", g_d[0].addr,
           g_dead, g_d[1].addr);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int rc = 0, st;
  for (int i = 0; i < NSHARDS; i++)
    if (g_d[i].proc.pid > 0 && chime__chimed_stop(&g_d[i], 20000, &st))
      rc = -1;
  if (g_dead_fd >= 0)
    close(g_dead_fd);
  return rc;
}

/* Runs chimectl [--json] cmd target; its stdout into out (NUL-terminated),
 * stderr into err; returns its exit status (a generous bound: the dead
 * shard answers at once, refused). */
static int ctl(int json, const char *cmd, const char *target, char *out,
               size_t outlen, char *err, size_t errlen) {
  const char *argv[] = {g_bin, json ? "--json" : cmd, json ? cmd : target,
                        json ? target : NULL, NULL};
  int st = 0;
  assert_int_equal(chime__proc_run(argv, 60000, out, outlen, err, errlen, &st),
                   0);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static json_t *parse(const char *text) {
  json_error_t jerr;
  json_t *j = json_loads(text, 0, &jerr);
  if (j == NULL)
    fail_msg("not JSON (%s): %s", jerr.text, text);
  return j;
}

static uint64_t num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v))
    fail_msg("no integer '%s'", key);
  return (uint64_t)json_integer_value(v);
}

/* The one table's object in a server's (or the total's) info or stats. */
static json_t *table_t(json_t *o) {
  json_t *tables = json_object_get(o, "tables");
  assert_true(json_is_array(tables));
  assert_int_equal(json_array_size(tables), 1);
  json_t *t = json_array_get(tables, 0);
  assert_string_equal(json_string_value(json_object_get(t, "name")), "t");
  return t;
}

/* A shard's entry that answered: its address (as given) and shard. */
static json_t *shard_ok(json_t *shards, size_t i, const char *addr,
                        uint64_t shard) {
  json_t *s = json_array_get(shards, i);
  assert_non_null(s);
  assert_null(json_object_get(s, "error"));
  assert_non_null(strstr(json_string_value(json_object_get(s, "address")),
                         strchr(addr, ':')));
  assert_int_equal(num(s, "shard"), shard);
  return s;
}

/* The text row that starts with head, or fails. */
static const char *row(const char *text, const char *head) {
  for (const char *l = text; l != NULL && *l != '\0';) {
    if (strncmp(l, head, strlen(head)) == 0)
      return l;
    l = strchr(l, '\n');
    l = l ? l + 1 : NULL;
  }
  fail_msg("no row starting '%s' in:\n%s", head, text);
  return NULL;
}

/* "total  N of M shards" and the numbers after it. */
static void total_row(const char *text, unsigned answered, unsigned n,
                      uint64_t *v, int nv) {
  const char *l = row(text, "total ");
  unsigned a = 0, m = 0;
  int used = 0;
  assert_int_equal(sscanf(l, "total %u of %u shards%n", &a, &m, &used), 2);
  assert_int_equal(a, answered);
  assert_int_equal(m, n);
  l += used;
  for (int k = 0; k < nv; k++) {
    assert_int_equal(sscanf(l, "%" SCNu64 "%n", &v[k], &used), 1);
    l += used;
  }
}

/* "<shard> <address>" at the start of a shard's row. */
static void shard_row(const char *text, unsigned shard, const char *addr) {
  char head[300];
  snprintf(head, sizeof(head), "%-6u ", shard);
  const char *l = row(text, head);
  const char *end = strchr(l, '\n');
  const char *at = strstr(l, strchr(addr, ':'));
  assert_true(at != NULL && (end == NULL || at < end));
}

static void test_info(void **state) {
  (void)state;
  static char out[65536], err[4096];
  assert_int_equal(ctl(1, "info", g_target, out, sizeof(out), err, sizeof(err)),
                   0);
  json_t *j = parse(out), *shards = json_object_get(j, "shards");
  assert_int_equal(json_array_size(shards), NSHARDS);
  for (size_t i = 0; i < NSHARDS; i++) {
    json_t *s = shard_ok(shards, i, g_d[i].addr, i + 1);
    assert_int_equal(num(table_t(s), "size"), g_items[i]);
    assert_int_equal(num(table_t(s), "capacity"), 1000);
    assert_non_null(json_object_get(s, "version"));
  }
  json_t *total = json_object_get(j, "total"), *t = table_t(total);
  assert_int_equal(num(t, "size"), g_items[0] + g_items[1]);
  assert_int_equal(num(t, "capacity"), 2000);
  /* fifo: the mass is the size, summed as the sharded client sums it */
  assert_true(json_real_value(json_object_get(t, "mass")) ==
              (double)(g_items[0] + g_items[1]));
  assert_null(json_object_get(total, "shard")); /* one server's own */
  assert_null(json_object_get(total, "instance"));
  json_decref(j);

  assert_int_equal(ctl(0, "info", g_target, out, sizeof(out), err, sizeof(err)),
                   0);
  shard_row(out, 1, g_d[0].addr);
  shard_row(out, 2, g_d[1].addr);
  uint64_t v[3]; /* tables, size, capacity */
  total_row(out, 2, 2, v, 3);
  assert_int_equal(v[0], 1);
  assert_int_equal(v[1], g_items[0] + g_items[1]);
  assert_int_equal(v[2], 2000);
  row(out, "TABLE "); /* the union's tables below */
}

static void test_stats(void **state) {
  (void)state;
  static char out[65536], err[4096];
  assert_int_equal(
      ctl(1, "stats", g_target, out, sizeof(out), err, sizeof(err)), 0);
  json_t *j = parse(out), *shards = json_object_get(j, "shards");
  assert_int_equal(json_array_size(shards), NSHARDS);
  for (size_t i = 0; i < NSHARDS; i++) {
    json_t *s = shard_ok(shards, i, g_d[i].addr, i + 1);
    assert_int_equal(num(table_t(s), "inserts"), g_items[i]);
    assert_true(json_is_array(json_object_get(s, "streams")));
  }
  json_t *total = json_object_get(j, "total");
  assert_int_equal(num(table_t(total), "inserts"), g_items[0] + g_items[1]);
  assert_int_equal(num(table_t(total), "size"), g_items[0] + g_items[1]);
  assert_true(json_is_integer(json_object_get(total, "ring_bytes_total")));
  json_decref(j);

  assert_int_equal(
      ctl(0, "stats", g_target, out, sizeof(out), err, sizeof(err)), 0);
  shard_row(out, 1, g_d[0].addr);
  shard_row(out, 2, g_d[1].addr);
  uint64_t v[3]; /* size, capacity, inserts */
  total_row(out, 2, 2, v, 3);
  assert_int_equal(v[0], g_items[0] + g_items[1]);
  assert_int_equal(v[1], 2000);
  assert_int_equal(v[2], g_items[0] + g_items[1]);
}

static void test_checkpoint(void **state) {
  (void)state;
  static char out[65536], err[4096];
  assert_int_equal(
      ctl(1, "checkpoint", g_target, out, sizeof(out), err, sizeof(err)), 0);
  json_t *j = parse(out), *shards = json_object_get(j, "shards");
  assert_int_equal(json_array_size(shards), NSHARDS);
  for (size_t i = 0; i < NSHARDS; i++) {
    json_t *s = shard_ok(shards, i, g_d[i].addr, i + 1);
    assert_int_equal(num(s, "items"), g_items[i]);
    const char *path = json_string_value(json_object_get(s, "path"));
    assert_non_null(path);
    assert_int_equal(strncmp(path, g_dir[i], strlen(g_dir[i])), 0);
  }
  json_t *total = json_object_get(j, "total");
  assert_int_equal(num(total, "items"), g_items[0] + g_items[1]);
  assert_int_equal(num(total, "tables"), 2);
  assert_null(json_object_get(total, "path")); /* each shard has its own */
  json_decref(j);

  assert_int_equal(
      ctl(0, "checkpoint", g_target, out, sizeof(out), err, sizeof(err)), 0);
  shard_row(out, 1, g_d[0].addr);
  shard_row(out, 2, g_d[1].addr);
  for (int i = 0; i < NSHARDS; i++)
    assert_non_null(strstr(out, g_dir[i]));
  uint64_t v[2]; /* tables, items */
  total_row(out, 2, 2, v, 2);
  assert_int_equal(v[0], 2);
  assert_int_equal(v[1], g_items[0] + g_items[1]);
}

/* A shard that refuses connections: its error row (and a JSON entry with
 * the error), the others' rows and a total over them, exit 1, for each
 * command. */
static void test_unreachable_shard(void **state) {
  (void)state;
  static char out[65536], err[4096];
  const char *cmds[] = {"info", "stats", "checkpoint"};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(
        ctl(1, cmds[k], g_dead_target, out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "1 of 3 shards did not answer"));
    json_t *j = parse(out), *shards = json_object_get(j, "shards");
    assert_int_equal(json_array_size(shards), 3);
    shard_ok(shards, 0, g_d[0].addr, 1);
    shard_ok(shards, 2, g_d[1].addr, 2);
    json_t *dead = json_array_get(shards, 1);
    assert_non_null(strstr(json_string_value(json_object_get(dead, "address")),
                           strchr(g_dead, ':')));
    assert_true(json_is_null(json_object_get(dead, "shard")));
    assert_true(json_is_string(json_object_get(dead, "error")));
    assert_string_equal(json_string_value(json_object_get(dead, "code")),
                        "CHIME_EUNAVAILABLE");
    json_t *total = json_object_get(j, "total");
    if (k == 2)
      assert_int_equal(num(total, "items"), g_items[0] + g_items[1]);
    else
      assert_int_equal(num(table_t(total), "size"), g_items[0] + g_items[1]);
    json_decref(j);

    assert_int_equal(
        ctl(0, cmds[k], g_dead_target, out, sizeof(out), err, sizeof(err)), 1);
    shard_row(out, 1, g_d[0].addr);
    shard_row(out, 2, g_d[1].addr);
    const char *l = row(out, "-      ");
    assert_non_null(strstr(l, g_dead));
    assert_non_null(strstr(l, "error: CHIME_EUNAVAILABLE"));
    total_row(out, 2, 3, NULL, 0);
  }
}

/* A third server whose table t has another spec and which says it is
 * shard 1 too: info says both, naming the addresses, and exits 1 (a
 * sharded client refuses such a target). */
static void test_table_differs(void **state) {
  (void)state;
  static char out[65536], err[4096];
  chime__chimed_t odd;
  int rc = chime__chimed_start(
      &odd,
      "{\"shard\": 1, \"tables\": [{\"name\": \"t\", \"spec\": \"y:u32[]\", "
      "\"capacity\": 10, \"sampler\": \"fifo\"}]}\n",
      NULL, 30000);
  assert_int_equal(rc, 0);
  char target[1000];
  snprintf(target, sizeof(target), "%s,%s", g_target, odd.addr);
  assert_int_equal(ctl(1, "info", target, out, sizeof(out), err, sizeof(err)),
                   1);
  assert_non_null(strstr(err, "table 't' differs"));
  assert_non_null(strstr(err, strchr(odd.addr, ':')));
  assert_non_null(strstr(err, "both say they are shard 1"));
  json_t *j = parse(out);
  assert_int_equal(json_array_size(json_object_get(j, "shards")), 3);
  json_decref(j);
  int st;
  assert_int_equal(chime__chimed_stop(&odd, 20000, &st), 0);
}

/* One server named twice (two addresses, one GetInfo instance): a row
 * that says so, the command sent to it once (one checkpoint), the totals
 * counting it once, as the sharded client's own info does; exit 0. */
static void test_same_server_twice(void **state) {
  (void)state;
  static char out[65536], err[4096];
  char target[600], head[300];
  /* 127.0.0.1:P and ipv4:127.0.0.1:P: two addresses, one server */
  snprintf(target, sizeof(target), "%s,ipv4:%s", g_d[0].addr, g_d[0].addr);
  assert_int_equal(ctl(0, "stats", target, out, sizeof(out), err, sizeof(err)),
                   0);
  snprintf(head, sizeof(head), "%-6u ipv4:%s", 1u, g_d[0].addr);
  const char *l = row(out, head);
  assert_true(strncmp(strstr(l, "  the same server as "),
                      "  the same server as ", 21) == 0);
  uint64_t v[3]; /* size, capacity, inserts */
  total_row(out, 2, 2, v, 3);
  assert_int_equal(v[0], g_items[0]);
  assert_int_equal(v[1], 1000);

  assert_int_equal(
      ctl(1, "checkpoint", target, out, sizeof(out), err, sizeof(err)), 0);
  json_t *j = parse(out), *shards = json_object_get(j, "shards");
  json_t *twice = json_array_get(shards, 1);
  assert_string_equal(json_string_value(json_object_get(twice, "same_as")),
                      g_d[0].addr);
  assert_null(json_object_get(twice, "path")); /* not checkpointed again */
  assert_int_equal(num(json_object_get(j, "total"), "items"), g_items[0]);
  json_decref(j);
}

/* One address: the server's own view, no shard rows. */
static void test_one_address(void **state) {
  (void)state;
  static char out[65536], err[4096];
  assert_int_equal(
      ctl(1, "info", g_d[0].addr, out, sizeof(out), err, sizeof(err)), 0);
  json_t *j = parse(out);
  assert_null(json_object_get(j, "shards"));
  assert_int_equal(num(table_t(j), "size"), g_items[0]);
  json_decref(j);
  assert_int_equal(
      ctl(0, "info", g_d[0].addr, out, sizeof(out), err, sizeof(err)), 0);
  assert_int_equal(strncmp(out, "chimed ", 7), 0);
}

/* A target chime cannot use is a command-line mistake: every command
 * exits 2 with "chimectl: TARGET: ..." saying why, and prints nothing.
 * A port past 65535 used to wrap around (P + 65536 reached the server on
 * P, exit 0 with its tables); an unclosed IPv6 bracket said "Failed to
 * create secure client channel". A server that does not answer is 1 for
 * every command, top too (it was 2). */
static void test_bad_target(void **state) {
  (void)state;
  static char out[65536], err[4096];
  const char *port = strrchr(g_d[0].addr, ':') + 1;
  char wrapped[3][320];
  snprintf(wrapped[0], sizeof(wrapped[0]), "127.0.0.1:%ld",
           strtol(port, NULL, 10) + 65536);
  snprintf(wrapped[1], sizeof(wrapped[1]), "localhost:%ld",
           strtol(port, NULL, 10) + 65536);
  snprintf(wrapped[2], sizeof(wrapped[2]), "%s,127.0.0.1:%ld", g_d[1].addr,
           strtol(port, NULL, 10) + 65536);
  const char *bad[] = {wrapped[0], wrapped[1], wrapped[2], "ipv6:[::1",
                       "localhost"};
  const char *says[] = {"1..65535", "1..65535", "1..65535",
                        "not [address]:port", "no port"};
  const char *cmds[] = {"info", "stats", "checkpoint", "top"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
      int rc = ctl(0, cmds[k], bad[i], out, sizeof(out), err, sizeof(err));
      char head[128];
      snprintf(head, sizeof(head), "chimectl: %s: ", bad[i]);
      if (rc != 2 || strstr(err, head) == NULL || !strstr(err, says[i]))
        fail_msg("%s %s: exit %d, stdout '%.200s', stderr '%s' (want 2, "
                 "'%s...%s')",
                 cmds[k], bad[i], rc, out, err, head, says[i]);
      assert_string_equal(out, "");
    }
  }
  for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
    int rc = ctl(0, cmds[k], g_dead, out, sizeof(out), err, sizeof(err));
    if (rc != 1)
      fail_msg("%s %s (refuses connections): exit %d, not 1: %s", cmds[k],
               g_dead, rc, err);
  }
}

/* chime-actor takes the sharded target as given: its writer binds to one
 * shard, and the totals grow by what it inserted. Last: it changes the
 * shards' sizes. */
static void test_actor_over_shards(void **state) {
  (void)state;
  static char out[65536], err[4096];
  char actor[1024];
  assert_non_null(
      chime__harness_bin("examples/chime-actor", actor, sizeof(actor)));
  const char *argv[] = {actor, "--server", g_target, "--table",
                        "t",   "--count",  "40",     NULL};
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn(&p, argv, NULL), 0);
  int st = 0;
  assert_int_equal(chime__proc_wait(&p, 60000, &st), 0);
  chime__proc_kill(&p);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_int_equal(
      ctl(1, "stats", g_target, out, sizeof(out), err, sizeof(err)), 0);
  json_t *j = parse(out);
  assert_int_equal(num(table_t(json_object_get(j, "total")), "inserts"),
                   g_items[0] + g_items[1] + 40);
  json_decref(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_unreachable_shard),
      cmocka_unit_test(test_table_differs),
      cmocka_unit_test(test_same_server_twice),
      cmocka_unit_test(test_one_address),
      cmocka_unit_test(test_bad_target),
      cmocka_unit_test(test_actor_over_shards),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
