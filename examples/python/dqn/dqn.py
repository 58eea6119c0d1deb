#!/usr/bin/env python3
"""DQN on CartPole-v1 through chime: N actor processes insert transitions
into a prioritized replay table, one learner samples batches from it in
place, sets the sampled items' priorities to its TD errors, and publishes
its Q-network's weights to the actors through a second table.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/dqn/dqn.py \\
        --actors 4

The Q-network is torch's (qnet.py: torch.nn.Linear layers, Adam from
torch.optim), trained on batches read as tensors over chime's ring
(torch.from_dlpack, no copy); the environment (cartpole.py) is written
out in numpy, so nothing but numpy, torch and chime is needed (Debian:
python3-numpy, python3-torch). The learner starts chimed with
chime.ensure_server (or uses --server ADDR, whose config must have the
two tables of --print-config), then the actors (actor.py;
multiprocessing, spawn). It is Double DQN with 3-step returns and
prioritized replay (Schaul et al. 2016): priorities |TD error| + 1e-3,
importance weights (N P(i))^-beta from each sample's probability and the
table's size as the sampler saw them, beta annealed to 1.

Prints a progress line every --log-every seconds and one JSON line at the
end (episodes, returns, env steps, the step and time the 100-episode mean
reached --target, the learner's time in chime calls); --curve writes a PNG
learning curve when matplotlib is importable.
"""
import argparse
import json
import multiprocessing
import queue
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

import actor
import chime
import qnet
from cartpole import ACTIONS, OBS, SOLVED

# A uniformly random policy's mean CartPole return (about 22 steps).
RANDOM_RETURN = 22.0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = ap.add_argument
    a("--actors", type=int, default=4, help="actor processes")
    a("--envs", type=int, default=1,
      help="CartPole environments per actor, stepped together")
    a("--env-steps", type=int, default=400000,
      help="env steps in all (split among the actors); 0: no bound")
    a("--target", type=float, default=SOLVED,
      help="stop once the mean return of the last 100 episodes reaches "
      "this (CartPole-v1's 475); 0: run the whole --env-steps")
    a("--max-seconds", type=float, default=0,
      help="stop after this long; 0: no bound")
    a("--seed", type=int, default=0,
      help="seeds torch (the initial network) and numpy (environments, "
      "exploration)")
    a("--threads", type=int, default=1,
      help="torch threads in each process (the learner and every actor)")
    # the network and its training
    a("--hidden", type=int, nargs="+", default=[64, 64])
    a("--lr", type=float, default=5e-4)
    a("--gamma", type=float, default=0.99)
    a("--n-step", type=int, default=3,
      help="steps of reward in a transition before it bootstraps")
    a("--batch-size", type=int, default=128)
    a("--target-every", type=int, default=500,
      help="updates between copies of the network into the target network")
    a("--max-grad-norm", type=float, default=10.0)
    a("--beta-start", type=float, default=0.4)
    a("--beta-updates", type=int, default=20000,
      help="updates over which the importance-weight exponent reaches 1")
    # exploration
    a("--eps-start", type=float, default=1.0)
    a("--eps-end", type=float, default=0.01)
    a("--eps-steps", type=int, default=10000,
      help="env steps (all actors) over which epsilon decays")
    # replay
    a("--capacity", type=int, default=500000,
      help="replay capacity: with 100,000 (200 full episodes) the falls "
      "left the table once the agent balanced, and runs collapsed")
    a("--min-size", type=int, default=1000)
    a("--samples-per-insert", type=float, default=32.0,
      help="the rate limiter's ratio of sampled items to inserted ones "
      "(32 with batches of 128: one update per four env steps)")
    a("--error-buffer", type=float, default=0,
      help="the rate limiter's window; 0: samples_per_insert x min_size "
      "/ 10, as Acme sizes it")
    a("--priority-exponent", type=float, default=0.6)
    a("--slots", type=int, default=32,
      help="the learner's ring slots: the server samples up to slots - 1 "
      "batches ahead, which covers the moments it is not scheduled on a "
      "busy machine (with 8 the learner waited in next about 6x as long)")
    a("--mode", default="shm", choices=("auto", "shm", "stream"),
      help="the learner's stream mode (shm: read the batches in place)")
    # chime plumbing
    a("--publish-every", type=int, default=20,
      help="updates between publications of the weights")
    a("--weights-every", type=int, default=100,
      help="env steps between an actor's reads of the newest weights")
    a("--insert-chunk", type=int, default=32,
      help="transitions per Writer.extend in an actor")
    a("--sync-priorities", action="store_true",
      help="call mutate_priorities in the learner's loop, not in a thread "
      "of its own (to measure what that costs)")
    a("--server", help="address of a running chimed with the tables of "
      "--print-config; else chime.ensure_server(--name)")
    a("--name", default="chime-dqn", help="ensure_server's name")
    a("--run-dir", help="ensure_server's run_dir")
    a("--open-timeout", type=float, default=30.0)
    a("--print-config", action="store_true",
      help="print chimed's config for these options and exit")
    # output
    a("--log-every", type=float, default=5.0, help="seconds between "
      "progress lines (stderr)")
    a("--curve", help="write the learning curve here (PNG; needs "
      "matplotlib, else a note)")
    a("--returns", help="write every episode (actor, return, length, "
      "env steps, seconds) here as CSV")
    args = ap.parse_args(argv)
    if not args.error_buffer:
        args.error_buffer = max(args.samples_per_insert * args.min_size / 10,
                                args.samples_per_insert, args.batch_size)
    return args


