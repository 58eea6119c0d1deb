/* Checkpoints through the real chimed: `Checkpoint` then a restart with
 * --restore gives the same batches byte for byte (fifo) and the same
 * counts; chimed killed with SIGKILL at random points during checkpoints
 * leaves the last complete one loadable; a flipped byte in each file and a
 * spec that differs are refused at start, naming the file or the leaf;
 * interval_s makes checkpoints on its own and keep prunes them; Checkpoint
 * without a checkpoint dir is refused; a sequence table's windows come
 * back the same; names past 16 digits, and a FIFO in place of a file; a
 * ragged table's items (chimectl checkpoint) come back with the same
 * offsets, values and policy versions. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "chime/chime.h"
#include "harness.h"

#define YB 48 /* bytes of leaf y */

static char cfg_json[4096];

static void make_config(const char *dir, const char *extra, const char *spec) {
  snprintf(cfg_json, sizeof(cfg_json),
           "{\"checkpoint\": {\"dir\": \"%s\", \"keep\": 3%s},\n"
           " \"tables\": [{\"name\": \"f\", \"spec\": \"%s\", "
           "\"capacity\": 20000, \"sampler\": \"fifo\"},\n"
           "  {\"name\": \"u\", \"spec\": \"x:u64[]\", \"capacity\": 100, "
           "\"sampler\": \"uniform\"}]}\n",
           dir, extra, spec);
}

static const char *spec_f = "x:u64[], y:u8[48]";

static void ckpt_dir(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/%s", chime__harness_tmpdir(), name);
}

static void start(chime__chimed_t *d, chime_client_t **c, const char *restore) {
  const char *args[] = {"--restore", restore, NULL};
  int rc =
      chime__chimed_start_or_skip(d, cfg_json, restore ? args : NULL, 60000);
  assert_int_equal(rc, 0);
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.timeout_ms = 60000;
  assert_int_equal(chime_client_create(c, d->addr, &o), 0);
}

/* Destroys c and stops chimed, whatever its exit. */
static void stop_unchecked(chime__chimed_t *d, chime_client_t *c) {
  chime_client_destroy(c);
  int st;
  chime__chimed_stop(d, 20000, &st);
}

/* Samples i = first .. first + n - 1 into "f": i's 8 bytes, then leaf y's
 * YB bytes made from i; all acked. */
static void write_keyed(chime_client_t *c, uint64_t first, uint64_t n) {
  chime_writer_t *w = NULL;
  uint8_t s[8 + YB];
  assert_int_equal(chime_writer_open(&w, c, "f", NULL), 0);
  for (uint64_t i = first; i < first + n; i++) {
    memcpy(s, &i, 8);
    for (int b = 0; b < YB; b++)
      s[8 + b] = (uint8_t)(i * 31 + (uint64_t)b);
    assert_int_equal(chime_writer_append(w, s, sizeof(s), 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
}

/* nb batches of 100 from table f: leaves and sample info, concatenated. */
static uint8_t *drain(chime_client_t *c, int nb, size_t *len) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = 100;
  so.slots = 2; /* little sampled ahead: what is not taken stays taken */
  chime_stream_t *s = NULL;
  size_t per = 100 * (8 + YB) + 100 * sizeof(chime_sample_info_t);
  uint8_t *out = malloc(per * (size_t)nb), *p = out;
  assert_non_null(out);
  assert_int_equal(chime_stream_open(&s, c, "f", &so), 0);
  for (int k = 0; k < nb; k++) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 30000), 0);
    assert_int_equal(b.count, 100);
    memcpy(p, b.leaf[0].data, 800);
    p += 800;
    memcpy(p, b.leaf[1].data, 100 * YB);
    p += 100 * YB;
    for (uint32_t j = 0; j < 100; j++) {
      chime_sample_info_t in = b.info[j];
      in.table_size = 0; /* what the sampler had ahead differs */
      memcpy(p, &in, sizeof(in));
      p += sizeof(in);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  *len = per * (size_t)nb;
  return out;
}

static void table_counts(chime_client_t *c, uint64_t *size, uint64_t *inserts,
                         uint64_t *samples) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(c, &st), 0);
  for (uint32_t i = 0; i < st->ntables; i++) {
    if (strcmp(st->tables[i].name, "f") == 0) {
      *size = st->tables[i].size;
      *inserts = st->tables[i].inserts;
      *samples = st->tables[i].samples;
    }
  }
  chime_stats_free(st);
}

