"""A GRPO-style loop through chime: groups, an admission filter, producers
paced by staleness and per-token versions (issue 37, docs/replay.md
"Groups", "Admission filters", "Pacing producers", "Per-token versions").

The toy task stands in for a language model: a prompt is one of PROMPTS
numbers, a completion a sequence of 4..MAX_TOKENS tokens from a small
vocabulary, and its reward 1 when it holds the prompt's target token at
least twice, else 0, as a noisy judge reads it (a tenth of its verdicts
flipped). The policy is a softmax over the vocabulary per
prompt (numpy, no downloads). Eight rollout processes (--producers) each
take a prompt and sample a group of G completions (--group) with the
newest weights they can read; a completion interrupted by a weight update
goes on under the new weights, so its tokens carry different versions
(tok_ver, the table's version_leaf: its staleness is its oldest token's).

The table keeps each group as one item (group_max G), drops a group whose
rewards are all equal (zero_variance: all 0 early, all 1 late; such a
group carries no group-relative signal) and tells its producer, which
makes another in its place, and paces the producers (pace_batch) so that
nothing they make grows stale in the table. The learner draws batches of
groups, computes each sample's advantage within its group (reward minus
the group's mean, over its standard deviation), takes a policy-gradient
step and raises its version every --update-every batches.

Checked on every batch: each group arrives whole (G samples), none more
than max_staleness versions behind the learner. The last line of output
is a JSON summary: groups trained on, groups dropped (as the writers were
told and as the table counts them), removed_stale, the producers' idle
time, and the share of prompts the policy solves before and after.

  python3 examples/python/grpo.py [--server ADDR] [--batches N]
"""
import argparse
import json
import multiprocessing
import sys
import time

import numpy as np

import chime
import common

TABLE = "grpo"
PROMPTS = 8
VOCAB = 16
MAX_TOKENS = 12
REFRESH = 4  # tokens a producer makes between reads of the newest weights
FLIP = 0.1  # the judge's verdicts flipped


def target(prompt):
    return (3 * prompt + 1) % VOCAB


def spec():
    return (f"prompt:i32[], tokens:i32[<={MAX_TOKENS}], "
            f"logprobs:f32[<={MAX_TOKENS} ~tokens], "
            f"tok_ver:u64[<={MAX_TOKENS} ~tokens], reward:f32[]")


