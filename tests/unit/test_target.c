/* Target strings (src/client/target.c): one server stays one address
 * exactly as given; comma lists, ipv4:/ipv6: lists and dns: names are
 * shard sets; bad lists and addresses (a port out of 1..65535, no port, a
 * malformed IP literal, an empty Unix path) are refused with a sentence
 * naming the target; a dns: name resolves
 * to every address, sorted and without repeats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chime/errors.h"
#include "client/target.h"

static chime__target_t parse_ok(const char *s) {
  chime__target_t t;
  char err[256] = "";
  int rc = chime__target_parse(s, 16, &t, err, sizeof err);
  if (rc != 0)
    fail_msg("'%s': %s", s, err);
  return t;
}

static void test_one_server(void **state) {
  (void)state;
  const char *ones[] = {"127.0.0.1:7001", "unix:/tmp/x.sock", "ipv4:10.0.0.1:5",
                        "[::1]:7", "localhost:9"};
  for (size_t i = 0; i < sizeof ones / sizeof *ones; i++) {
    chime__target_t t = parse_ok(ones[i]);
    assert_int_equal(t.sharded, 0);
    assert_int_equal(t.dns, 0);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.addrs[0], ones[i]);
    chime__target_free(&t);
  }
}

static void test_lists(void **state) {
  (void)state;
  chime__target_t t = parse_ok("127.0.0.1:7001,127.0.0.1:7002,unix:/s");
  assert_int_equal(t.sharded, 1);
  assert_int_equal(t.n, 3);
  assert_string_equal(t.addrs[0], "127.0.0.1:7001");
  assert_string_equal(t.addrs[1], "127.0.0.1:7002");
  assert_string_equal(t.addrs[2], "unix:/s");
  chime__target_free(&t);
  /* gRPC's lists name the scheme once: each address gets it. */
  t = parse_ok("ipv4:10.0.0.1:7001,10.0.0.2:7001");
  assert_int_equal(t.n, 2);
  assert_string_equal(t.addrs[0], "ipv4:10.0.0.1:7001");
  assert_string_equal(t.addrs[1], "ipv4:10.0.0.2:7001");
  chime__target_free(&t);
  t = parse_ok("ipv6:[::1]:7001,[::1]:7002");
  assert_int_equal(t.n, 2);
  assert_string_equal(t.addrs[1], "ipv6:[::1]:7002");
  chime__target_free(&t);
}

static void test_bad(void **state) {
  (void)state;
  const char *bad[] = {"dns:[]:5",    "",          "a:1,,b:2",
                       "a:1,",        ",a:1",      "a:1,dns:///b:2",
                       "dns:///name", "dns:///:5", "dns:///n:port",
                       "dns://auth"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    chime__target_t t;
    char err[256] = "";
    int rc = chime__target_parse(bad[i], 16, &t, err, sizeof err);
    if (rc != CHIME_EINVAL)
      fail_msg("'%s' gave %d, not CHIME_EINVAL", bad[i], rc);
    assert_true(strlen(err) > 0);
    assert_int_equal(t.n, 0);
  }
  /* More addresses than the limit. */
  chime__target_t t;
  char err[256] = "";
  assert_int_equal(chime__target_parse("a:1,b:1,c:1", 2, &t, err, sizeof err),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "more than 2"));
}

/* Every form a one-server address takes, alone and in a list. */
static void test_forms(void **state) {
  (void)state;
  const char *ones[] = {"h:1",
                        "h:65535",
                        "my-host.example:7001",
                        "[::1]:7001",
                        "[fe80::1%eth0]:7001",
                        "ipv4:10.0.0.1:7001",
                        "ipv4:///10.0.0.1:7001",
                        "ipv6:[::1]:7001",
                        "ipv6:///[::1]:7001",
                        "ipv6:[fe80::1%2]:7001",
                        "unix:/tmp/x.sock",
                        "unix:rel.sock",
                        "unix-abstract:name"};
  for (size_t i = 0; i < sizeof ones / sizeof *ones; i++) {
    chime__target_t t = parse_ok(ones[i]);
    assert_int_equal(t.n, 1);
    chime__target_free(&t);
    char list[128];
    /* An ipv4:/ipv6: list names its scheme once. */
    snprintf(list, sizeof list, "%s,%s", ones[i],
             strncmp(ones[i], "ipv", 3) == 0 ? strchr(ones[i], ':') + 1
                                             : "127.0.0.1:1");
    t = parse_ok(list);
    assert_int_equal(t.n, 2);
    chime__target_free(&t);
  }
  chime__target_t t = parse_ok("dns:///h:65535");
  assert_string_equal(t.port, "65535");
  chime__target_free(&t);
}

/* What gRPC would take and get wrong (a port wrapped around to another
 * server's, 443 for no port) or fail on every call with its own words: a
 * clear CHIME_EINVAL naming the target and why, for every form. */