/* Checkpoint, then both the running server and a restored one hand out the
 * same batches. */
static void test_restore_same_batches(void **state) {
  (void)state;
  char dir[600];
  ckpt_dir(dir, sizeof(dir), "same");
  make_config(dir, "", spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 1000);
  size_t l0;
  free(drain(c, 1, &l0)); /* some sampled out before the checkpoint */
  uint64_t size = 0, ins, smp;
  /* The batch the closed stream had sampled ahead comes back to the table
   * once the stream is gone: wait for it (bounded). */
  for (int64_t end = chime__now_ms() + 20000;
       chime__now_ms() < end && size != 900; chime__sleep_ms(20))
    table_counts(c, &size, &ins, &smp);
  assert_int_equal(size, 900);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  assert_int_equal(r.tables, 2);
  table_counts(c, &size, &ins, &smp);
  assert_int_equal(r.items, size); /* table u is empty */
  assert_int_equal(ins, 1000);
  fprintf(stderr,
          "checkpoint: %llu items, %llu bytes, %.3f ms, pause %.3f ms\n",
          (unsigned long long)r.items, (unsigned long long)r.bytes,
          (double)r.duration_ns / 1e6, (double)r.pause_ns / 1e6);
  int nb = (int)(size / 100);
  size_t la, lb;
  uint8_t *a = drain(c, nb, &la);
  stop_unchecked(&d, c);

  start(&d, &c, "latest");
  uint64_t size2, ins2, smp2;
  table_counts(c, &size2, &ins2, &smp2);
  assert_int_equal(size2, size);
  assert_int_equal(ins2, ins);
  assert_int_equal(smp2, smp);
  uint8_t *b = drain(c, nb, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  /* The next key goes on past every key the old server reserved (it
   * might have acked any): the bound in its keys file, not 1001. */
  char kp[700];
  snprintf(kp, sizeof(kp), "%s/keys-f", dir);
  FILE *kf = fopen(kp, "r");
  assert_non_null(kf);
  unsigned long long bound = 0;
  assert_int_equal(fscanf(kf, "chime-keys 1 %llu", &bound), 1);
  fclose(kf);
  assert_true(bound > 1000);
  write_keyed(c, 1001, 100);
  uint8_t *n = drain(c, 1, &lb);
  chime_sample_info_t in;
  memcpy(&in, n + 800 + 100 * YB, sizeof(in));
  assert_int_equal(in.key, bound);
  free(n);
  free(a);
  free(b);
  stop_unchecked(&d, c);
}

/* chimed started to fail: its exit status and what it said. */
static int refused(const char *restore, char *msg, size_t len) {
  char bin[1024], name[64], cfg[600], out[600], err[600];
  chime__proc_t p;
  static int n;
  snprintf(name, sizeof(name), "refused-%d.json", n);
  assert_int_equal(chime__harness_write_file(name, cfg_json, cfg, sizeof(cfg)),
                   0);
  snprintf(out, sizeof(out), "%s/refused-%d.out", chime__harness_tmpdir(), n);
  snprintf(err, sizeof(err), "%s/refused-%d.err", chime__harness_tmpdir(), n);
  n++;
  assert_non_null(chime__harness_bin("src/server/chimed", bin, sizeof(bin)));
  const char *argv[] = {bin, "--listen",  "127.0.0.1:0", "--config",
                        cfg, "--restore", restore,       NULL};
  assert_int_equal(chime__proc_spawn_err(&p, argv, out, err), 0);
  int st = 0;
  if (chime__proc_wait(&p, 30000, &st) != 0) {
    chime__proc_kill(&p);
    fail_msg("chimed --restore %s did not exit within 30 s", restore);
  }
  FILE *f = fopen(err, "r");
  assert_non_null(f);
  size_t k = fread(msg, 1, len - 1, f);
  msg[k] = '\0';
  fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void flip(const char *p, long at) {
  int fd = open(p, O_RDWR);
  uint8_t ch;
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, &ch, 1, at), 1);
  ch ^= 0x01;
  assert_int_equal(pwrite(fd, &ch, 1, at), 1);
  close(fd);
}

