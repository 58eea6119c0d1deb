/* chimed's config: the default, the example file, and every kind of mistake
 * named by key or table; the shard (config and server option) reaching
 * every table, and the connection age. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>

#include "chime/chime.h"
#include "server/config.h"
#include "server/config_table.h"
#include "server/state.h"

static chime__config_t cfg;

static void test_default(void **state) {
  char err[256] = "";
  (void)state;
  assert_int_equal(chime__config_default(&cfg, err, sizeof(err)), 0);
  assert_string_equal(cfg.listen, "127.0.0.1:50051");
  assert_string_equal(cfg.handoff_socket, "@auto");
  assert_int_equal(cfg.ntables, 1);
  assert_string_equal(cfg.tables[0].name, "demo");
  assert_int_equal(cfg.tables[0].capacity, 65536);
  assert_int_equal(cfg.tables[0].min_size, 1);
  assert_int_equal(cfg.tables[0].sampler, CHIME__SELECTOR_FIFO);
  assert_int_equal(chime_spec_sample_bytes(&cfg.tables[0].spec), 264);
  assert_int_equal(cfg.pin_host_memory, 0);
  assert_int_equal(cfg.max_calls_per_connection, 1024);
  assert_int_equal(cfg.max_calls, 65536);
}

static void test_full(void **state) {
  char err[256] = "";
  (void)state;
  const char *json =
      "{\"listen\":\"unix:/tmp/x.sock\", \"handoff_socket\":\"/tmp/h.sock\","
      " \"handoff_expires_ms\": 250, \"allowed_uids\":[1000, 1001],"
      " \"budgets\":{\"stream_ring_bytes\":1024,\"total_ring_bytes\":4096},"
      " \"pin_host_memory\": true, \"max_calls_per_connection\": 7,"
      " \"max_calls\": 9,"
      " \"tables\":[{\"name\":\"a\",\"spec\":\"x:u8[3]\",\"capacity\":10,"
      "\"sampler\":\"uniform\",\"min_size\":5},"
      " {\"name\":\"b\",\"spec\":\"y:f64\",\"capacity\":7}]}";
  assert_int_equal(chime__config_parse(&cfg, json, err, sizeof(err)), 0);
  assert_string_equal(cfg.listen, "unix:/tmp/x.sock");
  assert_string_equal(cfg.handoff_socket, "/tmp/h.sock");
  assert_int_equal(cfg.handoff_expires_ms, 250);
  assert_int_equal(cfg.nuids, 2);
  assert_int_equal(cfg.allowed_uids[1], 1001);
  assert_int_equal(cfg.stream_ring_bytes, 1024);
  assert_int_equal(cfg.total_ring_bytes, 4096);
  assert_int_equal(cfg.pin_host_memory, 1);
  assert_int_equal(cfg.max_calls_per_connection, 7);
  assert_int_equal(cfg.max_calls, 9);
  assert_int_equal(cfg.ntables, 2);
  assert_int_equal(cfg.tables[0].sampler, CHIME__SELECTOR_UNIFORM);
  assert_int_equal(cfg.tables[0].min_size, 5);
  assert_int_equal(cfg.tables[1].sampler, CHIME__SELECTOR_FIFO);
  assert_int_equal(cfg.tables[1].min_size, 1);
  assert_int_equal(chime_spec_sample_bytes(&cfg.tables[1].spec), 8);
}

static void test_selectors(void **state) {
  char err[256] = "";
  (void)state;
  const char *json =
      "{\"tables\":[{\"name\":\"p\",\"spec\":\"x:u8\",\"capacity\":10,"
      "\"sampler\":\"prioritized\",\"priority_exponent\":0.6,"
      "\"remover\":\"min_heap\",\"max_times_sampled\":3},"
      "{\"name\":\"s\",\"spec\":\"x:u8\",\"capacity\":10,"
      "\"sampler\":\"lifo\",\"max_times_sampled\":1},"
      "{\"name\":\"q\",\"spec\":\"x:u8\",\"capacity\":10,"
      "\"max_times_sampled\":2},"
      "{\"name\":\"u\",\"spec\":\"x:u8\",\"capacity\":10,"
      "\"sampler\":\"uniform\",\"remover\":\"max_heap\"}]}";
  assert_int_equal(chime__config_parse(&cfg, json, err, sizeof(err)), 0);
  assert_int_equal(cfg.tables[0].sampler, CHIME__SELECTOR_PRIORITIZED);
  assert_int_equal(cfg.tables[0].remover, CHIME__SELECTOR_MIN_HEAP);
  assert_true(cfg.tables[0].priority_exponent == 0.6);
  assert_int_equal(cfg.tables[0].max_times_sampled, 3);
  assert_int_equal(cfg.tables[1].sampler, CHIME__SELECTOR_LIFO);
  assert_int_equal(cfg.tables[1].remover, CHIME__SELECTOR_FIFO);
  assert_int_equal(cfg.tables[1].max_times_sampled, 1);
  assert_int_equal(cfg.tables[2].sampler, CHIME__SELECTOR_FIFO);
  assert_int_equal(cfg.tables[2].max_times_sampled, 2);
  assert_int_equal(cfg.tables[3].remover, CHIME__SELECTOR_MAX_HEAP);
  assert_int_equal(cfg.tables[3].max_times_sampled, 0);
  assert_true(cfg.tables[3].priority_exponent == 1.0);
  assert_true(cfg.tables[3].samples_per_insert == 0);
  /* A ratio without error_buffer gets the narrowest safe window. */
  assert_int_equal(
      chime__config_parse(&cfg,
                          "{\"tables\":[{\"name\":\"r\",\"spec\":\"x:u8\","
                          "\"capacity\":10,\"samples_per_insert\":2.5}]}",
                          err, sizeof(err)),
      0);
  assert_true(cfg.tables[0].samples_per_insert == 2.5);
  assert_true(cfg.tables[0].error_buffer == 2.5);
  /* A fifo table at max_times_sampled samples per insert or more, other
   * samplers (a remover makes room) and a sequence table (its oldest steps
   * leave) below it. */
  assert_int_equal(
      chime__config_parse(
          &cfg,
          "{\"tables\":[{\"name\":\"q\",\"spec\":\"x:u8\","
          "\"capacity\":4,\"samples_per_insert\":1},"
          "{\"name\":\"r\",\"spec\":\"x:u8\",\"capacity\":4,"
          "\"max_times_sampled\":3,\"samples_per_insert\":3.5},"
          "{\"name\":\"u\",\"spec\":\"x:u8\",\"capacity\":4,"
          "\"sampler\":\"uniform\",\"max_times_sampled\":1,"
          "\"samples_per_insert\":0.5},"
          "{\"name\":\"s\",\"spec\":\"x:u8\",\"capacity_steps\":64,"
          "\"sequence_length\":4,\"samples_per_insert\":0.5}]}",
          err, sizeof(err)),
      0);
  /* A sequence table's min_size up to the windows it holds at once: 4
   * without padding, one a step slot with it. */
  assert_int_equal(
      chime__config_parse(
          &cfg,
          "{\"tables\":[{\"name\":\"s\",\"spec\":\"x:f32\","
          "\"capacity_steps\":64,\"sequence_length\":16,\"stride\":16,"
          "\"min_size\":4},"
          "{\"name\":\"p\",\"spec\":\"x:f32\",\"capacity_steps\":64,"
          "\"sequence_length\":16,\"episode_end\":\"pad\","
          "\"min_size\":64}]}",
          err, sizeof(err)),
      0);
  /* Old configs: fifo is a queue (removed on sample), uniform keeps. */
  assert_int_equal(chime__config_default(&cfg, err, sizeof(err)), 0);
  assert_int_equal(cfg.tables[0].max_times_sampled, 1);
  assert_int_equal(cfg.tables[0].remover, CHIME__SELECTOR_FIFO);
  for (int s = CHIME__SELECTOR_FIFO; s <= CHIME__SELECTOR_MAX_HEAP; s++)
    assert_int_equal(chime__selector_kind_parse(chime__selector_kind_name(s)),
                     s);
}

