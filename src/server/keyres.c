/* Key reservation files (keyres.h): "chime-keys 1 COUNT\n". */
#include "server/keyres.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chime/errors.h"

#define MAGIC "chime-keys 1 "

static void path_of(char *out, size_t len, const char *dir, const char *tmp,
                    const char *table) {
  snprintf(out, len, "%s/%skeys-%s", dir, tmp, table);
}

int chime__keyres_read(const char *dir, const char *table, uint64_t *count,
                       char *err, size_t errlen) {
  char path[4096], buf[64];
  *count = 0;
  path_of(path, sizeof(path), dir, "", table);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT)
      return 0;
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return CHIME_ESYS;
  }
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  int e = errno;
  close(fd);
  if (n < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(e));
    return CHIME_ESYS;
  }
  buf[n] = '\0';
  char *end = NULL;
  size_t m = strlen(MAGIC);
  errno = 0;
  unsigned long long v =
      strncmp(buf, MAGIC, m) == 0 && buf[m] >= '0' && buf[m] <= '9'
          ? strtoull(buf + m, &end, 10)
          : 0;
  if (end == NULL || errno != 0 || strcmp(end, "\n") != 0) {
    snprintf(err, errlen,
             "%s: not a key reservation file (expected \"" MAGIC "COUNT\\n\")",
             path);
    return CHIME_ECORRUPT;
  }
  *count = v;
  return 0;
}

static int sync_fd_path(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int e = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return e;
}

int chime__keyres_write(const char *dir, const char *table, uint64_t count,
                        char *err, size_t errlen) {
  char path[4096], tmp[4096], buf[64];
  uint64_t had = 0;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return CHIME_ESYS;
  }
  /* A file this cannot read is replaced: the new bound is above every
   * key this process issued, and restores take the larger of it and the
   * checkpoint's next key. */
  if (chime__keyres_read(dir, table, &had, err, errlen) == 0 && had > count)
    count = had;
  path_of(path, sizeof(path), dir, "", table);
  path_of(tmp, sizeof(tmp), dir, ".tmp-", table);
  int len = snprintf(buf, sizeof(buf), MAGIC "%" PRIu64 "\n", count);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int e = 0;
  if (fd < 0) {
    e = errno;
  } else {
    errno = 0;
    if (write(fd, buf, (size_t)len) != len)
      e = errno != 0 ? errno : EIO;
    if (e == 0 && fsync(fd) != 0)
      e = errno;
    if (close(fd) != 0 && e == 0)
      e = errno;
  }
  if (e == 0 && rename(tmp, path) != 0)
    e = errno;
  if (e == 0)
    e = sync_fd_path(dir, O_RDONLY | O_DIRECTORY);
  if (e != 0) {
    snprintf(err, errlen, "%s: %s", fd < 0 ? tmp : path, strerror(e));
    return CHIME_ESYS;
  }
  return 0;
}
