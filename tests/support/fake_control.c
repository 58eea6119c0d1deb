/* The fake libcudart's control calls and log, for tests (fake_control.h). */
#include "fake_control.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_MAX (1 << 22)

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) {
    fprintf(stderr, "fake libcudart lacks %s\n", name);
    exit(1);
  }
  return p;
}

void fake_control_bind(fake_control_t *fk, const char *file) {
  void *h = dlopen(file, RTLD_NOW | RTLD_NOLOAD);
  if (!h) {
    fprintf(stderr, "the fake runtime %s is not the one loaded\n", file);
    exit(1);
  }
  /* A data pointer becomes a function pointer through a union: ISO C has
   * no cast between them. */
#define SYM(field, name)                                                       \
  do {                                                                         \
    union {                                                                    \
      void *obj;                                                               \
      __typeof__(fk->field) fn;                                                \
    } u_;                                                                      \
    u_.obj = sym(h, name);                                                     \
    fk->field = u_.fn;                                                         \
  } while (0)
  SYM(run, "fake_cudart_run");
  SYM(count, "fake_cudart_count");
  SYM(launch, "fake_cudart_launch");
  SYM(hold, "fake_cudart_hold");
  SYM(kernel_sum, "fake_cudart_kernel_sum");
  SYM(note, "fake_cudart_note");
  SYM(reset, "fake_cudart_reset");
  SYM(stream_create, "cudaStreamCreateWithFlags");
  SYM(stream_destroy, "cudaStreamDestroy");
#undef SYM
}

char *fake_log_read(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = calloc(1, LOG_MAX);
  size_t n = 0;
  if (!buf) {
    fprintf(stderr, "out of memory reading %s\n", path);
    exit(1);
  }
  if (f) {
    n = fread(buf, 1, LOG_MAX - 1, f);
    fclose(f);
  }
  buf[n] = '\0';
  return buf;
}

int fake_log_count(const char *log, const char *word) {
  int n = 0;
  size_t len = strlen(word);
  for (const char *line = log; line && *line;) {
    n += strncmp(line, word, len) == 0;
    line = strchr(line, '\n');
    if (line)
      line++;
  }
  return n;
}