static void test_example_file(void **state) {
  char err[512] = "", path[1024];
  (void)state;
  const char *src = getenv("CHIME_SOURCE_DIR");
  if (src == NULL)
    skip();
  snprintf(path, sizeof(path), "%s/examples/chimed.json", src);
  assert_int_equal(chime__config_load(&cfg, path, err, sizeof(err)), 0);
  assert_true(cfg.ntables >= 1);
}

static void expect_bad(const char *json, const char *needle) {
  char err[512] = "";
  int rc = chime__config_parse(&cfg, json, err, sizeof(err));
  if (rc != CHIME_EINVAL || strstr(err, needle) == NULL)
    fail_msg("config %s: rc %d, err '%s', wanted '%s'", json, rc, err, needle);
}

#define T(name, spec, rest)                                                    \
  "{\"tables\":[{\"name\":\"" name "\",\"spec\":\"" spec "\"" rest "}]}"

#define TA "\"tables\":[{\"name\":\"a\",\"spec\":\"x:u8\",\"capacity\":1}]"

/* The names in the first cells of docs/operations.md's nth table of keys
 * (0: the server's, 1: a table's), each cut at its first '.' (`tls.cert`
 * is key tls). */
static int doc_keys(int nth, char names[][64], int most) {
  const char *src = getenv("CHIME_SOURCE_DIR");
  char path[1024], line[4096];
  snprintf(path, sizeof(path), "%s/docs/operations.md", src ? src : ".");
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int n = 0, table = -1, in = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "| key | type | default | meaning |", 34) == 0) {
      in = ++table == nth;
      continue;
    }
    if (!in || strncmp(line, "| ---", 5) == 0)
      continue;
    if (strncmp(line, "| ", 2) != 0)
      break; /* the table's end */
    char *end = strchr(line + 2, '|');
    for (char *p = line + 2; end != NULL && p < end && n < most;) {
      char *a = strchr(p, '`');
      char *b = a != NULL ? strchr(a + 1, '`') : NULL;
      if (a == NULL || b == NULL || b > end)
        break;
      size_t len = strcspn(a + 1, ".`");
      snprintf(names[n++], 64, "%.*s", (int)len, a + 1);
      p = b + 1;
    }
  }
  fclose(f);
  return n;
}

