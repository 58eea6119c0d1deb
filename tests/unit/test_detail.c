/* The calling thread's error detail (src/common/detail.c): "" until the
 * thread fails, its own per thread, the whole of a pinning error, cut (not
 * overrun) past its room, and a text taken from itself moved in place. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/detail.h"

static void *fresh_thread(void *arg) {
  char *seen = arg;
  snprintf(seen, 64, "%s", chime_last_error());
  chime__detailf(CHIME_EBUSY, "its own: %d", 7);
  return NULL;
}

static void test_per_thread(void **state) {
  (void)state;
  assert_int_equal(chime__detail(CHIME_EINVAL, "main's"), CHIME_EINVAL);
  char seen[64] = "untouched";
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fresh_thread, seen), 0);
  pthread_join(t, NULL); /* its buffer is freed at its exit (ASan: leaks) */
  assert_string_equal(seen, ""); /* a thread that failed nothing */
  assert_string_equal(chime_last_error(), "main's");
}

static void test_code_sentence_when_no_text(void **state) {
  (void)state;
  assert_int_equal(chime__detail(CHIME_ETIMEDOUT, NULL), CHIME_ETIMEDOUT);
  assert_string_equal(chime_last_error(), chime_strerror(CHIME_ETIMEDOUT));
  chime__detail(CHIME_EPROTO, "");
  assert_string_equal(chime_last_error(), chime_strerror(CHIME_EPROTO));
  chime__detailf(CHIME_EPROTO, "%s", "");
  assert_string_equal(chime_last_error(), chime_strerror(CHIME_EPROTO));
}

static void test_room(void **state) {
  (void)state;
  static char big[CHIME__DETAIL_LEN + 100];
  /* A whole pinning error behind a prefix fits. */
  memset(big, 'p', CHIME__PIN_ERRLEN - 1);
  big[CHIME__PIN_ERRLEN - 1] = '\0';
  chime__detailf(CHIME_ECUDA, "pin_host_memory: %s", big);
  assert_int_equal(strlen(chime_last_error()),
                   strlen("pin_host_memory: ") + CHIME__PIN_ERRLEN - 1);
  /* Longer text is cut to the room. */
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  chime__detail(CHIME_EINVAL, big);
  assert_int_equal(strlen(chime_last_error()), CHIME__DETAIL_LEN - 1);
}

static void test_own_text_moved(void **state) {
  (void)state;
  chime__detail(CHIME_EINVAL, "prefix: the rest");
  assert_int_equal(chime__detail(CHIME_ENOTFOUND, chime_last_error() + 8),
                   CHIME_ENOTFOUND);
  assert_string_equal(chime_last_error(), "the rest");
  chime__detail(CHIME_ENOTFOUND, chime_last_error());
  assert_string_equal(chime_last_error(), "the rest");
}

/* A failure in a destructor that runs after the detail's own at a thread's
 * exit (glibc runs keys in the order they were made) gets a new buffer, not
 * the freed one (ASan: heap-use-after-free), and that one is freed too
 * (LeakSanitizer). */
static pthread_key_t later_key;
static char later_seen[64];

static void later_destructor(void *p) {
  (void)p;
  chime__detail(CHIME_ECLOSED, "from a later destructor");
  snprintf(later_seen, sizeof(later_seen), "%s", chime_last_error());
}

static void *fail_then_exit(void *arg) {
  (void)arg;
  chime__detail(CHIME_EINVAL, "before the exit");
  pthread_setspecific(later_key, (void *)1);
  return NULL;
}

static void test_failure_in_a_later_destructor(void **state) {
  (void)state;
  chime__detail(CHIME_EINVAL, "the detail's key exists"); /* made first */
  assert_int_equal(pthread_key_create(&later_key, later_destructor), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fail_then_exit, NULL), 0);
  pthread_join(t, NULL);
  pthread_key_delete(later_key);
  assert_string_equal(later_seen, "from a later destructor");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_per_thread),
      cmocka_unit_test(test_code_sentence_when_no_text),
      cmocka_unit_test(test_room),
      cmocka_unit_test(test_own_text_moved),
      cmocka_unit_test(test_failure_in_a_later_destructor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
