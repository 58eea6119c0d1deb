/* The test side of the fake libcudart (fake_cudart.c): its control calls,
 * bound from the copy the library loaded, and its log read back. */
#ifndef CHIME_TEST_FAKE_CONTROL_H
#define CHIME_TEST_FAKE_CONTROL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  long (*run)(long max_ops);       /* runs queued device work; -1: all */
  long (*count)(const char *what); /* live objects of a kind */
  long (*launch)(void *stream, const void *ptr, size_t n); /* a "kernel" */
  int (*hold)(void *stream, int on); /* a stream's work waits while on */
  int64_t (*kernel_sum)(long id);    /* what a kernel read; -1: not run */
  void (*note)(const char *text);    /* a line in the fake's log */
  void (*reset)(void);               /* counters and failures off */
  int (*stream_create)(void **stream, unsigned int flags);
  int (*stream_destroy)(void *stream);
} fake_control_t;

/* Binds *fk to the fake that file names, already loaded (by the library's
 * first device call): exits the test with a message when it is not, or
 * lacks a call. */
void fake_control_bind(fake_control_t *fk, const char *file);

/* The log file's text (empty when there is none); free() it. */
char *fake_log_read(const char *path);
/* Lines of log that start with word. */
int fake_log_count(const char *log, const char *word);

#endif
