/* chime.v1.Chime's method table, and the health check's: which handler
 * serves each method. */
#include "server/methods.h"

const chime__call_vt_t *const chime__method_vt[CHIME__M_COUNT] = {
    [CHIME__M_GETINFO] = &chime__info_vt,
    [CHIME__M_STATS] = &chime__stats_vt,
    [CHIME__M_MUTATE] = &chime__mutate_vt,
    [CHIME__M_CHECKPOINT] = &chime__checkpoint_vt,
    [CHIME__M_INSERT] = &chime__insert_vt,
    [CHIME__M_SUBSCRIBE] = &chime__subscribe_vt,
    [CHIME__M_HEALTH] = &chime__health_vt,
    [CHIME__M_SET_VERSION] = &chime__setversion_vt,
    [CHIME__M_EXPORT] = &chime__export_vt,
};