/* The keys key(i) names and the docs' nth table name the same set. */
static void same_keys(int nth, const char *(*key)(uint32_t)) {
  static char doc[96][64];
  int ndoc = doc_keys(nth, doc, 96);
  assert_true(ndoc > 0);
  for (uint32_t k = 0; key(k) != NULL; k++) {
    int found = 0;
    for (int i = 0; i < ndoc; i++)
      found |= strcmp(doc[i], key(k)) == 0;
    if (!found)
      fail_msg("key '%s' is not in docs/operations.md's table %d", key(k), nth);
  }
  for (int i = 0; i < ndoc; i++) {
    int found = 0;
    for (uint32_t k = 0; key(k) != NULL; k++)
      found |= strcmp(doc[i], key(k)) == 0;
    if (!found)
      fail_msg("docs/operations.md's table %d has key '%s', which the "
               "parser lacks",
               nth, doc[i]);
  }
}

/* docs/operations.md's tables of keys name every key the parser reads
 * (config.c's server_keys, config_table.c's keys), and no other: the
 * docs and the parser cannot drift. */
static void test_keys_documented(void **state) {
  (void)state;
  same_keys(0, chime__config_server_key);
  same_keys(1, chime__config_table_key);
}

static void test_mistakes(void **state) {
  (void)state;
  expect_bad("{\"tables\":[]}", "'tables'");
  expect_bad("{}", "'tables' is required");
  expect_bad("[1]", "JSON object");
  expect_bad("{\"tables\":", "line 1");
  expect_bad("{\"listne\":\"x\"," TA "}", "'listne': unknown key");
  expect_bad("{\"listen\":5," TA "}", "'listen': expected a string");
  expect_bad("{\"max_calls\":0," TA "}", "'max_calls'");
  /* The kernel's own range for TCP_RTO_MAX_MS, or 0. */
  expect_bad("{\"tcp_rto_max_ms\":500," TA "}",
             "'tcp_rto_max_ms' must be 0 (the kernel's) or 1000..120000");
  expect_bad("{\"tcp_rto_max_ms\":120001," TA "}", "'tcp_rto_max_ms'");
  expect_bad("{\"max_calls_per_connection\":1000001," TA "}",
             "'max_calls_per_connection'");
  expect_bad(T("a", "x:u8", ",\"capacity\":0"),
             "table 'a': capacity must be at least 1");
  expect_bad(T("a", "x:u8", ",\"capacity\":\"10\""),
             "table 'a': 'capacity': expected a non-negative integer");
  expect_bad(T("a", "x:u8", ",\"capacity\":-1"), "'capacity'");
  expect_bad(T("a", "x:q32", ",\"capacity\":1"), "table 'a': 'spec': bad spec");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"colour\":1"),
             "table 'a': 'colour': unknown key");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"sampler\":\"lilo\""),
             "table 'a': 'sampler': expected \"fifo\", \"lifo\"");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"remover\":\"oldest\""),
             "table 'a': 'remover': expected \"fifo\"");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":1,\"sampler\":\"fifo\",\"remover\":"
               "\"uniform\""),
             "table 'a': 'remover': a fifo sampler");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"max_times_sampled\":0"),
             "table 'a': 'max_times_sampled': a fifo sampler needs a limit");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"max_times_sampled\":-1"),
             "table 'a': 'max_times_sampled'");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":1,\"sampler\":\"uniform\","
               "\"max_times_sampled\":4294967296"),
             "table 'a': 'max_times_sampled': must be 0..4294967295");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":1,\"sampler\":\"uniform\","
               "\"priority_exponent\":0.5"),
             "table 'a': 'priority_exponent': only a prioritized");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":1,\"sampler\":\"prioritized\","
               "\"priority_exponent\":-1"),
             "table 'a': 'priority_exponent': expected a number");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":1,\"sampler\":\"prioritized\","
               "\"priority_exponent\":\"1\""),
             "table 'a': 'priority_exponent'");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":1,\"samples_per_insert\":4,"
               "\"error_buffer\":3"),
             "table 'a': 'error_buffer': 3 is below max(1, "
             "samples_per_insert) = 4");
  /* A fifo queue's items give max_times_sampled samples each, and its
   * full table waits for room: fewer samples per insert stall. */
  expect_bad(T("q", "x:u8[4]",
               ",\"capacity\":4,\"sampler\":\"fifo\","
               "\"samples_per_insert\":0.5,\"min_size\":1"),
             "table 'q': 'samples_per_insert' 0.5 is below "
             "'max_times_sampled' 1 of a fifo sampler");
  expect_bad(T("q", "x:u8",
               ",\"capacity\":100,\"max_times_sampled\":3,"
               "\"samples_per_insert\":2.9,\"error_buffer\":1000"),
             "'samples_per_insert' 2.9 is below 'max_times_sampled' 3");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"error_buffer\":3"),
             "table 'a': 'error_buffer': only a rate limit uses it");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"samples_per_insert\":0"),
             "table 'a': 'samples_per_insert': expected a number in (0..1e9");
  expect_bad(T("a", "x:u8", ",\"capacity\":4294967295"),
             "table 'a': capacity 4294967295 exceeds 4294967294 items");
  expect_bad(T("a", "x:u8", ",\"capacity\":2,\"min_size\":3"),
             "table 'a': min_size 3 exceeds capacity 2");
  /* 64 steps in blocks of 4, windows of 16 every 16: 4 at once at most. */
  expect_bad(T("s", "x:f32",
               ",\"capacity_steps\":64,\"sequence_length\":16,"
               "\"stride\":16,\"min_size\":5"),
             "table 's': min_size 5 exceeds the 4 windows the table can hold "
             "at once (capacity_steps 64, sequence_length 16, stride 16, "
             "episode_end \"drop\")");
  expect_bad(T("s", "x:f32", ",\"capacity_steps\":64,\"sequence_length\":100"),
             "table 's': min_size 1 exceeds the 0 windows");
  /* As Reverb's limiters (it used to act as 1). */
  expect_bad(T("a", "x:u8", ",\"capacity\":2,\"min_size\":0"),
             "table 'a': 'min_size': must be at least 1");
  /* Ragged leaves are for plain tables. */
  expect_bad(T("a", "x:u8, t:i32[<=64]",
               ",\"capacity_steps\":8,\"sequence_length\":2"),
             "table 'a': leaf 't' is ragged: sequences keep fixed-shape steps");
  expect_bad(T("a", "t:i32[3,<=64]", ",\"capacity\":2"),
             "only the first dimension may be ragged");
  /* A window's priority weighs in the sum tree like any item's. */
  expect_bad(T("a", "x:u8",
               ",\"capacity_steps\":8,\"sequence_length\":2,"
               "\"sampler\":\"prioritized\",\"initial_priority\":1e300"),
             "table 'a': 'initial_priority': 1e+300^1 exceeds 1e+298");
  expect_bad(T("a", "x:u8",
               ",\"capacity_steps\":8,\"sequence_length\":2,"
               "\"sampler\":\"prioritized\",\"initial_priority\":1e200,"
               "\"priority_exponent\":2"),
             "table 'a': 'initial_priority': 1e+200^2 exceeds");
  expect_bad(T("a", "x:u8[1099511627776]", ",\"capacity\":2"), "table 'a'");
  expect_bad(T("a b", "x:u8", ",\"capacity\":2"), "tables[0]: name");
  expect_bad("{\"tables\":[{\"spec\":\"x:u8\",\"capacity\":1}]}",
             "tables[0]: 'name'");
  expect_bad("{\"tables\":[{\"name\":\"a\",\"capacity\":1}]}",
             "table 'a': 'spec' is required");
  expect_bad("{\"tables\":[{\"name\":\"a\",\"spec\":\"x:u8\"}]}",
             "table 'a': 'capacity' is required");
  expect_bad("{\"tables\":[{\"name\":\"a\",\"spec\":\"x:u8\",\"capacity\":1},"
             "{\"name\":\"a\",\"spec\":\"x:u8\",\"capacity\":1}]}",
             "table 'a': declared twice");
  expect_bad("{\"budgets\":{\"stream_ring_bytes\":0}," TA "}",
             "'budgets.stream_ring_bytes'");
  expect_bad("{\"budgets\":{\"ring\":1}," TA "}",
             "'budgets.ring': unknown key");
  expect_bad(
      "{\"budgets\":{\"stream_ring_bytes\":10,\"total_ring_bytes\":5}," TA "}",
      "exceeds total_ring_bytes");
  expect_bad("{\"allowed_uids\":[\"root\"]," TA "}", "'allowed_uids[0]'");
  expect_bad("{\"pin_host_memory\":1," TA "}", "'pin_host_memory'");
  expect_bad("{\"listen\":\"a\",\"listen\":\"b\"," TA "}", "duplicate");
}