def sizes(args):
    return [OBS, *args.hidden, ACTIONS]


def server_config(args):
    return {"tables": [
        {"name": actor.TRANSITIONS, "spec": actor.TRANSITION_SPEC,
         "capacity": args.capacity, "sampler": "prioritized",
         "priority_exponent": args.priority_exponent, "remover": "fifo",
         "min_size": args.min_size,
         "samples_per_insert": args.samples_per_insert,
         "error_buffer": args.error_buffer},
        # One item: the newest weights. A new publication evicts the old
        # (fifo remover), the lifo sampler hands the one there is to every
        # actor's stream as often as asked (max_times_sampled 0).
        {"name": actor.WEIGHTS,
         "spec": qnet.spec(qnet.network(sizes(args))) +
         ", version:i64[], max_priority:f64[]",
         "capacity": 1, "sampler": "lifo", "min_size": 1}]}


class Timer:
    """Seconds spent in one kind of chime call, and how many calls."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self.t0
        self.calls += 1


class PriorityUpdater:
    """Sends the learner's new priorities with MutatePriorities from a
    thread of its own, as Acme's learners do: a unary call costs a few
    hundred microseconds (a round trip to chimed), as much as an update,
    and nothing in the learner's next step needs its answer. Updates queued
    while a call is out go together in the next call. The call releases the
    GIL, so the learner computes meanwhile."""

    def __init__(self, client, table, sync=False):
        self.client, self.table, self.sync = client, table, sync
        self.pending = []
        self.cond = threading.Condition()
        self.closed = False
        self.error = None
        self.call = Timer()  # time in mutate_priorities, in whichever thread
        self.entries = 0
        self.thread = None
        if not sync:
            self.thread = threading.Thread(target=self._run, daemon=True,
                                           name="priorities")
            self.thread.start()

    def put(self, keys, priorities):
        if self.sync:
            self._send([(keys, priorities)])
            return
        with self.cond:
            if self.error:
                raise self.error
            self.pending.append((keys, priorities))
            self.cond.notify()

    def _send(self, items):
        keys = np.concatenate([k for k, _ in items])
        prios = np.concatenate([p for _, p in items])
        with self.call:
            self.client.mutate_priorities(self.table, keys=keys,
                                          priorities=prios)
        self.entries += len(keys)

    def _run(self):
        while True:
            with self.cond:
                while not self.pending and not self.closed:
                    self.cond.wait()
                items, self.pending = self.pending, []
                if not items and self.closed:
                    return
            try:
                self._send(items)
            except Exception as e:  # the learner's next put raises it
                with self.cond:
                    self.error = e
                return

    def close(self):
        if self.thread:
            with self.cond:
                self.closed = True
                self.cond.notify()
            self.thread.join()
        if self.error:
            raise self.error


class Learner:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args.seed)
        self.net = qnet.network(sizes(args))
        self.target = qnet.network(sizes(args)).requires_grad_(False)
        self.target.load_state_dict(self.net.state_dict())
        self.opt = torch.optim.Adam(self.net.parameters(), lr=args.lr)
        self.updates = 0
        self.max_priority = 1.0
        self.td_sum = self.q_sum = 0.0  # for the progress line

    def diagnostics(self, updates):
        """Mean |TD error| and mean max Q over the last `updates` updates;
        resets the sums."""
        n = max(1, updates)
        r = (self.td_sum / n, self.q_sum / n)
        self.td_sum = self.q_sum = 0.0
        return r

    def beta(self):
        a = self.args
        frac = min(1.0, self.updates / a.beta_updates)
        return a.beta_start + frac * (1.0 - a.beta_start)

    def update(self, b):
        """One Double DQN step on batch b, its leaves read as tensors over
        the ring (torch.from_dlpack: no copy); returns the sampled keys and
        their new priorities. The tensors are locals here, gone on return
        (backward() frees what autograd saved of them), so the caller's
        release is at once."""
        a = self.args
        obs = torch.from_dlpack(b["obs"])
        nxt = torch.from_dlpack(b["next_obs"])
        action = torch.from_dlpack(b["action"]).unsqueeze(1)
        info = b.info  # a structured array: no DLPack form, numpy here
        q_all = self.net(obs)
        q = q_all.gather(1, action).squeeze(1)
        with torch.no_grad():
            best = self.net(nxt).argmax(dim=1, keepdim=True)
            q_next = self.target(nxt).gather(1, best).squeeze(1)
            # n-step: reward and discount as actor.NStep made them
            y = (torch.from_dlpack(b["reward"]) +
                 torch.from_dlpack(b["discount"]) * q_next)
            td = q - y
        # Importance weights from the probability each sample was drawn
        # with and the table's size at that draw, scaled so the largest
        # is 1 (Schaul et al.).
        w = (info["table_size"] * info["probability"]) ** -self.beta()
        w = torch.from_numpy((w / w.max()).astype(np.float32))
        loss = (w * F.huber_loss(q, y, reduction="none")).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(),
                                       a.max_grad_norm)
        self.opt.step()
        self.updates += 1
        if self.updates % a.target_every == 0:
            self.target.load_state_dict(self.net.state_dict())
        td = td.abs().numpy()
        self.td_sum += float(td.mean())
        self.q_sum += float(q_all.detach().max(dim=1).values.mean())
        prios = td.astype(np.float64) + 1e-3
        self.max_priority = max(self.max_priority, float(prios.max()))
        return info["key"].copy(), prios

    def weights(self):
        return {**qnet.leaves(self.net), "version": self.updates,
                "max_priority": self.max_priority}


class Episodes:
    """What the actors report: every finished episode, in arrival order."""

    def __init__(self, n_actors):
        self.returns = []
        self.lengths = []
        # env steps when it finished: the sum of each actor's count as of
        # its latest report
        self.steps_at = []
        self.seconds_at = []
        self.actor_of = []
        self.actor_steps = [0] * n_actors
        self.done = {}

    def steps(self):
        return sum(self.actor_steps)

    def mean(self, last=100):
        r = self.returns[-last:]
        return float(np.mean(r)) if r else 0.0

    def drain(self, results, t0):
        while True:
            try:
                m = results.get_nowait()
            except queue.Empty:
                return
            if m[0] == "episode":
                _, i, ret, length, steps = m
                self.actor_steps[i] = steps
                self.returns.append(ret)
                self.lengths.append(length)
                self.steps_at.append(self.steps())
                self.seconds_at.append(time.monotonic() - t0)
                self.actor_of.append(i)
            else:
                _, i, steps, seconds = m
                self.actor_steps[i] = steps
                self.done[i] = seconds


def table_stats(client, table):
    for t in client.stats()["tables"]:
        if t["name"] == table:
            return t
    raise chime.NotFoundError(f"no table {table!r} in stats")


def write_curve(path, ep, args, solved):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"dqn: no matplotlib, so no {path} (Debian: apt-get install "
              f"python3-matplotlib)", file=sys.stderr)
        return
    r = np.asarray(ep.returns)
    steps = np.asarray(ep.steps_at)
    mean = np.array([r[max(0, i - 99):i + 1].mean() for i in range(len(r))])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, r, ".", ms=2, alpha=0.3, label="episode return")
    ax.plot(steps, mean, label="mean of the last 100")
    ax.axhline(SOLVED, ls="--", c="gray", lw=1, label="475 (solved)")
    if solved:
        ax.axvline(solved["env_steps"], ls=":", c="gray", lw=1)
    ax.set_xlabel("env steps (all actors)")
    ax.set_ylabel("return")
    ax.set_title(f"DQN on CartPole-v1 through chime, {args.actors} "
                 f"actor{'s' if args.actors > 1 else ''}")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_returns(path, ep):
    with open(path, "w") as f:
        f.write("actor,return,length,env_steps,seconds\n")
        for row in zip(ep.actor_of, ep.returns, ep.lengths, ep.steps_at,
                       ep.seconds_at):
            f.write("%d,%g,%d,%d,%.3f\n" % row)


def connect(args):
    if args.server:
        return chime.Client(args.server), args.server
    c = chime.ensure_server(args.name, config=server_config(args),
                            run_dir=args.run_dir)
    return c, chime.server_state(args.name, run_dir=args.run_dir)["address"]


def start_actors(args, address, stop, results):
    ctx = multiprocessing.get_context("spawn")
    opts = {k: getattr(args, k) for k in (
        "actors", "envs", "env_steps", "seed", "threads", "eps_start",
        "eps_end",
        "gamma", "n_step",
        "eps_steps", "weights_every", "insert_chunk", "open_timeout")}
    procs = [ctx.Process(target=actor.run, name=f"actor-{i}",
                         args=(i, address, opts, stop, results))
             for i in range(args.actors)]
    for p in procs:
        p.start()
    return procs


class Clock:
    """The learner's time in chime calls, by kind, against the run's."""

    KINDS = ("next", "priorities", "publish", "stats")

    def __init__(self):
        self.t0 = time.monotonic()
        for k in self.KINDS:
            setattr(self, k, Timer())
        # (seconds since t0, of them in chime calls, of them in next) at
        # the first batch and after the last update: before the first, the
        # learner waits for the actors to start and fill min_size; after
        # the last, for actors through their budgets to finish.
        self.first = self.last = None

    def elapsed(self):
        return time.monotonic() - self.t0

    def in_chime(self):
        return sum(getattr(self, k).seconds for k in self.KINDS)

    def mark(self):
        return (self.elapsed(), self.in_chime(), self.next.seconds)

    def report(self, wall):
        r = {"fraction": round(self.in_chime() / wall, 4)}
        if self.first and self.last and self.last[0] > self.first[0]:
            r["fraction_steady"] = round(
                (self.last[1] - self.first[1]) /
                (self.last[0] - self.first[0]), 4)
            r["next_steady_s"] = round(self.last[2] - self.first[2], 3)
            r["first_batch_s"] = round(self.first[0], 3)
            r["last_update_s"] = round(self.last[0], 3)
        for k in self.KINDS:
            r[f"{k}_s"] = round(getattr(self, k).seconds, 3)
        return r


def progress(clock, ep, learner, st, last, dt, chime_dt, updates):
    """One progress line; rates, the share of time in chime calls, the mean
    |TD error| and Q are over the last dt seconds (`updates` updates)."""
    td, q = learner.diagnostics(updates)
    return (f"[{clock.elapsed():7.1f}s] env steps {ep.steps():7d}  "
            f"episodes {len(ep.returns):5d}  return(100) {ep.mean():6.1f}  "
            f"updates {learner.updates:6d}  "
            f"samples/s {(st['samples'] - last['samples']) / dt:7.0f}  "
            f"inserts/s {(st['inserts'] - last['inserts']) / dt:6.0f}  "
            f"sampled/inserted {st['samples'] / max(1, st['inserts']):5.1f}  "
            f"in chime {100 * chime_dt / dt:4.1f}%  |td| {td:.3f}  "
            f"Q {q:.1f}")


def train(args, client, address, learner, ep, clock):
    """Runs actors and learner until the target, the step budget or the
    time is reached; returns (solved, wall seconds, learner's stream mode,
    table stats at start and end, the priority updater)."""
    ctx = multiprocessing.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    procs = []
    solved = None
    try:
        publisher = client.writer(actor.WEIGHTS)
        with clock.publish:
            publisher.append(learner.weights())
            publisher.flush()  # the actors' first read waits for nothing
        updater = PriorityUpdater(client, actor.TRANSITIONS,
                                  sync=args.sync_priorities)
        stream = client.stream(actor.TRANSITIONS, batch_size=args.batch_size,
                               mode=args.mode, slots=args.slots,
                               open_timeout=args.open_timeout)
        with clock.stats:
            first = last = table_stats(client, actor.TRANSITIONS)
        procs = start_actors(args, address, stop, results)
        last_log, last_chime = clock.elapsed(), clock.in_chime()
        last_updates = 0
        while True:
            try:
                with clock.next:
                    b = stream.next(timeout=0.2)
            except chime.TimeoutError:
                # No batch: the rate limiter waits for inserts, and the
                # actors may be through their budgets.
                ep.drain(results, clock.t0)
                if len(ep.done) == args.actors or not any(
                        p.is_alive() for p in procs):
                    break
                b = None
            if b is not None:
                if clock.first is None:
                    clock.first = clock.mark()
                keys, prios = learner.update(b)
                b.release()
                with clock.priorities:
                    updater.put(keys, prios)
                if learner.updates % args.publish_every == 0:
                    with clock.publish:
                        publisher.append(learner.weights())
                clock.last = clock.mark()
            now = clock.elapsed()
            if learner.updates % 16 == 0:
                ep.drain(results, clock.t0)
                if (args.target and len(ep.returns) >= 100
                        and ep.mean() >= args.target):
                    solved = {"env_steps": ep.steps_at[-1],
                              "seconds": round(ep.seconds_at[-1], 2),
                              "episodes": len(ep.returns),
                              "updates": learner.updates}
                    break
                if args.max_seconds and now > args.max_seconds:
                    break
            if now - last_log >= args.log_every:
                with clock.stats:
                    st = table_stats(client, actor.TRANSITIONS)
                print(progress(clock, ep, learner, st, last, now - last_log,
                               clock.in_chime() - last_chime,
                               learner.updates - last_updates),
                      file=sys.stderr, flush=True)
                last_log, last = now, st
                last_chime, last_updates = clock.in_chime(), learner.updates
        wall = clock.elapsed()
        mode = stream.mode
        # Let the actors finish: they may be waiting for the rate limiter,
        # which only this stream's samples move.
        stop.set()
        deadline = time.monotonic() + 30
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            try:
                stream.next(timeout=0.05).release()
            except chime.TimeoutError:
                pass
            ep.drain(results, clock.t0)
        for p in procs:
            p.join(timeout=5)
        ep.drain(results, clock.t0)
        last = table_stats(client, actor.TRANSITIONS)
        stream.close()
        updater.close()
        publisher.close()
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    return solved, wall, mode, first, last, updater


def main(argv=None):
    args = parse_args(argv)
    if args.print_config:
        print(json.dumps(server_config(args), indent=2))
        return 0
    torch.set_num_threads(args.threads)
    learner = Learner(args)
    ep = Episodes(args.actors)
    client, address = connect(args)
    with client:
        clock = Clock()
        solved, wall, mode, first, last, updater = train(
            args, client, address, learner, ep, clock)
    samples = last["samples"] - first["samples"]
    inserts = last["inserts"] - first["inserts"]
    out = {
        "actors": args.actors, "envs": args.envs, "mode": mode,
        "batch_size": args.batch_size,
        "env_steps": ep.steps(), "episodes": len(ep.returns),
        "updates": learner.updates, "wall_s": round(wall, 2),
        "mean_return_100": round(ep.mean(100), 1),
        "mean_return_last20": round(ep.mean(20), 1),
        "random_return": RANDOM_RETURN, "solved": solved,
        "samples": samples, "inserts": inserts,
        "samples_per_s": round(samples / wall),
        "inserts_per_s": round(inserts / wall),
        "sampled_per_inserted": round(last["samples"] /
                                      max(1, last["inserts"]), 2),
        # The learner's loop: time in chime calls (next, handing priorities
        # on, publishing weights, stats for the progress line) over the
        # run's wall time, and over the steady part (first batch to last
        # update).
        "learner_in_chime": {**clock.report(wall),
                             "sync_priorities": args.sync_priorities},
        "mutate_priorities": {"calls": updater.call.calls,
                              "entries": updater.entries,
                              "seconds": round(updater.call.seconds, 3)},
        "rate_sample_wait_s": round(last["rate_sample_wait_ns"] * 1e-9, 2),
        "rate_insert_wait_s": round(last["rate_insert_wait_ns"] * 1e-9, 2),
    }
    if args.returns:
        write_returns(args.returns, ep)
    if args.curve:
        write_curve(args.curve, ep, args, solved)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
