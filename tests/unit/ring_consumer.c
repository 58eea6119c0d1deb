/* Helper for test_ring_proc: a consumer in its own process.
 *
 *   ring_consumer FD NONCE_HEX verify N   take N batches, check every byte
 *   ring_consumer FD NONCE_HEX hold K     take K leases, print "ready", sleep
 *   ring_consumer FD NONCE_HEX write      try to write a slot (must fault)
 *   ring_consumer FD NONCE_HEX shutdown   block in next() until shutdown
 *
 * Exit codes: 0 ok, 2 usage, 3 attach failed, 4 next/release failed,
 * 5 a batch was wrong, 6 next returned something else than shutdown,
 * 7 the write faulted (expected). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chime/ring.h"
#include "ring_pattern.h"

static void on_fault(int sig) {
  (void)sig;
  _exit(7);
}

static int parse_nonce(const char *hex, uint8_t out[16]) {
  if (strlen(hex) != 32)
    return -1;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1)
      return -1;
    out[i] = (uint8_t)v;
  }
  return 0;
}

static int verify(chime_ring_t *ring, uint64_t n) {
  const chime_ring_layout_t *l = chime_ring_layout(ring);
  uint32_t nleaves = chime_ring_spec(ring)->nleaves;
  chime_ring_view_t held[CHIME_RING_MAX_SLOTS];
  uint32_t nheld = 0, cap = l->slots - 1;
  uint64_t rnd = 0x5eed, expect = 0;

  while (expect < n || nheld > 0) {
    uint32_t target = expect == n ? 0 : (uint32_t)(ring_rand(&rnd) % cap);
    while (nheld > target) {
      uint32_t k = (uint32_t)(ring_rand(&rnd) % nheld);
      if (ring_pattern_check(l, nleaves, &held[k], held[k].seq) != -1) {
        fprintf(stderr, "batch %llu changed while leased\n",
                (unsigned long long)held[k].seq);
        return 5;
      }
      if (chime_ring_release(ring, held[k].slot) != 0)
        return 4;
      held[k] = held[--nheld];
    }
    if (expect < n) {
      int rc = chime_ring_next(ring, &held[nheld], 10000);
      if (rc != 0) {
        fprintf(stderr, "next at %llu: %s\n", (unsigned long long)expect,
                chime_err_name(rc));
        return 4;
      }
      if (held[nheld].seq != expect ||
          ring_pattern_check(l, nleaves, &held[nheld], expect) != -1) {
        fprintf(stderr, "batch %llu (seq %llu) wrong when taken\n",
                (unsigned long long)expect,
                (unsigned long long)held[nheld].seq);
        return 5;
      }
      expect++;
      nheld++;
    }
  }
  return 0;
}

static int hold(chime_ring_t *ring, uint32_t k) {
  chime_ring_view_t v;
  for (uint32_t i = 0; i < k; i++)
    if (chime_ring_next(ring, &v, 10000) != 0)
      return 4;
  printf("ready\n");
  fflush(stdout);
  for (;;)
    pause();
}

int main(int argc, char **argv) {
  chime_ring_t *ring = NULL;
  uint8_t nonce[16];
  int fd, rc;

  if (argc < 4 || parse_nonce(argv[2], nonce) != 0)
    return 2;
  fd = atoi(argv[1]);
  rc = chime_ring_attach(&ring, fd, nonce);
  if (rc != 0) {
    fprintf(stderr, "attach: %s\n", chime_err_name(rc));
    return 3;
  }
  close(fd); /* the ring keeps its own dup */
  if (strcmp(argv[3], "verify") == 0 && argc == 5) {
    rc = verify(ring, strtoull(argv[4], NULL, 10));
  } else if (strcmp(argv[3], "hold") == 0 && argc == 5) {
    rc = hold(ring, (uint32_t)atoi(argv[4]));
  } else if (strcmp(argv[3], "write") == 0) {
    volatile uint8_t *p = chime_ring_slot_base(ring, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    /* Our own handler: sanitizers would otherwise turn the fault into exit 1.
     */
    sa.sa_handler = on_fault;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    p[0] = 1; /* must fault: the data is mapped read-only */
    rc = 0;
  } else if (strcmp(argv[3], "shutdown") == 0) {
    chime_ring_view_t v;
    rc = chime_ring_next(ring, &v, -1) == CHIME_ESHUTDOWN ? 0 : 6;
  } else {
    rc = 2;
  }
  chime_ring_destroy(ring);
  return rc;
}
