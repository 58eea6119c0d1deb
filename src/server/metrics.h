/* Prometheus text exposition of Stats on an HTTP port (libmicrohttpd): GET
 * /metrics answers what the Stats rpc would, as counters and gauges. Off
 * unless configured ("metrics": "host:port"). */
#ifndef CHIME_SERVER_METRICS_H
#define CHIME_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "chime.pb-c.h"

typedef struct chime__metrics_s chime__metrics_t;
typedef struct chime_server_s chime_server_t;

/* Listens on addr ("127.0.0.1:9100", "[::1]:0"; port 0 picks one) and
 * serves srv's stats from a thread of its own (and a second that ends each
 * connection 5 s after its accept: metrics.c, Connections). bound receives
 * the address bound. On failure a CHIME_E code with err filled. */
int chime__metrics_start(chime__metrics_t **out, chime_server_t *srv,
                         const char *addr, char *bound, size_t boundlen,
                         char *err, size_t errlen);
/* NULL-safe: stops serving and frees. */
void chime__metrics_stop(chime__metrics_t *m);

/* The exposition text of one Stats snapshot of the server of this shard
 * (0: unsharded), which labels every sample: malloc'd, NUL-terminated;
 * NULL when out of memory. */
char *chime__metrics_format(const Chime__V1__StatsResponse *r, uint32_t shard);

#endif
