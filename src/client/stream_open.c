/* Opening a stream: which mode (auto: shm when the server is on this host
 * and the attach works, else stream, with the reason reported), the
 * Subscribe exchange up to Opened and the layout check every mode shares.
 * Each mode's transport is its own file: mode_shm.c, mode_stream.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/stream.h"
#include "ring/layout.h"

/* Collects completions until `op` is no longer in flight. A status that
 * arrives meanwhile is handled by the stream once it is open (stream.c). */
static int wait_op(chime_stream_t *s, chime__rpc_op_t op,
                   gpr_timespec deadline) {
  while (chime__rpc_pending(&s->rpc, op)) {
    chime__rpc_op_t done;
    int ok;
    if (chime__rpc_next(&s->rpc, deadline, &done, &ok) == CHIME_ETIMEDOUT)
      return CHIME_ETIMEDOUT;
  }
  return 0;
}

/* Sends Open and waits for Opened, at most wait_ms; flags: the call's
 * (a resuming one waits for the channel to connect). *resp is freed by
 * the caller. */
static int subscribe(chime_stream_t *s, const chime__transport_t *tp,
                     int wait_ms, unsigned flags,
                     Chime__V1__SubscribeResponse **resp, char *err,
                     size_t errlen) {
  const chime_stream_opts_t *o = &s->opts;
  char boot_id[CHIME__BOOT_ID_LEN], host[CHIME__HOSTNAME_LEN];
  *resp = NULL;
  chime__rpc_destroy(&s->rpc); /* a lost call's (resume), else nothing */
  chime__host_identity(boot_id, sizeof(boot_id), host, sizeof(host));
  if (chime__rpc_init(&s->rpc))
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");

  Chime__V1__Open open = CHIME__V1__OPEN__INIT;
  open.table = s->table;
  open.batch_size = o->batch_size;
  open.slots = o->slots;
  tp->fill_open(s, &open);
  open.boot_id = boot_id;
  open.hostname = host;
  open.version = s->version;
  chime__keep_t keep;
  int rc = chime__frames_keep_names(s, &keep, err, errlen);
  if (rc != 0)
    return rc;
  open.n_keep_compressed = keep.n;
  open.keep_compressed = keep.ptrs;
  Chime__V1__SubscribeRequest req = CHIME__V1__SUBSCRIBE_REQUEST__INIT;
  req.kind_case = CHIME__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
  req.open = &open;
  grpc_byte_buffer *bb = chime__pack(&req.base);
  if (!bb)
    return chime__fail(err, errlen, CHIME_ENOMEM, "out of memory");
  if (chime__rpc_start_on(
          &s->rpc, s->client, s->chan != NULL ? s->chan : s->client->channel,
          CHIME__M_SUBSCRIBE, gpr_inf_future(GPR_CLOCK_REALTIME), flags, bb) ||
      chime__rpc_recv(&s->rpc))
    return chime__fail(err, errlen, CHIME_EPROTO, "cannot start call");

  gpr_timespec deadline = chime__deadline_ms(wait_ms);
  if (wait_op(s, CHIME__RPC_RECV, deadline))
    return chime__fail(err, errlen, CHIME_ETIMEDOUT,
                       "no answer to Subscribe within %d ms", wait_ms);
  if (!s->rpc.recv_bb) {
    /* Refused: the status carries the reason. */
    if (wait_op(s, CHIME__RPC_STATUS, deadline))
      return chime__fail(err, errlen, CHIME_ETIMEDOUT,
                         "Subscribe ended without a status");
    int code = chime__rpc_result(&s->rpc, err, errlen);
    if (!err[0])
      snprintf(err, errlen, "%s", chime_strerror(code));
    return code ? code : CHIME_EPROTO;
  }
  *resp = (Chime__V1__SubscribeResponse *)chime__unpack(
      &chime__v1__subscribe_response__descriptor, s->rpc.recv_bb);
  chime__bb_free(s->rpc.recv_bb);
  s->rpc.recv_bb = NULL;
  if (!*resp ||
      (*resp)->kind_case != CHIME__V1__SUBSCRIBE_RESPONSE__KIND_OPENED ||
      !(*resp)->opened->layout)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Subscribe: first answer is not Opened");
  atomic_store(&s->client->reached, 1);
  if ((*resp)->opened->mode != open.mode)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Subscribe: asked for %s, server opened mode %d",
                       chime_mode_name(tp->mode), (int)(*resp)->opened->mode);
  return 0;
}

