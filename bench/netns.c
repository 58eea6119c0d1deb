/* chime-bench's two sides of an emulated link (netns.h). */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chime/errors.h"

#define LINK_SERVER "10.237.0.1" /* chime-link's server end */

static char server_ns[64];
static int home_fd = -1; /* the learner namespace, to come back to */

static int enter(const char *ns) {
  char path[128];
  snprintf(path, sizeof(path), "/run/netns/%s", ns);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr,
            "chime-bench: cannot enter %s (is chime-link running, "
            "and are we root?): %s\n",
            path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return CHIME_ESYS;
  }
  close(fd);
  return 0;
}

int chime__bench_link_enter(const char *name) {
  char ns[64];
  if (strlen(name) > 40)
    return CHIME_EINVAL;
  snprintf(ns, sizeof(ns), "%s-l", name);
  int rc = enter(ns);
  if (rc != 0)
    return rc;
  home_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_fd < 0)
    return CHIME_ESYS;
  snprintf(server_ns, sizeof(server_ns), "%s-s", name);
  return 0;
}

const char *chime__bench_link_server_ns(void) {
  return server_ns[0] != '\0' ? server_ns : NULL;
}

const char *chime__bench_server_host(void) {
  return server_ns[0] != '\0' ? LINK_SERVER : "127.0.0.1";
}

int chime__bench_server_socket(int type) {
  if (server_ns[0] == '\0')
    return socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (enter(server_ns) != 0)
    return -1;
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  int saved = errno;
  if (setns(home_fd, CLONE_NEWNET) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  errno = saved;
  return fd;
}
