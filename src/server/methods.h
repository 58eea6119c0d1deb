/* Internal: chime.v1.Chime's method table (and grpc.health.v1.Health's
 * Check), the one place that says which handler serves each method
 * (methods.c). The server hands it to the call
 * machinery (call.h), which knows no handler. */
#ifndef CHIME_SERVER_METHODS_H
#define CHIME_SERVER_METHODS_H

#include "server/call.h"

/* Each handler's table, defined in its own file. */
extern const chime__call_vt_t chime__info_vt;
extern const chime__call_vt_t chime__stats_vt;
extern const chime__call_vt_t chime__mutate_vt;
extern const chime__call_vt_t chime__checkpoint_vt;
extern const chime__call_vt_t chime__insert_vt;
extern const chime__call_vt_t chime__subscribe_vt;
extern const chime__call_vt_t chime__health_vt;
extern const chime__call_vt_t chime__setversion_vt;
extern const chime__call_vt_t chime__export_vt;

/* Indexed by CHIME__M_*: every registered method's handler. */
extern const chime__call_vt_t *const chime__method_vt[CHIME__M_COUNT];

#endif
