/* Smaller input faults against the real chimed: listen addresses (an empty
 * Unix path, a port past 65535), tables too large for the machine, a Unix
 * listen address that works, "[::]:0" and ":0" both reached over IPv4
 * and IPv6, priorities that are not finite or negative,
 * GetInfo/Stats request bytes that do not parse, control characters in
 * a client's table name (escaped in the status, never echoed raw), and
 * limits checked before work: a 50 MB spec refused at its 65th leaf,
 * requests larger than their method takes refused unparsed, a
 * MutatePriorities full of unknown fields read without keeping them, an
 * Insert's versions and lengths counted before they are decoded, and
 * each named limit tried one past it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime.pb-c.h"
#include "chime/chime.h"
#include "harness.h"
#include "asserts.h"
#include "rawcall.h"
#include "wire/pbwrite.h"

#define M_INFO "/chime.v1.Chime/GetInfo"
#define M_STATS "/chime.v1.Chime/Stats"
#define M_INSERT "/chime.v1.Chime/Insert"
#define M_SUBSCRIBE "/chime.v1.Chime/Subscribe"
#define M_MUTATE "/chime.v1.Chime/MutatePriorities"
#define M_CHECKPOINT "/chime.v1.Chime/Checkpoint"
#define M_SET_VERSION "/chime.v1.Chime/SetVersion"
#define SAMPLE_BYTES 264 /* the default table: obs:f32[64], action, reward */

/* Runs chimed with argv (after the binary) to its exit; its stderr goes to
 * err. Returns the exit status. */
