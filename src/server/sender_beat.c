/* A sender's heartbeat (sender.h, beat.h): a Heartbeat goes on the call
 * when the learner has lent credits and the sender has sent nothing for
 * an interval: no batch is ready for it (the table empty, its rate
 * limiter holding). Sent in the call's order (send_mu), never between a
 * batch's chunks, and never behind a send in flight: a queue of batches
 * on a slow link keeps the learner hearing from it anyway. */
#include "server/sender.h"

#include <grpc/grpc.h>

#include "chime.pb-c.h"
#include "wire/message.h"

void chime__sender_beat(chime__sender_t *x, uint64_t now_ns,
                        uint64_t every_ns) {
  if (atomic_load(&x->stopped) || pthread_mutex_trylock(&x->send_mu) != 0)
    return; /* sending now: not idle */
  uint64_t sent = atomic_load(&x->batches);
  if (sent != x->beat_batches || x->beat_ns == 0) {
    x->beat_batches = sent; /* batches went since the last look */
    x->beat_ns = now_ns;
  }
  pthread_mutex_lock(&x->mu);
  int lent = x->credits > 0;
  pthread_mutex_unlock(&x->mu);
  chime__call_t *call = x->call;
  if (call != NULL && lent && now_ns - x->beat_ns >= every_ns &&
      !x->ops->call_sending(call)) {
    Chime__V1__Heartbeat hb = CHIME__V1__HEARTBEAT__INIT;
    Chime__V1__SubscribeResponse resp = CHIME__V1__SUBSCRIBE_RESPONSE__INIT;
    resp.kind_case = CHIME__V1__SUBSCRIBE_RESPONSE__KIND_HEARTBEAT;
    resp.heartbeat = &hb;
    grpc_byte_buffer *bb = chime__msg_pack(&resp.base);
    if (bb != NULL && x->ops->call_send(call, bb) == 0)
      x->beat_ns = now_ns;
  }
  pthread_mutex_unlock(&x->send_mu);
}
