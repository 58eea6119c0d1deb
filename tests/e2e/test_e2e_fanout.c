/* Three chime-actor processes feed one fifo table while four chime-learner
 * processes (two shm, two stream) read it: every learner checks every byte,
 * and the ids they received are disjoint and together exactly the ids the
 * actors had acked (nothing lost, nothing twice). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "chime/chime.h"
#include "harness.h"
#include "pattern.h"

#define ACTORS 3
#define LEARNERS 4
#define PER_ACTOR 2000 /* 6000 items: 750 batches of 8 */
#define BATCH "8"

static const char *config =
    "{\"tables\": [{\"name\": \"demo\", \"spec\": \"obs:f32[64], "
    "action:i32[], reward:f32[]\", \"capacity\": 1024, \"min_size\": 1, "
    "\"sampler\": \"fifo\"}]}\n";

static chime__chimed_t chimed;
static char actor_bin[512], learner_bin[512];

static int setup(void **state) {
  (void)state;
  if (chime__harness_bin("examples/chime-actor", actor_bin,
                         sizeof(actor_bin)) == NULL ||
      chime__harness_bin("examples/chime-learner", learner_bin,
                         sizeof(learner_bin)) == NULL)
    chime__skip("chime-actor / chime-learner are not built");
  int rc = chime__chimed_start_or_skip(&chimed, config, NULL, 30000);
  return rc == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  int st = 0;
  int rc = chime__chimed_stop(&chimed, 20000, &st);
  chime__harness_kill_all();
  return rc == 0 && st == 0 ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* The child's last JSON line, parsed; fails the test with its status. */
static json_t *child_json(chime__proc_t *p, const char *who) {
  int st = 0;
  char line[8192], sbuf[64];
  json_error_t jerr;
  int rc = chime__proc_wait(p, 120000, &st);
  if (rc != 0)
    fail_msg("%s did not finish in 120 s", who);
  if (chime__proc_last_json(p, line, sizeof(line)) != 0)
    fail_msg("%s (%s) printed no JSON", who,
             chime__status_str(st, sbuf, sizeof(sbuf)));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("%s: %s: %s", who, chime__status_str(st, sbuf, sizeof(sbuf)),
             line);
  json_t *j = json_loads(line, 0, &jerr);
  if (j == NULL)
    fail_msg("%s: bad JSON '%s': %s", who, line, jerr.text);
  return j;
}

static void test_three_actors_four_learners(void **state) {
  (void)state;
  chime__proc_t learners[LEARNERS], actors[ACTORS];
  char ids_path[LEARNERS][512], out[512], name[64];
  const char *dir = chime__harness_tmpdir();
  assert_non_null(dir);

  /* Learners first: they wait for their first batch, then stop once the
   * table has been quiet for a while after the actors are done. */
  for (int i = 0; i < LEARNERS; i++) {
    snprintf(ids_path[i], sizeof(ids_path[i]), "%s/ids-%d.txt", dir, i);
    snprintf(out, sizeof(out), "%s/learner-%d.out", dir, i);
    const char *argv[] = {learner_bin,
                          "--server",
                          chimed.addr,
                          "--table",
                          "demo",
                          "--batch-size",
                          BATCH,
                          "--batches",
                          "0",
                          "--mode",
                          i < 2 ? "shm" : "stream",
                          "--slots",
                          "4",
                          "--timeout-ms",
                          "60000",
                          "--until-idle",
                          "8000",
                          "--ids-out",
                          ids_path[i],
                          NULL};
    assert_int_equal(chime__proc_spawn(&learners[i], argv, out), 0);
  }
  /* Every stream open before the first insert, so none of them can find
   * the table already drained by the others. */
  chime_client_t *client = NULL;
  assert_int_equal(chime_client_create(&client, chimed.addr, NULL), 0);
  int64_t deadline = chime__now_ms() + 60000;
  for (;;) {
    chime_stats_t *st = NULL;
    assert_int_equal(chime_client_stats(client, &st), 0);
    uint32_t n = st->nstreams;
    chime_stats_free(st);
    if (n == LEARNERS)
      break;
    if (chime__now_ms() > deadline)
      fail_msg("only %u of %d learners opened their stream in 60 s", n,
               LEARNERS);
    chime__sleep_ms(20);
  }
  chime_client_destroy(client);

  for (int i = 0; i < ACTORS; i++) {
    char seed[16], count[16];
    snprintf(seed, sizeof(seed), "%d", i + 1);
    snprintf(count, sizeof(count), "%d", PER_ACTOR);
    snprintf(out, sizeof(out), "%s/actor-%d.out", dir, i);
    const char *argv[] = {actor_bin, "--server", chimed.addr, "--table", "demo",
                          "--count", count,      "--seed",    seed,      NULL};
    assert_int_equal(chime__proc_spawn(&actors[i], argv, out), 0);
  }

  for (int i = 0; i < ACTORS; i++) {
    snprintf(name, sizeof(name), "actor %d", i);
    json_t *j = child_json(&actors[i], name);
    assert_int_equal(json_integer_value(json_object_get(j, "inserted")),
                     PER_ACTOR);
    json_decref(j);
  }

  uint64_t total = 0;
  size_t cap = ACTORS * PER_ACTOR + 16;
  uint64_t *ids = calloc(cap, sizeof(*ids));
  assert_non_null(ids);
  for (int i = 0; i < LEARNERS; i++) {
    snprintf(name, sizeof(name), "learner %d", i);
    json_t *j = child_json(&learners[i], name);
    assert_string_equal(json_string_value(json_object_get(j, "mode")),
                        i < 2 ? "shm" : "stream");
    assert_true(json_is_true(json_object_get(j, "verified")));
    uint64_t batches =
        (uint64_t)json_integer_value(json_object_get(j, "batches"));
    json_decref(j);

    FILE *f = fopen(ids_path[i], "r");
    assert_non_null(f);
    uint64_t id, n = 0;
    while (fscanf(f, "%" SCNu64, &id) == 1) {
      if (total >= cap)
        fail_msg("learners received more than the %zu items acked", cap - 16);
      ids[total++] = id;
      n++;
    }
    fclose(f);
    assert_int_equal(n, batches * 8);
    fprintf(stderr, "learner %d (%s): %llu items\n", i,
            i < 2 ? "shm" : "stream", (unsigned long long)n);
  }

  /* Exactly the acked ids, each once. */
  assert_int_equal(total, ACTORS * PER_ACTOR);
  qsort(ids, total, sizeof(*ids), cmp_u64);
  uint64_t k = 0;
  for (uint64_t seed = 1; seed <= ACTORS; seed++)
    for (uint64_t i = 0; i < PER_ACTOR; i++, k++)
      if (ids[k] != chime__pattern_id(seed, i))
        fail_msg("item %llu: got id %llx, expected %llx (seed %llu index "
                 "%llu)",
                 (unsigned long long)k, (unsigned long long)ids[k],
                 (unsigned long long)chime__pattern_id(seed, i),
                 (unsigned long long)seed, (unsigned long long)i);
  free(ids);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_three_actors_four_learners),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
