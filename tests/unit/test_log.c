/* The log hook (chime_set_logger, chime/errors.h): the embedded server's
 * warning reaches the hook, with its level, and nothing reaches stderr
 * (with a hook or without one: the library prints nothing itself). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <grpc/grpc.h>

#include "chime/chime.h"

typedef struct {
  int lines, warnings;
  char last[1024];
} seen_t;

static void capture(chime_log_level_t level, const char *msg, void *arg) {
  seen_t *s = arg;
  s->lines++;
  s->warnings += level == CHIME_LOG_WARN;
  snprintf(s->last, sizeof(s->last), "%s", msg);
}

/* An embedded server listening beyond loopback with no tokens, created,
 * listening and destroyed with stderr going to a file: the bytes written
 * there. */
static long serve_exposed(const char *config) {
  char err_path[128];
  snprintf(err_path, sizeof(err_path), "/tmp/chime-test-log-%d.err",
           (int)getpid());
  fflush(stderr);
  int saved = dup(2);
  int fd = open(err_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  chime_server_t *srv = NULL;
  chime_server_opts_t o = CHIME_SERVER_OPTS_INIT;
  o.config_path = config;
  o.listen = "0.0.0.0:0";
  char bound[128];
  int rc = chime_server_create(&srv, &o);
  if (rc == 0)
    rc = chime_server_listen(srv, bound, sizeof(bound));
  chime_server_destroy(srv);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  assert_int_equal(rc, 0);
  FILE *f = fopen(err_path, "r");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  unlink(err_path);
  return n;
}

static void test_hook(void **state) {
  (void)state;
  char config[128];
  snprintf(config, sizeof(config), "/tmp/chime-test-log-%d.json",
           (int)getpid());
  FILE *f = fopen(config, "w");
  assert_non_null(f);
  fputs("{\"tables\": [{\"name\": \"t\", \"spec\": \"x:u8\", "
        "\"capacity\": 4}]}",
        f);
  fclose(f);

  seen_t seen = {0};
  chime_set_logger(capture, &seen);
  assert_int_equal(serve_exposed(config), 0);
  assert_int_equal(seen.warnings, 1);
  assert_non_null(strstr(seen.last, "beyond loopback"));
  assert_null(strstr(seen.last, "chimed:")); /* the hook's to prefix */

  chime_set_logger(NULL, NULL); /* the default: dropped, not printed */
  int before = seen.lines;
  assert_int_equal(serve_exposed(config), 0);
  assert_int_equal(seen.lines, before);
  unlink(config);
}

static void test_level_names(void **state) {
  (void)state;
  assert_string_equal(chime_log_level_name(CHIME_LOG_ERROR), "error");
  assert_string_equal(chime_log_level_name(CHIME_LOG_WARN), "warning");
  assert_string_equal(chime_log_level_name(CHIME_LOG_INFO), "info");
  assert_string_equal(chime_log_level_name((chime_log_level_t)7), "unknown");
}

int main(void) {
  grpc_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hook),
      cmocka_unit_test(test_level_names),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  grpc_shutdown_blocking();
  return rc;
}
