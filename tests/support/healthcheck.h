/* A grpc.health.v1.Health/Check over a raw call (rawcall.h), for the
 * integration tests of the health service and of what it is excepted
 * from. */
#ifndef CHIME_TESTS_HEALTHCHECK_H
#define CHIME_TESTS_HEALTHCHECK_H

#include <stddef.h>

#include <grpc/grpc.h>

/* One Check of `service` on ch, with an authorization header when token is
 * not NULL: 0 with the gRPC status in *status (details gets its message)
 * and the serving status in *serving (-1 when no answer came), or the
 * rawcall code that failed. */
int chime__health_check(grpc_channel *ch, const char *service,
                        const char *token, grpc_status_code *status,
                        int *serving, char *details, size_t len);

#endif
