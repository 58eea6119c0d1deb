/* A dns: target against real chimed shards: the client follows the name
 * as it changes. The test runs in a mount namespace of its own (a user
 * namespace too when not root) with its own /etc/hosts, where the name
 * shards.chime.test resolves to 127.0.0.2 and later to 127.0.0.3 as well:
 * two chimed listen on those addresses with one port, as two pods of a
 * headless Service do. A shard that appears is used within one
 * re-resolution period (a new writer binds to it, info sums it); one that
 * leaves the name is no longer summed. Skips where namespaces cannot be
 * made. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define NAME "shards.chime.test"
#define RESOLVE_MS 300

static char hosts_path[600];
static const char *no_ns; /* why namespaces could not be made */

static int write_proc(const char *path, const char *text) {
  int fd = open(path, O_WRONLY);
  if (fd < 0)
    return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A private /etc/hosts, for this process and the chimed it spawns. Runs
 * first in main, while the process has one thread (unshare of a user
 * namespace needs that). */
static void private_hosts(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWNS) != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      no_ns = "cannot unshare a mount namespace";
      return;
    }
    char map[64];
    snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
    if (write_proc("/proc/self/setgroups", "deny") != 0 ||
        write_proc("/proc/self/uid_map", map) != 0) {
      no_ns = "cannot map the user namespace";
      return;
    }
    snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
    if (write_proc("/proc/self/gid_map", map) != 0) {
      no_ns = "cannot map the user namespace's group";
      return;
    }
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    no_ns = "cannot make the mounts private";
    return;
  }
  if (chime__harness_write_file("hosts", "127.0.0.1 localhost\n", hosts_path,
                                sizeof hosts_path) != 0 ||
      mount(hosts_path, "/etc/hosts", NULL, MS_BIND, NULL) != 0)
    no_ns = "cannot bind a hosts file over /etc/hosts";
}

/* Rewrites the hosts file in place (the bind mount keeps its inode). */
static void set_hosts(const char *lines) {
  char text[512], path[600];
  snprintf(text, sizeof text, "127.0.0.1 localhost\n%s", lines);
  assert_int_equal(chime__harness_write_file("hosts", text, path, sizeof path),
                   0);
}

static const char *config(uint32_t shard) {
  static char buf[2][512];
  char *b = buf[shard % 2];
  snprintf(b, 512,
           "{\"shard\": %u, \"tables\": [{\"name\": \"t\", \"spec\": "
           "\"x:u64[]\", \"capacity\": 100000, \"sampler\": \"uniform\"}]}",
           shard);
  return b;
}

static uint64_t table_size(chime_client_t *c) {
  chime_server_info_t *info = NULL;
  if (chime_client_info(c, &info) != 0)
    fail_msg("info: %s", chime_last_error());
  assert_int_equal(info->ntables, 1);
  uint64_t n = info->tables[0].size;
  chime_server_info_free(info);
  return n;
}

static void write_n(chime_client_t *c, uint64_t n) {
  chime_writer_t *w = NULL;
  if (chime_writer_open(&w, c, "t", NULL) != 0)
    fail_msg("writer: %s", chime_last_error());
  for (uint64_t x = 1; x <= n; x++)
    assert_int_equal(chime_writer_append(w, &x, sizeof x, 1.0), 0);
  assert_int_equal(chime_writer_close(w), 0);
}

static void test_follows_the_name(void **state) {
  (void)state;
  if (no_ns)
    chime__skip(no_ns);
  chime__chimed_t a, b;
  const char *aargs[] = {"--listen", "127.0.0.2:0", NULL};
  int rc = chime__chimed_start_or_skip(&a, config(1), aargs, 30000);
  assert_int_equal(rc, 0);
  const char *port = strrchr(a.addr, ':');
  assert_non_null(port);
  char blisten[64];
  snprintf(blisten, sizeof blisten, "127.0.0.3%s", port);
  const char *bargs[] = {"--listen", blisten, NULL};
  assert_int_equal(chime__chimed_start(&b, config(2), bargs, 30000), 0);

  set_hosts("127.0.0.2 " NAME "\n");
  char target[128];
  snprintf(target, sizeof target, "dns:///" NAME "%s", port);
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.resolve_interval_ms = RESOLVE_MS;
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, target, &o), 0);
  assert_int_equal(chime_client_nshards(c), 1);
  char want[64];
  snprintf(want, sizeof want, "ipv4:127.0.0.2%s", port);
  assert_string_equal(chime_client_shard_address(c, 0), want);
  write_n(c, 10);
  assert_int_equal(table_size(c), 10);

  /* The name gains the second pod: within a resolve period (plus a
   * generous margin for a busy machine) the client has it. */
  set_hosts("127.0.0.2 " NAME "\n127.0.0.3 " NAME "\n");
  int64_t t0 = chime__now_ms();
  while (chime_client_nshards(c) < 2 && chime__now_ms() - t0 < 30000) {
    (void)table_size(c); /* a call: the client resolves when it is due */
    chime__sleep_ms(20);
  }
  int64_t took = chime__now_ms() - t0;
  printf("second shard seen after %lld ms (resolve interval %d ms)\n",
         (long long)took, RESOLVE_MS);
  assert_int_equal(chime_client_nshards(c), 2);
  snprintf(want, sizeof want, "ipv4:127.0.0.3%s", port);
  assert_string_equal(chime_client_shard_address(c, 1), want);
  /* Two new writers: one binds to each shard (round robin). */
  write_n(c, 5);
  write_n(c, 5);
  assert_int_equal(table_size(chime_client_shard(c, 0)), 15);
  assert_int_equal(table_size(chime_client_shard(c, 1)), 5);
  assert_int_equal(table_size(c), 20);

  /* The first pod leaves the name: info no longer sums it, and new
   * writers all go to the second. */
  set_hosts("127.0.0.3 " NAME "\n");
  t0 = chime__now_ms();
  while (table_size(c) != 5 && chime__now_ms() - t0 < 30000)
    chime__sleep_ms(20);
  assert_int_equal(table_size(c), 5);
  write_n(c, 3);
  write_n(c, 3);
  assert_int_equal(table_size(chime_client_shard(c, 1)), 11);
  assert_int_equal(table_size(chime_client_shard(c, 0)), 15);

  chime_client_destroy(c);
  int st = 0;
  assert_int_equal(chime__chimed_stop(&a, 20000, &st), 0);
  assert_int_equal(chime__chimed_stop(&b, 20000, &st), 0);
}

int main(void) {
  private_hosts();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_follows_the_name, chime__harness_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