/* The writer memory (docs/protocol.md, "Which writers the server
 * remembers"): per table, 4096 writers and 60 s by default. */
static void test_writer_memory(void **state) {
  char err[256] = "";
  (void)state;
  const char *json =
      "{\"tables\":[{\"name\":\"a\",\"spec\":\"x:u8\",\"capacity\":1},"
      "{\"name\":\"b\",\"spec\":\"x:u8\",\"capacity\":1,"
      "\"max_writers\":65536,\"writer_idle_ms\":0}]}";
  assert_int_equal(chime__config_parse(&cfg, json, err, sizeof(err)), 0);
  assert_int_equal(cfg.tables[0].max_writers, 4096);
  assert_int_equal(cfg.tables[0].writer_idle_ms, 60000);
  assert_int_equal(cfg.tables[1].max_writers, 65536);
  assert_int_equal(cfg.tables[1].writer_idle_ms, 0);
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"max_writers\":0"),
             "table 'a': 'max_writers': must be 1..65536");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"max_writers\":65537"),
             "table 'a': 'max_writers': must be 1..65536");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"writer_idle_ms\":-1"),
             "table 'a': 'writer_idle_ms'");
  expect_bad(T("a", "x:u8", ",\"capacity\":1,\"writer_idle_ms\":86400001"),
             "table 'a': 'writer_idle_ms': must be 0..86400000");
}

