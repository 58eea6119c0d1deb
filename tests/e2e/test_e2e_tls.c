/* TLS against the real chimed, with certificates made at test time by
 * openssl (skips, 77, without it): a plaintext client is refused, a client
 * trusting another CA is refused, TLS works for info and for data in stream
 * mode (library and CLI), mutual TLS refuses a client without a certificate
 * or with one from another CA and serves one with a good certificate; the
 * acceptor's guards hold with TLS (a connection that stalls in its
 * handshake is closed, and one that never sends is closed at the
 * first-bytes deadline, so they cannot keep clients out; a flood that runs
 * chimed out of fds leaves it serving); a bad TLS config
 * stops chimed at start; the warning beyond loopback accounts for TLS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"

/* The table: 4 samples per batch of 16 bytes each (x:u32[4]). */
#define SPEC "x:u32[4]"
#define SAMPLE_BYTES 16
#define BATCH 4
#define MAX_CONN 8

static char dir[512];
static char ca[600], other_ca[600], srv_cert[600], srv_key[600];
static char cli_cert[600], cli_key[600], rogue_cert[600], rogue_key[600];

static chime__chimed_t tls_d;  /* TLS, no client certificates */
static chime__chimed_t mtls_d; /* mutual TLS */

static const char *file(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", dir, name);
  return buf;
}

