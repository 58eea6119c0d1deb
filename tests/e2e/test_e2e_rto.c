/* tcp_rto_max_ms (docs/operations.md; docs/remote.md, "A link that
 * drops"): every TCP connection chimed accepts carries TCP_RTO_MAX_MS as
 * configured (1000 by default, 0: the kernel's 120 s), so a stream's data
 * moves again within about that long after a link that was down comes
 * back. Checked on chimed's own sockets: the test (chimed's parent, so
 * allowed to) takes a copy of each of chimed's descriptors with
 * pidfd_getfd and reads the option on the connections to its port. Skips
 * (77) on a kernel without the option or without pidfd_getfd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chime/chime.h"
#include "harness.h"

#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define TABLES                                                                 \
  "\"tables\": [{\"name\": \"t\", \"spec\": \"x:u8[8]\", \"capacity\": 16}]"

/* The TCP_RTO_MAX_MS of every connection chimed (pid) accepted on port:
 * how many it found, each value in got[]; -1 when a copy cannot be had
 * (the test then skips). */
static int rto_of_accepted(int pid, int port, int *got, int max) {
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pfd < 0)
    return -1;
  char dir[64];
  snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0, copied = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    if (e->d_name[0] == '.')
      continue;
    int fd = (int)syscall(SYS_pidfd_getfd, pfd, atoi(e->d_name), 0);
    if (fd < 0)
      continue;
    copied++;
    struct sockaddr_in me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    int v = 0;
    socklen_t vl = sizeof(v);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
        me.sin_family == AF_INET && ntohs(me.sin_port) == port &&
        getpeername(fd, (struct sockaddr *)&peer, &pl) == 0) {
      if (getsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &v, &vl) != 0) {
        close(fd);
        n = -1; /* a kernel without the option */
        break;
      }
      got[n++] = v;
    }
    close(fd);
  }
  closedir(d);
  close(pfd);
  return copied == 0 ? -1 : n;
}

static void check(const char *extra, int want) {
  char config[256];
  snprintf(config, sizeof(config), "{%s%s}", extra, TABLES);
  chime__chimed_t d;
  chime_client_t *c = NULL;
  assert_int_equal(chime__chimed_start_client(&d, config, &c), 0);
  chime_server_info_t *info = NULL;
  assert_int_equal(chime_client_info(c, &info), 0); /* connected */
  chime_server_info_free(info);
  const char *colon = strrchr(d.addr, ':');
  assert_non_null(colon);
  int got[16], n = rto_of_accepted(d.proc.pid, atoi(colon + 1), got, 16);
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
  if (n < 0)
    chime__skip("no pidfd_getfd here, or a kernel without TCP_RTO_MAX_MS");
  assert_true(n >= 1);
  for (int i = 0; i < n; i++)
    assert_int_equal(got[i], want);
}

static void test_default(void **state) {
  (void)state;
  check("", 1000);
}

static void test_configured(void **state) {
  (void)state;
  check("\"tcp_rto_max_ms\": 1500, ", 1500);
}

static void test_kernel_default(void **state) {
  (void)state;
  check("\"tcp_rto_max_ms\": 0, ", 120000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default),
      cmocka_unit_test(test_configured),
      cmocka_unit_test(test_kernel_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
