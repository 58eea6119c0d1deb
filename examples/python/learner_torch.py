#!/usr/bin/env python3
"""A learner: a small torch Q-network trained on batches from chime, read
in place (torch.from_dlpack(b["obs"]): no copy between the ring and the
tensors).

    PYTHONPATH=build/python python3 examples/python/learner_torch.py \\
        --actors 2 --updates 500

It calls chime.ensure_server (so it is usually the owner: the server lives
as long as this process), starts --actors processes of actor.py that find
the same server by name, and runs --updates one-step Q-learning updates on
batches of --batch-size. Prints a line every --log-every updates and one
JSON line at the end: {"updates", "mode", "loss_first", "loss_last",
"samples_per_s", "chime": {flat stats}}.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import torch

import chime
from common import ACTIONS, OBS, TABLE, add_server_args, connect

HERE = pathlib.Path(__file__).resolve().parent


def start_actors(args):
    argv = [sys.executable, str(HERE / "actor.py"), "--steps",
            str(args.actor_steps)]
    if args.server:
        argv += ["--server", args.server]
    else:
        argv += ["--name", args.name]
        if args.run_dir:
            argv += ["--run-dir", args.run_dir]
    return [subprocess.Popen(argv + ["--seed", str(i)],
                             stdout=subprocess.DEVNULL)
            for i in range(args.actors)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_args(ap)
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--actor-steps", type=int, default=1000000)
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--mode", default="auto", choices=("auto", "shm",
                                                       "stream"))
    ap.add_argument("--gamma", type=float, default=0.9)
    ap.add_argument("--log-every", type=int, default=100)
    args = ap.parse_args()
    torch.manual_seed(0)
    q = torch.nn.Sequential(torch.nn.Linear(OBS, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, ACTIONS))
    target = torch.nn.Sequential(torch.nn.Linear(OBS, 64), torch.nn.ReLU(),
                                 torch.nn.Linear(64, ACTIONS))
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)

    c = connect(args)  # the server first, so the actors find it
    actors = start_actors(args)
    losses = []
    try:
        with c.stream(TABLE, batch_size=args.batch_size, mode=args.mode,
                      timeout=30.0) as s:
            t0 = time.monotonic()
            for step, b in enumerate(s):
                # Zero copy: each tensor shares the ring's memory and holds
                # the batch's slot until it is freed (end of this iteration).
                obs = torch.from_dlpack(b["obs"])
                nxt = torch.from_dlpack(b["next_obs"])
                act = torch.from_dlpack(b["action"])
                rew = torch.from_dlpack(b["reward"])
                done = torch.from_dlpack(b["done"])
                with torch.no_grad():
                    y = rew + args.gamma * (1 - done) * \
                        target(nxt).max(dim=1).values
                pred = q(obs).gather(1, act.unsqueeze(1)).squeeze(1)
                loss = torch.nn.functional.mse_loss(pred, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                del obs, nxt, act, rew, done, y, pred
                b.release()  # or leave it to the next iteration
                if (step + 1) % 100 == 0:
                    target.load_state_dict(q.state_dict())
                if (step + 1) % args.log_every == 0:
                    print(f"update {step + 1}: loss {losses[-1]:.4f} "
                          f"({s.mode})", file=sys.stderr, flush=True)
                if step + 1 == args.updates:
                    break
            dt = time.monotonic() - t0
            mode = s.mode
        print(json.dumps({
            "updates": len(losses), "mode": mode,
            "loss_first": losses[0], "loss_last": losses[-1],
            "samples_per_s": round(len(losses) * args.batch_size / dt),
            "chime": c.stats(flat=True)}), flush=True)
    finally:
        for p in actors:
            p.terminate()
        for p in actors:
            p.wait()
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
