/* Shards against the real chimed: GetInfo says the shard (the --shard flag
 * over the config's "shard"; 0 without either); every key it issues
 * carries it (InsertAck.first_key, the keys of sampled batches);
 * MutatePriorities naming another shard's key is refused whole, naming
 * the key and both shards; a checkpoint goes back into its own shard only;
 * a bad shard stops chimed at start (exit 2) with a clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "rawcall.h"

#define SHARD 7
#define KEY(s, n) ((uint64_t)(s) << 48 | (uint64_t)(n))

static chime__chimed_t chimed; /* config shard 3, --shard 7 */
static grpc_channel *ch;
static char ckpt_dir[600];

static int setup(void **state) {
  (void)state;
  char config[1024];
  snprintf(ckpt_dir, sizeof ckpt_dir, "%s/ckpt", chime__harness_tmpdir());
  snprintf(config, sizeof config,
           "{\"shard\": 3, \"checkpoint\": {\"dir\": \"%s\"},\n"
           " \"tables\": [{\"name\": \"q\", \"spec\": \"x:u64[]\", "
           "\"capacity\": 1000, \"sampler\": \"fifo\"},\n"
           " {\"name\": \"p\", \"spec\": \"x:u64[]\", \"capacity\": 1000, "
           "\"sampler\": \"max_heap\", \"max_times_sampled\": 0}]}\n",
           ckpt_dir);
  const char *args[] = {"--shard", "7", NULL};
  int rc = chime__chimed_start_or_skip(&chimed, config, args, 30000);
  if (rc != 0)
    return -1;
  grpc_init();
  ch = chime__raw_channel(chimed.addr);
  return ch != NULL ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return chime__raw_fixture_stop(&chimed, ch);
}

static uint32_t raw_info_shard(grpc_channel *c) {
  Chime__V1__GetInfoRequest req = CHIME__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_unary(c, "/chime.v1.Chime/GetInfo", &req.base,
                                    &chime__v1__get_info_response__descriptor,
                                    &resp, &st, details, sizeof details),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  assert_non_null(resp);
  uint32_t s = ((Chime__V1__GetInfoResponse *)resp)->shard;
  protobuf_c_message_free_unpacked(resp, NULL);
  return s;
}

/* GetInfo: the flag's shard (over the config's), through the wire and the
 * client; a chimed without either is shard 0. */
static void test_getinfo_shard(void **state) {
  (void)state;
  assert_int_equal(raw_info_shard(ch), SHARD);
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_int_equal(chime_client_info(c, &info), 0);
  assert_int_equal(info->shard, SHARD);
  chime_server_info_free(info);
  chime_client_destroy(c);

  chime__chimed_t plain;
  assert_int_equal(chime__chimed_start(&plain, NULL, NULL, 30000), 0);
  grpc_channel *pc = chime__raw_channel(plain.addr);
  assert_int_equal(raw_info_shard(pc), 0);
  grpc_channel_destroy(pc);
  int st = 0;
  assert_int_equal(chime__chimed_stop(&plain, 20000, &st), 0);
}

/* Inserts n samples x = base + i into table through a raw Insert; the
 * ack's first key. */
static uint64_t raw_insert(const char *table, uint32_t n, uint64_t base) {
  chime__raw_t r;
  uint64_t *x = malloc(n * sizeof(*x));
  assert_non_null(x);
  for (uint32_t i = 0; i < n; i++)
    x[i] = base + i;
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  req.table = (char *)table;
  req.count = n;
  req.data.data = (uint8_t *)x;
  req.data.len = n * sizeof(*x);
  req.id = 1;
  assert_int_equal(chime__raw_start(&r, ch, "/chime.v1.Chime/Insert", 10000),
                   0);
  assert_int_equal(chime__raw_send(&r, &req.base), 0);
  ProtobufCMessage *m = NULL;
  assert_int_equal(
      chime__raw_recv_msg(&r, &chime__v1__insert_ack__descriptor, &m, 10000),
      0);
  assert_non_null(m);
  uint64_t first = ((Chime__V1__InsertAck *)m)->first_key;
  protobuf_c_message_free_unpacked(m, NULL);
  grpc_status_code st;
  char details[256];
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof details, 10000),
                   0);
  assert_int_equal(st, GRPC_STATUS_OK);
  chime__raw_destroy(&r);
  free(x);
  return first;
}