/* tls: cert and key together, client_ca optional, files that open; the
 * paths are kept for chime_server_listen, which reads them. */
static void test_tls(void **state) {
  (void)state;
  char err[512] = "", text[1024];
  /* Any readable file passes here; PEM is checked when the server listens. */
  const char *f = "/proc/self/status";
  snprintf(text, sizeof(text),
           "{\"tls\":{\"cert\":\"%s\",\"key\":\"%s\"}," TA "}", f, f);
  assert_int_equal(chime__config_parse(&cfg, text, err, sizeof(err)), 0);
  assert_string_equal(cfg.tls.cert, f);
  assert_string_equal(cfg.tls.key, f);
  assert_string_equal(cfg.tls.client_ca, "");
  snprintf(text, sizeof(text),
           "{\"tls\":{\"cert\":\"%s\",\"key\":\"%s\",\"client_ca\":"
           "\"%s\"}," TA "}",
           f, f, f);
  assert_int_equal(chime__config_parse(&cfg, text, err, sizeof(err)), 0);
  assert_string_equal(cfg.tls.client_ca, f);
  assert_int_equal(chime__config_default(&cfg, err, sizeof(err)), 0);
  assert_string_equal(cfg.tls.cert, "");
  expect_bad("{\"tls\":{\"cert\":\"/proc/self/status\"}," TA "}",
             "'tls': needs both 'cert' and 'key'");
  expect_bad("{\"tls\":{\"cert\":\"/nonexistent/c.pem\",\"key\":"
             "\"/proc/self/status\"}," TA "}",
             "'tls.cert': cannot read '/nonexistent/c.pem'");
  expect_bad("{\"tls\":{\"cert\":\"\"}," TA "}", "'tls.cert': expected");
  expect_bad("{\"tls\":{\"ca\":\"x\"}," TA "}", "'tls.ca': unknown key");
  expect_bad("{\"tls\":[]," TA "}", "'tls': expected an object");
}

/* checkpoint: dir required, interval_s and keep in range, defaults 0 and
 * 3; --restore latest without a dir refused at create. */
static void test_checkpoint(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(chime__config_default(&cfg, err, sizeof(err)), 0);
  assert_string_equal(cfg.checkpoint.dir, "");
  assert_int_equal(cfg.checkpoint.keep, 3);
  assert_int_equal(
      chime__config_parse(&cfg, "{\"checkpoint\":{\"dir\":\"/tmp/c\"}," TA "}",
                          err, sizeof(err)),
      0);
  assert_string_equal(cfg.checkpoint.dir, "/tmp/c");
  assert_int_equal(cfg.checkpoint.interval_s, 0);
  assert_int_equal(cfg.checkpoint.keep, 3);
  assert_int_equal(
      chime__config_parse(&cfg,
                          "{\"checkpoint\":{\"dir\":\"d\",\"interval_s\":60,"
                          "\"keep\":1}," TA "}",
                          err, sizeof(err)),
      0);
  assert_int_equal(cfg.checkpoint.interval_s, 60);
  assert_int_equal(cfg.checkpoint.keep, 1);
  expect_bad("{\"checkpoint\":{\"keep\":2}," TA "}",
             "'checkpoint': needs 'dir'");
  expect_bad("{\"checkpoint\":{\"dir\":\"d\",\"keep\":0}," TA "}",
             "'checkpoint.keep': must be 1..1000");
  expect_bad("{\"checkpoint\":{\"dir\":\"d\",\"interval_s\":-1}," TA "}",
             "'checkpoint.interval_s'");
  expect_bad("{\"checkpoint\":{\"dir\":\"\"}," TA "}", "'checkpoint.dir'");
  expect_bad("{\"checkpoint\":{\"dir\":\"d\",\"every\":1}," TA "}",
             "'checkpoint.every': unknown key");
  expect_bad("{\"checkpoint\":\"d\"," TA "}",
             "'checkpoint': expected an object");
  chime_server_t *srv = NULL;
  chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
  o.restore = "latest";
  assert_int_equal(chime_server_create(&srv, &o), CHIME_EINVAL);
  assert_null(srv);
  assert_non_null(strstr(chime_last_error(), "no checkpoint dir"));
}

/* NULL options are the built-in default config; a NULL out is refused
 * with a sentence. */
