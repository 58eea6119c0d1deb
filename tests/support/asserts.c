/* The e2e tests' checks (asserts.h). */
#include "asserts.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

void chime__assert_contains(const char *hay, const char *needle) {
  if (strstr(hay, needle) == NULL)
    fail_msg("expected \"%s\" in \"%s\"", needle, hay);
}

void chime__stop_clean(chime__chimed_t *d, chime_client_t *c) {
  assert_int_equal(chime__chimed_stop_client(d, c), 0);
}

chime_stats_t *chime__stats(chime_client_t *c) {
  chime_stats_t *st = NULL;
  int rc = chime_client_stats(c, &st);
  if (rc != 0)
    fail_msg("Stats: %s: %s", chime_err_name(rc), chime_last_error());
  return st;
}

const chime_table_stats_t *chime__stats_table(const chime_stats_t *st,
                                              const char *table) {
  for (uint32_t i = 0; i < st->ntables; i++)
    if (strcmp(st->tables[i].name, table) == 0)
      return &st->tables[i];
  fail_msg("no table %s in Stats", table);
  return NULL;
}

const chime_table_info_t *chime__info_table(const chime_server_info_t *info,
                                            const char *table) {
  for (uint32_t i = 0; i < info->ntables; i++)
    if (strcmp(info->tables[i].name, table) == 0)
      return &info->tables[i];
  fail_msg("no table %s in GetInfo", table);
  return NULL;
}

chime_table_stats_t chime__table_stats(chime_client_t *c, const char *table) {
  chime_stats_t *st = chime__stats(c);
  chime_table_stats_t out = *chime__stats_table(st, table);
  chime_stats_free(st);
  return out;
}