/* A flipped byte in each file: chimed refuses to start, naming it; a spec
 * that differs: refused naming the leaf; the intact checkpoint loads. */
static void test_corrupt_and_spec_refused(void **state) {
  (void)state;
  char dir[600], msg[4096];
  ckpt_dir(dir, sizeof(dir), "corrupt");
  make_config(dir, "", spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 500);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  stop_unchecked(&d, c);
  const char *files[] = {"table-000.ckpt", "table-001.ckpt", "MANIFEST",
                         "DONE"};
  srand(12);
  for (int i = 0; i < 4; i++) {
    char p[1300];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", r.path, files[i]);
    assert_int_equal(stat(p, &st), 0);
    long at = rand() % st.st_size;
    flip(p, at);
    int ex = refused(r.path, msg, sizeof(msg));
    if (ex == 0 || strstr(msg, files[i]) == NULL)
      fail_msg("%s byte %ld: exit %d, said '%s'", files[i], at, ex, msg);
    flip(p, at);
  }
  make_config(dir, "", "x:u64[], y:u8[47]");
  assert_int_not_equal(refused("latest", msg, sizeof(msg)), 0);
  if (strstr(msg, "leaf 'y'") == NULL)
    fail_msg("spec: said '%s'", msg);
  make_config(dir, "", spec_f);
  start(&d, &c, r.path);
  uint64_t size = 0, ins, smp;
  table_counts(c, &size, &ins, &smp);
  assert_int_equal(size, 500);
  stop_unchecked(&d, c);
}

static int complete_ckpts(const char *dir, int *all);

/* The keys of table f's n oldest items (a fifo batch of n; they leave). */
static void oldest_keys(chime_client_t *c, uint32_t n, uint64_t *keys) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = n;
  so.slots = 2;
  chime_stream_t *s = NULL;
  assert_int_equal(chime_stream_open(&s, c, "f", &so), 0);
  chime_batch_t b;
  assert_int_equal(chime_stream_next(s, &b, 30000), 0);
  for (uint32_t j = 0; j < n; j++)
    keys[j] = b.info[j].key;
  assert_int_equal(chime_stream_release(s, &b), 0);
  chime_stream_close(s);
}

/* Keys are never issued again after --restore: items acked after the
 * checkpoint (keys 11..20) are lost with a SIGKILL, and the restored
 * server's new items get keys past every key the old one may have acked
 * (its reservation file in the checkpoint dir), not 11.. again (before: a
 * learner's MutatePriorities on key 11 changed another item). Killed
 * again before any new checkpoint and restored from the same one, the
 * third server goes on past the second's keys too. */
static void test_keys_not_reissued(void **state) {
  (void)state;
  char dir[600];
  ckpt_dir(dir, sizeof(dir), "keys");
  make_config(dir, "", spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 10);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  write_keyed(c, 11, 10); /* keys 11..20, acked, not in the checkpoint */
  chime_client_destroy(c);
  chime__proc_kill(&d.proc);
  uint64_t acked_max = 20, keys[15];
  for (int round = 0; round < 2; round++) {
    start(&d, &c, "latest");
    uint64_t size = 0, ins, smp;
    table_counts(c, &size, &ins, &smp);
    assert_int_equal(size, 10);
    write_keyed(c, 100, 5);
    oldest_keys(c, 15, keys);
    for (uint32_t j = 0; j < 10; j++)
      assert_int_equal(keys[j], j + 1); /* the checkpoint's, as they were */
    for (uint32_t j = 10; j < 15; j++) {
      if (keys[j] <= acked_max)
        fail_msg("round %d: key %llu issued again (keys up to %llu were "
                 "acked before the kill)",
                 round, (unsigned long long)keys[j],
                 (unsigned long long)acked_max);
      assert_int_equal(keys[j], keys[10] + (j - 10));
    }
    acked_max = keys[14];
    chime_client_destroy(c);
    chime__proc_kill(&d.proc);
  }
}