static void test_bad_addresses(void **state) {
  (void)state;
  static const struct {
    const char *target, *why;
  } bad[] = {
      {"127.0.0.1:99999", "1..65535"},
      {"127.0.0.1:165535", "1..65535"},
      {"localhost:99999", "1..65535"},
      {"localhost:0", "1..65535"},
      {"localhost:-1", "1..65535"},
      {"localhost:+5", "1..65535"},
      {"localhost:5x", "1..65535"},
      {"localhost:", "1..65535"},
      {"[::1]:99999", "1..65535"},
      {"ipv4:127.0.0.1:99999", "1..65535"},
      {"ipv6:[::1]:70000", "1..65535"},
      {"a:1,b:99999", "1..65535"},
      {"ipv4:10.0.0.1:1,10.0.0.2:65536", "1..65535"},
      {"dns:///localhost:99999", "1..65535"},
      {"dns:localhost:0", "1..65535"},
      {"localhost", "no port"},
      {"ipv4:10.0.0.1", "no port"},
      {"ipv6:[::1]", "no port"},
      {":7001", "no host"},
      {"[]:7001", "no host"},
      {"ipv6:[::1", "not [address]:port"},
      {"[::1", "not [address]:port"},
      {"[::1]x:7", "not [address]:port"},
      {"ipv6:::1:7001", "brackets"},
      {"::1:7001", "brackets"},
      {"ipv4:10.0.0:7001", "not an IPv4 address"},
      {"ipv4:name:7001", "not an IPv4 address"},
      {"ipv6:[1.2.3.4]:7001", "not an IPv6 address"},
      {"[nope]:7001", "not an IPv6 address"},
      {"ipv6:[fe80::1%]:7001", "not an IPv6 address"},
      {"ipv4://auth/10.0.0.1:7001", "no authority"},
      {"unix:", "Unix socket path"},
      {"unix-abstract:", "Unix socket path"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    chime__target_t t;
    char err[256] = "";
    int rc = chime__target_parse(bad[i].target, 16, &t, err, sizeof err);
    if (rc != CHIME_EINVAL)
      fail_msg("'%s' gave %d, not CHIME_EINVAL", bad[i].target, rc);
    char named[128];
    snprintf(named, sizeof named, "target '%s'", bad[i].target);
    if (strstr(err, named) == NULL || strstr(err, bad[i].why) == NULL)
      fail_msg("'%s': '%s' does not say %s and '%s'", bad[i].target, err, named,
               bad[i].why);
    assert_int_equal(t.n, 0);
    assert_null(t.addrs);
  }
  /* A Unix path longer than sockaddr_un holds. */
  char longpath[160] = "unix:/";
  memset(longpath + 6, 'p', 140);
  chime__target_t t;
  char err[256] = "";
  assert_int_equal(chime__target_parse(longpath, 16, &t, err, sizeof err),
                   CHIME_EINVAL);
  assert_non_null(strstr(err, "1..107 bytes"));
}

static void test_dns(void **state) {
  (void)state;
  const char *forms[] = {"dns:///localhost:7001", "dns:localhost:7001",
                         "dns://8.8.8.8/localhost:7001"};
  for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
    chime__target_t t = parse_ok(forms[i]);
    assert_int_equal(t.sharded, 1);
    assert_int_equal(t.dns, 1);
    assert_int_equal(t.n, 0); /* not resolved yet */
    assert_string_equal(t.host, "localhost");
    assert_string_equal(t.port, "7001");
    char err[256] = "";
    assert_int_equal(chime__target_resolve(&t, 16, err, sizeof err), 0);
    assert_true(t.n >= 1);
    int v4 = 0;
    for (uint32_t k = 0; k < t.n; k++) {
      v4 |= strcmp(t.addrs[k], "ipv4:127.0.0.1:7001") == 0;
      if (k > 0) /* sorted, no repeats */
        assert_true(strcmp(t.addrs[k - 1], t.addrs[k]) < 0);
    }
    assert_true(v4);
    chime__target_free(&t);
  }
  /* An IPv6 literal in brackets. */
  chime__target_t t = parse_ok("dns:///[::1]:7001");
  assert_string_equal(t.host, "::1");
  char err[256] = "";
  assert_int_equal(chime__target_resolve(&t, 16, err, sizeof err), 0);
  assert_int_equal(t.n, 1);
  assert_string_equal(t.addrs[0], "ipv6:[::1]:7001");
  chime__target_free(&t);
  /* A name that does not resolve: CHIME_EUNAVAILABLE, the last addresses
   * kept. */
  t = parse_ok("dns:///no-such-host.invalid:1");
  assert_int_equal(chime__target_resolve(&t, 16, err, sizeof err),
                   CHIME_EUNAVAILABLE);
  assert_non_null(strstr(err, "no-such-host.invalid"));
  assert_int_equal(t.n, 0);
  chime__target_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_server),    cmocka_unit_test(test_lists),
      cmocka_unit_test(test_bad),           cmocka_unit_test(test_forms),
      cmocka_unit_test(test_bad_addresses), cmocka_unit_test(test_dns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
