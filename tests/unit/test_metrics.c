/* The exposition text of a Stats snapshot: label values escaped, times in
 * seconds, one HELP and TYPE per family. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/metrics.h"

static void test_format(void **state) {
  (void)state;
  Chime__V1__TableStats t = CHIME__V1__TABLE_STATS__INIT;
  Chime__V1__TableStats *tp[] = {&t};
  Chime__V1__StreamStats s = CHIME__V1__STREAM_STATS__INIT;
  Chime__V1__StreamStats *sp[] = {&s};
  Chime__V1__StatsResponse r = CHIME__V1__STATS_RESPONSE__INIT;
  t.name = "a\"b\\c\nd";
  t.inserts = 42;
  t.rate_sample_wait_ns = 1500000000u;
  t.samplers_waiting_items = 3;
  s.stream_id = 7;
  s.table = "a\"b\\c\nd";
  s.mode = CHIME__V1__MODE__MODE_SHM;
  s.bytes = 4096;
  r.n_tables = 1;
  r.tables = tp;
  r.n_streams = 1;
  r.streams = sp;
  r.ring_bytes_total = 123;
  char *text = chime__metrics_format(&r);
  assert_non_null(text);
  assert_non_null(strstr(
      text, "chime_table_inserts_total{table=\"a\\\"b\\\\c\\nd\"} 42\n"));
  assert_non_null(strstr(text, "chime_table_rate_sample_wait_seconds_total{"
                               "table=\"a\\\"b\\\\c\\nd\"} 1.500000000\n"));
  assert_non_null(strstr(
      text,
      "chime_table_samplers_waiting_items{table=\"a\\\"b\\\\c\\nd\"} 3\n"));
  assert_non_null(strstr(text, "chime_stream_bytes_total{stream=\"7\",table="
                               "\"a\\\"b\\\\c\\nd\",mode=\"shm\"} 4096\n"));
  assert_non_null(strstr(text, "# TYPE chime_ring_bytes gauge\n"
                               "chime_ring_bytes 123\n"));
  /* One TYPE line per family. */
  int types = 0;
  for (const char *p = text; (p = strstr(p, "# TYPE chime_table_size ")); p++)
    types++;
  assert_int_equal(types, 1);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_format)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