/* A ckpt-N without DONE in dir, or 0. */
static int find_incomplete(const char *dir, char *out, size_t len) {
  DIR *dd = opendir(dir);
  struct dirent *de;
  int found = 0;
  while (dd != NULL && !found && (de = readdir(dd)) != NULL) {
    struct stat st;
    char p[1300];
    if (strncmp(de->d_name, "ckpt-", 5) != 0)
      continue;
    snprintf(p, sizeof(p), "%s/%s/DONE", dir, de->d_name);
    if (stat(p, &st) != 0) {
      snprintf(out, len, "%s/%s", dir, de->d_name);
      found = 1;
    }
  }
  if (dd != NULL)
    closedir(dd);
  return found;
}

typedef struct {
  const char *addr;
  int rc;
} ask_t;

static void *ask(void *p) {
  ask_t *a = p;
  chime_client_t *c = NULL;
  chime_client_opts_t o = CHIME_CLIENT_OPTS_INIT;
  o.timeout_ms = 60000;
  a->rc = chime_client_create(&c, a->addr, &o);
  if (a->rc == 0)
    a->rc = chime_client_checkpoint(c, NULL);
  chime_client_destroy(c);
  return NULL;
}

/* SIGKILL at random points of checkpoints: every restart loads the newest
 * complete checkpoint, with every item. */
static void test_sigkill_during_checkpoint(void **state) {
  (void)state;
  char dir[600];
  ckpt_dir(dir, sizeof(dir), "kill");
  make_config(dir, "", spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 20000);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  stop_unchecked(&d, c);
  unsigned seed = (unsigned)getpid();
  fprintf(stderr, "sigkill: seed %u, a checkpoint takes %.1f ms\n", seed,
          (double)r.duration_ns / 1e6);
  srand(seed);
  /* Delays spread over a checkpoint's length and a little past it. */
  int span_us = (int)(r.duration_ns / 1000) * 3 / 2 + 1;
  int cut = 0, incomplete = 0;
  for (int k = 0; k < 6; k++) {
    start(&d, &c, "latest");
    uint64_t size = 0, ins, smp;
    table_counts(c, &size, &ins, &smp);
    assert_int_equal(size, 20000);
    ask_t a = {d.addr, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ask, &a), 0);
    usleep((useconds_t)(rand() % span_us));
    chime_client_destroy(c);
    chime__proc_kill(&d.proc);
    pthread_join(th, NULL);
    cut += a.rc != 0; /* killed before its answer */
    /* Renamed into place but killed before DONE: never loaded. */
    char part[1300], msg[4096];
    if (find_incomplete(dir, part, sizeof(part))) {
      incomplete++;
      assert_int_not_equal(refused(part, msg, sizeof(msg)), 0);
      if (strstr(msg, "no DONE marker") == NULL)
        fail_msg("%s: said '%s'", part, msg);
    }
  }
  fprintf(stderr,
          "sigkill: 6 kills, %d before the checkpoint's answer; %d times a "
          "ckpt-N without DONE was there (refused when named)\n",
          cut, incomplete);
  start(&d, &c, "latest");
  uint64_t size = 0, ins, smp;
  table_counts(c, &size, &ins, &smp);
  assert_int_equal(size, 20000);
  assert_int_equal(ins, 20000);
  stop_unchecked(&d, c);
}

static int complete_ckpts(const char *dir, int *all) {
  DIR *dd = opendir(dir);
  int n = 0;
  *all = 0;
  if (dd == NULL)
    return 0;
  struct dirent *de;
  while ((de = readdir(dd)) != NULL) {
    if (strncmp(de->d_name, "ckpt-", 5) != 0)
      continue;
    char p[1300];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s/DONE", dir, de->d_name);
    n += stat(p, &st) == 0;
    (*all)++;
  }
  closedir(dd);
  return n;
}