static int chimed_exit(const char *const args[], char *err, size_t len) {
  char bin[512], path[512];
  const char *argv[16];
  size_t n = 0;
  chime__proc_t p;
  int st = 0;
  if (chime__harness_bin("src/server/chimed", bin, sizeof(bin)) == NULL)
    chime__skip("chimed is not built");
  argv[n++] = bin;
  for (size_t i = 0; args[i] != NULL && n < 15; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  snprintf(path, sizeof(path), "%s/chimed-stderr.txt", chime__harness_tmpdir());
  assert_int_equal(chime__proc_spawn_err(&p, argv, "/dev/null", path), 0);
  if (chime__proc_wait(&p, 30000, &st) != 0) {
    chime__proc_kill(&p);
    fail_msg("chimed %s did not exit", args[0]);
  }
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t got = fread(err, 1, len - 1, f);
  err[got] = '\0';
  fclose(f);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static void test_bad_listen(void **state) {
  (void)state;
  char err[2048];
  const char *empty[] = {"--listen", "unix:", NULL};
  assert_int_equal(chimed_exit(empty, err, sizeof(err)), 2);
  chime__assert_contains(err, "'unix:': the socket path is empty");
  const char *port[] = {"--listen", "127.0.0.1:99999", NULL};
  assert_int_equal(chimed_exit(port, err, sizeof(err)), 2);
  chime__assert_contains(err, "port '99999' must be a number in 0..65535");
  const char *port6[] = {"--listen", "[::1]:65536", NULL};
  assert_int_equal(chimed_exit(port6, err, sizeof(err)), 2);
  chime__assert_contains(err, "port '65536'");
}

/* GetInfo's table count through addr, or a negative CHIME_E code. */
static int tables_at(const char *addr) {
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  int rc = chime_client_create(&c, addr, NULL);
  if (rc == 0 && (rc = chime_client_info(c, &info)) == 0)
    rc = (int)info->ntables;
  chime_server_info_free(info);
  chime_client_destroy(c);
  return rc;
}

/* "[::]:0" is every address, as ":0" is: IPv4 clients reach it too (it
 * was IPv6-only: 127.0.0.1 refused while ":0" served both). */
static void test_wildcard_listen(void **state) {
  (void)state;
  const char *lists[] = {"[::]:0", ":0"};
  for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
    chime__chimed_t d;
    char v4[64], v6[64];
    int st = 0;
    const char *extra[] = {"--listen", lists[i], NULL};
    int rc = chime__chimed_start_or_skip(&d, NULL, extra, 30000);
    assert_int_equal(rc, 0);
    const char *port = strrchr(d.addr, ':') + 1;
    snprintf(v4, sizeof(v4), "127.0.0.1:%s", port);
    snprintf(v6, sizeof(v6), "[::1]:%s", port);
    int r4 = tables_at(v4);
    /* A host without IPv6 (no ::1) has no IPv6 socket to reach. */
    int s6 = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6,
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int has6 = s6 >= 0 && bind(s6, (struct sockaddr *)&lo6, sizeof(lo6)) == 0;
    if (s6 >= 0)
      close(s6);
    int r6 = has6 ? tables_at(v6) : 1;
    assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
    if (r4 != 1 || r6 != 1)
      fail_msg("--listen %s: GetInfo via %s gave %d, via %s %d (want 1 "
               "table each)",
               lists[i], v4, r4, v6, r6);
  }
}

/* One-byte samples, half as many as memory has bytes: the samples alone
 * would fit, their bookkeeping (key, time, priority, count) does not. */
static void test_tables_over_memory(void **state) {
  (void)state;
  char json[256], path[512], err[2048];
  uint64_t mem =
      (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t cap = mem / 2;
  /* Rows are 32-bit: at the most items a table takes, the bookkeeping
   * (over 40 bytes an item) alone is over 170 GB. */
  if (cap > UINT64_C(0xfffffffe))
    cap = UINT64_C(0xfffffffe);
  if (cap * 41 < mem)
    chime__skip("more memory than the largest table's bookkeeping");
  snprintf(json, sizeof(json),
           "{\"tables\":[{\"name\":\"big\",\"spec\":\"x:u8[]\","
           "\"capacity\":%llu}]}",
           (unsigned long long)cap);
  assert_int_equal(
      chime__harness_write_file("big.json", json, path, sizeof(path)), 0);
  const char *args[] = {"--config", path, "--listen", "127.0.0.1:0", NULL};
  assert_int_equal(chimed_exit(args, err, sizeof(err)), 2);
  chime__assert_contains(err, "bookkeeping");
  char num[32];
  snprintf(num, sizeof(num), "%llu items", (unsigned long long)cap);
  chime__assert_contains(err, num);
  assert_true(strstr(err, "physical memory") != NULL ||
              strstr(err, "cgroup") != NULL);
}

static void test_unix_listen(void **state) {
  (void)state;
  chime__chimed_t d;
  char addr[300], sock[280];
  chime_client_t *c = NULL;
  chime_server_info_t *info = NULL;
  int st = 0;
  struct stat sb;
  snprintf(sock, sizeof(sock), "%s/chimed.sock", chime__harness_tmpdir());
  snprintf(addr, sizeof(addr), "unix:%s", sock);
  const char *extra[] = {"--listen", addr, NULL};
  int rc = chime__chimed_start_or_skip(&d, NULL, extra, 30000);
  assert_int_equal(rc, 0);
  assert_string_equal(d.addr, addr);
  assert_int_equal(chime_client_create(&c, d.addr, NULL), 0);
  assert_int_equal(chime_client_info(c, &info), 0);
  assert_int_equal(info->ntables, 1);
  chime_server_info_free(info);
  chime_client_destroy(c);
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_int_equal(st, 0);
  assert_int_not_equal(stat(sock, &sb), 0); /* removed at stop */
}

/* --- raw calls against one chimed with the built-in table 'demo' --- */

static chime__chimed_t chimed;
static grpc_channel *ch;

static int raw_setup(void **state) {
  (void)state;
  if (chime__raw_fixture_start(&chimed, &ch, NULL) != 0)
    return -1;
  return 0;
}

static int raw_teardown(void **state) {
  (void)state;
  return chime__raw_fixture_stop(&chimed, ch);
}

static grpc_status_code unary_bytes(const char *method, const void *b, size_t n,
                                    char *details, size_t len) {
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  assert_int_equal(chime__raw_start(&r, ch, method, 20000), 0);
  assert_int_equal(chime__raw_send_bytes(&r, b, n), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, len, 20000), 0);
  chime__raw_destroy(&r);
  return st;
}

static void test_unary_garbage(void **state) {
  (void)state;
  char details[512];
  /* A length-delimited field longer than the message, a varint that never
   * ends: neither parses as any message. */
  static const uint8_t overrun[] = {0x0a, 0x05, 'a', 'b'};
  static const uint8_t endless[] = {0x08, 0xff, 0xff, 0xff};
  assert_int_equal(
      unary_bytes(M_INFO, overrun, sizeof(overrun), details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "malformed GetInfoRequest");
  assert_int_equal(
      unary_bytes(M_STATS, endless, sizeof(endless), details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "malformed StatsRequest");
  /* The empty message is the request, and is answered. */
  assert_int_equal(unary_bytes(M_INFO, "", 0, details, sizeof(details)),
                   GRPC_STATUS_OK);
}

static grpc_status_code insert_prio(double bad, char *details, size_t len) {
  static uint8_t data[3 * SAMPLE_BYTES];
  double prio[3] = {1.0, 2.0, bad};
  Chime__V1__InsertRequest req = CHIME__V1__INSERT_REQUEST__INIT;
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  req.table = (char *)"demo";
  req.count = 3;
  req.data.data = data;
  req.data.len = sizeof(data);
  req.n_priorities = 3;
  req.priorities = prio;
  assert_int_equal(chime__raw_start(&r, ch, M_INSERT, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &req.base), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, len, 20000), 0);
  chime__raw_destroy(&r);
  return st;
}

static void test_bad_priorities(void **state) {
  (void)state;
  char details[512];
  assert_int_equal(insert_prio(NAN, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "priority of sample 2 is nan");
  assert_int_equal(insert_prio(INFINITY, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "priority of sample 2 is inf");
  assert_int_equal(insert_prio(-1.0, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "priority of sample 2 is -1");
  assert_int_equal(insert_prio(0.0, details, sizeof(details)), GRPC_STATUS_OK);

  /* The writer refuses them before sending, and stays usable. */
  chime_client_t *c = NULL;
  chime_writer_t *w = NULL;
  uint8_t sample[SAMPLE_BYTES] = {0};
  assert_int_equal(chime_client_create(&c, chimed.addr, NULL), 0);
  assert_int_equal(chime_writer_open(&w, c, "demo", NULL), 0);
  assert_int_equal(chime_writer_append(w, sample, sizeof(sample), NAN),
                   CHIME_EINVAL);
  chime__assert_contains(chime_last_error(), "priority nan");
  assert_int_equal(chime_writer_append(w, sample, sizeof(sample), -INFINITY),
                   CHIME_EINVAL);
  assert_int_equal(chime_writer_append(w, sample, sizeof(sample), 0.5), 0);
  assert_int_equal(chime_writer_flush(w), 0);
  assert_int_equal(chime_writer_close(w), 0);
  chime_client_destroy(c);
}

static void test_control_chars_escaped(void **state) {
  (void)state;
  char details[512];
  const char *name = "de\nmo\x1b[31m\\";
  /* Subscribe: the table is looked up by the stream's open. */
  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  Chime__V1__SubscribeRequest sreq = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  open.table = (char *)name;
  open.batch_size = 1;
  open.slots = 2;
  open.mode = CHIME__V1__MODE__MODE_STREAM;
  sreq.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  sreq.open = &open;
  assert_int_equal(chime__raw_start(&r, ch, M_SUBSCRIBE, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &sreq.base), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_NOT_FOUND);
  chime__assert_contains(details, "table 'de\\x0amo\\x1b[31m\\\\' not found");
  assert_null(strchr(details, '\n'));
  assert_null(strchr(details, '\x1b'));

  /* Insert: the first request names the table. */
  Chime__V1__InsertRequest ireq = CHIME__V1__INSERT_REQUEST__INIT;
  ireq.table = (char *)name;
  assert_int_equal(chime__raw_start(&r, ch, M_INSERT, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &ireq.base), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_NOT_FOUND);
  chime__assert_contains(details, "table 'de\\x0amo\\x1b[31m\\\\' not found");
  assert_null(strchr(details, '\x1b'));
}

/* CPU seconds a process has used, user and system. */
static double cpu_of(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* after the command name */
  assert_non_null(p);
  unsigned long long ut = 0, st = 0;
  /* Fields 3-13 skipped, then utime (14) and stime (15). */
  assert_int_equal(sscanf(p + 2,
                          "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                          "%llu %llu",
                          &ut, &st),
                   2);
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The most memory a process has had resident (VmHWM), in bytes. */
static uint64_t peak_rss_of(pid_t pid) {
  char path[64], line[256];
  unsigned long long kb = 0;
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
      break;
  fclose(f);
  assert_true(kb > 0);
  return (uint64_t)kb << 10;
}

/* `table: name` and then n copies of the `per` bytes of one field. */
static uint8_t *repeated(const char *table, const void *per, size_t perlen,
                         size_t n, size_t *len) {
  size_t tl = strlen(table);
  uint8_t *b = malloc(2 + tl + perlen * n);
  assert_non_null(b);
  b[0] = 0x0a; /* field 1, LEN: the table in every request here */
  b[1] = (uint8_t)tl;
  memcpy(b + 2, table, tl);
  for (size_t i = 0; i < n; i++)
    memcpy(b + 2 + tl + i * perlen, per, perlen);
  *len = 2 + tl + perlen * n;
  return b;
}

/* An Insert whose spec is 50 MB of empty leaves: refused naming the limit
 * of leaves at the first one too many, not after decoding 25 million of
 * them (4 s of CPU before). */
static void test_large_spec_refused(void **state) {
  (void)state;
  char details[512];
  static const uint8_t leaf[2] = {0x32, 0x00}; /* field 6, LEN 0 */
  size_t len;
  uint8_t *b = repeated("demo", leaf, sizeof(leaf), 25000000, &len);
  double cpu0 = cpu_of(chimed.proc.pid);
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  assert_int_equal(chime__raw_start(&r, ch, M_INSERT, 60000), 0);
  assert_int_equal(chime__raw_send_bytes(&r, b, len), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 60000),
                   0);
  chime__raw_destroy(&r);
  free(b);
  double cpu = cpu_of(chimed.proc.pid) - cpu0;
  fprintf(stderr, "a %zu-byte spec: '%s', chimed used %.2f s of CPU\n", len,
          details, cpu);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "more than 64 leaves");
  assert_true(cpu < 2.0); /* a generous bound: it was 4 s */
}

/* GetInfo, Stats and Checkpoint carry nothing, Subscribe's requests are
 * small: past their limits they are refused, naming it, before protobuf-c
 * reads them (it kept every unknown field: seconds and gigabytes for
 * 64 MiB). At the limit they are still read. */
static void test_oversized_requests_refused(void **state) {
  (void)state;
  char details[512];
  static const uint8_t unknown[3] = {0x98, 0x06, 0x00}; /* field 99 = 0 */
  size_t len;
  /* 1 MiB of unknown fields. */
  uint8_t *b = repeated("x", unknown, sizeof(unknown), 350000, &len);
  const char *const small[] = {M_INFO, M_STATS, M_CHECKPOINT};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(unary_bytes(small[i], b, len, details, sizeof(details)),
                     GRPC_STATUS_INVALID_ARGUMENT);
    chime__assert_contains(details, "this method takes at most 65536");
  }
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  assert_int_equal(chime__raw_start(&r, ch, M_SUBSCRIBE, 20000), 0);
  assert_int_equal(chime__raw_send_bytes(&r, b, len), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "Subscribe: a request of");
  chime__assert_contains(details, "at most 262144");
  free(b);
  /* 65,536 bytes exactly: an unknown field of that many bytes in all. */
  b = malloc(65536);
  assert_non_null(b);
  b[0] = 0x9a; /* field 99, LEN */
  b[1] = 0x06;
  b[2] = 0xfb; /* 65531 */
  b[3] = 0xff;
  b[4] = 0x03;
  memset(b + 5, 'x', 65531);
  assert_int_equal(unary_bytes(M_INFO, b, 65536, details, sizeof(details)),
                   GRPC_STATUS_OK);
  free(b);
}

/* MutatePriorities is read by hand: 32 MiB of unknown fields cost a pass
 * over them, not protobuf-c's copy and record of each (about 1.5 GB of
 * memory before); more updates or deletes than a request may carry are
 * refused by their count before any is decoded. */
static void test_mutate_read_by_hand(void **state) {
  (void)state;
  char details[512];
  static const uint8_t unknown[3] = {0x98, 0x06, 0x00}; /* field 99 = 0 */
  size_t len;
  uint8_t *b = repeated("demo", unknown, sizeof(unknown), 11000000, &len);
  uint64_t peak0 = peak_rss_of(chimed.proc.pid);
  assert_int_equal(unary_bytes(M_MUTATE, b, len, details, sizeof(details)),
                   GRPC_STATUS_OK);
  free(b);
  uint64_t peak = peak_rss_of(chimed.proc.pid);
  fprintf(stderr,
          "MutatePriorities of %zu bytes of unknown fields: chimed's peak "
          "RSS %llu -> %llu MiB\n",
          len, (unsigned long long)peak0 >> 20, (unsigned long long)peak >> 20);
#ifndef __SANITIZE_ADDRESS__
  /* gRPC's copy and chime's (one slice) are 64 MiB; protobuf-c's records
   * were about 1.5 GB. */
  assert_true(peak < peak0 + (384u << 20));
#endif
  /* 2^20 + 1 deletes, packed: refused by their count. */
  size_t n = (1u << 20) + 1;
  b = malloc(16 + n);
  assert_non_null(b);
  size_t k = 0;
  b[k++] = 0x0a;
  b[k++] = 4;
  memcpy(b + k, "demo", 4);
  k += 4;
  b[k++] = 0x1a; /* field 3, LEN */
  size_t v = n;
  for (; v >= 0x80; v >>= 7)
    b[k++] = (uint8_t)(v | 0x80);
  b[k++] = (uint8_t)v;
  memset(b + k, 0x05, n); /* key 5, n times */
  assert_int_equal(unary_bytes(M_MUTATE, b, k + n, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "1048577 deletes; at most 1048576");
  free(b);
}

/* An Insert's versions and lengths are counted before they are decoded,
 * and counts no table takes are refused unallocated: 24 million versions
 * for one sample (8 bytes each decoded: 192 MB before), lengths that are
 * not a whole number per sample, and more samples than the data and
 * lengths can hold, each naming the counts. */
static void test_insert_counts_refused(void **state) {
  (void)state;
  char details[512];
  size_t n = 24000000, k = 0;
  uint8_t *b = malloc(32 + n);
  assert_non_null(b);
  b[k++] = 0x0a; /* table */
  b[k++] = 4;
  memcpy(b + k, "demo", 4);
  k += 4;
  b[k++] = 0x10; /* count 1 */
  b[k++] = 1;
  b[k++] = 0x52; /* field 10, LEN: versions */
  k += chime__pb_put_varint(b + k, n);
  memset(b + k, 0x01, n);
  uint64_t peak0 = peak_rss_of(chimed.proc.pid);
  assert_int_equal(unary_bytes(M_INSERT, b, k + n, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "24000000 versions for 1 samples");
  uint64_t peak = peak_rss_of(chimed.proc.pid);
  fprintf(stderr,
          "24M versions for 1 sample: chimed's peak RSS %llu -> %llu "
          "MiB\n",
          (unsigned long long)peak0 >> 20, (unsigned long long)peak >> 20);
#ifndef __SANITIZE_ADDRESS__
  /* gRPC's copy and chime's (one slice) are 48 MB; decoded, the versions
   * were 192 MB more. */
  assert_true(peak < peak0 + (128u << 20));
#endif
  free(b);

  /* 3 lengths for 2 samples. */
  k = 0;
  uint8_t m[64];
  m[k++] = 0x0a;
  m[k++] = 4;
  memcpy(m + k, "demo", 4);
  k += 4;
  m[k++] = 0x10; /* count 2 */
  m[k++] = 2;
  m[k++] = 0x4a; /* field 9, LEN: lengths */
  m[k++] = 3;
  m[k++] = 1;
  m[k++] = 1;
  m[k++] = 1;
  assert_int_equal(unary_bytes(M_INSERT, m, k, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "3 lengths for 2 samples");

  /* 5 samples with a version each in 4 data bytes. */
  k = 0;
  m[k++] = 0x0a;
  m[k++] = 4;
  memcpy(m + k, "demo", 4);
  k += 4;
  m[k++] = 0x10; /* count 5 */
  m[k++] = 5;
  m[k++] = 0x1a; /* data, 4 bytes */
  m[k++] = 4;
  memset(m + k, 0, 4);
  k += 4;
  m[k++] = 0x52; /* 5 versions */
  m[k++] = 5;
  memset(m + k, 0x02, 5);
  k += 5;
  assert_int_equal(unary_bytes(M_INSERT, m, k, details, sizeof(details)),
                   GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "5 samples in 4 data bytes and 0 lengths");
}

/* `table: demo` and then the bytes of b, into out; the length. */
static size_t demo_then(uint8_t *out, const uint8_t *b, size_t n) {
  out[0] = 0x0a;
  out[1] = 4;
  memcpy(out + 2, "demo", 4);
  memcpy(out + 6, b, n);
  return 6 + n;
}

/* Limits the protocol names, each tried one past it: a spec Leaf of 4097
 * bytes; lengths sent to a table without ragged leaves; a SetVersion
 * request over 4 KiB; a Subscribe Open whose prefetch exceeds its slots.
 * Each is INVALID_ARGUMENT naming what was wrong. */
static void test_limits_one_past(void **state) {
  (void)state;
  char details[512];
  static uint8_t m[8192];
  uint8_t b[4200];
  size_t k = 0;
  b[k++] = 0x32; /* field 6, LEN 4097: one spec Leaf */
  b[k++] = 0x81;
  b[k++] = 0x20;
  memset(b + k, 0, 4097);
  k += 4097;
  assert_int_equal(
      unary_bytes(M_INSERT, m, demo_then(m, b, k), details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "spec leaf larger than 4096 bytes");

  k = 0;
  b[k++] = 0x10; /* count 1 */
  b[k++] = 1;
  b[k++] = 0x1a; /* data: one sample */
  b[k++] = (uint8_t)(0x80 | (SAMPLE_BYTES & 0x7f));
  b[k++] = (uint8_t)(SAMPLE_BYTES >> 7);
  memset(b + k, 0, SAMPLE_BYTES);
  k += SAMPLE_BYTES;
  b[k++] = 0x48; /* field 9 (lengths), one varint */
  b[k++] = 1;
  assert_int_equal(
      unary_bytes(M_INSERT, m, demo_then(m, b, k), details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "lengths are for ragged leaves");

  static const uint8_t unknown[3] = {0x98, 0x06, 0x00}; /* field 99 = 0 */
  size_t len;
  uint8_t *big = repeated("demo", unknown, sizeof(unknown), 1400, &len);
  assert_true(len > 4096);
  assert_int_equal(
      unary_bytes(M_SET_VERSION, big, len, details, sizeof(details)),
      GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "this method takes at most 4096");
  free(big);

  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = (char *)"demo";
  open.batch_size = 4;
  open.slots = 4;
  open.prefetch = 5;
  open.mode = CHIME__V1__MODE__MODE_STREAM;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  chime__raw_t r;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  assert_int_equal(chime__raw_start(&r, ch, M_SUBSCRIBE, 20000), 0);
  assert_int_equal(chime__raw_send(&r, &req.base), 0);
  assert_int_equal(chime__raw_finish(&r, &st, details, sizeof(details), 20000),
                   0);
  chime__raw_destroy(&r);
  assert_int_equal(st, GRPC_STATUS_INVALID_ARGUMENT);
  chime__assert_contains(details, "prefetch 5: must be 0..slots (4)");
}

int main(void) {
  const struct CMUnitTest spawned[] = {
      cmocka_unit_test(test_bad_listen),
      cmocka_unit_test(test_tables_over_memory),
      cmocka_unit_test(test_unix_listen),
      cmocka_unit_test(test_wildcard_listen),
  };
  const struct CMUnitTest raw[] = {
      cmocka_unit_test(test_unary_garbage),
      cmocka_unit_test(test_bad_priorities),
      cmocka_unit_test(test_control_chars_escaped),
      cmocka_unit_test(test_large_spec_refused),
      cmocka_unit_test(test_insert_counts_refused),
      cmocka_unit_test(test_limits_one_past),
      cmocka_unit_test(test_oversized_requests_refused),
      cmocka_unit_test(test_mutate_read_by_hand),
  };
  int failed = cmocka_run_group_tests_name("spawned", spawned, NULL, NULL);
  failed += cmocka_run_group_tests_name("raw", raw, raw_setup, raw_teardown);
  return failed;
}
