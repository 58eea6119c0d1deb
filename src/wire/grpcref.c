/* chime's references on gRPC (grpcref.h says why). */
#include <pthread.h>
#include <time.h>

#include <grpc/grpc.h>

#include "wire/grpcref.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned users; /* chime's grpc_init()s not yet shut down */
static int owned;      /* gRPC was not running when users went 0 -> 1 */

void chime__grpc_hold(void) {
  pthread_mutex_lock(&mu);
  if (users++ == 0)
    owned = !grpc_is_initialized();
  grpc_init();
  pthread_mutex_unlock(&mu);
}

int chime__grpc_release(void) {
  pthread_mutex_lock(&mu);
  int last = --users == 0 && owned;
  /* On an application thread this is grpc_shutdown_blocking(): when it is
   * gRPC's last reference, gRPC stops here, its threads joined. */
  grpc_shutdown();
  pthread_mutex_unlock(&mu);
  return last;
}

void chime__grpc_drain(void) {
  /* gRPC's own references (a channel still being torn down) hold it up:
   * its last grpc_shutdown() comes from one of its threads. gRPC offers
   * no wait for that, so look every millisecond: grpc_is_initialized()
   * takes gRPC's init lock, under which that teardown runs, so 0 means
   * the teardown is over. */
  struct timespec tick = {0, 1000000};
  for (int ms = 0; ms < CHIME__GRPC_DRAIN_MS; ms++) {
    pthread_mutex_lock(&mu);
    int again = users > 0;
    pthread_mutex_unlock(&mu);
    if (again || !grpc_is_initialized())
      return;
    nanosleep(&tick, NULL);
  }
}

void chime__grpc_ref_child(void) {
  pthread_mutex_init(&mu, NULL);
}