/* Runs openssl with args (NULL-terminated) to its exit: 0 when it exited 0. */
static int openssl(const char *const args[]) {
  const char *argv[32];
  size_t n = 0;
  argv[n++] = "/usr/bin/openssl";
  for (size_t i = 0; args[i] != NULL && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  char out[600], err[600];
  chime__proc_t p;
  if (chime__proc_spawn_err(&p, argv, file(out, sizeof out, "openssl.out"),
                            file(err, sizeof err, "openssl.err")) != 0)
    return -1;
  int status = 0;
  if (chime__proc_wait(&p, 30000, &status) != 0) {
    chime__proc_kill(&p);
    return -1;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* A CA: name.pem and name.key. */
static int make_ca(const char *name, char *pem, size_t len) {
  char key[600], subj[128];
  snprintf(pem, len, "%s/%s.pem", dir, name);
  snprintf(key, sizeof key, "%s/%s.key", dir, name);
  snprintf(subj, sizeof subj, "/CN=%s", name);
  const char *args[] = {"req",    "-x509",    "-newkey",
                        "ec",     "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout",  key,
                        "-out",   pem,        "-days",
                        "2",      "-subj",    subj,
                        NULL};
  return openssl(args);
}

/* A certificate name.pem / name.key signed by the CA ca_name, with the
 * extensions in ext (one per line). */
static int make_cert(const char *name, const char *ca_name, const char *cn,
                     const char *ext, char *pem, char *key, size_t len) {
  char csr[600], ca_pem[600], ca_key[600], extf[600], subj[128];
  snprintf(pem, len, "%s/%s.pem", dir, name);
  snprintf(key, len, "%s/%s.key", dir, name);
  snprintf(csr, sizeof csr, "%s/%s.csr", dir, name);
  snprintf(ca_pem, sizeof ca_pem, "%s/%s.pem", dir, ca_name);
  snprintf(ca_key, sizeof ca_key, "%s/%s.key", dir, ca_name);
  snprintf(subj, sizeof subj, "/CN=%s", cn);
  char extname[64];
  snprintf(extname, sizeof extname, "%s.ext", name);
  if (chime__harness_write_file(extname, ext, extf, sizeof extf) != 0)
    return -1;
  const char *req[] = {
      "req",    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
      "-nodes", "-keyout", key,  "-out",     csr,
      "-subj",  subj,      NULL};
  const char *sign[] = {"x509",   "-req",     "-in",
                        csr,      "-CA",      ca_pem,
                        "-CAkey", ca_key,     "-CAcreateserial",
                        "-out",   pem,        "-days",
                        "2",      "-extfile", extf,
                        NULL};
  return openssl(req) != 0 ? -1 : openssl(sign);
}

static int start_chimed(chime__chimed_t *d, int mutual, int max_conn) {
  char config[4096];
  snprintf(config, sizeof config,
           "{\"tls\": {\"cert\": \"%s\", \"key\": \"%s\"%s%s%s},\n"
           " \"max_connections\": %d, \"handshake_timeout_ms\": 1000,\n"
           " \"tables\": [{\"name\": \"t\", \"spec\": \"" SPEC "\", "
           "\"capacity\": 1000}]}\n",
           srv_cert, srv_key, mutual ? ", \"client_ca\": \"" : "",
           mutual ? ca : "", mutual ? "\"" : "", max_conn);
  return chime__chimed_start(d, config, NULL, 30000);
}

static int setup(void **state) {
  (void)state;
  if (access("/usr/bin/openssl", X_OK) != 0)
    chime__skip("openssl is not installed (apt-get install openssl)");
  char bin[512];
  if (chime__harness_bin("src/server/chimed", bin, sizeof bin) == NULL)
    chime__skip("chimed is not built");
  snprintf(dir, sizeof dir, "%s", chime__harness_tmpdir());
  if (make_ca("ca", ca, sizeof ca) != 0 ||
      make_ca("other-ca", other_ca, sizeof other_ca) != 0 ||
      make_cert("server", "ca", "localhost",
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                "extendedKeyUsage=serverAuth\n",
                srv_cert, srv_key, sizeof srv_cert) != 0 ||
      make_cert("client", "ca", "learner-1", "extendedKeyUsage=clientAuth\n",
                cli_cert, cli_key, sizeof cli_cert) != 0 ||
      make_cert("rogue", "other-ca", "learner-1",
                "extendedKeyUsage=clientAuth\n", rogue_cert, rogue_key,
                sizeof rogue_cert) != 0) {
    fprintf(stderr, "test_e2e_tls: openssl could not make the certificates\n");
    return -1;
  }
  if (start_chimed(&tls_d, 0, MAX_CONN) != 0 ||
      start_chimed(&mtls_d, 1, MAX_CONN) != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int st1 = 0, st2 = 0;
  int a = chime__chimed_stop(&tls_d, 20000, &st1);
  int b = chime__chimed_stop(&mtls_d, 20000, &st2);
  chime__harness_kill_all();
  return a == 0 && b == 0 && WIFEXITED(st1) && WEXITSTATUS(st1) == 0 &&
                 WIFEXITED(st2) && WEXITSTATUS(st2) == 0
             ? 0
             : -1;
}

static chime_client_t *client(const char *addr, const char *tls_ca,
                              const char *cert, const char *key) {
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.tls_ca = tls_ca;
  o.tls_cert = cert;
  o.tls_key = key;
  o.timeout_ms = 10000;
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, addr, &o), 0);
  return c;
}

/* GetInfo's result for a client with these files. */
static int info_rc(const chime__chimed_t *d, const char *tls_ca,
                   const char *cert, const char *key) {
  chime_client_t *c = client(d->addr, tls_ca, cert, key);
  chime_server_info_t *info = NULL;
  int rc = chime_client_info(c, &info);
  if (rc == 0) {
    assert_int_equal(info->ntables, 1);
    chime_server_info_free(info);
  }
  chime_client_destroy(c);
  return rc;
}

static void test_plaintext_refused(void **state) {
  (void)state;
  assert_int_equal(info_rc(&tls_d, NULL, NULL, NULL), CHIME_EUNAVAILABLE);
  assert_int_equal(info_rc(&mtls_d, NULL, NULL, NULL), CHIME_EUNAVAILABLE);
}

/* chime_client_create refuses TLS options it cannot use. */
static void test_client_opts(void **state) {
  (void)state;
  char notpem[600];
  assert_int_equal(
      chime__harness_write_file("notpem.txt", "hello\n", notpem, sizeof notpem),
      0);
  struct {
    const char *ca, *cert, *key, *name;
  } bad[] = {
      {ca, cli_cert, NULL, NULL},      /* a certificate without its key */
      {ca, NULL, cli_key, NULL},       /* a key without its certificate */
      {NULL, NULL, NULL, "localhost"}, /* a name to check, no TLS */
      {ca, NULL, NULL, ""},
      {"/nonexistent/ca.pem", NULL, NULL, NULL},
      {notpem, NULL, NULL, NULL},
      {ca, notpem, cli_key, NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
    o.tls_ca = bad[i].ca;
    o.tls_cert = bad[i].cert;
    o.tls_key = bad[i].key;
    o.tls_server_name = bad[i].name;
    chime_client_t *c = (chime_client_t *)&o; /* must be reset to NULL */
    if (chime_client_create(&c, tls_d.addr, &o) != CHIME_EINVAL)
      fail_msg("bad TLS options %zu were taken", i);
    assert_null(c);
  }
}

/* A client checking the server's certificate for another name. */
static int info_rc_named(const chime__chimed_t *d, const char *name) {
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.tls_ca = ca;
  o.tls_server_name = name;
  o.timeout_ms = 10000;
  chime_client_t *c = NULL;
  assert_int_equal(chime_client_create(&c, d->addr, &o), 0);
  chime_server_info_t *info = NULL;
  int rc = chime_client_info(c, &info);
  chime_server_info_free(info);
  chime_client_destroy(c);
  return rc;
}

static void test_wrong_ca_refused(void **state) {
  (void)state;
  assert_int_equal(info_rc(&tls_d, other_ca, NULL, NULL), CHIME_EUNAVAILABLE);
  /* The right CA works, for the address's IP (a SAN of the certificate),
   * for the certificate's DNS name given as the name to check (no DNS
   * lookup: c-ares leaks a little under LeakSanitizer), and not for a
   * name the certificate does not have. */
  assert_int_equal(info_rc(&tls_d, ca, NULL, NULL), 0);
  assert_int_equal(info_rc_named(&tls_d, "localhost"), 0);
  assert_int_equal(info_rc_named(&tls_d, "elsewhere.example"),
                   CHIME_EUNAVAILABLE);
}

static void test_mutual(void **state) {
  (void)state;
  /* No certificate, or one from a CA the server does not trust. */
  assert_int_equal(info_rc(&mtls_d, ca, NULL, NULL), CHIME_EUNAVAILABLE);
  assert_int_equal(info_rc(&mtls_d, ca, rogue_cert, rogue_key),
                   CHIME_EUNAVAILABLE);
  assert_int_equal(info_rc(&mtls_d, ca, cli_cert, cli_key), 0);
  /* A server without client_ca does not ask: a certificate is harmless. */
  assert_int_equal(info_rc(&tls_d, ca, cli_cert, cli_key), 0);
}

/* Sample i of writer w: x = {w, i, i * 7, ~i}. */
static void sample(uint32_t w, uint32_t i, uint32_t x[4]) {
  x[0] = w;
  x[1] = i;
  x[2] = i * 7u;
  x[3] = ~i;
}

/* n samples in through one client, out in stream mode through another, each
 * byte as inserted (a fifo table: each sample exactly once, in order). */
static void round_trip(const chime__chimed_t *d, const char *cert,
                       const char *key, uint32_t w, uint32_t n) {
  chime_client_t *cw = client(d->addr, ca, cert, key);
  chime_client_t *cr = client(d->addr, ca, cert, key);
  chime_writer_t *wr = NULL;
  assert_int_equal(chime_writer_open(&wr, cw, "t", NULL), 0);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x[4];
    sample(w, i, x);
    assert_int_equal(chime_writer_append(wr, x, sizeof x, 1.0), 0);
  }
  assert_int_equal(chime_writer_flush(wr), 0);
  assert_int_equal(chime_writer_close(wr), 0);

  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = BATCH;
  so.mode = CHIME_MODE_STREAM;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, cr, "t", &so), 0);
  assert_int_equal(chime_stream_mode(s), CHIME_MODE_STREAM);
  uint32_t next = 0;
  while (next < n) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 20000), 0);
    assert_int_equal(b.count, BATCH);
    assert_int_equal(b.leaf[0].bytes, (uint64_t)BATCH * SAMPLE_BYTES);
    const uint32_t *got = b.leaf[0].data;
    for (uint32_t j = 0; j < b.count; j++, next++) {
      uint32_t want[4];
      sample(w, next, want);
      assert_memory_equal(got + 4 * j, want, sizeof want);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  chime_client_destroy(cw);
  chime_client_destroy(cr);
}