/* The server's layout must be the one this library computes for the spec. */
static int check_layout(chime_stream_t *s, const Chime__V1__Layout *l,
                        char *err, size_t errlen) {
  const chime_stream_opts_t *o = &s->opts;
  char why[256];
  /* Each record is read in place as a chime_sample_info_t: another size
   * would be read as garbage. A server before 0.2 does not say (0); its
   * records are ours, and send_bytes below pins that. */
  if (l->info_record_bytes != 0 &&
      l->info_record_bytes != sizeof(chime_sample_info_t))
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Opened: the server's sample info records are %u "
                       "bytes, this library's are %zu (another chime "
                       "release?)",
                       l->info_record_bytes, sizeof(chime_sample_info_t));
  int rc =
      chime__spec_from_leaves(&s->spec, l->spec, l->n_spec, why, sizeof(why));
  if (rc)
    return chime__fail(err, errlen, CHIME_EPROTO, "Opened: bad spec: %s", why);
  rc = chime__ring_layout(&s->layout, &s->spec, o->batch_size, o->slots, why,
                          sizeof(why));
  if (rc)
    return chime__fail(err, errlen, CHIME_EPROTO, "Opened: layout: %s", why);
  int same = l->slots == s->layout.slots &&
             l->batch_size == s->layout.batch_size &&
             l->slot_bytes == s->layout.slot_bytes &&
             l->info_offset == s->layout.info_offset &&
             l->n_leaf_offset == s->spec.nleaves;
  for (size_t i = 0; same && i < l->n_leaf_offset; i++)
    same = l->leaf_offset[i] == s->layout.leaf_offset[i];
  uint64_t send = chime__slot_send_bytes(&s->layout);
  if (!same || l->send_bytes != send || send > s->layout.slot_bytes)
    return chime__fail(err, errlen, CHIME_EPROTO,
                       "Opened: the server's ring layout differs from this "
                       "library's (version mismatch?)");
  s->send_bytes = send;
  return chime__frames_opened(s, l, err, errlen);
}

/* One attempt with one transport. On failure nothing of it is left. */
static int open_with(chime_stream_t *s, const chime__transport_t *tp,
                     int *attach_failed, char *err, size_t errlen) {
  Chime__V1__SubscribeResponse *resp = NULL;
  *attach_failed = 0;
  s->mode = tp->mode;
  int rc = subscribe(s, tp, s->opts.open_timeout_ms, 0, &resp, err, errlen);
  if (rc)
    goto cleanup;
  const Chime__V1__Opened *op = resp->opened;
  s->stream_id = op->stream_id;
  s->max_staleness = op->max_staleness;
  chime__stall_reset(s, op->heartbeat_ms);
  rc = check_layout(s, op->layout, err, errlen);
  if (rc == 0)
    rc = tp->setup(s, op, attach_failed, err, errlen);
  if (rc == 0 && chime__rpc_recv(&s->rpc))
    rc = chime__fail(err, errlen, CHIME_EPROTO, "cannot receive");

cleanup:
  if (resp)
    protobuf_c_message_free_unpacked(&resp->base, NULL);
  if (rc) {
    chime__rpc_destroy(&s->rpc);
    if (tp->fini)
      tp->fini(s);
    chime_ring_destroy(s->ring);
    s->ring = NULL;
  } else {
    s->tp = tp;
  }
  return rc;
}

