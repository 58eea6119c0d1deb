/* GetInfo and Stats, and the Stats snapshot the metrics endpoint reads. */
#ifndef CHIME_SERVER_INFO_H
#define CHIME_SERVER_INFO_H

#include "chime.pb-c.h"
#include "server/state.h"

typedef struct {
  Chime__V1__StatsResponse r;
  Chime__V1__TableStats *ts, **tp;
  Chime__V1__StreamStats *ss, **sp;
  /* per table CHIME_MAX_LEAVES of them, its compressed leaves' first */
  Chime__V1__LeafBytes *lb, **lbp;
} chime__stats_snap_t;

/* Stats of every table and live stream into snap->r. Returns 0 with
 * srv->mu held (stream names point into live streams): read snap->r, then
 * chime__stats_snap_done(). CHIME_ENOMEM, holding nothing, when out of
 * memory. */
int chime__stats_snap(chime_server_t *srv, chime__stats_snap_t *snap);
/* Lets srv->mu go and frees the snapshot. */
void chime__stats_snap_done(chime_server_t *srv, chime__stats_snap_t *snap);

#endif
