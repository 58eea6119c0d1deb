/* The server's checkpoints: one thread that writes them, on a Checkpoint
 * call and every checkpoint.interval_s seconds (checkpoint.c does the
 * writing), so no completion-queue thread waits on a disk. */
#ifndef CHIME_SERVER_CHECKPOINTER_H
#define CHIME_SERVER_CHECKPOINTER_H

#include <stdint.h>

typedef struct chime_server_s chime_server_t;
typedef struct chime__ckpter_s chime__ckpter_t;

/* Starts the thread (none without a checkpoint dir: *out is NULL). */
int chime__ckpter_start(chime__ckpter_t **out, chime_server_t *srv);
/* Lets the checkpoint being written finish, ends the calls still waiting
 * (CHIME_ESHUTDOWN) and joins the thread; later calls are refused the
 * same way. NULL-safe, idempotent. */
void chime__ckpter_stop(chime__ckpter_t *k);
/* Frees, once no call handler can run any more. NULL-safe. */
void chime__ckpter_destroy(chime__ckpter_t *k);

/* The last checkpoint that completed: when (CLOCK_REALTIME ns, 0: none
 * yet), how long it took, and how many were written and failed since
 * start. Kept in the server (srv->ckpt_stats, under srv->mu), so Stats
 * reads it whether or not the thread still runs. */
typedef struct {
  uint64_t last_unix_ns, last_duration_ns, last_pause_ns;
  uint64_t written, failed;
} chime__ckpter_stats_t;

#endif