static void test_stream_round_trip(void **state) {
  (void)state;
  round_trip(&tls_d, NULL, NULL, 1, 64 * BATCH);
  round_trip(&mtls_d, cli_cert, cli_key, 2, 64 * BATCH);
}

/* chimectl with --tls-ca and --tls-cert/--tls-key: exit 0, and 1 without. */
static void test_cli(void **state) {
  (void)state;
  char bin[512], out[600];
  assert_non_null(chime__harness_bin("examples/chimectl", bin, sizeof bin));
  struct {
    const chime__chimed_t *d;
    const char *argv[12];
    int exit;
  } runs[] = {
      {&tls_d, {bin, "--tls-ca", ca, "info", tls_d.addr, NULL}, 0},
      {&tls_d, {bin, "info", tls_d.addr, NULL}, 1},
      {&mtls_d,
       {bin, "--tls-ca", ca, "--tls-cert", cli_cert, "--tls-key", cli_key,
        "stats", mtls_d.addr, NULL},
       0},
      {&mtls_d, {bin, "--tls-ca", ca, "stats", mtls_d.addr, NULL}, 1},
      /* Command-line mistakes: a file that is not there, a certificate
       * without its key. */
      {&tls_d,
       {bin, "--tls-ca", "/nonexistent/ca.pem", "info", tls_d.addr, NULL},
       2},
      {&mtls_d,
       {bin, "--tls-ca", ca, "--tls-cert", cli_cert, "info", mtls_d.addr, NULL},
       2},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    chime__proc_t p;
    assert_int_equal(chime__proc_spawn_err(&p, runs[i].argv,
                                           file(out, sizeof out, "ctl.out"),
                                           file(out, sizeof out, "ctl.err")),
                     0);
    int status = 0;
    assert_int_equal(chime__proc_wait(&p, 30000, &status), 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != runs[i].exit)
      fail_msg("chimectl run %zu: exit %d, expected %d", i,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1, runs[i].exit);
  }
}

