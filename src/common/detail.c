/* The calling thread's error detail (detail.h), the way errno and dlerror
 * keep theirs: each thread has its own, so threads sharing a client never
 * read each other's sentence and nothing needs a lock.
 *
 * A thread's buffer (CHIME__DETAIL_LEN bytes) is allocated at its first
 * failure and freed when it exits, so that threads that never see a chime
 * failure (gRPC's, the application's) carry no 17 KiB of TLS each. */
#include "common/detail.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_key_ok;
static _Thread_local char *t_detail;
/* When the buffer could not be allocated: a sentence that says so beats a
 * stale one. */
static _Thread_local const char *t_fixed;

/* At the thread's exit, on that thread. A failure in a destructor run after
 * this one (another key's, the application's) gets a new buffer, which
 * POSIX's next round of destructors frees, instead of a freed one. */
static void free_detail(void *p) {
  if (p == t_detail)
    t_detail = NULL;
  free(p);
}

static void make_key(void) {
  g_key_ok = pthread_key_create(&g_key, free_detail) == 0;
}

/* Runs when the library is unloaded (dlclose): no thread may later call a
 * destructor that is gone. The buffers of threads still running leak. */
__attribute__((destructor)) static void drop_key(void) {
  if (g_key_ok)
    pthread_key_delete(g_key);
}

static char *buffer(void) {
  if (t_detail != NULL)
    return t_detail;
  pthread_once(&g_once, make_key);
  char *b = malloc(CHIME__DETAIL_LEN);
  if (b == NULL)
    return NULL;
  if (g_key_ok && pthread_setspecific(g_key, b) != 0) {
    free(b);
    return NULL;
  }
  /* Without a key (none left) the buffer lives as long as the process. */
  t_detail = b;
  return b;
}

static CHIME__PRINTF(2, 0) void vset(int code, const char *fmt, va_list ap) {
  char *b = buffer();
  if (b == NULL) {
    t_fixed = "out of memory (the error's detail was lost)";
    return;
  }
  t_fixed = NULL;
  vsnprintf(b, CHIME__DETAIL_LEN, fmt, ap);
  if (b[0] == '\0')
    snprintf(b, CHIME__DETAIL_LEN, "%s", chime_strerror(code));
}

int chime__detailf(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset(code, fmt, ap);
  va_end(ap);
  return code;
}

int chime__detail(int code, const char *text) {
  if (text == NULL || text[0] == '\0')
    return chime__detailf(code, "%s", chime_strerror(code));
  /* A text that is (part of) this thread's detail already, e.g. a caller
   * passing chime_last_error() on: moved, not copied onto itself. */
  uintptr_t at = (uintptr_t)text, base = (uintptr_t)t_detail;
  if (t_detail != NULL && at >= base && at < base + CHIME__DETAIL_LEN) {
    memmove(t_detail, text, strlen(text) + 1);
    t_fixed = NULL;
    return code;
  }
  return chime__detailf(code, "%s", text);
}

const char *chime_last_error(void) {
  if (t_fixed != NULL)
    return t_fixed;
  return t_detail != NULL ? t_detail : "";
}
