/* Internal: the threads that drain the server's completion queues
 * (service.c). */
#ifndef CHIME_SERVER_SERVICE_H
#define CHIME_SERVER_SERVICE_H

#include "server/state.h"

int chime__service_start(chime_server_t *srv);
/* Returns once the completion queue was shut down and drained; ends the
 * insert queue and its thread too (safe when never started). */
void chime__service_join(chime_server_t *srv);

#endif