static void test_server_null_opts(void **state) {
  (void)state;
  chime_server_t *srv = NULL;
  assert_int_equal(chime_server_create(&srv, NULL), 0);
  assert_non_null(srv);
  chime_server_destroy(srv);
  assert_int_equal(chime_server_create(NULL, NULL), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "chime_server_create"));
}

/* The config's sequence keys: a valid table and each refusal, named. */
static void expect_sequence(const char *table, const char *want_err) {
  static chime__config_t seq_cfg;
  char json[1024], err[512] = "";
  snprintf(json, sizeof(json), "{\"tables\": [%s]}", table);
  int rc = chime__config_parse(&seq_cfg, json, err, sizeof(err));
  if (want_err == NULL) {
    if (rc != 0)
      fail_msg("%s: %s", table, err);
    return;
  }
  assert_int_equal(rc, CHIME_EINVAL);
  if (strstr(err, want_err) == NULL)
    fail_msg("%s: error '%s' does not say '%s'", table, err, want_err);
}

/* Policy versions: max_staleness on a plain table (0 when absent) and on
 * a sequence table (its windows carry their oldest step's version). */
static void test_max_staleness(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("a", "x:u8", ",\"capacity\":8,\"max_staleness\":3"),
                          err, sizeof(err)),
      0);
  assert_int_equal(cfg.tables[0].max_staleness, 3);
  assert_int_equal(chime__config_parse(&cfg, "{" TA "}", err, sizeof(err)), 0);
  assert_int_equal(cfg.tables[0].max_staleness, 0);
  expect_bad(T("a", "x:u8", ",\"capacity\":8,\"max_staleness\":-1"),
             "'max_staleness'");
  /* A sequence table's windows carry their oldest step's version. */
  assert_int_equal(chime__config_parse(&cfg,
                                       T("s", "o:u8",
                                         ",\"capacity_steps\":100,"
                                         "\"sequence_length\":4,"
                                         "\"max_staleness\":2"),
                                       err, sizeof(err)),
                   0);
  assert_int_equal(cfg.tables[0].max_staleness, 2);
}

/* staleness_weight: "inverse" on a plain prioritized table ("none", the
 * default, anywhere); another value, another sampler or a sequence table
 * is refused. */
static void test_staleness_weight(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("a", "x:u8",
                            ",\"capacity\":8,\"sampler\":\"prioritized\","
                            "\"staleness_weight\":\"inverse\""),
                          err, sizeof(err)),
      0);
  assert_int_equal(cfg.tables[0].staleness_weight, CHIME__STALE_WEIGHT_INVERSE);
  assert_int_equal(
      chime__config_parse(
          &cfg, T("a", "x:u8", ",\"capacity\":8,\"staleness_weight\":\"none\""),
          err, sizeof(err)),
      0);
  assert_int_equal(cfg.tables[0].staleness_weight, CHIME__STALE_WEIGHT_NONE);
  expect_bad(T("a", "x:u8",
               ",\"capacity\":8,\"sampler\":\"prioritized\","
               "\"staleness_weight\":\"square\""),
             "\"none\" or \"inverse\"");
  expect_bad(T("a", "x:u8",
               ",\"capacity\":8,\"sampler\":\"uniform\","
               "\"staleness_weight\":\"inverse\""),
             "prioritized sampler's draws");
  expect_bad(T("s", "o:u8",
               ",\"capacity_steps\":100,\"sequence_length\":4,"
               "\"sampler\":\"prioritized\",\"staleness_weight\":\"inverse\""),
             "plain tables only");
}

/* pace_batch and version_leaf (docs/replay.md, "Pacing producers",
 * "Per-token versions"): pacing needs max_staleness in a plain table; a
 * version leaf is a ragged one-dimensional integer leaf kept raw, named
 * in the error otherwise. */
static void test_pace_and_version_leaf(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("a", "t:i32[<=8], v:u64[<=8 ~t]",
                            ",\"capacity\":8,\"max_staleness\":2,"
                            "\"pace_batch\":4,\"version_leaf\":\"v\""),
                          err, sizeof(err)),
      0);
  assert_int_equal(cfg.tables[0].pace_batch, 4);
  assert_int_equal(cfg.tables[0].version_leaf, 2);
  expect_bad(T("a", "x:u8", ",\"capacity\":8,\"pace_batch\":4"),
             "'pace_batch': pacing holds producers within max_staleness");
  expect_bad(T("s", "o:u8",
               ",\"capacity_steps\":100,\"sequence_length\":4,"
               "\"max_staleness\":2,\"pace_batch\":4"),
             "in a plain table");
  expect_bad(T("a", "t:i32[<=8]", ",\"capacity\":8,\"version_leaf\":\"w\""),
             "'version_leaf': expected the name of a leaf of the spec (no "
             "leaf 'w')");
  expect_bad(T("a", "t:i32[<=8]", ",\"capacity\":8,\"version_leaf\":3"),
             "'version_leaf': expected the name of a leaf of the spec");
  expect_bad(T("a", "t:i32[<=8], v:f32[<=8]",
               ",\"capacity\":8,\"version_leaf\":\"v\""),
             "leaf 'v' must be ragged, one-dimensional, of an integer dtype");
  expect_bad(
      T("a", "t:i32[<=8], v:u64[8]", ",\"capacity\":8,\"version_leaf\":\"v\""),
      "leaf 'v' must be ragged");
  expect_bad(T("a", "t:i32[<=8], v:u64[<=8]",
               ",\"capacity\":8,\"version_leaf\":\"v\","
               "\"compress\":{\"v\":3}"),
             "and not compressed");
}

