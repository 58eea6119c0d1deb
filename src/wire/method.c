/* Method paths (see method.h). */
#include "wire/method.h"

const char *const chime__method_path[CHIME__M_COUNT] = {
    [CHIME__M_GETINFO] = "/chime.v1.Chime/GetInfo",
    [CHIME__M_STATS] = "/chime.v1.Chime/Stats",
    [CHIME__M_INSERT] = "/chime.v1.Chime/Insert",
    [CHIME__M_SUBSCRIBE] = "/chime.v1.Chime/Subscribe",
    [CHIME__M_MUTATE] = "/chime.v1.Chime/MutatePriorities",
    [CHIME__M_CHECKPOINT] = "/chime.v1.Chime/Checkpoint",
    [CHIME__M_SET_VERSION] = "/chime.v1.Chime/SetVersion",
    [CHIME__M_EXPORT] = "/chime.v1.Chime/Export",
    [CHIME__M_HEALTH] = "/grpc.health.v1.Health/Check",
};

const unsigned chime__method_max_request[CHIME__M_COUNT] = {
    [CHIME__M_GETINFO] = 64u << 10, [CHIME__M_STATS] = 64u << 10,
    [CHIME__M_INSERT] = 0,          [CHIME__M_SUBSCRIBE] = 256u << 10,
    [CHIME__M_MUTATE] = 0,          [CHIME__M_CHECKPOINT] = 64u << 10,
    [CHIME__M_HEALTH] = 4u << 10,   [CHIME__M_SET_VERSION] = 4u << 10,
    [CHIME__M_EXPORT] = 4u << 10,
};