/* interval_s: checkpoints with no call; keep: 2 stay. */
static void test_interval_and_keep(void **state) {
  (void)state;
  char dir[600], latest[1300] = "", first[1300] = "";
  ckpt_dir(dir, sizeof(dir), "interval");
  snprintf(cfg_json, sizeof(cfg_json),
           "{\"checkpoint\": {\"dir\": \"%s\", \"interval_s\": 1, "
           "\"keep\": 2},\n"
           " \"tables\": [{\"name\": \"f\", \"spec\": \"%s\", "
           "\"capacity\": 100, \"sampler\": \"fifo\"}]}\n",
           dir, spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 10);
  /* Until the newest has moved on twice past the first one seen. */
  int moves = 0;
  for (int64_t end = chime__now_ms() + 60000;
       moves < 3 && chime__now_ms() < end; chime__sleep_ms(100)) {
    DIR *dd = opendir(dir);
    if (dd == NULL)
      continue;
    struct dirent *de;
    char best[1300] = "";
    while ((de = readdir(dd)) != NULL)
      if (strncmp(de->d_name, "ckpt-", 5) == 0 && strcmp(de->d_name, best) > 0)
        snprintf(best, sizeof(best), "%s", de->d_name);
    closedir(dd);
    if (best[0] && strcmp(best, latest) != 0) {
      if (!first[0])
        snprintf(first, sizeof(first), "%s", best);
      snprintf(latest, sizeof(latest), "%s", best);
      moves++;
    }
  }
  assert_int_equal(moves, 3);
  stop_unchecked(&d, c);
  int all, done = complete_ckpts(dir, &all);
  assert_true(done >= 1 && done <= 2);
  assert_int_equal(all, done);
}

static void test_no_dir_refused(void **state) {
  (void)state;
  chime__chimed_t d;
  chime_client_t *c;
  int rc = chime__chimed_start_client(
      &d,
      "{\"tables\": [{\"name\": \"f\", \"spec\": \"x:u64[]\", "
      "\"capacity\": 10}]}",
      &c);
  assert_int_equal(rc, 0);
  assert_int_equal(chime_client_checkpoint(c, NULL), CHIME_EINVAL);
  assert_non_null(strstr(chime_last_error(), "checkpoint dir"));
  assert_int_equal(chime__chimed_stop_client(&d, c), 0);
}

/* chimectl checkpoint ADDR, plain and --json. */
static void test_chimectl(void **state) {
  (void)state;
  char dir[600], bin[1024], out[700], line[4096];
  if (chime__harness_bin("examples/chimectl", bin, sizeof(bin)) == NULL)
    chime__skip("chimectl is not built");
  ckpt_dir(dir, sizeof(dir), "ctl");
  make_config(dir, "", spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 10);
  for (int json = 0; json < 2; json++) {
    chime__proc_t p;
    snprintf(out, sizeof(out), "%s/ctl-%d.out", chime__harness_tmpdir(), json);
    const char *argv[] = {bin, json ? "--json" : "checkpoint",
                          json ? "checkpoint" : d.addr, json ? d.addr : NULL,
                          NULL};
    assert_int_equal(chime__proc_spawn(&p, argv, out), 0);
    int st = 0;
    assert_int_equal(chime__proc_wait(&p, 60000, &st), 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    line[n] = '\0';
    fclose(f);
    if (json)
      assert_non_null(strstr(line, "\"items\": 10"));
    else
      assert_non_null(strstr(line, "2 tables, 10 items"));
    assert_non_null(strstr(line, dir));
  }
  stop_unchecked(&d, c);
}

/* --- a sequence table --- */

#define SEQ_T 8
#define SEQ_B 8

static void seq_config(const char *dir) {
  snprintf(cfg_json, sizeof(cfg_json),
           "{\"checkpoint\": {\"dir\": \"%s\", \"keep\": 2},\n"
           " \"tables\": [{\"name\": \"s\", \"spec\": \"id:u32[2], x:u8[3]\", "
           "\"capacity_steps\": 2048, \"sequence_length\": %d, \"stride\": 4, "
           "\"episode_end\": \"pad\", \"sampler\": \"fifo\"}]}\n",
           dir, SEQ_T);
}

static void seq_append(chime_writer_t *w, uint32_t tag, uint32_t from,
                       uint32_t n) {
  uint8_t s[11];
  for (uint32_t i = from; i < from + n; i++) {
    uint32_t id[2] = {tag, i};
    memcpy(s, id, 8);
    for (int b = 0; b < 3; b++)
      s[8 + b] = (uint8_t)(tag * 31 + i * 7 + (uint32_t)b);
    assert_int_equal(chime_writer_append(w, s, sizeof(s), 1.0), 0);
  }
}

static void seq_counts(chime_client_t *c, uint64_t *size, uint64_t *steps,
                       uint64_t *inserts) {
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(c, &st), 0);
  assert_int_equal(st->ntables, 1);
  *size = st->tables[0].size;
  *steps = st->tables[0].steps;
  *inserts = st->tables[0].inserts;
  chime_stats_free(st);
}

