"""An asynchronous PPO-style loop through chime with policy versions and a
staleness gate (issue 25, docs/replay.md "Policy versions").

A toy token generator stands in for the language model: its policy is a
softmax over a small vocabulary whose logits the learner moves a little
at each update, and version v of the policy is the learner's v-th set of
logits. Eight writer processes (--writers) generate rollouts (a fixed
number of tokens, their log-probabilities and a reward: the count of one
"good" token) with whatever version they last read, and append each with
version=that version: they race the learner's version bumps, so some of
what they send is already behind when it arrives. The learner reads
batches from a table with max_staleness, and every --update-every batches
takes a policy-gradient step and bumps its version, telling the server on
its stream (stream.set_version) and the writers through shared memory.

With --pace the table paces the producers instead (docs/replay.md,
"Pacing producers"): a fifo table with pace_batch = batch_size x
update_every (the samples the learner draws per version), whose inserts
wait while the writers run too far ahead of the learner, so that nothing
they write goes stale in the table (removed_stale 0) and their idle time
is reported (pace_wait_ns); --flush-every 1 makes each writer wait for
each rollout's ack before it reads the version for the next.

The gate's promise, checked on every batch: no sample more than
max_staleness versions behind the learner's version at receipt reaches the
learner (the server removes what falls too far behind, and next() drops a
batch drawn before the learner's latest version that holds such a
sample). The last line of output is a JSON summary.

  python3 examples/python/async_ppo.py [--server ADDR] [--batches N]
"""
import argparse
import json
import multiprocessing
import sys
import time

import numpy as np

import chime
import common

TABLE = "rollouts"
TOKENS = 32
VOCAB = 16
GOOD = 3  # the token the reward counts


def spec():
    return f"tokens:i32[{TOKENS}], logprobs:f32[{TOKENS}], reward:f32[]"


def server_config(args):
    t = {"name": TABLE, "spec": spec(), "capacity": args.capacity,
         "sampler": args.sampler, "min_size": args.batch_size,
         "max_times_sampled": 1, "max_staleness": args.max_staleness}
    if args.pace:
        t["pace_batch"] = args.batch_size * args.update_every
    return {"tables": [t]}


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def writer_main(address, index, version, logits, stop, counts, seed,
                flush_every):
    """One generator: reads the policy (version and logits) as often as a
    rollout is made, and appends each rollout with the version it used."""
    rng = np.random.default_rng(seed)
    made = [0]
    with chime.Client(address) as c:
        # Paced, a flush waits for the learner: one that outlasts the
        # timeout is tried again, and the last one's wait (the learner
        # done) is cut short by it.
        w = c.writer(TABLE, timeout=5)
        try:
            write_rollouts(w, version, logits, stop, rng, flush_every, made)
        finally:
            try:
                w.close()
            except chime.TimeoutError:
                pass
    counts[index] = made[0]


def write_rollouts(w, version, logits, stop, rng, flush_every, made):
    """Appends rollouts until stop, each with the version it was made
    with; made[0] counts them."""
    n = 0
    while not stop.is_set():
        with version.get_lock():
            v = version.value
            z = np.frombuffer(logits.get_obj(), dtype=np.float64).copy()
        p = softmax(z)
        tok = rng.choice(VOCAB, size=TOKENS, p=p).astype(np.int32)
        lp = np.log(p[tok]).astype(np.float32)
        w.append({"tokens": tok, "logprobs": lp,
                  "reward": np.float32((tok == GOOD).mean())}, version=v)
        n += 1
        made[0] = n
        if n % flush_every == 0:
            try:
                w.flush()
            except chime.TimeoutError:
                pass  # paced past the timeout: still queued, flushed again


def learn(args):
    client, address = common.loop_client(args, server_config(args))
    ctx = multiprocessing.get_context("spawn")  # no gRPC state across fork
    version = ctx.Value("Q", 1)
    logits = ctx.Array("d", VOCAB)
    stop = ctx.Event()
    counts = ctx.Array("Q", args.writers)
    procs = [ctx.Process(target=writer_main,
                         args=(address, i, version, logits, stop, counts,
                               args.seed + i, args.flush_every))
             for i in range(args.writers)]
    for p in procs:
        p.start()
    v = 1
    z = np.zeros(VOCAB)
    worst = 0
    violations = 0
    samples = 0
    hist = {}
    t0 = time.monotonic()
    try:
        with client.stream(TABLE, batch_size=args.batch_size, slots=4,
                           version=v, timeout=30) as s:
            for b in range(args.batches):
                batch = s.next(timeout=30)
                lag = v - batch.info["version"].astype(np.int64)
                worst = max(worst, int(lag.max()))
                violations += int((lag > args.max_staleness).sum())
                for x in lag:
                    hist[int(x)] = hist.get(int(x), 0) + 1
                samples += batch.count
                tok = np.asarray(batch["tokens"])
                reward = np.asarray(batch["reward"])
                # REINFORCE on the toy policy: raise the logits of tokens
                # in rollouts better than the batch's mean.
                adv = reward - reward.mean()
                g = np.zeros(VOCAB)
                np.add.at(g, tok.ravel(), np.repeat(adv, TOKENS))
                z += args.lr * g / tok.size
                if args.train_ms > 0:  # a larger model's step, in time
                    time.sleep(args.train_ms / 1000)
                if (b + 1) % args.update_every == 0:
                    v += 1
                    s.set_version(v)
                    with version.get_lock():
                        version.value = v
                        np.frombuffer(logits.get_obj(), dtype=np.float64)[:] = z
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=30)
    st = next(t for t in client.stats()["tables"] if t["name"] == TABLE)
    ti = next(t for t in client.info()["tables"] if t["name"] == TABLE)
    out = {"batches": args.batches, "samples": samples,
           "learner_version": v, "max_staleness": args.max_staleness,
           "worst_lag_at_receipt": worst, "violations": violations,
           "lag_histogram": {str(k): hist[k] for k in sorted(hist)},
           "rollouts_written": int(sum(counts)),
           "inserts": st["inserts"], "removed_stale": st["removed_stale"],
           "pace_batch": ti["pace_batch"],
           "pace_wait_s": st["pace_wait_ns"] / 1e9,
           "paced_inserts": st["paced_inserts"],
           "newest_version": st["newest_version"],
           "p_good": float(softmax(z)[GOOD]),
           "seconds": round(time.monotonic() - t0, 2)}
    client.close()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = ap.add_argument
    common.add_loop_args(ap, "chime-async-ppo")
    a("--writers", type=int, default=8)
    a("--batches", type=int, default=400)
    a("--batch-size", type=int, default=32)
    a("--update-every", type=int, default=4,
      help="batches per learner update (and version bump)")
    a("--max-staleness", type=int, default=2)
    a("--capacity", type=int, default=4096)
    a("--sampler", default=None,
      help="the table's sampler (default uniform; fifo with --pace)")
    a("--pace", action="store_true",
      help="pace the writers (pace_batch = batch size x update-every)")
    a("--train-ms", type=float, default=0,
      help="time the learner spends on each batch besides its toy step "
      "(a slower learner: producers run ahead)")
    a("--flush-every", type=int, default=64,
      help="rollouts a writer appends between flushes")
    a("--lr", type=float, default=2.0)
    a("--seed", type=int, default=0)
    a("--print-config", action="store_true")
    args = ap.parse_args(argv)
    if args.sampler is None:
        args.sampler = "fifo" if args.pace else "uniform"
    if args.print_config:
        print(json.dumps(server_config(args), indent=2))
        return 0
    out = learn(args)
    print(json.dumps(out))
    return 0 if out["violations"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
