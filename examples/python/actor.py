#!/usr/bin/env python3
"""An actor: steps a toy environment and inserts its transitions into
chime with Writer.extend (one call per chunk of steps, one copy).

    PYTHONPATH=build/python python3 examples/python/actor.py --steps 100000

The environment: a random walk of 8-float observations; an action pushes
the walk along one axis; the reward is how close the action's axis was to
the largest coordinate (so a learner has something to learn). Prints one
JSON line at the end: {"inserted": N, "acked": N}.
"""
import argparse
import json
import os

import numpy as np

from common import ACTIONS, OBS, TABLE, add_server_args, connect


def rollout(rng, obs, n):
    """n transitions from obs onwards; returns (samples, last obs)."""
    o = np.empty((n + 1, OBS), np.float32)
    o[0] = obs
    action = rng.integers(0, ACTIONS, size=n)
    noise = rng.normal(0, 0.1, size=(n, OBS)).astype(np.float32)
    reward = np.empty(n, np.float32)
    for t in range(n):
        reward[t] = 1.0 if np.argmax(o[t, :ACTIONS]) == action[t] else 0.0
        o[t + 1] = 0.9 * o[t] + noise[t]
        o[t + 1, action[t]] += 0.2
    done = (rng.random(n) < 0.01).astype(np.float32)
    samples = {"obs": o[:-1], "action": action, "reward": reward,
               "next_obs": o[1:], "done": done}
    return samples, o[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_args(ap)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--chunk", type=int, default=1000,
                    help="steps per extend call")
    ap.add_argument("--seed", type=int, default=os.getpid())
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    obs = np.zeros(OBS, np.float32)
    inserted = 0
    # auto: an actor started first starts the server; a learner that comes
    # later finds it (and if this actor exits first, the server goes too:
    # start the learner first, or pass --server).
    with connect(args) as c, c.writer(TABLE) as w:
        while inserted < args.steps:
            n = min(args.chunk, args.steps - inserted)
            samples, obs = rollout(rng, obs, n)
            w.extend(samples)
            inserted += n
        w.flush()
        print(json.dumps({"inserted": inserted, "acked": w.acked}),
              flush=True)


if __name__ == "__main__":
    main()
