/* The log hook (log.h): the hook and its argument under one lock, read
 * as a pair and called outside it. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static chime_logger_fn hook;
static void *hook_arg;

void chime_set_logger(chime_logger_fn fn, void *arg) {
  pthread_mutex_lock(&mu);
  hook = fn;
  hook_arg = arg;
  pthread_mutex_unlock(&mu);
}

const char *chime_log_level_name(chime_log_level_t level) {
  switch (level) {
  case CHIME_LOG_ERROR:
    return "error";
  case CHIME_LOG_WARN:
    return "warning";
  case CHIME_LOG_INFO:
    return "info";
  }
  return "unknown";
}

void chime__log(chime_log_level_t level, const char *fmt, ...) {
  pthread_mutex_lock(&mu);
  chime_logger_fn fn = hook;
  void *arg = hook_arg;
  pthread_mutex_unlock(&mu);
  if (fn == NULL)
    return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fn(level, line, arg);
}