def server_config(args):
    t = {"name": TABLE, "spec": spec(), "capacity": args.capacity,
         "sampler": "fifo", "min_size": args.batch_size,
         "max_times_sampled": 1, "max_staleness": args.max_staleness,
         "group_max": args.group, "version_leaf": "tok_ver",
         "filters": [{"leaf": "reward", "drop": "zero_variance"}]}
    if not args.no_pace:
        # Half the groups the learner draws per version step: the groups
        # ahead then cover (max_staleness - 1) / 2 steps, and a group made
        # while the learner moved on by a step or two still goes in within
        # the bound (docs/replay.md, "What it promises").
        t["pace_batch"] = max(1, args.batch_size * args.update_every // 2)
    return {"tables": [t]}


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def solved(prompt, tokens):
    return (tokens == target(prompt)).sum() >= 2


def reward_of(prompt, tokens, rng):
    """1 for a solved prompt, else 0, read by a noisy judge (FLIP of the
    verdicts flipped): late in training a group still tells its samples
    apart, as a learned reward model's does."""
    r = solved(prompt, tokens) != (rng.random() < FLIP)
    return np.float32(1.0 if r else 0.0)


def expected_reward(z, rng, n=4000):
    """The share of n fresh completions that solve their prompt (prompts
    drawn uniformly; the judge's noise aside): the number that must
    rise."""
    p = softmax(z)
    total = 0.0
    for _ in range(n):
        q = int(rng.integers(PROMPTS))
        length = int(rng.integers(4, MAX_TOKENS + 1))
        tok = rng.choice(VOCAB, size=length, p=p[q])
        total += float(solved(q, tok))
    return total / n


class Policy:
    """A producer's view of the learner's weights: re-read whenever the
    shared version moved."""

    def __init__(self, version, logits):
        self.version, self.logits = version, logits
        self.v, self.p = 0, None

    def refresh(self):
        with self.version.get_lock():
            v = self.version.value
            if v != self.v or self.p is None:
                z = np.frombuffer(self.logits.get_obj(), dtype=np.float64)
                self.p = softmax(z.reshape(PROMPTS, VOCAB).copy())
                self.v = v
        return self.v, self.p


def group_of(policy, prompt, rng, g):
    """g completions of one prompt made side by side, a token of each at
    a time (as a model samples a prompt's group in one batch); the
    weights are read again every REFRESH tokens, so a group made across
    an update holds two versions (its staleness is its oldest token's)."""
    lengths = rng.integers(4, MAX_TOKENS + 1, size=g)
    tok = np.empty((g, MAX_TOKENS), np.int32)
    lp = np.empty((g, MAX_TOKENS), np.float32)
    ver = np.empty((g, MAX_TOKENS), np.uint64)
    for i in range(int(lengths.max())):
        if i % REFRESH == 0:
            v, p = policy.refresh()
        tok[:, i] = rng.choice(VOCAB, size=g, p=p[prompt])
        lp[:, i] = np.log(p[prompt][tok[:, i]])
        ver[:, i] = v
    return [{"prompt": np.int32(prompt), "tokens": tok[k, :n],
             "logprobs": lp[k, :n], "tok_ver": ver[k, :n],
             "reward": reward_of(prompt, tok[k, :n], rng)}
            for k, n in enumerate(lengths)]


def producer_main(address, index, version, logits, stop, out, seed, group):
    """Makes groups until stop; a group the table dropped is made again
    (another prompt, another group) simply by going on: out[index] holds
    (groups appended, groups the writer was told were dropped)."""
    rng = np.random.default_rng(seed)
    policy = Policy(version, logits)
    appended = dropped = 0
    with chime.Client(address) as c:
        w = c.writer(TABLE, timeout=5)
        try:
            while not stop.is_set():
                prompt = int(rng.integers(PROMPTS))
                w.append_group(group_of(policy, prompt, rng, group))
                appended += 1
                try:
                    w.flush()  # paced: waits while the learner is behind
                except chime.TimeoutError:
                    pass  # still queued; flushed again next time
                dropped += len(w.take_dropped())
                out[2 * index], out[2 * index + 1] = appended, dropped
        finally:
            try:
                w.close()
            except chime.TimeoutError:
                pass
            dropped += len(w.take_dropped())
            out[2 * index], out[2 * index + 1] = appended, dropped


def grpo_step(z, batch, group, lr):
    """Group-relative advantages and one policy-gradient step on the
    per-prompt logits z ([PROMPTS, VOCAB], in place)."""
    go = np.asarray(batch.groups())
    reward = np.asarray(batch["reward"], dtype=np.float64)
    prompt = np.asarray(batch["prompt"])
    tok = np.asarray(batch["tokens"])
    off = np.asarray(batch.offsets("tokens"))
    p = softmax(z)
    g = np.zeros_like(z)
    for k in range(len(go) - 1):
        r = reward[go[k]:go[k + 1]]
        adv = (r - r.mean()) / (r.std() + 1e-6)
        for j, a in zip(range(go[k], go[k + 1]), adv):
            q = int(prompt[j])
            t = tok[off[j]:off[j + 1]]
            # d log softmax(z[q])[t] / d z[q] = onehot(t) - p[q], per token
            np.add.at(g[q], t, a)
            g[q] -= a * len(t) * p[q]
    z += lr * g / max(1, len(reward))


def learn(args):
    client, address = common.loop_client(args, server_config(args))
    ctx = multiprocessing.get_context("spawn")  # no gRPC state across fork
    version = ctx.Value("Q", 1)
    logits = ctx.Array("d", PROMPTS * VOCAB)
    stop = ctx.Event()
    out = ctx.Array("Q", 2 * args.producers)
    procs = [ctx.Process(target=producer_main,
                         args=(address, i, version, logits, stop, out,
                               args.seed + i, args.group))
             for i in range(args.producers)]
    z = np.zeros((PROMPTS, VOCAB))
    eval_rng = np.random.default_rng(args.seed + 1000)
    before = expected_reward(z, eval_rng)
    for p in procs:
        p.start()
    v, worst, violations, broken, groups = 1, 0, 0, 0, 0
    curve = []
    t0 = time.monotonic()
    try:
        with client.stream(TABLE, batch_size=args.batch_size, slots=4,
                           version=v, timeout=60) as s:
            for b in range(args.batches):
                batch = s.next(timeout=60)
                go = np.asarray(batch.groups())
                sizes = np.diff(go)
                broken += int((sizes != args.group).sum())
                groups += len(sizes)
                lag = v - batch.info["version"].astype(np.int64)
                worst = max(worst, int(lag.max()))
                violations += int((lag > args.max_staleness).sum())
                grpo_step(z, batch, args.group, args.lr)
                if (b + 1) % args.update_every == 0:
                    v += 1
                    s.set_version(v)
                    with version.get_lock():
                        version.value = v
                        np.frombuffer(logits.get_obj(),
                                      dtype=np.float64)[:] = z.ravel()
                if (b + 1) % max(1, args.batches // 8) == 0:
                    curve.append(round(expected_reward(z, eval_rng, 1000), 3))
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=60)
    after = expected_reward(z, eval_rng)
    st = next(t for t in client.stats()["tables"] if t["name"] == TABLE)
    result = {
        "batches": args.batches, "groups": groups, "group": args.group,
        "groups_not_whole": broken, "learner_version": v,
        "max_staleness": args.max_staleness, "worst_lag": worst,
        "violations": violations,
        "groups_appended": int(sum(out[0::2])),
        "groups_dropped_told": int(sum(out[1::2])),
        "dropped_zero_variance": st["dropped_zero_variance"],
        "removed_stale": st["removed_stale"],
        "pace_wait_s": round(st["pace_wait_ns"] / 1e9, 3),
        "paced_inserts": st["paced_inserts"],
        "reward_before": round(before, 3), "reward_after": round(after, 3),
        "reward_curve": curve,
        "seconds": round(time.monotonic() - t0, 2)}
    client.close()
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = ap.add_argument
    common.add_loop_args(ap, "chime-grpo")
    a("--producers", type=int, default=8)
    a("--group", type=int, default=8, help="completions per prompt")
    a("--batches", type=int, default=160)
    a("--batch-size", type=int, default=4, help="groups per batch")
    a("--update-every", type=int, default=4,
      help="batches per learner update (and version bump)")
    a("--max-staleness", type=int, default=3)
    a("--capacity", type=int, default=1024, help="groups")
    a("--no-pace", action="store_true",
      help="discard-only: no pace_batch (stale groups leave instead)")
    a("--lr", type=float, default=0.5)
    a("--seed", type=int, default=0)
    a("--print-config", action="store_true")
    args = ap.parse_args(argv)
    if args.print_config:
        print(json.dumps(server_config(args), indent=2))
        return 0
    result = learn(args)
    print(json.dumps(result))
    ok = (result["violations"] == 0 and result["groups_not_whole"] == 0
          and result["reward_after"] > result["reward_before"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