/* nb batches of table s: every leaf (mask included) and the sample info
 * (episode, first step, length), concatenated. */
static uint8_t *seq_drain(chime_client_t *c, int nb, size_t *len) {
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = SEQ_B;
  so.slots = 2;
  chime_stream_t *s = NULL;
  size_t per =
      SEQ_B * SEQ_T * (8 + 3 + 1) + SEQ_B * sizeof(chime_sample_info_t);
  uint8_t *out = malloc(per * (size_t)nb), *p = out;
  assert_non_null(out);
  assert_int_equal(chime_stream_open(&s, c, "s", &so), 0);
  for (int k = 0; k < nb; k++) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 30000), 0);
    assert_int_equal(b.count, SEQ_B);
    assert_int_equal(b.nleaves, 3);
    for (uint32_t l = 0; l < 3; l++) {
      memcpy(p, b.leaf[l].data, b.leaf[l].bytes);
      p += b.leaf[l].bytes;
    }
    for (uint32_t j = 0; j < SEQ_B; j++) {
      chime_sample_info_t in = b.info[j];
      in.table_size = 0;
      memcpy(p, &in, sizeof(in));
      p += sizeof(in);
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  *len = (size_t)(p - out);
  return out;
}

/* A sequence table through chimed: three writers over a store turned over
 * (one episode left open at the checkpoint), Checkpoint, then the running
 * server and one restarted with --restore hand out the same windows byte
 * for byte; the counts come back and new episodes go on. */