/* data_dir: a path on a plain table (ragged and compressed leaves too);
 * not a string, empty, too long, or with a sequence table: refused,
 * saying why. */
static void test_data_dir(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("a", "x:u8", ",\"capacity\":8,\"data_dir\":\"/d\""),
                          err, sizeof(err)),
      0);
  assert_string_equal(cfg.tables[0].data_dir, "/d");
  expect_bad(T("a", "x:u8", ",\"capacity\":8,\"data_dir\":\"\""),
             "'data_dir': expected a directory path");
  expect_bad(T("a", "x:u8", ",\"capacity\":8,\"data_dir\":3"),
             "'data_dir': expected a directory path");
  /* Ragged and compressed leaves are kept in files (table_bytes.h). */
  assert_int_equal(chime__config_parse(&cfg,
                                       T("a", "x:u8[<=4]",
                                         ",\"capacity\":8,\"data_dir\":\"/d\""),
                                       err, sizeof(err)),
                   0);
  assert_int_equal(
      chime__config_parse(
          &cfg,
          T("a", "x:u8[64]",
            ",\"capacity\":8,\"compress\":{\"x\":3},\"data_dir\":\"/d\""),
          err, sizeof(err)),
      0);
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("s", "o:u8",
                            ",\"capacity_steps\":100,\"sequence_length\":4,"
                            "\"data_dir\":\"/d\""),
                          err, sizeof(err)),
      0);
  assert_int_equal(
      chime__config_parse(&cfg,
                          T("s", "o:u8[64]",
                            ",\"capacity_steps\":100,\"sequence_length\":4,"
                            "\"compress\":{\"o\":3},\"data_dir\":\"/d\""),
                          err, sizeof(err)),
      0);
}

static void test_sequence_keys(void **state) {
  (void)state;
  static chime__config_t seq_cfg;
  char err[512] = "";
  const char *ok =
      "{\"tables\": [{\"name\": \"s\", \"spec\": \"o:u8[4], r:f32\", "
      "\"capacity_steps\": 1000, \"sequence_length\": 80, \"stride\": 40, "
      "\"episode_end\": \"pad\", \"sampler\": \"prioritized\", "
      "\"priority_exponent\": 0.9, \"initial_priority\": \"max\"}]}";
  assert_int_equal(chime__config_parse(&seq_cfg, ok, err, sizeof(err)), 0);
  const chime__table_config_t *tc = &seq_cfg.tables[0];
  assert_int_equal(tc->capacity, 1000);
  assert_int_equal(tc->capacity_steps, 1000);
  assert_int_equal(tc->sequence_length, 80);
  assert_int_equal(tc->stride, 40);
  assert_int_equal(tc->episode_pad, 1);
  assert_int_equal(tc->initial_priority_max, 1);
#define S "\"name\": \"s\", \"spec\": \"o:u8[4]\", "
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 8}",
                  NULL);
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 8, "
                  "\"initial_priority\": 2.5, \"episode_end\": \"drop\"}",
                  NULL);
  expect_sequence("{" S "\"capacity\": 100, \"capacity_steps\": 100, "
                  "\"sequence_length\": 8}",
                  "sized by capacity_steps");
  expect_sequence("{" S "\"capacity_steps\": 100}", "needs both");
  expect_sequence("{" S "\"capacity\": 100, \"stride\": 2}",
                  "for sequence tables");
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 8, "
                  "\"stride\": 9}",
                  "exceeds sequence_length");
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 8, "
                  "\"sampler\": \"uniform\", \"remover\": \"fifo\"}",
                  "no remover");
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 8, "
                  "\"episode_end\": \"cut\"}",
                  "\"drop\" or \"pad\"");
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 8, "
                  "\"initial_priority\": -1}",
                  "\"max\" or a number");
  expect_sequence("{\"name\": \"s\", \"spec\": \"mask:u8[4]\", "
                  "\"capacity_steps\": 100, \"sequence_length\": 8, "
                  "\"episode_end\": \"pad\"}",
                  "adds a leaf of that name");
  expect_sequence("{" S "\"capacity_steps\": 0, \"sequence_length\": 8}",
                  "capacity_steps");
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 0}",
                  "must be 1..");
  /* Compressed leaves: a sequence table's step leaf goes, a plain table's
   * ragged leaf too; a ragged step leaf is named (no sequence table has
   * ragged steps). */
  expect_sequence("{" S "\"capacity_steps\": 100, \"sequence_length\": 4, "
                  "\"stride\": 1, \"compress\": {\"o\": 3}}",
                  NULL);
  expect_sequence("{\"name\": \"r\", \"spec\": \"o:u8[<=4]\", "
                  "\"capacity\": 8, \"compress\": {\"o\": 3}}",
                  NULL); /* a plain table's ragged leaf: at its length */
  expect_sequence("{\"name\": \"s\", \"spec\": \"o:u8[<=4]\", "
                  "\"capacity_steps\": 100, \"sequence_length\": 4, "
                  "\"compress\": {\"o\": 3}}",
                  "'o'");