static int tcp_connect(const char *addr) {
  const char *colon = strrchr(addr, ':');
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)atoi(colon + 1));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* -1 when the connect fails (a full backlog is part of a flood). */
static int tcp_connect_nofail(const char *addr) {
  const char *colon = strrchr(addr, ':');
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)atoi(colon + 1));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Whether the server closed fd within ms (EOF or reset). */
static int closed_within(int fd, int ms) {
  int64_t end = chime__now_ms() + ms;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int left = (int)(end - chime__now_ms());
    if (left <= 0 || poll(&p, 1, left) <= 0)
      return 0;
    char b[4096];
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
      return 1; /* EOF, or reset */
  }
}

/* max_connections connections take every place: half silent (they never
 * reach gRPC: the first-bytes deadline closes them), half stalled after one
 * byte of a TLS record (gRPC's handshake deadline closes them). Neither
 * kind keeps a TLS client out for good, and a client connected before them
 * is served all along. */
static void test_stalled_connections(void **state) {
  (void)state;
  chime_client_t *before = client(tls_d.addr, ca, NULL, NULL);
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(before, &info), 0);
  chime_server_info_free(info);

  int fds[MAX_CONN];
  for (int i = 0; i < MAX_CONN; i++) {
    fds[i] = tcp_connect(tls_d.addr);
    if (i % 2 == 1) /* a TLS handshake record's first byte, then nothing */
      assert_int_equal(send(fds[i], "\x16", 1, MSG_NOSIGNAL), 1);
  }
  /* The connected client keeps being served. */
  assert_int_equal(chime_client_info(before, &info), 0);
  chime_server_info_free(info);
  /* Every one of them is closed by the server (handshake_timeout_ms is
   * 1000 for both deadlines; 30 s is a hang). */
  for (int i = 0; i < MAX_CONN; i++) {
    if (!closed_within(fds[i], 30000))
      fail_msg("connection %d (%s) was not closed", i,
               i % 2 ? "stalled in its TLS handshake" : "silent");
    close(fds[i]);
  }
  /* A new client is served. */
  assert_int_equal(info_rc(&tls_d, ca, NULL, NULL), 0);
  chime_client_destroy(before);
}