static void test_sequence_restore(void **state) {
  (void)state;
  char dir[600];
  ckpt_dir(dir, sizeof(dir), "seq");
  seq_config(dir);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  chime_writer_t *w[3];
  uint32_t len[3] = {0, 0, 0}, tag[3] = {1, 2, 3};
  for (int k = 0; k < 3; k++)
    assert_int_equal(chime_writer_open(&w[k], c, "s", NULL), 0);
  for (int round = 0; round < 60; round++) {
    for (int k = 0; k < 3; k++) {
      uint32_t n = (uint32_t)(3 + (round * 7 + k * 5) % 29);
      seq_append(w[k], tag[k], len[k], n);
      len[k] += n;
      if (k != 2 && (round + k) % 3 == 2) {
        assert_int_equal(chime_writer_end_episode(w[k]), 0);
        tag[k] += 1000;
        len[k] = 0;
      }
    }
  }
  for (int k = 0; k < 3; k++)
    assert_int_equal(chime_writer_flush(w[k]), 0);
  uint64_t size, steps, ins;
  seq_counts(c, &size, &steps, &ins);
  chime_checkpoint_result_t r;
  assert_int_equal(chime_client_checkpoint(c, &r), 0);
  assert_int_equal(r.items, size);
  assert_true(steps > 1800);
  fprintf(stderr,
          "sequence checkpoint: %llu windows, %llu steps, %llu bytes, %.3f "
          "ms, pause %.3f ms\n",
          (unsigned long long)r.items, (unsigned long long)steps,
          (unsigned long long)r.bytes, (double)r.duration_ns / 1e6,
          (double)r.pause_ns / 1e6);
  for (int k = 0; k < 3; k++)
    assert_int_equal(chime_writer_close(w[k]), 0);
  int nb = (int)(size / SEQ_B);
  size_t la, lb;
  uint8_t *a = seq_drain(c, nb, &la);
  stop_unchecked(&d, c);

  start(&d, &c, "latest");
  uint64_t size2, steps2, ins2;
  seq_counts(c, &size2, &steps2, &ins2);
  assert_int_equal(size2, size);
  assert_int_equal(steps2, steps);
  assert_int_equal(ins2, ins);
  uint8_t *b = seq_drain(c, nb, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  chime_writer_t *nw;
  assert_int_equal(chime_writer_open(&nw, c, "s", NULL), 0);
  seq_append(nw, 7, 0, SEQ_T * SEQ_B);
  assert_int_equal(chime_writer_end_episode(nw), 0);
  assert_int_equal(chime_writer_close(nw), 0);
  free(seq_drain(c, 1, &lb));
  free(a);
  free(b);
  stop_unchecked(&d, c);
}

/* Sequence numbers past 16 digits through chimed: with a complete
 * ckpt-9999999999999999 in the dir, Checkpoint writes
 * ckpt-10000000000000000 and then ckpt-10000000000000001, and --restore
 * latest loads the newest. A FIFO in place of a table file stops a
 * restore at once, naming the file (it used to wait in open() for ever). */
static void test_wide_names_and_fifo(void **state) {
  (void)state;
  char dir[600], p[1400], msg[4096];
  ckpt_dir(dir, sizeof(dir), "wide");
  make_config(dir, "", spec_f);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  write_keyed(c, 1, 10);
  chime_checkpoint_result_t r0, r1, r2;
  assert_int_equal(chime_client_checkpoint(c, &r0), 0);
  stop_unchecked(&d, c);
  snprintf(p, sizeof(p), "%s/ckpt-9999999999999999", dir);
  assert_int_equal(rename(r0.path, p), 0);
  start(&d, &c, "latest");
  uint64_t size = 0, ins, smp;
  table_counts(c, &size, &ins, &smp);
  assert_int_equal(size, 10);
  write_keyed(c, 11, 5);
  assert_int_equal(chime_client_checkpoint(c, &r1), 0);
  assert_non_null(strstr(r1.path, "/ckpt-10000000000000000"));
  write_keyed(c, 16, 5);
  if (chime_client_checkpoint(c, &r2) != 0)
    fail_msg("second checkpoint: %s", chime_last_error());
  assert_non_null(strstr(r2.path, "/ckpt-10000000000000001"));
  stop_unchecked(&d, c);
  start(&d, &c, "latest");
  table_counts(c, &size, &ins, &smp);
  assert_int_equal(size, 20);
  stop_unchecked(&d, c);

  snprintf(p, sizeof(p), "%s/table-001.ckpt", r2.path);
  assert_int_equal(unlink(p), 0);
  assert_int_equal(mkfifo(p, 0600), 0);
  int ex = refused(r2.path, msg, sizeof(msg));
  if (ex == 0 || strstr(msg, "table-001.ckpt") == NULL ||
      strstr(msg, "not a regular file") == NULL)
    fail_msg("FIFO: exit %d, said '%s'", ex, msg);
}

/* --- a table with ragged leaves --- */

#define RAG_N 60
#define RAG_BOUND 300
#define RAG_BATCH 10

/* Item i's length (0 and the bound among them) and policy version. */
static uint32_t rag_len(uint64_t i) {
  return i == 1 ? RAG_BOUND : (uint32_t)((i * 37) % (RAG_BOUND + 1));
}
static uint64_t rag_version(uint64_t i) {
  return 100 + i / 7;
}

/* chimectl checkpoint ADDR succeeds. */
static void chimectl_checkpoint(const char *addr) {
  char bin[1024], out[700];
  if (chime__harness_bin("examples/chimectl", bin, sizeof(bin)) == NULL)
    chime__skip("chimectl is not built");
  snprintf(out, sizeof(out), "%s/ctl-rag.out", chime__harness_tmpdir());
  const char *argv[] = {bin, "checkpoint", addr, NULL};
  chime__proc_t p;
  assert_int_equal(chime__proc_spawn(&p, argv, out), 0);
  int st = 0;
  assert_int_equal(chime__proc_wait(&p, 60000, &st), 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Ragged items (format version 5) through chimectl checkpoint and a
 * restart with --restore latest: streamed back in order with the same
 * offsets, values and policy versions, and the newest version known. */
static void test_ragged_restore(void **state) {
  (void)state;
  char dir[600];
  static int32_t tok[RAG_BOUND];
  static float lp[RAG_BOUND];
  ckpt_dir(dir, sizeof(dir), "ragged");
  snprintf(cfg_json, sizeof(cfg_json),
           "{\"checkpoint\": {\"dir\": \"%s\", \"keep\": 2},\n"
           " \"tables\": [{\"name\": \"r\", \"spec\": \"tokens:i32[<=300], "
           "lp:f32[<=300 ~tokens], w:f32[]\", \"capacity\": 1000, "
           "\"min_size\": 1, \"sampler\": \"fifo\"}]}\n",
           dir);
  chime__chimed_t d;
  chime_client_t *c;
  start(&d, &c, NULL);
  chime_writer_t *w = NULL;
  assert_int_equal(chime_writer_open(&w, c, "r", NULL), 0);
  for (uint64_t i = 1; i <= RAG_N; i++) {
    for (uint32_t k = 0; k < RAG_BOUND; k++) {
      tok[k] = (int32_t)(i * 1000 + k);
      lp[k] = (float)k / 4 + (float)i;
    }
    float wv = (float)i;
    const void *leaves[3] = {tok, lp, &wv};
    const uint32_t lengths[3] = {rag_len(i), rag_len(i), 0};
    assert_int_equal(chime_writer_set_version(w, rag_version(i)), 0);
    assert_int_equal(chime_writer_append_leaves(w, leaves, lengths, 1.0), 0);
  }
  assert_int_equal(chime_writer_close(w), 0);
  chimectl_checkpoint(d.addr);
  stop_unchecked(&d, c);

  start(&d, &c, "latest");
  chime_stats_t *st = NULL;
  assert_int_equal(chime_client_stats(c, &st), 0);
  assert_int_equal(st->tables[0].size, RAG_N);
  assert_int_equal(st->tables[0].newest_version, rag_version(RAG_N));
  chime_stats_free(st);
  chime_stream_t *s = NULL;
  chime_stream_opts_t so = CHIME_STREAM_OPTS_INIT;
  so.batch_size = RAG_BATCH;
  so.slots = 2;
  so.mode = CHIME_MODE_STREAM;
  assert_int_equal(chime_stream_open(&s, c, "r", &so), 0);
  for (uint64_t first = 1; first <= RAG_N; first += RAG_BATCH) {
    chime_batch_t b;
    assert_int_equal(chime_stream_next(s, &b, 30000), 0);
    assert_int_equal(b.count, RAG_BATCH);
    const chime_batch_leaf_t *t = chime_batch_leaf(&b, "tokens");
    const chime_batch_leaf_t *l = chime_batch_leaf(&b, "lp");
    const chime_batch_leaf_t *x = chime_batch_leaf(&b, "w");
    assert_non_null(t);
    assert_non_null(l);
    assert_non_null(x);
    assert_int_equal(t->offsets[0], 0);
    for (uint32_t j = 0; j < RAG_BATCH; j++) {
      uint64_t i = first + j;
      const int32_t *tv = t->data;
      const float *lv = l->data;
      assert_int_equal(t->offsets[j + 1] - t->offsets[j], rag_len(i));
      assert_int_equal(l->offsets[j + 1], t->offsets[j + 1]);
      for (int64_t k = 0; k < (int64_t)rag_len(i); k++) {
        assert_int_equal(tv[t->offsets[j] + k], (int32_t)(i * 1000 + k));
        assert_true(lv[t->offsets[j] + k] == (float)k / 4 + (float)i);
      }
      assert_true(((const float *)x->data)[j] == (float)i);
      assert_int_equal(b.info[j].version, rag_version(i));
    }
    assert_int_equal(chime_stream_release(s, &b), 0);
  }
  chime_stream_close(s);
  stop_unchecked(&d, c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_restore_same_batches,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_corrupt_and_spec_refused,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_sigkill_during_checkpoint,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_interval_and_keep,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_no_dir_refused, chime__harness_teardown),
      cmocka_unit_test_teardown(test_chimectl, chime__harness_teardown),
      cmocka_unit_test_teardown(test_sequence_restore, chime__harness_teardown),
      cmocka_unit_test_teardown(test_wide_names_and_fifo,
                                chime__harness_teardown),
      cmocka_unit_test_teardown(test_ragged_restore, chime__harness_teardown),
      cmocka_unit_test_teardown(test_keys_not_reissued,
                                chime__harness_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
