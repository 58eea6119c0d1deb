/* Learner liveness and budget holds (liveness.h). */
#include "server/liveness.h"

#include <dirent.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chime/errors.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* A closed stream's learner usually lets go of its ring within
 * milliseconds (it reads the handoff's answer, unmaps at close): the sweep
 * looks again after SWEEP_FIRST_MS, then twice as long each time, up to
 * SWEEP_MS, so a budget comes back soon without a /proc scan a
 * millisecond. */
#define SWEEP_FIRST_MS 5
#define SWEEP_MS 1000

typedef struct watch_s watch_t;
struct watch_s {
  uv_poll_t poll;
  int pidfd;
  pid_t pid;
  int sock; /* our end of the handoff connection while the fd may be unread */
  int open; /* holds a stream reference: the stream is not closed yet */
  chime__stream_t *s; /* always holds one of its budget holds */
  chime__liveness_t *lv;
  watch_t *next;
};

struct chime__liveness_s {
  uv_loop_t *loop;
  const chime__stream_ops_t *ops;
  uv_timer_t sweep;
  uint64_t sweep_ms; /* the last sweep's delay (0: the first is now) */
  watch_t *watches;
};

static void watch_closed(uv_handle_t *hd) {
  watch_t *w = hd->data;
  close(w->pidfd);
  if (w->sock >= 0)
    close(w->sock);
  if (w->open)
    w->lv->ops->unref(w->s);
  w->lv->ops->unhold(w->s);
  free(w);
}

static void watch_remove(chime__liveness_t *lv, watch_t *w) {
  watch_t **pp = &lv->watches;
  while (*pp != w)
    pp = &(*pp)->next;
  *pp = w->next;
  uv_poll_stop(&w->poll);
  uv_close((uv_handle_t *)&w->poll, watch_closed);
}

static void on_pid_exit(uv_poll_t *p, int status, int events) {
  watch_t *w = p->data;
  (void)status;
  (void)events;
  if (w->open)
    w->lv->ops->kill(w->s, "learner process exited");
  watch_remove(w->lv, w);
}

/* Whether pid may still hold the memfd (dev, ino): 1 when it has it open or
 * mapped, or when its /proc cannot be read. */
static int learner_holds(pid_t pid, dev_t dev, ino_t ino) {
  char path[64], line[512];
  struct stat st;
  int found = 0;
  snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return 1;
  for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
    found = e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
            st.st_dev == dev && st.st_ino == ino;
  closedir(d);
  if (found)
    return 1;
  snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return 1;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    unsigned maj, min;
    unsigned long long inode;
    /* "start-end perms offset MAJ:MIN inode path"; long paths wrap into
     * continuation reads that fail this scan and are skipped. */
    if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &inode) == 3)
      found = makedev(maj, min) == dev && inode == (unsigned long long)ino;
  }
  fclose(f);
  return found;
}

static int ring_held(chime__liveness_t *lv, watch_t *w) {
  dev_t dev;
  ino_t ino;
  lv->ops->ring_id(w->s, &dev, &ino);
  return learner_holds(w->pid, dev, ino);
}

static void on_sweep(uv_timer_t *t) {
  chime__liveness_t *lv = t->data;
  int waiting = 0;
  watch_t *w = lv->watches;
  while (w != NULL) {
    watch_t *n = w->next;
    if (!w->open) {
      int unread = 0;
      /* The fd is in flight until the learner reads the reply (or drops
       * its end, which drops the fd with it). */
      if (w->sock >= 0 && (ioctl(w->sock, SIOCOUTQ, &unread) != 0 || unread))
        waiting = 1;
      else if (ring_held(lv, w))
        waiting = 1;
      else
        watch_remove(lv, w);
    }
    w = n;
  }
  if (waiting) {
    uint64_t next = lv->sweep_ms == 0 ? SWEEP_FIRST_MS : lv->sweep_ms * 2;
    lv->sweep_ms = next < SWEEP_MS ? next : SWEEP_MS;
    uv_timer_start(&lv->sweep, on_sweep, lv->sweep_ms, 0);
  }
}

void chime__liveness_watch(chime__liveness_t *lv, chime__stream_t *s, pid_t pid,
                           int sock) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  watch_t *w = pidfd >= 0 ? calloc(1, sizeof(*w)) : NULL;
  if (w == NULL) {
    /* Already gone (or no pidfd): the learner cannot use the ring. */
    if (pidfd >= 0)
      close(pidfd);
    if (sock >= 0)
      close(sock);
    lv->ops->kill(s, "learner process exited");
    lv->ops->unref(s);
    lv->ops->unhold(s);
    return;
  }
  w->pidfd = pidfd;
  w->pid = pid;
  w->sock = sock;
  w->open = 1;
  w->s = s;
  w->lv = lv;
  uv_poll_init(lv->loop, &w->poll, pidfd);
  w->poll.data = w;
  uv_poll_start(&w->poll, UV_READABLE, on_pid_exit);
  w->next = lv->watches;
  lv->watches = w;
  /* A stream closed before its watch existed: nothing will notify. */
  chime__liveness_check(lv);
}

void chime__liveness_check(chime__liveness_t *lv) {
  for (watch_t *w = lv->watches; w != NULL; w = w->next) {
    if (w->open && lv->ops->closed(w->s)) {
      /* The stream is over; the learner may still hold the ring. */
      w->open = 0;
      lv->ops->unref(w->s);
      lv->sweep_ms = 0; /* sweeps now, then SWEEP_FIRST_MS on */
      uv_timer_start(&lv->sweep, on_sweep, 0, 0);
    }
  }
}

int chime__liveness_create(chime__liveness_t **out, uv_loop_t *loop,
                           const chime__stream_ops_t *ops) {
  chime__liveness_t *lv = calloc(1, sizeof(*lv));
  *out = lv;
  if (lv == NULL)
    return CHIME_ENOMEM;
  lv->loop = loop;
  lv->ops = ops;
  uv_timer_init(loop, &lv->sweep);
  lv->sweep.data = lv;
  return 0;
}

void chime__liveness_close(chime__liveness_t *lv) {
  while (lv->watches != NULL)
    watch_remove(lv, lv->watches);
  uv_timer_stop(&lv->sweep);
  uv_close((uv_handle_t *)&lv->sweep, NULL);
}

void chime__liveness_free(chime__liveness_t *lv) {
  free(lv);
}