/* The flood of test_e2e_flood, over TLS: chimed's fd limit is lowered under
 * its connection cap once it runs, and FLOOD connections that each send the
 * start of a TLS record (so they reach gRPC's handshaker) run it out of fds
 * (EMFILE) while FLOOD_HOLD_MS. A client connected before keeps being
 * served, and once the flood is closed a new client is served. */
#define FLOOD 400
#define FLOOD_HOLD_MS 1500
#define RECOVER_WAIT_MS 60000

static void test_flood_past_fd_limit(void **state) {
  (void)state;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max < FLOOD + 128)
    chime__skip("the hard fd limit is too low for the flood");
  rl.rlim_cur = rl.rlim_max;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
  chime__chimed_t d;
  setenv("CHIME__HARNESS_NOFILE", "256", 1);
  int rc = start_chimed(&d, 0, 4096); /* capped by the fd limit: 192 */
  unsetenv("CHIME__HARNESS_NOFILE");
  assert_int_equal(rc, 0);
  struct rlimit low = {128, 128};
  assert_int_equal(prlimit(d.proc.pid, RLIMIT_NOFILE, &low, NULL), 0);

  chime_client_t *before = client(d.addr, ca, NULL, NULL);
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(before, &info), 0);
  chime_server_info_free(info);

  static int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) {
    fds[i] = tcp_connect_nofail(d.addr);
    if (fds[i] >= 0) /* a TLS handshake record's header, then nothing */
      (void)send(fds[i], "\x16\x03\x01", 3, MSG_NOSIGNAL);
  }
  chime__sleep_ms(FLOOD_HOLD_MS);
  int st = 0;
  assert_int_equal(chime__proc_wait(&d.proc, 0, &st), CHIME_ETIMEDOUT);
  if (chime_client_info(before, &info) != 0)
    fail_msg("a connected client failed during the flood: %s",
             chime_last_error());
  chime_server_info_free(info);
  chime_client_destroy(before);
  for (int i = 0; i < FLOOD; i++)
    if (fds[i] >= 0)
      close(fds[i]);

  int64_t t0 = chime__now_ms();
  int attempts = 0;
  for (rc = -1; rc != 0 && chime__now_ms() - t0 < RECOVER_WAIT_MS; attempts++) {
    chime_client_t *c = client(d.addr, ca, NULL, NULL);
    info = NULL;
    rc = chime_client_info(c, &info);
    chime_server_info_free(info);
    chime_client_destroy(c);
    if (rc != 0)
      chime__sleep_ms(200);
  }
  if (rc != 0)
    fail_msg("no new TLS client served within %d ms of the flood's end",
             RECOVER_WAIT_MS);
  printf("TLS flood past the fd limit: a new client served %lld ms after "
         "the flood ended (%d attempts)\n",
         (long long)(chime__now_ms() - t0), attempts);
  assert_int_equal(chime__chimed_stop(&d, 20000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* chimed run to its exit with config text: the exit status and stderr. */
static int chimed_exit(const char *config, const char *listen, char *err,
                       size_t len) {
  char bin[512], cfg[600], out[600], errp[600];
  assert_non_null(chime__harness_bin("src/server/chimed", bin, sizeof bin));
  assert_int_equal(
      chime__harness_write_file("bad-tls.json", config, cfg, sizeof cfg), 0);
  const char *argv[] = {bin, "--config", cfg, "--listen", listen, NULL};
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn_err(&p, argv,
                                         file(out, sizeof out, "bad.out"),
                                         file(errp, sizeof errp, "bad.err")),
                   0);
  int status = 0;
  assert_int_equal(chime__proc_wait(&p, 30000, &status), 0);
  FILE *f = fopen(errp, "r");
  assert_non_null(f);
  size_t n = fread(err, 1, len - 1, f);
  fclose(f);
  err[n] = '\0';
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_bad_config(void **state) {
  (void)state;
  char config[2048], err[4096];
  const char *table =
      "\"tables\": [{\"name\": \"t\", \"spec\": \"x:u8\", \"capacity\": 1}]";
  /* A missing file: a config error naming the key. */
  snprintf(config, sizeof config,
           "{\"tls\": {\"cert\": \"%s/nope.pem\", \"key\": \"%s\"}, %s}", dir,
           srv_key, table);
  assert_int_equal(chimed_exit(config, "127.0.0.1:0", err, sizeof err), 2);
  assert_non_null(strstr(err, "tls.cert"));
  /* A key without its certificate. */
  snprintf(config, sizeof config, "{\"tls\": {\"key\": \"%s\"}, %s}", srv_key,
           table);
  assert_int_equal(chimed_exit(config, "127.0.0.1:0", err, sizeof err), 2);
  assert_non_null(strstr(err, "needs both"));
  /* A Unix socket. */
  snprintf(config, sizeof config,
           "{\"tls\": {\"cert\": \"%s\", \"key\": \"%s\"}, %s}", srv_cert,
           srv_key, table);
  char unix_addr[700];
  snprintf(unix_addr, sizeof unix_addr, "unix:%s/tls.sock", dir);
  assert_int_equal(chimed_exit(config, unix_addr, err, sizeof err), 2);
  assert_non_null(strstr(err, "needs a TCP listen address"));
  /* A key that is not the certificate's: refused before serving. */
  snprintf(config, sizeof config,
           "{\"tls\": {\"cert\": \"%s\", \"key\": \"%s\"}, %s}", srv_cert,
           cli_key, table);
  assert_int_equal(chimed_exit(config, "127.0.0.1:0", err, sizeof err), 1);
  assert_non_null(strstr(err, "refused the TLS port"));
}

/* Beyond loopback: no warning with mutual TLS; a warning that anyone can
 * call with TLS alone (no tokens, no client_ca). */
static void test_warning(void **state) {
  (void)state;
  char bin[512], cfg[600], text[4096];
  assert_non_null(chime__harness_bin("src/server/chimed", bin, sizeof bin));
  for (int mutual = 0; mutual < 2; mutual++) {
    char config[2048];
    snprintf(config, sizeof config,
             "{\"tls\": {\"cert\": \"%s\", \"key\": \"%s\"%s%s%s},"
             " \"tables\": [{\"name\": \"t\", \"spec\": \"x:u8\", "
             "\"capacity\": 1}]}",
             srv_cert, srv_key, mutual ? ", \"client_ca\": \"" : "",
             mutual ? ca : "", mutual ? "\"" : "");
    assert_int_equal(
        chime__harness_write_file("warn.json", config, cfg, sizeof cfg), 0);
    const char *argv[] = {bin, "--config", cfg, "--listen", "0.0.0.0:0", NULL};
    if (chime__chimed_stderr_at_start(argv, "warn", text, sizeof text, 30000) !=
        0)
      fail_msg("chimed did not listen on 0.0.0.0:0");
    if (mutual) {
      assert_null(strstr(text, "warning: listening on"));
    } else {
      assert_non_null(strstr(text, "no auth.tokens and no tls.client_ca"));
      assert_null(strstr(text, "without TLS"));
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_client_opts),
      cmocka_unit_test(test_plaintext_refused),
      cmocka_unit_test(test_wrong_ca_refused),
      cmocka_unit_test(test_mutual),
      cmocka_unit_test(test_stream_round_trip),
      cmocka_unit_test(test_cli),
      cmocka_unit_test(test_stalled_connections),
      cmocka_unit_test(test_flood_past_fd_limit),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_warning),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