int chime__stream_reopen(chime_stream_t *s, int wait_ms, char *err,
                         size_t errlen) {
  Chime__V1__SubscribeResponse *resp = NULL;
  int rc = subscribe(s, s->tp, wait_ms, CHIME__RPC_WAIT_FOR_READY, &resp, err,
                     errlen);
  if (rc)
    goto cleanup;
  const Chime__V1__Opened *op = resp->opened;
  const Chime__V1__Layout *l = op->layout;
  /* The ring the learner reads stays: the table must still fill it so. */
  if (l->slots != s->opts.slots || l->batch_size != s->opts.batch_size ||
      l->send_bytes != s->send_bytes) {
    rc = chime__fail(err, errlen, CHIME_EPROTO,
                     "resuming: the server's ring is no longer the "
                     "stream's (%" PRIu32 " slots of %" PRIu32
                     " samples, %" PRIu64 " bytes sent per batch; the "
                     "table changed?)",
                     l->slots, l->batch_size, l->send_bytes);
    goto cleanup;
  }
  s->tp->resumed(s, op);
  chime__stall_reset(s, op->heartbeat_ms);
  pthread_mutex_lock(&s->lock);
  s->stream_id = op->stream_id;
  s->max_staleness = op->max_staleness;
  pthread_mutex_unlock(&s->lock);
  if (chime__rpc_recv(&s->rpc))
    rc = chime__fail(err, errlen, CHIME_EPROTO, "cannot receive");

cleanup:
  if (resp)
    protobuf_c_message_free_unpacked(&resp->base, NULL);
  if (rc)
    chime__rpc_destroy(&s->rpc);
  return rc;
}

/* Why shm is impossible with the server of info, or NULL. */
static const char *other_host(const chime_server_info_t *info) {
  char boot_id[CHIME__BOOT_ID_LEN], host[CHIME__HOSTNAME_LEN];
  chime__host_identity(boot_id, sizeof(boot_id), host, sizeof(host));
  if (!info->boot_id[0] || !boot_id[0])
    return "host identity unknown (no boot_id)";
  if (strcmp(boot_id, info->boot_id) != 0)
    return "server on another host (boot_id differs)";
  if (strcmp(host, info->hostname) != 0)
    return "server on another host (hostname differs)";
  return NULL;
}

static void fall_back(chime_stream_t *s, const char *why) {
  snprintf(s->fallback, sizeof(s->fallback), "%.500s", why);
  s->has_fallback = 1;
}

/* Stream mode: the window sized to the link (window.c; ti and rtt_ns from
 * the timed GetInfo, ti NULL when it failed: Open says why), and smaller
 * while the server's budget refuses the ring. */
static int open_remote(chime_stream_t *s, const chime_table_info_t *ti,
                       uint64_t rtt_ns, char *err, size_t errlen) {
  int attach_failed = 0, rc;
  if (ti != NULL)
    chime__window_size(s, ti, rtt_ns);
  while ((rc = open_with(s, &chime__remote_transport, &attach_failed, err,
                         errlen)) == CHIME_ERESOURCE &&
         chime__window_shrink(s))
    ;
  return rc;
}

int chime__stream_attach(chime_stream_t *s, char *err, size_t errlen) {
  chime_mode_t want = s->opts.mode;
  chime_table_info_t ti;
  uint64_t rtt_ns = 0;
  int rc = 0;
  s->asked_slots = s->opts.slots;
  if (want != CHIME_MODE_STREAM) {
    chime_server_info_t *info = NULL;
    rc = chime__window_lookup(s, &ti, &info, &rtt_ns, err, errlen);
    if (rc)
      return rc;
    const char *differs = other_host(info);
    if (differs && want == CHIME_MODE_SHM)
      rc = chime__fail(err, errlen, CHIME_ENOTSUP,
                       "shm mode needs the server on this host: %s", differs);
    else if (differs)
      fall_back(s, differs);
    chime_server_info_free(info);
    if (rc)
      return rc;
    if (differs)
      want = CHIME_MODE_STREAM;
  }
  int attach_failed = 0;
  if (want != CHIME_MODE_STREAM) {
    rc = open_with(s, &chime__shm_transport, &attach_failed, err, errlen);
    if (rc == 0 || !attach_failed || s->opts.mode != CHIME_MODE_AUTO)
      return rc;
    char why[CHIME__ERRLEN];
    snprintf(why, sizeof(why), "shm attach failed: %.450s", err);
    fall_back(s, why);
  } else if (s->opts.mode == CHIME_MODE_STREAM) {
    char why[CHIME__ERRLEN];
    if (chime__window_lookup(s, &ti, NULL, &rtt_ns, why, sizeof(why)) != 0)
      return open_remote(s, NULL, 0, err, errlen);
  }
  return open_remote(s, &ti, rtt_ns, err, errlen);
}