#undef S
}

/* "shard" (1..65535; absent: 0, unsharded) and the connection age keys:
 * good values land, bad ones are named; the server option overrides the
 * config's shard and every table gets it. */
static void test_shard_and_age(void **state) {
  char err[512] = "";
  (void)state;
  assert_int_equal(chime__config_parse(&cfg, "{" TA "}", err, sizeof(err)), 0);
  assert_int_equal(cfg.shard, 0);
  assert_int_equal(cfg.max_connection_age_ms, 0);
  assert_int_equal(cfg.max_connection_age_grace_ms, 0);
  const char *good = "{\"shard\": 65535, \"max_connection_age_grace_ms\": "
                     "60000, \"max_connection_age_ms\": 1800000," TA "}";
  assert_int_equal(chime__config_parse(&cfg, good, err, sizeof(err)), 0);
  assert_int_equal(cfg.shard, 65535);
  assert_int_equal(cfg.max_connection_age_ms, 1800000);
  assert_int_equal(cfg.max_connection_age_grace_ms, 60000);
  assert_int_equal(
      chime__config_parse(&cfg, "{\"shard\": 1," TA "}", err, sizeof(err)), 0);
  assert_int_equal(cfg.shard, 1);
  const char *bad[] = {"0",     "65536", "-1",   "1.5",
                       "\"3\"", "true",  "null", "4294967297"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char json[256];
    snprintf(json, sizeof(json), "{\"shard\": %s," TA "}", bad[i]);
    expect_bad(json, "'shard': must be an integer 1..65535");
  }
  expect_bad("{\"shard\": 0," TA "}", "ordinal + 1");
  expect_bad("{\"max_connection_age_ms\": -1," TA "}",
             "'max_connection_age_ms'");
  expect_bad("{\"max_connection_age_ms\": 2147483648," TA "}",
             "'max_connection_age_ms': must be 0..2147483647");
  expect_bad("{\"max_connection_age_ms\": 1000, "
             "\"max_connection_age_grace_ms\": 0," TA "}",
             "'max_connection_age_grace_ms': must be 1..2147483647");
  expect_bad("{\"max_connection_age_grace_ms\": 5000," TA "}",
             "only a connection age uses it");
  expect_bad("{\"shards\": 2," TA "}", "'shards': unknown key");

  /* chime_server_create: the option over the config, on every table. */
  char path[512];
  const char *two = "{\"shard\": 7, \"tables\": ["
                    "{\"name\": \"a\", \"spec\": \"x:u8\", \"capacity\": 4},"
                    "{\"name\": \"b\", \"spec\": \"x:u8\", \"capacity\": 4}]}";
  snprintf(path, sizeof(path), "/tmp/chime-test-config-%d.json", (int)getpid());
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(two, f);
  fclose(f);
  const int opt[] = {-1, 300};
  const uint32_t want[] = {7, 300};
  for (int i = 0; i < 2; i++) {
    chime_server_t *srv = NULL;
    chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
    o.config_path = path;
    o.shard = opt[i];
    if (chime_server_create(&srv, &o) != 0)
      fail_msg("create: %s", chime_last_error());
    const chime__config_t *sc = &srv->cfg;
    assert_int_equal(sc->shard, want[i]);
    for (uint32_t t = 0; t < sc->ntables; t++)
      assert_int_equal(sc->tables[t].shard, want[i]);
    chime_server_destroy(srv);
  }
  const int wrong[] = {0, 65536};
  for (int i = 0; i < 2; i++) {
    chime_server_t *srv = NULL;
    chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
    o.config_path = path;
    o.shard = wrong[i];
    assert_int_equal(chime_server_create(&srv, &o), CHIME_EINVAL);
    assert_null(srv);
    assert_non_null(strstr(chime_last_error(), "must be an integer 1..65535"));
  }
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_server_null_opts),
      cmocka_unit_test(test_default),
      cmocka_unit_test(test_full),
      cmocka_unit_test(test_selectors),
      cmocka_unit_test(test_example_file),
      cmocka_unit_test(test_mistakes),
      cmocka_unit_test(test_keys_documented),
      cmocka_unit_test(test_tls),
      cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_writer_memory),
      cmocka_unit_test(test_sequence_keys),
      cmocka_unit_test(test_max_staleness),
      cmocka_unit_test(test_staleness_weight),
      cmocka_unit_test(test_pace_and_version_leaf),
      cmocka_unit_test(test_data_dir),
      cmocka_unit_test(test_shard_and_age),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
