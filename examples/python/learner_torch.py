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
import json
import sys
import time

from common import TABLE, connect
from qlearner import QLearner, actors, parser


def main():
    args = parser(__doc__).parse_args()
    learner = QLearner(args.gamma)
    c = connect(args)  # the server first, so the actors find it
    losses = []
    try:
        with actors(args), c.stream(TABLE, batch_size=args.batch_size,
                                    mode=args.mode, timeout=30.0) as s:
            t0 = time.monotonic()
            for step, b in enumerate(s):
                # Zero copy: each tensor shares the ring's memory and holds
                # the batch's slot until it is freed (when update returns).
                losses.append(learner.update(b).item())
                b.release()  # or leave it to the next iteration
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
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