/* The acks' keys and the batches' keys are shard 7's, counting from 1 per
 * table as an unsharded server's do; chime_key_shard() reads them. */
static void test_keys_carry_shard(void **state) {
  (void)state;
  uint64_t k1 = raw_insert("q", 5, 100);
  uint64_t k2 = raw_insert("q", 3, 105);
  assert_true(k1 == KEY(SHARD, 1));
  assert_true(k2 == KEY(SHARD, 6));
  assert_int_equal(chime_key_shard(k2), SHARD);
  chime_client_t *c = NULL;
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 8;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_int_equal(chime_stream_open(&s, c, "q", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  for (uint32_t j = 0; j < 8; j++) {
    assert_true(b.info[j].key == KEY(SHARD, 1 + j));
    assert_int_equal(((const uint64_t *)b.leaf[0].data)[j], 100 + j);
  }
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* A key of another shard (or of no server: an unsharded one's) refuses
 * the whole call, updates and deletes alike, naming the key and both
 * shards; nothing changes. This shard's keys that are not in the table
 * are unknown, as ever. */
static void test_mutate_other_shard_refused(void **state) {
  (void)state;
  uint64_t first = raw_insert("p", 4, 1);
  chime_client_t *c = NULL;
  chime_mutate_result_t res;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  uint64_t mine = first + 3, theirs = KEY(3, 4), unsharded = 4;
  uint64_t keys[2] = {mine, theirs};
  double prio[2] = {50, 50};
  assert_int_equal(
      chime_client_mutate_priorities(c, "p", keys, prio, 2, NULL, 0, &res),
      CHIME_EINVAL);
  const char *e = chime_last_error();
  char want[64];
  snprintf(want, sizeof want, "key %llu", (unsigned long long)theirs);
  if (strstr(e, want) == NULL || strstr(e, "shard 3") == NULL ||
      strstr(e, "shard 7") == NULL || strstr(e, "nothing was changed") == NULL)
    fail_msg("error: '%s'", e);
  assert_int_equal(chime_client_mutate_priorities(c, "p", NULL, NULL, 0,
                                                  &unsharded, 1, &res),
                   CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "shard 0"));
  /* Nothing changed: all four in, their max-heap order the inserted one
   * (priorities 1: insert order), key 4 not raised to the top. */
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 1;
  so.mode = CHIME_MODE_STREAM;
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(c, &info), 0);
  for (uint32_t i = 0; i < info->ntables; i++)
    if (strcmp(info->tables[i].name, "p") == 0)
      assert_int_equal(info->tables[i].size, 4);
  chime_server_info_free(info);
  /* Now this shard's key alone, with one that is not in: applied. */
  uint64_t ok[2] = {mine, KEY(SHARD, 999)};
  assert_int_equal(
      chime_client_mutate_priorities(c, "p", ok, prio, 2, NULL, 0, &res), 0);
  assert_int_equal(res.updated, 1);
  assert_int_equal(res.unknown, 1);
  assert_int_equal(chime_stream_open(&s, c, "p", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 10000), 0);
  assert_true(b.info[0].key == mine);
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
  chime_client_destroy(c);
}

/* Runs chimed with args until it exits (20 s at most); its exit status
 * and stderr. */
static int run_to_exit(const char *const extra[], char *text, size_t len) {
  char bin[512], out[700], errp[700];
  static int n;
  const char *argv[16];
  size_t k = 0;
  assert_non_null(chime__harness_bin("src/server/chimed", bin, sizeof bin));
  argv[k++] = bin;
  argv[k++] = "--listen";
  argv[k++] = "127.0.0.1:0";
  for (size_t i = 0; extra[i] != NULL && k < 15; i++)
    argv[k++] = extra[i];
  argv[k] = NULL;
  snprintf(out, sizeof out, "%s/exit-%d.out", chime__harness_tmpdir(), n);
  snprintf(errp, sizeof errp, "%s/exit-%d.err", chime__harness_tmpdir(), n++);
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn_err(&p, argv, out, errp), 0);
  int status = 0;
  if (chime__proc_wait(&p, 20000, &status) != 0) {
    chime__proc_kill(&p);
    fail_msg("chimed did not exit within 20 s");
  }
  FILE *f = fopen(errp, "r");
  assert_non_null(f);
  size_t got = fread(text, 1, len - 1, f);
  fclose(f);
  text[got] = '\0';
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A checkpoint of shard 7 restores into shard 7 (keys go on from where
 * they were), and into shard 3 or an unsharded chimed never: chimed stops
 * at start naming both shards. */
static void test_checkpoint_other_shard_refused(void **state) {
  (void)state;
  chime_client_t *c = NULL;
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  chime_client_destroy(c);
  char text[4096];
  const char *into3[] = {"--config",  chimed.config_path, "--shard", "3",
                         "--restore", "latest",           NULL};
  /* The config says 3: without --shard too. */
  const char *into_cfg[] = {"--config", chimed.config_path, "--restore",
                            "latest", NULL};
  const char *const *runs[] = {into3, into_cfg};
  for (int i = 0; i < 2; i++) {
    int code = run_to_exit(runs[i], text, sizeof text);
    if (code != 2 || strstr(text, "shard 7") == NULL ||
        strstr(text, "shard 3") == NULL)
      fail_msg("exit %d: '%s'", code, text);
  }
  /* Into shard 7: its keys go on after the checkpoint's. */
  chime__chimed_t again;
  const char *into7[] = {"--shard", "7", "--restore", r.path, NULL};
  assert_int_equal(
      chime__chimed_start(&again,
                          "{\"tables\": [{\"name\": \"q\", \"spec\": "
                          "\"x:u64[]\", \"capacity\": 1000}, "
                          "{\"name\": \"p\", \"spec\": \"x:u64[]\", "
                          "\"capacity\": 1000, \"sampler\": "
                          "\"max_heap\", \"max_times_sampled\": 0}]}",
                          into7, 30000),
      0);
  grpc_channel *keep = ch;
  ch = chime__raw_channel(again.addr);
  uint64_t k = raw_insert("p", 1, 9);
  assert_int_equal(chime_key_shard(k), SHARD);
  assert_true(k > KEY(SHARD, 4)); /* after the 4 restored */
  grpc_channel_destroy(ch);
  ch = keep;
  int st = 0;
  assert_int_equal(chime__chimed_stop(&again, 20000, &st), 0);
}

/* --shard and "shard" outside 1..65535: exit 2 and a sentence. */
static void test_bad_shard(void **state) {
  (void)state;
  char text[4096], cfg[600];
  const char *bad[] = {"0", "65536", "-3", "7x", "", " 7"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *args[] = {"--shard", bad[i], NULL};
    int code = run_to_exit(args, text, sizeof text);
    if (code != 2 || strstr(text, "--shard") == NULL ||
        strstr(text, "1..65535") == NULL)
      fail_msg("--shard '%s': exit %d, '%s'", bad[i], code, text);
  }
  assert_int_equal(
      chime__harness_write_file("shard0.json",
                                "{\"shard\": 0, \"tables\": [{\"name\": "
                                "\"t\", \"spec\": \"x:u8\", \"capacity\": 1}]}",
                                cfg, sizeof cfg),
      0);
  const char *args[] = {"--config", cfg, NULL};
  int code = run_to_exit(args, text, sizeof text);
  if (code != 2 || strstr(text, "'shard'") == NULL ||
      strstr(text, "ordinal + 1") == NULL)
    fail_msg("\"shard\": 0: exit %d, '%s'", code, text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_getinfo_shard),
      cmocka_unit_test(test_keys_carry_shard),
      cmocka_unit_test(test_mutate_other_shard_refused),
      cmocka_unit_test(test_checkpoint_other_shard_refused),
      cmocka_unit_test(test_bad_shard),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
